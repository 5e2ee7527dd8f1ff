/* Per-device state and the current-context scope every driver call that needs a context uses. */
#include <stdlib.h>

#include "src/internal.h"

enum { kMaxDevices = 64 };
/* Published once, never freed: readers load without a lock. devices_lock serialises creation. */
static _Atomic(struct cgc__device*) devices[kMaxDevices];
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;

/* The driver's handles of a new device (nothing to undo here: create_device frees it on failure). */
static cgc_status_t open_device(struct cgc__device* dev, const char* func) {
  CGC_TRY(CGC_CU(func, cuDeviceGet(&dev->cu_device, dev->ordinal)));
  return CGC_CU(func, cuDevicePrimaryCtxRetain(&dev->cu, dev->cu_device));
}

static cgc_status_t create_device(int ordinal, struct cgc__device** out, const char* func) {
  int count = 0;
  if (CGC_DRV(cuDeviceGetCount)(&count) != CUDA_SUCCESS) count = 0;
  if (ordinal < 0 || ordinal >= count || ordinal >= kMaxDevices)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "device %d does not exist (%d device%s)", ordinal, count,
                     count == 1 ? "" : "s");
  cgc__mutex_lock(&devices_lock, CGC__LOCK_DEVICES);
  cgc_status_t st = CGC_SUCCESS;
  struct cgc__device* dev = atomic_load(&devices[ordinal]);
  if (dev == NULL) {
    dev = calloc(1, sizeof *dev);
    if (dev == NULL) {
      st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    } else {
      dev->ordinal = ordinal;
      st = open_device(dev, func);
      if (st == CGC_SUCCESS) {
        atomic_store(&devices[ordinal], dev);
      } else {
        free(dev);
        dev = NULL;
      }
    }
  }
  cgc__mutex_unlock(&devices_lock, CGC__LOCK_DEVICES);
  *out = dev;
  return st;
}

cgc_status_t cgc__device_get(int ordinal, struct cgc__device** out, const char* func) {
  *out = NULL;
  /* The fast path of every PyTorch allocation: a device seen before needs no driver call. */
  if (ordinal >= 0 && ordinal < kMaxDevices) {
    struct cgc__device* dev = atomic_load_explicit(&devices[ordinal], memory_order_acquire);
    if (dev != NULL) {
      *out = dev;
      return CGC_SUCCESS;
    }
  }
  CGC_TRY(cgc__driver_load(func));
  return create_device(ordinal, out, func);
}



cgc_status_t cgc__refuse_in_host_function(const char* func) {
  return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "called from inside a host function (cgc_launch_host_func), where the driver forbids CUDA "
                   "calls: do the work before or after it on the stream instead");
}

cgc_status_t cgc__ctx_enter(struct cgc__device* dev, cgc__ctx_scope_t* scope, const char* func) {
  scope->pushed = false;
  if (__builtin_expect(cgc__host_function_depth > 0, 0)) return cgc__refuse_in_host_function(func);
  CUcontext current = NULL;
  CUresult r = CGC_DRV(cuCtxGetCurrent)(&current);
  if (r != CUDA_SUCCESS) return cgc__cu_fail(r, func, "cuCtxGetCurrent");
  if (current == dev->cu) return CGC_SUCCESS;
  r = CGC_DRV(cuCtxPushCurrent)(dev->cu);
  if (r != CUDA_SUCCESS) return cgc__cu_fail(r, func, "cuCtxPushCurrent");
  scope->pushed = true;
  return CGC_SUCCESS;
}

void cgc__ctx_leave(cgc__ctx_scope_t* scope) {
  if (!scope->pushed) return;
  CUcontext popped;
  CGC_DRV(cuCtxPopCurrent)(&popped);
  scope->pushed = false;
}

/* Created once per device, under fence_lock (creating a stream waits for nothing on the GPU). */
static pthread_mutex_t fence_lock = PTHREAD_MUTEX_INITIALIZER;

cgc_status_t cgc__device_fence_stream(struct cgc__device* dev, CUstream* out, const char* func) {
  CUstream s = atomic_load_explicit(&dev->fence_stream, memory_order_acquire);
  if (s != NULL) {
    *out = s;
    return CGC_SUCCESS;
  }
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&fence_lock, CGC__LOCK_FENCE_STREAM);
  s = atomic_load_explicit(&dev->fence_stream, memory_order_acquire);
  if (s == NULL) {
    cgc__ctx_scope_t scope;
    CGC_TRY_GOTO(st, cgc__ctx_enter(dev, &scope, func), out);
    st = CGC_CU(func, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    cgc__ctx_leave(&scope);
    if (st == CGC_SUCCESS) atomic_store_explicit(&dev->fence_stream, s, memory_order_release);
  }
out:
  cgc__mutex_unlock(&fence_lock, CGC__LOCK_FENCE_STREAM);
  *out = s;
  return st;
}
