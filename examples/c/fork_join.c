/* A fork/join capture with a shared pool, in C with nothing but capi/cgc.h.
 *
 * Graph 1: the origin stream draws uniform numbers into x and forks two side streams; one draws
 * normal numbers into y, the other uniform numbers into z; both join back. Graph 2 shares graph
 * 1's private pool (torch's `pool=g1.pool()`) and draws normal numbers into w. Both replay a few
 * times; every replay draws fresh numbers. The buffers are allocated inside the captures, so
 * they come from the pool and stay valid as the graphs' outputs.
 *
 *   bazel run //examples:fork_join      (on a machine without a GPU it says why and exits 1)
 */
#include <stdio.h>

#include "capi/cgc.h"

#define CHECK(call)                                                                            \
  do {                                                                                         \
    cgc_status_t st_ = (call);                                                                 \
    if (st_ != CGC_SUCCESS) {                                                                  \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, cgc_status_string(st_), cgc_last_error()); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

enum { kCount = 1 << 16, kReplays = 3 };
#define BYTES (kCount * sizeof(float))

int main(void) {
  int devices = 0;
  cgc_status_t st = cgc_device_count(&devices);
  if (st != CGC_SUCCESS || devices == 0) {
    printf("cgc fork/join example: no GPU here (%s)\n  %s\n", cgc_status_string(st), cgc_last_error());
    return 1;
  }
  cgc_context_t ctx;
  cgc_stream_t origin, side1, side2;
  cgc_event_t fork, join1, join2;
  cgc_rng_t gen;
  CHECK(cgc_context_create(0, &ctx));
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &origin));
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side1));
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side2));
  CHECK(cgc_event_create(ctx, 0, &fork));
  CHECK(cgc_event_create(ctx, 0, &join1));
  CHECK(cgc_event_create(ctx, 0, &join2));
  CHECK(cgc_rng_create(ctx, 1234, &gen));

  float *x, *y, *z, *w;
  cgc_graph_t g1, g2;
  CHECK(cgc_capture_begin(origin, NULL)); /* Global mode, a new private pool */
  CHECK(cgc_malloc(ctx, BYTES, origin, (void**)&x));
  CHECK(cgc_rng_uniform(gen, x, kCount, origin));
  CHECK(cgc_event_record(fork, origin)); /* fork: the side streams join the capture */
  CHECK(cgc_stream_wait_event(side1, fork));
  CHECK(cgc_stream_wait_event(side2, fork));
  CHECK(cgc_malloc(ctx, BYTES, side1, (void**)&y));
  CHECK(cgc_rng_normal(gen, y, kCount, 0.0f, 1.0f, side1));
  CHECK(cgc_malloc(ctx, BYTES, side2, (void**)&z));
  CHECK(cgc_rng_uniform(gen, z, kCount, side2));
  CHECK(cgc_event_record(join1, side1)); /* join: without it capture_end names side1 */
  CHECK(cgc_event_record(join2, side2));
  CHECK(cgc_stream_wait_event(origin, join1));
  CHECK(cgc_stream_wait_event(origin, join2));
  CHECK(cgc_capture_end(origin, &g1));

  cgc_capture_options_t shared = {.struct_size = sizeof shared, .mode = CGC_CAPTURE_MODE_GLOBAL};
  CHECK(cgc_graph_pool(g1, &shared.pool)); /* like torch.cuda.graph(g2, pool=g1.pool()) */
  CHECK(cgc_capture_begin(origin, &shared));
  CHECK(cgc_malloc(ctx, BYTES, origin, (void**)&w));
  CHECK(cgc_rng_normal(gen, w, kCount, 0.0f, 1.0f, origin));
  CHECK(cgc_capture_end(origin, &g2));

  for (int i = 0; i < kReplays; i++) { /* graphs sharing a pool replay in capture order */
    CHECK(cgc_graph_launch(g1, origin));
    CHECK(cgc_graph_launch(g2, origin));
  }
  CHECK(cgc_stream_synchronize(origin));

  cgc_graph_info_t i1 = {.struct_size = sizeof i1}, i2 = {.struct_size = sizeof i2}; /* fields are appended: name the one set */
  cgc_pool_t p2;
  cgc_memory_stats_t pool_stats = {sizeof pool_stats, 0, 0, 0, 0, 0, 0};
  CHECK(cgc_graph_info(g1, &i1));
  CHECK(cgc_graph_info(g2, &i2));
  CHECK(cgc_graph_pool(g2, &p2));
  CHECK(cgc_memory_stats(ctx, shared.pool, &pool_stats));
  printf("graph 1: %zu nodes over 3 streams, replayed %llu times\n", i1.node_count,
         (unsigned long long)i1.replay_count);
  printf("graph 2: %zu nodes, replayed %llu times\n", i2.node_count, (unsigned long long)i2.replay_count);
  printf("shared pool: %zu bytes reserved; pool shared: %s\n", pool_stats.bytes_reserved,
         p2 == shared.pool ? "yes" : "NO");

  /* The outputs outlive the graphs; free them, then everything else. */
  CHECK(cgc_graph_destroy(g2));
  CHECK(cgc_graph_destroy(g1));
  CHECK(cgc_free(x));
  CHECK(cgc_free(y));
  CHECK(cgc_free(z));
  CHECK(cgc_free(w));
  CHECK(cgc_rng_destroy(gen));
  CHECK(cgc_event_destroy(fork));
  CHECK(cgc_event_destroy(join1));
  CHECK(cgc_event_destroy(join2));
  CHECK(cgc_stream_destroy(side1));
  CHECK(cgc_stream_destroy(side2));
  CHECK(cgc_stream_destroy(origin));
  CHECK(cgc_context_destroy(ctx));
  return p2 == shared.pool ? 0 : 1;
}
