/* Capture: begin/end, the callback form, capture status and the per-thread mode exchange. The
 * records of captures under way and their fork/join bookkeeping are in registry.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

static void free_capture(struct cgc__capture* c) {
  if (c == NULL) return;
  if (c->done != NULL) CGC_DRV(cuEventDestroy)(c->done);
  free(c->uses);
  free(c->bodies);
  for (size_t i = 0; i < c->n_sides; i++) free(c->sides[i].absorbed);
  free(c->sides);
  free(c);
}

/* ---- options ---- */

#define HAS_FIELD(opts, field) \
  ((opts)->struct_size >= offsetof(cgc_capture_options_t, field) + sizeof((opts)->field))

static cgc_status_t read_options(const cgc_capture_options_t* in, cgc_capture_options_t* out, const char* func) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->mode = CGC_CAPTURE_MODE_GLOBAL;
  if (in == NULL) return CGC_SUCCESS;
  if (in->struct_size < sizeof(size_t))
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "options->struct_size is %zu: set it to sizeof(cgc_capture_options_t)", in->struct_size);
  if (HAS_FIELD(in, mode)) out->mode = in->mode;
  if (HAS_FIELD(in, pool)) out->pool = in->pool;
  if (HAS_FIELD(in, flags)) out->flags = in->flags;
  if (HAS_FIELD(in, update)) out->update = in->update;
  if ((unsigned)out->mode > CGC_CAPTURE_MODE_RELAXED)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "options->mode is %d: use CGC_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED", (int)out->mode);
  unsigned known = CGC_CAPTURE_UPLOAD | CGC_CAPTURE_AUTO_FREE_ON_LAUNCH;
  if (out->flags & ~known)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "options->flags has unknown bits 0x%x", out->flags & ~known);
  return CGC_SUCCESS;
}

/* A capture that updates `g` (SEMANTICS 27): a live graph of the stream's device that no other
 * capture is updating, recorded into its own pool. Marks it `updating` (the caller clears it on
 * every path that does not reach the update). */
static cgc_status_t claim_update(cgc_stream_t stream, cgc_capture_options_t* opts, const char* func) {
  cgc_graph_t g = opts->update;
  CGC_TRY(cgc__check_handle(g, CGC_MAGIC_GRAPH, func, "options->update"));
  if (g->dev != stream->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "options->update (graph %p) is on device %d, the stream on device %d", (void*)g, g->dev->ordinal,
                     stream->dev->ordinal);
  bool expected = false;
  if (!atomic_compare_exchange_strong(&g->updating, &expected, true))
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "graph %p is already being updated by another capture, or another thread resets or destroys it: "
                     "end that first",
                     (void*)g);
  /* Claimed: reset and destroy refuse while the claim is held, so what is read now stays. */
  if (g->exec == NULL) {
    atomic_store(&g->updating, false);
    return cgc__fail(CGC_ERROR_INVALID_STATE, func, "options->update (graph %p) was reset: capture a new graph instead",
                     (void*)g);
  }
  if (opts->pool != NULL && opts->pool != g->pool) {
    atomic_store(&g->updating, false);
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "options->pool is not the pool of options->update (graph %p): an update records into the graph's "
                     "own pool (leave options->pool NULL)",
                     (void*)g);
  }
  if (g->family != NULL) {
    atomic_store(&g->updating, false);
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "options->update (graph %p) shares its family's executable (cgc_graph_share_executable): an "
                     "update would change the other members' too; capture a new graph and let it join",
                     (void*)g);
  }
  opts->pool = g->pool;
  return CGC_SUCCESS;
}

/* ---- begin / end ---- */

