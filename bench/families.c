/* families: graphs of one structure sharing one executable (1.6, cgc_graph_share_executable),
 * against the raw driver in the same run.
 *
 *   families [--members M] [--nodes K] [--rounds R]
 *
 * For each of three kinds of family, M members (default 8) of K kernel nodes (default 1,000) are
 * captured and joined to the first:
 *   every node differs  each member has its own buffer and grid (a batch size each);
 *   K/10 nodes differ   one buffer for all (as a server's static inputs), and the first K/10
 *   10 nodes differ     kernels take a value of their own per member.
 * It prints, as medians of R rounds (default 25) with the stream drained before each call:
 *   - the anchor: cuGraphInstantiateWithFlags of a member's graph (raw driver);
 *   - a launch that switches the executable to another member (cgc_graph_launch, host time), and
 *     the switch alone (that, less a launch of a member the executable holds), against the anchor;
 *   - a launch of the member the executable holds, against cuGraphLaunch of an executable of its
 *     own (raw driver), each the mean of a burst of launches;
 *   - the device memory M executables of their own take (cuMemGetInfo before and after
 *     instantiating them all), of which a family holds one;
 * and checks that each member run through the family writes what its own executable writes
 * (exit status 3 if not). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"

extern const unsigned char cgc_bench_kernels_fatbin[];

static cgc_context_t ctx;
static cgc_stream_t stream;
static CUstream native;
static cgc_function_t lcg;

typedef enum { EVERY_NODE, TENTH, TEN_NODES } kind_t;
static const char* const kKindNames[] = {"every node differs", "K/10 nodes differ", "10 nodes differ"};

enum { kBurst = 20 }; /* launches timed back to back */

static double us_since(int64_t t0) { return (double)(now_ns() - t0) / 1e3; }

/* Member m of a family of `kind`: its buffer (*buf, n words) and graph. */
static cgc_graph_t capture_member(kind_t kind, int m, int n_nodes, void* shared, void** buf, unsigned* n) {
  *n = kind == EVERY_NODE ? 256u * (1u + (unsigned)m) : 4096u;
  if (kind == EVERY_NODE) CGC(cgc_malloc(ctx, *n * 4, stream, buf));
  else *buf = shared;
  int differing = kind == EVERY_NODE ? n_nodes : kind == TENTH ? n_nodes / 10 : 10;
  cgc_capture_options_t options = {.struct_size = sizeof options};
  CGC(cgc_capture_begin(stream, &options));
  for (int i = 0; i < n_nodes; i++) {
    unsigned steps = i < differing ? 1u + (unsigned)m : 1u + (unsigned)(i % 3);
    void* args[] = {buf, n, &steps};
    CGC(cgc_launch_kernel(lcg, (*n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args));
  }
  cgc_graph_t g;
  CGC(cgc_capture_end(stream, &g));
  return g;
}

static uint64_t checksum(void* buf, unsigned n) {
  uint32_t* host = xmalloc(n * 4u);
  CU(cuMemcpyDtoH(host, (CUdeviceptr)(uintptr_t)buf, n * 4u));
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned i = 0; i < n; i++) h = (h ^ host[i]) * 0x100000001b3ull;
  free(host);
  return h;
}

static size_t free_bytes(void) {
  size_t free_now = 0, total = 0;
  CGC(cgc_stream_synchronize(stream));
  CU(cuMemGetInfo(&free_now, &total));
  return free_now;
}

