/* The cache: an allocation takes a free block of its stream's key from its owner (the device
 * cache or a pool), else settles what has finished and tries again, else grows by a segment;
 * frees without uses go straight back. cgc_free gets only a pointer: the device whose map holds
 * it is found here (the calling thread's last one first). */
#include <sched.h>
#include <stdlib.h>

#include "src/allocator.h"

/* The allocator this thread used last: cgc_free asks it first. */
static _Thread_local struct cgc__allocator* last_used;


/* ---- malloc ---- */

/* A whole free segment of key CGC_ANY_STREAM for `rounded` bytes, made `key`'s and cut to size
 * (lock held); NULL without one. */
static cgc__block_t* take_any_stream_segment(struct cgc__allocator* a, cgc__block_set_t* set, uint64_t key,
                                             size_t rounded) {
  cgc__block_t* b = cgc__set_take_best_fit(set, CGC_ANY_STREAM, rounded, NULL, NULL);
  if (b == NULL) return NULL;
  b->stream = key;
  if (cgc__should_split(b->small, b->size, rounded)) {
    cgc__block_t* spare = cgc__alloc_new_block_struct(a);
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
    cgc__block_t* spare = cgc__alloc_new_block_struct(a);
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
  cgc__block_t* b = cgc__set_take_best_fit(set, key, rounded, cgc__alloc_new_block_struct, a);
  if (b == NULL && cgc__state_coalesce(owner, cgc__alloc_recycle_block, a) > 0)
    b = cgc__set_take_best_fit(set, key, rounded, cgc__alloc_new_block_struct, a);
  if (b == NULL && pool != NULL && small) {
    /* A private pool holds its memory for its graphs anyway: a small request may be cut from a
     * free large block rather than grow the pool by a 2 MiB small segment. Graphs captured
     * largest-first into one pool then fit in the first one's memory (PyTorch keeps the two
     * classes apart here too; the device cache still does). The piece stays large-class. */
    b = cgc__set_take_best_fit(&owner->large, key, rounded, cgc__alloc_new_block_struct, a);
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
 * out of memory, with its capacity in the message. (A pool at fixed addresses grows: grow_arena.) */
static cgc_status_t arena_full(struct cgc__allocator* a, cgc_pool_t pool, size_t rounded, const char* func) {
  cgc__alloc_lock(a);
  size_t capacity = pool->arena->size, allocated = pool->state.stats.allocated;
  cgc__alloc_unlock(a);
  return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func,
                   "pool %p is a fixed arena of %zu bytes (registered with a communicator: it never grows) with "
                   "%zu allocated; no free block of %zu bytes is left for this stream: create the pool larger",
                   (void*)pool, capacity, allocated, rounded);
}

/* The block of `pool` that ends at `end` (lock held): the last block of its arena's backed range,
 * free, allocated or waiting; NULL when none is found (the range was empty). */
static cgc__block_t* arena_block_ending_at(struct cgc__allocator* a, cgc_pool_t pool, uint64_t end) {
  cgc__block_set_t* sets[2] = {&pool->state.small, &pool->state.large};
  for (int s = 0; s < 2; s++)
    for (size_t i = 0; i < sets[s]->n; i++)
      if (sets[s]->items[i]->ptr + sets[s]->items[i]->size == end) return sets[s]->items[i];
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b != NULL && b->owner == &pool->state && b->ptr + b->size == end) return b;
  }
  cgc__block_t* lists[3] = {a->pending, a->deferred, pool->deferred};
  for (int l = 0; l < 3; l++)
    for (cgc__block_t* b = lists[l]; b != NULL; b = b->next_waiting)
      if (b->owner == &pool->state && b->ptr + b->size == end) return b;
  return NULL;
}