cgc_status_t cgc_capture_begin(cgc_stream_t stream, const cgc_capture_options_t* options) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc_capture_options_t opts;
  CGC_TRY(read_options(options, &opts, __func__));
  if (stream->kind == CGC__STREAM_LEGACY)
    return cgc__fail(CGC_ERROR_CAPTURE_LEGACY_STREAM, __func__,
                     "CUDA graphs cannot be captured on the legacy default stream: capture on a stream "
                     "from cgc_stream_create (replaying on the default stream is fine)");
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, true, &ref, __func__));
  if (ref.capturing)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "stream %p is already capturing (capture id %llu): end that capture first", (void*)stream->cu,
                     (unsigned long long)ref.capture_id);

  if (opts.update != NULL) CGC_TRY(claim_update(stream, &opts, __func__));
  struct cgc__capture* c = calloc(1, sizeof *c);
  if (c == NULL) {
    if (opts.update != NULL) atomic_store(&opts.update->updating, false);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  c->dev = stream->dev;
  c->update = opts.update;
  c->origin = ref.cu;
  c->origin_key = ref.key;
  c->origin_per_thread = stream->kind == CGC__STREAM_PER_THREAD;
  c->mode = opts.mode;
  c->thread = pthread_self();
  c->flags = opts.flags;
  bool registered = false, begun = false;
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st;
  /* The registry record, then routing to the pool, exist before the driver begins, so that no
   * allocation of the capture can slip into the device cache (SEMANTICS 3); a second begin on
   * the stream is refused by the registry before it routes anything. Once the registry counts
   * the capture no free starts recording fences; those already recording finish before the
   * stream starts capturing (cgc__alloc_wait_fencing), so a fence is never captured. */
  CGC_TRY_GOTO(st, cgc__registry_add(c, __func__), fail);
  registered = true;
  cgc__alloc_wait_fencing(stream->dev);
  CGC_TRY_GOTO(st, cgc__pool_begin_capture(stream->dev, opts.pool, ref.cu, ref.key, &c->pool, __func__), fail);
  CGC_TRY_GOTO(st, cgc__stream_enter(stream, &scope, __func__), fail);
  CGC_TRY_GOTO(st, CGC_CU(__func__, cuStreamBeginCapture(ref.cu, (CUstreamCaptureMode)opts.mode)), fail);
  begun = true;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CGC_TRY_GOTO(st, CGC_CU(__func__, cuStreamGetCaptureInfo(ref.cu, &status, &id, NULL, NULL, NULL)), fail);
  cgc__ctx_leave(&scope);
  cgc__pool_capture_started(c->pool, id);
  cgc__registry_activate(c, id);
  cgc__log("capture %llu begun on stream %p (mode %d)", (unsigned long long)id, (void*)ref.cu, (int)opts.mode);
  return CGC_SUCCESS;

fail:
  if (begun) { /* never leave the stream capturing */
    CUgraph discarded = NULL;
    CGC_DRV(cuStreamEndCapture)(ref.cu, &discarded);
    if (discarded != NULL) CGC_DRV(cuGraphDestroy)(discarded);
  }
  cgc__ctx_leave(&scope);
  if (registered) cgc__registry_remove(c);
  if (c->pool != NULL) cgc__pool_end_capture(c->pool, false, NULL, 0);
  if (c->update != NULL) atomic_store(&c->update->updating, false);
  free_capture(c);
  return st;
}

/* Appends the side streams that were forked into `c` and not joined back to the message. */
static void name_unjoined(const struct cgc__capture* c) {
  size_t named = 0;
  for (size_t i = 0; i < c->n_sides; i++) {
    const struct cgc__side* s = &c->sides[i];
    if (s->joined_seq > s->fork_seq) continue;
    cgc__append("%s%p", named == 0 ? "; forked stream(s) not joined back: " : ", ", (void*)s->cu);
    named++;
  }
  if (named > 0)
    cgc__append(" (record an event on each and make stream %p wait on it before cgc_capture_end)", (void*)c->origin);
  else
    cgc__append("; a stream joined this capture without cgc_stream_wait_event (raw cuStreamWaitEvent?) and was "
                "not joined back to stream %p",
                (void*)c->origin);
}

/* After a failed end the driver should have taken every stream out of the capture. The origin
 * is ended once more if it is not (nothing may be left capturing that cgc no longer knows);
 * a side stream still capturing is named. Context current. */
static void check_left_capturing(const struct cgc__capture* c) {
  CUstreamCaptureStatus origin_status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (CGC_DRV(cuStreamGetCaptureInfo)(c->origin, &origin_status, NULL, NULL, NULL, NULL) == CUDA_SUCCESS &&
      origin_status != CU_STREAM_CAPTURE_STATUS_NONE) {
    CUgraph discarded = NULL;
    CUresult r = CGC_DRV(cuStreamEndCapture)(c->origin, &discarded);
    if (discarded != NULL) CGC_DRV(cuGraphDestroy)(discarded);
    cgc__append("; the origin stream %p was still capturing: %s", (void*)c->origin,
                r == CUDA_SUCCESS ? "ended and discarded" : "ending it failed too");
  }
  for (size_t i = 0; i < c->n_sides; i++) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (CGC_DRV(cuStreamGetCaptureInfo)(c->sides[i].cu, &status, NULL, NULL, NULL, NULL) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE)
      cgc__append("; side stream %p is still capturing", (void*)c->sides[i].cu);
  }
}

/* The graph's last node records `c->done` (graph.c says why). The capture's streams are all
 * joined into the origin when the capture can end, so a record on the origin follows all of
 * its work. Recorded once, even if the end is tried again. */
