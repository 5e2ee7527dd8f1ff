/* Streams: owned (cgc_stream_create) or borrowed (cgc_stream_wrap), legacy default included. */
#include <stdlib.h>

#include "src/internal.h"

/* The legacy default stream is resolved through the current context, so calls on it run with
 * the stream's device current; other streams carry their context. */
static cgc_status_t enter_for(cgc_stream_t s, cgc__ctx_scope_t* scope, const char* func) {
  scope->pushed = false;
  return s->legacy ? cgc__ctx_enter(s->dev, scope, func) : CGC_SUCCESS;
}

static cgc_status_t new_handle(struct cgc__device* dev, CUstream cu, bool owned, bool legacy,
                               cgc_stream_t* out, const char* func) {
  cgc_stream_t s = calloc(1, sizeof *s);
  if (s == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  s->magic = CGC_MAGIC_STREAM;
  s->dev = dev;
  s->cu = cu;
  s->owned = owned;
  s->legacy = legacy;
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
  st = CGC_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  if (st == CGC_SUCCESS) {
    /* Lower numbers are higher priorities: clamp into [greatest, least] like the runtime does. */
    if (priority > least) priority = least;
    if (priority < greatest) priority = greatest;
    CUstream cu = NULL;
    unsigned cu_flags = (flags & CGC_STREAM_NON_BLOCKING) ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
    st = CGC_CU(cuStreamCreateWithPriority(&cu, cu_flags, priority));
    if (st == CGC_SUCCESS) {
      st = new_handle(ctx->dev, cu, true, false, out, __func__);
      if (st != CGC_SUCCESS) cgc__drv.cuStreamDestroy(cu);
    }
  }
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_wrap(cgc_context_t ctx, void* native_stream, cgc_stream_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CUstream cu = (CUstream)native_stream;
  if (cu == NULL || cu == CU_STREAM_LEGACY) return new_handle(ctx->dev, NULL, false, true, out, __func__);
  if (cu != CU_STREAM_PER_THREAD) {
    /* A stream of another device would fail later in confusing ways: say so now. */
    CUcontext owner = NULL;
    cgc_status_t st = CGC_CU(cuStreamGetCtx(cu, &owner));
    if (st != CGC_SUCCESS) return st;
    if (owner != ctx->dev->cu)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                       "stream %p belongs to another context than device %d's primary context",
                       native_stream, ctx->dev->ordinal);
  }
  return new_handle(ctx->dev, cu, false, false, out, __func__);
}

void* cgc_stream_native(cgc_stream_t stream) {
  if (!cgc__is_live(stream, CGC_MAGIC_STREAM)) return NULL;
  return (void*)stream->cu;
}

cgc_status_t cgc_stream_destroy(cgc_stream_t stream) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (stream->cu != NULL && cgc__capture_has_origin(stream->cu))
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "stream %p is capturing: end the capture (cgc_capture_end) before destroying it",
                     (void*)stream->cu);
  cgc_status_t st = CGC_SUCCESS;
  if (stream->owned) st = CGC_CU(cuStreamDestroy(stream->cu));
  if (st == CGC_SUCCESS) cgc__retire(stream);
  return st;
}

cgc_status_t cgc_stream_synchronize(cgc_stream_t stream) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc__ctx_scope_t scope;
  cgc_status_t st = enter_for(stream, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  st = CGC_CU(cuStreamSynchronize(stream->cu));
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_query(cgc_stream_t stream, int* complete) {
  CGC_CHECK_ARG(complete != NULL, "complete is NULL");
  *complete = 0;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc__ctx_scope_t scope;
  cgc_status_t st = enter_for(stream, &scope, __func__);
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
  cgc__ctx_scope_t scope;
  cgc_status_t st = enter_for(stream, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  st = CGC_CU(cuStreamWaitEvent(stream->cu, event->cu, 0));
  cgc__ctx_leave(&scope);
  if (st == CGC_SUCCESS) cgc__capture_note_wait(stream, event);
  return st;
}
