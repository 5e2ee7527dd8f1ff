/* Scenario 7: capture + instantiate of a mixed graph, the work a graph is made of (1.1): per
 * unit a copy in from page-locked host memory, a set, a kernel, a host function and a copy out,
 * through cgc's calls (cgc_memcpy_htod_async, cgc_memset_d32_async, cgc_launch_kernel,
 * cgc_launch_host_func, cgc_memcpy_dtoh_async between cgc_capture_begin/end) against the same
 * calls of the driver (cuMemcpyHtoDAsync, cuMemsetD32Async, cuLaunchKernel, cuLaunchHostFunc,
 * cuMemcpyDtoHAsync between cuStreamBeginCapture/EndCapture + cuGraphInstantiateWithFlags).
 * One replay of each graph is checked: the copies and the kernel's result and the host function's
 * count. */
#include "bench/rig.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kWords = kTinyThreads, kNodesPerUnit = 5 };

typedef struct mixed {
  const rig_t* r;
  cgc_module_t module;      /* the bench kernels again, loaded through cgc for cgc's side */
  cgc_function_t lcg;       /* cgc_bench_lcg */
  uint32_t* host_in;        /* page-locked: the copies of a capture need it */
  uint32_t* host_out;
  CUdeviceptr buf;          /* the kernel's words */
  CUdeviceptr scratch;      /* what the sets write */
  atomic_int host_calls;
} mixed_t;

static void CUDA_CB count_call(void* user) { atomic_fetch_add(&((mixed_t*)user)->host_calls, 1); }
static void count_call_cgc(void* user) { atomic_fetch_add(&((mixed_t*)user)->host_calls, 1); }

static double time_mixed_cgc(mixed_t* m, unsigned units, bool check) {
  const rig_t* r = m->r;
  void* buf = (void*)(uintptr_t)m->buf;
  void* scratch = (void*)(uintptr_t)m->scratch;
  unsigned n = kWords, steps = 1;
  void* args[] = {&buf, &n, &steps};
  cgc_capture_options_t o = {.struct_size = sizeof o, .mode = CGC_CAPTURE_MODE_GLOBAL};
  cgc_graph_t g = NULL;
  CU(cuStreamSynchronize(r->cs));
  int64_t t0 = now_ns();
  CGC(cgc_capture_begin(r->s, &o));
  for (unsigned i = 0; i < units; i++) {
    CGC(cgc_memcpy_htod_async(buf, m->host_in, kWords * sizeof(uint32_t), r->s));
    CGC(cgc_memset_d32_async(scratch, i, kWords, r->s));
    CGC(cgc_launch_kernel(m->lcg, 1, 1, 1, kWords, 1, 1, 0, r->s, args));
    CGC(cgc_launch_host_func(r->s, count_call_cgc, m, NULL));
    CGC(cgc_memcpy_dtoh_async(m->host_out, buf, kWords * sizeof(uint32_t), r->s));
  }
  CGC(cgc_capture_end(r->s, &g));
  int64_t t1 = now_ns();
  if (check) {
    cgc_graph_info_t info = {.struct_size = sizeof info};
    CGC(cgc_graph_info(g, &info));
    if (info.memcpy_nodes != 2u * units || info.memset_nodes != units || info.kernel_nodes != units ||
        info.host_nodes != units) {
      fprintf(stderr, "mixed capture: cgc_graph_info counts %zu copies, %zu sets, %zu kernels, %zu host nodes for %u units\n",
              info.memcpy_nodes, info.memset_nodes, info.kernel_nodes, info.host_nodes, units);
      bench_failed_checks++;
    }
    CGC(cgc_graph_launch(g, r->s));
  }
  CGC(cgc_graph_destroy(g)); /* waits for that replay (the graph holds host functions) */
  return (double)(t1 - t0) / 1e3;
}

