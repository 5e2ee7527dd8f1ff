/* cgc_bench: cgc against the raw CUDA driver, on one GPU, in one run.
 *
 *   bazel run //bench:cgc_bench                     # quick preset: well under a minute
 *   bazel run //bench:cgc_bench -- --full --json /tmp/cgc.json
 *
 * The "raw" side of every comparison calls the driver through cgc's own table (cgc__drv, from
 * src/driver.h), so the two sides share the driver, the entry-point versions and the process:
 * any difference is cgc's own code. Six scenarios, each a function below:
 *   1. host cost of one replay launch      cgc_graph_launch vs cuGraphLaunch (same executable)
 *   2. replay + sync vs eager launches     the speedup a user gets from a graph
 *   3. capture + instantiate (+ upload)    cgc_capture_begin/end vs cuStreamBeginCapture/...
 *   4. allocator pair on a cache hit       cgc_malloc+cgc_free vs cuMemAllocAsync/cuMemAlloc
 *   5. memory of 35 graphs                 private pools vs one shared pool, both orders
 *   6. fork/join over 4 streams            vs the same work serialised on one stream
 * Every timing is a median and a 90th percentile over many repetitions after warm-up. Host
 * costs are timed with CLOCK_MONOTONIC; GPU durations with CUDA events.
 *
 * Without a GPU (or driver) it prints one line saying so and exits with status 1. Any failed
 * cgc or driver call prints the call and cgc_last_error() and exits with status 2; a wrong
 * replay result is reported as FAIL and makes the exit status 3. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi/cgc.h"
#include "src/driver.h"

/* bench/bench_kernels.cu, compiled to a fatbin and embedded by //tools:fatbin.bzl. */
extern const unsigned char cgc_bench_kernels_fatbin[];
extern const size_t cgc_bench_kernels_fatbin_size;

#define MIB (1024.0 * 1024.0)

/* ---- failing loudly --------------------------------------------------------------------- */

static int g_failed_checks; /* wrong replay results seen; they set the exit status to 3 */

static void fail_cgc(const char* call, cgc_status_t st) {
  fflush(stdout);
  fprintf(stderr, "cgc_bench: %s failed: %s\n  cgc_last_error: %s\n", call, cgc_status_string(st), cgc_last_error());
  exit(2);
}

