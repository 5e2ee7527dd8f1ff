/* Status codes, their strings, and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

enum { kMessageSize = 1024 };
static _Thread_local char last_error[kMessageSize];
/* The status that goes with last_error (cgc_last_status, 1.6): set with the message by a failure,
 * reset by a warning (whose call succeeded), kept by cgc__append (detail of the same message). */
static _Thread_local cgc_status_t last_status = CGC_SUCCESS;

uint32_t cgc_version(void) { return CGC_VERSION; }

const char* cgc_status_string(cgc_status_t status) {
  switch (status) {
#define CGC_STATUS_CASE_(name, value, text) \
  case name:                                \
    return #name ": " text;
    CGC_STATUS_LIST(CGC_STATUS_CASE_)
#undef CGC_STATUS_CASE_
  }
  return "CGC_ERROR_UNKNOWN: a status this version of cgc does not know";
}

const char* cgc_last_error(void) { return last_error; }

cgc_status_t cgc_last_status(void) { return last_status; }

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
  last_status = status;
  cgc__log("%s", last_error);
  return status;
}

void cgc__warn(const char* func, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset(func, "warning: ", fmt, ap);
  va_end(ap);
  last_status = CGC_SUCCESS;
  cgc__log("%s", last_error);
}

cgc_status_t cgc__carry_failure(cgc_status_t status, const char* message) {
  snprintf(last_error, kMessageSize, "%s", message);
  last_status = status;
  return status;
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

bool cgc__log_on(void) { return log_enabled() != 0; }

void cgc__log(const char* fmt, ...) {
  if (!log_enabled()) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("[cgc] ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
