/* Scenario 6: fork/join capture over 4 streams against the same work serialised on one stream. */
#include "bench/rig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void scenario_multistream(const rig_t* r, const opts_t* o, json_t* j, targets_t* t) {
  (void)t; /* no target to tally */
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

