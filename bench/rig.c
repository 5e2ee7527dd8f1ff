/* See rig.h. */
#include "bench/rig.h"

#include <stdio.h>
#include <stdlib.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

/* xorshift64: reproducible test data, never all zeros. */
uint32_t rand_u32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 32);
}

/* Uniform in [-1, 1). */
float rand_float(void) { return (float)(rand_u32() >> 8) * (2.0f / 16777216.0f) - 1.0f; }

CUdeviceptr dev_alloc(size_t bytes) {
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, bytes));
  return p;
}

/* Copies on the bench stream and waits: the stream is non-blocking, so the legacy stream's
 * synchronous copies would not be ordered with it. */
void to_device(const rig_t* r, CUdeviceptr dst, const void* src, size_t bytes) {
  CU(cuMemcpyHtoDAsync(dst, src, bytes, r->cs));
  CU(cuStreamSynchronize(r->cs));
}

void to_host(const rig_t* r, void* dst, CUdeviceptr src, size_t bytes) {
  CU(cuMemcpyDtoHAsync(dst, src, bytes, r->cs));
  CU(cuStreamSynchronize(r->cs));
}

/* ---- the LCG kernel and its exact host model -------------------------------------------- */

static const uint32_t kLcgMul = 1664525u, kLcgAdd = 1013904223u;

CUresult launch_lcg(const rig_t* r, CUstream stream, CUdeviceptr p, unsigned n, unsigned steps) {
  unsigned block = n < 256 ? n : 256;
  unsigned grid = (n + block - 1) / block;
  void* args[] = {&p, &n, &steps};
  return drv.cuLaunchKernel(r->k_lcg, grid, 1, 1, block, 1, 1, 0, stream, args, NULL);
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

void random_words(uint32_t* w, size_t n) {
  for (size_t i = 0; i < n; i++) w[i] = rand_u32();
}

/* True when the n words at p are `init` advanced by `steps` LCG steps. */
bool lcg_matches(const rig_t* r, CUdeviceptr p, const uint32_t* init, unsigned n, uint64_t steps) {
  uint32_t* got = xmalloc(n * sizeof *got);
  to_host(r, got, p, n * sizeof *got);
  affine_t f = lcg_steps(steps);
  bool ok = true;
  for (unsigned i = 0; i < n && ok; i++) ok = got[i] == f.mul * init[i] + f.add;
  free(got);
  if (!ok) bench_failed_checks++;
  return ok;
}

/* A graph of `nodes` tiny kernels in a chain on buf (32 words), captured with cgc and uploaded. */
cgc_graph_t capture_chain(const rig_t* r, CUdeviceptr buf, unsigned nodes) {
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
int launch_reps(unsigned nodes, bool full) {
  if (nodes <= 100) return full ? 1000 : 200;
  if (nodes <= 300) return full ? 400 : 100;
  return full ? 150 : 40;
}

void size_label(char* buf, size_t cap, unsigned nodes) {
  snprintf(buf, cap, "%u node%s", nodes, nodes == 1 ? "" : "s");
}

/* One row of scenarios 1 and 2 (graphs of `nodes` kernels): the printed table and the JSON. */
void report_node_row(json_t* j, const char* scenario, unsigned nodes, int reps, const char* a_name,
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
