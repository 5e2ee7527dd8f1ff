/* nccl_bench's raw side's NCCL: the libnccl.so.2 this program loads itself (the build has no
 * nccl.h; nccl_bench.h declares the calls as NCCL's stable ABI has them) and the failure of one
 * of its calls. Apart from the rest so that the floor's NCCL is found, checked and reported in
 * one place. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/nccl_bench.h"

raw_nccl_t raw_nccl;

/* Loads the library cgc uses: loaded by cgc first under the same soname, dlopen hands back that
 * very copy, so both sides run the same NCCL. */
bool load_raw_nccl(char* why, size_t why_size) {
  const char* path = getenv("CGC_NCCL_LIBRARY");
  if (path == NULL || path[0] == '\0') path = "libnccl.so.2";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept for the life of the process */
  if (lib == NULL) {
    const char* e = dlerror();
    snprintf(why, why_size, "dlopen(%s): %s", path, e ? e : "unknown reason");
    return false;
  }
  const char* missing = NULL;
#define RAW_NCCL_RESOLVE(name, ret, params)        \
  *(void**)&raw_nccl.name = dlsym(lib, #name);     \
  if (raw_nccl.name == NULL && missing == NULL) missing = #name;
  RAW_NCCL_REQUIRED(RAW_NCCL_RESOLVE)
#undef RAW_NCCL_RESOLVE
#define RAW_NCCL_RESOLVE_OPTIONAL(name, ret, params) *(void**)&raw_nccl.name = dlsym(lib, #name);
  RAW_NCCL_OPTIONAL(RAW_NCCL_RESOLVE_OPTIONAL)
#undef RAW_NCCL_RESOLVE_OPTIONAL
  if (missing != NULL) snprintf(why, why_size, "%s has no %s", path, missing);
  return missing == NULL;
}

_Noreturn void fail_nccl(const char* call, int result) {
  const char* detail = raw_nccl.ncclGetLastError != NULL ? raw_nccl.ncclGetLastError(NULL) : NULL;
  if (detail == NULL) detail = "";
  fail_with("%s failed: %s (ncclResult_t %d)%s%s", call, raw_nccl.ncclGetErrorString(result), result,
            detail[0] != '\0' ? "; NCCL says: " : "", detail);
}
