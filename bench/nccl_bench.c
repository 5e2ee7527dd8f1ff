/* nccl_bench: all-reduce latency on 2 GPUs, eager vs captured through cgc vs captured with raw
 * NCCL and driver calls (the floor), 8 B to 64 MiB.
 *
 * One process, one thread per GPU, one communicator per thread (cgc_comm_create); the raw
 * variant drives the very same ncclComm_t with ncclAllReduce between cuStreamBeginCapture and
 * cuStreamEndCapture, so cgc's graph and the floor differ only by cgc's own code. Latency is
 * what a decode step sees: host time from the launch to the end of a stream synchronisation,
 * both ranks released together by a barrier before every iteration; median and p90 over the
 * iterations, taken on rank 0. A second latency is read on the GPU: CUDA events recorded just
 * before the launch call and after it, so it counts the time from the stream being ready to the
 * collective being done (the host's enqueue work included, the host's synchronisation not).
 *
 *   nccl_bench [--iters N] [--json FILE]
 * Without 2 GPUs or without NCCL it says so and exits with status 1. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi/cgc.h"
#include "src/internal.h"

#define CHECK(call)                                                                             \
  do {                                                                                          \
    cgc_status_t st_ = (call);                                                                  \
    if (st_ != CGC_SUCCESS) {                                                                   \
      fprintf(stderr, "%s:%d: %s failed: %s\n  %s\n", __FILE__, __LINE__, #call, cgc_status_string(st_), \
              cgc_last_error());                                                                \
      exit(2);                                                                                  \
    }                                                                                           \
  } while (0)
#define CHECK_CU(call)                                                                 \
  do {                                                                                 \
    CUresult r_ = cgc__drv.call;                                                       \
    if (r_ != CUDA_SUCCESS) {                                                          \
      fprintf(stderr, "%s:%d: %s failed: CUresult %d\n", __FILE__, __LINE__, #call, (int)r_); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

enum { kRanks = 2, kSizes = 9, kMaxBytes = 64 << 20 };
static const size_t kSizeBytes[kSizes] = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 67108864};

typedef int (*nccl_all_reduce_fn)(const void*, void*, size_t, int, int, void*, CUstream);

typedef struct {
  double median, p90;
} figure_t;

static struct {
  int iters, warmup;
  cgc_comm_id_t id;
  pthread_barrier_t barrier;
  nccl_all_reduce_fn raw_all_reduce;
  figure_t eager[kSizes], cgc_graph[kSizes], raw_graph[kSizes];          /* host: launch + sync */
  figure_t eager_gpu[kSizes], cgc_graph_gpu[kSizes], raw_graph_gpu[kSizes]; /* GPU: events */
  int correct[kSizes];
} bench;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int compare_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static figure_t summarize(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_double);
  figure_t f = {v[n / 2], v[(n * 9) / 10]};
  return f;
}

typedef enum { EAGER, CGC_GRAPH, RAW_GRAPH } variant_t;

typedef struct {
  int rank;
  cgc_context_t ctx;
  cgc_stream_t stream;
  cgc_event_t start, end;
  cgc_comm_t comm;
  void *send, *recv;
} rank_t;

/* One variant at one size: warm-up, then timed iterations each released by the barrier. */
static figure_t time_variant(rank_t* r, variant_t v, size_t count, cgc_graph_t g, CUgraphExec raw_exec,
                             double* samples, double* gpu_samples, figure_t* gpu) {
  CUstream cs = (CUstream)cgc_stream_native(r->stream);
  for (int i = 0; i < bench.warmup + bench.iters; i++) {
    pthread_barrier_wait(&bench.barrier);
    double t0 = now_us();
    CHECK(cgc_event_record(r->start, r->stream));
    if (v == EAGER) {
      CHECK(cgc_all_reduce(r->comm, r->send, r->recv, count, CGC_FLOAT32, CGC_SUM, r->stream));
    } else if (v == CGC_GRAPH) {
      CHECK(cgc_graph_launch(g, r->stream));
    } else {
      CHECK_CU(cuGraphLaunch(raw_exec, cs));
    }
    CHECK(cgc_event_record(r->end, r->stream));
    CHECK(cgc_stream_synchronize(r->stream));
    double host = now_us() - t0;
    float ms = 0;
    CHECK(cgc_event_elapsed_ms(r->start, r->end, &ms));
    if (i >= bench.warmup) {
      samples[i - bench.warmup] = host;
      gpu_samples[i - bench.warmup] = ms * 1000.0;
    }
  }
  *gpu = summarize(gpu_samples, bench.iters);
  return summarize(samples, bench.iters);
}

