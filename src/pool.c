/* Private memory pools: cgc_pool_create/retain/release and what captures and graphs do to them.
 *
 * A pool lives while the user holds a reference, a graph captured into it exists, a capture is
 * recording into it, or any block of it is allocated or waiting (SEMANTICS 11, 14). When the
 * user and the graphs are gone the handle is dead to callers; once its last block comes back,
 * its segments move to the device cache (SEMANTICS 15), where any stream may take them, but
 * only after the last replay of every graph that used them has finished: each graph hands the
 * pool a fence (an event its last node records at every replay) when it is destroyed. User
 * references are counted apart from internal ones, so that releasing a pool obtained from
 * cgc_graph_pool without retaining it is refused instead of dropping a graph's reference.
 *
 * Every field of a pool is guarded by its device's allocator lock (alloc.h). */
#include <stdlib.h>
#include <string.h>

#include "src/alloc.h"

static cgc_pool_t new_pool(struct cgc__allocator* a) {
  cgc_pool_t pool = calloc(1, sizeof *pool);
  if (pool == NULL) return NULL;
  pool->magic = CGC_MAGIC_POOL;
  pool->dev = a->dev;
  pool->state.pool = pool;
  pool->state.allocator = a;
  return pool;
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
  if (had_fences && (drain = calloc(1, sizeof *drain)) != NULL) {
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
      cgc__stats_add_reserved(&a->cache.stats, (long long)b->size);
      if (drain != NULL) {
        b->state = CGC_BLOCK_WAITING;
        b->next_waiting = drain->segments;
        drain->segments = b;
        continue;
      }
      /* With fences but no memory for a drain: a key no stream has (only cgc_empty_cache, whose
       * cuMemFree waits for the device, takes it back). */
      if (had_fences)
        b->stream = CGC__KEY_OF_ADDRESS(pool);
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
  cgc__retire(pool);
}

void cgc__pool_dissolve_if_unused(cgc_pool_t pool) {
  if (pool->user_refs + pool->internal_refs > 0) return;
  pool->magic = CGC_MAGIC_DEAD; /* no caller may reach it any more */
  if (pool->state.outstanding == 0 && !pool->recording && pool->deferred == NULL) dissolve(pool);
}

cgc_status_t cgc_pool_create(cgc_context_t ctx, cgc_pool_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  struct cgc__allocator* a = cgc__allocator_of(ctx->dev);
  cgc_pool_t pool = a ? new_pool(a) : NULL;
  if (pool == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  pool->user_refs = 1;
  *out = pool;
  return CGC_SUCCESS;
}

/* The handle is checked before the lock (a garbage pointer must not fault with the lock held)
 * and again under it (another thread may have released the last reference meanwhile; the
 * memory stays readable in the handle quarantine). */
cgc_status_t cgc_pool_retain(cgc_pool_t pool) {
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, __func__, "pool");
  if (st == CGC_SUCCESS) pool->user_refs++;
  cgc__alloc_unlock(a);
  return st;
}

cgc_status_t cgc_pool_release(cgc_pool_t pool) {
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, __func__, "pool");
  if (st == CGC_SUCCESS && pool->user_refs == 0)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                   "pool %p holds no reference of yours (cgc_graph_pool lends one: cgc_pool_retain it first)",
                   (void*)pool);
  if (st == CGC_SUCCESS) {
    pool->user_refs--;
    cgc__pool_dissolve_if_unused(pool);
  }
  cgc__alloc_unlock(a);
  return st;
}

cgc_status_t cgc__pool_begin_capture(struct cgc__device* dev, cgc_pool_t requested, CUstream origin,
                                     uint64_t origin_key, cgc_pool_t* out, const char* func) {
  *out = NULL;
  struct cgc__allocator* a = cgc__allocator_of(dev);
  if (a == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  cgc_pool_t pool = requested;
  if (requested != NULL) {
    cgc_status_t st = cgc__check_handle(requested, CGC_MAGIC_POOL, func, "options->pool");
    if (st != CGC_SUCCESS) return st;
    if (requested->dev != dev)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "options->pool belongs to device %d, the stream to device %d",
                       requested->dev->ordinal, dev->ordinal);
  } else if ((pool = new_pool(a)) == NULL) {
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  cgc__alloc_lock(a);
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, func, "options->pool");
  if (st == CGC_SUCCESS && pool->recording)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "pool %p is being recorded into by another capture (on stream %p): a pool records one "
                   "capture at a time",
                   (void*)pool, (void*)pool->capture_origin);
  if (st == CGC_SUCCESS) {
    pool->internal_refs++;
    pool->recording = true;
    pool->capture_id = 0;
    pool->capture_origin = origin;
    pool->capture_origin_key = origin_key;
    /* Routing starts now, before the driver begins the capture. */
    pool->next_recording = a->recording;
    a->recording = pool;
    *out = pool;
  }
  cgc__alloc_unlock(a);
  if (st != CGC_SUCCESS && requested == NULL) free(pool);
  return st;
}

void cgc__pool_capture_started(cgc_pool_t pool, uint64_t capture_id) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  pool->capture_id = capture_id;
  cgc__alloc_unlock(a);
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

static bool is_member(uint64_t key, const uint64_t* members, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (members[i] == key) return true;
  return false;
}