static double time_mixed_raw(mixed_t* m, unsigned units, bool check) {
  const rig_t* r = m->r;
  CUdeviceptr buf = m->buf;
  unsigned n = kWords, steps = 1;
  void* args[] = {&buf, &n, &steps};
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  CU(cuStreamSynchronize(r->cs));
  int64_t t0 = now_ns();
  CU(cuStreamBeginCapture(r->cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (unsigned i = 0; i < units; i++) {
    CU(cuMemcpyHtoDAsync(buf, m->host_in, kWords * sizeof(uint32_t), r->cs));
    CU(cuMemsetD32Async(m->scratch, i, kWords, r->cs));
    CU(cuLaunchKernel(r->k_lcg, 1, 1, 1, kWords, 1, 1, 0, r->cs, args, NULL));
    CU(cuLaunchHostFunc(r->cs, count_call, m));
    CU(cuMemcpyDtoHAsync(m->host_out, buf, kWords * sizeof(uint32_t), r->cs));
  }
  CU(cuStreamEndCapture(r->cs, &graph));
  CU(cuGraphInstantiateWithFlags(
      &exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
  int64_t t1 = now_ns();
  if (check) CU(cuGraphLaunch(exec, r->cs));
  CU(cuStreamSynchronize(r->cs));
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  return (double)(t1 - t0) / 1e3;
}

/* After one checked replay of `units` units the host function ran `units` times (the output is
 * checked by the caller against the LCG model: host_in advanced one step). */
static void check_host_calls(mixed_t* m, unsigned units, const char* side) {
  CU(cuStreamSynchronize(m->r->cs));
  int calls = atomic_exchange(&m->host_calls, 0);
  if (calls != (int)units) {
    fprintf(stderr, "mixed capture (%s): the host function ran %d times in one replay, want %u\n", side, calls, units);
    bench_failed_checks++;
  }
}

void scenario_mixed(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  static const unsigned quick[] = {2, 20, 200, 2000};
  static const unsigned full[] = {2, 20, 200, 600, 2000, 6000};
  const unsigned* sizes = o->full ? full : quick;
  size_t n_sizes = o->full ? sizeof full / sizeof *full : sizeof quick / sizeof *quick;

  print_title("7. Capture + instantiate of a mixed graph (copy in, set, kernel, host function, copy out per unit), us "
              "(ratio = cgc / raw; target <= 1.05)");
  print_columns("cgc", "raw", "ratio");
  jopen(j, "mixed_capture", '{');
  jstr(j, "unit", "us per capture+instantiate (host)");
  jnum(j, "target_ratio", 1.05);
  jopen(j, "rows", '[');

  mixed_t m = {.r = r};
  atomic_init(&m.host_calls, 0);
  CGC(cgc_module_load(r->ctx, cgc_bench_kernels_fatbin, &m.module));
  CGC(cgc_module_get_function(m.module, "cgc_bench_lcg", &m.lcg));
  CGC(cgc_host_alloc(r->ctx, kWords * sizeof(uint32_t), 0, (void**)&m.host_in));
  CGC(cgc_host_alloc(r->ctx, kWords * sizeof(uint32_t), 0, (void**)&m.host_out));
  random_words(m.host_in, kWords);
  m.buf = dev_alloc(kWords * sizeof(uint32_t));
  m.scratch = dev_alloc(kWords * sizeof(uint32_t));

  for (size_t i = 0; i < n_sizes; i++) {
    unsigned units = sizes[i];
    unsigned nodes = units * kNodesPerUnit;
    int reps = nodes <= 100 ? (o->full ? 200 : 40) : nodes <= 1000 ? (o->full ? 60 : 15) : (o->full ? 41 : 9);
    /* Warm-up and check: one replay of each side, whose results must be the LCG model's. */
    for (int side = 0; side < 2; side++) {
      memset(m.host_out, 0, kWords * sizeof(uint32_t));
      if (side == 0) time_mixed_cgc(&m, units, true);
      else time_mixed_raw(&m, units, true);
      check_host_calls(&m, units, side == 0 ? "cgc" : "raw");
      to_device(r, m.scratch, m.host_out, kWords * sizeof(uint32_t));
      if (!lcg_matches(r, m.scratch, m.host_in, kWords, 1))
        fprintf(stderr, "mixed capture (%s): the copied-out words are not the input advanced once\n", side == 0 ? "cgc" : "raw");
    }
    double* a = new_samples((size_t)reps);
    double* b = new_samples((size_t)reps);
    for (int rep = 0; rep < reps; rep++) {
      for (int half = 0; half < 2; half++) {
        bool cgc_turn = ((rep + half) & 1) == 0;
        if (cgc_turn) a[rep] = time_mixed_cgc(&m, units, false);
        else b[rep] = time_mixed_raw(&m, units, false);
      }
    }
    summary_t sa = summarize(a, (size_t)reps), sb = summarize(b, (size_t)reps);
    double ratio = sa.median / sb.median;
    if (!t->have_mixed || ratio > t->mixed_worst_ratio) t->mixed_worst_ratio = ratio;
    t->have_mixed = true;
    char size[32];
    size_label(size, sizeof size, nodes);
    print_row("mixed capture+inst", size, sa, sb, ratio, ratio <= 1.05 ? "target met" : "OVER TARGET");
    jopen(j, NULL, '{');
    jint(j, "nodes", nodes);
    json_row(j, "cgc", "raw", "ratio", sa, sb, ratio);
    jint(j, "reps", reps);
    jclose(j, '}');
    free(a);
    free(b);
  }
  CU(cuMemFree(m.buf));
  CU(cuMemFree(m.scratch));
  CGC(cgc_host_free(m.host_in));
  CGC(cgc_host_free(m.host_out));
  CGC(cgc_module_unload(m.module));
  jclose(j, ']');
  jclose(j, '}');
}
