/* The device allocator's state and its mechanisms: segments and free sets, the fences and
 * drains that keep memory from work that may still use it, sweeps of what has finished, the
 * segments of destroyed streams and of dissolved pools. The public entry points sit above it:
 * alloc.c (cgc_malloc, cgc_free, ...) and pool.c (private pools); neither calls the other.
 *
 * Outside captures the allocator is stream-ordered (SEMANTICS 16): a block freed on a stream is
 * at once reusable on that stream (blocks are keyed by the driver's stream id, which is never
 * reused); a block other streams used waits for fences (events) recorded on them. A capture's
 * allocations, on any of its streams, come from its private pool (SEMANTICS 4, routing by
 * capture id, set up before the driver capture begins). An allocation on a stream that
 * captures under a capture cgc did not begin is refused: its memory would otherwise come from
 * the eager cache and be handed to eager work while replays still use it.
 *
 * Driver calls run outside the allocator lock, and those the driver counts as unsafe during a
 * capture (cuMemAlloc, cuMemFree, cuEventQuery) run with the calling thread in Relaxed capture
 * mode: then they never break a capture under way on any thread (measured on driver 580), so
 * the cache may be trimmed and waiting blocks settled at any time. */
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "src/alloc.h"

enum { kMaxAllocators = 64 };

void cgc__alloc_lock_slow(atomic_int* word) {
  for (;;) {
    for (int i = 0; i < 200; i++) {
      if (atomic_load_explicit(word, memory_order_relaxed) == 0 &&
          atomic_exchange_explicit(word, 1, memory_order_acquire) == 0)
        return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      __asm__ __volatile__("yield");
#endif
    }
    sched_yield();
  }
}

/* Every device's allocator, published once (for cgc_free, which has only a pointer). */
static _Atomic(struct cgc__allocator*) allocators[kMaxAllocators];
static atomic_int n_allocators;
/* The allocator this thread used last: cgc_free asks it first. */
static _Thread_local struct cgc__allocator* last_used;

struct cgc__allocator* cgc__allocator_of(struct cgc__device* dev) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a != NULL) return a;
  struct cgc__allocator* fresh = calloc(1, sizeof *fresh);
  if (fresh == NULL) return NULL;
  fresh->dev = dev;
  fresh->cache.allocator = fresh;
  struct cgc__allocator* expected = NULL;
  if (!atomic_compare_exchange_strong(&dev->alloc, &expected, fresh)) {
    free(fresh);
    return expected;
  }
  int slot = atomic_fetch_add(&n_allocators, 1);
  if (slot < kMaxAllocators) atomic_store_explicit(&allocators[slot], fresh, memory_order_release);
  return fresh;
}

/* ---- small helpers (lock held) ---- */

/* A block struct: a recycled one (its uses array kept) or a new, zeroed one. */
static cgc__block_t* new_block_struct(void* allocator) {
  struct cgc__allocator* a = allocator;
  cgc__block_t* b = a->spare_blocks;
  if (b != NULL) {
    a->spare_blocks = b->next_waiting;
    return b;
  }
  return calloc(1, sizeof *b);
}

void cgc__alloc_recycle_block(cgc__block_t* b, void* allocator) {
  struct cgc__allocator* a = allocator;
  b->n_uses = 0;
  b->next_waiting = a->spare_blocks;
  a->spare_blocks = b;
}

/* Allocated bytes count for the block's owner (the cache or a pool) and for the device total. */
void cgc__alloc_account(struct cgc__allocator* a, cgc__block_t* b, long long delta) {
  cgc__stats_add_allocated(&b->owner->stats, delta);
  cgc__stats_add_allocated(&a->total, delta);
}

static void give_event(struct cgc__allocator* a, CUevent ev) {
  if (a->n_spare_events == a->cap_spare_events) {
    size_t cap = a->cap_spare_events ? a->cap_spare_events * 2 : 16;
    CUevent* grown = realloc(a->spare_events, cap * sizeof *grown);
    if (grown == NULL) return; /* the event leaks rather than a driver call under the lock */
    a->spare_events = grown;
    a->cap_spare_events = cap;
  }
  a->spare_events[a->n_spare_events++] = ev;
}

cgc__fence_t* cgc__fence_new(CUevent ev) {
  cgc__fence_t* f = calloc(1, sizeof *f);
  if (f != NULL) {
    f->ev = ev;
    f->refs = 1;
  }
  return f;
}

void cgc__fence_put(struct cgc__allocator* a, cgc__fence_t* f) {
  if (--f->refs > 0) return;
  /* An event whose record is complete (or that waits for nothing any more) is as good as new. */
  give_event(a, f->ev);
  free(f);
}

void cgc__alloc_add_drain(struct cgc__allocator* a, cgc__drain_t* d) {
  d->next = a->drains;
  a->drains = d;
  atomic_fetch_add_explicit(&a->waiting, 1, memory_order_relaxed);
}

static void add_pending(struct cgc__allocator* a, cgc__block_t* b) {
  b->next_waiting = a->pending;
  a->pending = b;
  atomic_fetch_add_explicit(&a->waiting, 1, memory_order_relaxed);
}

/* ---- segments of destroyed streams ----
 * A cached segment of a stream that was destroyed while some of its blocks were in use is
 * "dying": its blocks carry a key no stream has, which names the fence recorded on the dead
 * stream's last work (and holds one reference of it). Once the segment is whole and free again
 * it waits for that fence in a drain, then serves any stream. Without this the segment's free
 * blocks would wait for a stream that no longer exists. */
#define DYING_BIT ((uint64_t)1 << 62)

static uint64_t dying_key(cgc__fence_t* f) { return DYING_BIT | (uint64_t)(uintptr_t)f; }
static bool is_dying(uint64_t key) { return (key >> 62) == 1; } /* bit 62 without bit 63 */
static cgc__fence_t* dying_fence(uint64_t key) { return (cgc__fence_t*)(uintptr_t)(key & ~DYING_BIT); }

/* A new drain of one fence (its reference passes to the drain); NULL when out of host memory. */
static cgc__drain_t* new_drain(cgc__fence_t* f) {
  cgc__drain_t* d = calloc(1, sizeof *d);
  if (d != NULL && (d->fences = malloc(sizeof *d->fences)) == NULL) {
    free(d);
    d = NULL;
  }
  if (d != NULL) d->fences[d->n_fences++] = f;
  return d;
}

/* The dying segment `s` is whole and free again: it waits for its fence (lock held). */
static void drain_dying_segment(struct cgc__allocator* a, cgc__block_t* s) {
  cgc__fence_t* f = dying_fence(s->stream);
  cgc__block_set_t* set = cgc__state_set(&a->cache, s->small);
  cgc__set_erase(set, s);
  if (f->done) {
    s->stream = CGC_ANY_STREAM;
    cgc__fence_put(a, f);
  } else {
    cgc__drain_t* d = new_drain(f);
    if (d != NULL) {
      /* The drain holds the fence reference the dying key held: at its end the segment serves
       * any stream. */
      s->stream = CGC_ANY_STREAM;
      s->state = CGC_BLOCK_WAITING;
      s->next_waiting = NULL;
      d->segments = s;
      cgc__alloc_add_drain(a, d);
      return;
    }
    /* No memory for a drain: a key no one asks for; cgc_empty_cache takes it back. */
    s->stream = CGC__KEY_NO_STREAM(s);
    cgc__fence_put(a, f);
  }
  if (!cgc__set_insert(set, s)) cgc__log("out of host memory: a segment is lost");
}

