/* Streams: owned (cgc_stream_create) or borrowed (cgc_stream_wrap), the legacy and per-thread
 * default streams included. */
#include <stdlib.h>

#include "src/internal.h"

static cgc_status_t new_handle(struct cgc__device* dev, CUstream cu, cgc__stream_kind_t kind, uint64_t id,
                               cgc_stream_t* out, const char* func) {
  cgc_stream_t s = calloc(1, sizeof *s);
  if (s == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  s->magic = CGC_MAGIC_STREAM;
  s->dev = dev;
  s->cu = cu;
  s->kind = kind;
  s->special = kind == CGC__STREAM_LEGACY || kind == CGC__STREAM_PER_THREAD;
  atomic_init(&s->id, id);
  *out = s;
  return CGC_SUCCESS;
}

cgc_status_t cgc_stream_create(cgc_context_t ctx, unsigned flags, int priority, cgc_stream_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG((flags & ~CGC_STREAM_NON_BLOCKING) == 0, "unknown flag bits 0x%x", flags & ~CGC_STREAM_NON_BLOCKING);
  cgc__ctx_scope_t scope;
  cgc_status_t st = cgc__ctx_enter(ctx->dev, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  int least = 0, greatest = 0;
  CUstream cu = NULL;
  unsigned long long id = 0;
  st = CGC_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  if (st != CGC_SUCCESS) goto fail;
  /* Lower numbers are higher priorities: clamp into [greatest, least] like the runtime does. */
  if (priority > least) priority = least;
  if (priority < greatest) priority = greatest;
  unsigned cu_flags = (flags & CGC_STREAM_NON_BLOCKING) ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
  st = CGC_CU(cuStreamCreateWithPriority(&cu, cu_flags, priority));
  if (st != CGC_SUCCESS) goto fail;
  st = CGC_CU(cuStreamGetId(cu, &id)); /* a new stream is not capturing: safe to ask */
  if (st != CGC_SUCCESS) goto fail;
  st = new_handle(ctx->dev, cu, CGC__STREAM_OWNED, id, out, __func__);
  if (st != CGC_SUCCESS) goto fail;
  cgc__ctx_leave(&scope);
  return CGC_SUCCESS;
fail:
  if (cu != NULL) cgc__drv.cuStreamDestroy(cu);
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_wrap(cgc_context_t ctx, void* native_stream, cgc_stream_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CUstream cu = (CUstream)native_stream;
  if (cu == NULL || cu == CU_STREAM_LEGACY) return new_handle(ctx->dev, NULL, CGC__STREAM_LEGACY, 0, out, __func__);
  if (cu == CU_STREAM_PER_THREAD) return new_handle(ctx->dev, cu, CGC__STREAM_PER_THREAD, 0, out, __func__);
  /* A stream of another device would fail later in confusing ways: say so now. */
  CUcontext owner = NULL;
  cgc_status_t st = CGC_CU(cuStreamGetCtx(cu, &owner));
  if (st != CGC_SUCCESS) return st;
  if (owner != ctx->dev->cu)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "stream %p belongs to another context than device %d's primary context", native_stream,
                     ctx->dev->ordinal);
  /* Its id is learnt now if it is not capturing, else at its first use outside a capture. */
  cgc_stream_t s = NULL;
  st = new_handle(ctx->dev, cu, CGC__STREAM_BORROWED, 0, &s, __func__);
  cgc__stream_ref_t ref;
  if (st == CGC_SUCCESS) st = cgc__stream_resolve(s, false, &ref, __func__);
  if (st != CGC_SUCCESS) {
    if (s != NULL) cgc__retire(s);
    return st;
  }
  *out = s;
  return CGC_SUCCESS;
}

void* cgc_stream_native(cgc_stream_t stream) {
  if (!cgc__is_live(stream, CGC_MAGIC_STREAM)) return NULL;
  return (void*)stream->cu;
}

cgc_status_t cgc_stream_destroy(cgc_stream_t stream) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (stream->special) { /* the default streams live as long as their context */
    cgc__retire(stream);
    return CGC_SUCCESS;
  }
  cgc__stream_ref_t ref;
  cgc_status_t st = cgc__stream_resolve(stream, true, &ref, __func__);
  if (st != CGC_SUCCESS) return st;
  if (ref.capturing)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "stream %p is capturing (capture id %llu): end the capture (cgc_capture_end on its origin "
                     "stream) before destroying it",
                     (void*)stream->cu, (unsigned long long)ref.capture_id);
  if (stream->kind == CGC__STREAM_OWNED) {
    /* What the allocator still owes the stream is settled while it exists. A borrowed stream
     * lives on (other handles may wrap it): its owner must not destroy it while blocks that
     * recorded a use of it are allocated (docs/DESIGN.md). */
    st = cgc__alloc_stream_ending(stream->dev, &ref, __func__);
    if (st == CGC_SUCCESS) st = CGC_CU(cuStreamDestroy(stream->cu));
  }
  if (st == CGC_SUCCESS) cgc__retire(stream);
  return st;
}

