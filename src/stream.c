/* Streams: owned (cgc_stream_create) or borrowed (cgc_stream_wrap), the legacy and per-thread
 * default streams included. */
#include <stddef.h>
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
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG((flags & ~CGC_STREAM_NON_BLOCKING) == 0, "unknown flag bits 0x%x", flags & ~CGC_STREAM_NON_BLOCKING);
  return cgc__stream_create(ctx->dev, flags, priority, out, __func__);
}

cgc_status_t cgc__stream_create(struct cgc__device* dev, unsigned flags, int priority, cgc_stream_t* out,
                                const char* func) {
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(dev, &scope, func));
  int least = 0, greatest = 0;
  CUstream cu = NULL;
  unsigned long long id = 0;
  cgc_status_t st;
  CGC_TRY_GOTO(st, CGC_CU(func, cuCtxGetStreamPriorityRange(&least, &greatest)), fail);
  /* Lower numbers are higher priorities: clamp into [greatest, least] like the runtime does. */
  if (priority > least) priority = least;
  if (priority < greatest) priority = greatest;
  unsigned cu_flags = (flags & CGC_STREAM_NON_BLOCKING) ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
  CGC_TRY_GOTO(st, CGC_CU(func, cuStreamCreateWithPriority(&cu, cu_flags, priority)), fail);
  CGC_TRY_GOTO(st, CGC_CU(func, cuStreamGetId(cu, &id)), fail); /* a new stream is not capturing: safe to ask */
  CGC_TRY_GOTO(st, new_handle(dev, cu, CGC__STREAM_OWNED, id, out, func), fail);
  cgc__ctx_leave(&scope);
  return CGC_SUCCESS;
fail:
  if (cu != NULL) CGC_DRV(cuStreamDestroy)(cu);
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_wrap(cgc_context_t ctx, void* native_stream, cgc_stream_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CUstream cu = (CUstream)native_stream;
  if (cu == NULL || cu == CU_STREAM_LEGACY) return new_handle(ctx->dev, NULL, CGC__STREAM_LEGACY, 0, out, __func__);
  if (cu == CU_STREAM_PER_THREAD) return new_handle(ctx->dev, cu, CGC__STREAM_PER_THREAD, 0, out, __func__);
  /* A stream of another device would fail later in confusing ways: say so now. */
  CUcontext owner = NULL;
  CGC_TRY(CGC_CU(__func__, cuStreamGetCtx(cu, &owner)));
  if (owner != ctx->dev->cu)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "stream %p belongs to another context than device %d's primary context", native_stream,
                     ctx->dev->ordinal);
  /* Its id is learnt now if it is not capturing, else at its first use outside a capture. */
  cgc_stream_t s = NULL;
  CGC_TRY(new_handle(ctx->dev, cu, CGC__STREAM_BORROWED, 0, &s, __func__));
  cgc__stream_ref_t ref;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__stream_resolve(s, false, &ref, __func__), fail);
  *out = s;
  return CGC_SUCCESS;

fail:
  cgc__retire(s);
  return st;
}

void* cgc_stream_native(cgc_stream_t stream) {
  if (!cgc__is_live(stream, CGC_MAGIC_STREAM)) return NULL;
  return (void*)stream->cu;
}

cgc_status_t cgc_stream_destroy(cgc_stream_t stream) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (stream->body != NULL)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "stream %p is lent for a conditional body: cgc_capture_conditional_end gives it back",
                     (void*)stream->cu);
  if (stream->special) { /* the default streams live as long as their context */
    cgc__retire(stream);
    return CGC_SUCCESS;
  }
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, true, &ref, __func__));
  if (ref.capturing)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "stream %p is capturing (capture id %llu): end the capture (cgc_capture_end on its origin "
                     "stream) before destroying it",
                     (void*)stream->cu, (unsigned long long)ref.capture_id);
  if (stream->kind == CGC__STREAM_OWNED) {
    /* What the allocator still owes the stream is settled while it exists. A borrowed stream
     * lives on (other handles may wrap it): its owner must not destroy it while blocks that
     * recorded a use of it are allocated (docs/DESIGN.md). */
    CGC_TRY(cgc__alloc_stream_ending(stream->dev, &ref, __func__));
    CGC_TRY(CGC_CU(__func__, cuStreamDestroy(stream->cu)));
  }
  cgc__retire(stream);
  return CGC_SUCCESS;
}