/* Gives every block of the segment starting at `head` the dying key of `f` (lock held). */
static void mark_dying(cgc__block_t* head, cgc__fence_t* f) {
  uint64_t key = dying_key(f);
  for (cgc__block_t* x = head; x != NULL; x = x->next) {
    if (x->state == CGC_BLOCK_FREE) {
      cgc__block_set_t* set = cgc__state_set(x->owner, x->small);
      cgc__set_erase(set, x);
      x->stream = key;
      if (!cgc__set_insert(set, x)) cgc__log("out of host memory: a free block is lost");
    } else {
      x->stream = key;
    }
  }
  f->refs++;
}

static cgc__block_t* segment_head(cgc__block_t* b) {
  while (b->prev != NULL) b = b->prev;
  return b;
}

/* Drops the block's uses and their fences. */
static void drop_uses(struct cgc__allocator* a, cgc__block_t* b) {
  for (size_t i = 0; i < b->n_uses; i++)
    if (b->uses[i].fence != NULL) cgc__fence_put(a, b->uses[i].fence);
  b->n_uses = 0;
}

void cgc__alloc_release_block(struct cgc__allocator* a, cgc__block_t* b) {
  cgc__pool_state_t* owner = b->owner;
  owner->outstanding--;
  drop_uses(a, b);
  /* Small blocks go back as they are: freed and asked for again at the same size (the common
   * case) they cost no split and no merge; neighbours are merged when a request misses. Large
   * blocks are merged at once: activations that grow from graph to graph need the contiguous
   * space, and deferring their merges let best fit pick fragments (measured: 35 graphs captured
   * smallest-first into one pool reserved 130 MiB instead of 90). */
  bool dying = owner == &a->cache && is_dying(b->stream);
  cgc__block_t* merged = NULL;
  bool kept = b->small && !dying ? cgc__block_release_unmerged(b)
                                 : (merged = cgc__block_release(b, cgc__alloc_recycle_block, a)) != NULL;
  if (!kept) cgc__log("out of host memory: a free block is lost");
  if (dying && merged != NULL && cgc__block_is_segment(merged)) drain_dying_segment(a, merged);
  if (owner->pool != NULL) cgc__pool_dissolve_if_unused((cgc_pool_t)owner->pool);
}

static void settle_moved_segment(struct cgc__allocator* a, cgc__block_t* s, bool adopted);

/* ---- fences: recorded and queried outside the lock ---- */

