/* The allocator's public entry points: cgc_malloc, cgc_free, cgc_record_stream,
 * cgc_empty_cache, cgc_memory_stats and PyTorch's pluggable-allocator entry points. The state
 * and its mechanisms are the layers below (allocator.h lists them). */
#include <stdlib.h>
#include <string.h>

#include "src/allocator.h"

/* On a conditional body's stream: from the pool of the capture the body belongs to, under the
 * body stream's key (only the body reuses it while the body is open; at its end it passes to
 * the stream the node was added on: cgc__alloc_body_ended). */
static cgc_status_t malloc_in_body(cgc_context_t ctx, size_t size, cgc_stream_t stream, void** out) {
  cgc__stream_ref_t ref;
  uint64_t capture = 0;
  CGC_TRY(cgc__stream_resolve(stream, true, &ref, "cgc_malloc"));
  CGC_TRY(cgc__registry_capture_of(&ref, &capture, "cgc_malloc"));
  if (capture == 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, "cgc_malloc", "stream %p was lent for a conditional body that has ended",
                     (void*)stream->cu);
  ref.capture_id = capture;
  return cgc__malloc(ctx->dev, size, &ref, out, "cgc_malloc");
}

cgc_status_t cgc_malloc(cgc_context_t ctx, size_t size, cgc_stream_t stream, void** out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (stream->dev != ctx->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "stream %p is on device %d, ctx on device %d",
                     (void*)stream->cu, stream->dev->ordinal, ctx->dev->ordinal);
  if (size == 0) return CGC_SUCCESS;
  /* Whether the stream captures matters only while a capture cgc began is under way: then it is
   * asked (one cuStreamGetCaptureInfo, which never waits behind other threads' driver calls).
   * Otherwise the hit path makes no driver call at all (measured: the query alone would double
   * it). A capture begun with the driver directly while no cgc capture runs is therefore not
   * seen here; cgc_torch_malloc, through which other frameworks' captures arrive, always asks. */
  if (__builtin_expect(stream->body != NULL, 0)) return malloc_in_body(ctx, size, stream, out);
  bool ask = cgc__captures_underway() > 0 || atomic_load_explicit(&cgc__adopted_captures, memory_order_relaxed) > 0;
  uint64_t id = atomic_load_explicit(&stream->id, memory_order_relaxed);
  cgc__stream_ref_t ref = {.cu = stream->cu, .key = id}; /* not capturing: asked below when it matters */
  if (ask || stream->special || id == 0) CGC_TRY(cgc__stream_resolve(stream, ask, &ref, __func__));
  return cgc__malloc(ctx->dev, size, &ref, out, __func__);
}

/* ---- free ---- */

static cgc_status_t not_ours(void* ptr, const char* func) {
  return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                   "%p was not allocated by cgc_malloc, or was already freed (nothing was changed)", ptr);
}

/* A block with recorded uses: fences are recorded on its use streams before it can be reused
 * (fences.c's fence_and_park: with the lock dropped, the free counted in `fencing`). */
