/* Capture: begin/end, the callback form, capture status, the per-thread mode exchange, and the
 * fork/join bookkeeping that lets cgc_capture_end name side streams that were never joined.
 *
 * Every capture begun through cgc has a record in a process-wide registry, keyed by its origin
 * stream and, once the driver has begun, by its capture id. The registry is global rather than
 * per thread because a capture may span threads (Relaxed mode, or work on side streams driven
 * from other threads), as in PyTorch's CUDAGraph.cpp. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

atomic_int cgc__captures_underway;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cgc__capture* registry; /* guarded by registry_lock, as is everything below */
static uint64_t bookkeeping_seq;      /* orders records and waits for the join analysis */

/* ---- registry (call with registry_lock held) ---- */

static struct cgc__capture* find_by_origin(CUstream origin) {
  for (struct cgc__capture* c = registry; c != NULL; c = c->next)
    if (c->origin == origin) return c;
  return NULL;
}

static struct cgc__capture* find_by_id(uint64_t id) {
  if (id == 0) return NULL;
  for (struct cgc__capture* c = registry; c != NULL; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

static struct cgc__side* find_side(struct cgc__capture* c, CUstream cu) {
  for (size_t i = 0; i < c->n_sides; i++)
    if (c->sides[i].cu == cu) return &c->sides[i];
  return NULL;
}

/* The capture `cu` takes part in (origin or known side stream), if any. */
static struct cgc__capture* find_by_member(CUstream cu) {
  for (struct cgc__capture* c = registry; c != NULL; c = c->next)
    if (c->origin == cu || find_side(c, cu) != NULL) return c;
  return NULL;
}

static void unlink_capture(struct cgc__capture* c) {
  for (struct cgc__capture** p = &registry; *p != NULL; p = &(*p)->next) {
    if (*p == c) {
      *p = c->next;
      break;
    }
  }
}

static void free_capture(struct cgc__capture* c) {
  if (c == NULL) return;
  free(c->uses);
  for (size_t i = 0; i < c->n_sides; i++) free(c->sides[i].absorbed);
  free(c->sides);
  free(c);
}

/* Grows *items (of *cap elements of `size` bytes) to hold one more; false when out of memory. */
static bool reserve_one(void** items, size_t* cap, size_t count, size_t size) {
  if (count < *cap) return true;
  size_t n = *cap ? *cap * 2 : 4;
  void* grown = realloc(*items, n * size);
  if (grown == NULL) return false;
  *items = grown;
  *cap = n;
  return true;
}

static struct cgc__side* add_side(struct cgc__capture* c, CUstream cu) {
  if (!reserve_one((void**)&c->sides, &c->cap_sides, c->n_sides, sizeof *c->sides)) return NULL;
  struct cgc__side* s = &c->sides[c->n_sides++];
  memset(s, 0, sizeof *s);
  s->cu = cu;
  return s;
}

/* The origin waited on a record of `from` made at `event_seq`: `from` is joined up to there, and
 * so is every stream `from` had absorbed (waited on) before that record. */
static void join(struct cgc__capture* c, CUstream from, uint64_t event_seq) {
  struct cgc__side* s = find_side(c, from);
  if (s == NULL || event_seq <= s->joined_seq) return;
  s->joined_seq = event_seq;
  /* Recursion only reads and updates sides (it never adds one), so `s` stays valid. */
  for (size_t i = 0; i < s->n_absorbed; i++) {
    struct cgc__absorbed a = s->absorbed[i];
    if (a.at_seq < event_seq) join(c, a.from, a.event_seq);
  }
}

void cgc__capture_note_record(cgc_event_t ev, cgc_stream_t stream) {
  if (atomic_load_explicit(&cgc__captures_underway, memory_order_acquire) == 0) {
    ev->capture_id = 0;
    return;
  }
  pthread_mutex_lock(&registry_lock);
  struct cgc__capture* c = stream->legacy ? NULL : find_by_member(stream->cu);
  if (c == NULL && !stream->legacy) {
    /* A stream forked in without cgc_stream_wait_event (a raw cuStreamWaitEvent) is still part of
     * the capture: the driver knows. */
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    if (cgc__drv.cuStreamGetCaptureInfo(stream->cu, &status, &id, NULL, NULL, NULL) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE)
      c = find_by_id(id);
  }
  ev->capture_id = c ? c->id : 0;
  ev->recorded_on = stream->cu;
  ev->record_seq = ++bookkeeping_seq;
  pthread_mutex_unlock(&registry_lock);
}

void cgc__capture_note_wait(cgc_stream_t stream, cgc_event_t ev) {
  if (atomic_load_explicit(&cgc__captures_underway, memory_order_acquire) == 0) return;
  pthread_mutex_lock(&registry_lock);
  struct cgc__capture* c = find_by_id(ev->capture_id);
  if (c != NULL && !stream->legacy) {
    uint64_t now = ++bookkeeping_seq;
    if (stream->cu == c->origin) {
      join(c, ev->recorded_on, ev->record_seq);
    } else {
      struct cgc__side* s = find_side(c, stream->cu);
      if (s == NULL) s = add_side(c, stream->cu);
      if (s != NULL) {
        s->fork_seq = now; /* new work may follow on it: it must be joined again */
        if (ev->recorded_on != c->origin && ev->recorded_on != stream->cu &&
            reserve_one((void**)&s->absorbed, &s->cap_absorbed, s->n_absorbed, sizeof *s->absorbed))
          s->absorbed[s->n_absorbed++] = (struct cgc__absorbed){ev->recorded_on, ev->record_seq, now};
      }
    }
  }
  pthread_mutex_unlock(&registry_lock);
}

bool cgc__capture_side_joined(uint64_t id, const void* stream, uint64_t since) {
  pthread_mutex_lock(&registry_lock);
  struct cgc__capture* c = find_by_id(id);
  struct cgc__side* s = c ? find_side(c, (CUstream)stream) : NULL;
  bool joined = s != NULL && s->joined_seq > since && s->joined_seq > s->fork_seq;
  pthread_mutex_unlock(&registry_lock);
  return joined;
}

uint64_t cgc__capture_seq(void) {
  pthread_mutex_lock(&registry_lock);
  uint64_t seq = ++bookkeeping_seq;
  pthread_mutex_unlock(&registry_lock);
  return seq;
}

cgc_status_t cgc__stream_capture_id(cgc_stream_t stream, uint64_t* id, const char* func) {
  *id = 0;
  if (stream->legacy) return CGC_SUCCESS; /* the legacy stream never captures */
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t cid = 0;
  CUresult r = cgc__drv.cuStreamGetCaptureInfo(stream->cu, &status, &cid, NULL, NULL, NULL);
  if (r != CUDA_SUCCESS) return cgc__cu_fail(r, func, "cuStreamGetCaptureInfo");
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return CGC_SUCCESS;
  pthread_mutex_lock(&registry_lock);
  bool ours = find_by_id(cid) != NULL;
  pthread_mutex_unlock(&registry_lock);
  if (!ours)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "stream %p is capturing (capture id %llu) but the capture was not begun with "
                     "cgc_capture_begin: cgc cannot record this call into it",
                     (void*)stream->cu, (unsigned long long)cid);
  *id = cid;
  return CGC_SUCCESS;
}

cgc_status_t cgc__capture_add_use(uint64_t id, int kind, void* object, bool* added, const char* func) {
  *added = false;
  cgc_status_t st = CGC_SUCCESS;
  pthread_mutex_lock(&registry_lock);
  struct cgc__capture* c = find_by_id(id);
  if (c == NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "capture %llu has ended", (unsigned long long)id);
  } else {
    bool known = false;
    for (size_t i = 0; i < c->n_uses && !known; i++) known = c->uses[i].object == object;
    if (!known) {
      if (!reserve_one((void**)&c->uses, &c->cap_uses, c->n_uses, sizeof *c->uses)) {
        st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
      } else {
        c->uses[c->n_uses++] = (struct cgc__use){kind, object};
        *added = true;
      }
    }
  }
  pthread_mutex_unlock(&registry_lock);
  return st;
}