/* An event for a new fence: a spare one, else a new one (context current). */
static CUevent take_event(struct cgc__allocator* a) {
  CUevent ev = NULL;
  cgc__alloc_lock(a);
  if (a->n_spare_events > 0) ev = a->spare_events[--a->n_spare_events];
  cgc__alloc_unlock(a);
  if (ev == NULL && CGC_DRV(cuEventCreate)(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) ev = NULL;
  return ev;
}

static void return_event(struct cgc__allocator* a, CUevent ev) {
  cgc__alloc_lock(a);
  give_event(a, ev);
  cgc__alloc_unlock(a);
}

/* A fence recorded now on `cu` (context current, `cu` not capturing); NULL on failure. */
cgc__fence_t* cgc__alloc_record_fence(struct cgc__allocator* a, CUstream cu) {
  CUevent ev = take_event(a);
  if (ev == NULL) return NULL;
  if (CGC_DRV(cuEventRecord)(ev, cu) != CUDA_SUCCESS) {
    return_event(a, ev);
    return NULL;
  }
  cgc__fence_t* f = cgc__fence_new(ev);
  if (f == NULL) return_event(a, ev);
  return f;
}

/* (lock held) Whether fences must wait: a capture of the device is under way (cgc's, being
 * begun included, or one a pool adopted), or a stream handle is settling its uses. An event
 * recorded on a stream that captures is captured, not run, and which of a capture's streams
 * capture only the driver knows; cgc never asks it about a stream whose capture another thread
 * may be ending (driver 580 crashes there). So, as PyTorch's allocator does, fences wait for the
 * end of every capture cgc knows of. */
static bool fences_must_wait(struct cgc__allocator* a) {
  CUstream origin;
  return a->ending_streams > 0 || a->adopting_pools > 0 || cgc__registry_count_on(a->dev, &origin) > 0;
}

void cgc__alloc_fence_and_park(struct cgc__allocator* a, cgc__block_t* b) {
  b->state = CGC_BLOCK_WAITING; /* ours alone (in no list) until parked below */
  if (!fences_must_wait(a)) {
    /* The lock is dropped while events are recorded (cuEventRecord can wait for the GPU); the
     * caller's count in a->fencing keeps every use stream alive meanwhile (stream_ending waits
     * for it) and keeps captures from beginning (cgc__alloc_wait_fencing). */
    cgc__alloc_unlock(a);
    cgc__ctx_scope_t scope;
    if (cgc__ctx_enter(a->dev, &scope, "cgc_free") == CGC_SUCCESS) {
      for (size_t i = 0; i < b->n_uses; i++) {
        struct cgc__block_use* u = &b->uses[i];
        if (u->fence != NULL) continue;
        /* A capture neither cgc began nor a pool adopts (a framework's, before its first
         * allocation adopts it) is known to the driver alone: its streams are asked. Safe here:
         * no capture cgc knows of is under way, so none is being ended by its owner (an
         * adopter ends its capture before its adoption), and an event recorded into a capture
         * would never complete eagerly (and could break it). */
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        if (u->cu != NULL &&
            CGC_DRV(cuStreamGetCaptureInfo)(u->cu, &status, NULL, NULL, NULL, NULL) != CUDA_SUCCESS)
          status = CU_STREAM_CAPTURE_STATUS_ACTIVE; /* cannot tell: keep waiting, never reuse early */
        if (status == CU_STREAM_CAPTURE_STATUS_NONE) u->fence = cgc__alloc_record_fence(a, u->cu);
      }
      cgc__ctx_leave(&scope);
    }
    cgc__alloc_lock(a);
  }
  bool settled = true;
  for (size_t i = 0; i < b->n_uses && settled; i++) settled = b->uses[i].fence != NULL;
  if (settled) {
    add_pending(a, b);
  } else {
    b->next_waiting = a->deferred;
    a->deferred = b;
  }
}

/* Records the fences deferred blocks still need, once no capture of the device is under way
 * (lock not held). Only slow paths call it (a cache miss, a free with uses, a capture's end,
 * cgc_empty_cache): recording waits behind other threads' cuMemFree on driver 580, which a
 * cache hit never does. */
static void settle_deferred(struct cgc__allocator* a) {
  cgc__alloc_lock(a);
  if (a->deferred != NULL && !fences_must_wait(a)) {
    cgc__block_t* list = a->deferred;
    a->deferred = NULL;
    a->fencing++;
    while (list != NULL) {
      cgc__block_t* b = list;
      list = b->next_waiting;
      cgc__alloc_fence_and_park(a, b);
    }
    a->fencing--;
  }
  cgc__alloc_unlock(a);
}

void cgc__alloc_settle_deferred(struct cgc__allocator* a) { settle_deferred(a); }

void cgc__alloc_wait_fencing(struct cgc__device* dev) {
  struct cgc__allocator* a = cgc__allocator_of(dev);
  if (a == NULL) return;
  for (;;) {
    cgc__alloc_lock(a);
    int fencing = a->fencing;
    cgc__alloc_unlock(a);
    if (fencing == 0) return;
    sched_yield();
  }
}

/* Adds `f` to the fences to query unless it is known done or already queued (lock held). */
static void collect_fence(cgc__fence_t* f, cgc__fence_t** list, size_t* n, size_t cap) {
  if (f == NULL || f->done || f->queued || *n == cap) return;
  f->queued = true;
  f->refs++; /* alive while it is queried without the lock */
  list[(*n)++] = f;
}

/* Settles what waits for finished work: deferred blocks get their fences, fences are queried
 * (outside the lock, in Relaxed mode), and blocks and drains whose fences have all completed are
 * released. True when something was released. */
static bool sweep(struct cgc__allocator* a, bool fence_deferred) {
  if (fence_deferred) settle_deferred(a);

  cgc__alloc_lock(a);
  size_t cap = 0;
  for (cgc__block_t* b = a->pending; b != NULL; b = b->next_waiting) cap += b->n_uses;
  for (cgc__drain_t* d = a->drains; d != NULL; d = d->next) cap += d->n_fences;
  if (cap == 0 && a->pending == NULL && a->drains == NULL) {
    cgc__alloc_unlock(a);
    return false;
  }
  cgc__fence_t** fences = cap ? malloc(cap * sizeof *fences) : NULL;
  size_t n = 0;
  if (fences != NULL) {
    for (cgc__block_t* b = a->pending; b != NULL; b = b->next_waiting)
      for (size_t i = 0; i < b->n_uses; i++) collect_fence(b->uses[i].fence, fences, &n, cap);
    for (cgc__drain_t* d = a->drains; d != NULL; d = d->next)
      for (size_t i = 0; i < d->n_fences; i++) collect_fence(d->fences[i], fences, &n, cap);
  }
  cgc__alloc_unlock(a);

  bool* done = n ? calloc(n, sizeof *done) : NULL;
  cgc__ctx_scope_t scope;
  if (done != NULL && cgc__ctx_enter(a->dev, &scope, "cgc_malloc") == CGC_SUCCESS) {
    CUstreamCaptureMode previous = cgc__relaxed_begin();
    /* An error also ends the wait: the work it waited for is gone. */
    for (size_t i = 0; i < n; i++) done[i] = CGC_DRV(cuEventQuery)(fences[i]->ev) != CUDA_ERROR_NOT_READY;
    cgc__relaxed_end(previous);
    cgc__ctx_leave(&scope);
  }

  bool released = false;
  cgc__alloc_lock(a);
  for (size_t i = 0; i < n; i++) {
    if (done != NULL && done[i]) fences[i]->done = true;
    fences[i]->queued = false;
    cgc__fence_put(a, fences[i]);
  }
  for (cgc__block_t** p = &a->pending; *p != NULL;) {
    cgc__block_t* b = *p;
    bool ready = true;
    for (size_t i = 0; i < b->n_uses && ready; i++) ready = b->uses[i].fence->done;
    if (!ready) {
      p = &b->next_waiting;
      continue;
    }
    *p = b->next_waiting;
    atomic_fetch_sub_explicit(&a->waiting, 1, memory_order_relaxed);
    cgc__alloc_release_block(a, b);
    released = true;
  }
  for (cgc__drain_t** p = &a->drains; *p != NULL;) {
    cgc__drain_t* d = *p;
    bool ready = true;
    for (size_t i = 0; i < d->n_fences && ready; i++) ready = d->fences[i]->done;
    if (!ready) {
      p = &d->next;
      continue;
    }
    *p = d->next;
    atomic_fetch_sub_explicit(&a->waiting, 1, memory_order_relaxed);
    for (size_t i = 0; i < d->n_fences; i++) cgc__fence_put(a, d->fences[i]);
    while (d->segments != NULL) {
      cgc__block_t* s = d->segments;
      d->segments = s->next_waiting;
      bool dying = is_dying(s->stream); /* its stream died meanwhile: it waits for that stream too */
      if (!d->keep_keys && !dying) s->stream = CGC_ANY_STREAM; /* its last user is done: any stream may take it */
      s->state = CGC_BLOCK_FREE;
      if (!cgc__set_insert(cgc__state_set(&a->cache, s->small), s)) cgc__log("out of host memory: a segment is lost");
      else if (dying) settle_moved_segment(a, s, false);
    }
    free(d->fences);
    free(d);
    released = true;
  }
  cgc__alloc_unlock(a);
  free(fences);
  free(done);
  return released;
}

/* ---- segments ---- */

/* Gives every whole free segment of the device cache back to the driver; cuMemFree runs
 * without the lock and in Relaxed mode. Returns the bytes given back. */
static size_t release_cached_segments(struct cgc__allocator* a) {
  cgc__block_t* taken = NULL;
  cgc__alloc_lock(a);
  cgc__state_coalesce(&a->cache, cgc__alloc_recycle_block, a);
  cgc__block_set_t* sets[2] = {&a->cache.small, &a->cache.large};
  for (int s = 0; s < 2; s++) {
    cgc__block_set_t* set = sets[s];
    for (size_t i = 0; i < set->n;) {
      cgc__block_t* b = set->items[i];
      if (!cgc__block_is_segment(b) || is_dying(b->stream)) { /* a dying one waits for its fence */
        i++;
        continue;
      }
      cgc__set_erase(set, b);
      b->state = CGC_BLOCK_WAITING; /* ours alone until given back */
      b->next_waiting = taken;
      taken = b;
    }
  }
  cgc__alloc_unlock(a);
  if (taken == NULL) return 0;

  cgc__block_t *freed = NULL, *failed = NULL;
  cgc__ctx_scope_t scope;
  bool in_ctx = cgc__ctx_enter(a->dev, &scope, "cgc_empty_cache") == CGC_SUCCESS;
  CUstreamCaptureMode previous = cgc__relaxed_begin();
  while (taken != NULL) {
    cgc__block_t* b = taken;
    taken = b->next_waiting;
    bool ok = in_ctx && CGC_DRV(cuMemFree)(b->ptr) == CUDA_SUCCESS;
    b->next_waiting = ok ? freed : failed;
    if (ok)
      freed = b;
    else
      failed = b;
  }
  cgc__relaxed_end(previous);
  if (in_ctx) cgc__ctx_leave(&scope);

  size_t released = 0;
  cgc__alloc_lock(a);
  while (freed != NULL) {
    cgc__block_t* b = freed;
    freed = b->next_waiting;
    released += b->size;
    cgc__stats_add_reserved(&a->cache.stats, -(long long)b->size);
    cgc__stats_add_reserved(&a->total, -(long long)b->size);
    a->cache.stats.driver_frees++;
    a->total.driver_frees++;
    cgc__alloc_recycle_block(b, a);
  }
  while (failed != NULL) { /* kept cached: nothing is lost */
    cgc__block_t* b = failed;
    failed = b->next_waiting;
    b->state = CGC_BLOCK_FREE;
    if (!cgc__set_insert(cgc__state_set(&a->cache, b->small), b)) cgc__log("out of host memory: a segment is lost");
  }
  cgc__alloc_unlock(a);
  return released;
}

/* ---- malloc ---- */

/* A whole free segment of key CGC_ANY_STREAM for `rounded` bytes, made `key`'s and cut to size
 * (lock held); NULL without one. */
static cgc__block_t* take_any_stream_segment(struct cgc__allocator* a, cgc__block_set_t* set, uint64_t key,
                                             size_t rounded) {
  cgc__block_t* b = cgc__set_take_best_fit(set, CGC_ANY_STREAM, rounded, NULL, NULL);
  if (b == NULL) return NULL;
  b->stream = key;
  if (cgc__should_split(b->small, b->size, rounded)) {
    cgc__block_t* spare = new_block_struct(a);
    if (spare != NULL && !cgc__block_split(b, rounded, spare)) cgc__alloc_recycle_block(spare, a);
  }
  return b;
}

/* A block of an arena (an NCCL pool's fixed memory) for `rounded` bytes of `key`: the stream's own
 * free memory first, else a piece of the memory no stream has used yet (cut first, keyed after,
 * so the remainder stays unowned). Cut to the request whenever 512 bytes or more are left: the
 * arena never grows, so the size classes' habit of handing out up to 1 MiB more than asked would
 * waste its capacity. All its blocks are large-class. Lock held. */
static cgc__block_t* take_from_arena(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key, size_t rounded) {
  cgc__block_set_t* set = &pool->state.large;
  if (pool->deferred != NULL) cgc__pool_reclaim_joined(pool);
  cgc__block_t* b = cgc__set_take_best_fit(set, key, rounded, NULL, NULL);
  if (b == NULL && cgc__state_coalesce(&pool->state, cgc__alloc_recycle_block, a) > 0)
    b = cgc__set_take_best_fit(set, key, rounded, NULL, NULL);
  if (b == NULL) b = cgc__set_take_best_fit(set, CGC_ANY_STREAM, rounded, NULL, NULL);
  if (b == NULL) return NULL;
  if (b->size - rounded >= CGC_BLOCK_ALIGN) {
    cgc__block_t* spare = new_block_struct(a);
    if (spare != NULL && !cgc__block_split(b, rounded, spare)) cgc__alloc_recycle_block(spare, a);
  }
  b->stream = key;
  return b;
}

/* A free block of `key` for `rounded` bytes from the pool or the device cache, or NULL (lock
 * held). */
static cgc__block_t* take_cached(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key, size_t rounded) {
  if (pool != NULL && pool->arena != NULL) return take_from_arena(a, pool, key, rounded);
  cgc__pool_state_t* owner = pool ? &pool->state : &a->cache;
  bool small = cgc__is_small(rounded);
  cgc__block_set_t* set = cgc__state_set(owner, small);
  if (pool != NULL && pool->deferred != NULL) cgc__pool_reclaim_joined(pool);
  cgc__block_t* b = cgc__set_take_best_fit(set, key, rounded, new_block_struct, a);
  if (b == NULL && cgc__state_coalesce(owner, cgc__alloc_recycle_block, a) > 0)
    b = cgc__set_take_best_fit(set, key, rounded, new_block_struct, a);
  if (b == NULL && pool != NULL && small) {
    /* A private pool holds its memory for its graphs anyway: a small request may be cut from a
     * free large block rather than grow the pool by a 2 MiB small segment. Graphs captured
     * largest-first into one pool then fit in the first one's memory (PyTorch keeps the two
     * classes apart here too; the device cache still does). The piece stays large-class. */
    b = cgc__set_take_best_fit(&owner->large, key, rounded, new_block_struct, a);
  }
  /* A whole segment of the cache that any stream may take, its last user being done (a
   * dissolved pool's, a dead stream's): it becomes this stream's. */
  if (b == NULL && pool == NULL) b = take_any_stream_segment(a, set, key, rounded);
  return b;
}

/* Hands `b` out (lock held). False when out of host memory (b is released again). */
static bool hand_out(struct cgc__allocator* a, cgc__block_t* b, size_t size) {
  if (!cgc__map_put(&a->live, b)) {
    cgc__block_release(b, cgc__alloc_recycle_block, a);
    return false;
  }
  b->state = CGC_BLOCK_ALLOCATED;
  b->requested = size;
  b->n_uses = 0;
  b->capture_id = b->owner->pool != NULL ? ((cgc_pool_t)b->owner->pool)->capture_id : 0;
  b->owner->outstanding++;
  cgc__alloc_account(a, b, (long long)b->size);
  return true;
}

/* A new segment from the driver for `rounded` bytes of `key`, owned by the pool or the cache;
 * on success returns with the lock held and *out cut to size. The driver calls run without
 * the lock; on OUT_OF_MEMORY the cache's free segments are given back and the call retried. */
static cgc_status_t new_segment(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key, size_t rounded,
                                cgc__block_t** out, const char* func) {
  size_t size = cgc__segment_size(rounded);
  cgc__ctx_scope_t scope = {false};
  CUdeviceptr p = 0;
  cgc_status_t st;
  cgc__alloc_lock(a);
  cgc__block_t* b = new_block_struct(a); /* taken first: nothing to undo on the device later */
  cgc__alloc_unlock(a);
  if (b == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto fail;
  }
  st = cgc__ctx_enter(a->dev, &scope, func);
  if (st != CGC_SUCCESS) goto fail;
  CUresult r = cgc__relaxed_mem_alloc(&p, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    sweep(a, true);
    if (release_cached_segments(a) > 0) r = cgc__relaxed_mem_alloc(&p, size);
  }
  if (r != CUDA_SUCCESS) {
    st = cgc__cu_fail(r, func, "cuMemAlloc");
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free_bytes = 0, total_bytes = 0;
      CGC_DRV(cuMemGetInfo)(&free_bytes, &total_bytes);
      cgc__alloc_lock(a);
      size_t reserved = a->total.reserved, allocated = a->total.allocated;
      cgc__alloc_unlock(a);
      cgc__append("; tried to allocate %zu bytes (a segment of %zu) on device %d, which has %zu bytes free of "
                  "%zu; cgc holds %zu reserved, %zu allocated (its free cached segments were given back first)",
                  rounded, size, a->dev->ordinal, free_bytes, total_bytes, reserved, allocated);
    }
    goto fail;
  }
  cgc__ctx_leave(&scope);
  cgc__alloc_lock(a);
  cgc__pool_state_t* owner = pool ? &pool->state : &a->cache;
  cgc__block_init(b, p, size, key, owner, cgc__is_small(rounded));
  cgc__stats_add_reserved(&owner->stats, (long long)size);
  cgc__stats_add_reserved(&a->total, (long long)size);
  owner->stats.driver_allocs++;
  a->total.driver_allocs++;
  if (cgc__should_split(b->small, b->size, rounded)) {
    cgc__block_t* spare = new_block_struct(a);
    if (spare != NULL && !cgc__block_split(b, rounded, spare)) cgc__alloc_recycle_block(spare, a);
  }
  *out = b;
  return CGC_SUCCESS;

fail:
  cgc__ctx_leave(&scope);
  if (b != NULL) {
    cgc__alloc_lock(a);
    cgc__alloc_recycle_block(b, a);
    cgc__alloc_unlock(a);
  }
  return st;
}

