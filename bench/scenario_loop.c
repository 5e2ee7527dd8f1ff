/* Scenario 9: a loop on the device (1.2). K iterations of a small body (three tiny kernels):
 *   one launch of a graph holding a WHILE conditional node around the body (the loop's counter
 *   and condition on the device), against K launches of a graph of the body, against the body's
 *   kernels launched eagerly K times.
 * Host time per iteration ("per token") is the launch calls' time; GPU time is measured with
 * timing events around the work. Targets (issue 14): host time per token <= 0.1x the K
 * launches' at K = 64, GPU time no worse than the K launches'. Every variant's result is checked
 * (the LCG words advanced 3K steps). */
#include "bench/rig.h"

#include <stdio.h>
#include <stdlib.h>

enum { kBodyKernels = 3 };

typedef struct loop {
  const rig_t* r;
  CUfunction init, step;
  CUdeviceptr buf;   /* kTinyThreads LCG words */
  CUdeviceptr words; /* counter, condition */
  cgc_event_t start, end;
} loop_t;

static void body_kernels(const loop_t* l, CUstream s) {
  for (int k = 0; k < kBodyKernels; k++) CU_OK(launch_lcg(l->r, s, l->buf, kTinyThreads, 1));
}

static cgc_graph_t capture_while(const loop_t* l, unsigned iterations) {
  const rig_t* r = l->r;
  CUdeviceptr counter = l->words, more = l->words + 4;
  void* init_args[] = {&counter, &more};
  void* step_args[] = {&counter, &iterations, &more};
  cgc_graph_t g = NULL;
  cgc_stream_t body = NULL;
  CGC(cgc_capture_begin(r->s, NULL));
  CU(cuLaunchKernel(l->init, 1, 1, 1, 1, 1, 1, 0, r->cs, init_args, NULL));
  CGC(cgc_capture_conditional_begin(r->s, CGC_CONDITIONAL_WHILE, (const uint32_t*)(uintptr_t)more, &body));
  CUstream bs = (CUstream)cgc_stream_native(body);
  body_kernels(l, bs);
  CU(cuLaunchKernel(l->step, 1, 1, 1, 1, 1, 1, 0, bs, step_args, NULL));
  CGC(cgc_capture_conditional_end(body));
  CGC(cgc_capture_end(r->s, &g));
  CGC(cgc_graph_upload(g, r->s));
  return g;
}

static cgc_graph_t capture_body(const loop_t* l) {
  cgc_graph_t g = NULL;
  CGC(cgc_capture_begin(l->r->s, NULL));
  body_kernels(l, l->r->cs);
  CGC(cgc_capture_end(l->r->s, &g));
  CGC(cgc_graph_upload(g, l->r->s));
  return g;
}

typedef enum variant { WHILE_GRAPH, BODY_GRAPHS, EAGER } variant_t;

/* One run of K iterations: the host time of the launch calls and the GPU time, us. */
static void run(const loop_t* l, variant_t v, unsigned k, cgc_graph_t g, double* host_us, double* gpu_us) {
  const rig_t* r = l->r;
  CGC(cgc_event_record(l->start, r->s));
  int64_t t0 = now_ns();
  if (v == WHILE_GRAPH) {
    CGC(cgc_graph_launch(g, r->s));
  } else if (v == BODY_GRAPHS) {
    for (unsigned i = 0; i < k; i++) CGC(cgc_graph_launch(g, r->s));
  } else {
    for (unsigned i = 0; i < k; i++) body_kernels(l, r->cs);
  }
  int64_t t1 = now_ns();
  CGC(cgc_event_record(l->end, r->s));
  CGC(cgc_event_synchronize(l->end));
  float ms = 0;
  CGC(cgc_event_elapsed_ms(l->start, l->end, &ms));
  *host_us = (double)(t1 - t0) / 1e3;
  *gpu_us = ms * 1e3;
}

