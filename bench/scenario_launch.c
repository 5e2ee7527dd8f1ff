/* Scenario 1: the host cost of one replay launch, cgc_graph_launch against cuGraphLaunch of
 * the same executable. */
#include "bench/rig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void scenario_launch(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
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