static cgc_status_t refuse_foreign_capture(const cgc__stream_ref_t* ref, const char* func) {
  /* An invalidated capture has no id left to find it by, cgc's or not: say what happened. */
  if (ref->invalidated) return cgc__refuse_invalidated(ref, "an allocation", func);
  return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                   "stream %p is capturing (capture id %llu) under a capture cgc did not begin: its allocation "
                   "cannot come from the eager cache, whose blocks eager work reuses while the graph's replays "
                   "still use them. Begin the capture with cgc_capture_begin (or cgc.graph), or allocate "
                   "before the capture, or let a pool adopt the capture (cgc_pool_adopt_capture; with PyTorch: "
                   "cgc.use_as_torch_allocator() does it for torch.cuda.graph)",
                   (void*)ref->cu, (unsigned long long)ref->capture_id);
}

/* A pool of fixed memory (an NCCL pool's registered arena) has no segment to grow by: a miss is
 * out of memory, with its capacity in the message. */
static cgc_status_t arena_full(struct cgc__allocator* a, cgc_pool_t pool, size_t rounded, const char* func) {
  cgc__alloc_lock(a);
  size_t capacity = pool->arena->size, allocated = pool->state.stats.allocated;
  cgc__alloc_unlock(a);
  return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func,
                   "pool %p is a fixed arena of %zu bytes (registered with a communicator: it never grows) with "
                   "%zu allocated; no free block of %zu bytes is left for this stream: create the pool larger",
                   (void*)pool, capacity, allocated, rounded);
}

