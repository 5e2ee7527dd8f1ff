/* The captures under way: every capture begun through cgc has a record here from before the
 * driver begins it until after the driver ended it. Everything else asks this file, and it asks
 * only the driver: which captures exist, which streams forked into and joined which capture
 * (so that cgc_capture_end can name side streams never joined back and the allocator can reuse
 * blocks once their side streams joined), which objects a capture holds, and whether a call on
 * this thread would break one of them.
 *
 * The registry is process-wide rather than per thread because a capture may span threads
 * (Relaxed mode, or side streams driven from other threads), as in PyTorch's CUDAGraph.cpp.
 * One mutex guards it all; it is never held across a driver call that waits for the GPU. */
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cgc__capture* registry; /* guarded by registry_lock, as is everything below */
static uint64_t bookkeeping_seq;      /* orders records and waits for the join analysis */
/* The number of records in `registry`: written under the lock, read without it by fast paths
 * that only need to know whether any capture might be under way. */
static atomic_int underway;
atomic_int cgc__adopted_captures; /* internal.h: pool.c counts the open adoptions */

int cgc__captures_underway(void) { return atomic_load_explicit(&underway, memory_order_acquire); }

/* ---- lookups (registry_lock held) ---- */

static struct cgc__capture* find_by_origin(uint64_t key) {
  for (struct cgc__capture* c = registry; c != NULL; c = c->next)
    if (c->origin_key == key) return c;
  return NULL;
}

static struct cgc__capture* find_by_id(uint64_t id) {
  if (id == 0) return NULL;
  for (struct cgc__capture* c = registry; c != NULL; c = c->next) {
    if (c->id == id) return c;
    for (size_t i = 0; i < c->n_bodies; i++) /* a conditional body works for its capture */
      if (c->bodies[i].id == id) return c;
  }
  return NULL;
}

static struct cgc__side* find_side(struct cgc__capture* c, uint64_t key) {
  for (size_t i = 0; i < c->n_sides; i++)
    if (c->sides[i].key == key) return &c->sides[i];
  return NULL;
}

/* The capture `key` takes part in (origin or known side stream), if any. */
static struct cgc__capture* find_by_member(uint64_t key) {
  for (struct cgc__capture* c = registry; c != NULL; c = c->next)
    if (c->origin_key == key || find_side(c, key) != NULL) return c;
  return NULL;
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

/* ---- the records ---- */

/* Gates closed now (registry_lock): a capture that one of them would break is refused in
 * cgc__registry_add. It does not wait: the gated calls are collective (every rank of a
 * communicator takes part), and with one thread per rank a begin that waited for another rank's
 * call could keep its own thread from joining that call, and both would wait for ever. */
static cgc__gate_t* gates;
static const cgc__gate_t* gate_against(const struct cgc__capture* c);
static const char* mode_name(cgc_capture_mode_t mode);

cgc_status_t cgc__registry_add(struct cgc__capture* c, const char* func) {
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  /* A setup or teardown call under way on another thread would break this capture later. */
  const cgc__gate_t* gate = gate_against(c);
  struct cgc__capture* same = find_by_origin(c->origin_key);
  if (gate != NULL) {
    st = cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                   "%s is under way on another thread, and its driver work would break this %s-mode capture of "
                   "stream %p: begin the capture after that call returns%s",
                   gate->call, mode_name(c->mode), (void*)c->origin,
                   gate->kind == CGC__GUARD_DEVICE && gate->dev == c->dev ? "" : ", or in CGC_CAPTURE_MODE_THREAD_LOCAL");
  } else if (same != NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "stream %p is already capturing (capture id %llu)",
                   (void*)c->origin, (unsigned long long)same->id);
  } else {
    c->state = CGC__CAPTURE_BEGINNING;
    c->next = registry;
    registry = c;
    atomic_fetch_add_explicit(&underway, 1, memory_order_acq_rel);
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return st;
}

void cgc__registry_activate(struct cgc__capture* c, uint64_t id) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  c->id = id;
  c->state = CGC__CAPTURE_ACTIVE;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
}

