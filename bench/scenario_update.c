/* Scenario 8: a graph that changes without recapture (1.2). For graphs of N tiny kernels:
 *   cgc update:     capture with cgc_capture_options_t.update = the graph (the executable is
 *                   updated in place) against cgc's destroy + capture + instantiate;
 *   raw:            the driver's capture + cuGraphExecUpdate against its capture + instantiate
 *                   (each with the captured graph's cuGraphDestroy, as cgc frees the graph it
 *                   replaces), and the update step alone against the instantiation step alone.
 * Targets (issue 14): the update step <= 0.1x instantiation, capture + update <= 0.5x capture +
 * instantiate at 1000 nodes and up. Every variant's graph is replayed once and checked. */
#include "bench/rig.h"

#include <stdio.h>
#include <stdlib.h>

/* One capture of `nodes` tiny kernels into (with update) or as a new graph; us. */
static double time_cgc(const rig_t* r, CUdeviceptr buf, unsigned nodes, cgc_graph_t* g, bool update) {
  cgc_capture_options_t o = {.struct_size = sizeof o, .mode = CGC_CAPTURE_MODE_GLOBAL, .update = update ? *g : NULL};
  CU(cuStreamSynchronize(r->cs));
  int64_t t0 = now_ns();
  if (!update) CGC(cgc_graph_destroy(*g)); /* what a recapture replaces */
  CGC(cgc_capture_begin(r->s, &o));
  for (unsigned i = 0; i < nodes; i++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
  CGC(cgc_capture_end(r->s, g));
  int64_t t1 = now_ns();
  return (double)(t1 - t0) / 1e3;
}

typedef struct raw_times {
  double total, step; /* capture + (update or instantiate), and the last step alone, us */
} raw_times_t;

static raw_times_t time_raw(const rig_t* r, CUdeviceptr buf, unsigned nodes, CUgraphExec* exec, bool update) {
  CUgraph graph = NULL;
  CU(cuStreamSynchronize(r->cs));
  int64_t t0 = now_ns();
  CU(cuStreamBeginCapture(r->cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (unsigned i = 0; i < nodes; i++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
  CU(cuStreamEndCapture(r->cs, &graph));
  int64_t t1 = now_ns();
  if (update) {
    CUgraphExecUpdateResultInfo info;
    CU(cuGraphExecUpdate(*exec, graph, &info));
  } else {
    CU(cuGraphExecDestroy(*exec));
    CU(cuGraphInstantiateWithFlags(
        exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
  }
  int64_t t2 = now_ns();
  CU(cuGraphDestroy(graph)); /* timed too: a program frees what it captured, as cgc does with the graph replaced */
  int64_t t3 = now_ns();
  return (raw_times_t){(double)(t3 - t0) / 1e3, (double)(t2 - t1) / 1e3};
}

void scenario_update(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  static const unsigned quick[] = {10, 100, 1000, 10000};
  static const unsigned full[] = {10, 100, 1000, 3000, 10000};
  const unsigned* sizes = o->full ? full : quick;
  size_t n_sizes = o->full ? sizeof full / sizeof *full : sizeof quick / sizeof *quick;
  print_title("8. A graph that changes without recapture: capture + exec update vs capture + instantiate, us "
              "(targets: update step <= 0.1x instantiate, capture + update <= 0.5x capture + instantiate from 1000 nodes)");
  printf("%-10s | %13s | %13s | %7s | %13s | %13s | %7s | %11s | %11s | %7s | %s\n", "size", "cgc update",
         "cgc recapture", "ratio", "raw update", "raw recapture", "ratio", "raw upd step", "raw inst step", "ratio",
         "note");
  jopen(j, "update", '{');
  jstr(j, "unit", "us per capture + update or capture + instantiate (host), medians");
  jopen(j, "rows", '[');

  uint32_t init[kTinyThreads];
  random_words(init, kTinyThreads);
  CUdeviceptr buf = dev_alloc(sizeof init);
  for (size_t i = 0; i < n_sizes; i++) {
    unsigned nodes = sizes[i];
    int reps = nodes <= 100 ? (o->full ? 100 : 30) : nodes <= 1000 ? (o->full ? 40 : 11) : (o->full ? 15 : 5);
    /* The graphs the variants update or replace, and one checked replay of each. */
    cgc_graph_t g_update = NULL, g_new = NULL;
    cgc_capture_options_t fresh = {.struct_size = sizeof fresh};
    CGC(cgc_capture_begin(r->s, &fresh));
    for (unsigned k = 0; k < nodes; k++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
    CGC(cgc_capture_end(r->s, &g_update));
    CGC(cgc_capture_begin(r->s, &fresh));
    for (unsigned k = 0; k < nodes; k++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
    CGC(cgc_capture_end(r->s, &g_new));
    CUgraphExec exec_update = NULL, exec_new = NULL;
    for (int k = 0; k < 2; k++) {
      CUgraph graph = NULL;
      CU(cuStreamBeginCapture(r->cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
      for (unsigned n = 0; n < nodes; n++) CU_OK(launch_lcg(r, r->cs, buf, kTinyThreads, 1));
      CU(cuStreamEndCapture(r->cs, &graph));
      CU(cuGraphInstantiateWithFlags(k == 0 ? &exec_update : &exec_new, graph,
                                     CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                         CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
      CU(cuGraphDestroy(graph));
    }
    double* a = new_samples((size_t)reps);
    double* b = new_samples((size_t)reps);
    double* c = new_samples((size_t)reps);
    double* d = new_samples((size_t)reps);
    double* e = new_samples((size_t)reps);
    double* f = new_samples((size_t)reps);
    for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up, untimed */
      double ta = time_cgc(r, buf, nodes, &g_update, true);
      double tb = time_cgc(r, buf, nodes, &g_new, false);
      raw_times_t tc = time_raw(r, buf, nodes, &exec_update, true);
      raw_times_t td = time_raw(r, buf, nodes, &exec_new, false);
      if (rep < 0) continue;
      a[rep] = ta;
      b[rep] = tb;
      c[rep] = tc.total;
      d[rep] = td.total;
      e[rep] = tc.step;
      f[rep] = td.step;
    }
    /* The updated graph must still be in place and run right: one replay, checked. */
    cgc_graph_info_t info = {.struct_size = sizeof info};
    CGC(cgc_graph_info(g_update, &info));
    if (info.last_update != CGC_GRAPH_UPDATE_IN_PLACE) {
      fprintf(stderr, "update scenario: the graph was not updated in place (last_update %d, result %d)\n",
              (int)info.last_update, info.last_update_result);
      bench_failed_checks++;
    }
    to_device(r, buf, init, sizeof init);
    CGC(cgc_graph_launch(g_update, r->s));
    lcg_matches(r, buf, init, kTinyThreads, nodes);
    summary_t sa = summarize(a, (size_t)reps), sb = summarize(b, (size_t)reps), sc = summarize(c, (size_t)reps),
              sd = summarize(d, (size_t)reps), se = summarize(e, (size_t)reps), sf = summarize(f, (size_t)reps);
    double cgc_ratio = sa.median / sb.median, raw_ratio = sc.median / sd.median, step_ratio = se.median / sf.median;
    bool ok = step_ratio <= 0.1 && (nodes < 1000 || cgc_ratio <= 0.5);
    if (nodes >= 1000) {
      if (!t->have_update || cgc_ratio > t->update_worst_ratio) t->update_worst_ratio = cgc_ratio;
      t->have_update = true;
    }
    if (!t->have_update_step || step_ratio > t->update_step_worst_ratio) t->update_step_worst_ratio = step_ratio;
    t->have_update_step = true;
    char size[32];
    size_label(size, sizeof size, nodes);
    printf("%-10s | %13.1f | %13.1f | %7.3f | %13.1f | %13.1f | %7.3f | %11.1f | %11.1f | %7.3f | %s\n", size,
           sa.median, sb.median, cgc_ratio, sc.median, sd.median, raw_ratio, se.median, sf.median, step_ratio,
           ok ? "targets met" : "OVER TARGET");
    jopen(j, NULL, '{');
    jint(j, "nodes", nodes);
    jnum(j, "cgc_update_us", sa.median);
    jnum(j, "cgc_recapture_us", sb.median);
    jnum(j, "cgc_ratio", cgc_ratio);
    jnum(j, "raw_update_us", sc.median);
    jnum(j, "raw_recapture_us", sd.median);
    jnum(j, "raw_ratio", raw_ratio);
    jnum(j, "raw_update_step_us", se.median);
    jnum(j, "raw_instantiate_step_us", sf.median);
    jnum(j, "step_ratio", step_ratio);
    jint(j, "reps", reps);
    jclose(j, '}');
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    free(f);
    CGC(cgc_graph_destroy(g_update));
    CGC(cgc_graph_destroy(g_new));
    CU(cuGraphExecDestroy(exec_update));
    CU(cuGraphExecDestroy(exec_new));
  }
  CU(cuMemFree(buf));
  jclose(j, ']');
  jclose(j, '}');
}