static void* run_rank(void* arg) {
  rank_t* r = arg;
  CHECK(cgc_context_create(r->rank, &r->ctx));
  CUdevice dev;
  CUcontext primary;
  CHECK_CU(cuDeviceGet(&dev, r->rank));
  CHECK_CU(cuDevicePrimaryCtxRetain(&primary, dev));
  CHECK_CU(cuCtxPushCurrent(primary));
  CHECK(cgc_stream_create(r->ctx, CGC_STREAM_NON_BLOCKING, 0, &r->stream));
  CHECK(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &r->start));
  CHECK(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &r->end));
  CHECK(cgc_comm_create(r->ctx, kRanks, &bench.id, r->rank, &r->comm));
  CHECK(cgc_malloc(r->ctx, kMaxBytes, r->stream, &r->send));
  CHECK(cgc_malloc(r->ctx, kMaxBytes, r->stream, &r->recv));
  CUstream cs = (CUstream)cgc_stream_native(r->stream);
  /* 1.0f everywhere: the sum over 2 ranks is 2.0f, checked after each size. */
  CHECK_CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->send, 0x3f800000u, kMaxBytes / 4, cs));
  CHECK(cgc_stream_synchronize(r->stream));
  double* samples = malloc(sizeof(double) * (size_t)bench.iters);
  double* gpu_samples = malloc(sizeof(double) * (size_t)bench.iters);
  if (samples == NULL || gpu_samples == NULL) exit(2);
  figure_t eager_gpu, graph_gpu, floor_gpu;
  void* raw_comm = cgc__comm_native(r->comm);
  for (int s = 0; s < kSizes; s++) {
    size_t count = kSizeBytes[s] / sizeof(float);
    figure_t eager = time_variant(r, EAGER, count, NULL, NULL, samples, gpu_samples, &eager_gpu);

    /* ThreadLocal captures: the other rank's thread keeps making calls (synchronisations,
     * instantiation) that a Global capture would count against this one. */
    cgc_graph_t g = NULL;
    cgc_capture_options_t opts = {sizeof opts, CGC_CAPTURE_MODE_THREAD_LOCAL, NULL, 0};
    CHECK(cgc_capture_begin(r->stream, &opts));
    CHECK(cgc_all_reduce(r->comm, r->send, r->recv, count, CGC_FLOAT32, CGC_SUM, r->stream));
    CHECK(cgc_capture_end(r->stream, &g));
    CHECK(cgc_graph_upload(g, r->stream));
    figure_t graph = time_variant(r, CGC_GRAPH, count, g, NULL, samples, gpu_samples, &graph_gpu);

    CUgraph raw = NULL;
    CUgraphExec raw_exec = NULL;
    CHECK_CU(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    int nr = bench.raw_all_reduce(r->send, r->recv, count, 7 /* float32 */, 0 /* sum */, raw_comm, cs);
    CHECK_CU(cuStreamEndCapture(cs, &raw));
    if (nr != 0) {
      fprintf(stderr, "raw ncclAllReduce failed: %d\n", nr);
      exit(2);
    }
    CHECK_CU(cuGraphInstantiateWithFlags(&raw_exec, raw, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    CHECK_CU(cuGraphUpload(raw_exec, cs));
    figure_t floor = time_variant(r, RAW_GRAPH, count, NULL, raw_exec, samples, gpu_samples, &floor_gpu);

    float first = 0, last = 0;
    CHECK_CU(cuMemcpyDtoH(&first, (CUdeviceptr)(uintptr_t)r->recv, sizeof first));
    CHECK_CU(cuMemcpyDtoH(&last, (CUdeviceptr)(uintptr_t)r->recv + (count - 1) * sizeof(float), sizeof last));
    if (r->rank == 0) {
      bench.eager[s] = eager;
      bench.cgc_graph[s] = graph;
      bench.raw_graph[s] = floor;
      bench.eager_gpu[s] = eager_gpu;
      bench.cgc_graph_gpu[s] = graph_gpu;
      bench.raw_graph_gpu[s] = floor_gpu;
      bench.correct[s] = first == 2.0f && last == 2.0f;
    }
    CHECK(cgc_graph_destroy(g));
    CHECK_CU(cuGraphExecDestroy(raw_exec));
    CHECK_CU(cuGraphDestroy(raw));
  }
  free(samples);
  free(gpu_samples);
  pthread_barrier_wait(&bench.barrier);
  CHECK(cgc_event_destroy(r->start));
  CHECK(cgc_event_destroy(r->end));
  CHECK(cgc_free(r->send));
  CHECK(cgc_free(r->recv));
  CHECK(cgc_comm_destroy(r->comm));
  CHECK(cgc_stream_destroy(r->stream));
  CHECK(cgc_context_destroy(r->ctx));
  return NULL;
}

static const char* size_text(size_t b, char* buf, size_t n) {
  if (b >= (1 << 20))
    snprintf(buf, n, "%zu MiB", b >> 20);
  else if (b >= 1024)
    snprintf(buf, n, "%zu KiB", b >> 10);
  else
    snprintf(buf, n, "%zu B", b);
  return buf;
}

int main(int argc, char** argv) {
  const char* json = NULL;
  bench.iters = 200;
  bench.warmup = 20;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      bench.iters = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--iters N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (bench.iters < 10) bench.iters = 10;
  int devices = 0;
  if (cgc_device_count(&devices) != CGC_SUCCESS || devices < kRanks) {
    printf("nccl_bench: no GPU pair here (%d device(s); %s): nothing measured\n", devices, cgc_last_error());
    return 1;
  }
  int version = 0;
  if (cgc_nccl_version(&version) != CGC_SUCCESS) {
    printf("nccl_bench: no NCCL here (%s): nothing measured\n", cgc_last_error());
    return 1;
  }
  bench.raw_all_reduce = (nccl_all_reduce_fn)cgc__nccl_function("ncclAllReduce");
  CHECK(cgc_comm_unique_id(&bench.id));
  pthread_barrier_init(&bench.barrier, NULL, kRanks);
  rank_t ranks[kRanks];
  pthread_t threads[kRanks];
  for (int r = 0; r < kRanks; r++) {
    memset(&ranks[r], 0, sizeof ranks[r]);
    ranks[r].rank = r;
    pthread_create(&threads[r], NULL, run_rank, &ranks[r]);
  }
  for (int r = 0; r < kRanks; r++) pthread_join(threads[r], NULL);

  char name[128] = "?";
  CUdevice dev;
  if (cgc__drv.cuDeviceGet(&dev, 0) == CUDA_SUCCESS) cgc__drv.cuDeviceGetName(name, sizeof name, dev);
  printf("all_reduce (float32 sum) on %d x %s, NCCL %d, driver %d, cgc %u.%u.%u; %d iterations each\n", kRanks,
         name, version, cgc__drv.version, cgc_version() >> 16, (cgc_version() >> 8) & 0xff, cgc_version() & 0xff,
         bench.iters);
  printf("\nhost latency = launch + stream sync, us (median / p90)\n");
  printf("%-8s | %17s | %17s | %17s | %8s | %12s | %s\n", "size", "eager", "cgc graph", "raw NCCL graph",
         "cgc/raw", "graph/eager", "check");
  for (int s = 0; s < kSizes; s++) {
    char b[32];
    printf("%-8s | %7.1f / %7.1f | %7.1f / %7.1f | %7.1f / %7.1f | %8.3f | %12.3f | %s\n",
           size_text(kSizeBytes[s], b, sizeof b), bench.eager[s].median, bench.eager[s].p90,
           bench.cgc_graph[s].median, bench.cgc_graph[s].p90, bench.raw_graph[s].median, bench.raw_graph[s].p90,
           bench.cgc_graph[s].median / bench.raw_graph[s].median, bench.cgc_graph[s].median / bench.eager[s].median,
           bench.correct[s] ? "ok" : "WRONG SUM");
  }
  printf("\nGPU latency = events around the launch call, us (median / p90)\n");
  printf("%-8s | %17s | %17s | %17s | %8s | %12s\n", "size", "eager", "cgc graph", "raw NCCL graph", "cgc/raw",
         "graph/eager");
  for (int s = 0; s < kSizes; s++) {
    char b[32];
    printf("%-8s | %7.1f / %7.1f | %7.1f / %7.1f | %7.1f / %7.1f | %8.3f | %12.3f\n",
           size_text(kSizeBytes[s], b, sizeof b), bench.eager_gpu[s].median, bench.eager_gpu[s].p90,
           bench.cgc_graph_gpu[s].median, bench.cgc_graph_gpu[s].p90, bench.raw_graph_gpu[s].median,
           bench.raw_graph_gpu[s].p90, bench.cgc_graph_gpu[s].median / bench.raw_graph_gpu[s].median,
           bench.cgc_graph_gpu[s].median / bench.eager_gpu[s].median);
  }
  if (json != NULL) {
    FILE* f = fopen(json, "w");
    if (f == NULL) {
      perror(json);
      return 2;
    }
    fprintf(f, "{\"device\": \"%s\", \"ranks\": %d, \"nccl_version\": %d, \"driver_version\": %d, \"cgc_version\": %u,\n",
            name, kRanks, version, cgc__drv.version, cgc_version());
    fprintf(f, " \"unit\": \"us; host: launch + stream sync, gpu: events around the launch\", \"iterations\": %d,\n", bench.iters);
    fprintf(f, " \"all_reduce\": [\n");
    for (int s = 0; s < kSizes; s++)
      fprintf(f,
              "  {\"bytes\": %zu, \"eager_median\": %.3f, \"eager_p90\": %.3f, \"cgc_graph_median\": %.3f, "
              "\"cgc_graph_p90\": %.3f, \"raw_graph_median\": %.3f, \"raw_graph_p90\": %.3f, "
              "\"eager_gpu_median\": %.3f, \"cgc_graph_gpu_median\": %.3f, \"raw_graph_gpu_median\": %.3f, "
              "\"correct\": %s}%s\n",
              kSizeBytes[s], bench.eager[s].median, bench.eager[s].p90, bench.cgc_graph[s].median,
              bench.cgc_graph[s].p90, bench.raw_graph[s].median, bench.raw_graph[s].p90, bench.eager_gpu[s].median,
              bench.cgc_graph_gpu[s].median, bench.raw_graph_gpu[s].median, bench.correct[s] ? "true" : "false",
              s + 1 < kSizes ? "," : "");
    fprintf(f, "]}\n");
    fclose(f);
  }
  for (int s = 0; s < kSizes; s++)
    if (!bench.correct[s]) return 3;
  return 0;
}