static bool add_done_node(struct cgc__capture* c) {
  if (c->done != NULL) return true;
  CUevent done = NULL;
  if (CGC_DRV(cuEventCreate)(&done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
  if (CGC_DRV(cuEventRecordWithFlags)(done, c->origin, CU_EVENT_RECORD_EXTERNAL) != CUDA_SUCCESS) {
    CGC_DRV(cuEventDestroy)(done); /* an invalidated capture: the end reports it */
    return false;
  }
  c->done = done;
  return true;
}

/* Ends the capture begun on `stream`. With `discard` (the body of cgc_capture failed) nothing is
 * kept: no graph is made and a graph the capture was to update stays as it was. */
static cgc_status_t end_capture(cgc_stream_t stream, bool discard, cgc_graph_t* out, const char* func) {
  *out = NULL;
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  /* The capture is claimed by the stream's key without asking the driver first: another thread
   * may be ending this very capture, and the driver can crash in cuStreamGetCaptureInfo on a
   * stream whose capture another thread ends at that moment (seen on driver 580 with two threads
   * ending one Relaxed capture). The driver is asked only when cgc has no capture on the stream,
   * so that the message can say whether a capture cgc did not begin is under way there. */
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, false, &ref, func));
  struct cgc__capture* c = NULL;
  cgc_status_t st = cgc__registry_claim_end(&ref, &c, func);
  if (st != CGC_SUCCESS && !cgc__registry_has_stream(ref.key)) {
    CGC_TRY(cgc__stream_resolve(stream, true, &ref, func));
    st = cgc__registry_claim_end(&ref, &c, func);
  }
  if (st != CGC_SUCCESS) return st;

  cgc__ctx_scope_t scope;
  CGC_TRY_GOTO(st, cgc__ctx_enter(c->dev, &scope, func), fail);
  bool has_done_node = add_done_node(c);
  CUgraph graph = NULL;
  CUresult r = CGC_DRV(cuStreamEndCapture)(c->origin, &graph);
  cgc__ctx_leave(&scope);
  if (r == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) {
    /* registry.c refuses this case first; the driver has the last word. */
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: a Global or ThreadLocal "
                   "capture must be ended by the thread that began it; the capture is still under way");
    goto fail;
  }
  cgc__registry_remove(c);

  st = cgc__cu_fail(r, func, "cuStreamEndCapture");
  if (st == CGC_SUCCESS && graph == NULL)
    st = cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, func, "the driver returned no graph");
  if (st == CGC_SUCCESS && !has_done_node)
    st = cgc__fail(CGC_ERROR_CUDA, func, "cuEventRecordWithFlags (the graph's completion record) failed");
  if (st == CGC_SUCCESS && c->broken)
    st = cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, func,
                   "a conditional node of this capture could not be completed (cgc_capture_conditional_begin or _end "
                   "reported why): its graph is discarded");
  bool failed = st != CGC_SUCCESS;
  if (!failed && discard) st = CGC_ERROR_INVALID_STATE; /* thrown away below, like a failed capture */
  /* Routing to the pool stops only now, after the driver's end (SEMANTICS 3). */
  uint64_t* members = malloc((c->n_sides + 1) * sizeof *members);
  size_t n_members = 0;
  if (members != NULL) {
    members[n_members++] = c->origin_key;
    for (size_t i = 0; i < c->n_sides; i++) members[n_members++] = c->sides[i].key;
  }
  size_t nodes = 0;
  if (st == CGC_SUCCESS) st = CGC_CU(func, cuGraphGetNodes(graph, NULL, &nodes));
  cgc__pool_end_capture(c->pool, st == CGC_SUCCESS, members, n_members);
  free(members);
  if (st != CGC_SUCCESS) {
    if (failed && r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED) name_unjoined(c);
    cgc__ctx_scope_t again;
    if (cgc__ctx_enter(c->dev, &again, func) == CGC_SUCCESS) {
      check_left_capturing(c);
      cgc__ctx_leave(&again);
    }
    /* Said after the failure's message, not as a warning: a warning would replace the message and
     * reset cgc_last_status() of a call that fails (both callers fail here). */
    if (graph != NULL && c->graph_unsafe)
      cgc__append(
          "; the discarded graph of capture %llu is left allocated: a conditional body's capture was "
          "invalidated, and destroying such a graph crashes driver 580",
          (unsigned long long)c->id);
    else if (graph != NULL)
      CGC_DRV(cuGraphDestroy)(graph);
    cgc__release_uses(c->uses, c->n_uses);
    if (c->update != NULL) atomic_store(&c->update->updating, false);
    free_capture(c);
    /* Discarded as asked is a success; a capture kept but whose node count failed is not. */
    return (failed || !discard) ? st : CGC_SUCCESS;
  }
  nodes -= 1; /* the completion record is cgc's, not the user's */
  CUevent done = c->done;
  c->done = NULL;
  if (c->update != NULL) {
    /* The graph given in the options takes the new one (SEMANTICS 27); *out is that graph. */
    st = cgc__graph_update(c->update, graph, done, nodes, c->pool, c->uses, c->n_uses, c->flags, c->origin, func);
    atomic_store(&c->update->updating, false);
    if (st == CGC_SUCCESS) *out = c->update;
  } else {
    st = cgc__graph_create(c->dev, graph, done, nodes, c->pool, c->uses, c->n_uses, c->flags, c->origin, func, out);
  }
  if (st == CGC_SUCCESS && nodes == 0 && c->update == NULL)
    cgc__warn(func, "the graph is empty: captured on the wrong stream or device?");
  cgc__log("capture %llu ended: %zu nodes, status %d", (unsigned long long)c->id, nodes, (int)st);
  free_capture(c);
  return st;