void cgc__registry_remove(struct cgc__capture* c) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  for (struct cgc__capture** p = &registry; *p != NULL; p = &(*p)->next) {
    if (*p == c) {
      *p = c->next;
      atomic_fetch_sub_explicit(&underway, 1, memory_order_acq_rel);
      break;
    }
  }
  c->next = NULL;
  struct cgc__body* retired = c->retired_bodies;
  c->retired_bodies = NULL;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  while (retired != NULL) {
    struct cgc__body* b = retired;
    retired = b->next_retired;
    free(b);
  }
}

cgc_status_t cgc__registry_claim_end(const cgc__stream_ref_t* ref, struct cgc__capture** out, const char* func) {
  *out = NULL;
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = ref->special && ref->cu == NULL ? NULL : find_by_origin(ref->key);
  if (c == NULL) {
    struct cgc__capture* member = ref->cu == NULL ? NULL : find_by_member(ref->key);
    if (member != NULL)
      st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "stream %p is a side stream of the capture begun on stream %p: end it there", (void*)ref->cu,
                     (void*)member->origin);
    else if (ref->capturing)
      st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "the capture on stream %p was not begun with cgc_capture_begin",
                     (void*)ref->cu);
    else
      st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "no capture is under way on stream %p (cgc_capture_end without cgc_capture_begin)",
                     (void*)ref->cu);
  } else if (c->state == CGC__CAPTURE_ENDING) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "the capture on stream %p (capture id %llu) is being ended by another call: one end only",
                   (void*)c->origin, (unsigned long long)c->id);
  } else if (c->state == CGC__CAPTURE_BEGINNING) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "the capture on stream %p is still being begun by another thread",
                   (void*)c->origin);
  } else if (c->n_bodies > 0) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "the capture on stream %p has %zu conditional bod%s still open: end %s first "
                   "(cgc_capture_conditional_end)",
                   (void*)c->origin, c->n_bodies, c->n_bodies == 1 ? "y" : "ies", c->n_bodies == 1 ? "it" : "them");
  } else if (c->mode != CGC_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
    /* The driver refuses it too (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD); refusing first leaves
     * the capture untouched. */
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "the capture on stream %p (capture id %llu) was begun by another thread in %s mode: only that "
                   "thread can end it (a Relaxed capture can be ended by any thread); the capture is still under way",
                   (void*)c->origin, (unsigned long long)c->id,
                   c->mode == CGC_CAPTURE_MODE_GLOBAL ? "Global" : "ThreadLocal");
  } else {
    c->state = CGC__CAPTURE_ENDING;
    *out = c;
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return st;
}

bool cgc__registry_is_cgc_capture(uint64_t id) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  bool ours = find_by_id(id) != NULL;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return ours;
}

cgc_status_t cgc__registry_reserve_body(uint64_t id, const char* func) {
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(id);
  if (c == NULL || c->state != CGC__CAPTURE_ACTIVE)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "capture %llu is not under way (ended, or being ended)",
                   (unsigned long long)id);
  else if (!reserve_one((void**)&c->bodies, &c->cap_bodies, c->n_bodies, sizeof *c->bodies))
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  else
    c->bodies[c->n_bodies++] = (struct cgc__open_body){0, NULL};
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return st;
}

/* The reservation of `c` (id 0), or NULL. Registry lock held. */
static struct cgc__open_body* reservation(struct cgc__capture* c) {
  for (size_t i = c != NULL ? c->n_bodies : 0; i > 0; i--)
    if (c->bodies[i - 1].id == 0) return &c->bodies[i - 1];
  return NULL;
}

void cgc__registry_open_body(uint64_t id, uint64_t body_id, cgc_stream_t lent) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__open_body* b = reservation(find_by_id(id));
  if (b != NULL) *b = (struct cgc__open_body){body_id, lent};
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
}

/* Takes out entry `b` of `c`, keeping the others in the order they opened. */
static void remove_body(struct cgc__capture* c, struct cgc__open_body* b) {
  size_t i = (size_t)(b - c->bodies);
  for (; i + 1 < c->n_bodies; i++) c->bodies[i] = c->bodies[i + 1];
  c->n_bodies--;
}

void cgc__registry_unreserve_body(uint64_t id) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(id);
  struct cgc__open_body* b = reservation(c);
  if (b != NULL) remove_body(c, b);
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
}

