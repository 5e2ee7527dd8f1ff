/* Devices and context handles. */
#include <stdlib.h>

#include "src/internal.h"

enum { kMaxDevices = 64 };
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cgc__device* devices[kMaxDevices];

cgc_status_t cgc_device_count(int* count) {
  CGC_CHECK_ARG(count != NULL, "count is NULL");
  *count = 0;
  cgc_status_t st = cgc__driver_load(__func__);
  if (st != CGC_SUCCESS) return st;
  return CGC_CU(cuDeviceGetCount(count));
}

cgc_status_t cgc__device_get(int ordinal, struct cgc__device** out, const char* func) {
  *out = NULL;
  cgc_status_t st = cgc__driver_load(func);
  if (st != CGC_SUCCESS) return st;
  int count = 0;
  if (cgc__drv.cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  if (ordinal < 0 || ordinal >= count || ordinal >= kMaxDevices)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "device %d does not exist (%d device%s)", ordinal,
                     count, count == 1 ? "" : "s");
  pthread_mutex_lock(&devices_lock);
  struct cgc__device* dev = devices[ordinal];
  if (dev == NULL) {
    dev = calloc(1, sizeof *dev);
    if (dev == NULL) {
      st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    } else {
      dev->ordinal = ordinal;
      st = cgc__cu_fail(cgc__drv.cuDeviceGet(&dev->cu_device, ordinal), func, "cuDeviceGet");
      if (st == CGC_SUCCESS)
        st = cgc__cu_fail(cgc__drv.cuDevicePrimaryCtxRetain(&dev->cu, dev->cu_device), func,
                          "cuDevicePrimaryCtxRetain");
      if (st == CGC_SUCCESS) {
        devices[ordinal] = dev;
      } else {
        free(dev);
        dev = NULL;
      }
    }
  }
  pthread_mutex_unlock(&devices_lock);
  *out = dev;
  return st;
}

cgc_status_t cgc_context_create(int device, cgc_context_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  struct cgc__device* dev;
  cgc_status_t st = cgc__device_get(device, &dev, __func__);
  if (st != CGC_SUCCESS) return st;
  cgc_context_t ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  ctx->magic = CGC_MAGIC_CONTEXT;
  ctx->dev = dev;
  *out = ctx;
  return CGC_SUCCESS;
}

cgc_status_t cgc_context_destroy(cgc_context_t ctx) {
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  cgc__retire(ctx);
  return CGC_SUCCESS;
}

cgc_status_t cgc_context_synchronize(cgc_context_t ctx) {
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  cgc__ctx_scope_t scope;
  cgc_status_t st = cgc__ctx_enter(ctx->dev, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  st = CGC_CU(cuCtxSynchronize());
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc__ctx_enter(struct cgc__device* dev, cgc__ctx_scope_t* scope, const char* func) {
  scope->pushed = false;
  CUcontext current = NULL;
  CUresult r = cgc__drv.cuCtxGetCurrent(&current);
  if (r != CUDA_SUCCESS) return cgc__cu_fail(r, func, "cuCtxGetCurrent");
  if (current == dev->cu) return CGC_SUCCESS;
  r = cgc__drv.cuCtxPushCurrent(dev->cu);
  if (r != CUDA_SUCCESS) return cgc__cu_fail(r, func, "cuCtxPushCurrent");
  scope->pushed = true;
  return CGC_SUCCESS;
}

void cgc__ctx_leave(cgc__ctx_scope_t* scope) {
  if (!scope->pushed) return;
  CUcontext popped;
  cgc__drv.cuCtxPopCurrent(&popped);
  scope->pushed = false;
}