fail: /* still capturing: the driver capture goes on, and its record stays for a later end */
  cgc__registry_unclaim(c);
  return st;
}

cgc_status_t cgc_capture_end(cgc_stream_t stream, cgc_graph_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  return end_capture(stream, false, out, __func__);
}

cgc_status_t cgc_capture(cgc_stream_t stream, const cgc_capture_options_t* options, cgc_capture_fn body,
                         void* user, cgc_graph_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_ARG(body != NULL, "body is NULL");
  CGC_TRY(cgc_capture_begin(stream, options));
  cgc_status_t body_st = body(stream, user);
  if (body_st == CGC_SUCCESS) return cgc_capture_end(stream, out);

  char body_message[512];
  snprintf(body_message, sizeof body_message, "%s", cgc_last_error());
  /* Conditional bodies the failing body left open are ended first, the last opened first: the
   * capture cannot end with one open. */
  cgc__stream_ref_t ref;
  if (cgc__stream_resolve(stream, false, &ref, __func__) == CGC_SUCCESS) {
    for (cgc_stream_t lent; (lent = cgc__registry_last_body(ref.key)) != NULL;)
      if (cgc_capture_conditional_end(lent) != CGC_SUCCESS && cgc__registry_last_body(ref.key) == lent) break;
  }
  cgc_graph_t none = NULL;
  cgc_status_t ended = end_capture(stream, true, &none, __func__); /* a graph it was to update stays as it was */
  /* An invalidated or unjoined capture was still ended; anything else may have left it open. */
  if (ended != CGC_SUCCESS && ended != CGC_ERROR_CAPTURE_INVALIDATED && ended != CGC_ERROR_CAPTURE_UNJOINED)
    return cgc__fail(body_st, __func__, "the body returned %s%s%s; ending the capture failed too (%s)",
                     cgc_status_string(body_st), body_message[0] ? " -- " : "", body_message, cgc_status_string(ended));
  return cgc__fail(body_st, __func__, "the body returned %s%s%s; the capture was ended and discarded",
                   cgc_status_string(body_st), body_message[0] ? " -- " : "", body_message);
}

cgc_status_t cgc_stream_capture_status(cgc_stream_t stream, cgc_capture_status_t* status, uint64_t* capture_id) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(status != NULL, "status is NULL");
  *status = CGC_CAPTURE_NONE;
  if (capture_id != NULL) *capture_id = 0;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__stream_enter(stream, &scope, __func__));
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  cgc_status_t st = CGC_CU(__func__, cuStreamGetCaptureInfo(stream->cu, &s, &id, NULL, NULL, NULL));
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) return st;
  *status = s == CU_STREAM_CAPTURE_STATUS_ACTIVE ? CGC_CAPTURE_ACTIVE
            : s == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? CGC_CAPTURE_BROKEN
                                                        : CGC_CAPTURE_NONE;
  if (capture_id != NULL && s != CU_STREAM_CAPTURE_STATUS_NONE) *capture_id = id;
  return CGC_SUCCESS;
}

cgc_status_t cgc_capture_mode_exchange(cgc_capture_mode_t* mode) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(mode != NULL, "mode is NULL");
  CGC_CHECK_ARG((unsigned)*mode <= CGC_CAPTURE_MODE_RELAXED,
                "*mode is %d: use CGC_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED", (int)*mode);
  CGC_TRY(cgc__driver_load(__func__));
  CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
  cgc_status_t st = CGC_CU(__func__, cuThreadExchangeStreamCaptureMode(&m));
  if (st == CGC_SUCCESS) *mode = (cgc_capture_mode_t)m;
  return st;
}