void cgc__registry_close_body(uint64_t body_id, struct cgc__body* record) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(body_id);
  for (size_t i = 0; c != NULL && i < c->n_bodies; i++)
    if (c->bodies[i].id == body_id) {
      remove_body(c, &c->bodies[i]);
      break;
    }
  if (c != NULL) {
    record->next_retired = c->retired_bodies;
    c->retired_bodies = record;
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  if (c == NULL) free(record); /* cannot happen while the body was open: the capture waits for it */
}

void cgc__registry_mark_broken(uint64_t id) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(id);
  if (c != NULL) c->broken = true;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
}

void cgc__registry_mark_body_invalidated(uint64_t id) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(id);
  if (c != NULL) c->broken = c->graph_unsafe = true;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
}

cgc_stream_t cgc__registry_last_body(uint64_t key) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_origin(key);
  cgc_stream_t lent = NULL;
  for (size_t i = c != NULL ? c->n_bodies : 0; i > 0 && lent == NULL; i--) lent = c->bodies[i - 1].lent;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return lent;
}

bool cgc__registry_has_stream(uint64_t key) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  bool has = find_by_origin(key) != NULL || find_by_member(key) != NULL;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return has;
}

void cgc__registry_unclaim(struct cgc__capture* c) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  c->state = CGC__CAPTURE_ACTIVE;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
}

/* ---- fork/join bookkeeping ---- */

static struct cgc__side* add_side(struct cgc__capture* c, const cgc__stream_ref_t* ref) {
  if (!reserve_one((void**)&c->sides, &c->cap_sides, c->n_sides, sizeof *c->sides)) return NULL;
  struct cgc__side* s = &c->sides[c->n_sides++];
  memset(s, 0, sizeof *s);
  s->key = ref->key;
  s->cu = ref->cu;
  return s;
}

/* The origin waited on a record of `from` made at `event_seq`: `from` is joined up to there, and
 * so is every stream `from` had absorbed (waited on) before that record. */
static void join(struct cgc__capture* c, uint64_t from, uint64_t event_seq) {
  struct cgc__side* s = find_side(c, from);
  if (s == NULL || event_seq <= s->joined_seq) return;
  s->joined_seq = event_seq;
  /* Recursion only reads and updates sides (it never adds one), so `s` stays valid. */
  for (size_t i = 0; i < s->n_absorbed; i++) {
    struct cgc__absorbed a = s->absorbed[i];
    if (a.at_seq < event_seq) join(c, a.from, a.event_seq);
  }
}

/* A record or wait is made first and written into the bookkeeping after, under the lock: the
 * driver call (cuEventRecord waits behind another thread's cuMemFree on driver 580) runs with no
 * lock held, so a generator's draw, an allocation or another thread's record never waits behind
 * it. Two threads recording one event at once race in the driver too: whichever bookkeeping comes
 * last wins, as one of the two records does. */
cgc_status_t cgc__registry_record(cgc_event_t ev, const cgc__stream_ref_t* ref, const char* func) {
  CGC_TRY(CGC_CU(func, cuEventRecord(ev->cu, ref->cu)));
  /* With no capture under way no record can matter to one: the bookkeeping of an older record
   * names a capture id that no capture has any more. */
  if (cgc__captures_underway() == 0) return CGC_SUCCESS;
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = ref->special && ref->cu == NULL ? NULL : find_by_member(ref->key);
  /* A stream forked in without cgc_stream_wait_event (a raw cuStreamWaitEvent) is still part
   * of the capture: the driver knows. */
  if (c == NULL && ref->capturing) c = find_by_id(ref->capture_id);
  ev->capture_id = c ? c->id : 0;
  ev->recorded_on = ref->key;
  ev->record_seq = ++bookkeeping_seq;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return CGC_SUCCESS;
}

/* Why the driver refused a wait on a record of cgc capture `c` (registry_lock held, `c` ACTIVE:
 * no thread is inside its cuStreamEndCapture, so asking about its origin is safe). */