static void fail_cu(const char* call, CUresult r) {
  const char* name = NULL;
  if (cgc__drv.cuGetErrorName == NULL || cgc__drv.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "unknown";
  fflush(stdout);
  fprintf(stderr, "cgc_bench: %s failed: %s (CUresult %d)\n  cgc_last_error: %s\n", call, name, (int)r,
          cgc_last_error());
  exit(2);
}

/* CGC(cgc_call(...)) and CU(cuCall(...)): the second goes through cgc's driver table. Both are a
 * compare and a never-taken branch, so they stay inside timed loops on both sides alike. */
#define CGC(call)                                \
  do {                                           \
    cgc_status_t st_ = (call);                   \
    if (st_ != CGC_SUCCESS) fail_cgc(#call, st_); \
  } while (0)
#define CU(call)                               \
  do {                                         \
    CUresult r_ = cgc__drv.call;               \
    if (r_ != CUDA_SUCCESS) fail_cu(#call, r_); \
  } while (0)
/* For our own helpers that return a CUresult (kernel launches). */
#define CU_OK(expr)                            \
  do {                                         \
    CUresult r_ = (expr);                      \
    if (r_ != CUDA_SUCCESS) fail_cu(#expr, r_); \
  } while (0)

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "cgc_bench: out of host memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

/* ---- time and statistics ---------------------------------------------------------------- */

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

typedef struct summary {
  double median, p90;
} summary_t;

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Median (mean of the two middle values for an even count) and 90th percentile (nearest rank:
 * the smallest sample with at least 90% of the samples at or below it). Sorts `v` in place. */
static summary_t summarize(double* v, size_t n) {
  summary_t s = {0.0, 0.0};
  if (n == 0) return s;
  qsort(v, n, sizeof *v, cmp_double);
  s.median = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  size_t rank = (9 * n + 9) / 10; /* ceil(0.9 n) */
  s.p90 = v[rank - 1];
  return s;
}

static double* new_samples(size_t n) { return xmalloc(n * sizeof(double)); }

/* ---- a small JSON writer ------------------------------------------------------------------
 * Everything printed also goes into one JSON document, written at the end with --json. */

typedef struct json {
  char* buf;
  size_t len, cap;
  int depth;
  bool first[16]; /* per nesting level: nothing written yet, so no comma */
} json_t;

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
      fprintf(stderr, "cgc_bench: out of host memory (json)\n");
      exit(2);
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

static void jopen(json_t* j, const char* key, char bracket) {
  jkey(j, key);
  jappend(j, "%c", bracket);
  j->depth++;
  j->first[j->depth] = true;
}

static void jclose(json_t* j, char bracket) {
  j->depth--;
  jappend(j, "\n%*s%c", 2 * j->depth, "", bracket);
}

static void jnum(json_t* j, const char* key, double v) {
  jkey(j, key);
  if (v != v || v - v != 0.0) jappend(j, "null"); /* NaN or infinity: not JSON */
  else jappend(j, "%.6g", v);
}

static void jint(json_t* j, const char* key, long long v) {
  jkey(j, key);
  jappend(j, "%lld", v);
}

static void jstr(json_t* j, const char* key, const char* s) {
  jkey(j, key);
  jstring_value(j, s);
}

static void jbool(json_t* j, const char* key, bool v) {
  jkey(j, key);
  jappend(j, v ? "true" : "false");
}

/* ---- the printed tables ----------------------------------------------------------------- */

static void print_title(const char* title) { printf("\n== %s\n", title); }

/* Columns: scenario | size | A median | B median | ratio | A p90 | B p90 | note */
static void print_columns(const char* a, const char* b, const char* ratio) {
  char am[40], bm[40], ap[40], bp[40];
  snprintf(am, sizeof am, "%s median", a);
  snprintf(bm, sizeof bm, "%s median", b);
  snprintf(ap, sizeof ap, "%s p90", a);
  snprintf(bp, sizeof bp, "%s p90", b);
  printf("%-22s | %-12s | %16s | %16s | %8s | %13s | %13s | %s\n", "scenario", "size", am, bm, ratio, ap, bp,
         "note");
}

static void print_row(const char* scenario, const char* size, summary_t a, summary_t b, double ratio,
                      const char* note) {
  printf("%-22s | %-12s | %16.3f | %16.3f | %8.3f | %13.3f | %13.3f | %s\n", scenario, size, a.median, b.median,
         ratio, a.p90, b.p90, note);
  fflush(stdout);
}

static void json_row(json_t* j, const char* a, const char* b, const char* ratio_name, summary_t sa, summary_t sb,
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

/* ---- the rig: context, stream, kernels -------------------------------------------------- */

typedef struct rig {
  cgc_context_t ctx;
  CUdevice dev;
  CUcontext primary;
  CUmodule module;
  CUfunction k_lcg, k_layer;
  cgc_stream_t s; /* the stream everything runs on (non-blocking) */
  CUstream cs;    /* its CUstream: what the raw side uses */
  char device_name[256];
} rig_t;

typedef struct opts {
  bool full;
  const char* json_path;
  unsigned scenarios; /* bit k: scenario k runs */
} opts_t;

/* Targets of issue 4, tallied for the summary at the end. */
typedef struct targets {
  double launch_worst_ratio;  /* scenario 1, worst size */
  double capture_worst_ratio; /* scenario 3, worst size and variant */
  double alloc_worst_ns;      /* scenario 4, worst cgc case */
  double memory_ratio;        /* scenario 5, (c) / largest alone */
  double memory_ratio_released;
  bool have_launch, have_capture, have_alloc, have_memory;
} targets_t;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

/* xorshift64: reproducible test data, never all zeros. */
static uint32_t rand_u32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 32);
}

/* Uniform in [-1, 1). */
static float rand_float(void) { return (float)(rand_u32() >> 8) * (2.0f / 16777216.0f) - 1.0f; }

static CUdeviceptr dev_alloc(size_t bytes) {
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, bytes));
  return p;
}

/* Copies on the bench stream and waits: the stream is non-blocking, so the legacy stream's
 * synchronous copies would not be ordered with it. */
static void to_device(const rig_t* r, CUdeviceptr dst, const void* src, size_t bytes) {
  CU(cuMemcpyHtoDAsync(dst, src, bytes, r->cs));
  CU(cuStreamSynchronize(r->cs));
}

static void to_host(const rig_t* r, void* dst, CUdeviceptr src, size_t bytes) {
  CU(cuMemcpyDtoHAsync(dst, src, bytes, r->cs));
  CU(cuStreamSynchronize(r->cs));
}

/* ---- the LCG kernel and its exact host model -------------------------------------------- */

enum { kTinyThreads = 32 }; /* the "tiny kernel": one warp, one LCG step */
static const uint32_t kLcgMul = 1664525u, kLcgAdd = 1013904223u;

static CUresult launch_lcg(const rig_t* r, CUstream stream, CUdeviceptr p, unsigned n, unsigned steps) {
  unsigned block = n < 256 ? n : 256;
  unsigned grid = (n + block - 1) / block;
  void* args[] = {&p, &n, &steps};
  return cgc__drv.cuLaunchKernel(r->k_lcg, grid, 1, 1, block, 1, 1, 0, stream, args, NULL);
}

/* u -> mul * u + add (mod 2^32). k LCG steps are again such a map, found by squaring, so any
 * number of kernel launches can be checked exactly. */
typedef struct affine {
  uint32_t mul, add;
} affine_t;

static affine_t affine_then(affine_t first, affine_t second) {
  affine_t r = {second.mul * first.mul, second.mul * first.add + second.add};
  return r;
}

static affine_t lcg_steps(uint64_t steps) {
  affine_t result = {1u, 0u}, power = {kLcgMul, kLcgAdd};
  for (; steps != 0; steps >>= 1) {
    if (steps & 1) result = affine_then(result, power);
    power = affine_then(power, power);
  }
  return result;
}

static void random_words(uint32_t* w, size_t n) {
  for (size_t i = 0; i < n; i++) w[i] = rand_u32();
}

/* True when the n words at p are `init` advanced by `steps` LCG steps. */
static bool lcg_matches(const rig_t* r, CUdeviceptr p, const uint32_t* init, unsigned n, uint64_t steps) {
  uint32_t* got = xmalloc(n * sizeof *got);
  to_host(r, got, p, n * sizeof *got);
  affine_t f = lcg_steps(steps);
  bool ok = true;
  for (unsigned i = 0; i < n && ok; i++) ok = got[i] == f.mul * init[i] + f.add;
  free(got);
  if (!ok) g_failed_checks++;
  return ok;
}

/* A graph of `nodes` tiny kernels in a chain on buf (32 words), captured with cgc and uploaded. */
static cgc_graph_t capture_chain(const rig_t* r, CUdeviceptr buf, unsigned nodes) {
  cgc_capture_options_t o = {.struct_size = sizeof o, .mode = CGC_CAPTURE_MODE_GLOBAL, .flags = CGC_CAPTURE_UPLOAD};
  CGC(cgc_capture_begin(r->s, &o));
  for (unsigned i = 0; i < nodes; i++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
  cgc_graph_t g = NULL;
  CGC(cgc_capture_end(r->s, &g));
  cgc_graph_info_t info = {.struct_size = sizeof info};
  CGC(cgc_graph_info(g, &info));
  if (info.node_count != nodes) {
    fprintf(stderr, "cgc_bench: captured %zu nodes, expected %u\n", info.node_count, nodes);
    exit(2);
  }
  return g;
}

/* Repetitions of scenarios 1 and 2: fewer for big graphs, whose replays take milliseconds. */
static int launch_reps(unsigned nodes, bool full) {
  if (nodes <= 100) return full ? 1000 : 200;
  if (nodes <= 300) return full ? 400 : 100;
  return full ? 150 : 40;
}

static void size_label(char* buf, size_t cap, unsigned nodes) {
  snprintf(buf, cap, "%u node%s", nodes, nodes == 1 ? "" : "s");
}

/* One row of scenarios 1 and 2 (graphs of `nodes` kernels): the printed table and the JSON. */
static void report_node_row(json_t* j, const char* scenario, unsigned nodes, int reps, const char* a_name,
                            const char* b_name, const char* ratio_name, summary_t sa, summary_t sb, double ratio,
                            const char* note, bool ok) {
  char size[32];
  size_label(size, sizeof size, nodes);
  print_row(scenario, size, sa, sb, ratio, note);
  jopen(j, NULL, '{');
  jint(j, "nodes", nodes);
  json_row(j, a_name, b_name, ratio_name, sa, sb, ratio);
  jint(j, "reps", reps);
  jstr(j, "check", ok ? "OK" : "FAIL");
  jclose(j, '}');
}

/* ---- scenario 1: host cost of one replay launch ----------------------------------------- */

static void scenario_launch(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  static const unsigned quick[] = {1, 10, 100, 1000};
  static const unsigned full[] = {1, 3, 10, 30, 100, 300, 1000, 3000};
  const unsigned* sizes = o->full ? full : quick;
  size_t n_sizes = o->full ? sizeof full / sizeof *full : sizeof quick / sizeof *quick;
  /* Launches per timed batch. The stream is drained before every batch (outside the timed
   * region) so that the launch queue never fills and no launch waits for room: what is timed
   * is the host cost of the call alone, averaged over the batch. */
  enum { kBatch = 20 };

  print_title("1. Replay launch cost on the host, us per launch call on the same executable "
              "(ratio = cgc / raw; target <= 1.05)");
  print_columns("cgc", "raw", "ratio");
  jopen(j, "launch", '{');
  jstr(j, "unit", "us per launch (host)");
  jint(j, "batch", kBatch);
  jnum(j, "target_ratio", 1.05);
  jopen(j, "rows", '[');

  for (size_t i = 0; i < n_sizes; i++) {
    unsigned nodes = sizes[i];
    int reps = launch_reps(nodes, o->full);
    uint32_t init[kTinyThreads];
    random_words(init, kTinyThreads);
    CUdeviceptr buf = dev_alloc(sizeof init);
    to_device(r, buf, init, sizeof init);
    cgc_graph_t g = capture_chain(r, buf, nodes);
    CUgraphExec exec = (CUgraphExec)cgc_graph_native_exec(g);
    if (exec == NULL) {
      fprintf(stderr, "cgc_bench: cgc_graph_native_exec returned NULL for a live graph\n");
      exit(2);
    }
    uint64_t replays = 0;

    /* Warm-up: first launches pay one-time costs; both code paths get into the caches. */
    for (int k = 0; k < kBatch; k++) {
      CGC(cgc_graph_launch(g, r->s));
      CU(cuGraphLaunch(exec, r->cs));
      replays += 2;
    }
    CU(cuStreamSynchronize(r->cs));

    double* a = new_samples((size_t)reps);
    double* b = new_samples((size_t)reps);
    for (int rep = 0; rep < reps; rep++) {
      /* ABBA: the two sides alternate which goes first, so drift and warm-after-sync effects
       * fall on both alike. */
      for (int half = 0; half < 2; half++) {
        bool cgc_turn = ((rep + half) & 1) == 0;
        CU(cuStreamSynchronize(r->cs));
        int64_t t0 = now_ns();
        if (cgc_turn) {
          for (int k = 0; k < kBatch; k++) CGC(cgc_graph_launch(g, r->s));
        } else {
          for (int k = 0; k < kBatch; k++) CU(cuGraphLaunch(exec, r->cs));
        }
        int64_t t1 = now_ns();
        (cgc_turn ? a : b)[rep] = (double)(t1 - t0) / 1e3 / kBatch;
        replays += kBatch;
      }
    }
    CU(cuStreamSynchronize(r->cs));
    bool ok = lcg_matches(r, buf, init, kTinyThreads, replays * nodes);

    summary_t sa = summarize(a, (size_t)reps), sb = summarize(b, (size_t)reps);
    double ratio = sa.median / sb.median;
    if (!t->have_launch || ratio > t->launch_worst_ratio) t->launch_worst_ratio = ratio;
    t->have_launch = true;
    char note[64];
    snprintf(note, sizeof note, "%s; replay result %s", ratio <= 1.05 ? "target met" : "OVER TARGET",
             ok ? "OK" : "FAIL");
    report_node_row(j, "launch (host)", nodes, reps, "cgc", "raw", "ratio", sa, sb, ratio, note, ok);
    free(a);
    free(b);
    CGC(cgc_graph_destroy(g));
    CU(cuMemFree(buf));
  }
  jclose(j, ']');
  jclose(j, '}');
}

/* ---- scenario 2: replay + sync vs eager launches + sync ---------------------------------- */

static void scenario_replay(const rig_t* r, const opts_t* o, json_t* j) {
  static const unsigned quick[] = {1, 10, 100, 1000};
  static const unsigned full[] = {1, 3, 10, 30, 100, 300, 1000, 3000};
  const unsigned* sizes = o->full ? full : quick;
  size_t n_sizes = o->full ? sizeof full / sizeof *full : sizeof quick / sizeof *quick;

  print_title("2. Replay end to end (launch + stream sync) vs eager launches of the same kernels + sync, us "
              "(speedup = eager / graph)");
  print_columns("graph", "eager", "speedup");
  jopen(j, "replay", '{');
  jstr(j, "unit", "us per launch+sync (host)");
  jopen(j, "rows", '[');

  for (size_t i = 0; i < n_sizes; i++) {
    unsigned nodes = sizes[i];
    int reps = launch_reps(nodes, o->full);
    uint32_t init[kTinyThreads];
    random_words(init, kTinyThreads);
    CUdeviceptr buf = dev_alloc(sizeof init);
    to_device(r, buf, init, sizeof init);
    cgc_graph_t g = capture_chain(r, buf, nodes);
    uint64_t steps = 0;

    for (int k = 0; k < 3; k++) { /* warm-up */
      CGC(cgc_graph_launch(g, r->s));
      for (unsigned n = 0; n < nodes; n++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
      CGC(cgc_stream_synchronize(r->s));
      steps += 2 * (uint64_t)nodes;
    }

    double* a = new_samples((size_t)reps);
    double* b = new_samples((size_t)reps);
    for (int rep = 0; rep < reps; rep++) {
      for (int half = 0; half < 2; half++) {
        bool graph_turn = ((rep + half) & 1) == 0;
        int64_t t0 = now_ns();
        if (graph_turn) {
          CGC(cgc_graph_launch(g, r->s));
        } else {
          for (unsigned n = 0; n < nodes; n++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
        }
        CGC(cgc_stream_synchronize(r->s));
        int64_t t1 = now_ns();
        (graph_turn ? a : b)[rep] = (double)(t1 - t0) / 1e3;
        steps += nodes;
      }
    }
    bool ok = lcg_matches(r, buf, init, kTinyThreads, steps);

    summary_t sa = summarize(a, (size_t)reps), sb = summarize(b, (size_t)reps);
    double speedup = sb.median / sa.median;
    char note[64];
    snprintf(note, sizeof note, "result %s", ok ? "OK" : "FAIL");
    report_node_row(j, "replay+sync vs eager", nodes, reps, "graph", "eager", "speedup", sa, sb, speedup, note, ok);
    free(a);
    free(b);
    CGC(cgc_graph_destroy(g));
    CU(cuMemFree(buf));
  }
  jclose(j, ']');
  jclose(j, '}');
}

/* ---- scenario 3: capture + instantiate (+ upload) ---------------------------------------- */

/* One timed capture of `nodes` tiny kernels, us. The graph is destroyed after the clock stops.
 * With upload the stream is synchronised inside the timed region on both sides, so the figure
 * is "ready to launch at full speed", not just "upload enqueued". */
static double time_capture_cgc(const rig_t* r, CUdeviceptr buf, unsigned nodes, bool upload) {
  cgc_capture_options_t o = {.struct_size = sizeof o,
                             .mode = CGC_CAPTURE_MODE_GLOBAL,
                             .flags = upload ? CGC_CAPTURE_UPLOAD : 0u};
  cgc_graph_t g = NULL;
  CU(cuStreamSynchronize(r->cs));
  int64_t t0 = now_ns();
  CGC(cgc_capture_begin(r->s, &o));
  for (unsigned i = 0; i < nodes; i++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
  CGC(cgc_capture_end(r->s, &g));
  if (upload) CGC(cgc_stream_synchronize(r->s));
  int64_t t1 = now_ns();
  CGC(cgc_graph_destroy(g));
  return (double)(t1 - t0) / 1e3;
}

/* The same with the driver alone, instantiated with the flags cgc uses (AutoFreeOnLaunch, node
 * priorities), as PyTorch does. */
static double time_capture_raw(const rig_t* r, CUdeviceptr buf, unsigned nodes, bool upload) {
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  CU(cuStreamSynchronize(r->cs));
  int64_t t0 = now_ns();
  CU(cuStreamBeginCapture(r->cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (unsigned i = 0; i < nodes; i++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
  CU(cuStreamEndCapture(r->cs, &graph));
  CU(cuGraphInstantiateWithFlags(
      &exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
  if (upload) {
    CU(cuGraphUpload(exec, r->cs));
    CU(cuStreamSynchronize(r->cs));
  }
  int64_t t1 = now_ns();
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  return (double)(t1 - t0) / 1e3;
}

static void scenario_capture(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  static const unsigned quick[] = {10, 100, 1000, 10000};
  static const unsigned full[] = {10, 100, 1000, 3000, 10000, 30000};
  const unsigned* sizes = o->full ? full : quick;
  size_t n_sizes = o->full ? sizeof full / sizeof *full : sizeof quick / sizeof *quick;

  print_title("3. Capture + instantiate (+ upload), us per graph of tiny kernels (ratio = cgc / raw; target <= 1.05)");
  print_columns("cgc", "raw", "ratio");
  jopen(j, "capture", '{');
  jstr(j, "unit", "us per capture+instantiate (host)");
  jnum(j, "target_ratio", 1.05);
  jopen(j, "rows", '[');

  uint32_t init[kTinyThreads];
  random_words(init, kTinyThreads);
  CUdeviceptr buf = dev_alloc(sizeof init);
  to_device(r, buf, init, sizeof init);

  for (int upload = 0; upload < 2; upload++) {
    for (size_t i = 0; i < n_sizes; i++) {
      unsigned nodes = sizes[i];
      /* Instantiating thousands of nodes varies by several percent from one capture to the next
       * (the driver's own allocation work): the large sizes get enough repetitions for the
       * medians to settle. */
      int reps = nodes <= 100 ? (o->full ? 200 : 40) : nodes <= 1000 ? (o->full ? 60 : 15) : (o->full ? 41 : 9);
      time_capture_cgc(r, buf, nodes, upload); /* warm-up, untimed */
      time_capture_raw(r, buf, nodes, upload);
      double* a = new_samples((size_t)reps);
      double* b = new_samples((size_t)reps);
      for (int rep = 0; rep < reps; rep++) {
        for (int half = 0; half < 2; half++) {
          bool cgc_turn = ((rep + half) & 1) == 0;
          if (cgc_turn) a[rep] = time_capture_cgc(r, buf, nodes, upload);
          else b[rep] = time_capture_raw(r, buf, nodes, upload);
        }
      }
      summary_t sa = summarize(a, (size_t)reps), sb = summarize(b, (size_t)reps);
      double ratio = sa.median / sb.median;
      if (!t->have_capture || ratio > t->capture_worst_ratio) t->capture_worst_ratio = ratio;
      t->have_capture = true;
      char size[32];
      size_label(size, sizeof size, nodes);
      print_row(upload ? "capture+inst+upload" : "capture+instantiate", size, sa, sb, ratio,
                ratio <= 1.05 ? "target met" : "OVER TARGET");

      jopen(j, NULL, '{');
      jint(j, "nodes", nodes);
      jbool(j, "upload", upload);
      json_row(j, "cgc", "raw", "ratio", sa, sb, ratio);
      jint(j, "reps", reps);
      jclose(j, '}');
      free(a);
      free(b);
    }
  }
  CU(cuMemFree(buf));
  jclose(j, ']');
  jclose(j, '}');
}

/* ---- scenario 4: allocator pairs on a cache hit ------------------------------------------ */

/* Each returns ns per malloc+free pair over one timed batch. */
static double time_pairs_cgc(const rig_t* r, size_t size, int pairs) {
  int64_t t0 = now_ns();
  for (int k = 0; k < pairs; k++) {
    void* p = NULL;
    CGC(cgc_malloc(r->ctx, size, r->s, &p));
    CGC(cgc_free(p));
  }
  return (double)(now_ns() - t0) / pairs;
}

static double time_pairs_async(const rig_t* r, size_t size, int pairs) {
  int64_t t0 = now_ns();
  for (int k = 0; k < pairs; k++) {
    CUdeviceptr p = 0;
    CU(cuMemAllocAsync(&p, size, r->cs));
    CU(cuMemFreeAsync(p, r->cs));
  }
  double ns = (double)(now_ns() - t0) / pairs;
  CU(cuStreamSynchronize(r->cs)); /* outside the timed region: keep the stream's queue short */
  return ns;
}

static double time_pairs_memalloc(size_t size, int pairs) {
  int64_t t0 = now_ns();
  for (int k = 0; k < pairs; k++) {
    CUdeviceptr p = 0;
    CU(cuMemAlloc(&p, size));
    CU(cuMemFree(p));
  }
  return (double)(now_ns() - t0) / pairs;
}

/* A thread that captures and destroys a one-kernel graph on a stream of its own, over and over
 * (ThreadLocal mode), for the row "while another thread captures". */
typedef struct capturer {
  const rig_t* r;
  cgc_stream_t s;
  CUdeviceptr scratch;
  atomic_bool stop, started;
  long captures;
} capturer_t;

static void* capture_loop(void* arg) {
  capturer_t* c = arg;
  CU(cuCtxPushCurrent(c->r->primary));
  cgc_capture_options_t opt = {.struct_size = sizeof opt, .mode = CGC_CAPTURE_MODE_THREAD_LOCAL};
  while (!atomic_load(&c->stop)) {
    CGC(cgc_capture_begin(c->s, &opt));
    atomic_store(&c->started, true);
    CU_OK(launch_lcg(c->r, (CUstream)cgc_stream_native(c->s), c->scratch, kTinyThreads, 1));
    cgc_graph_t g = NULL;
    CGC(cgc_capture_end(c->s, &g));
    CGC(cgc_graph_destroy(g));
    c->captures++;
  }
  CUcontext popped;
  CU(cuCtxPopCurrent(&popped));
  return NULL;
}

static uint64_t driver_allocs(const rig_t* r) {
  cgc_memory_stats_t s = {.struct_size = sizeof s};
  CGC(cgc_memory_stats(r->ctx, NULL, &s));
  return s.num_driver_allocs;
}

static void alloc_row(json_t* j, size_t size, const char* label, const char* key, summary_t s, double ref_median,
                      const char* note) {
  char size_text[32];
  if (size >= (1u << 20)) snprintf(size_text, sizeof size_text, "%zu MiB", size >> 20);
  else if (size >= 1024) snprintf(size_text, sizeof size_text, "%zu KiB", size >> 10);
  else snprintf(size_text, sizeof size_text, "%zu B", size);
  if (ref_median > 0) {
    printf("%-10s | %-34s | %10.1f | %10.1f | %10.3f | %s\n", size_text, label, s.median, s.p90,
           s.median / ref_median, note);
  } else {
    printf("%-10s | %-34s | %10.1f | %10.1f | %10s | %s\n", size_text, label, s.median, s.p90, "-", note);
  }
  fflush(stdout);
  jopen(j, NULL, '{');
  jint(j, "size", (long long)size);
  jstr(j, "case", key);
  jnum(j, "median_ns", s.median);
  jnum(j, "p90_ns", s.p90);
  if (ref_median > 0) jnum(j, "ratio_to_mem_alloc_async", s.median / ref_median);
  jstr(j, "note", note);
  jclose(j, '}');
}

static void scenario_alloc(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  static const size_t quick[] = {64u << 10, 8u << 20};
  static const size_t full[] = {512u, 64u << 10, 1u << 20, 8u << 20, 64u << 20};
  const size_t* sizes = o->full ? full : quick;
  size_t n_sizes = o->full ? sizeof full / sizeof *full : sizeof quick / sizeof *quick;
  const int reps = o->full ? 500 : 100;
  /* Pairs per timed batch: enough that the clock's own cost (tens of ns) vanishes. cuMemAlloc
   * pairs cost microseconds, so fewer of them. */
  const int pairs = 1000, slow_pairs = 20;

  /* cuMemAllocAsync from the device's default pool, with the release threshold raised so that
   * freed memory stays cached in the pool: its cache-hit path against cgc's. */
  int pools_supported = 0;
  CU(cuDeviceGetAttribute(&pools_supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, r->dev));
  bool have_async = pools_supported && cgc__drv.cuMemAllocAsync && cgc__drv.cuMemFreeAsync &&
                    cgc__drv.cuDeviceGetDefaultMemPool && cgc__drv.cuMemPoolSetAttribute;
  CUmemoryPool mempool = NULL;
  if (have_async) {
    CU(cuDeviceGetDefaultMemPool(&mempool, r->dev));
    cuuint64_t keep_all = UINT64_MAX;
    CU(cuMemPoolSetAttribute(mempool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
  }

  print_title("4. Allocator: ns per malloc+free pair of one size on one stream (a cache hit after warm-up); "
              "target < 100 ns for cgc");
  printf("%-10s | %-34s | %10s | %10s | %10s | %s\n", "size", "case", "median ns", "p90 ns", "vs async",
         "note");
  jopen(j, "alloc", '{');
  jstr(j, "unit", "ns per malloc+free pair (host)");
  jnum(j, "target_ns", 100);
  jbool(j, "mem_alloc_async_available", have_async);
  jopen(j, "rows", '[');

  CUdeviceptr scratch = dev_alloc(kTinyThreads * sizeof(uint32_t));
  for (size_t i = 0; i < n_sizes; i++) {
    size_t size = sizes[i];
    double* c = new_samples((size_t)reps);
    double* a = new_samples((size_t)reps);
    double* m = new_samples((size_t)reps);

    /* Outside any capture: the three allocators interleaved, the order rotating per rep. */
    time_pairs_cgc(r, size, 100); /* warm-up: the first pair creates the cached segment */
    if (have_async) time_pairs_async(r, size, 100);
    time_pairs_memalloc(size, 2);
    uint64_t before = driver_allocs(r);
    for (int rep = 0; rep < reps; rep++) {
      for (int k = 0; k < 3; k++) {
        switch ((rep + k) % 3) {
          case 0: c[rep] = time_pairs_cgc(r, size, pairs); break;
          case 1: a[rep] = have_async ? time_pairs_async(r, size, pairs) : 0.0; break;
          default: m[rep] = time_pairs_memalloc(size, slow_pairs); break;
        }
      }
    }
    uint64_t outside_allocs = driver_allocs(r) - before;

    /* Inside a Global capture on the capturing stream: allocations come from the capture's
     * private pool. One kernel keeps the graph from being empty; nothing else is captured. */
    double* in = new_samples((size_t)reps);
    cgc_capture_options_t opt = {.struct_size = sizeof opt, .mode = CGC_CAPTURE_MODE_GLOBAL};
    CGC(cgc_capture_begin(r->s, &opt));
    CU_OK(launch_lcg(r, r->cs, scratch, kTinyThreads, 1));
    time_pairs_cgc(r, size, 100); /* warm-up: the pool's first segment */
    before = driver_allocs(r);
    for (int rep = 0; rep < reps; rep++) in[rep] = time_pairs_cgc(r, size, pairs);
    uint64_t inside_allocs = driver_allocs(r) - before;
    cgc_graph_t g = NULL;
    CGC(cgc_capture_end(r->s, &g));
    CGC(cgc_graph_destroy(g));

    /* Outside any capture on this thread, while another thread captures without pause: cgc's
     * captures are under way nearly all the time. */
    double* other = new_samples((size_t)reps);
    capturer_t cap = {.r = r, .scratch = scratch};
    CGC(cgc_stream_create(r->ctx, CGC_STREAM_NON_BLOCKING, 0, &cap.s));
    pthread_t thread;
    if (pthread_create(&thread, NULL, capture_loop, &cap) != 0) {
      fprintf(stderr, "cgc_bench: pthread_create failed\n");
      exit(2);
    }
    while (!atomic_load(&cap.started)) sched_yield();
    for (int rep = 0; rep < reps; rep++) other[rep] = time_pairs_cgc(r, size, pairs);
    atomic_store(&cap.stop, true);
    pthread_join(thread, NULL);
    CGC(cgc_stream_destroy(cap.s));

    summary_t sc = summarize(c, (size_t)reps), si = summarize(in, (size_t)reps), so = summarize(other, (size_t)reps);
    summary_t sa = summarize(a, (size_t)reps), sm = summarize(m, (size_t)reps);
    double ref = have_async ? sa.median : 0.0;
    char note[96];
    snprintf(note, sizeof note, "%s; driver allocations while timed: %llu", sc.median < 100 ? "target met" : "OVER TARGET",
             (unsigned long long)outside_allocs);
    alloc_row(j, size, "cgc_malloc + cgc_free", "cgc", sc, ref, note);
    snprintf(note, sizeof note, "%s; driver allocations while timed: %llu", si.median < 100 ? "target met" : "OVER TARGET",
             (unsigned long long)inside_allocs);
    alloc_row(j, size, "cgc_malloc + cgc_free, in capture", "cgc_in_capture", si, ref, note);
    snprintf(note, sizeof note, "%s; %.2fx outside; %ld captures meanwhile",
             so.median < 100 ? "target met" : "OVER TARGET", so.median / sc.median, cap.captures);
    alloc_row(j, size, "cgc_malloc + cgc_free, other captures", "cgc_while_others_capture", so, ref, note);
    if (have_async) alloc_row(j, size, "cuMemAllocAsync + cuMemFreeAsync", "mem_alloc_async", sa, ref, "default pool, threshold max");
    alloc_row(j, size, "cuMemAlloc + cuMemFree", "mem_alloc", sm, ref, "synchronous driver calls");
    double worst = sc.median > si.median ? sc.median : si.median;
    if (so.median > worst) worst = so.median;
    if (!t->have_alloc || worst > t->alloc_worst_ns) t->alloc_worst_ns = worst;
    t->have_alloc = true;
    free(c);
    free(a);
    free(m);
    free(in);
    free(other);
  }
  if (!have_async) printf("(cuMemAllocAsync: not available on this device or driver; its rows are left out)\n");
  CU(cuMemFree(scratch));
  if (have_async) { /* give the pool's cache back at the next synchronisation */
    cuuint64_t none = 0;
    CU(cuMemPoolSetAttribute(mempool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &none));
    CU(cuStreamSynchronize(r->cs));
  }
  jclose(j, ']');
  jclose(j, '}');
}

/* ---- scenario 5: memory of many graphs --------------------------------------------------- */

enum { kHidden = 4096, kGraphs = 35 };
static const float kScale[3] = {0.5f, -0.75f, 1.25f};
static const float kBias[3] = {0.1f, 0.2f, -0.3f};

/* The batch sizes of an inference server: 1, 2, 4, 8, then every multiple of 8 up to 256. */
static size_t server_batches(unsigned* out) {
  size_t n = 0;
  for (unsigned b = 1; b < 16; b *= 2) out[n++] = b;
  for (unsigned b = 16; b <= 256; b += 8) out[n++] = b;
  return n;
}

static CUresult launch_layer(const rig_t* r, CUdeviceptr out, CUdeviceptr in, unsigned rows, int layer) {
  unsigned width = kHidden;
  float scale = kScale[layer], bias = kBias[layer];
  unsigned long long total = (unsigned long long)rows * width;
  unsigned block = 256, grid = (unsigned)((total + block - 1) / block);
  void* args[] = {&out, &in, &rows, &width, &scale, &bias};
  return cgc__drv.cuLaunchKernel(r->k_layer, grid, 1, 1, block, 1, 1, 0, r->cs, args, NULL);
}

/* The host model of cgc_bench_layer. */
static void host_layer(float* out, const float* in, unsigned rows, int layer) {
  for (unsigned row = 0; row < rows; row++) {
    const float* x = in + (size_t)row * kHidden;
    float* y = out + (size_t)row * kHidden;
    for (unsigned c = 0; c < kHidden; c++)
      y[c] = kScale[layer] * x[c] + 0.25f * x[(7u * c + 1u) % kHidden] + kBias[layer];
  }
}

typedef struct mlp {
  unsigned batch;
  cgc_graph_t graph;
  void* out; /* the graph's output: cgc_malloc'd in the capture and not freed there */
} mlp_t;

static CUdeviceptr as_dev(void* p) { return (CUdeviceptr)(uintptr_t)p; }

/* x[b, 4096] -> h1 -> h2 -> out, three kernels; h1 and h2 are freed inside the capture (so later
 * allocations of the same capture, and of later captures sharing the pool, can reuse them) and
 * the output is kept. shared NULL: a new private pool. */
static void capture_mlp(const rig_t* r, CUdeviceptr x, cgc_pool_t shared, mlp_t* m) {
  size_t bytes = (size_t)m->batch * kHidden * sizeof(float);
  cgc_capture_options_t o = {.struct_size = sizeof o, .mode = CGC_CAPTURE_MODE_GLOBAL, .pool = shared};
  void *h1 = NULL, *h2 = NULL, *out = NULL;
  CGC(cgc_capture_begin(r->s, &o));
  CGC(cgc_malloc(r->ctx, bytes, r->s, &h1));
  CU_OK(launch_layer(r, as_dev(h1), x, m->batch, 0));
  CGC(cgc_malloc(r->ctx, bytes, r->s, &h2));
  CU_OK(launch_layer(r, as_dev(h2), as_dev(h1), m->batch, 1));
  CGC(cgc_free(h1));
  CGC(cgc_malloc(r->ctx, bytes, r->s, &out));
  CU_OK(launch_layer(r, as_dev(out), as_dev(h2), m->batch, 2));
  CGC(cgc_free(h2));
  CGC(cgc_capture_end(r->s, &m->graph));
  m->out = out;
}

/* Compares a replayed output with the host model, first `n` floats. NaN never matches. */
static bool floats_match(const float* got, const float* want, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float d = got[i] - want[i], mag = want[i] < 0 ? -want[i] : want[i];
    float tol = 1e-4f * (1.0f + mag); /* the GPU fuses multiply-adds; the host does not */
    if (!(d <= tol && d >= -tol)) return false;
  }
  return true;
}

/* Poisons the output with NaNs (so a replay that did not write it fails), replays, compares. */
static void poison(const rig_t* r, const mlp_t* m) {
  CU(cuMemsetD32Async(as_dev(m->out), 0x7FC00000u, (size_t)m->batch * kHidden, r->cs));
}

static bool output_ok(const rig_t* r, const mlp_t* m, const float* ref, float* host) {
  size_t n = (size_t)m->batch * kHidden;
  to_host(r, host, as_dev(m->out), n * sizeof(float));
  return floats_match(host, ref, n); /* rows are independent: graph b's output is ref's first b rows */
}

static double context_reserved_mib(const rig_t* r) {
  cgc_memory_stats_t s = {.struct_size = sizeof s};
  CGC(cgc_memory_stats(r->ctx, NULL, &s));
  return (double)s.bytes_reserved / MIB;
}

static double pool_reserved_mib(const rig_t* r, cgc_pool_t pool) {
  cgc_memory_stats_t s = {.struct_size = sizeof s};
  CGC(cgc_memory_stats(r->ctx, pool, &s));
  return (double)s.bytes_reserved / MIB;
}

typedef enum mem_variant {
  kLargestAlone,
  kPrivatePools,
  kSharedSmallestFirst,
  kSharedLargestFirst,
  kSharedLargestFirstReleased,
  kMemVariants
} mem_variant_t;

static const char* const kVariantLabel[kMemVariants] = {
    "largest graph alone, private pool",
    "(a) a private pool per graph",
    "(b) one shared pool, smallest first",
    "(c) one shared pool, largest first",
    "(d) as (c), outputs freed after capture",
};
static const char* const kVariantKey[kMemVariants] = {
    "largest_alone", "private", "shared_smallest_first", "shared_largest_first",
    "shared_largest_first_outputs_released",
};

typedef struct mem_result {
  size_t graphs;
  double reserved_mib;      /* cgc_memory_stats of the graphs' pool(s) */
  double context_delta_mib; /* the whole context's reserved bytes, before vs after capturing */
  double outputs_mib;       /* graph outputs still allocated */
  double leftover_mib;      /* context reserved after cleanup + cgc_empty_cache, vs before */
  int checked, wrong;
} mem_result_t;

static mem_result_t run_memory_variant(const rig_t* r, mem_variant_t v, const unsigned* batches, size_t n_batches,
                                       CUdeviceptr x, const float* ref, float* host) {
  mem_result_t res;
  memset(&res, 0, sizeof res);
  bool shared = v == kSharedSmallestFirst || v == kSharedLargestFirst || v == kSharedLargestFirstReleased;
  bool descending = v == kSharedLargestFirst || v == kSharedLargestFirstReleased;
  bool released = v == kSharedLargestFirstReleased;
  size_t n = v == kLargestAlone ? 1 : n_batches;
  mlp_t* m = xmalloc(n * sizeof *m);
  for (size_t i = 0; i < n; i++) {
    m[i].batch = v == kLargestAlone ? batches[n_batches - 1] : descending ? batches[n_batches - 1 - i] : batches[i];
    m[i].graph = NULL;
    m[i].out = NULL;
  }

  double context_before = context_reserved_mib(r);
  cgc_pool_t pool = NULL;
  if (shared) CGC(cgc_pool_create(r->ctx, &pool));
  for (size_t i = 0; i < n; i++) {
    capture_mlp(r, x, pool, &m[i]);
    /* vLLM's pattern: the output's memory goes back to the pool at once, so later (smaller)
     * captures reuse it; each replay's output is read before the next replay. */
    if (released) CGC(cgc_free(m[i].out));
  }

  res.graphs = n;
  if (shared) {
    res.reserved_mib = pool_reserved_mib(r, pool);
  } else {
    for (size_t i = 0; i < n; i++) {
      cgc_pool_t own = NULL;
      CGC(cgc_graph_pool(m[i].graph, &own));
      res.reserved_mib += pool_reserved_mib(r, own);
    }
  }
  res.context_delta_mib = context_reserved_mib(r) - context_before;
  for (size_t i = 0; i < n && !released; i++) res.outputs_mib += (double)m[i].batch * kHidden * sizeof(float) / MIB;

  /* Replays in capture order (graphs sharing a pool must be), every output checked. */
  if (released) {
    for (size_t i = 0; i < n; i++) {
      poison(r, &m[i]);
      CGC(cgc_graph_launch(m[i].graph, r->s));
      CGC(cgc_stream_synchronize(r->s));
      res.checked++;
      if (!output_ok(r, &m[i], ref, host)) res.wrong++;
    }
  } else {
    for (size_t i = 0; i < n; i++) poison(r, &m[i]);
    for (size_t i = 0; i < n; i++) CGC(cgc_graph_launch(m[i].graph, r->s));
    CGC(cgc_stream_synchronize(r->s));
    for (size_t i = 0; i < n; i++) {
      res.checked++;
      if (!output_ok(r, &m[i], ref, host)) res.wrong++;
    }
  }
  g_failed_checks += res.wrong;

  /* Cleanup: outputs, graphs and the user's pool reference; the pools' segments then move to
   * the device cache, which cgc_empty_cache gives back, so the next variant starts clean. */
  for (size_t i = 0; i < n; i++) {
    if (!released) CGC(cgc_free(m[i].out));
    CGC(cgc_graph_destroy(m[i].graph));
  }
  if (pool != NULL) CGC(cgc_pool_release(pool));
  CGC(cgc_empty_cache(r->ctx));
  res.leftover_mib = context_reserved_mib(r) - context_before;
  free(m);
  return res;
}

static void scenario_memory(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  (void)o; /* the same 35 graphs in both presets: the figure is a size, not a timing */
  unsigned batches[64];
  size_t n_batches = server_batches(batches);
  if (n_batches != kGraphs) {
    fprintf(stderr, "cgc_bench: %zu batch sizes, expected %d\n", n_batches, kGraphs);
    exit(2);
  }
  unsigned max_batch = batches[n_batches - 1];
  size_t n = (size_t)max_batch * kHidden;

  /* The input lives outside cgc (cuMemAlloc), so cgc's figures hold only the graphs' memory. */
  float* hx = xmalloc(n * sizeof(float));
  float* ref = xmalloc(n * sizeof(float));
  float* tmp = xmalloc(n * sizeof(float));
  float* host = xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) hx[i] = rand_float();
  host_layer(tmp, hx, max_batch, 0);
  host_layer(ref, tmp, max_batch, 1);
  memcpy(tmp, ref, n * sizeof(float));
  host_layer(ref, tmp, max_batch, 2);
  CUdeviceptr x = dev_alloc(n * sizeof(float));
  to_device(r, x, hx, n * sizeof(float));
  CGC(cgc_empty_cache(r->ctx)); /* earlier scenarios' cached segments do not count here */

  print_title("5. Memory of 35 graphs, one per batch size 1, 2, 4, 8, 16, 24, ..., 256: x[b,4096] -> h1 -> h2 -> "
              "out, h1 and h2 freed in the capture (reserved MiB from cgc_memory_stats; target (c) <= 1.05 x "
              "largest alone)");
  printf("%-42s | %6s | %12s | %12s | %13s | %s\n", "variant", "graphs", "reserved MiB", "outputs MiB",
         "x largest", "replay check");
  jopen(j, "memory", '{');
  jint(j, "hidden", kHidden);
  jopen(j, "batches", '[');
  for (size_t i = 0; i < n_batches; i++) jint(j, NULL, batches[i]);
  jclose(j, ']');
  jopen(j, "variants", '[');

  mem_result_t res[kMemVariants];
  for (int v = 0; v < kMemVariants; v++) {
    res[v] = run_memory_variant(r, (mem_variant_t)v, batches, n_batches, x, ref, host);
    double vs_largest = res[v].reserved_mib / res[kLargestAlone].reserved_mib;
    char check[64];
    snprintf(check, sizeof check, "%s (%d/%d outputs)", res[v].wrong ? "FAIL" : "OK", res[v].checked - res[v].wrong,
             res[v].checked);
    printf("%-42s | %6zu | %12.1f | %12.1f | %13.3f | %s\n", kVariantLabel[v], res[v].graphs, res[v].reserved_mib,
           res[v].outputs_mib, vs_largest, check);
    if (res[v].leftover_mib > 0.0)
      printf("  (after cleanup and cgc_empty_cache the context still holds %.1f MiB more than before)\n",
             res[v].leftover_mib);
    fflush(stdout);

    jopen(j, NULL, '{');
    jstr(j, "name", kVariantKey[v]);
    jint(j, "graphs", (long long)res[v].graphs);
    jnum(j, "reserved_mib", res[v].reserved_mib);
    jnum(j, "context_delta_mib", res[v].context_delta_mib);
    jnum(j, "outputs_mib", res[v].outputs_mib);
    jnum(j, "vs_largest_alone", vs_largest);
    jnum(j, "leftover_after_cleanup_mib", res[v].leftover_mib);
    jstr(j, "check", res[v].wrong ? "FAIL" : "OK");
    jclose(j, '}');
  }
  jclose(j, ']');

  double ratio_c = res[kSharedLargestFirst].reserved_mib / res[kLargestAlone].reserved_mib;
  double ratio_d = res[kSharedLargestFirstReleased].reserved_mib / res[kLargestAlone].reserved_mib;
  jnum(j, "ratio_largest_first_to_largest_alone", ratio_c);
  jnum(j, "ratio_largest_first_released_to_largest_alone", ratio_d);
  jclose(j, '}');
  printf("(c) / largest alone = %.3f (target <= 1.05: %s). The 35 outputs stay allocated in (a)-(c) and need "
         "%.1f MiB\nbetween them, on top of the largest graph's working set; (d) frees each output after its capture "
         "and reads it\nright after its replay, as vLLM does: (d) / largest alone = %.3f.\n",
         ratio_c, ratio_c <= 1.05 ? "met" : "MISSED", res[kSharedLargestFirst].outputs_mib, ratio_d);
  t->memory_ratio = ratio_c;
  t->memory_ratio_released = ratio_d;
  t->have_memory = true;

  CU(cuMemFree(x));
  free(hx);
  free(ref);
  free(tmp);
  free(host);
}

/* ---- scenario 6: fork/join over 4 streams vs one stream ---------------------------------- */

enum { kBranches = 4, kChain = 8, kBranchBlocks = 8, kBranchThreads = kBranchBlocks * 256 };

/* GPU time of one LCG kernel over a branch's buffer, us (median of 5, CUDA events). */
static double kernel_us(const rig_t* r, CUdeviceptr buf, unsigned steps, cgc_event_t start, cgc_event_t end) {
  double v[5];
  for (int k = 0; k < 5; k++) {
    CGC(cgc_event_record(start, r->s));
    CU_OK(launch_lcg(r, r->cs, buf, kBranchThreads, steps));
    CGC(cgc_event_record(end, r->s));
    CGC(cgc_event_synchronize(end));
    float ms = 0;
    CGC(cgc_event_elapsed_ms(start, end, &ms));
    v[k] = ms * 1e3;
  }
  return summarize(v, 5).median;
}

/* Replays g once between two timing events on the origin stream, ms. */
static double replay_ms(const rig_t* r, cgc_graph_t g, cgc_event_t start, cgc_event_t end) {
  CGC(cgc_event_record(start, r->s));
  CGC(cgc_graph_launch(g, r->s));
  CGC(cgc_event_record(end, r->s));
  CGC(cgc_event_synchronize(end));
  float ms = 0;
  CGC(cgc_event_elapsed_ms(start, end, &ms));
  return ms;
}

static void scenario_multistream(const rig_t* r, const opts_t* o, json_t* j) {
  const int reps = o->full ? 200 : 30;
  cgc_event_t start, end;
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &start));
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &end));

  /* Each branch works on its own buffer of 8 blocks x 256 threads, so four branches fit on the
   * GPU side by side and the fork/join graph can run them concurrently. */
  size_t words = kBranchThreads, bytes = words * sizeof(uint32_t);
  uint32_t* init[kBranches];
  CUdeviceptr fork_buf[kBranches], serial_buf[kBranches];
  for (int b = 0; b < kBranches; b++) {
    init[b] = xmalloc(bytes);
    random_words(init[b], words);
    fork_buf[b] = dev_alloc(bytes);
    serial_buf[b] = dev_alloc(bytes);
    to_device(r, fork_buf[b], init[b], bytes);
    to_device(r, serial_buf[b], init[b], bytes);
  }

  /* Calibration, on a buffer of its own (the others must keep their initial data): LCG steps
   * per thread for a kernel of about 50 us on this GPU. */
  CUdeviceptr probe_buf = dev_alloc(bytes);
  to_device(r, probe_buf, init[0], bytes);
  unsigned probe = 1u << 12;
  kernel_us(r, probe_buf, probe, start, end); /* warm-up (clocks, module) */
  double probe_us = kernel_us(r, probe_buf, probe, start, end);
  while (probe_us < 5.0 && probe < (1u << 24)) {
    probe *= 8;
    probe_us = kernel_us(r, probe_buf, probe, start, end);
  }
  double want = 50.0 * probe / (probe_us > 0 ? probe_us : 1.0);
  unsigned steps = want < 1 ? 1u : want > (double)(1u << 26) ? (1u << 26) : (unsigned)want;
  double one_kernel_us = kernel_us(r, probe_buf, steps, start, end);
  CU(cuMemFree(probe_buf));

  cgc_stream_t side[kBranches];
  cgc_event_t fork_ev, join_ev[kBranches];
  side[0] = r->s; /* branch 0 runs on the origin stream itself */
  CGC(cgc_event_create(r->ctx, 0, &fork_ev));
  for (int b = 1; b < kBranches; b++) {
    CGC(cgc_stream_create(r->ctx, CGC_STREAM_NON_BLOCKING, 0, &side[b]));
    CGC(cgc_event_create(r->ctx, 0, &join_ev[b]));
  }

  /* Fork/join: the origin records, three side streams wait on it (fork), each of the four
   * streams runs its chain, the origin waits on each side stream's record (join). */
  cgc_graph_t forked = NULL, serial = NULL;
  CGC(cgc_capture_begin(r->s, NULL));
  CGC(cgc_event_record(fork_ev, r->s));
  for (int b = 1; b < kBranches; b++) CGC(cgc_stream_wait_event(side[b], fork_ev));
  for (int b = 0; b < kBranches; b++)
    for (int k = 0; k < kChain; k++)
      CU_OK(launch_lcg(r, (CUstream)cgc_stream_native(side[b]), fork_buf[b], kBranchThreads, steps));
  for (int b = 1; b < kBranches; b++) {
    CGC(cgc_event_record(join_ev[b], side[b]));
    CGC(cgc_stream_wait_event(r->s, join_ev[b]));
  }
  CGC(cgc_capture_end(r->s, &forked));
  /* The same 32 kernels one after another on the origin stream. */
  CGC(cgc_capture_begin(r->s, NULL));
  for (int b = 0; b < kBranches; b++)
    for (int k = 0; k < kChain; k++) CU_OK(launch_lcg(r, r->cs, serial_buf[b], kBranchThreads, steps));
  CGC(cgc_capture_end(r->s, &serial));

  /* Correctness: one replay of each from the initial data must give kChain * steps LCG steps. */
  CGC(cgc_graph_launch(forked, r->s));
  CGC(cgc_graph_launch(serial, r->s));
  CGC(cgc_stream_synchronize(r->s));
  bool ok = true;
  for (int b = 0; b < kBranches; b++) {
    ok = lcg_matches(r, fork_buf[b], init[b], kBranchThreads, (uint64_t)kChain * steps) && ok;
    ok = lcg_matches(r, serial_buf[b], init[b], kBranchThreads, (uint64_t)kChain * steps) && ok;
  }

  for (int k = 0; k < 3; k++) { /* warm-up */
    replay_ms(r, forked, start, end);
    replay_ms(r, serial, start, end);
  }
  double* a = new_samples((size_t)reps);
  double* b = new_samples((size_t)reps);
  for (int rep = 0; rep < reps; rep++) {
    for (int half = 0; half < 2; half++) {
      bool fork_turn = ((rep + half) & 1) == 0;
      if (fork_turn) a[rep] = replay_ms(r, forked, start, end);
      else b[rep] = replay_ms(r, serial, start, end);
    }
  }
  summary_t sa = summarize(a, (size_t)reps), sb = summarize(b, (size_t)reps);
  double speedup = sb.median / sa.median;

  char title[256];
  snprintf(title, sizeof title,
           "6. Multi-stream: fork/join graph over %d streams vs the same %d kernels serialised on one stream, "
           "GPU ms per replay (CUDA events; speedup = serial / fork-join)",
           kBranches, kBranches * kChain);
  print_title(title);
  printf("each branch: a chain of %d kernels of %d blocks x 256 threads, %u LCG steps each, %.1f us per kernel\n",
         kChain, kBranchBlocks, steps, one_kernel_us);
  print_columns("fork/join", "serial", "speedup");
  char size[32], note[64];
  snprintf(size, sizeof size, "%d x %d", kBranches, kChain);
  snprintf(note, sizeof note, "results %s", ok ? "OK" : "FAIL");
  print_row("fork/join vs serial", size, sa, sb, speedup, note);

  jopen(j, "multistream", '{');
  jstr(j, "unit", "ms per replay (GPU, events)");
  jint(j, "branches", kBranches);
  jint(j, "chain", kChain);
  jint(j, "steps", steps);
  jnum(j, "kernel_us", one_kernel_us);
  json_row(j, "fork_join", "serial", "speedup", sa, sb, speedup);
  jint(j, "reps", reps);
  jstr(j, "check", ok ? "OK" : "FAIL");
  jclose(j, '}');

  free(a);
  free(b);
  CGC(cgc_graph_destroy(forked));
  CGC(cgc_graph_destroy(serial));
  for (int k = 1; k < kBranches; k++) {
    CGC(cgc_stream_destroy(side[k]));
    CGC(cgc_event_destroy(join_ev[k]));
  }
  CGC(cgc_event_destroy(fork_ev));
  CGC(cgc_event_destroy(start));
  CGC(cgc_event_destroy(end));
  for (int k = 0; k < kBranches; k++) {
    CU(cuMemFree(fork_buf[k]));
    CU(cuMemFree(serial_buf[k]));
    free(init[k]);
  }
}

/* ---- main -------------------------------------------------------------------------------- */

static void usage(FILE* f) {
  fprintf(f,
          "usage: cgc_bench [--quick | --full] [--json FILE] [--scenarios LIST]\n"
          "  --quick           the default: every scenario, finishes in well under a minute\n"
          "  --full            more repetitions and sizes (a few minutes)\n"
          "  --json FILE       also write every figure, the device, driver and cgc versions to FILE\n"
          "  --scenarios LIST  run only these, e.g. 1,3,5 (1 launch, 2 replay vs eager, 3 capture,\n"
          "                    4 allocator, 5 memory, 6 multi-stream)\n"
          "Exit status: 0 done, 1 no GPU, 2 a cgc or driver call failed, 3 a replay gave a wrong result.\n");
}

static bool parse_args(int argc, char** argv, opts_t* o) {
  o->full = false;
  o->json_path = NULL;
  o->scenarios = 0x7Eu; /* 1..6 */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      o->full = false;
    } else if (strcmp(argv[i], "--full") == 0) {
      o->full = true;
    } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      o->json_path = argv[++i];
    } else if (strcmp(argv[i], "--scenarios") == 0 && i + 1 < argc) {
      o->scenarios = 0;
      for (char* p = argv[++i]; *p;) {
        char* endp;
        unsigned long k = strtoul(p, &endp, 10);
        if (endp == p || k < 1 || k > 6) {
          fprintf(stderr, "cgc_bench: --scenarios takes numbers 1 to 6 separated by commas\n");
          return false;
        }
        o->scenarios |= 1u << k;
        p = *endp == ',' ? endp + 1 : endp;
        if (*endp != ',' && *endp != '\0') {
          fprintf(stderr, "cgc_bench: --scenarios takes numbers 1 to 6 separated by commas\n");
          return false;
        }
      }
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "cgc_bench: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return false;
    }
  }
  return true;
}

static void print_summary(const targets_t* t) {
  printf("\n== Targets\n");
  if (t->have_launch)
    printf("launch cost, cgc / raw <= 1.05:            worst %.3f  %s\n", t->launch_worst_ratio,
           t->launch_worst_ratio <= 1.05 ? "met" : "MISSED");
  if (t->have_capture)
    printf("capture + instantiate, cgc / raw <= 1.05:  worst %.3f  %s\n", t->capture_worst_ratio,
           t->capture_worst_ratio <= 1.05 ? "met" : "MISSED");
  if (t->have_alloc)
    printf("allocator pair on a hit < 100 ns:           worst %.1f ns  %s\n", t->alloc_worst_ns,
           t->alloc_worst_ns < 100 ? "met" : "MISSED");
  if (t->have_memory)
    printf("35 graphs largest first / largest <= 1.05: %.3f  %s  (outputs freed after capture: %.3f)\n",
           t->memory_ratio, t->memory_ratio <= 1.05 ? "met" : "MISSED", t->memory_ratio_released);
}

int main(int argc, char** argv) {
  opts_t o;
  if (!parse_args(argc, argv, &o)) return 2;

  /* cgc_device_count loads the driver (and cgc__drv with it); without one, say so and stop. */
  int devices = 0;
  cgc_status_t st = cgc_device_count(&devices);
  if (st != CGC_SUCCESS || devices <= 0) {
    const char* why = cgc_last_error();
    printf("cgc_bench: no GPU, nothing to measure (cgc_device_count: %s%s%s)\n", cgc_status_string(st),
           why[0] ? " -- " : "", why);
    return 1;
  }

  int64_t t_start = now_ns();
  rig_t r;
  memset(&r, 0, sizeof r);
  CGC(cgc_context_create(0, &r.ctx));
  CU(cuDeviceGet(&r.dev, 0));
  CU(cuDeviceGetName(r.device_name, (int)sizeof r.device_name, r.dev));
  /* Our own launches and raw driver calls need the device's primary context current, the one
   * cgc uses: retain it and make it current on this thread (cgc then never switches). */
  CU(cuDevicePrimaryCtxRetain(&r.primary, r.dev));
  CU(cuCtxPushCurrent(r.primary));
  CU(cuModuleLoadData(&r.module, cgc_bench_kernels_fatbin));
  CU(cuModuleGetFunction(&r.k_lcg, r.module, "cgc_bench_lcg"));
  CU(cuModuleGetFunction(&r.k_layer, r.module, "cgc_bench_layer"));
  CGC(cgc_stream_create(r.ctx, CGC_STREAM_NON_BLOCKING, 0, &r.s));
  r.cs = (CUstream)cgc_stream_native(r.s);

  uint32_t v = cgc_version();
  char version[32];
  snprintf(version, sizeof version, "%u.%u.%u", v >> 16, (v >> 8) & 0xffu, v & 0xffu);
  printf("cgc_bench (%s preset): %s, driver %d.%d (%d), cgc %s%s\n", o.full ? "full" : "quick", r.device_name,
         cgc__drv.version / 1000, (cgc__drv.version % 1000) / 10, cgc__drv.version, version,
         v == CGC_VERSION ? "" : " (WARNING: the header's CGC_VERSION differs)");
  printf("medians and 90th percentiles over repetitions after warm-up; cgc and raw runs interleaved\n");
  fflush(stdout);

  json_t j;
  memset(&j, 0, sizeof j);
  j.first[0] = true;
  jopen(&j, NULL, '{');
  jstr(&j, "tool", "cgc_bench");
  jstr(&j, "preset", o.full ? "full" : "quick");
  jstr(&j, "device", r.device_name);
  jint(&j, "driver_version", cgc__drv.version);
  jstr(&j, "cgc_version", version);
  jint(&j, "cgc_version_code", v);

  targets_t t;
  memset(&t, 0, sizeof t);
  for (int k = 1; k <= 6; k++) {
    if (!(o.scenarios & (1u << k))) continue;
    int64_t t0 = now_ns();
    switch (k) {
      case 1: scenario_launch(&r, &o, &j, &t); break;
      case 2: scenario_replay(&r, &o, &j); break;
      case 3: scenario_capture(&r, &o, &j, &t); break;
      case 4: scenario_alloc(&r, &o, &j, &t); break;
      case 5: scenario_memory(&r, &o, &j, &t); break;
      default: scenario_multistream(&r, &o, &j); break;
    }
    printf("(scenario %d took %.1f s)\n", k, (double)(now_ns() - t0) / 1e9);
    fflush(stdout);
  }
  print_summary(&t);

  double seconds = (double)(now_ns() - t_start) / 1e9;
  jint(&j, "failed_checks", g_failed_checks);
  jnum(&j, "seconds", seconds);
  jclose(&j, '}');
  jappend(&j, "\n");
  if (o.json_path != NULL) {
    FILE* f = fopen(o.json_path, "w");
    if (f == NULL || fwrite(j.buf, 1, j.len, f) != j.len || fclose(f) != 0) {
      fprintf(stderr, "cgc_bench: cannot write %s\n", o.json_path);
      return 2;
    }
    printf("figures written to %s\n", o.json_path);
  }
  free(j.buf);

  CGC(cgc_stream_destroy(r.s));
  CU(cuModuleUnload(r.module));
  CGC(cgc_context_destroy(r.ctx));
  CUcontext popped;
  CU(cuCtxPopCurrent(&popped));
  CU(cuDevicePrimaryCtxRelease(r.dev));

  printf("done in %.1f s%s\n", seconds, g_failed_checks ? "; SOME REPLAY RESULTS WERE WRONG" : "");
  return g_failed_checks ? 3 : 0;
}