static void run_kind(kind_t kind, int n_members, int n_nodes, int rounds, void* shared) {
  cgc_graph_t* g = xmalloc((size_t)n_members * sizeof *g);
  void** bufs = xmalloc((size_t)n_members * sizeof *bufs);
  unsigned* ns = xmalloc((size_t)n_members * sizeof *ns);
  for (int m = 0; m < n_members; m++) g[m] = capture_member(kind, m, n_nodes, shared, &bufs[m], &ns[m]);

  /* What each member writes with an executable of its own (raw), from zeroed memory, and what
   * those executables take of the device's memory (all alive at once, as without a family). */
  uint64_t* want = xmalloc((size_t)n_members * sizeof *want);
  CUgraphExec* own = xmalloc((size_t)n_members * sizeof *own);
  double* samples = new_samples((size_t)(rounds > n_members ? rounds : n_members));
  size_t before_own = free_bytes();
  for (int m = 0; m < n_members; m++) {
    int64_t t0 = now_ns();
    CU(cuGraphInstantiateWithFlags(&own[m], (CUgraph)cgc_graph_native(g[m]), 0));
    samples[m] = us_since(t0);
    CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)bufs[m], 0, ns[m], native));
    CU(cuGraphLaunch(own[m], native));
    CGC(cgc_stream_synchronize(stream));
    want[m] = checksum(bufs[m], ns[m]);
  }
  size_t after_own = free_bytes();
  summary_t instantiate = summarize(samples, (size_t)n_members);

  /* The executables of their own go but the first, the raw side of a launch: timed in the same
   * rounds as the member held, so that both meet the same device and driver state. */
  CGC(cgc_stream_synchronize(stream));
  for (int m = 1; m < n_members; m++) CU(cuGraphExecDestroy(own[m]));

  for (int m = 1; m < n_members; m++) CGC(cgc_graph_share_executable(g[m], g[0]));

  /* Every member once (each first switch also finds how the member pairs), then timed rounds:
   * a switching launch (the member after the one launched last), then a burst of launches of it
   * and a burst of cuGraphLaunch of the first member's own executable, in turn which first, each
   * after the stream drained (the mean of each burst). */
  for (int m = 0; m < n_members; m++) CGC(cgc_graph_launch(g[m], stream));
  double* switched = new_samples((size_t)rounds);
  double* raw = new_samples((size_t)rounds);
  double* held = new_samples((size_t)rounds);
  for (int r = 0; r < rounds; r++) {
    cgc_graph_t next = g[r % n_members];
    CGC(cgc_stream_synchronize(stream));
    int64_t t0 = now_ns();
    CGC(cgc_graph_launch(next, stream));
    switched[r] = us_since(t0);
    for (int turn = 0; turn < 2; turn++) {
      bool family_turn = (turn == 0) == (r % 2 == 0);
      CGC(cgc_stream_synchronize(stream));
      t0 = now_ns();
      if (family_turn) {
        for (int b = 0; b < kBurst; b++) CGC(cgc_graph_launch(next, stream));
        held[r] = us_since(t0) / kBurst;
      } else {
        for (int b = 0; b < kBurst; b++) CU(cuGraphLaunch(own[0], native));
        raw[r] = us_since(t0) / kBurst;
      }
    }
  }
  CGC(cgc_stream_synchronize(stream));
  CU(cuGraphExecDestroy(own[0]));
  summary_t raw_launch = summarize(raw, (size_t)rounds);
  summary_t switching = summarize(switched, (size_t)rounds), holding = summarize(held, (size_t)rounds);

  int wrong = 0;
  for (int m = n_members; m-- > 0;) {
    CGC(cgc_memset_d32_async(bufs[m], 0, ns[m], stream));
    CGC(cgc_graph_launch(g[m], stream));
    CGC(cgc_stream_synchronize(stream));
    wrong += checksum(bufs[m], ns[m]) != want[m];
  }
  bench_failed_checks += wrong;

  double own_mib = (double)(before_own > after_own ? before_own - after_own : 0) / MIB;
  double switch_us = switching.median - holding.median;
  printf("%s (%d members of %d kernel nodes):\n", kKindNames[kind], n_members, n_nodes);
  printf("  instantiate (raw driver): %.1f us\n", instantiate.median);
  printf("  switching launch: %.1f us (p90 %.1f); the switch alone: %.1f us = %.3fx an instantiation\n",
         switching.median, switching.p90, switch_us, switch_us / instantiate.median);
  printf("  launch of the member held: %.2f us; cuGraphLaunch of an executable of its own: %.2f us (means of bursts "
         "of %d); ratio %.3f\n",
         holding.median, raw_launch.median, kBurst, holding.median / raw_launch.median);
  printf("  device memory of %d executables of their own: %.1f MiB; the family holds one (%.1f MiB less)\n", n_members,
         own_mib, own_mib * (n_members - 1) / n_members);
  printf("  members run through the family writing what their own executable writes: %d of %d\n", n_members - wrong,
         n_members);
  for (int m = 0; m < n_members; m++) CGC(cgc_graph_destroy(g[m]));
  CGC(cgc_stream_synchronize(stream));
  if (kind == EVERY_NODE)
    for (int m = 0; m < n_members; m++) CGC(cgc_free(bufs[m]));
  free(g);
  free(bufs);
  free(ns);
  free(want);
  free(own);
  free(samples);
  free(switched);
  free(held);
  free(raw);
}

int main(int argc, char** argv) {
  bench_tool = "families";
  int n_members = 8, n_nodes = 1000, rounds = 25;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--members") == 0 && i + 1 < argc) n_members = atoi(argv[++i]);
    else if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc) n_nodes = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: families [--members M] [--nodes K] [--rounds R]\n");
      return 2;
    }
  }
  if (n_members < 2 || n_nodes < 20 || rounds < 1) fail_with("need at least 2 members, 20 nodes and 1 round");
  CUdevice dev;
  CUcontext primary;
  if (!bench_enter_device("families", &dev, &primary)) return 1;
  CGC(cgc_context_create(0, &ctx));
  CGC(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &stream));
  native = (CUstream)cgc_stream_native(stream);
  cgc_module_t module;
  CGC(cgc_module_load(ctx, cgc_bench_kernels_fatbin, &module));
  CGC(cgc_module_get_function(module, "cgc_bench_lcg", &lcg));
  void* shared;
  CGC(cgc_malloc(ctx, 4096 * 4, stream, &shared));
  for (int kind = EVERY_NODE; kind <= TEN_NODES; kind++) run_kind((kind_t)kind, n_members, n_nodes, rounds, shared);
  CGC(cgc_free(shared));
  CGC(cgc_stream_synchronize(stream));
  CGC(cgc_module_unload(module));
  CGC(cgc_stream_destroy(stream));
  CGC(cgc_context_destroy(ctx));
  return bench_failed_checks ? 3 : 0;
}
