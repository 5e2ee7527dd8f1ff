/* Status codes, their strings, and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

enum { kMessageSize = 1024 };
static _Thread_local char last_error[kMessageSize];

uint32_t cgc_version(void) { return CGC_VERSION; }

const char* cgc_status_string(cgc_status_t status) {
  switch (status) {
    case CGC_SUCCESS: return "CGC_SUCCESS: no error";
    case CGC_ERROR_INVALID_ARGUMENT: return "CGC_ERROR_INVALID_ARGUMENT: an argument is NULL, out of range or inconsistent";
    case CGC_ERROR_INVALID_HANDLE: return "CGC_ERROR_INVALID_HANDLE: the handle was destroyed or is of another kind";
    case CGC_ERROR_INVALID_STATE: return "CGC_ERROR_INVALID_STATE: the object is not in a state that allows this call";
    case CGC_ERROR_NO_DRIVER: return "CGC_ERROR_NO_DRIVER: the CUDA driver (libcuda.so.1) could not be loaded";
    case CGC_ERROR_NO_DEVICE: return "CGC_ERROR_NO_DEVICE: no usable CUDA device";
    case CGC_ERROR_OUT_OF_MEMORY: return "CGC_ERROR_OUT_OF_MEMORY: the device is out of memory";
    case CGC_ERROR_CAPTURE_UNSUPPORTED: return "CGC_ERROR_CAPTURE_UNSUPPORTED: the call is not allowed while a capture is under way";
    case CGC_ERROR_CAPTURE_INVALIDATED: return "CGC_ERROR_CAPTURE_INVALIDATED: the capture was invalidated by an earlier call";
    case CGC_ERROR_CAPTURE_UNJOINED: return "CGC_ERROR_CAPTURE_UNJOINED: a stream forked into the capture was not joined back";
    case CGC_ERROR_CAPTURE_LEGACY_STREAM: return "CGC_ERROR_CAPTURE_LEGACY_STREAM: graphs cannot be captured on the legacy default stream";
    case CGC_ERROR_NCCL_UNAVAILABLE: return "CGC_ERROR_NCCL_UNAVAILABLE: NCCL (libnccl.so.2 >= 2.9.6) could not be loaded";
    case CGC_ERROR_NCCL: return "CGC_ERROR_NCCL: an NCCL call failed";
    case CGC_ERROR_CUDA: return "CGC_ERROR_CUDA: a CUDA driver call failed";
    case CGC_ERROR_NOT_SUPPORTED: return "CGC_ERROR_NOT_SUPPORTED: the driver or device is too old for the request";
    case CGC_ERROR_INTERNAL: return "CGC_ERROR_INTERNAL: an internal error in cgc";
  }
  return "CGC_ERROR_UNKNOWN: a status this version of cgc does not know";
}

const char* cgc_last_error(void) { return last_error; }

static void vset(const char* func, const char* prefix, const char* fmt, va_list ap) {
  int n = snprintf(last_error, kMessageSize, "%s: %s", func, prefix);
  if (n < 0 || n >= kMessageSize) return;
  vsnprintf(last_error + n, kMessageSize - (size_t)n, fmt, ap);
}

cgc_status_t cgc__fail(cgc_status_t status, const char* func, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset(func, "", fmt, ap);
  va_end(ap);
  cgc__log("%s", last_error);
  return status;
}

void cgc__warn(const char* func, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset(func, "warning: ", fmt, ap);
  va_end(ap);
  cgc__log("%s", last_error);
}

void cgc__append(const char* fmt, ...) {
  size_t n = strlen(last_error);
  if (n + 1 >= kMessageSize) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error + n, kMessageSize - n, fmt, ap);
  va_end(ap);
}

static int log_enabled(void) {
  static atomic_int state = -1; /* -1 unknown, 0 off, 1 on */
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  if (s < 0) {
    const char* v = getenv("CGC_LOG");
    s = (v != NULL && strcmp(v, "debug") == 0) ? 1 : 0;
    atomic_store_explicit(&state, s, memory_order_relaxed);
  }
  return s;
}

void cgc__log(const char* fmt, ...) {
  if (!log_enabled()) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("[cgc] ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
