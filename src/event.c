/* Events. Records and waits also feed the capture's fork/join bookkeeping (registry.c). */
#include <stdlib.h>

#include "src/internal.h"

cgc_status_t cgc_event_create(cgc_context_t ctx, unsigned flags, cgc_event_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG((flags & ~CGC_EVENT_TIMING) == 0, "unknown flag bits 0x%x", flags & ~CGC_EVENT_TIMING);
  cgc_event_t ev = calloc(1, sizeof *ev);
  if (ev == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  cgc__ctx_scope_t scope;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__ctx_enter(ctx->dev, &scope, __func__), fail);
  unsigned cu_flags = (flags & CGC_EVENT_TIMING) ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
  st = CGC_CU(__func__, cuEventCreate(&ev->cu, cu_flags));
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) goto fail;
  ev->magic = CGC_MAGIC_EVENT;
  ev->dev = ctx->dev;
  *out = ev;
  return CGC_SUCCESS;

fail:
  free(ev);
  return st;
}

cgc_status_t cgc_event_destroy(cgc_event_t event) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(event, CGC_MAGIC_EVENT);
  cgc_status_t st = CGC_CU(__func__, cuEventDestroy(event->cu));
  cgc__retire(event);
  return st;
}

cgc_status_t cgc_event_record(cgc_event_t event, cgc_stream_t stream) {
  CGC_CHECK_HANDLE(event, CGC_MAGIC_EVENT);
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (stream->body != NULL) return cgc__refuse_in_body(stream, "an event record", __func__);
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, cgc__captures_underway() > 0, &ref, __func__));
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__stream_enter(stream, &scope, __func__));
  cgc_status_t st = cgc__registry_record(event, &ref, __func__);
  cgc__ctx_leave(&scope);
  return st;
}

/* Waiting on or querying an event is a call the driver counts as unsafe during a capture. */
cgc_status_t cgc_event_synchronize(cgc_event_t event) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(event, CGC_MAGIC_EVENT);
  CGC_TRY(cgc__capture_guard(event->dev, CGC__GUARD_THIS_THREAD, "cuEventSynchronize", __func__));
  return CGC_CU(__func__, cuEventSynchronize(event->cu));
}

cgc_status_t cgc_event_query(cgc_event_t event, int* complete) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(complete != NULL, "complete is NULL");
  *complete = 0;
  CGC_CHECK_HANDLE(event, CGC_MAGIC_EVENT);
  CGC_TRY(cgc__capture_guard(event->dev, CGC__GUARD_THIS_THREAD, "cuEventQuery", __func__));
  CUresult r = CGC_DRV(cuEventQuery)(event->cu);
  if (r == CUDA_ERROR_NOT_READY) return CGC_SUCCESS;
  if (r == CUDA_SUCCESS) *complete = 1;
  return cgc__cu_fail(r, __func__, "cuEventQuery");
}

cgc_status_t cgc_event_elapsed_ms(cgc_event_t start, cgc_event_t end, float* ms) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(ms != NULL, "ms is NULL");
  *ms = 0.0f;
  CGC_CHECK_HANDLE(start, CGC_MAGIC_EVENT);
  CGC_CHECK_HANDLE(end, CGC_MAGIC_EVENT);
  return CGC_CU(__func__, cuEventElapsedTime(ms, start->cu, end->cu));
}