static cgc_status_t explain_refused_wait(const struct cgc__capture* c, cgc_event_t ev, CUresult r, const char* func) {
  const char* name = "an error";
  CGC_DRV(cuGetErrorName)(r, &name);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  bool invalidated;
  if (c->origin_per_thread && !pthread_equal(c->thread, pthread_self())) {
    /* "The per-thread stream" is another stream on this thread: the driver cannot be asked
     * about the capture's origin from here. A record of a capture that is still active is
     * refused for one reason (the capture was invalidated meanwhile, CUDA_ERROR_INVALID_VALUE
     * on driver 580). */
    invalidated = r == CUDA_ERROR_INVALID_VALUE;
  } else {
    invalidated = CGC_DRV(cuStreamGetCaptureInfo)(c->origin, &status, NULL, NULL, NULL, NULL) == CUDA_SUCCESS &&
                  status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  }
  if (!invalidated) return cgc__cu_fail(r, func, "cuStreamWaitEvent");
  return cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, func,
                   "event %p was recorded in the capture on stream %p, which an earlier call invalidated "
                   "(cuStreamWaitEvent failed: %s): end that capture and capture again",
                   (void*)ev, (void*)c->origin, name);
}

cgc_status_t cgc__registry_wait(const cgc__stream_ref_t* ref, cgc_event_t ev, const char* func) {
  CUresult r = CGC_DRV(cuStreamWaitEvent)(ref->cu, ev->cu, 0);
  if (r == CUDA_SUCCESS && cgc__captures_underway() == 0) return CGC_SUCCESS;
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(ev->capture_id);
  cgc_status_t st = CGC_SUCCESS;
  if (r != CUDA_SUCCESS)
    st = c != NULL && c->state == CGC__CAPTURE_ACTIVE ? explain_refused_wait(c, ev, r, func)
                                                      : cgc__cu_fail(r, func, "cuStreamWaitEvent");
  if (st != CGC_SUCCESS) c = NULL;
  if (c != NULL && !(ref->special && ref->cu == NULL)) {
    uint64_t now = ++bookkeeping_seq;
    if (ref->key == c->origin_key) {
      join(c, ev->recorded_on, ev->record_seq);
    } else {
      struct cgc__side* s = find_side(c, ref->key);
      if (s == NULL) s = add_side(c, ref);
      if (s != NULL) {
        s->fork_seq = now; /* new work may follow on it: it must be joined again */
        if (ev->recorded_on != c->origin_key && ev->recorded_on != ref->key &&
            reserve_one((void**)&s->absorbed, &s->cap_absorbed, s->n_absorbed, sizeof *s->absorbed))
          s->absorbed[s->n_absorbed++] = (struct cgc__absorbed){ev->recorded_on, ev->record_seq, now};
      }
    }
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return st;
}

bool cgc__registry_side_joined(uint64_t id, uint64_t key, uint64_t since) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(id);
  struct cgc__side* s = c ? find_side(c, key) : NULL;
  bool joined = s != NULL && s->joined_seq > since && s->joined_seq > s->fork_seq;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return joined;
}

uint64_t cgc__registry_seq(void) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  uint64_t seq = ++bookkeeping_seq;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return seq;
}

/* ---- what captures hold ---- */

cgc_status_t cgc__refuse_invalidated(const cgc__stream_ref_t* ref, const char* what, const char* func) {
  /* The driver reports no id for an invalidated capture: whether cgc began it is asked of the
   * registry, by the stream's key or address (its origin's or a side's). */
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  bool ours = false;
  for (struct cgc__capture* c = registry; c != NULL && !ours; c = c->next)
    ours = c->origin_key == ref->key || (ref->cu != NULL && c->origin == ref->cu) || find_side(c, ref->key) != NULL;
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  if (ours)
    return cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, func,
                     "stream %p takes part in a capture that an earlier call invalidated: %s cannot be recorded into "
                     "it; end it (cgc_capture_end on its origin stream reports why), then capture again",
                     (void*)ref->cu, what);
  return cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, func,
                   "stream %p takes part in a capture that an earlier call invalidated, which cgc did not begin: %s "
                   "cannot be recorded into it; end it where it was begun (cuStreamEndCapture, or the framework "
                   "that began it), then capture again",
                   (void*)ref->cu, what);
}

cgc_status_t cgc__registry_capture_of(const cgc__stream_ref_t* ref, uint64_t* id, const char* func) {
  *id = 0;
  if (!ref->capturing) return CGC_SUCCESS;
  /* An invalidated capture has no id the driver reports (0): say what happened, not that cgc
   * did not begin it. */
  if (ref->invalidated) return cgc__refuse_invalidated(ref, "this call", func);
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(ref->capture_id);
  uint64_t capture = c != NULL ? c->id : 0; /* a body's stream works for the capture of its body */
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  if (capture == 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "stream %p is capturing (capture id %llu) but the capture was not begun with "
                     "cgc_capture_begin: cgc cannot record this call into it",
                     (void*)ref->cu, (unsigned long long)ref->capture_id);
  *id = capture;
  return CGC_SUCCESS;
}

