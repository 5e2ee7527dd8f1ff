/* The work a graph is made of, in C with nothing but capi/cgc.h and libcgc.so.1.
 *
 * Loads the examples' own kernel (examples/kernels/scale_add.ptx), copies the input in, and
 * captures one graph on two streams with a fork/join:
 *   origin: set flag = 0, copy the per-replay parameters in from page-locked host memory,
 *           fork ->
 *   side:   kernel out = in * params[0] + params[1], write flag = 1 (a stream memory operation),
 *           join ->
 *   origin: wait until flag == 1, copy out to page-locked host memory, host function (counts
 *           replays).
 * Then replays it three times with new parameters written into host memory between replays
 * (no recapture), checking every output on the host, and prints the graph's nodes by kind.
 *
 *   bazel run //examples:graph_work [-- path/to/scale_add.ptx]
 * (on a machine without a GPU it says why and exits 1)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "capi/cgc.h"

#define CHECK(call)                                                                            \
  do {                                                                                         \
    cgc_status_t st_ = (call);                                                                 \
    if (st_ != CGC_SUCCESS) {                                                                  \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, cgc_status_string(st_), cgc_last_error()); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

enum { kCount = 4096, kReplays = 3, kBlock = 256 };

/* The host function of the graph: runs at every replay, on a driver thread. */
static void count_replay(void* user) { ++*(int*)user; }

/* Reads the PTX text (NUL-terminated, as cgc_module_load wants it). */
static char* read_text(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = size >= 0 ? malloc((size_t)size + 1) : NULL;
  if (text != NULL && fread(text, 1, (size_t)size, f) != (size_t)size) {
    free(text);
    text = NULL;
  }
  if (text != NULL) text[size] = '\0';
  fclose(f);
  return text;
}

