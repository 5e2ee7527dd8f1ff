/* Uses and fences: what is still running. A block freed with uses on other streams gets a fence
 * (an event) on each, recorded with the lock dropped, or waits in the deferred list while a
 * capture cgc knows of is under way; sweeps query fences (cuEventQuery never waits) and release
 * what has finished; a stream handle that goes away settles every use of it first; a capture's
 * begin waits for the frees recording fences now. */
#include <sched.h>
#include <stdlib.h>

#include "src/allocator.h"

/* (lock held) Whether fences must wait: a capture of the device is under way (cgc's, being
 * begun included, or one a pool adopted), or a stream handle is settling its uses. An event
 * recorded on a stream that captures is captured, not run, and which of a capture's streams
 * capture only the driver knows; cgc never asks it about a stream whose capture another thread
 * may be ending (driver 580 crashes there). So, as PyTorch's allocator does, fences wait for the
 * end of every capture cgc knows of. */
static bool fences_must_wait(struct cgc__allocator* a) {
  /* Any device's: a stream of this device may take part in another device's capture. */
  return a->ending_streams > 0 || a->adopting_pools > 0 || cgc__captures_underway() > 0;
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
    cgc__alloc_add_pending(a, b);
  } else {
    b->next_waiting = a->deferred;
    a->deferred = b;
  }
}

/* Records the fences deferred blocks still need, once no capture of the device is under way
 * (lock not held). Only slow paths call it (a cache miss, a free with uses, a capture's end,
 * cgc_empty_cache): recording waits behind other threads' cuMemFree on driver 580, which a
 * cache hit never does. */