/* Backs `pool`'s arena (one that grows: a pool at fixed addresses) up to at least `end` bytes
 * from its base, rounded up to its granule (lock held on entry and return, dropped meanwhile;
 * the pool is held meanwhile, so that its release is refused). The new piece is a free block of
 * no stream yet, linked after the last block of the range, so that free memory merges across
 * growths as within one segment; one thread grows an arena at a time, another waits. On out of
 * memory the device's finished frees are settled and its cached segments given back, then the
 * driver is asked once more, as for any new segment. */
static cgc_status_t arena_grow_to(struct cgc__allocator* a, cgc_pool_t pool, size_t end, const char* func) {
  cgc__arena_t* arena = pool->arena;
  cgc__block_t* piece = NULL;
  cgc_status_t st = CGC_SUCCESS;
  pool->internal_refs++;
  while (arena->growing) {
    cgc__alloc_unlock(a);
    sched_yield();
    cgc__alloc_lock(a);
  }
  if (end <= arena->mapped) goto out;
  end = (end + arena->granule - 1) / arena->granule * arena->granule;
  if (end > arena->size) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func,
                   "%s %p holds [%#llx, +%zu), %zu bytes of it backed and %zu allocated: it cannot grow to %zu bytes "
                   "(the range never moves): create the pool larger",
                   arena->what, (void*)pool, (unsigned long long)arena->base, arena->size, arena->mapped,
                   pool->state.stats.allocated, end);
    goto out;
  }
  if ((piece = cgc__alloc_new_block_struct(a)) == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto out;
  }
  size_t from = arena->mapped, bytes = end - from;
  arena->growing = true;
  cgc__alloc_unlock(a);
  st = arena->grow(arena, bytes, func);
  if (st == CGC_ERROR_OUT_OF_MEMORY) {
    cgc__alloc_sweep(a, true);
    if (cgc__alloc_release_cached_segments(a) > 0) st = arena->grow(arena, bytes, func);
  }
  cgc__alloc_lock(a);
  arena->growing = false;
  if (st != CGC_SUCCESS) goto out;
  /* Backed: counted whether or not a block can describe it, so that the release frees it. */
  arena->mapped = end;
  arena->pieces++;
  cgc__stats_add_reserved(&pool->state.stats, (long long)bytes);
  cgc__stats_add_reserved(&a->total, (long long)bytes);
  pool->state.stats.driver_allocs++;
  a->total.driver_allocs++;
  cgc__block_init(piece, arena->base + from, bytes, CGC_ANY_STREAM, &pool->state, false);
  cgc__block_t* last = from > 0 ? arena_block_ending_at(a, pool, arena->base + from) : NULL;
  if (last != NULL) {
    piece->prev = last;
    last->next = piece;
  }
  if (!cgc__set_insert(&pool->state.large, piece)) {
    if (last != NULL) last->next = NULL;
    cgc__log("out of host memory: %zu bytes of %s %p stay unused until it goes", bytes, arena->what, (void*)pool);
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto out;
  }
  piece = NULL;
out: /* lock held */
  if (piece != NULL) cgc__alloc_recycle_block(piece, a);
  pool->internal_refs--;
  return st;
}

/* A pool at fixed addresses grows within its range for an allocation that found no block (lock
 * not held on entry; on success returns with the lock held and *out cut to size): only by what
 * the free tail of the range lacks, so the same requests in the same order grow it the same way
 * and a process that repeats them gets the same addresses. */