/* A whole free segment of `pool` that a destroyed stream left (its dying key), once that stream's
 * last work is done: it becomes `key`'s and is cut to `rounded` (lock not held on entry; held on
 * return with the block, not held on NULL). Its fence is queried under the lock, which
 * cuEventQuery allows (it never waits: CGC_DRIVER_NEVER_WAITS), with the context current. */
static cgc__block_t* take_dead_stream_segment(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key,
                                              size_t rounded) {
  cgc__ctx_scope_t scope;
  if (cgc__ctx_enter(a->dev, &scope, "cgc_malloc") != CGC_SUCCESS) return NULL;
  cgc__alloc_lock(a);
  cgc__block_t* found = NULL;
  for (int small = 0; small < 2 && found == NULL; small++) {
    cgc__block_set_t* set = cgc__state_set(&pool->state, small);
    for (size_t i = 0; i < set->n && found == NULL; i++) {
      cgc__block_t* b = set->items[i];
      if (!is_dying(b->stream) || !cgc__block_is_segment(b) || b->size < rounded) continue;
      cgc__fence_t* f = dying_fence(b->stream);
      if (!f->done) f->done = CGC_DRV(cuEventQuery)(f->ev) != CUDA_ERROR_NOT_READY;
      if (f->done) found = b;
    }
  }
  if (found != NULL) {
    cgc__block_set_t* set = cgc__state_set(&pool->state, found->small);
    cgc__set_erase(set, found);
    cgc__fence_put(a, dying_fence(found->stream));
    found->stream = key;
    if (cgc__should_split(found->small, found->size, rounded)) {
      cgc__block_t* spare = new_block_struct(a);
      if (spare != NULL && !cgc__block_split(found, rounded, spare)) cgc__alloc_recycle_block(spare, a);
    }
  }
  if (found == NULL) cgc__alloc_unlock(a);
  cgc__ctx_leave(&scope);
  return found;
}

/* The rest of an allocation once its owner is known (lock held on entry, released on return):
 * a cached block, else (without the lock) finished memory settled, else a new segment. `eager`:
 * a block cgc_pool_malloc hands out from `pool` outside its captures. */
static cgc_status_t take_or_grow(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key, size_t size, bool eager,
                                 void** out, const char* func) {
  size_t rounded = cgc__round_size(size);
  cgc__block_t* b = take_cached(a, pool, key, rounded);
  cgc_status_t st = CGC_SUCCESS;
  if (b == NULL) {
    /* The slow path runs without the lock; the pool is held meanwhile, so that a capture ended
     * on another thread cannot dissolve it under us. */
    if (pool != NULL) pool->internal_refs++;
    bool settle = a->pending != NULL || a->drains != NULL || a->deferred != NULL;
    cgc__alloc_unlock(a);
    if (settle && sweep(a, true)) {
      cgc__alloc_lock(a);
      b = take_cached(a, pool, key, rounded);
      if (b == NULL) cgc__alloc_unlock(a);
    }
    if (b == NULL && pool != NULL && pool->arena == NULL) b = take_dead_stream_segment(a, pool, key, rounded);
    if (b == NULL) st = pool != NULL && pool->arena != NULL ? arena_full(a, pool, rounded, func)
                                                            : new_segment(a, pool, key, rounded, &b, func);
    if (st != CGC_SUCCESS) cgc__alloc_lock(a);
    if (pool != NULL) pool->internal_refs--; /* lock held here on every path */
  }
  if (st == CGC_SUCCESS && !hand_out(a, b, size)) st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  if (st == CGC_SUCCESS) {
    if (eager) b->capture_id = 0; /* not the capture its pool may be recording meanwhile */
    *out = (void*)(uintptr_t)b->ptr;
  }
  if (pool != NULL) cgc__pool_dissolve_if_unused(pool);
  cgc__alloc_unlock(a);
  last_used = a;
  return st;
}

cgc_status_t cgc__malloc(struct cgc__device* dev, size_t size, const cgc__stream_ref_t* ref, void** out,
                         const char* func) {
  *out = NULL;
  if (size == 0) return CGC_SUCCESS; /* like cudaMalloc(0): no memory, NULL, success */
  if (size > ((size_t)1 << 62)) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes", size);
  struct cgc__allocator* a = cgc__allocator_of(dev);
  if (a == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  /* The hit path only queries fences (cuEventQuery never waits); recording deferred ones is the
   * miss path's (take_or_grow). */
  if (atomic_load_explicit(&a->waiting, memory_order_relaxed) > 0) sweep(a, false);
  cgc_pool_t pool = NULL;
  cgc__alloc_lock(a);
  if (ref->capturing) {
    pool = cgc__pool_recording(a, ref);
    if (pool == NULL) {
      cgc__alloc_unlock(a);
      return refuse_foreign_capture(ref, func);
    }
  }
  return take_or_grow(a, pool, ref->key, size, false, out, func);
}

cgc_status_t cgc__pool_malloc(cgc_pool_t pool, size_t size, const cgc__stream_ref_t* ref, void** out,
                              const char* func) {
  *out = NULL;
  if (size == 0) return CGC_SUCCESS;
  if (size > ((size_t)1 << 62)) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes", size);
  struct cgc__allocator* a = pool->state.allocator;
  if (atomic_load_explicit(&a->waiting, memory_order_relaxed) > 0) sweep(a, false);
  cgc__alloc_lock(a);
  /* Checked again under the lock: another thread may have released the last reference. */
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, func, "pool");
  if (st != CGC_SUCCESS) {
    cgc__alloc_unlock(a);
    return st;
  }
  return take_or_grow(a, pool, CGC__KEY_POOL_EAGER(ref->key), size, true, out, func);
}

