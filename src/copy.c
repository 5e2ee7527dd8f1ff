/* Copies, sets and page-locked host memory: the data movement a graph is made of.
 *
 * A captured copy is a memcpy node that the driver runs again at every replay, reading (or
 * writing) the same host address each time: that is how a graph takes per-replay values (the
 * caller writes page-locked memory between replays, SEMANTICS 21). The driver can do that only
 * with page-locked memory; a pageable buffer inside a capture is refused here, before the
 * driver could invalidate the capture. Outside captures pageable memory is fine, except that
 * such a copy may synchronise, which the driver counts as unsafe while another thread captures
 * in Global mode: cgc__capture_guard decides, as for any unsafe call. */
#include <stdatomic.h>
#include <stdint.h>

#include "src/internal.h"

typedef enum copy_direction { HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE } copy_direction_t;

/* The driver's memory type of `p` (CU_MEMORYTYPE_HOST for page-locked host memory), or 0 for
 * memory the driver does not know: pageable host memory, which it answers with
 * CUDA_ERROR_INVALID_VALUE (slowly: about 600 ns, against 40 ns for memory it knows). */
static unsigned memory_type(const void* p) {
  unsigned int type = 0;
  CUresult r = CGC_DRV(cuPointerGetAttribute)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p);
  if (r == CUDA_ERROR_INVALID_VALUE) return 0;
  /* Another failure says nothing about the memory: let the driver judge the copy itself. */
  return r == CUDA_SUCCESS ? type : CU_MEMORYTYPE_UNIFIED;
}

/* Pages this thread found page-locked, so that a capture copying the same parameters again and
 * again asks the driver once (a query costs about 40-80 ns against a captured copy's 0.7-1 us).
 * Page-locked memory that cgc lets go (cgc_host_free, cgc_host_unregister) bumps the
 * generation, which empties every thread's cache; memory page-locked and freed with the driver
 * alone, then reused as pageable at the same address, would be taken for page-locked until
 * then (the driver then refuses the copy itself: docs/DESIGN.md). */
enum { kPageShift = 12, kKnownPages = 8 };
static atomic_uint_fast64_t host_generation = 1;
static _Thread_local struct known_page {
  uintptr_t page;
  uint64_t generation;
} known_pages[kKnownPages];
static _Thread_local unsigned known_next;

static bool known_page_locked(uintptr_t address) {
  uint64_t generation = atomic_load_explicit(&host_generation, memory_order_acquire);
  uintptr_t page = address >> kPageShift;
  for (unsigned i = 0; i < kKnownPages; i++)
    if (known_pages[i].page == page && known_pages[i].generation == generation) return true;
  unsigned type = memory_type((const void*)address);
  if (type != CU_MEMORYTYPE_HOST) return type != 0; /* device or managed memory: not pageable either */
  known_pages[known_next] = (struct known_page){page, generation};
  known_next = (known_next + 1) % kKnownPages;
  return true;
}

/* True when [p, p + bytes) is pageable host memory, which a captured copy cannot use: its first
 * byte, and its last where that lies in another page (page-locking works on whole pages). */
static bool pageable(const void* p, size_t bytes) {
  const uintptr_t first = (uintptr_t)p, last = first + bytes - 1;
  if (!known_page_locked(first)) return true;
  return (first >> kPageShift) != (last >> kPageShift) && !known_page_locked(last);
}