void cgc__alloc_settle_deferred(struct cgc__allocator* a) {
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

void cgc__alloc_wait_fencing(struct cgc__device* dev) {
  (void)cgc__allocator_of(dev); /* made now if it is not yet: it is then on the list below */
  /* Every device's frees: a stream of one device may take part in another device's capture. */
  int n = cgc__allocator_count();
  for (int i = 0; i < n; i++) {
    struct cgc__allocator* a = cgc__allocator_at(i);
    if (a == NULL) continue;
    for (;;) {
      cgc__alloc_lock(a);
      int fencing = a->fencing;
      cgc__alloc_unlock(a);
      if (fencing == 0) break;
      sched_yield();
    }
  }
}

/* Adds `f` to the fences to query unless it is known done or already queued (lock held). */
static void collect_fence(cgc__fence_t* f, cgc__fence_t** list, size_t* n, size_t cap) {
  if (f == NULL || f->done || f->queued || *n == cap) return;
  f->queued = true;
  f->refs++; /* alive while it is queried without the lock */
  list[(*n)++] = f;
}

/* The sweep; with `wait`, each fence is waited for instead of queried. */
static bool sweep(struct cgc__allocator* a, bool fence_deferred, bool wait);

bool cgc__alloc_sweep(struct cgc__allocator* a, bool fence_deferred) { return sweep(a, fence_deferred, false); }

/* Settles what waits for finished work: deferred blocks get their fences, fences are queried
 * (outside the lock, in Relaxed mode), and blocks and drains whose fences have all completed are
 * released. True when something was released. */
static bool sweep(struct cgc__allocator* a, bool fence_deferred, bool wait) {
  if (fence_deferred) cgc__alloc_settle_deferred(a);

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
    for (size_t i = 0; i < n; i++)
      done[i] = wait ? (CGC_DRV(cuEventSynchronize)(fences[i]->ev), true)
                     : CGC_DRV(cuEventQuery)(fences[i]->ev) != CUDA_ERROR_NOT_READY;
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
      bool dying = cgc__is_dying(s->stream); /* its stream died meanwhile: it waits for that stream too */
      if (!d->keep_keys && !dying) s->stream = CGC_ANY_STREAM; /* its last user is done: any stream may take it */
      s->state = CGC_BLOCK_FREE;
      if (!cgc__set_insert(cgc__state_set(&a->cache, s->small), s)) cgc__log("out of host memory: a segment is lost");
      else if (dying) cgc__alloc_settle_moved_segment(a, s, false);
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
  for (cgc__drain_t* d = a->drains; d != NULL; d = d->next)
    for (cgc__block_t* b = d->segments; d->keep_keys && b != NULL; b = b->next_waiting)
      if (b->stream == key) return true;
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
          cgc__alloc_mark_dying(cgc__segment_head(b), f);
      }
    for (cgc__block_t* b = p->deferred; b != NULL; b = b->next_waiting)
      if (pool_block_of(b, key)) cgc__alloc_mark_dying(cgc__segment_head(b), f);
  }
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b != NULL && pool_block_of(b, key)) cgc__alloc_mark_dying(cgc__segment_head(b), f);
  }
  cgc__block_t* lists[2] = {a->pending, a->deferred};
  for (int l = 0; l < 2; l++)
    for (cgc__block_t* b = lists[l]; b != NULL; b = b->next_waiting)
      if (pool_block_of(b, key)) cgc__alloc_mark_dying(cgc__segment_head(b), f);
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
      cgc__block_t* head = cgc__segment_head(b);
      if (cgc__block_is_segment(head) && (whole != NULL || (whole = cgc__alloc_new_drain(f)) != NULL)) {
        if (whole->segments == NULL) f->refs++; /* the drain's reference */
        cgc__set_erase(sets[s], b);
        b->state = CGC_BLOCK_WAITING;
        b->next_waiting = whole->segments;
        whole->segments = b;
      } else {
        cgc__alloc_mark_dying(head, f);
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
    if (b != NULL && b->owner == &a->cache && b->stream == key) cgc__alloc_mark_dying(cgc__segment_head(b), f);
  }
  cgc__block_t* lists[2] = {a->pending, a->deferred};
  for (int l = 0; l < 2; l++)
    for (cgc__block_t* b = lists[l]; b != NULL; b = b->next_waiting)
      if (b->owner == &a->cache && b->stream == key) cgc__alloc_mark_dying(cgc__segment_head(b), f);
  /* Segments that wait in drains keeping their keys (an escaped pool's, dissolved while its
   * graphs' last replays may run) become dying too: at the drain's end they wait for this
   * stream's last work instead of keeping a key no stream will ask for. */
  for (cgc__drain_t* d = a->drains; d != NULL; d = d->next)
    for (cgc__block_t* b = d->segments; d->keep_keys && b != NULL; b = b->next_waiting)
      if (b->stream == key) cgc__alloc_mark_dying(b, f);
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
    CGC_TRY_GOTO(st, cgc__ctx_enter(dev, &scope, func), out);
    cgc__fence_t* f = cgc__alloc_record_fence(a, ref->cu);
    cgc__ctx_leave(&scope);
    if (f == NULL) {
      st = cgc__fail(CGC_ERROR_CUDA, func,
                     "recording an event on stream %p (for the memory cgc keeps for it) failed: the stream was "
                     "not destroyed",
                     (void*)ref->cu);
      goto out;
    }
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
      cgc__alloc_add_pending(a, b);
    }
    cgc__fence_put(a, f);
    cgc__alloc_unlock(a);
  }
out: /* the count taken above is given back on every path */
  cgc__alloc_lock(a);
  a->ending_streams--;
  cgc__alloc_unlock(a);
  return st;
}

/* ---- giving memory back ---- */

/* Sweeps until nothing more is released: a released block can dissolve a pool, whose segments
 * then wait in a new drain that the next sweep settles. */
void cgc__alloc_settle(struct cgc__allocator* a) {
  for (int i = 0; i < 8 && cgc__alloc_sweep(a, true); i++) {
  }
}

void cgc__alloc_settle_waiting(struct cgc__allocator* a) {
  for (int i = 0; i < 8 && sweep(a, true, true); i++) {
  }
}