static cgc_status_t grow_arena(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key, size_t rounded,
                               cgc__block_t** out, const char* func) {
  cgc__arena_t* arena = pool->arena;
  cgc__alloc_lock(a);
  for (;;) {
    if ((*out = take_from_arena(a, pool, key, rounded)) != NULL) return CGC_SUCCESS;
    cgc__block_t* last = arena->mapped > 0 ? arena_block_ending_at(a, pool, arena->base + arena->mapped) : NULL;
    size_t tail = last != NULL && last->state == CGC_BLOCK_FREE && last->stream == CGC_ANY_STREAM ? last->size : 0;
    size_t before = arena->mapped;
    cgc_status_t st = arena_grow_to(a, pool, arena->mapped + (rounded - tail), func);
    if (st != CGC_SUCCESS) {
      cgc__alloc_unlock(a);
      return st;
    }
    if (arena->mapped == before && !arena->growing) { /* nothing grew: no room after all */
      cgc__alloc_unlock(a);
      return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "%s %p has no free block of %zu bytes", arena->what,
                       (void*)pool, rounded);
    }
    cgc__state_coalesce(&pool->state, cgc__alloc_recycle_block, a);
  }
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
      if (!cgc__is_dying(b->stream) || !cgc__block_is_segment(b) || b->size < rounded) continue;
      /* Eager memory serves eager requests, a capture's memory captures (SEMANTICS 32). */
      if ((b->stream & CGC__KEY_POOL_EAGER_BIT) != (key & CGC__KEY_POOL_EAGER_BIT)) continue;
      cgc__fence_t* f = cgc__dying_fence(b->stream);
      if (!f->done) {
        /* An event query is a call the driver counts as unsafe during a capture (this thread's,
         * in ThreadLocal mode: allocations inside captures come here): Relaxed mode. */
        CGC_RELAXED(f->done = CGC_DRV(cuEventQuery)(f->ev) != CUDA_ERROR_NOT_READY);
      }
      if (f->done) found = b;
    }
  }
  if (found != NULL) {
    cgc__block_set_t* set = cgc__state_set(&pool->state, found->small);
    cgc__set_erase(set, found);
    cgc__fence_put(a, cgc__dying_fence(found->stream));
    found->stream = key;
    if (cgc__should_split(found->small, found->size, rounded)) {
      cgc__block_t* spare = cgc__alloc_new_block_struct(a);
      if (spare != NULL && !cgc__block_split(found, rounded, spare)) cgc__alloc_recycle_block(spare, a);
    }
  }
  if (found == NULL) cgc__alloc_unlock(a);
  cgc__ctx_leave(&scope);
  return found;
}

/* The rest of an allocation once its owner is known (lock held on entry, released on return):
 * a cached block, else (without the lock) finished memory settled, else a new segment. `eager`:
 * a block cgc_pool_malloc hands out from `pool` outside its captures; `ref`: the allocating
 * stream (NULL for those). */
static cgc_status_t take_or_grow(struct cgc__allocator* a, cgc_pool_t pool, const cgc__stream_ref_t* ref, uint64_t key,
                                 size_t size, bool eager, void** out, const char* func) {
  size_t rounded = cgc__round_size(size);
  /* In an adopted capture, first the blocks of this stream whose side streams have joined since
   * their free (joins.c; the graph walked with the lock dropped, the pool held meanwhile): as
   * with PyTorch, the freed block is reused before a fresh piece of a segment is cut. Only while
   * such blocks wait: otherwise one pointer test. */
  if (ref != NULL && pool != NULL && pool->adopting && pool->deferred != NULL) cgc__joins_reclaim(a, pool, ref);
  cgc__block_t* b = take_cached(a, pool, key, rounded);
  cgc_status_t st = CGC_SUCCESS;
  if (b == NULL) {
    /* The slow path runs without the lock; the pool is held meanwhile, so that a capture ended
     * on another thread cannot dissolve it under us. */
    if (pool != NULL) pool->internal_refs++;
    bool settle = a->pending != NULL || a->drains != NULL || a->deferred != NULL;
    cgc__alloc_unlock(a);
    if (settle && cgc__alloc_sweep(a, true)) {
      cgc__alloc_lock(a);
      b = take_cached(a, pool, key, rounded);
      if (b == NULL) cgc__alloc_unlock(a);
    }
    if (b == NULL && pool != NULL && pool->arena == NULL) b = take_dead_stream_segment(a, pool, key, rounded);
    if (b == NULL) {
      if (pool == NULL || pool->arena == NULL) st = cgc__alloc_new_segment(a, pool, key, rounded, &b, func);
      else if (pool->arena->grow != NULL) st = grow_arena(a, pool, key, rounded, &b, func);
      else st = arena_full(a, pool, rounded, func);
    }
    if (st != CGC_SUCCESS) cgc__alloc_lock(a);
    if (pool != NULL) pool->internal_refs--; /* lock held here on every path */
    if (st != CGC_SUCCESS) goto out;
  }
  if (!hand_out(a, b, size)) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto out;
  }
  if (eager) b->capture_id = 0; /* not the capture its pool may be recording meanwhile */
  *out = (void*)(uintptr_t)b->ptr;
