/* Driver memory: a new segment (cuMemAlloc, without the lock, in Relaxed mode; on out of memory
 * the cache's free segments are given back and the allocation retried), whole free cached
 * segments given back (cuMemFree), and the device's spare events when its last context goes. */
#include <stdlib.h>

#include "src/allocator.h"

/* ---- segments ---- */

/* Moves the whole free segments of `owner` to `taken` (lock held); a dying one waits for its
 * fence. */
static void take_whole_free_segments(struct cgc__allocator* a, cgc__pool_state_t* owner, cgc__block_t** taken) {
  cgc__state_coalesce(owner, cgc__alloc_recycle_block, a);
  cgc__block_set_t* sets[2] = {&owner->small, &owner->large};
  for (int s = 0; s < 2; s++) {
    cgc__block_set_t* set = sets[s];
    for (size_t i = 0; i < set->n;) {
      cgc__block_t* b = set->items[i];
      if (!cgc__block_is_segment(b) || cgc__is_dying(b->stream)) {
        i++;
        continue;
      }
      cgc__set_erase(set, b);
      b->state = CGC_BLOCK_WAITING; /* ours alone until given back */
      b->next_waiting = *taken;
      *taken = b;
    }
  }
}

/* Whether `pool` is orphaned: no user, graph or capture holds it, only blocks still allocated
 * from it (a destroyed graph's outputs). No capture can use its free memory any more, so
 * cgc_empty_cache gives that back too, as PyTorch's empty_cache does for a released graph pool.
 * An arena's memory is fixed: never. */
static bool orphaned(cgc_pool_t pool) {
  return pool->user_refs + pool->internal_refs == 0 && !pool->recording && pool->arena == NULL;
}

/* Gives every whole free segment of the device cache and of orphaned pools back to the driver;
 * cuMemFree runs without the lock and in Relaxed mode (it waits for the device, so a destroyed
 * graph's replay still running is not a concern). Returns the bytes given back. */
size_t cgc__alloc_release_cached_segments(struct cgc__allocator* a) {
  cgc__block_t* taken = NULL;
  cgc_pool_t* held = NULL; /* orphaned pools given back from: held while the lock is dropped */
  size_t n_held = 0;
  cgc__alloc_lock(a);
  take_whole_free_segments(a, &a->cache, &taken);
  size_t n_pools = 0;
  for (cgc_pool_t p = a->pools; p != NULL; p = p->next_pool) n_pools += orphaned(p);
  if (n_pools > 0 && (held = calloc(n_pools, sizeof *held)) != NULL) {
    for (cgc_pool_t p = a->pools; p != NULL; p = p->next_pool) {
      cgc__block_t* before = taken;
      if (!orphaned(p)) continue;
      take_whole_free_segments(a, &p->state, &taken);
      if (taken == before) continue;
      p->internal_refs++; /* its state outlives the cuMemFree calls below */
      held[n_held++] = p;
    }
  }
  cgc__alloc_unlock(a);
  if (taken == NULL) {
    free(held);
    return 0;
  }

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
    cgc__stats_add_reserved(&b->owner->stats, -(long long)b->size);
    cgc__stats_add_reserved(&a->total, -(long long)b->size);
    b->owner->stats.driver_frees++;
    a->total.driver_frees++;
    cgc__alloc_recycle_block(b, a);
  }
  while (failed != NULL) { /* kept cached: nothing is lost */
    cgc__block_t* b = failed;
    failed = b->next_waiting;
    b->state = CGC_BLOCK_FREE;
    if (!cgc__set_insert(cgc__state_set(b->owner, b->small), b)) cgc__log("out of host memory: a segment is lost");
  }
  /* The orphaned pools held above: one whose last block was freed meanwhile dissolves now. */
  for (size_t i = 0; i < n_held; i++) {
    held[i]->internal_refs--;
    cgc__pool_dissolve_if_unused(held[i]);
  }
  cgc__alloc_unlock(a);
  free(held);
  return released;
}

/* A new segment from the driver for `rounded` bytes of `key`, owned by the pool or the cache;
 * on success returns with the lock held and *out cut to size. The driver calls run without
 * the lock; on OUT_OF_MEMORY the cache's free segments are given back and the call retried. */
cgc_status_t cgc__alloc_new_segment(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key, size_t rounded,
                                cgc__block_t** out, const char* func) {
  size_t size = cgc__segment_size(rounded);
  cgc__ctx_scope_t scope = {false};
  CUdeviceptr p = 0;
  cgc_status_t st;
  cgc__alloc_lock(a);
  cgc__block_t* b = cgc__alloc_new_block_struct(a); /* taken first: nothing to undo on the device later */
  cgc__alloc_unlock(a);
  if (b == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto fail;
  }
  CGC_TRY_GOTO(st, cgc__ctx_enter(a->dev, &scope, func), fail);
  CUresult r = cgc__relaxed_mem_alloc(&p, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    cgc__alloc_sweep(a, true);
    if (cgc__alloc_release_cached_segments(a) > 0) r = cgc__relaxed_mem_alloc(&p, size);
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
    cgc__block_t* spare = cgc__alloc_new_block_struct(a);
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

void cgc__alloc_trim(struct cgc__device* dev) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a == NULL) return;
  /* The last context goes: memory that waits for work still running (a destroyed graph's last
   * replay, a dead stream's last work) is waited for here, else it would stay reserved until a
   * later context allocated. */
  cgc__alloc_settle_waiting(a);
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

void cgc__alloc_give_back(struct cgc__allocator* a) {
  cgc__alloc_settle(a);
  cgc__alloc_release_cached_segments(a);
}
