/* Scenario 2: a replay and a stream synchronisation against eager launches of the same kernels:
 * the speedup a user gets from a graph. */
#include "bench/rig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void scenario_replay(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  (void)t; /* no target to tally */
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

