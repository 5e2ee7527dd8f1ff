/* driver_waits: which driver calls wait behind another thread's cuMemFree, and what cgc's hot
 * paths cost meanwhile.
 *
 * cgc holds no lock of its malloc/free, event-record or launch paths across a driver call that
 * can wait for the GPU (docs/DESIGN.md, "Locks and the driver"). Which calls can is the driver's
 * business and not documented: this program measures it. For every call below it runs one
 * round: a kernel spins on stream A for `--spin-ms` (default 400), a second thread calls
 * cuMemFree (which waits for the device to go idle) 20 ms later, and 60 ms later the main thread
 * makes the call on another stream, B, and times it. A call that takes more than a quarter of
 * the spin waited behind the free. The same call is timed once more with the device quiet.
 * The cgc rows repeat a call many times inside the window and report the slowest.
 *
 *   bazel run //bench:driver_waits [-- --spin-ms N]      (the GPU bundle: tools/driver_waits)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/harness.h"

extern const unsigned char cgc_bench_kernels_fatbin[];
extern const size_t cgc_bench_kernels_fatbin_size;

static CUcontext primary;
static CUfunction k_spin;
static CUstream stream_a, stream_b;
static CUevent ev_done, ev_fresh;
static CUgraphExec tiny_exec;
static cgc_context_t ctx;
static cgc_stream_t cgc_b;
static cgc_event_t cgc_ev;
static cgc_graph_t cgc_tiny;
static long long spin_ns = 400LL * 1000 * 1000;

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static CUresult launch_spin(CUstream s, unsigned long long ns) {
  void* args[] = {&ns};
  return drv.cuLaunchKernel(k_spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

static void CUDA_CB noop_host(void* user) { (void)user; }

/* ---- the calls, each made once per round (its cost, ns, is what the round times) ---- */

typedef struct probe {
  const char* name;
  int64_t (*run)(void); /* returns the slowest single call's ns */
} probe_t;

#define TIMED(expr)             \
  do {                          \
    int64_t t0_ = now_ns();     \
    CU(expr);                   \
    return now_ns() - t0_;      \
  } while (0)

