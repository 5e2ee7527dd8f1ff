/* See driver.h. */
#include "bench/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

bench_driver_t drv;

bool bench_driver_load(char* why, size_t why_size) {
  const char* path = getenv("CGC_CUDA_DRIVER");
  if (path == NULL || path[0] == '\0') path = "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept for the life of the process */
  if (lib == NULL) {
    const char* e = dlerror();
    snprintf(why, why_size, "dlopen(%s): %s", path, e ? e : "unknown reason");
    return false;
  }
  PFN_cuGetProcAddress_v12000 get_proc = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
  if (get_proc == NULL) {
    snprintf(why, why_size, "%s has no cuGetProcAddress_v2 (a driver older than CUDA 12.0)", path);
    return false;
  }
  CUdriverProcAddressQueryResult found;
  const char* missing = NULL;
#define RESOLVE(name, type, version)                                                                 \
  if (get_proc(#name, (void**)&drv.name, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) !=     \
          CUDA_SUCCESS ||                                                                            \
      drv.name == NULL) {                                                                            \
    drv.name = NULL;                                                                                 \
    if (missing == NULL) missing = #name;                                                            \
  }
#define RESOLVE_OPTIONAL(name, type, version)                                                     \
  if (get_proc(#name, (void**)&drv.name, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) != \
      CUDA_SUCCESS)                                                                               \
    drv.name = NULL;
  BENCH_DRIVER_ENTRIES(RESOLVE, RESOLVE_OPTIONAL)
#undef RESOLVE
#undef RESOLVE_OPTIONAL
  if (missing != NULL) {
    snprintf(why, why_size, "the driver at %s lacks %s", path, missing);
    return false;
  }
  CUresult r = drv.cuInit(0);
  if (r != CUDA_SUCCESS || drv.cuDriverGetVersion(&drv.version) != CUDA_SUCCESS) {
    const char* name = "unknown";
    drv.cuGetErrorName(r, &name);
    snprintf(why, why_size, "cuInit failed: %s", name);
    return false;
  }
  return true;
}