/* The allocator whose map holds `ptr`, with its lock held, and the block; NULL when none. */
struct cgc__allocator* cgc__alloc_find(void* ptr, cgc__block_t** out) {
  uint64_t key = (uint64_t)(uintptr_t)ptr;
  struct cgc__allocator* first = last_used;
  if (first != NULL) {
    cgc__alloc_lock(first);
    if ((*out = cgc__map_get(&first->live, key)) != NULL) return first;
    cgc__alloc_unlock(first);
  }
  int n = atomic_load(&n_allocators);
  for (int i = 0; i < n && i < kMaxAllocators; i++) {
    struct cgc__allocator* a = atomic_load_explicit(&allocators[i], memory_order_acquire);
    if (a == NULL || a == first) continue;
    cgc__alloc_lock(a);
    if ((*out = cgc__map_get(&a->live, key)) != NULL) return a;
    cgc__alloc_unlock(a);
  }
  *out = NULL;
  return NULL;
}

struct cgc__allocator* cgc__alloc_free_plain(void* ptr, bool* has_uses) {
  uint64_t key = (uint64_t)(uintptr_t)ptr;
  struct cgc__allocator* first = last_used;
  int n = atomic_load(&n_allocators);
  *has_uses = false;
  for (int i = -1; i < n && i < kMaxAllocators; i++) {
    struct cgc__allocator* a = i < 0 ? first : atomic_load_explicit(&allocators[i], memory_order_acquire);
    if (a == NULL || (i >= 0 && a == first)) continue;
    cgc__alloc_lock(a);
    cgc__block_t* b = cgc__map_take(&a->live, key);
    if (b == NULL) {
      cgc__alloc_unlock(a);
      continue;
    }
    *has_uses = b->n_uses > 0;
    if (*has_uses) {
      cgc__map_put(&a->live, b); /* cannot fail: its slot was just freed */
    } else {
      cgc__alloc_account(a, b, -(long long)b->size);
      cgc__pool_note_free(b);
      cgc__alloc_release_block(a, b);
    }
    cgc__alloc_unlock(a);
    last_used = a;
    return a;
  }
  return NULL;
}

/* ---- a stream going away ---- */

static bool is_use_of(const struct cgc__block_use* u, const cgc__stream_ref_t* ref) {
  /* By key, or by address: no other live stream has this one's address while it exists. */
  return u->fence == NULL && (u->key == ref->key || (ref->cu != NULL && u->cu == ref->cu));
}

static bool owes_uses(const cgc__block_t* b, const cgc__stream_ref_t* ref) {
  for (size_t i = 0; i < b->n_uses; i++)
    if (is_use_of(&b->uses[i], ref)) return true;
  return false;
}

static void attach_fence(cgc__block_t* b, const cgc__stream_ref_t* ref, cgc__fence_t* f) {
  for (size_t i = 0; i < b->n_uses; i++) {
    if (!is_use_of(&b->uses[i], ref)) continue;
    b->uses[i].fence = f;
    f->refs++;
  }
}

/* Whether any block owes `ref` a fence (allocated blocks, deferred ones, and those deferred by
 * recording pools); with `f`, attaches it to each such use (lock held). */
static bool visit_owing(struct cgc__allocator* a, const cgc__stream_ref_t* ref, cgc__fence_t* f) {
  bool any = false;
  if (a->blocks_with_uses > 0) {
    for (size_t i = 0; i < a->live.cap; i++) {
      cgc__block_t* b = a->live.slots[i];
      if (b == NULL || b->n_uses == 0 || !owes_uses(b, ref)) continue;
      any = true;
      if (f != NULL) attach_fence(b, ref, f);
    }
  }
  for (cgc__block_t* b = a->deferred; b != NULL; b = b->next_waiting) {
    if (!owes_uses(b, ref)) continue;
    any = true;
    if (f != NULL) attach_fence(b, ref, f);
  }
  for (cgc_pool_t p = a->recording; p != NULL; p = p->next_recording) {
    for (cgc__block_t* b = p->deferred; b != NULL; b = b->next_waiting) {
      if (!owes_uses(b, ref)) continue;
      any = true;
      if (f != NULL) attach_fence(b, ref, f);
    }
  }
  return any;
}

/* Whether the cache holds any block of stream `key`, free or in use (lock held). */
static bool has_stream_blocks(struct cgc__allocator* a, uint64_t key) {
  if (cgc__set_best_fit(&a->cache.small, key, 0) != NULL || cgc__set_best_fit(&a->cache.large, key, 0) != NULL)
    return true;
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b != NULL && b->owner == &a->cache && b->stream == key) return true;
  }
  for (cgc__block_t* b = a->pending; b != NULL; b = b->next_waiting)
    if (b->owner == &a->cache && b->stream == key) return true;
  for (cgc__block_t* b = a->deferred; b != NULL; b = b->next_waiting)
    if (b->owner == &a->cache && b->stream == key) return true;
  return false;
}

/* Whether pool block `b` is of the dead stream `key` (its captures' or cgc_pool_malloc's), in a
 * pool of driver segments (an arena's pieces of several streams share its one segment: they stay
 * the stream's until the arena's release). */
static bool pool_block_of(const cgc__block_t* b, uint64_t key) {
  cgc_pool_t pool = b->owner->pool;
  return pool != NULL && pool->arena == NULL && (b->stream == key || b->stream == CGC__KEY_POOL_EAGER(key));
}

/* The pools' segments of the dead stream `key` become dying (lock held): the memory a capture on
 * that stream left in its pool (an output freed after the stream was destroyed, say), or its
 * cgc_pool_malloc blocks, then waits for the stream's last work, not for a stream that will never
 * come, once its pool dissolves. */
static void retire_pool_segments(struct cgc__allocator* a, uint64_t key, cgc__fence_t* f) {
  for (cgc_pool_t p = a->pools; p != NULL; p = p->next_pool) {
    if (p->arena != NULL) continue;
    uint64_t keys[2] = {key, CGC__KEY_POOL_EAGER(key)};
    for (int k = 0; k < 2; k++)
      for (int small = 0; small < 2; small++) {
        cgc__block_t* b;
        while ((b = cgc__set_best_fit(cgc__state_set(&p->state, small), keys[k], 0)) != NULL && b->stream == keys[k])
          mark_dying(segment_head(b), f);
      }
    for (cgc__block_t* b = p->deferred; b != NULL; b = b->next_waiting)
      if (pool_block_of(b, key)) mark_dying(segment_head(b), f);
  }
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b != NULL && pool_block_of(b, key)) mark_dying(segment_head(b), f);
  }
  cgc__block_t* lists[2] = {a->pending, a->deferred};
  for (int l = 0; l < 2; l++)
    for (cgc__block_t* b = lists[l]; b != NULL; b = b->next_waiting)
      if (pool_block_of(b, key)) mark_dying(segment_head(b), f);
}

