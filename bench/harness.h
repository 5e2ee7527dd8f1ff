/* What every benchmark program shares (cgc_bench, nccl_bench): failing loudly, the clock,
 * medians and percentiles, a small JSON writer, and the printed tables.
 *
 * A benchmark prints its figures as tables and writes the same figures into one JSON document
 * (--json FILE). Any failed cgc or driver call prints the call and cgc_last_error() and exits
 * with status 2; a wrong result counts in bench_failed_checks, which the program turns into
 * exit status 3. */
#ifndef CGC_BENCH_HARNESS_H_
#define CGC_BENCH_HARNESS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "bench/driver.h"
#include "capi/cgc.h"

#define MIB (1024.0 * 1024.0)

/* The program's name for messages ("cgc_bench"); set by main. */
extern const char* bench_tool;
/* Wrong results seen (replays, collectives); main turns a nonzero count into exit status 3. */
extern int bench_failed_checks;

/* Print the failed call, its status and cgc_last_error(), and exit with status 2. */
_Noreturn void fail_cgc(const char* call, cgc_status_t st);
_Noreturn void fail_cu(const char* call, CUresult r);
_Noreturn void fail_with(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* CGC(cgc_call(...)) and CU(cuCall(...)) (the second through the benchmarks' driver table). Both
 * are a compare and a never-taken branch, so they stay inside timed loops on both sides alike. */
#define CGC(call)                                 \
  do {                                            \
    cgc_status_t st_ = (call);                    \
    if (st_ != CGC_SUCCESS) fail_cgc(#call, st_); \
  } while (0)
#define CU(call)                                \
  do {                                          \
    CUresult r_ = drv.call;                     \
    if (r_ != CUDA_SUCCESS) fail_cu(#call, r_); \
  } while (0)
/* For helpers that return a CUresult (kernel launches). */
#define CU_OK(expr)                             \
  do {                                          \
    CUresult r_ = (expr);                       \
    if (r_ != CUDA_SUCCESS) fail_cu(#expr, r_); \
  } while (0)

/* A benchmark's start: the driver loaded (false, after printing "<tool>: no GPU: <why>", when it
 * cannot be) and device 0's primary context retained and made current (*dev, *primary). */
bool bench_enter_device(const char* tool, CUdevice* dev, CUcontext* primary);

/* malloc that exits with status 2 instead of returning NULL. */
void* xmalloc(size_t bytes);

/* ---- time and statistics ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in ns; inline so that both sides of a timed comparison pay the same. */
static inline int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

typedef struct summary {
  double median, p90;
} summary_t;

/* Median (mean of the two middle values for an even count) and 90th percentile (nearest rank:
 * the smallest sample with at least 90% of the samples at or below it). Sorts `v` in place. */
summary_t summarize(double* v, size_t n);
double* new_samples(size_t n);

/* ---- a small JSON writer ------------------------------------------------------------------- */

typedef struct json {
  char* buf;
  size_t len, cap;
  int depth;
  bool first[16]; /* per nesting level: nothing written yet, so no comma */
} json_t;

/* Starts the document's top-level object. */
void json_begin(json_t* j);
/* Closes the top-level object and writes the document to `path` (NULL: nowhere); frees it.
 * False if the file could not be written. */
bool json_finish(json_t* j, const char* path);

/* key != NULL: a member of the enclosing object; key NULL: an element of the enclosing array. */
void jopen(json_t* j, const char* key, char bracket); /* '{' or '[' */
void jclose(json_t* j, char bracket);
void jnum(json_t* j, const char* key, double v); /* NaN and infinities become null */
void jint(json_t* j, const char* key, long long v);
void jstr(json_t* j, const char* key, const char* s);
void jbool(json_t* j, const char* key, bool v);

/* ---- the printed tables -------------------------------------------------------------------- */

void print_title(const char* title);
/* Columns: scenario | size | A median | B median | ratio | A p90 | B p90 | note */
void print_columns(const char* a, const char* b, const char* ratio);
void print_row(const char* scenario, const char* size, summary_t a, summary_t b, double ratio, const char* note);
/* The same figures as JSON members: <a>_median, <b>_median, <ratio_name>, <a>_p90, <b>_p90. */
void json_row(json_t* j, const char* a, const char* b, const char* ratio_name, summary_t sa, summary_t sb,
              double ratio);
/* "512 B", "64 KiB", "8 MiB". */
void bytes_label(char* buf, size_t cap, size_t bytes);

#endif /* CGC_BENCH_HARNESS_H_ */
