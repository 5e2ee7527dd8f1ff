/* Loads libcuda.so.1 once and resolves the entry points listed in driver.h. */
#include "src/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

cgc__driver_t cgc__drv;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cgc_status_t load_status = CGC_ERROR_INTERNAL;
static char load_message[768];

enum { kBaselineVersion = 12000 }; /* CUDA 12.0: cuGetProcAddress_v2, cuLibraryLoadData */

static void set_load_failure(cgc_status_t st, const char* fmt, const char* a, const char* b) {
  load_status = st;
  snprintf(load_message, sizeof load_message, fmt, a, b);
}

static void load_driver(void) {
  const char* path = getenv("CGC_CUDA_DRIVER");
  if (path == NULL || path[0] == '\0') path = "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* why = dlerror();
    set_load_failure(CGC_ERROR_NO_DRIVER,
                     "the CUDA driver could not be loaded from '%s' (%s); install the NVIDIA driver, "
                     "or point CGC_CUDA_DRIVER at libcuda.so.1",
                     path, why ? why : "unknown reason");
    return;
  }
  /* The library stays loaded for the life of the process: handles out there point into it. */
  PFN_cuGetProcAddress_v12000 get_proc = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
  if (get_proc == NULL) {
    set_load_failure(CGC_ERROR_NOT_SUPPORTED,
                     "the CUDA driver at '%s' has no cuGetProcAddress_v2: cgc needs a driver for CUDA 12.0 "
                     "or newer%s",
                     path, "");
    return;
  }
  const char* missing = NULL;
  CUdriverProcAddressQueryResult found;
#define RESOLVE(name, type, version)                                                              \
  if (get_proc(#name, (void**)&cgc__drv.name, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) != \
          CUDA_SUCCESS ||                                                                         \
      cgc__drv.name == NULL) {                                                                    \
    cgc__drv.name = NULL;                                                                         \
    if (missing == NULL) missing = #name;                                                         \
  }
#define RESOLVE_OPTIONAL(name, type, version)                                                       \
  if (get_proc(#name, (void**)&cgc__drv.name, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) != \
      CUDA_SUCCESS)                                                                                \
    cgc__drv.name = NULL;
  CGC_DRIVER_ENTRIES(RESOLVE, RESOLVE_OPTIONAL)
#undef RESOLVE
#undef RESOLVE_OPTIONAL
  if (missing != NULL) {
    set_load_failure(CGC_ERROR_NOT_SUPPORTED,
                     "the CUDA driver at '%s' lacks %s: cgc needs a driver for CUDA 12.0 or newer", path,
                     missing);
    return;
  }
  if (cgc__drv.cuDriverGetVersion(&cgc__drv.version) != CUDA_SUCCESS || cgc__drv.version < kBaselineVersion) {
    set_load_failure(CGC_ERROR_NOT_SUPPORTED,
                     "the CUDA driver at '%s' is too old: cgc needs a driver for CUDA 12.0 or newer%s", path,
                     "");
    return;
  }
  CUresult r = cgc__drv.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = "CUDA_ERROR_UNKNOWN";
    cgc__drv.cuGetErrorName(r, &name);
    if (r == CUDA_ERROR_NO_DEVICE) {
      set_load_failure(CGC_ERROR_NO_DEVICE, "cuInit found no CUDA device (%s)%s", name, "");
    } else if (r == CUDA_ERROR_STUB_LIBRARY) {
      set_load_failure(CGC_ERROR_NO_DRIVER, "'%s' is the toolkit's stub, not a driver (%s)", path, name);
    } else {
      load_status = cgc__status_from_cu(r);
      snprintf(load_message, sizeof load_message, "cuInit failed: %s", name);
    }
    return;
  }
  load_status = CGC_SUCCESS;
}

cgc_status_t cgc__driver_load(const char* func) {
  pthread_once(&load_once, load_driver);
  if (load_status == CGC_SUCCESS) return CGC_SUCCESS;
  return cgc__fail(load_status, func, "%s", load_message);
}

cgc_status_t cgc__status_from_cu(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return CGC_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: return CGC_ERROR_OUT_OF_MEMORY;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE: return CGC_ERROR_NO_DEVICE;
    case CUDA_ERROR_NOT_SUPPORTED: return CGC_ERROR_NOT_SUPPORTED;
    case CUDA_ERROR_STUB_LIBRARY: return CGC_ERROR_NO_DRIVER;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_CAPTURED_EVENT: return CGC_ERROR_CAPTURE_UNSUPPORTED;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return CGC_ERROR_CAPTURE_INVALIDATED;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return CGC_ERROR_CAPTURE_UNJOINED;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return CGC_ERROR_INVALID_STATE;
    default: return CGC_ERROR_CUDA;
  }
}

cgc_status_t cgc__cu_fail(CUresult r, const char* func, const char* call) {
  if (r == CUDA_SUCCESS) return CGC_SUCCESS;
  const char* name = NULL;
  const char* text = NULL;
  if (cgc__drv.cuGetErrorName == NULL || cgc__drv.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (cgc__drv.cuGetErrorString == NULL || cgc__drv.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  size_t call_len = strcspn(call, "(");
  if (name != NULL)
    return cgc__fail(cgc__status_from_cu(r), func, "%.*s failed: %s (%s)", (int)call_len, call, name,
                     text ? text : "no description");
  return cgc__fail(cgc__status_from_cu(r), func, "%.*s failed: CUresult %d", (int)call_len, call, (int)r);
}

CUstreamCaptureMode cgc__relaxed_begin(void) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CGC_DRV(cuThreadExchangeStreamCaptureMode)(&mode);
  return mode;
}

void cgc__relaxed_end(CUstreamCaptureMode previous) { CGC_DRV(cuThreadExchangeStreamCaptureMode)(&previous); }

CUresult cgc__relaxed_mem_alloc(CUdeviceptr* p, size_t size) {
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuMemAlloc)(p, size));
  return r;
}

CUresult cgc__relaxed_mem_free(CUdeviceptr p) {
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuMemFree)(p));
  return r;
}

/* Node priorities exist since CUDA 11.7 and an older driver rejects the flag: retried without. */
CUresult cgc__instantiate(CUgraph graph, CUgraphExec* exec) {
  CUresult r = CUDA_SUCCESS;
  CGC_RELAXED({
    r = CGC_DRV(cuGraphInstantiateWithFlags)(
        exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY);
    if (r == CUDA_ERROR_INVALID_VALUE)
      r = CGC_DRV(cuGraphInstantiateWithFlags)(exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
  });
  return r;
}

void* cgc__open_library(const char* const* candidates, size_t n, char* tried, size_t tried_size) {
  size_t used = 0;
  if (tried_size > 0) tried[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    const char* path = candidates[i];
    if (path == NULL || path[0] == '\0') continue;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) return lib;
    int written = snprintf(tried + used, tried_size - used, "%s%s", used ? ", " : "", path);
    if (written > 0 && (size_t)written < tried_size - used) used += (size_t)written;
    if (i == 0) return NULL; /* an explicit choice is the only candidate: a wrong path is not papered over */
  }
  return NULL;
}