static int64_t p_ctx_get_current(void) {
  CUcontext c;
  TIMED(cuCtxGetCurrent(&c));
}
static int64_t p_ctx_push_pop(void) {
  CUcontext c;
  int64_t t0 = now_ns();
  CU(cuCtxPushCurrent(primary));
  CU(cuCtxPopCurrent(&c));
  return now_ns() - t0;
}
static int64_t p_capture_info(void) {
  CUstreamCaptureStatus st;
  TIMED(cuStreamGetCaptureInfo(stream_b, &st, NULL, NULL, NULL, NULL));
}
static int64_t p_stream_id(void) {
  unsigned long long id;
  TIMED(cuStreamGetId(stream_b, &id));
}
static int64_t p_mode_exchange(void) {
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  int64_t t0 = now_ns();
  CU(cuThreadExchangeStreamCaptureMode(&m));
  CU(cuThreadExchangeStreamCaptureMode(&m));
  return now_ns() - t0;
}
static int64_t p_event_record(void) { TIMED(cuEventRecord(ev_fresh, stream_b)); }
static int64_t p_event_query(void) { TIMED(cuEventQuery(ev_done)); }
static int64_t p_wait_event(void) { TIMED(cuStreamWaitEvent(stream_b, ev_done, 0)); }
static int64_t p_stream_query(void) {
  int64_t t0 = now_ns();
  CUresult r = drv.cuStreamQuery(stream_b);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) fail_cu("cuStreamQuery", r);
  return now_ns() - t0;
}
static int64_t p_launch_kernel(void) {
  int64_t t0 = now_ns();
  CU_OK(launch_spin(stream_b, 0));
  return now_ns() - t0;
}
static int64_t p_graph_launch(void) { TIMED(cuGraphLaunch(tiny_exec, stream_b)); }
static int64_t p_host_func(void) { TIMED(cuLaunchHostFunc(stream_b, noop_host, NULL)); }
static int64_t p_mem_get_info(void) {
  size_t f, t;
  TIMED(cuMemGetInfo(&f, &t));
}
static int64_t p_event_create_destroy(void) {
  CUevent e;
  int64_t t0 = now_ns();
  CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CU(cuEventDestroy(e));
  return now_ns() - t0;
}
static int64_t p_capture_begin_end(void) {
  CUgraph g;
  int64_t t0 = now_ns();
  CU(cuStreamBeginCapture(stream_b, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CU_OK(launch_spin(stream_b, 0));
  CU(cuStreamEndCapture(stream_b, &g));
  int64_t t = now_ns() - t0;
  CU(cuGraphDestroy(g));
  return t;
}
static int64_t p_mem_alloc(void) {
  CUdeviceptr p;
  int64_t t0 = now_ns();
  CU(cuMemAlloc(&p, 1 << 20));
  int64_t t = now_ns() - t0;
  CU(cuMemFree(p)); /* after the round's free: outside the window */
  return t;
}

/* cgc's hot paths, repeated through the window: the slowest call. */
enum { kCgcRepeats = 2000 };
static int64_t p_cgc_pair(void) {
  int64_t worst = 0;
  for (int i = 0; i < kCgcRepeats; i++) {
    void* p = NULL;
    int64_t t0 = now_ns();
    CGC(cgc_malloc(ctx, 4096, cgc_b, &p));
    CGC(cgc_free(p));
    int64_t t = now_ns() - t0;
    if (t > worst) worst = t;
  }
  return worst;
}
static int64_t p_cgc_event_record(void) {
  int64_t worst = 0;
  for (int i = 0; i < 64; i++) {
    int64_t t0 = now_ns();
    CGC(cgc_event_record(cgc_ev, cgc_b));
    int64_t t = now_ns() - t0;
    if (t > worst) worst = t;
  }
  return worst;
}
static int64_t p_cgc_graph_launch(void) {
  int64_t t0 = now_ns();
  CGC(cgc_graph_launch(cgc_tiny, cgc_b));
  return now_ns() - t0;
}

static const probe_t probes[] = {
    {"cuCtxGetCurrent", p_ctx_get_current},
    {"cuCtxPushCurrent + cuCtxPopCurrent", p_ctx_push_pop},
    {"cuStreamGetCaptureInfo", p_capture_info},
    {"cuStreamGetId", p_stream_id},
    {"cuThreadExchangeStreamCaptureMode x2", p_mode_exchange},
    {"cuEventRecord", p_event_record},
    {"cuEventQuery", p_event_query},
    {"cuStreamWaitEvent", p_wait_event},
    {"cuStreamQuery", p_stream_query},
    {"cuLaunchKernel", p_launch_kernel},
    {"cuGraphLaunch", p_graph_launch},
    {"cuLaunchHostFunc", p_host_func},
    {"cuMemGetInfo", p_mem_get_info},
    {"cuEventCreate + cuEventDestroy", p_event_create_destroy},
    {"cuStreamBeginCapture + EndCapture", p_capture_begin_end},
    {"cuMemAlloc (1 MiB)", p_mem_alloc},
    {"cgc_malloc + cgc_free (hit), slowest of 2000", p_cgc_pair},
    {"cgc_event_record, slowest of 64", p_cgc_event_record},
    {"cgc_graph_launch", p_cgc_graph_launch},
};

/* ---- the round ---- */

typedef struct freer {
  CUdeviceptr victim;
  int64_t start, end;
} freer_t;

static void* free_after_delay(void* arg) {
  freer_t* f = arg;
  CU(cuCtxPushCurrent(primary));
  sleep_ms(20);
  f->start = now_ns();
  CU(cuMemFree(f->victim));
  f->end = now_ns();
  CUcontext popped;
  CU(cuCtxPopCurrent(&popped));
  return NULL;
}

/* One round: the call's ns while a cuMemFree waits; *free_ns: how long that free took. */
static int64_t round_during_free(const probe_t* p, int64_t* free_ns) {
  freer_t f = {0};
  CU(cuMemAlloc(&f.victim, 1 << 20));
  CU(cuStreamSynchronize(stream_b));
  CU_OK(launch_spin(stream_a, (unsigned long long)spin_ns));
  pthread_t t;
  if (pthread_create(&t, NULL, free_after_delay, &f) != 0) fail_with("pthread_create failed");
  sleep_ms(60);
  int64_t ns = p->run();
  pthread_join(t, NULL);
  CU(cuStreamSynchronize(stream_a));
  CU(cuStreamSynchronize(stream_b));
  *free_ns = f.end - f.start;
  return ns;
}

int main(int argc, char** argv) {
  bench_tool = "driver_waits";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--spin-ms") == 0 && i + 1 < argc) {
      spin_ns = atoll(argv[++i]) * 1000 * 1000;
    } else {
      fprintf(stderr, "usage: driver_waits [--spin-ms N]\n");
      return 2;
    }
  }
  CUdevice dev;
  if (!bench_enter_device("driver_waits", &dev, &primary)) return 1;
  char name[256] = {0};
  CU(cuDeviceGetName(name, sizeof name, dev));
  int version = 0;
  CU(cuDriverGetVersion(&version));
  CUmodule module;
  CU(cuModuleLoadData(&module, cgc_bench_kernels_fatbin));
  CU(cuModuleGetFunction(&k_spin, module, "cgc_bench_spin_ns"));
  CU(cuStreamCreate(&stream_a, CU_STREAM_NON_BLOCKING));

  CGC(cgc_context_create(0, &ctx));
  CGC(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &cgc_b));
  stream_b = (CUstream)cgc_stream_native(cgc_b);
  CGC(cgc_event_create(ctx, 0, &cgc_ev));
  CU(cuEventCreate(&ev_done, CU_EVENT_DISABLE_TIMING));
  CU(cuEventCreate(&ev_fresh, CU_EVENT_DISABLE_TIMING));
  CU(cuEventRecord(ev_done, stream_b));
  CUgraph g;
  CU(cuStreamBeginCapture(stream_b, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CU_OK(launch_spin(stream_b, 0));
  CU(cuStreamEndCapture(stream_b, &g));
  CU(cuGraphInstantiateWithFlags(&tiny_exec, g, 0));
  CU(cuGraphDestroy(g));
  CGC(cgc_capture_begin(cgc_b, NULL));
  CU_OK(launch_spin(stream_b, 0));
  CGC(cgc_capture_end(cgc_b, &cgc_tiny));
  void* warm = NULL; /* the cache holds a 4 KiB block of stream B: the pairs are hits */
  CGC(cgc_malloc(ctx, 4096, cgc_b, &warm));
  CGC(cgc_free(warm));
  CU(cuStreamSynchronize(stream_b));

  printf("driver_waits on %s, driver %d: each call made on stream B while another thread's cuMemFree waits\n"
         "for a %lld ms kernel on stream A (a call over %lld ms waited behind it)\n\n",
         name, version, spin_ns / 1000000, spin_ns / 4000000);
  printf("%-46s %12s %12s %14s  %s\n", "call", "quiet (us)", "during (us)", "free took (ms)", "verdict");
  int waited = 0;
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    const probe_t* p = &probes[i];
    p->run(); /* warm */
    CU(cuStreamSynchronize(stream_b));
    int64_t quiet = p->run();
    CU(cuStreamSynchronize(stream_b));
    int64_t free_ns = 0;
    int64_t during = round_during_free(p, &free_ns);
    bool waits = during > spin_ns / 4;
    bool free_waited = free_ns > spin_ns / 4;
    waited += waits;
    printf("%-46s %12.1f %12.1f %14.1f  %s\n", p->name, quiet / 1e3, during / 1e3, free_ns / 1e6,
           !free_waited ? "(the free did not wait: no verdict)" : waits ? "WAITS" : "does not wait");
  }
  printf("\n%d call(s) waited behind the free\n", waited);
  CGC(cgc_graph_destroy(cgc_tiny));
  CGC(cgc_event_destroy(cgc_ev));
  CGC(cgc_stream_destroy(cgc_b));
  CGC(cgc_context_destroy(ctx));
  CU(cuGraphExecDestroy(tiny_exec));
  CU(cuEventDestroy(ev_done));
  CU(cuEventDestroy(ev_fresh));
  CU(cuStreamDestroy(stream_a));
  CU(cuModuleUnload(module));
  CUcontext popped;
  CU(cuCtxPopCurrent(&popped));
  CU(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