out: /* lock held */
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
  if (atomic_load_explicit(&a->waiting, memory_order_relaxed) > 0) cgc__alloc_sweep(a, false);
  cgc_pool_t pool = NULL;
  cgc__alloc_lock(a);
  if (ref->capturing) {
    pool = cgc__pool_recording(a, ref);
    if (pool == NULL) {
      cgc__alloc_unlock(a);
      return refuse_foreign_capture(ref, func);
    }
  }
  return take_or_grow(a, pool, ref, ref->key, size, false, out, func);
}

cgc_status_t cgc__pool_malloc(cgc_pool_t pool, size_t size, const cgc__stream_ref_t* ref, void** out,
                              const char* func) {
  *out = NULL;
  if (size == 0) return CGC_SUCCESS;
  if (size > ((size_t)1 << 62)) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes", size);
  struct cgc__allocator* a = pool->state.allocator;
  if (atomic_load_explicit(&a->waiting, memory_order_relaxed) > 0) cgc__alloc_sweep(a, false);
  cgc__alloc_lock(a);
  /* Checked again under the lock: another thread may have released the last reference. */
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, func, "pool");
  if (st != CGC_SUCCESS) {
    cgc__alloc_unlock(a);
    return st;
  }
  return take_or_grow(a, pool, NULL, CGC__KEY_POOL_EAGER(ref->key), size, true, out, func);
}

/* ---- claim: a block at a given address ---- */

/* The free block of `owner` that holds [ptr, ptr + rounded), or NULL (lock held, free neighbours
 * merged). */
static cgc__block_t* free_block_holding(cgc__pool_state_t* owner, uint64_t ptr, size_t rounded) {
  cgc__block_set_t* sets[2] = {&owner->small, &owner->large};
  for (int s = 0; s < 2; s++)
    for (size_t i = 0; i < sets[s]->n; i++) {
      cgc__block_t* b = sets[s]->items[i];
      if (b->ptr <= ptr && ptr - b->ptr <= b->size && rounded <= b->size - (ptr - b->ptr)) return b;
    }
  return NULL;
}

/* Why [ptr, ptr + rounded) cannot be claimed from `pool` (lock held): the block of the pool that
 * overlaps it and is not free, or that no segment of the pool holds it. */
static cgc_status_t refuse_claim(struct cgc__allocator* a, cgc_pool_t pool, uint64_t ptr, size_t rounded,
                                 const char* func) {
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b == NULL || b->owner != &pool->state) continue;
    if (b->ptr - ptr < rounded || ptr - b->ptr < b->size) /* overlap, without wrapping */
      return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                       "[%#llx, +%zu) of pool %p overlaps its allocated block %#llx (%zu bytes): free it first",
                       (unsigned long long)ptr, rounded, (void*)pool, (unsigned long long)b->ptr, b->size);
  }
  return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "[%#llx, +%zu) is not free memory of pool %p: no segment of it holds the whole range free (a block "
                   "of it may still wait for work recorded on it, or the memory went back to the driver)",
                   (unsigned long long)ptr, rounded, (void*)pool);
}