void cgc__pool_end_capture(cgc_pool_t pool, bool graph_keeps_ref, const uint64_t* members, size_t n_members) {
  struct cgc__allocator* a = pool->state.allocator;
  pthread_mutex_lock(&a->uses_lock); /* deferred blocks may need fences on their use streams */
  cgc__alloc_lock(a);
  for (cgc_pool_t* p = &a->recording; *p != NULL; p = &(*p)->next_recording) {
    if (*p == pool) {
      *p = pool->next_recording;
      break;
    }
  }
  pool->next_recording = NULL;
  pool->recording = false;
  pool->capture_id = 0;
  /* Blocks freed during the capture after use on other streams: every stream of the capture is
   * joined now, so those uses are over as far as replay order goes (PyTorch drops them the
   * same way); uses on streams outside the capture still need fences. */
  cgc__block_t* deferred = pool->deferred;
  pool->deferred = NULL;
  cgc__block_t* outside = NULL;
  while (deferred != NULL) {
    cgc__block_t* b = deferred;
    deferred = b->next_waiting;
    size_t kept = 0;
    for (size_t i = 0; i < b->n_uses; i++) {
      if (is_member(b->uses[i].key, members, n_members)) {
        if (b->uses[i].fence != NULL) cgc__fence_put(a, b->uses[i].fence);
      } else {
        b->uses[kept++] = b->uses[i];
      }
    }
    b->n_uses = kept;
    if (kept == 0) {
      cgc__alloc_release_block(a, b);
    } else {
      b->next_waiting = outside;
      outside = b;
    }
  }
  cgc__alloc_unlock(a);
  while (outside != NULL) {
    cgc__block_t* b = outside;
    outside = b->next_waiting;
    cgc__alloc_park_used_block(a, b);
  }
  cgc__alloc_lock(a);
  if (!graph_keeps_ref) pool->internal_refs--;
  cgc__pool_dissolve_if_unused(pool);
  cgc__alloc_unlock(a);
  pthread_mutex_unlock(&a->uses_lock);
}

/* Blocks until `fence` completes (Relaxed: never breaks a capture) and destroys it. */
static void wait_fence(CUevent fence) {
  CUstreamCaptureMode previous = cgc__relaxed_begin();
  cgc__drv.cuEventSynchronize(fence);
  cgc__relaxed_end(previous);
  cgc__drv.cuEventDestroy(fence);
}

/* (lock held) Appends `f` to the pool's fences; false when out of host memory. */
static bool add_fence(cgc_pool_t pool, cgc__fence_t* f) {
  if (pool->n_fences == pool->cap_fences) {
    size_t cap = pool->cap_fences ? pool->cap_fences * 2 : 4;
    cgc__fence_t** grown = realloc(pool->fences, cap * sizeof *grown);
    if (grown == NULL) return false;
    pool->fences = grown;
    pool->cap_fences = cap;
  }
  pool->fences[pool->n_fences++] = f;
  return true;
}

/* Drops the fences of a pool that have completed, so that a long-lived pool whose graphs are
 * destroyed while replaying does not collect them without bound. Queries run without the lock
 * (Relaxed: they never break a capture). */
static void prune_fences(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  enum { kMax = 64 };
  cgc__fence_t* list[kMax];
  bool done[kMax];
  size_t n = 0;
  cgc__alloc_lock(a);
  for (size_t i = 0; i < pool->n_fences && n < kMax; i++) {
    list[n] = pool->fences[i];
    list[n++]->refs++;
  }
  cgc__alloc_unlock(a);
  CUstreamCaptureMode previous = cgc__relaxed_begin();
  for (size_t i = 0; i < n; i++) done[i] = cgc__drv.cuEventQuery(list[i]->ev) != CUDA_ERROR_NOT_READY;
  cgc__relaxed_end(previous);
  cgc__alloc_lock(a);
  for (size_t i = 0; i < n; i++) {
    if (done[i]) list[i]->done = true;
    cgc__fence_put(a, list[i]);
  }
  size_t kept = 0;
  for (size_t i = 0; i < pool->n_fences; i++) {
    if (pool->fences[i]->done)
      cgc__fence_put(a, pool->fences[i]);
    else
      pool->fences[kept++] = pool->fences[i];
  }
  pool->n_fences = kept;
  cgc__alloc_unlock(a);
}

void cgc__pool_unref(cgc_pool_t pool, CUevent fence) {
  if (pool == NULL) {
    if (fence != NULL) cgc__drv.cuEventDestroy(fence);
    return;
  }
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  bool crowded = fence != NULL && pool->n_fences >= 8 && pool->user_refs + pool->internal_refs > 1;
  cgc__alloc_unlock(a);
  if (crowded) prune_fences(pool); /* the pool lives on: its graph references hold it */
  cgc__fence_t* f = fence != NULL ? cgc__fence_new(fence) : NULL;
  bool kept = f != NULL;
  cgc__alloc_lock(a);
  if (f != NULL) kept = add_fence(pool, f);
  if (fence != NULL && !kept) {
    /* No memory to remember the fence: wait for it here rather than hand memory out early. */
    cgc__alloc_unlock(a);
    free(f);
    wait_fence(fence);
    cgc__alloc_lock(a);
  }
  pool->internal_refs--;
  cgc__pool_dissolve_if_unused(pool);
  cgc__alloc_unlock(a);
}

size_t cgc__pool_reserved(cgc_pool_t pool) {
  if (pool == NULL) return 0;
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  size_t r = pool->state.stats.reserved;
  cgc__alloc_unlock(a);
  return r;
}
