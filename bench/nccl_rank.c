/* nccl_bench's rank: what one rank does from start to end, on its own GPU, in a thread or a
 * process of its own: both sides' context, streams, events and communicators, then every kind
 * of buffer and every size, each size's variants in their order (eager first), the breakdown and
 * the census, then the teardown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/nccl_bench.h"

/* All variants at one size, then the breakdown where the size has one, then the census. */
static void measure_size(rank_t* r, int kind, int s) {
  size_t bytes = kSizeBytes[s], count = bytes / sizeof(float);
  size_result_t* res = &sh->kind[kind].size[s];
  int n = r->raw_on ? 2 : 1; /* the same on every rank: the same NCCL everywhere */
  int it1 = iters_one(bytes), it100 = iters_hundred(bytes);
  if (r->rank == 0) {
    res->measured = true;
    res->iters_one = it1;
    res->iters_hundred = it100;
  }
  /* Eager first: NCCL connects lazily at the first use of a size's algorithm and protocol, which
   * a capture must not be the one to see. */
  op_t eager1[2] = {{.kind = OP_EAGER, .reps = 1}, {.kind = OP_RAW_EAGER, .reps = 1}};
  run_variant(r, eager1, n, count, kWarmupOne, it1, res->one, NULL, res->wrong[PHASE_ONE], "eager-1");

  op_t graph1[2] = {{.kind = OP_GRAPH, .reps = 1}, {.kind = OP_RAW_GRAPH, .reps = 1}};
  op_t graph100[2] = {{.kind = OP_GRAPH, .reps = kHundred}, {.kind = OP_RAW_GRAPH, .reps = kHundred}};
  graph1[0].graph = capture_cgc(r, count, 1);
  graph100[0].graph = capture_cgc(r, count, kHundred);
  if (r->raw_on) {
    capture_raw(r, count, 1, &graph1[1]);
    capture_raw(r, count, kHundred, &graph100[1]);
  }
  run_variant(r, graph1, n, count, kWarmupOne, it1, res->one, NULL, res->wrong[PHASE_ONE], "graph-1");

  op_t eager100[2] = {{.kind = OP_EAGER, .reps = kHundred}, {.kind = OP_RAW_EAGER, .reps = kHundred}};
  run_variant(r, eager100, n, count, kWarmupHundred, it100, res->hundred, res->hundred_gpu,
              res->wrong[PHASE_HUNDRED], "eager-100");
  run_variant(r, graph100, n, count, kWarmupHundred, it100, res->hundred, res->hundred_gpu,
              res->wrong[PHASE_HUNDRED], "graph-100");

  if (breakdown_size(bytes)) {
    /* Eager and graph apart: they write the same results, and each is checked on its own. */
    clear_results(r, eager1, n, count);
    time_breakdown(r, eager1, n, count, kWarmupOne, it1, res->breakdown);
    check_results(r, eager1, n, count, res->wrong[PHASE_BREAKDOWN], "breakdown, eager");
    clear_results(r, graph1, n, count);
    time_breakdown(r, graph1, n, count, kWarmupOne, it1, res->breakdown);
    check_results(r, graph1, n, count, res->wrong[PHASE_BREAKDOWN], "breakdown, graph");
    if (r->rank == 0) res->has_breakdown = true;
  }

  if (r->rank == 0) {
    take_census((CUgraph)cgc_graph_native(graph1[0].graph), &res->census[G_CGC_1]);
    take_census((CUgraph)cgc_graph_native(graph100[0].graph), &res->census[G_CGC_100]);
    if (r->raw_on) {
      take_census(graph1[1].raw_graph, &res->census[G_RAW_1]);
      take_census(graph100[1].raw_graph, &res->census[G_RAW_100]);
    }
  }
  CGC(cgc_graph_destroy(graph1[0].graph));
  CGC(cgc_graph_destroy(graph100[0].graph));
  if (r->raw_on) {
    for (int g = 0; g < 2; g++) {
      op_t* op = g == 0 ? &graph1[1] : &graph100[1];
      CU(cuGraphExecDestroy(op->raw_exec));
      CU(cuGraphDestroy(op->raw_graph));
    }
  }
}

/* One rank from start to end: its device, both sides' communicators, every kind and size. */
void run_rank(int rank) {
  rank_t rr;
  memset(&rr, 0, sizeof rr);
  rank_t* r = &rr;
  r->rank = rank;
  CGC(cgc_context_create(rank, &r->ctx));
  CUcontext primary;
  CU(cuDeviceGet(&r->dev, rank));
  CU(cuDevicePrimaryCtxRetain(&primary, r->dev));
  CU(cuCtxPushCurrent(primary)); /* for the driver's and raw NCCL's calls of this thread */
  CGC(cgc_stream_create(r->ctx, CGC_STREAM_NON_BLOCKING, 0, &r->stream));
  r->stream_native = (CUstream)cgc_stream_native(r->stream);
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &r->start));
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &r->end));
  CU(cuStreamCreate(&r->raw_stream, CU_STREAM_NON_BLOCKING));
  CU(cuEventCreate(&r->raw_start, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&r->raw_end, CU_EVENT_DEFAULT));

  if (rank == 0) {
    CGC(cgc_comm_unique_id(&sh->id));
    NCCL(ncclGetUniqueId(&sh->raw_id));
  }
  barrier(); /* the ids are published */
  CGC(cgc_comm_create(r->ctx, cfg.ranks, &sh->id, rank, &r->comm));
  NCCL(ncclCommInitRank(&r->raw_comm, cfg.ranks, sh->raw_id, rank));

  int most = 0;
  for (int s = 0; s < kSizes; s++) {
    if (!size_wanted(s)) continue;
    if (iters_one(kSizeBytes[s]) > most) most = iters_one(kSizeBytes[s]);
    if (iters_hundred(kSizeBytes[s]) > most) most = iters_hundred(kSizeBytes[s]);
  }
  for (int i = 0; i < 8; i++) r->samples[i] = new_samples((size_t)most);

  for (int kind = 0; kind < kKinds; kind++) {
    if (rank == 0) fprintf(stderr, "nccl_bench: %s buffers...\n", kKindName[kind]);
    setup_kind(r, kind);
    for (int s = 0; s < kSizes; s++)
      if (size_wanted(s)) measure_size(r, kind, s);
    teardown_kind(r, kind);
  }

  for (int i = 0; i < 8; i++) free(r->samples[i]);
  barrier(); /* nobody's collectives are outstanding */
  NCCL(ncclCommDestroy(r->raw_comm));
  CGC(cgc_comm_destroy(r->comm));
  CU(cuEventDestroy(r->raw_start));
  CU(cuEventDestroy(r->raw_end));
  CU(cuStreamDestroy(r->raw_stream));
  CGC(cgc_event_destroy(r->start));
  CGC(cgc_event_destroy(r->end));
  CGC(cgc_stream_destroy(r->stream));
  CGC(cgc_context_destroy(r->ctx));
  CUcontext popped;
  CU(cuCtxPopCurrent(&popped));
  CU(cuDevicePrimaryCtxRelease(r->dev));
}