static cgc_status_t free_used(struct cgc__allocator* a, void* ptr, const char* func) {
  cgc__alloc_lock(a);
  cgc__block_t* b = cgc__map_take(&a->live, (uint64_t)(uintptr_t)ptr);
  if (b == NULL) { /* freed by another thread meanwhile */
    cgc__alloc_unlock(a);
    return not_ours(ptr, func);
  }
  cgc__alloc_account(a, b, -(long long)b->size);
  a->blocks_with_uses--;
  cgc__pool_note_free(b);
  cgc_pool_t pool = b->owner->pool;
  bool in_its_capture = pool != NULL && pool->recording && b->capture_id != 0 && b->capture_id == pool->capture_id;
  if (in_its_capture && cgc__joins_mark_here(pool) && a->ending_streams == 0) {
    /* An adopted capture's joins are seen in its graph only: the use streams' last nodes are
     * asked with the lock dropped, the free counted in `fencing` (the use streams live: a stream
     * handle going away waits for it, and none is going away now, else the block keeps no
     * markers), the block ours alone meanwhile. The capture may have ended since: then it is
     * parked below. */
    b->state = CGC_BLOCK_WAITING;
    uint64_t capture = pool->capture_id;
    a->fencing++;
    cgc__alloc_unlock(a);
    cgc__joins_mark(b, capture);
    cgc__alloc_lock(a);
    a->fencing--;
    in_its_capture = pool->recording && pool->capture_id == capture;
    if (!in_its_capture && b->has_markers) cgc__block_drop_markers(b);
  }
  if (in_its_capture) {
    /* Freed during its pool's capture, which allocated it, after use on other streams: reusable
     * in this capture once they have joined (pool.c; joins.c for an adopted capture), or when
     * the capture ends. A block of the pool from before (an earlier graph's output,
     * cgc_pool_malloc's) is parked with fences as any other: the capture's end says nothing
     * about uses that began outside it. */
    b->state = CGC_BLOCK_WAITING;
    b->free_seq = cgc__registry_seq();
    b->next_waiting = pool->deferred;
    pool->deferred = b;
    cgc__alloc_unlock(a);
    return CGC_SUCCESS;
  }
  a->fencing++; /* from taking the block out of the map: its use streams live until it is parked */
  cgc__alloc_fence_and_park(a, b);
  a->fencing--;
  bool deferred = a->deferred != NULL;
  cgc__alloc_unlock(a);
  /* A free with uses waits on the driver anyway: blocks deferred by captures now over go too. */
  if (deferred) cgc__alloc_settle_deferred(a);
  return CGC_SUCCESS;
}

cgc_status_t cgc_free(void* ptr) {
  if (ptr == NULL) return CGC_SUCCESS;
  bool has_uses = false;
  struct cgc__allocator* a = cgc__alloc_free_plain(ptr, &has_uses);
  if (a == NULL) return not_ours(ptr, __func__);
  return has_uses ? free_used(a, ptr, __func__) : CGC_SUCCESS;
}

/* The use of `b` by stream `ref`, added unless `ref` is its allocation stream or already known;
 * *use is where it is (NULL for the allocation stream). Lock held. */
static cgc_status_t add_use(struct cgc__allocator* a, cgc__block_t* b, const cgc__stream_ref_t* ref,
                            struct cgc__block_use** use, const char* func) {
  *use = NULL;
  if (ref->key == (b->stream & ~CGC__KEY_POOL_EAGER_BIT)) return CGC_SUCCESS; /* its own stream (cgc_pool_malloc's too) */
  for (size_t i = 0; i < b->n_uses; i++) {
    if (b->uses[i].key == ref->key) {
      *use = &b->uses[i];
      return CGC_SUCCESS;
    }
  }
  if (b->n_uses == b->cap_uses) {
    size_t cap = b->cap_uses ? b->cap_uses * 2 : 4;
    struct cgc__block_use* grown = realloc(b->uses, cap * sizeof *grown);
    if (grown == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    b->uses = grown;
    b->cap_uses = cap;
  }
  if (b->n_uses == 0) a->blocks_with_uses++;
  *use = &b->uses[b->n_uses++];
  **use = (struct cgc__block_use){ref->key, ref->cu, NULL};
  return CGC_SUCCESS;
}

/* Records that `ptr` is used by work on the stream `ref` resolves (of device `dev`; `per_thread`:
 * the per-thread default stream, resolved with its capture state). */
static cgc_status_t record_use(struct cgc__device* dev, void* ptr, const cgc__stream_ref_t* ref, bool per_thread,
                               const char* func) {
  struct cgc__allocator* own = cgc__allocator_of(dev);
  if (own == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  /* The per-thread stream is another stream on every thread: no other thread can record on it
   * later, so its fence is recorded now and covers the work enqueued on it so far. */
  cgc__fence_t* now = NULL;
  if (per_thread) {
    if (ref->capturing)
      return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                       "the per-thread stream is capturing: record the use on a created stream instead");
    cgc__ctx_scope_t scope;
    CGC_TRY(cgc__ctx_enter(dev, &scope, func));
    now = cgc__alloc_record_fence(own, CU_STREAM_PER_THREAD);
    cgc__ctx_leave(&scope);
    if (now == NULL) return cgc__fail(CGC_ERROR_CUDA, func, "recording an event on the per-thread stream failed");
  }
  cgc_status_t st = CGC_SUCCESS;
  cgc__block_t* b = NULL;
  struct cgc__allocator* a = cgc__alloc_find(ptr, &b);
  if (a == NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%p is not a live allocation of cgc_malloc", ptr);
    cgc__alloc_lock(own); /* where the unused fence goes back */
    a = own;
  } else if (a != own) {
    st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%p is memory of device %d, stream %p of device %d", ptr,
                   a->dev->ordinal, (void*)ref->cu, dev->ordinal);
  } else {
    struct cgc__block_use* use = NULL;
    st = add_use(a, b, ref, &use, func);
    if (use != NULL && now != NULL) { /* the newer record covers more work */
      if (use->fence != NULL) cgc__fence_put(a, use->fence);
      use->fence = now;
      now = NULL;
    }
  }
  if (now != NULL) {
    if (a != own) { /* fences live with their stream's allocator */
      cgc__alloc_unlock(a);
      cgc__alloc_lock(own);
      a = own;
    }
    cgc__fence_put(own, now);
  }
  cgc__alloc_unlock(a);
  return st;
}