/* Both ways of recording a use: `fresh` objects were made for this call (a host function's
 * record) and cannot be known yet, so the search for an earlier record is skipped: a capture of
 * thousands of host nodes stays linear. */
static cgc_status_t add_use(uint64_t id, const cgc__use_ops_t* ops, void* object, bool fresh, const char* func) {
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  struct cgc__capture* c = find_by_id(id);
  if (c == NULL || c->state == CGC__CAPTURE_ENDING) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "capture %llu has ended", (unsigned long long)id);
  } else {
    bool known = false;
    for (size_t i = 0; i < c->n_uses && !known && !fresh; i++) known = c->uses[i].object == object;
    if (!known) {
      if (!reserve_one((void**)&c->uses, &c->cap_uses, c->n_uses, sizeof *c->uses)) {
        st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
      } else {
        /* Retained here, under the lock, so that the reference exists before any thread can
         * end the capture and hand its uses on. */
        ops->retain(object);
        c->uses[c->n_uses++] = (struct cgc__use){ops, object, 0};
      }
    }
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return st;
}

cgc_status_t cgc__registry_add_use(uint64_t id, const cgc__use_ops_t* ops, void* object, const char* func) {
  return add_use(id, ops, object, false, func);
}

cgc_status_t cgc__registry_add_new_use(uint64_t id, const cgc__use_ops_t* ops, void* object, const char* func) {
  return add_use(id, ops, object, true, func);
}

/* ---- calls that would break a capture ---- */

static const char* mode_name(cgc_capture_mode_t mode) {
  return mode == CGC_CAPTURE_MODE_GLOBAL ? "Global" : mode == CGC_CAPTURE_MODE_THREAD_LOCAL ? "ThreadLocal" : "Relaxed";
}

/* The calling thread's capture-interaction mode (cuThreadExchangeStreamCaptureMode twice: the
 * mode may have been set through the driver directly), as a guard of `kind` counts it. */
static CUstreamCaptureMode guard_mode(cgc__guard_t kind) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  if (kind == CGC__GUARD_THIS_THREAD) {
    CGC_DRV(cuThreadExchangeStreamCaptureMode)(&mode);
    CUstreamCaptureMode back = mode;
    CGC_DRV(cuThreadExchangeStreamCaptureMode)(&back);
  }
  return mode;
}

/* The guard's check (registry_lock held): CAPTURE_UNSUPPORTED naming the capture the call would
 * break, or success. */
static cgc_status_t check_guard(struct cgc__device* dev, cgc__guard_t kind, CUstreamCaptureMode mode,
                                const char* call, const char* func) {
  if (kind == CGC__GUARD_THIS_THREAD && mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CGC_SUCCESS;
  bool any_mode = kind == CGC__GUARD_DEVICE;
  pthread_t self = pthread_self();
  struct cgc__capture* broken = NULL;
  bool own = false;
  for (struct cgc__capture* c = registry; c != NULL && broken == NULL; c = c->next) {
    bool mine = pthread_equal(c->thread, self);
    if (any_mode) {
      if (c->dev == dev) broken = c;
    } else if (mine && c->mode != CGC_CAPTURE_MODE_RELAXED) {
      broken = c; /* this thread's own capture: Global and ThreadLocal both forbid it */
    } else if (!mine && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CGC_CAPTURE_MODE_GLOBAL) {
      broken = c; /* another thread's Global capture, and this thread is in Global mode */
    }
    if (broken != NULL) own = mine;
  }
  /* Adopted captures (cgc did not begin them; cgc cannot know their mode): a device-wide call is
   * refused while one of its device is open, an NCCL call (Global mode) while any is. */
  int adopted = kind == CGC__GUARD_DEVICE ? atomic_load_explicit(&dev->adopted_captures, memory_order_acquire)
              : kind == CGC__GUARD_AS_GLOBAL ? atomic_load_explicit(&cgc__adopted_captures, memory_order_acquire)
                                             : 0;
  if (broken == NULL && adopted > 0)
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                     "%s would break a capture that a pool adopted (cgc_pool_adopt_capture: one cgc did not begin, "
                     "such as PyTorch's own; %d open%s), whose mode cgc cannot know: call it after "
                     "cgc_pool_end_adopted_capture",
                     call, adopted, kind == CGC__GUARD_DEVICE ? " on this device" : "");
  if (broken == NULL) return CGC_SUCCESS;
  if (any_mode)
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                     "%s waits for every stream of device %d, and a capture is under way on stream %p (capture id "
                     "%llu, %s mode): the driver would break it from any thread; call it after cgc_capture_end",
                     call, dev->ordinal, (void*)broken->origin, (unsigned long long)broken->id,
                     mode_name(broken->mode));
  if (own)
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                     "%s is not allowed while this thread's %s-mode capture on stream %p (capture id %llu) is under "
                     "way: it would break the capture; call it after cgc_capture_end",
                     call, mode_name(broken->mode), (void*)broken->origin, (unsigned long long)broken->id);
  return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                   "%s would break the Global-mode capture under way on stream %p (capture id %llu, begun by "
                   "another thread): in Global mode the driver forbids it from every thread. Wait for "
                   "cgc_capture_end, begin that capture in CGC_CAPTURE_MODE_THREAD_LOCAL, or switch this thread "
                   "to Relaxed with cgc_capture_mode_exchange",
                   call, (void*)broken->origin, (unsigned long long)broken->id);
}