/* Synchronisations and queries break a capture under way on the stream itself, or (by the
 * driver's rule for the calling thread's mode) one on another stream: refused first. */
static cgc_status_t check_unsafe_call(cgc_stream_t stream, const char* call, const char* func) {
  if (stream->kind != CGC__STREAM_LEGACY) { /* the legacy stream never captures */
    cgc__stream_ref_t ref;
    CGC_TRY(cgc__stream_resolve(stream, true, &ref, func));
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
  CGC_TRY(check_unsafe_call(stream, "cuStreamSynchronize", __func__));
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__stream_enter(stream, &scope, __func__));
  cgc_status_t st = CGC_CU(__func__, cuStreamSynchronize(stream->cu));
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_query(cgc_stream_t stream, int* complete) {
  CGC_CHECK_ARG(complete != NULL, "complete is NULL");
  *complete = 0;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  CGC_TRY(check_unsafe_call(stream, "cuStreamQuery", __func__));
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__stream_enter(stream, &scope, __func__));
  CUresult r = CGC_DRV(cuStreamQuery)(stream->cu);
  cgc__ctx_leave(&scope);
  if (r == CUDA_ERROR_NOT_READY) return CGC_SUCCESS;
  if (r == CUDA_SUCCESS) *complete = 1;
  return cgc__cu_fail(r, __func__, "cuStreamQuery");
}

cgc_status_t cgc_stream_wait_event(cgc_stream_t stream, cgc_event_t event) {
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  CGC_CHECK_HANDLE(event, CGC_MAGIC_EVENT);
  if (stream->body != NULL) return cgc__refuse_in_body(stream, "a wait on an event", __func__);
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, cgc__captures_underway() > 0, &ref, __func__));
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__stream_enter(stream, &scope, __func__));
  /* A wait on an event recorded in a cgc capture makes the stream join that capture; no fence
   * is recorded meanwhile, since none is while a capture of the device is registered
   * (cgc__alloc_fence_and_park). */
  cgc_status_t st = cgc__registry_wait(&ref, event, __func__);
  cgc__ctx_leave(&scope);
  return st;
}

/* ---- what the driver knows of a stream (1.1) ---- */

cgc_status_t cgc_stream_priority_range(cgc_context_t ctx, int* least, int* greatest) {
  if (least != NULL) *least = 0;
  if (greatest != NULL) *greatest = 0;
  CGC_CHECK_ARG(least != NULL && greatest != NULL, "least or greatest is NULL");
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(ctx->dev, &scope, __func__));
  cgc_status_t st = CGC_CU(__func__, cuCtxGetStreamPriorityRange(least, greatest));
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_priority(cgc_stream_t stream, int* priority) {
  CGC_CHECK_ARG(priority != NULL, "priority is NULL");
  *priority = 0;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(stream->dev, &scope, __func__));
  cgc_status_t st = CGC_CU(__func__, cuStreamGetPriority(stream->cu, priority));
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_id(cgc_stream_t stream, uint64_t* id) {
  CGC_CHECK_ARG(id != NULL, "id is NULL");
  *id = 0;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  /* The key stream_ref.c keeps is the driver's id, learnt only while the stream was seen not
   * capturing: asking for a capturing stream's id would invalidate its capture. */
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, false, &ref, __func__));
  if (ref.key & ((uint64_t)1 << 63))
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, __func__,
                     "stream %p is capturing and its id was never learnt: asking the driver now would break the "
                     "capture; ask after cgc_capture_end",
                     (void*)stream->cu);
  *id = ref.key;
  return CGC_SUCCESS;
}

cgc_status_t cgc_stream_device(cgc_stream_t stream, int* device, void** native_context) {
  if (device != NULL) *device = -1;
  if (native_context != NULL) *native_context = NULL;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (device != NULL) *device = stream->dev->ordinal;
  if (native_context != NULL) *native_context = (void*)stream->dev->cu;
  return CGC_SUCCESS;
}