cgc_status_t cgc_record_stream(void* ptr, cgc_stream_t stream) {
  CGC_CHECK_ARG(ptr != NULL, "ptr is NULL");
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  bool per_thread = stream->kind == CGC__STREAM_PER_THREAD;
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, per_thread, &ref, __func__));
  return record_use(stream->dev, ptr, &ref, per_thread, __func__);
}

cgc_status_t cgc_record_stream_native(void* ptr, void* native_stream) {
  CGC_CHECK_ARG(ptr != NULL, "ptr is NULL");
  /* The stream is resolved on the block's device (a native stream names none); the block is
   * looked up again under the lock when the use is added, in case it was freed meanwhile. */
  cgc__block_t* b = NULL;
  struct cgc__allocator* a = cgc__alloc_find(ptr, &b);
  if (a == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "%p is not a live allocation of cgc_malloc", ptr);
  struct cgc__device* dev = a->dev;
  cgc__alloc_unlock(a);
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve_native(dev, (CUstream)native_stream, &ref, __func__));
  return record_use(dev, ptr, &ref, (CUstream)native_stream == CU_STREAM_PER_THREAD, __func__);
}

cgc_status_t cgc_empty_cache(cgc_context_t ctx) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CUstream origin = NULL;
  int captures = cgc__registry_count_on(ctx->dev, &origin);
  if (captures > 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "%d capture(s) under way on device %d (one on stream %p): cached memory is given back after "
                     "cgc_capture_end",
                     captures, ctx->dev->ordinal, (void*)origin);
  struct cgc__allocator* a = atomic_load_explicit(&ctx->dev->alloc, memory_order_acquire);
  if (a == NULL) return CGC_SUCCESS;
  /* Captures others began count too, once a pool adopted them (1.4), until the adoption ends:
   * cgc knows it from its own records, never by asking the driver about a stream whose capture
   * another thread may be ending at that instant (driver 580 crashes there). */
  CUstream adopted_origin = NULL;
  cgc_pool_t adopting = cgc__pool_adoption_open(ctx->dev, &adopted_origin);
  if (adopting != NULL)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "pool %p adopts a capture cgc did not begin (through stream %p): cached memory is given back "
                     "once its adopter ends the adoption (cgc_pool_end_adopted_capture)",
                     (void*)adopting, (void*)adopted_origin);
  cgc__alloc_give_back(a);
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
  struct cgc__allocator* a = atomic_load_explicit(&ctx->dev->alloc, memory_order_acquire);
  if (a != NULL) {
    cgc__alloc_lock(a);
    s = pool != NULL ? pool->state.stats : a->total;
    cgc__alloc_unlock(a);
  }
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
  if (size == 0) return NULL;
  struct cgc__device* dev = NULL;
  if (cgc__device_get(device, &dev, __func__) != CGC_SUCCESS) return NULL;
  cgc__stream_ref_t ref;
  if (cgc__stream_resolve_native(dev, (CUstream)stream, &ref, __func__) != CGC_SUCCESS) return NULL;
  void* p = NULL;
  if (cgc__malloc(dev, (size_t)size, &ref, &p, __func__) != CGC_SUCCESS) return NULL;
  return p;
}

void cgc_torch_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)size;
  (void)device;
  (void)stream;
  cgc_free(ptr);
}
