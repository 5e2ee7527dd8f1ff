/* See harness.h. */
#include "bench/harness.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char* bench_tool = "cgc bench";
int bench_failed_checks;

/* The first failing thread prints and exits; another failing at the same time waits for the
 * process to end instead of running exit()'s handlers a second time concurrently. */
static void one_failure_at_a_time(void) {
  static atomic_flag failing = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&failing))
    for (;;) pause();
}

void fail_cgc(const char* call, cgc_status_t st) {
  one_failure_at_a_time();
  fflush(stdout);
  fprintf(stderr, "%s: %s failed: %s\n  cgc_last_error: %s\n", bench_tool, call, cgc_status_string(st),
          cgc_last_error());
  exit(2);
}

void fail_cu(const char* call, CUresult r) {
  one_failure_at_a_time();
  const char* name = NULL;
  if (drv.cuGetErrorName == NULL || drv.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "unknown";
  fflush(stdout);
  fprintf(stderr, "%s: %s failed: %s (CUresult %d)\n  cgc_last_error: %s\n", bench_tool, call, name, (int)r,
          cgc_last_error());
  exit(2);
}

void fail_with(const char* fmt, ...) {
  one_failure_at_a_time();
  fflush(stdout);
  fprintf(stderr, "%s: ", bench_tool);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(2);
}

void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (p == NULL) fail_with("out of host memory (%zu bytes)", bytes);
  return p;
}

/* ---- statistics ----------------------------------------------------------------------------- */

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

summary_t summarize(double* v, size_t n) {
  summary_t s = {0.0, 0.0};
  if (n == 0) return s;
  qsort(v, n, sizeof *v, cmp_double);
  s.median = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  size_t rank = (9 * n + 9) / 10; /* ceil(0.9 n) */
  s.p90 = v[rank - 1];
  return s;
}

double* new_samples(size_t n) { return xmalloc(n * sizeof(double)); }

/* ---- JSON ------------------------------------------------------------------------------------ */

static void jappend(json_t* j, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void jappend(json_t* j, const char* fmt, ...) {
  if (j->buf == NULL) {
    j->cap = 4096;
    j->buf = xmalloc(j->cap);
    j->len = 0;
  }
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(j->buf + j->len, j->cap - j->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < j->cap - j->len) {
      j->len += (size_t)n;
      return;
    }
    size_t cap = (j->cap + (size_t)n + 1) * 2;
    char* grown = realloc(j->buf, cap);
    if (grown == NULL) {
      fail_with("out of host memory (json)");
    }
    j->buf = grown;
    j->cap = cap;
  }
}

static void jstring_value(json_t* j, const char* s) {
  jappend(j, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') jappend(j, "\\%c", c);
    else if (c < 0x20) jappend(j, "\\u%04x", c);
    else jappend(j, "%c", c);
  }
  jappend(j, "\"");
}

/* Starts a member (key != NULL, inside an object) or an element (key NULL, inside an array). */
static void jkey(json_t* j, const char* key) {
  if (!j->first[j->depth]) jappend(j, ",");
  j->first[j->depth] = false;
  if (j->depth > 0) jappend(j, "\n%*s", 2 * j->depth, "");
  if (key != NULL) {
    jstring_value(j, key);
    jappend(j, ": ");
  }
}

void jopen(json_t* j, const char* key, char bracket) {
  jkey(j, key);
  jappend(j, "%c", bracket);
  j->depth++;
  j->first[j->depth] = true;
}

void jclose(json_t* j, char bracket) {
  j->depth--;
  jappend(j, "\n%*s%c", 2 * j->depth, "", bracket);
}

void jnum(json_t* j, const char* key, double v) {
  jkey(j, key);
  if (v != v || v - v != 0.0) jappend(j, "null"); /* NaN or infinity: not JSON */
  else jappend(j, "%.6g", v);
}

void jint(json_t* j, const char* key, long long v) {
  jkey(j, key);
  jappend(j, "%lld", v);
}

void jstr(json_t* j, const char* key, const char* s) {
  jkey(j, key);
  jstring_value(j, s);
}

void jbool(json_t* j, const char* key, bool v) {
  jkey(j, key);
  jappend(j, v ? "true" : "false");
}

void json_begin(json_t* j) {
  j->buf = NULL;
  j->len = j->cap = 0;
  j->depth = 0;
  j->first[0] = true;
  jopen(j, NULL, '{');
}

bool json_finish(json_t* j, const char* path) {
  jclose(j, '}');
  jappend(j, "\n");
  bool ok = true;
  if (path != NULL) {
    FILE* f = fopen(path, "w");
    ok = f != NULL && fwrite(j->buf, 1, j->len, f) == j->len;
    if (f != NULL && fclose(f) != 0) ok = false;
  }
  free(j->buf);
  j->buf = NULL;
  return ok;
}

/* ---- tables ---------------------------------------------------------------------------------- */

void print_title(const char* title) { printf("\n== %s\n", title); }

void print_columns(const char* a, const char* b, const char* ratio) {
  char am[40], bm[40], ap[40], bp[40];
  snprintf(am, sizeof am, "%s median", a);
  snprintf(bm, sizeof bm, "%s median", b);
  snprintf(ap, sizeof ap, "%s p90", a);
  snprintf(bp, sizeof bp, "%s p90", b);
  printf("%-22s | %-12s | %16s | %16s | %8s | %13s | %13s | %s\n", "scenario", "size", am, bm, ratio, ap, bp,
         "note");
}

void print_row(const char* scenario, const char* size, summary_t a, summary_t b, double ratio,
                      const char* note) {
  printf("%-22s | %-12s | %16.3f | %16.3f | %8.3f | %13.3f | %13.3f | %s\n", scenario, size, a.median, b.median,
         ratio, a.p90, b.p90, note);
  fflush(stdout);
}

void json_row(json_t* j, const char* a, const char* b, const char* ratio_name, summary_t sa, summary_t sb,
                     double ratio) {
  char key[64];
  snprintf(key, sizeof key, "%s_median", a);
  jnum(j, key, sa.median);
  snprintf(key, sizeof key, "%s_median", b);
  jnum(j, key, sb.median);
  jnum(j, ratio_name, ratio);
  snprintf(key, sizeof key, "%s_p90", a);
  jnum(j, key, sa.p90);
  snprintf(key, sizeof key, "%s_p90", b);
  jnum(j, key, sb.p90);
}

void bytes_label(char* buf, size_t cap, size_t bytes) {
  if (bytes >= (1u << 20)) snprintf(buf, cap, "%zu MiB", bytes >> 20);
  else if (bytes >= 1024) snprintf(buf, cap, "%zu KiB", bytes >> 10);
  else snprintf(buf, cap, "%zu B", bytes);
}

bool bench_enter_device(const char* tool, CUdevice* dev, CUcontext* primary) {
  char why[512];
  if (!bench_driver_load(why, sizeof why)) {
    printf("%s: no GPU: %s\n", tool, why);
    return false;
  }
  CU(cuDeviceGet(dev, 0));
  CU(cuDevicePrimaryCtxRetain(primary, *dev));
  CU(cuCtxPushCurrent(*primary));
  return true;
}
