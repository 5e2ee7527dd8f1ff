/* The graph-aware caching allocator: cgc_malloc, cgc_free, cgc_record_stream, cgc_empty_cache,
 * cgc_memory_stats and PyTorch's pluggable-allocator entry points.
 *
 * Outside captures it is a stream-ordered caching allocator (SEMANTICS 16): a block freed on
 * stream S is at once reusable on S; a block other streams used waits for events recorded on
 * them. During a capture, allocations on any stream of that capture come from its private pool
 * (SEMANTICS 4, routing by capture id); no event is queried and nothing is given back to the
 * driver while any capture is under way (SEMANTICS 5), and segments are obtained with the
 * calling thread switched to Relaxed capture mode so that cuMemAlloc cannot break a capture. */
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "src/alloc.h"

atomic_int cgc__alloc_lock_word;

void cgc__alloc_lock_slow(void) {
  for (;;) {
    for (int i = 0; i < 200; i++) {
      if (atomic_load_explicit(&cgc__alloc_lock_word, memory_order_relaxed) == 0 &&
          atomic_exchange_explicit(&cgc__alloc_lock_word, 1, memory_order_acquire) == 0)
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

static cgc__ptr_map_t live;          /* allocated blocks by address, every device */
static cgc__block_t* spare_blocks;   /* recycled block structs, linked through next_waiting */

/* ---- small helpers (lock held) ---- */

/* A block struct for cgc__block_init: a recycled one (its uses array kept for record_stream) or a
 * new, zeroed one. */
static cgc__block_t* new_block_struct(void) {
  cgc__block_t* b = spare_blocks;
  if (b != NULL) {
    spare_blocks = b->next_waiting;
    return b;
  }
  return calloc(1, sizeof *b);
}

static void recycle_block(cgc__block_t* b, void* unused) {
  (void)unused;
  if (b->events != NULL) free(b->events);
  b->events = NULL;
  b->n_events = 0;
  b->next_waiting = spare_blocks;
  spare_blocks = b;
}

struct cgc__allocator* cgc__allocator_of(struct cgc__device* dev) {
  if (dev->alloc == NULL) {
    struct cgc__allocator* a = calloc(1, sizeof *a);
    if (a == NULL) return NULL;
    a->dev = dev;
    a->cache.allocator = a;
    dev->alloc = a;
  }
  return dev->alloc;
}

/* Allocated bytes count for the block's owner (the cache or a pool) and for the device total. */
static void account_allocated(struct cgc__allocator* a, cgc__block_t* b, long long delta) {
  cgc__stats_add_allocated(&b->owner->stats, delta);
  cgc__stats_add_allocated(&a->total, delta);
}

void cgc__alloc_release_block(cgc__block_t* b) {
  cgc__pool_state_t* owner = b->owner;
  owner->outstanding--;
  /* Small blocks go back as they are: freed and asked for again at the same size (the common
   * case) they cost no split and no merge; neighbours are merged when a request misses. Large
   * blocks are merged at once: activations that grow from graph to graph need the contiguous
   * space, and deferring their merges let best fit pick fragments (measured: 35 graphs captured
   * smallest-first into one pool reserved 130 MiB instead of 90). */
  bool kept = b->small ? cgc__block_release_unmerged(b) : cgc__block_release(b, recycle_block, NULL) != NULL;
  if (!kept) cgc__log("out of host memory: a free block is lost");
  if (owner->pool != NULL) cgc__pool_dissolve_if_unused((cgc_pool_t)owner->pool);
}

/* ---- events for blocks used on other streams ---- */

static CUevent take_event(struct cgc__allocator* a) {
  if (a->n_spare_events > 0) return a->spare_events[--a->n_spare_events];
  CUevent ev = NULL;
  if (cgc__drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return NULL;
  return ev;
}

static void give_event(struct cgc__allocator* a, CUevent ev) {
  if (a->n_spare_events == a->cap_spare_events) {
    size_t cap = a->cap_spare_events ? a->cap_spare_events * 2 : 16;
    CUevent* grown = realloc(a->spare_events, cap * sizeof *grown);
    if (grown == NULL) {
      cgc__drv.cuEventDestroy(ev);
      return;
    }
    a->spare_events = grown;
    a->cap_spare_events = cap;
  }
  a->spare_events[a->n_spare_events++] = ev;
}

/* Records an event on every stream that used b (context current, no capture on those streams)
 * and parks b on the pending list; if that fails b goes back to the deferred list to retry. */
static void record_uses(struct cgc__allocator* a, cgc__block_t* b) {
  b->events = calloc(b->n_uses ? b->n_uses : 1, sizeof *b->events);
  bool ok = b->events != NULL;
  for (size_t i = 0; ok && i < b->n_uses; i++) {
    CUevent ev = take_event(a);
    if (ev == NULL || cgc__drv.cuEventRecord(ev, (CUstream)b->uses[i]) != CUDA_SUCCESS) {
      if (ev != NULL) give_event(a, ev);
      ok = false;
      break;
    }
    b->events[b->n_events++] = ev;
  }
  if (!ok) {
    for (size_t i = 0; i < b->n_events; i++) give_event(a, (CUevent)b->events[i]);
    free(b->events);
    b->events = NULL;
    b->n_events = 0;
    b->next_waiting = a->deferred;
    a->deferred = b;
    return;
  }
  b->next_waiting = a->pending;
  a->pending = b;
}

void cgc__alloc_retire_used_block(struct cgc__allocator* a, cgc__block_t* b) {
  b->state = CGC_BLOCK_WAITING;
  if (atomic_load_explicit(&cgc__captures_underway, memory_order_acquire) > 0) {
    /* A use stream may be capturing: an event recorded there would be captured, not run. */
    b->next_waiting = a->deferred;
    a->deferred = b;
    return;
  }
  record_uses(a, b);
}

/* Outside captures only: events recorded for parked blocks, finished events queried. */
static void process_waiting(struct cgc__allocator* a) {
  if (atomic_load_explicit(&cgc__captures_underway, memory_order_acquire) > 0) return;
  cgc__block_t* deferred = a->deferred;
  a->deferred = NULL;
  while (deferred != NULL) {
    cgc__block_t* b = deferred;
    deferred = b->next_waiting;
    record_uses(a, b);
  }
  for (cgc__block_t** p = &a->pending; *p != NULL;) {
    cgc__block_t* b = *p;
    bool done = true;
    for (size_t i = 0; i < b->n_events && done; i++) {
      CUresult r = cgc__drv.cuEventQuery((CUevent)b->events[i]);
      done = r != CUDA_ERROR_NOT_READY; /* an error also ends the wait: the work is gone */
    }
    if (!done) {
      p = &b->next_waiting;
      continue;
    }
    *p = b->next_waiting;
    for (size_t i = 0; i < b->n_events; i++) give_event(a, (CUevent)b->events[i]);
    free(b->events);
    b->events = NULL;
    b->n_events = 0;
    cgc__alloc_release_block(b);
  }
}

/* ---- segments ---- */

/* Gives every whole free segment of the device cache back to the driver (no capture under way). */
static size_t release_cached_segments(struct cgc__allocator* a) {
  size_t released = 0;
  cgc__state_coalesce(&a->cache, recycle_block, NULL);
  cgc__block_set_t* sets[2] = {&a->cache.small, &a->cache.large};
  for (int s = 0; s < 2; s++) {
    cgc__block_set_t* set = sets[s];
    for (size_t i = 0; i < set->n;) {
      cgc__block_t* b = set->items[i];
      if (!cgc__block_is_segment(b) || cgc__drv.cuMemFree(b->ptr) != CUDA_SUCCESS) {
        i++;
        continue;
      }
      cgc__set_erase(set, b);
      released += b->size;
      cgc__stats_add_reserved(&a->cache.stats, -(long long)b->size);
      cgc__stats_add_reserved(&a->total, -(long long)b->size);
      a->cache.stats.driver_frees++;
      a->total.driver_frees++;
      recycle_block(b, NULL);
    }
  }
  return released;
}

static cgc_status_t new_segment(struct cgc__allocator* a, cgc__pool_state_t* owner, const void* stream,
                                size_t rounded, cgc__block_t** out, const char* func) {
  size_t size = cgc__segment_size(rounded);
  cgc__block_t* b = new_block_struct();
  if (b == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  CUdeviceptr p = 0;
  CUresult r = cgc__relaxed_mem_alloc(&p, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && atomic_load(&cgc__captures_underway) == 0) {
    /* Free what the cache holds and try once more (never during a capture: cuMemFree there
     * would break it). */
    process_waiting(a);
    if (release_cached_segments(a) > 0) r = cgc__relaxed_mem_alloc(&p, size);
  }
  if (r != CUDA_SUCCESS) {
    recycle_block(b, NULL);
    cgc_status_t st = cgc__cu_fail(r, func, "cuMemAlloc");
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free_bytes = 0, total_bytes = 0;
      cgc__drv.cuMemGetInfo(&free_bytes, &total_bytes);
      cgc__append("; tried to allocate %zu bytes (a segment of %zu) on device %d, which has %zu bytes free of "
                  "%zu; cgc holds %zu reserved, %zu allocated%s",
                  rounded, size, a->dev->ordinal, free_bytes, total_bytes, a->total.reserved, a->total.allocated,
                  atomic_load(&cgc__captures_underway) > 0 ? " (cached memory is not released during a capture)"
                                                            : "");
    }
    return st;
  }
  cgc__block_init(b, p, size, stream, owner, cgc__is_small(rounded));
  cgc__stats_add_reserved(&owner->stats, (long long)size);
  cgc__stats_add_reserved(&a->total, (long long)size);
  owner->stats.driver_allocs++;
  a->total.driver_allocs++;
  *out = b;
  return CGC_SUCCESS;
}

/* ---- malloc / free ---- */

/* Blocks of `pool` freed during its capture with uses on side streams become reusable once
 * every such stream has joined the origin after the free (SEMANTICS 12). Only blocks of the
 * origin stream qualify: a join orders the side stream before the origin's later work. */
static void reclaim_joined(cgc_pool_t pool) {
  for (cgc__block_t** p = &pool->deferred; *p != NULL;) {
    cgc__block_t* b = *p;
    bool safe = b->stream == (const void*)pool->capture_origin;
    for (size_t i = 0; safe && i < b->n_uses; i++)
      safe = cgc__capture_side_joined(pool->capture_id, b->uses[i], b->free_seq);
    if (!safe) {
      p = &b->next_waiting;
      continue;
    }
    *p = b->next_waiting;
    cgc__alloc_release_block(b);
  }
}

static cgc_status_t malloc_locked(struct cgc__allocator* a, cgc_pool_t pool, size_t size, const void* stream,
                                  void** out, const char* func) {
  cgc__pool_state_t* owner = pool ? &pool->state : &a->cache;
  size_t rounded = cgc__round_size(size);
  bool small = cgc__is_small(rounded);
  cgc__block_set_t* set = cgc__state_set(owner, small);
  if (a->pending != NULL || a->deferred != NULL) {
    cgc__ctx_scope_t scope;
    if (cgc__ctx_enter(a->dev, &scope, func) == CGC_SUCCESS) {
      process_waiting(a);
      cgc__ctx_leave(&scope);
    }
  }
  if (pool != NULL && pool->deferred != NULL) reclaim_joined(pool);
  cgc__block_t* b = cgc__set_take_best_fit(set, stream, rounded, new_block_struct);
  if (b == NULL && cgc__state_coalesce(owner, recycle_block, NULL) > 0) b = cgc__set_take_best_fit(set, stream, rounded, new_block_struct);
  if (b == NULL && pool != NULL && small) {
    /* A private pool holds its memory for its graphs anyway: a small request may be cut from a
     * free large block rather than grow the pool by a 2 MiB small segment. Graphs captured
     * largest-first into one pool then fit in the first one's memory (PyTorch keeps the two
     * classes apart here too; the device cache still does). The piece stays large-class. */
    b = cgc__set_take_best_fit(&owner->large, stream, rounded, new_block_struct);
  }
  if (b == NULL) {
    cgc__ctx_scope_t scope;
    cgc_status_t st = cgc__ctx_enter(a->dev, &scope, func);
    if (st == CGC_SUCCESS) {
      st = new_segment(a, owner, stream, rounded, &b, func);
      cgc__ctx_leave(&scope);
    }
    if (st != CGC_SUCCESS) return st;
    if (cgc__should_split(b->small, b->size, rounded)) {
      cgc__block_t* spare = new_block_struct();
      if (spare != NULL && !cgc__block_split(b, rounded, spare)) recycle_block(spare, NULL);
    }
  }
  if (!cgc__map_put(&live, b)) {
    cgc__block_release(b, recycle_block, NULL);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  b->state = CGC_BLOCK_ALLOCATED;
  b->requested = size;
  b->n_uses = 0;
  owner->outstanding++;
  account_allocated(a, b, (long long)b->size);
  *out = (void*)(uintptr_t)b->ptr;
  return CGC_SUCCESS;
}

cgc_status_t cgc__malloc(struct cgc__device* dev, size_t size, CUstream stream, bool legacy, void** out,
                         const char* func) {
  *out = NULL;
  if (size == 0) return CGC_SUCCESS; /* like cudaMalloc(0): no memory, NULL, success */
  if (size > ((size_t)1 << 62))
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes", size);
  /* Which capture, if any, the stream takes part in: asked only while a capture is under way,
   * and outside the lock (it is a driver call). */
  uint64_t capture_id = 0;
  if (!legacy && atomic_load_explicit(&cgc__captures_underway, memory_order_acquire) > 0) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    if (cgc__drv.cuStreamGetCaptureInfo(stream, &status, &id, NULL, NULL, NULL) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE)
      capture_id = id;
  }
  cgc__alloc_lock();
  struct cgc__allocator* a = cgc__allocator_of(dev);
  cgc_status_t st;
  if (a == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  } else {
    cgc_pool_t pool = capture_id ? cgc__pool_recording(a, capture_id) : NULL;
    st = malloc_locked(a, pool, size, legacy ? NULL : (const void*)stream, out, func);
  }
  cgc__alloc_unlock();
  return st;
}

cgc_status_t cgc_malloc(cgc_context_t ctx, size_t size, cgc_stream_t stream, void** out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (stream->dev != ctx->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "stream %p is on device %d, ctx on device %d",
                     (void*)stream->cu, stream->dev->ordinal, ctx->dev->ordinal);
  return cgc__malloc(ctx->dev, size, stream->cu, stream->legacy, out, __func__);
}

static cgc_status_t free_locked(void* ptr, const char* func) {
  cgc__block_t* b = cgc__map_take(&live, (uint64_t)(uintptr_t)ptr);
  if (b == NULL)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "%p was not allocated by cgc_malloc, or was already freed (nothing was changed)", ptr);
  struct cgc__allocator* a = b->owner->allocator;
  cgc_pool_t pool = b->owner->pool;
  account_allocated(a, b, -(long long)b->size);
  if (b->n_uses == 0) {
    cgc__alloc_release_block(b);
    return CGC_SUCCESS;
  }
  if (pool != NULL && pool->recording) {
    /* Freed during its pool's capture after use on other streams: reusable in this capture
     * once they have joined (reclaim_joined), or when the capture ends. */
    b->state = CGC_BLOCK_WAITING;
    b->free_seq = cgc__capture_seq();
    b->next_waiting = pool->deferred;
    pool->deferred = b;
    return CGC_SUCCESS;
  }
  cgc__ctx_scope_t scope;
  cgc_status_t st = cgc__ctx_enter(a->dev, &scope, func);
  if (st != CGC_SUCCESS) {
    b->state = CGC_BLOCK_WAITING; /* keep it parked: never reuse memory that may be in use */
    b->next_waiting = a->deferred;
    a->deferred = b;
    return CGC_SUCCESS;
  }
  cgc__alloc_retire_used_block(a, b);
  cgc__ctx_leave(&scope);
  return CGC_SUCCESS;
}

cgc_status_t cgc_free(void* ptr) {
  if (ptr == NULL) return CGC_SUCCESS;
  cgc__alloc_lock();
  cgc_status_t st = free_locked(ptr, __func__);
  cgc__alloc_unlock();
  return st;
}

cgc_status_t cgc_record_stream(void* ptr, cgc_stream_t stream) {
  CGC_CHECK_ARG(ptr != NULL, "ptr is NULL");
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  const void* key = stream->legacy ? NULL : (const void*)stream->cu;
  cgc__alloc_lock();
  cgc_status_t st = CGC_SUCCESS;
  cgc__block_t* b = cgc__map_get(&live, (uint64_t)(uintptr_t)ptr);
  if (b == NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "%p is not a live allocation of cgc_malloc", ptr);
  } else if (key != b->stream) {
    bool known = false;
    for (size_t i = 0; i < b->n_uses && !known; i++) known = b->uses[i] == key;
    if (!known) {
      if (b->n_uses == b->cap_uses) {
        size_t cap = b->cap_uses ? b->cap_uses * 2 : 4;
        const void** grown = realloc((void*)b->uses, cap * sizeof *grown);
        if (grown == NULL) {
          st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
        } else {
          b->uses = grown;
          b->cap_uses = cap;
        }
      }
      if (st == CGC_SUCCESS) b->uses[b->n_uses++] = key;
    }
  }
  cgc__alloc_unlock();
  return st;
}

cgc_status_t cgc_empty_cache(cgc_context_t ctx) {
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  if (atomic_load(&cgc__captures_underway) > 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "a capture is under way: cached memory is not given back to the driver during a capture");
  cgc__ctx_scope_t scope;
  cgc_status_t st = cgc__ctx_enter(ctx->dev, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  cgc__alloc_lock();
  struct cgc__allocator* a = ctx->dev->alloc;
  if (a != NULL) {
    process_waiting(a);
    release_cached_segments(a);
  }
  cgc__alloc_unlock();
  cgc__ctx_leave(&scope);
  return CGC_SUCCESS;
}

cgc_status_t cgc_memory_stats(cgc_context_t ctx, cgc_pool_t pool, cgc_memory_stats_t* stats) {
  CGC_CHECK_ARG(stats != NULL, "stats is NULL");
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  if (pool != NULL) CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  CGC_CHECK_ARG(stats->struct_size >= sizeof(size_t), "stats->struct_size is %zu: set it to sizeof(cgc_memory_stats_t)",
                stats->struct_size);
  if (pool != NULL && pool->dev != ctx->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "pool %p belongs to device %d, ctx to device %d",
                     (void*)pool, pool->dev->ordinal, ctx->dev->ordinal);
  cgc__stats_t s = {0};
  cgc__alloc_lock();
  if (pool != NULL) {
    s = pool->state.stats;
  } else if (ctx->dev->alloc != NULL) {
    s = ctx->dev->alloc->total;
  }
  cgc__alloc_unlock();
  cgc_memory_stats_t full = {0};
  full.struct_size = stats->struct_size < sizeof full ? stats->struct_size : sizeof full;
  full.bytes_reserved = s.reserved;
  full.bytes_allocated = s.allocated;
  full.peak_bytes_allocated = s.peak_allocated;
  full.peak_bytes_reserved = s.peak_reserved;
  full.num_driver_allocs = s.driver_allocs;
  full.num_driver_frees = s.driver_frees;
  memcpy(stats, &full, full.struct_size);
  return CGC_SUCCESS;
}

/* ---- PyTorch's CUDAPluggableAllocator entry points ----
 * torch.cuda.memory.CUDAPluggableAllocator(path, "cgc_torch_malloc", "cgc_torch_free") calls
 * these with a device ordinal and a cudaStream_t; they use that device's state directly (the
 * same one every cgc_context_t of the device uses). They cannot return a status: failures
 * return NULL (PyTorch then raises its out-of-memory error) and leave cgc_last_error() set. */

void* cgc_torch_malloc(ssize_t size, int device, void* stream) {
  if (size < 0) {
    cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "size %zd is negative", size);
    return NULL;
  }
  struct cgc__device* dev = NULL;
  if (cgc__device_get(device, &dev, __func__) != CGC_SUCCESS) return NULL;
  CUstream cu = (CUstream)stream;
  bool legacy = cu == NULL || cu == CU_STREAM_LEGACY;
  void* p = NULL;
  if (cgc__malloc(dev, (size_t)size, legacy ? NULL : cu, legacy, &p, __func__) != CGC_SUCCESS) return NULL;
  return p;
}

void cgc_torch_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)size;
  (void)device;
  (void)stream;
  cgc_free(ptr);
}