int main(int argc, char** argv) {
  int devices = 0;
  cgc_status_t st = cgc_device_count(&devices);
  if (st != CGC_SUCCESS || devices == 0) {
    printf("cgc graph-work example: no GPU here (%s)\n  %s\n", cgc_status_string(st), cgc_last_error());
    return 1;
  }
  const char* ptx_path = argc > 1 ? argv[1] : "examples/kernels/scale_add.ptx";
  char* ptx = read_text(ptx_path);
  if (ptx == NULL) {
    fprintf(stderr, "cannot read the kernel's PTX at '%s'\n", ptx_path);
    return 1;
  }

  cgc_context_t ctx;
  cgc_stream_t origin, side;
  cgc_event_t fork, join;
  cgc_module_t module;
  cgc_function_t scale_add;
  CHECK(cgc_context_create(0, &ctx));
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &origin));
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  CHECK(cgc_event_create(ctx, 0, &fork));
  CHECK(cgc_event_create(ctx, 0, &join));
  CHECK(cgc_module_load(ctx, ptx, &module));
  free(ptx);
  CHECK(cgc_module_get_function(module, "scale_add", &scale_add));

  /* Page-locked host memory: what a captured copy reads or writes at every replay. */
  float *host_in, *host_out, *host_params;
  CHECK(cgc_host_alloc(ctx, kCount * sizeof(float), 0, (void**)&host_in));
  CHECK(cgc_host_alloc(ctx, kCount * sizeof(float), 0, (void**)&host_out));
  CHECK(cgc_host_alloc(ctx, 2 * sizeof(float), 0, (void**)&host_params));
  for (int i = 0; i < kCount; i++) host_in[i] = (float)(i % 97) * 0.25f;

  float *in, *out, *params;
  uint32_t* flag;
  CHECK(cgc_malloc(ctx, kCount * sizeof(float), origin, (void**)&in));
  CHECK(cgc_malloc(ctx, kCount * sizeof(float), origin, (void**)&out));
  CHECK(cgc_malloc(ctx, 2 * sizeof(float), origin, (void**)&params));
  CHECK(cgc_malloc(ctx, sizeof(uint32_t), origin, (void**)&flag));
  CHECK(cgc_memcpy_htod_async(in, host_in, kCount * sizeof(float), origin));
  CHECK(cgc_stream_synchronize(origin));
  /* `in`, `out`, `params` and `flag` are used on the side stream too. */
  CHECK(cgc_record_stream(in, side));
  CHECK(cgc_record_stream(out, side));
  CHECK(cgc_record_stream(params, side));
  CHECK(cgc_record_stream(flag, side));

  int replays_seen = 0;
  unsigned n = kCount;
  void* args[] = {&out, &in, &params, &n};
  cgc_graph_t graph;
  CHECK(cgc_capture_begin(origin, NULL));
  CHECK(cgc_memset_d32_async(flag, 0, 1, origin));
  CHECK(cgc_memcpy_htod_async(params, host_params, 2 * sizeof(float), origin));
  CHECK(cgc_event_record(fork, origin));
  CHECK(cgc_stream_wait_event(side, fork)); /* fork: the side stream joins the capture */
  CHECK(cgc_launch_kernel(scale_add, (kCount + kBlock - 1) / kBlock, 1, 1, kBlock, 1, 1, 0, side, args));
  CHECK(cgc_stream_write_value32(side, flag, 1, 0));
  CHECK(cgc_event_record(join, side));
  CHECK(cgc_stream_wait_event(origin, join)); /* join */
  CHECK(cgc_stream_wait_value32(origin, flag, 1, CGC_WAIT_EQ));
  CHECK(cgc_memcpy_dtoh_async(host_out, out, kCount * sizeof(float), origin));
  CHECK(cgc_launch_host_func(origin, count_replay, &replays_seen, NULL));
  CHECK(cgc_capture_end(origin, &graph));

  int failures = 0;
  for (int r = 1; r <= kReplays; r++) {
    host_params[0] = (float)r; /* per-replay parameters: written on the host, copied in by the graph */
    host_params[1] = 10.0f * (float)r;
    CHECK(cgc_graph_launch(graph, origin));
    CHECK(cgc_stream_synchronize(origin));
    for (int i = 0; i < kCount; i++) {
      float want = host_in[i] * (float)r + 10.0f * (float)r;
      if (fabsf(host_out[i] - want) > 1e-4f * fabsf(want) + 1e-6f) {
        if (failures++ < 5) fprintf(stderr, "replay %d: out[%d] = %g, want %g\n", r, i, host_out[i], want);
      }
    }
    printf("replay %d: scale %g, shift %g: out[1] = %g, host function ran %d time(s)\n", r, host_params[0],
           host_params[1], host_out[1], replays_seen);
  }
  cgc_graph_info_t info = {.struct_size = sizeof info};
  CHECK(cgc_graph_info(graph, &info));
  printf("graph: %zu nodes: %zu kernel, %zu copies, %zu set, %zu host, %zu memory operations, %zu event\n",
         info.node_count, info.kernel_nodes, info.memcpy_nodes, info.memset_nodes, info.host_nodes, info.mem_op_nodes,
         info.event_record_nodes + info.event_wait_nodes);
  if (replays_seen != kReplays) {
    fprintf(stderr, "the host function ran %d times, want %d\n", replays_seen, kReplays);
    failures++;
  }

  CHECK(cgc_graph_destroy(graph));
  CHECK(cgc_free(in));
  CHECK(cgc_free(out));
  CHECK(cgc_free(params));
  CHECK(cgc_free(flag));
  CHECK(cgc_host_free(host_in));
  CHECK(cgc_host_free(host_out));
  CHECK(cgc_host_free(host_params));
  CHECK(cgc_module_unload(module));
  CHECK(cgc_event_destroy(fork));
  CHECK(cgc_event_destroy(join));
  CHECK(cgc_stream_destroy(side));
  CHECK(cgc_stream_destroy(origin));
  CHECK(cgc_context_destroy(ctx));
  printf(failures == 0 ? "ok: every replay saw its own parameters\n" : "FAILED\n");
  return failures == 0 ? 0 : 1;
}