void scenario_loop(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  static const unsigned sizes[] = {8, 64, 512};
  print_title("9. A loop on the device: one launch of a WHILE graph vs K launches of the body's graph vs eager, "
              "per iteration (targets at K = 64: host <= 0.1x the K launches, GPU no worse)");
  printf("%-6s | %12s | %12s | %12s | %7s | %12s | %12s | %12s | %7s | %s\n", "K", "while host", "K graphs host",
         "eager host", "ratio", "while GPU", "K graphs GPU", "eager GPU", "ratio", "note");
  jopen(j, "device_loop", '{');
  jstr(j, "unit", "us per iteration (medians); host: launch calls, GPU: timing events");
  jopen(j, "rows", '[');
  loop_t l = {.r = r};
  CU(cuModuleGetFunction(&l.init, r->module, "cgc_bench_loop_init"));
  CU(cuModuleGetFunction(&l.step, r->module, "cgc_bench_loop_step"));
  l.buf = dev_alloc(kTinyThreads * sizeof(uint32_t));
  l.words = dev_alloc(64);
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &l.start));
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &l.end));
  uint32_t init[kTinyThreads];
  random_words(init, kTinyThreads);
  cgc_graph_t body = capture_body(&l);
  int reps = o->full ? 40 : 15;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    unsigned k = sizes[i];
    cgc_graph_t loop = capture_while(&l, k);
    double* host[3];
    double* gpu[3];
    for (int v = 0; v < 3; v++) {
      host[v] = new_samples((size_t)reps);
      gpu[v] = new_samples((size_t)reps);
    }
    for (int v = 0; v < 3; v++) { /* each variant checked once: 3K LCG steps */
      to_device(r, l.buf, init, sizeof init);
      double h, g;
      run(&l, (variant_t)v, k, v == WHILE_GRAPH ? loop : body, &h, &g);
      lcg_matches(r, l.buf, init, kTinyThreads, (uint64_t)kBodyKernels * k);
    }
    for (int rep = 0; rep < reps; rep++)
      for (int v = 0; v < 3; v++) run(&l, (variant_t)v, k, v == WHILE_GRAPH ? loop : body, &host[v][rep], &gpu[v][rep]);
    summary_t hs[3], gs[3];
    for (int v = 0; v < 3; v++) {
      hs[v] = summarize(host[v], (size_t)reps);
      gs[v] = summarize(gpu[v], (size_t)reps);
    }
    double host_ratio = hs[WHILE_GRAPH].median / hs[BODY_GRAPHS].median;
    double gpu_ratio = gs[WHILE_GRAPH].median / gs[BODY_GRAPHS].median;
    bool ok = k != 64 || (host_ratio <= 0.1 && gpu_ratio <= 1.0);
    if (k == 64) {
      t->have_loop = true;
      t->loop_host_ratio = host_ratio;
      t->loop_gpu_ratio = gpu_ratio;
    }
    printf("%-6u | %12.3f | %12.3f | %12.3f | %7.3f | %12.3f | %12.3f | %12.3f | %7.3f | %s\n", k,
           hs[WHILE_GRAPH].median / k, hs[BODY_GRAPHS].median / k, hs[EAGER].median / k, host_ratio,
           gs[WHILE_GRAPH].median / k, gs[BODY_GRAPHS].median / k, gs[EAGER].median / k, gpu_ratio,
           k == 64 ? (ok ? "targets met" : "OVER TARGET") : "");
    jopen(j, NULL, '{');
    jint(j, "iterations", k);
    jnum(j, "while_host_us_per_iteration", hs[WHILE_GRAPH].median / k);
    jnum(j, "graphs_host_us_per_iteration", hs[BODY_GRAPHS].median / k);
    jnum(j, "eager_host_us_per_iteration", hs[EAGER].median / k);
    jnum(j, "while_gpu_us_per_iteration", gs[WHILE_GRAPH].median / k);
    jnum(j, "graphs_gpu_us_per_iteration", gs[BODY_GRAPHS].median / k);
    jnum(j, "eager_gpu_us_per_iteration", gs[EAGER].median / k);
    jint(j, "reps", reps);
    jclose(j, '}');
    for (int v = 0; v < 3; v++) {
      free(host[v]);
      free(gpu[v]);
    }
    CGC(cgc_graph_destroy(loop));
  }
  CGC(cgc_graph_destroy(body));
  CGC(cgc_event_destroy(l.start));
  CGC(cgc_event_destroy(l.end));
  CU(cuMemFree(l.buf));
  CU(cuMemFree(l.words));
  jclose(j, ']');
  jclose(j, '}');
}
