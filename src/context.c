/* Context handles: cgc_device_count, cgc_context_create/destroy/synchronize.
 *
 * A handle is a counted ticket on its device. When the last one goes, cgc gives back what it
 * holds on the device and no longer needs: cached segments, spare events, freed generator
 * slots and, with no generator left, its kernels module. Blocks still allocated, pools still
 * referenced and live generators keep theirs; a later handle finds the device as it was. */
#include <stdlib.h>

#include "src/internal.h"

cgc_status_t cgc_device_count(int* count) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(count != NULL, "count is NULL");
  *count = 0;
  CGC_TRY(cgc__driver_load(__func__));
  return CGC_CU(__func__, cuDeviceGetCount(count));
}

cgc_status_t cgc_context_create(int device, cgc_context_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  struct cgc__device* dev;
  CGC_TRY(cgc__device_get(device, &dev, __func__));
  cgc_context_t ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  ctx->magic = CGC_MAGIC_CONTEXT;
  ctx->dev = dev;
  atomic_fetch_add(&dev->contexts, 1);
  *out = ctx;
  return CGC_SUCCESS;
}

cgc_status_t cgc_context_destroy(cgc_context_t ctx) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  struct cgc__device* dev = ctx->dev;
  cgc__retire(ctx);
  if (atomic_fetch_sub(&dev->contexts, 1) == 1) {
    cgc__alloc_trim(dev);
    cgc__rng_device_release(dev);
  }
  return CGC_SUCCESS;
}

cgc_status_t cgc_context_synchronize(cgc_context_t ctx) {
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  /* cuCtxSynchronize waits for capturing streams too: the driver breaks a capture of this
   * device from any thread, whatever its capture mode. */
  CGC_TRY(cgc__capture_guard(ctx->dev, CGC__GUARD_DEVICE, "cuCtxSynchronize", __func__));
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(ctx->dev, &scope, __func__));
  cgc_status_t st = CGC_CU(__func__, cuCtxSynchronize());
  cgc__ctx_leave(&scope);
  return st;
}