cgc_status_t cgc__pool_claim(cgc_pool_t pool, uint64_t ptr, size_t size, const char* func) {
  struct cgc__allocator* a = pool->state.allocator;
  size_t rounded = cgc__round_size(size);
  cgc_status_t st = CGC_SUCCESS;
  cgc__alloc_lock(a);
  /* Checked again under the lock: another thread may have released the last reference. */
  CGC_TRY_GOTO(st, cgc__check_handle(pool, CGC_MAGIC_POOL, func, "pool"), out);
  cgc__arena_t* arena = pool->arena;
  if (arena != NULL && arena->grow == NULL) {
    st = cgc__fail(CGC_ERROR_NOT_SUPPORTED, func, "pool %p is an NCCL pool: its blocks are not claimed by address",
                   (void*)pool);
    goto out;
  }
  /* A pool at fixed addresses backs its range up to the block first (a restore in a fresh process
   * claims memory the pool has not used yet). */
  if (arena != NULL && ptr >= arena->base && ptr - arena->base <= arena->size &&
      rounded <= arena->size - (ptr - arena->base) && ptr - arena->base + rounded > arena->mapped)
    CGC_TRY_GOTO(st, arena_grow_to(a, pool, ptr - arena->base + rounded, func), out);
  if (pool->deferred != NULL) cgc__pool_reclaim_joined(pool);
  cgc__state_coalesce(&pool->state, cgc__alloc_recycle_block, a);
  cgc__block_t* b = free_block_holding(&pool->state, ptr, rounded);
  if (b == NULL) {
    st = refuse_claim(a, pool, ptr, rounded, func);
    goto out;
  }
  if (cgc__is_dying(b->stream)) { /* its destroyed stream's last work may still use it */
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "[%#llx, +%zu) of pool %p waits for the last work of a destroyed stream: claim it once that is done",
                   (unsigned long long)ptr, rounded, (void*)pool);
    goto out;
  }
  cgc__block_t* head = b->ptr < ptr ? cgc__alloc_new_block_struct(a) : NULL;
  cgc__block_t* tail = cgc__alloc_new_block_struct(a);
  if ((b->ptr < ptr && head == NULL) || tail == NULL) {
    if (head != NULL) cgc__alloc_recycle_block(head, a);
    if (tail != NULL) cgc__alloc_recycle_block(tail, a);
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto out;
  }
  cgc__block_set_t* set = cgc__state_set(&pool->state, b->small);
  cgc__set_erase(set, b);
  if (b->ptr < ptr) {
    /* b keeps the memory before ptr (back in its set, free); the rest, from ptr, is cut next. */
    cgc__block_t* rest = head;
    if (!cgc__block_split(b, ptr - b->ptr, rest) || !cgc__set_insert(set, b)) {
      cgc__log("out of host memory: a free block is lost");
      st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
      cgc__alloc_recycle_block(tail, a);
      goto out;
    }
    cgc__set_erase(set, rest);
    b = rest;
  }
  if (b->size > rounded) {
    if (!cgc__block_split(b, rounded, tail)) cgc__alloc_recycle_block(tail, a); /* handed out whole */
  } else {
    cgc__alloc_recycle_block(tail, a);
  }
  /* Memory no stream has used yet (an arena's) is claimed for none: once freed it serves claims
   * only, never another stream's allocation while the claimer's work may still run. */
  if (b->stream == CGC_ANY_STREAM) b->stream = CGC__KEY_NO_STREAM(pool);
  if (!hand_out(a, b, size)) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto out;
  }
  b->capture_id = 0; /* no capture's: an eager claim, even while the pool records one */
out: /* lock held */
  cgc__alloc_unlock(a);
  return st;
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
  int n = cgc__allocator_count();
  for (int i = 0; i < n; i++) {
    struct cgc__allocator* a = cgc__allocator_at(i);
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
  int n = cgc__allocator_count();
  *has_uses = false;
  for (int i = -1; i < n; i++) {
    struct cgc__allocator* a = i < 0 ? first : cgc__allocator_at(i);
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