bool cgc__capture_has_origin(CUstream stream) {
  pthread_mutex_lock(&registry_lock);
  bool found = find_by_origin(stream) != NULL;
  pthread_mutex_unlock(&registry_lock);
  return found;
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
  if ((unsigned)out->mode > CGC_CAPTURE_MODE_RELAXED)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "options->mode is %d: use CGC_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED", (int)out->mode);
  unsigned known = CGC_CAPTURE_UPLOAD | CGC_CAPTURE_AUTO_FREE_ON_LAUNCH;
  if (out->flags & ~known)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "options->flags has unknown bits 0x%x", out->flags & ~known);
  return CGC_SUCCESS;
}

/* ---- begin / end ---- */

cgc_status_t cgc_capture_begin(cgc_stream_t stream, const cgc_capture_options_t* options) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc_capture_options_t opts;
  cgc_status_t st = read_options(options, &opts, __func__);
  if (st != CGC_SUCCESS) return st;
  if (stream->legacy)
    return cgc__fail(CGC_ERROR_CAPTURE_LEGACY_STREAM, __func__,
                     "CUDA graphs cannot be captured on the legacy default stream: capture on a stream "
                     "from cgc_stream_create (replaying on the default stream is fine)");

  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  st = CGC_CU(cuStreamGetCaptureInfo(stream->cu, &status, &id, NULL, NULL, NULL));
  if (st != CGC_SUCCESS) return st;
  if (status != CU_STREAM_CAPTURE_STATUS_NONE)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "stream %p is already capturing (capture id %llu): end that capture first",
                     (void*)stream->cu, (unsigned long long)id);

  struct cgc__capture* c = calloc(1, sizeof *c);
  if (c == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  c->dev = stream->dev;
  c->origin = stream->cu;
  c->mode = opts.mode;
  c->flags = opts.flags;
  st = cgc__pool_begin_capture(stream->dev, opts.pool, stream->cu, &c->pool, __func__);
  if (st != CGC_SUCCESS) {
    free_capture(c);
    return st;
  }

  /* Register before the driver begins, so that nothing routed by this capture can slip in
   * between (SEMANTICS 3); the id is filled in once the driver has one. */
  pthread_mutex_lock(&registry_lock);
  if (find_by_origin(stream->cu) != NULL) {
    pthread_mutex_unlock(&registry_lock);
    cgc__pool_end_capture(c->pool, false, NULL, 0);
    free_capture(c);
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__, "stream %p is already capturing", (void*)stream->cu);
  }
  c->next = registry;
  registry = c;
  atomic_fetch_add_explicit(&cgc__captures_underway, 1, memory_order_acq_rel);
  pthread_mutex_unlock(&registry_lock);

  st = CGC_CU(cuStreamBeginCapture(stream->cu, (CUstreamCaptureMode)opts.mode));
  if (st == CGC_SUCCESS) st = CGC_CU(cuStreamGetCaptureInfo(stream->cu, &status, &id, NULL, NULL, NULL));

  pthread_mutex_lock(&registry_lock);
  if (st == CGC_SUCCESS) {
    c->id = id;
  } else {
    unlink_capture(c);
    atomic_fetch_sub_explicit(&cgc__captures_underway, 1, memory_order_acq_rel);
  }
  pthread_mutex_unlock(&registry_lock);
  if (st != CGC_SUCCESS) {
    cgc__pool_end_capture(c->pool, false, NULL, 0);
    free_capture(c);
    return st;
  }
  cgc__pool_capture_started(c->pool, id);
  cgc__log("capture %llu begun on stream %p (mode %d)", (unsigned long long)id, (void*)stream->cu, (int)opts.mode);
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