cgc_status_t cgc__capture_guard(struct cgc__device* dev, cgc__guard_t kind, const char* call, const char* func) {
  if (cgc__captures_underway() == 0 &&
      (kind == CGC__GUARD_THIS_THREAD || atomic_load_explicit(&cgc__adopted_captures, memory_order_acquire) == 0))
    return CGC_SUCCESS;
  CUstreamCaptureMode mode = guard_mode(kind);
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  cgc_status_t st = check_guard(dev, kind, mode, call, func);
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return st;
}

/* ---- gates: setup and teardown calls that refuse captures begun meanwhile ---- */

/* Whether gate `g` would break capture `c` (registry_lock held). A gate of the capturing thread
 * itself never does: its guard refused the call had the capture come first, and the thread
 * cannot begin a capture from inside the call. */
static bool gate_breaks(const cgc__gate_t* g, const struct cgc__capture* c) {
  if (pthread_equal(g->thread, c->thread)) return false;
  if (g->kind == CGC__GUARD_DEVICE && g->dev == c->dev) return true; /* it waits for every stream */
  return c->mode == CGC_CAPTURE_MODE_GLOBAL; /* unsafe calls, some on NCCL's own Global-mode threads */
}

cgc_status_t cgc__capture_gate_close(cgc__gate_t* gate, struct cgc__device* dev, cgc__guard_t kind, const char* call,
                                     const char* func) {
  CUstreamCaptureMode mode = guard_mode(kind);
  *gate = (cgc__gate_t){.dev = dev, .kind = kind, .thread = pthread_self(), .call = call};
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  cgc_status_t st = check_guard(dev, kind, mode, call, func);
  if (st == CGC_SUCCESS) {
    gate->next = gates;
    gates = gate;
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return st;
}

void cgc__capture_gate_open(cgc__gate_t* gate) {
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  for (cgc__gate_t** p = &gates; *p != NULL; p = &(*p)->next) {
    if (*p == gate) {
      *p = gate->next;
      break;
    }
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
}

/* A closed gate that would break `c`, or NULL (registry_lock held). */
static const cgc__gate_t* gate_against(const struct cgc__capture* c) {
  for (const cgc__gate_t* g = gates; g != NULL; g = g->next)
    if (gate_breaks(g, c)) return g;
  return NULL;
}

int cgc__registry_count_on(struct cgc__device* dev, CUstream* origin) {
  int n = 0;
  *origin = NULL;
  cgc__mutex_lock(&registry_lock, CGC__LOCK_REGISTRY);
  for (struct cgc__capture* c = registry; c != NULL; c = c->next) {
    if (c->dev != dev) continue;
    if (n++ == 0) *origin = c->origin;
  }
  cgc__mutex_unlock(&registry_lock, CGC__LOCK_REGISTRY);
  return n;
}