/* Whether a pool holds a block of stream `key` (lock held). */
static bool pools_have_stream_blocks(struct cgc__allocator* a, uint64_t key) {
  for (cgc_pool_t p = a->pools; p != NULL; p = p->next_pool) {
    if (p->arena != NULL) continue;
    for (int small = 0; small < 2; small++)
      if (cgc__set_best_fit(cgc__state_set(&p->state, small), key, 0) != NULL ||
          cgc__set_best_fit(cgc__state_set(&p->state, small), CGC__KEY_POOL_EAGER(key), 0) != NULL)
        return true;
    for (cgc__block_t* b = p->deferred; b != NULL; b = b->next_waiting)
      if (pool_block_of(b, key)) return true;
  }
  for (size_t i = 0; i < a->live.cap; i++)
    if (a->live.slots[i] != NULL && pool_block_of(a->live.slots[i], key)) return true;
  for (cgc__block_t* b = a->pending; b != NULL; b = b->next_waiting)
    if (pool_block_of(b, key)) return true;
  for (cgc__block_t* b = a->deferred; b != NULL; b = b->next_waiting)
    if (pool_block_of(b, key)) return true;
  return false;
}

/* The cached segments of the dead stream `key`: whole free ones wait for `f` in a drain, the
 * others become dying (lock held). */
static void retire_stream_segments(struct cgc__allocator* a, uint64_t key, cgc__fence_t* f) {
  cgc__drain_t* whole = NULL;
  cgc__block_set_t* sets[2] = {&a->cache.small, &a->cache.large};
  for (int s = 0; s < 2; s++) {
    cgc__block_t* b;
    while ((b = cgc__set_best_fit(sets[s], key, 0)) != NULL) {
      cgc__block_t* head = segment_head(b);
      if (cgc__block_is_segment(head) && (whole != NULL || (whole = new_drain(f)) != NULL)) {
        if (whole->segments == NULL) f->refs++; /* the drain's reference */
        cgc__set_erase(sets[s], b);
        b->state = CGC_BLOCK_WAITING;
        b->next_waiting = whole->segments;
        whole->segments = b;
      } else {
        mark_dying(head, f);
      }
    }
  }
  if (whole != NULL) {
    if (whole->segments != NULL) {
      cgc__alloc_add_drain(a, whole);
    } else {
      free(whole->fences);
      free(whole);
    }
  }
  /* Segments in use everywhere: found through their allocated and waiting blocks. */
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b != NULL && b->owner == &a->cache && b->stream == key) mark_dying(segment_head(b), f);
  }
  cgc__block_t* lists[2] = {a->pending, a->deferred};
  for (int l = 0; l < 2; l++)
    for (cgc__block_t* b = lists[l]; b != NULL; b = b->next_waiting)
      if (b->owner == &a->cache && b->stream == key) mark_dying(segment_head(b), f);
  retire_pool_segments(a, key, f);
}

cgc_status_t cgc__alloc_stream_ending(struct cgc__device* dev, const cgc__stream_ref_t* ref, const char* func) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a == NULL) return CGC_SUCCESS;
  /* First no free may start recording fences (they defer meanwhile), and those recording now
   * finish: then every freed block with a use of this stream is in a list, where the fence
   * below reaches it, and no block leaves a list to be fenced on the stream once it is gone. */
  cgc__alloc_lock(a);
  a->ending_streams++;
  cgc__alloc_unlock(a);
  cgc__alloc_wait_fencing(dev);
  cgc__alloc_lock(a);
  cgc__state_coalesce(&a->cache, cgc__alloc_recycle_block, a);
  bool needed = visit_owing(a, ref, NULL) || has_stream_blocks(a, ref->key) || pools_have_stream_blocks(a, ref->key);
  cgc__alloc_unlock(a);
  cgc_status_t st = CGC_SUCCESS;
  if (needed) {
    /* One fence on the stream's last work settles every use of it, and its segments go to
     * other streams once that work is done. */
    cgc__ctx_scope_t scope;
    cgc__fence_t* f = NULL;
    st = cgc__ctx_enter(dev, &scope, func);
    if (st == CGC_SUCCESS) {
      f = cgc__alloc_record_fence(a, ref->cu);
      cgc__ctx_leave(&scope);
      if (f == NULL)
        st = cgc__fail(CGC_ERROR_CUDA, func,
                       "recording an event on stream %p (for the memory cgc keeps for it) failed: the stream was "
                       "not destroyed",
                       (void*)ref->cu);
    }
    if (f != NULL) {
      cgc__alloc_lock(a);
      /* Coalesced here, in the same critical section: free runs are whole before they are
       * marked, so the last free of a dying segment finds it whole. */
      cgc__state_coalesce(&a->cache, cgc__alloc_recycle_block, a);
      visit_owing(a, ref, f);
      retire_stream_segments(a, ref->key, f);
      /* Deferred blocks whose last unsettled use was this stream can wait on the pending list. */
      for (cgc__block_t** p = &a->deferred; *p != NULL;) {
        cgc__block_t* b = *p;
        bool settled = true;
        for (size_t i = 0; i < b->n_uses && settled; i++) settled = b->uses[i].fence != NULL;
        if (!settled) {
          p = &b->next_waiting;
          continue;
        }
        *p = b->next_waiting;
        add_pending(a, b);
      }
      cgc__fence_put(a, f);
      cgc__alloc_unlock(a);
    }
  }
  cgc__alloc_lock(a);
  a->ending_streams--;
  cgc__alloc_unlock(a);
  return st;
}

/* ---- a conditional body ending ---- */

/* A block of `key` owned by `state`: free, allocated or waiting in `pool`'s deferred list (lock
 * held); NULL when none is left. */
static cgc__block_t* block_of_key(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key) {
  for (int small = 0; small < 2; small++) {
    cgc__block_t* b = cgc__set_best_fit(cgc__state_set(&pool->state, small), key, 0);
    if (b != NULL) return b;
  }
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b != NULL && b->owner == &pool->state && b->stream == key) return b;
  }
  for (cgc__block_t* b = pool->deferred; b != NULL; b = b->next_waiting)
    if (b->stream == key) return b;
  return NULL;
}

void cgc__alloc_body_ended(struct cgc__device* dev, uint64_t capture_id, uint64_t body_key, uint64_t outer_key) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a == NULL || body_key == 0 || body_key == outer_key) return;
  cgc__alloc_lock(a);
  cgc_pool_t pool = NULL;
  for (cgc_pool_t p = a->recording; p != NULL && pool == NULL; p = p->next_recording)
    if (p->capture_id == capture_id) pool = p;
  /* Every block of a segment carries the segment's key: whole segments pass to the outer stream,
   * free blocks moving to their new place in the sorted sets. */
  for (cgc__block_t* b; pool != NULL && (b = block_of_key(a, pool, body_key)) != NULL;) {
    while (b->prev != NULL) b = b->prev;
    for (; b != NULL; b = b->next) {
      if (b->stream != body_key) continue; /* an arena's other streams' blocks (a segment's: none) */
      bool in_set = b->state == CGC_BLOCK_FREE;
      cgc__block_set_t* set = cgc__state_set(b->owner, b->small);
      if (in_set) cgc__set_erase(set, b);
      b->stream = outer_key;
      if (in_set && !cgc__set_insert(set, b)) cgc__log("out of host memory: a free block of a pool is lost");
    }
  }
  cgc__alloc_unlock(a);
}

/* ---- giving memory back ---- */

/* Sweeps until nothing more is released: a released block can dissolve a pool, whose segments
 * then wait in a new drain that the next sweep settles. */
static void settle_finished(struct cgc__allocator* a) {
  for (int i = 0; i < 8 && sweep(a, true); i++) {
  }
}