/* After a failed end the driver should have taken every stream out of the capture; if one is
 * still capturing, say so rather than leave the caller guessing. */
static void check_left_capturing(const struct cgc__capture* c) {
  for (size_t i = 0; i < c->n_sides; i++) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (cgc__drv.cuStreamGetCaptureInfo(c->sides[i].cu, &status, NULL, NULL, NULL, NULL) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE)
      cgc__append("; side stream %p is still capturing", (void*)c->sides[i].cu);
  }
}

cgc_status_t cgc_capture_end(cgc_stream_t stream, cgc_graph_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);

  pthread_mutex_lock(&registry_lock);
  struct cgc__capture* c = stream->legacy ? NULL : find_by_origin(stream->cu);
  struct cgc__capture* member = c ? c : (stream->legacy ? NULL : find_by_member(stream->cu));
  void* member_origin = member ? (void*)member->origin : NULL;
  pthread_mutex_unlock(&registry_lock);
  if (c == NULL) {
    if (member != NULL)
      return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                       "stream %p is a side stream of the capture begun on stream %p: end it there",
                       (void*)stream->cu, member_origin);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!stream->legacy &&
        cgc__drv.cuStreamGetCaptureInfo(stream->cu, &status, NULL, NULL, NULL, NULL) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE)
      return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                       "the capture on stream %p was not begun with cgc_capture_begin", (void*)stream->cu);
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "no capture is under way on stream %p (cgc_capture_end without cgc_capture_begin)",
                     (void*)stream->cu);
  }

  CUgraph graph = NULL;
  CUresult r = cgc__drv.cuStreamEndCapture(stream->cu, &graph);
  if (r == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) {
    /* The capture goes on: only the thread that began a Global or ThreadLocal capture can end it. */
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: a Global or "
                     "ThreadLocal capture must be ended by the thread that began it; the capture is still "
                     "under way");
  }

  pthread_mutex_lock(&registry_lock);
  unlink_capture(c);
  atomic_fetch_sub_explicit(&cgc__captures_underway, 1, memory_order_acq_rel);
  pthread_mutex_unlock(&registry_lock);

  cgc_status_t st = cgc__cu_fail(r, __func__, "cuStreamEndCapture");
  if (st == CGC_SUCCESS && graph == NULL)
    st = cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, __func__, "the driver returned no graph");
  /* Routing to the pool stops only now, after the driver's end (SEMANTICS 3). */
  CUstream* members = malloc((c->n_sides + 1) * sizeof *members);
  size_t n_members = 0;
  if (members != NULL) {
    members[n_members++] = c->origin;
    for (size_t i = 0; i < c->n_sides; i++) members[n_members++] = c->sides[i].cu;
  }
  cgc__pool_end_capture(c->pool, st == CGC_SUCCESS, members, n_members);
  free(members);
  if (st != CGC_SUCCESS) {
    if (r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED) name_unjoined(c);
    check_left_capturing(c);
    if (graph != NULL) cgc__drv.cuGraphDestroy(graph);
    cgc__release_uses(c->uses, c->n_uses);
    free_capture(c);
    return st;
  }

  size_t nodes = 0;
  st = CGC_CU(cuGraphGetNodes(graph, NULL, &nodes));
  if (st == CGC_SUCCESS) {
    st = cgc__graph_create(stream->dev, graph, nodes, c->pool, c->uses, c->n_uses, c->flags, stream->cu, __func__,
                           out);
  } else {
    cgc__drv.cuGraphDestroy(graph);
    cgc__pool_unref(c->pool);
    cgc__release_uses(c->uses, c->n_uses);
  }
  if (st == CGC_SUCCESS && nodes == 0)
    cgc__warn(__func__, "the graph is empty: captured on the wrong stream or device?");
  cgc__log("capture %llu ended: %zu nodes, status %d", (unsigned long long)c->id, nodes, (int)st);
  free_capture(c);
  return st;
}