cgc_status_t cgc_stream_copy_attributes(cgc_stream_t dst, cgc_stream_t src) {
  CGC_CHECK_HANDLE(dst, CGC_MAGIC_STREAM);
  CGC_CHECK_HANDLE(src, CGC_MAGIC_STREAM);
  if (dst->dev != src->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "dst is on device %d, src on device %d", dst->dev->ordinal,
                     src->dev->ordinal);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(dst->dev, &scope, __func__));
  cgc_status_t st = CGC_CU(__func__, cuStreamCopyAttributes(dst->cu, src->cu));
  cgc__ctx_leave(&scope);
  return st;
}

_Static_assert((int)CGC_ACCESS_NORMAL == (int)CU_ACCESS_PROPERTY_NORMAL &&
                   (int)CGC_ACCESS_STREAMING == (int)CU_ACCESS_PROPERTY_STREAMING &&
                   (int)CGC_ACCESS_PERSISTING == (int)CU_ACCESS_PROPERTY_PERSISTING,
               "cgc_access_property_t has the driver's CUaccessProperty values");

/* The policy struct as 1.1 defined it: fields a later version appends are optional, so a caller
 * built against 1.1 keeps working with a later library (struct_size covers at least these). */
static const size_t kAccessPolicy_1_1 = offsetof(cgc_access_policy_t, miss_property) + sizeof(cgc_access_property_t);

cgc_status_t cgc_stream_set_access_policy(cgc_stream_t stream, const cgc_access_policy_t* policy) {
  CGC_CHECK_ARG(policy != NULL, "policy is NULL");
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  CGC_CHECK_ARG(policy->struct_size >= kAccessPolicy_1_1,
                "policy->struct_size is %zu: set it to sizeof(cgc_access_policy_t)", policy->struct_size);
  CGC_CHECK_ARG(policy->hit_ratio >= 0.0f && policy->hit_ratio <= 1.0f, "policy->hit_ratio (%g) is outside [0, 1]",
                (double)policy->hit_ratio);
  for (int i = 0; i < 2; i++) {
    cgc_access_property_t p = i == 0 ? policy->hit_property : policy->miss_property;
    CGC_CHECK_ARG(p >= CGC_ACCESS_NORMAL && p <= CGC_ACCESS_PERSISTING,
                  "policy->%s_property (%d) is not a cgc_access_property_t", i == 0 ? "hit" : "miss", (int)p);
  }
  if (cgc__host_function_depth > 0) return cgc__refuse_in_host_function(__func__);
  int max_bytes = 0;
  CGC_TRY(CGC_CU(__func__, cuDeviceGetAttribute(&max_bytes, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE,
                                                stream->dev->cu_device)));
  if (policy->bytes > (size_t)max_bytes)
    return cgc__fail(max_bytes == 0 ? CGC_ERROR_NOT_SUPPORTED : CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "policy->bytes (%zu) is above the device's largest access-policy window (%d bytes)", policy->bytes,
                     max_bytes);
  CUstreamAttrValue value = {0};
  value.accessPolicyWindow.base_ptr = policy->base;
  value.accessPolicyWindow.num_bytes = policy->bytes;
  value.accessPolicyWindow.hitRatio = policy->hit_ratio;
  value.accessPolicyWindow.hitProp = (CUaccessProperty)policy->hit_property;
  value.accessPolicyWindow.missProp = (CUaccessProperty)policy->miss_property;
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(stream->dev, &scope, __func__));
  cgc_status_t st =
      CGC_CU(__func__, cuStreamSetAttribute(stream->cu, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value));
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_stream_get_access_policy(cgc_stream_t stream, cgc_access_policy_t* policy) {
  CGC_CHECK_ARG(policy != NULL, "policy is NULL");
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  CGC_CHECK_ARG(policy->struct_size >= kAccessPolicy_1_1,
                "policy->struct_size is %zu: set it to sizeof(cgc_access_policy_t)", policy->struct_size);
  CUstreamAttrValue value = {0};
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(stream->dev, &scope, __func__));
  cgc_status_t st =
      CGC_CU(__func__, cuStreamGetAttribute(stream->cu, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value));
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) return st;
  policy->base = value.accessPolicyWindow.base_ptr;
  policy->bytes = value.accessPolicyWindow.num_bytes;
  policy->hit_ratio = value.accessPolicyWindow.hitRatio;
  policy->hit_property = (cgc_access_property_t)value.accessPolicyWindow.hitProp;
  policy->miss_property = (cgc_access_property_t)value.accessPolicyWindow.missProp;
  return CGC_SUCCESS;
}