void cgc__alloc_trim(struct cgc__device* dev) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a == NULL) return;
  cgc__alloc_give_back(a);
  cgc__alloc_lock(a);
  CUevent* events = a->spare_events;
  size_t n = a->n_spare_events;
  a->spare_events = NULL;
  a->n_spare_events = a->cap_spare_events = 0;
  cgc__alloc_unlock(a);
  for (size_t i = 0; i < n; i++) CGC_DRV(cuEventDestroy)(events[i]);
  free(events);
}


void cgc__alloc_settle(struct cgc__allocator* a) { settle_finished(a); }

void cgc__alloc_give_back(struct cgc__allocator* a) {
  settle_finished(a);
  release_cached_segments(a);
}

/* ---- pool state (lock held) ---- */

void cgc__alloc_pool_link(struct cgc__allocator* a, cgc_pool_t pool) {
  pool->prev_pool = NULL;
  pool->next_pool = a->pools;
  if (a->pools != NULL) a->pools->prev_pool = pool;
  a->pools = pool;
}

void cgc__alloc_pool_unlink(struct cgc__allocator* a, cgc_pool_t pool) {
  if (pool->prev_pool != NULL)
    pool->prev_pool->next_pool = pool->next_pool;
  else if (a->pools == pool)
    a->pools = pool->next_pool;
  if (pool->next_pool != NULL) pool->next_pool->prev_pool = pool->prev_pool;
  pool->prev_pool = pool->next_pool = NULL;
}

/* A whole free segment that moved from a dissolved pool into the cache (in its set): one whose
 * stream died meanwhile (its dying key) waits for that stream's last work, then serves any
 * stream; one of an adopted pool never serves another stream (a key none has). */
static void settle_moved_segment(struct cgc__allocator* a, cgc__block_t* s, bool adopted) {
  if (!is_dying(s->stream)) return;
  if (adopted) {
    cgc__block_set_t* set = cgc__state_set(&a->cache, s->small);
    cgc__set_erase(set, s);
    cgc__fence_put(a, dying_fence(s->stream));
    s->stream = CGC__KEY_NO_STREAM(s);
    if (!cgc__set_insert(set, s)) cgc__log("out of host memory: a segment is lost");
    return;
  }
  drain_dying_segment(a, s);
}

/* Moves the pool's blocks (all free) into the device cache and frees the pool (lock held), once
 * the graphs' last replays are over (in a drain while they may run). Memory only its graphs
 * used then serves any stream. Memory eager work used too (an output freed after its capture:
 * `escaped`) serves the stream each segment was allocated on, as eagerly freed memory does:
 * that is the stream its free was ordered on. */
static void dissolve(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__state_coalesce(&pool->state, cgc__alloc_recycle_block, a);
  cgc__drain_t* drain = NULL;
  bool had_fences = pool->n_fences > 0;
  if (had_fences && !pool->adopted && (drain = calloc(1, sizeof *drain)) != NULL) {
    drain->fences = pool->fences;
    drain->n_fences = pool->n_fences;
    drain->keep_keys = pool->escaped;
    pool->fences = NULL;
    pool->n_fences = 0;
  }
  cgc__block_set_t* sets[2] = {&pool->state.small, &pool->state.large};
  for (int s = 0; s < 2; s++) {
    for (size_t i = 0; i < sets[s]->n; i++) {
      cgc__block_t* b = sets[s]->items[i];
      b->owner = &a->cache;
      b->stream &= ~CGC__KEY_POOL_EAGER_BIT; /* cgc_pool_malloc's blocks: their stream's, like the rest */
      cgc__stats_add_reserved(&a->cache.stats, (long long)b->size);
      if (drain != NULL) {
        b->state = CGC_BLOCK_WAITING;
        b->next_waiting = drain->segments;
        drain->segments = b;
        continue;
      }
      /* With fences but no memory for a drain, or graphs cgc does not see (an adopted capture's):
       * a key no stream has (only cgc_empty_cache, whose cuMemFree waits for the device, takes it
       * back). A segment of a stream destroyed meanwhile keeps its dying key: settled below. */
      if (is_dying(b->stream)) {
        if (!cgc__set_insert(cgc__state_set(&a->cache, b->small), b)) cgc__log("out of host memory: a segment is lost");
        else settle_moved_segment(a, b, pool->adopted || had_fences);
        continue;
      }
      if (had_fences || pool->adopted)
        b->stream = CGC__KEY_NO_STREAM(pool);
      else if (!pool->escaped)
        b->stream = CGC_ANY_STREAM;
      if (!cgc__set_insert(cgc__state_set(&a->cache, b->small), b)) cgc__log("out of host memory: a segment is lost");
    }
    cgc__set_free(sets[s]);
  }
  if (drain != NULL) cgc__alloc_add_drain(a, drain);
  for (size_t i = 0; i < pool->n_fences; i++) cgc__fence_put(a, pool->fences[i]);
  free(pool->fences);
  cgc__log("pool %p dissolved: %zu bytes back to device %d's cache%s", (void*)pool, pool->state.stats.reserved,
           pool->dev->ordinal, drain != NULL ? " once its graphs' last replays are done" : "");
  cgc__alloc_pool_unlink(a, pool);
  cgc__retire(pool);
}

void cgc__pool_dissolve_if_unused(cgc_pool_t pool) {
  /* An arena pool ends only in its collective release (pool.c), never by itself. */
  if (pool->user_refs + pool->internal_refs > 0 || pool->arena != NULL) return;
  pool->magic = CGC_MAGIC_DEAD; /* no caller may reach it any more */
  if (pool->state.outstanding == 0 && !pool->recording && pool->deferred == NULL) dissolve(pool);
}

cgc_pool_t cgc__pool_recording(struct cgc__allocator* a, const cgc__stream_ref_t* ref) {
  for (cgc_pool_t p = a->recording; p != NULL; p = p->next_recording)
    if (p->capture_id != 0 && p->capture_id == ref->capture_id) return p;
  /* Between the driver's begin and the capture's id reaching the pool: its origin. */
  for (cgc_pool_t p = a->recording; p != NULL; p = p->next_recording)
    if (p->capture_id == 0 && p->capture_origin == ref->cu && p->capture_origin_key == ref->key) return p;
  return NULL;
}

void cgc__pool_note_free(cgc__block_t* b) {
  cgc_pool_t pool = b->owner->pool;
  if (pool == NULL) return;
  bool in_its_capture = pool->recording && b->capture_id != 0 && b->capture_id == pool->capture_id;
  if (!in_its_capture) pool->escaped = true;
}

void cgc__pool_reclaim_joined(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  for (cgc__block_t** p = &pool->deferred; *p != NULL;) {
    cgc__block_t* b = *p;
    /* Only blocks of the origin stream qualify: a join orders the side stream before the
     * origin's later work, not before another side stream's. */
    bool safe = b->stream == pool->capture_origin_key;
    for (size_t i = 0; safe && i < b->n_uses; i++)
      safe = cgc__registry_side_joined(pool->capture_id, b->uses[i].key, b->free_seq);
    if (!safe) {
      p = &b->next_waiting;
      continue;
    }
    *p = b->next_waiting;
    cgc__alloc_release_block(a, b);
  }
}