/* Synchronisations and queries break a capture under way on the stream itself, or (by the
 * driver's rule for the calling thread's mode) one on another stream: refused first. */
static cgc_status_t check_unsafe_call(cgc_stream_t stream, const char* call, const char* func) {
  if (stream->kind != CGC__STREAM_LEGACY) { /* the legacy stream never captures */
    cgc__stream_ref_t ref;
    cgc_status_t st = cgc__stream_resolve(stream, true, &ref, func);
    if (st != CGC_SUCCESS) return st;
    if (ref.capturing)
      return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                       "stream %p is capturing (capture id %llu): %s would break the capture; call it after "
                       "cgc_capture_end",
                       (void*)stream->cu, (unsigned long long)ref.capture_id, call);
  }
  return cgc__capture_guard(stream->dev, CGC__GUARD_THIS_THREAD, call, func);
}

cgc_status_t cgc_stream_synchronize(cgc_stream_t stream) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc_status_t st = check_unsafe_call(stream, "cuStreamSynchronize", __func__);
  if (st != CGC_SUCCESS) return st;
  cgc__ctx_scope_t scope;
  st = cgc__stream_enter(stream, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  st = CGC_CU(cuStreamSynchronize(stream->cu));
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_query(cgc_stream_t stream, int* complete) {
  CGC_CHECK_ARG(complete != NULL, "complete is NULL");
  *complete = 0;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc_status_t st = check_unsafe_call(stream, "cuStreamQuery", __func__);
  if (st != CGC_SUCCESS) return st;
  cgc__ctx_scope_t scope;
  st = cgc__stream_enter(stream, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  CUresult r = cgc__drv.cuStreamQuery(stream->cu);
  cgc__ctx_leave(&scope);
  if (r == CUDA_ERROR_NOT_READY) return CGC_SUCCESS;
  if (r == CUDA_SUCCESS) *complete = 1;
  return cgc__cu_fail(r, __func__, "cuStreamQuery");
}

cgc_status_t cgc_stream_wait_event(cgc_stream_t stream, cgc_event_t event) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  CGC_CHECK_HANDLE(event, CGC_MAGIC_EVENT);
  cgc__stream_ref_t ref;
  cgc_status_t st = cgc__stream_resolve(stream, cgc__captures_underway() > 0, &ref, __func__);
  if (st != CGC_SUCCESS) return st;
  cgc__ctx_scope_t scope;
  st = cgc__stream_enter(stream, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  /* A wait on an event recorded in a capture makes the stream join that capture: no fence may
   * be recorded on it meanwhile (cgc__alloc_fence_lock). */
  bool joining = ref.capture_id != 0 || cgc__captures_underway() > 0;
  if (joining) cgc__alloc_fence_lock(stream->dev);
  st = cgc__registry_wait(&ref, event, __func__);
  if (joining) cgc__alloc_fence_unlock(stream->dev);
  cgc__ctx_leave(&scope);
  return st;
}
