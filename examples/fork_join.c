/* A fork/join capture with cgc, replayed: what README's demo command runs.
 *
 * The origin stream fills buffer A, forks two side streams (one copies A to B, the other fills
 * C), joins them, and the whole thing is captured once and replayed several times. On a machine
 * without a GPU it says so and exits with status 1.
 *
 * The device work is memset and memcpy nodes, so that the example needs no kernels; it reaches
 * them through cgc's own driver table (src/driver.h). A real program would use its CUDA runtime
 * and pass its streams in with cgc_stream_wrap. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "capi/cgc.h"
#include "src/driver.h"

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cgc_status_t st_ = (call);                                                         \
    if (st_ != CGC_SUCCESS) {                                                          \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, cgc_status_string(st_), cgc_last_error()); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define CHECK_CU(call)                                          \
  do {                                                          \
    CUresult r_ = cgc__drv.call;                                \
    if (r_ != CUDA_SUCCESS) {                                   \
      fprintf(stderr, "%s failed: CUresult %d\n", #call, (int)r_); \
      exit(1);                                                  \
    }                                                           \
  } while (0)

enum { kWords = 1 << 20, kReplays = 5 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(void) {
  int devices = 0;
  cgc_status_t st = cgc_device_count(&devices);
  if (st != CGC_SUCCESS || devices == 0) {
    printf("cgc fork/join demo: no GPU here (%s)\n  %s\n", cgc_status_string(st), cgc_last_error());
    return 1;
  }
  cgc_context_t ctx;
  CHECK(cgc_context_create(0, &ctx));
  CUdevice dev;
  CUcontext primary;
  char name[128] = "?";
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDeviceGetName(name, sizeof name, dev));
  CHECK_CU(cuDevicePrimaryCtxRetain(&primary, dev));
  CHECK_CU(cuCtxPushCurrent(primary));
  printf("cgc %u.%u.%u on %s (driver %d)\n", cgc_version() >> 16, (cgc_version() >> 8) & 0xff,
         cgc_version() & 0xff, name, cgc__drv.version);

  cgc_stream_t origin, side1, side2;
  cgc_event_t fork, join1, join2;
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &origin));
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side1));
  CHECK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side2));
  CHECK(cgc_event_create(ctx, 0, &fork));
  CHECK(cgc_event_create(ctx, 0, &join1));
  CHECK(cgc_event_create(ctx, 0, &join2));
  CUdeviceptr a, b, c;
  CHECK_CU(cuMemAlloc(&a, kWords * 4));
  CHECK_CU(cuMemAlloc(&b, kWords * 4));
  CHECK_CU(cuMemAlloc(&c, kWords * 4));

  /* Capture: origin fills A, forks; side1 copies A to B, side2 fills C; both join back. */
  CHECK(cgc_capture_begin(origin, NULL)); /* Global mode, a new private pool */
  CHECK_CU(cuMemsetD32Async(a, 0x11111111u, kWords, cgc_stream_native(origin)));
  CHECK(cgc_event_record(fork, origin));
  CHECK(cgc_stream_wait_event(side1, fork));
  CHECK(cgc_stream_wait_event(side2, fork));
  CHECK_CU(cuMemcpyDtoDAsync(b, a, kWords * 4, cgc_stream_native(side1)));
  CHECK_CU(cuMemsetD32Async(c, 0x22222222u, kWords, cgc_stream_native(side2)));
  CHECK(cgc_event_record(join1, side1));
  CHECK(cgc_event_record(join2, side2));
  CHECK(cgc_stream_wait_event(origin, join1));
  CHECK(cgc_stream_wait_event(origin, join2));
  cgc_graph_t graph;
  CHECK(cgc_capture_end(origin, &graph));
  cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
  CHECK(cgc_graph_info(graph, &info));
  printf("captured a fork/join over 3 streams: %zu nodes (memset A; copy A->B | memset C)\n", info.node_count);

  CHECK(cgc_graph_upload(graph, origin));
  for (int i = 0; i < kReplays; i++) {
    double t0 = now_us();
    CHECK(cgc_graph_launch(graph, origin));
    CHECK(cgc_stream_synchronize(origin));
    printf("  replay %d: %.1f us (launch + sync)\n", i + 1, now_us() - t0);
  }
  unsigned* host = malloc(kWords * 4);
  int ok = host != NULL;
  if (ok) {
    CHECK_CU(cuMemcpyDtoH(host, b, kWords * 4));
    ok = host[0] == 0x11111111u && host[kWords - 1] == 0x11111111u;
    CHECK_CU(cuMemcpyDtoH(host, c, kWords * 4));
    ok = ok && host[0] == 0x22222222u && host[kWords - 1] == 0x22222222u;
  }
  CHECK(cgc_graph_info(graph, &info));
  printf("replayed %llu times; B == A and C filled: %s\n", (unsigned long long)info.replay_count, ok ? "yes" : "NO");

  free(host);
  CHECK(cgc_graph_destroy(graph));
  cgc__drv.cuMemFree(a);
  cgc__drv.cuMemFree(b);
  cgc__drv.cuMemFree(c);
  CHECK(cgc_event_destroy(fork));
  CHECK(cgc_event_destroy(join1));
  CHECK(cgc_event_destroy(join2));
  CHECK(cgc_stream_destroy(side1));
  CHECK(cgc_stream_destroy(side2));
  CHECK(cgc_stream_destroy(origin));
  CHECK(cgc_context_destroy(ctx));
  return ok ? 0 : 1;
}