static cgc_status_t copy(void* dst, const void* src, size_t bytes, cgc_stream_t stream, copy_direction_t dir,
                         const char* func) {
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  if (bytes == 0) return CGC_SUCCESS; /* nothing to copy: not even the pointers are looked at */
  if (dst == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "dst is NULL");
  if (src == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "src is NULL");
  if (bytes > UINTPTR_MAX - (uintptr_t)dst || bytes > UINTPTR_MAX - (uintptr_t)src)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "bytes (%zu) runs past the end of the address space", bytes);
  cgc__stream_ref_t ref;
  cgc__ctx_scope_t scope;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__enqueue_begin(stream, CGC__ASK_NEVER, &ref, &scope, func), out);
  /* While cgc captures, host memory that is not page-locked is looked at closer: the stream is
   * asked whether it captures (then the copy is refused) and otherwise the call may be unsafe
   * for another thread's capture. Page-locked memory (the common case) costs one query. */
  const void* host = dir == HOST_TO_DEVICE ? src : dir == DEVICE_TO_HOST ? dst : NULL;
  if (host != NULL && cgc__captures_underway() > 0 && pageable(host, bytes)) {
    if (stream->kind != CGC__STREAM_LEGACY) CGC_TRY_GOTO(st, cgc__stream_resolve(stream, true, &ref, func), out);
    const char* name = dir == HOST_TO_DEVICE ? "src" : "dst";
    if (ref.capturing) {
      st = cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                     "%s (%p, %zu bytes) is pageable host memory and stream %p is capturing: a captured copy reads "
                     "or writes its host buffer again at every replay, which the driver can do only with "
                     "page-locked memory; use cgc_host_alloc or cgc_host_register for it",
                     name, host, bytes, (void*)ref.cu);
      goto out;
    }
    CGC_TRY_GOTO(st, cgc__capture_guard(stream->dev, CGC__GUARD_THIS_THREAD, "a copy with pageable host memory", func),
                 out);
  }
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
  switch (dir) {
    case HOST_TO_DEVICE: st = CGC_CU(func, cuMemcpyHtoDAsync(d, src, bytes, ref.cu)); break;
    case DEVICE_TO_HOST: st = CGC_CU(func, cuMemcpyDtoHAsync(dst, s, bytes, ref.cu)); break;
    case DEVICE_TO_DEVICE: st = CGC_CU(func, cuMemcpyDtoDAsync(d, s, bytes, ref.cu)); break;
  }
  if (st != CGC_SUCCESS) cgc__append(" (dst %p, src %p, %zu bytes)", dst, src, bytes);
out:
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_memcpy_htod_async(void* dst, const void* src, size_t bytes, cgc_stream_t stream) {
  return copy(dst, src, bytes, stream, HOST_TO_DEVICE, __func__);
}

cgc_status_t cgc_memcpy_dtoh_async(void* dst, const void* src, size_t bytes, cgc_stream_t stream) {
  return copy(dst, src, bytes, stream, DEVICE_TO_HOST, __func__);
}

cgc_status_t cgc_memcpy_dtod_async(void* dst, const void* src, size_t bytes, cgc_stream_t stream) {
  return copy(dst, src, bytes, stream, DEVICE_TO_DEVICE, __func__);
}

/* The three sets differ in the element size and the driver call only. */
static cgc_status_t set(void* dst, uint32_t value, size_t count, size_t element, cgc_stream_t stream,
                        const char* func) {
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  if (dst == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "dst is NULL");
  if ((uintptr_t)dst % element != 0)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "dst (%p) is not aligned to the %zu-byte element", dst, element);
  if (count > (UINTPTR_MAX - (uintptr_t)dst) / element)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "count (%zu) elements of %zu bytes run past the end of the address space",
                     count, element);
  if (count == 0) return CGC_SUCCESS;
  cgc__stream_ref_t ref;
  cgc__ctx_scope_t scope;
  cgc_status_t st;
  /* A set is the same captured or not. */
  CGC_TRY_GOTO(st, cgc__enqueue_begin(stream, CGC__ASK_NEVER, &ref, &scope, func), out);
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
  if (element == 1)
    st = CGC_CU(func, cuMemsetD8Async(d, (unsigned char)value, count, ref.cu));
  else if (element == 2)
    st = CGC_CU(func, cuMemsetD16Async(d, (unsigned short)value, count, ref.cu));
  else
    st = CGC_CU(func, cuMemsetD32Async(d, value, count, ref.cu));
  if (st != CGC_SUCCESS) cgc__append(" (dst %p, %zu elements)", dst, count);
out:
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_memset_d8_async(void* dst, uint8_t value, size_t count, cgc_stream_t stream) {
  return set(dst, value, count, 1, stream, __func__);
}

cgc_status_t cgc_memset_d16_async(void* dst, uint16_t value, size_t count, cgc_stream_t stream) {
  return set(dst, value, count, 2, stream, __func__);
}

cgc_status_t cgc_memset_d32_async(void* dst, uint32_t value, size_t count, cgc_stream_t stream) {
  return set(dst, value, count, 4, stream, __func__);
}

/* ---- page-locked host memory ----
 * Allocation, registration and their undoing may synchronise with the device: they run in
 * Relaxed mode (SEMANTICS 5), like cgc's other internal calls, so no capture breaks. */

