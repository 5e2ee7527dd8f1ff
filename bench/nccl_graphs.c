/* nccl_bench's graphs: the same all-reduces captured through cgc and through NCCL and the driver
 * alone, each uploaded before it is timed, and the census of a graph's nodes by type (whether
 * NCCL put host or event nodes into them). */
#include <stdlib.h>
#include <string.h>

#include "bench/nccl_bench.h"

/* A graph of `reps` all-reduces through cgc. ThreadLocal: in --threads the other ranks' threads
 * keep making calls (synchronisations, instantiations) that a Global capture would count against
 * this one. Uploaded, so that its first replay costs what the others do. */
cgc_graph_t capture_cgc(rank_t* r, size_t count, int reps) {
  cgc_capture_options_t opts = {.struct_size = sizeof opts, .mode = CGC_CAPTURE_MODE_THREAD_LOCAL};
  cgc_graph_t g = NULL;
  CGC(cgc_capture_begin(r->stream, &opts));
  for (int i = 0; i < reps; i++)
    CGC(cgc_all_reduce(r->comm, r->send, r->recv, count, CGC_FLOAT32, CGC_SUM, r->stream));
  CGC(cgc_capture_end(r->stream, &g));
  CGC(cgc_graph_upload(g, r->stream));
  CGC(cgc_stream_synchronize(r->stream));
  return g;
}

/* The same graph made with NCCL and the driver alone. Instantiated with AutoFreeOnLaunch, as cgc
 * instantiates every graph, so both executables are made alike. The capture is ended whatever
 * NCCL said, and NCCL's own error is the one reported. */
void capture_raw(rank_t* r, size_t count, int reps, op_t* op) {
  CU(cuStreamBeginCapture(r->raw_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  int nr = 0;
  for (int i = 0; i < reps && nr == 0; i++)
    nr = raw_nccl.ncclAllReduce(r->raw_send, r->raw_recv, count, kNcclFloat32, kNcclSum, r->raw_comm, r->raw_stream);
  CUresult ended = drv.cuStreamEndCapture(r->raw_stream, &op->raw_graph);
  if (nr != 0) fail_nccl("ncclAllReduce (captured)", nr);
  if (ended != CUDA_SUCCESS) fail_cu("cuStreamEndCapture(raw_stream)", ended);
  CU(cuGraphInstantiateWithFlags(&op->raw_exec, op->raw_graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  CU(cuGraphUpload(op->raw_exec, r->raw_stream));
  CU(cuStreamSynchronize(r->raw_stream));
}

/* Counts `g`'s nodes by type. */
void take_census(CUgraph g, census_t* c) {
  size_t n = 0;
  CU(cuGraphGetNodes(g, NULL, &n));
  CUgraphNode* nodes = xmalloc(n * sizeof *nodes);
  CU(cuGraphGetNodes(g, nodes, &n));
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < n; i++) {
    CUgraphNodeType type;
    CU(cuGraphNodeGetType(nodes[i], &type));
    c->nodes[(unsigned)type < kNodeTypes ? (int)type : kNodeTypes]++;
  }
  c->taken = true;
  free(nodes);
}