cgc_status_t cgc_capture(cgc_stream_t stream, const cgc_capture_options_t* options, cgc_capture_fn body,
                         void* user, cgc_graph_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_ARG(body != NULL, "body is NULL");
  cgc_status_t st = cgc_capture_begin(stream, options);
  if (st != CGC_SUCCESS) return st;
  cgc_status_t body_st = body(stream, user);
  if (body_st == CGC_SUCCESS) return cgc_capture_end(stream, out);

  char body_message[512];
  snprintf(body_message, sizeof body_message, "%s", cgc_last_error());
  cgc_graph_t discarded = NULL;
  cgc_capture_end(stream, &discarded);
  if (discarded != NULL) cgc_graph_destroy(discarded);
  return cgc__fail(body_st, __func__, "the body returned %s%s%s; the capture was ended and discarded",
                   cgc_status_string(body_st), body_message[0] ? " -- " : "", body_message);
}

cgc_status_t cgc_stream_capture_status(cgc_stream_t stream, cgc_capture_status_t* status, uint64_t* capture_id) {
  CGC_CHECK_ARG(status != NULL, "status is NULL");
  *status = CGC_CAPTURE_NONE;
  if (capture_id != NULL) *capture_id = 0;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st = stream->legacy ? cgc__ctx_enter(stream->dev, &scope, __func__) : CGC_SUCCESS;
  if (st != CGC_SUCCESS) return st;
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  st = CGC_CU(cuStreamGetCaptureInfo(stream->cu, &s, &id, NULL, NULL, NULL));
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) return st;
  *status = s == CU_STREAM_CAPTURE_STATUS_ACTIVE ? CGC_CAPTURE_ACTIVE
            : s == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? CGC_CAPTURE_BROKEN
                                                        : CGC_CAPTURE_NONE;
  if (capture_id != NULL && s != CU_STREAM_CAPTURE_STATUS_NONE) *capture_id = id;
  return CGC_SUCCESS;
}

cgc_status_t cgc_capture_mode_exchange(cgc_capture_mode_t* mode) {
  CGC_CHECK_ARG(mode != NULL, "mode is NULL");
  CGC_CHECK_ARG((unsigned)*mode <= CGC_CAPTURE_MODE_RELAXED,
                "*mode is %d: use CGC_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED", (int)*mode);
  cgc_status_t st = cgc__driver_load(__func__);
  if (st != CGC_SUCCESS) return st;
  CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
  st = CGC_CU(cuThreadExchangeStreamCaptureMode(&m));
  if (st == CGC_SUCCESS) *mode = (cgc_capture_mode_t)m;
  return st;
}