cgc_status_t cgc_host_alloc(cgc_context_t ctx, size_t bytes, unsigned flags, void** out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG((flags & ~CGC_HOST_WRITE_COMBINED) == 0, "unknown flag bits 0x%x", flags & ~CGC_HOST_WRITE_COMBINED);
  if (bytes == 0) return CGC_SUCCESS;
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(ctx->dev, &scope, __func__));
  unsigned cu_flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                      ((flags & CGC_HOST_WRITE_COMBINED) ? CU_MEMHOSTALLOC_WRITECOMBINED : 0);
  cgc_status_t st;
  CGC_RELAXED(st = CGC_CU(__func__, cuMemHostAlloc(out, bytes, cu_flags)));
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) {
    *out = NULL;
    cgc__append(" (%zu bytes)", bytes);
  }
  return st;
}

/* Runs a host-memory release (free or unregister) of `ptr` in the context that page-locked it. */
static cgc_status_t release_host(void* ptr, bool registered, const char* func) {
  if (cgc__host_function_depth > 0) return cgc__refuse_in_host_function(func);
  CGC_TRY(cgc__driver_load(func));
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  if (memory_type(ptr) != CU_MEMORYTYPE_HOST)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "ptr (%p) is not page-locked host memory of %s", ptr,
                     registered ? "cgc_host_register" : "cgc_host_alloc");
  /* The driver wants a context current: the caller's if there is one, else the primary context
   * of the device the memory was page-locked on (portable memory serves every context). */
  CUcontext owner = NULL, current = NULL;
  if (CGC_DRV(cuCtxGetCurrent)(&current) == CUDA_SUCCESS && current == NULL) {
    int ordinal = 0;
    if (CGC_DRV(cuPointerGetAttribute)(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS) ordinal = 0;
    struct cgc__device* dev = NULL;
    CGC_TRY(cgc__device_get(ordinal, &dev, func));
    owner = dev->cu;
  }
  bool pushed = false;
  if (owner != NULL) {
    CUresult r = CGC_DRV(cuCtxPushCurrent)(owner);
    if (r != CUDA_SUCCESS) return cgc__cu_fail(r, func, "cuCtxPushCurrent");
    pushed = true;
  }
  /* Before the memory goes: no thread may take its pages for page-locked from now on. */
  atomic_fetch_add_explicit(&host_generation, 1, memory_order_acq_rel);
  cgc_status_t st;
  CGC_RELAXED(st = registered ? CGC_CU(func, cuMemHostUnregister(ptr)) : CGC_CU(func, cuMemFreeHost(ptr)));
  CUcontext popped;
  if (pushed) CGC_DRV(cuCtxPopCurrent)(&popped);
  if (st != CGC_SUCCESS) cgc__append(" (ptr %p)", ptr);
  return st;
}

cgc_status_t cgc_host_free(void* ptr) {
  if (ptr == NULL) return CGC_SUCCESS;
  return release_host(ptr, false, __func__);
}

cgc_status_t cgc_host_register(cgc_context_t ctx, void* ptr, size_t bytes, unsigned flags) {
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(ptr != NULL, "ptr is NULL");
  CGC_CHECK_ARG(bytes > 0, "bytes is 0");
  CGC_CHECK_ARG(bytes <= UINTPTR_MAX - (uintptr_t)ptr, "bytes (%zu) runs past the end of the address space", bytes);
  CGC_CHECK_ARG((flags & ~CGC_HOST_READ_ONLY) == 0, "unknown flag bits 0x%x", flags & ~CGC_HOST_READ_ONLY);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(ctx->dev, &scope, __func__));
  unsigned cu_flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                      ((flags & CGC_HOST_READ_ONLY) ? CU_MEMHOSTREGISTER_READ_ONLY : 0);
  cgc_status_t st;
  CGC_RELAXED(st = CGC_CU(__func__, cuMemHostRegister(ptr, bytes, cu_flags)));
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) cgc__append(" (ptr %p, %zu bytes)", ptr, bytes);
  return st;
}

cgc_status_t cgc_host_unregister(void* ptr) {
  CGC_CHECK_ARG(ptr != NULL, "ptr is NULL");
  return release_host(ptr, true, __func__);
}
