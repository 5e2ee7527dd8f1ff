/* nccl_bench: all-reduce latency on 2 GPUs, eager vs captured through cgc vs captured with raw
 * NCCL and driver calls (the floor), 8 B to 64 MiB.
 *
 * One process, one thread per GPU. Each thread has a cgc communicator (cgc_comm_create) for the
 * eager and cgc-graph variants, and a raw NCCL communicator of its own (ncclCommInitRank, from
 * the libnccl.so.2 this program loads itself) for the floor: ncclAllReduce between
 * cuStreamBeginCapture and cuStreamEndCapture on the same stream and buffers. Latency is what a
 * decode step sees: host time from the launch to the end of a stream synchronisation, both ranks
 * released together by a barrier before every iteration; median and p90 over the iterations,
 * taken on rank 0. A second latency is read on the GPU: CUDA events recorded just before the
 * launch call and after it, so it counts the time from the stream being ready to the collective
 * being done (the host's enqueue work included, the host's synchronisation not).
 *
 *   nccl_bench [--iters N] [--json FILE]
 * Without 2 GPUs or without NCCL it says so and exits with status 1; a failed call exits with
 * status 2, a wrong sum with status 3. CGC_NCCL_LIBRARY names the NCCL library, as for cgc. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"

/* The raw side: the few NCCL functions the floor needs, declared as NCCL's stable ABI has them
 * (the build has no nccl.h; an ncclUniqueId is 128 bytes, as cgc_comm_id_t). */
typedef struct nccl_comm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
enum { kNcclFloat32 = 7, kNcclSum = 0 };
#define RAW_NCCL_ENTRIES(X)                                                                   \
  X(ncclGetUniqueId, int, (ncclUniqueId*))                                                     \
  X(ncclCommInitRank, int, (ncclComm_t*, int, ncclUniqueId, int))                              \
  X(ncclCommDestroy, int, (ncclComm_t))                                                        \
  X(ncclGetErrorString, const char*, (int))                                                    \
  X(ncclAllReduce, int, (const void*, void*, size_t, int, int, ncclComm_t, CUstream))
#define RAW_NCCL_FIELD(name, ret, params) ret(*name) params;
static struct {
  RAW_NCCL_ENTRIES(RAW_NCCL_FIELD)
} raw_nccl;
#undef RAW_NCCL_FIELD

static bool load_raw_nccl(char* why, size_t why_size) {
  const char* path = getenv("CGC_NCCL_LIBRARY");
  if (path == NULL || path[0] == '\0') path = "libnccl.so.2";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept for the life of the process */
  if (lib == NULL) {
    const char* e = dlerror();
    snprintf(why, why_size, "dlopen(%s): %s", path, e ? e : "unknown reason");
    return false;
  }
#define RAW_NCCL_RESOLVE(name, ret, params)                          \
  *(void**)&raw_nccl.name = dlsym(lib, #name);                       \
  if (raw_nccl.name == NULL) {                                       \
    snprintf(why, why_size, "%s has no %s", path, #name);            \
    return false;                                                    \
  }
  RAW_NCCL_ENTRIES(RAW_NCCL_RESOLVE)
#undef RAW_NCCL_RESOLVE
  return true;
}

#define NCCL(call)                                                                            \
  do {                                                                                        \
    int r_ = raw_nccl.call;                                                                   \
    if (r_ != 0) fail_with("%s failed: %s (ncclResult_t %d)", #call, raw_nccl.ncclGetErrorString(r_), r_); \
  } while (0)

enum { kRanks = 2, kSizes = 9, kMaxBytes = 64 << 20 };
static const size_t kSizeBytes[kSizes] = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 67108864};

static struct {
  int iters, warmup;
  cgc_comm_id_t id;  /* for cgc's communicators */
  ncclUniqueId raw_id; /* for the raw ones */
  pthread_barrier_t barrier;
  summary_t eager[kSizes], cgc_graph[kSizes], raw_graph[kSizes];             /* host: launch + sync */
  summary_t eager_gpu[kSizes], cgc_graph_gpu[kSizes], raw_graph_gpu[kSizes]; /* GPU: events */
  bool correct[kSizes];
} bench;

typedef enum { EAGER, CGC_GRAPH, RAW_GRAPH } variant_t;

typedef struct {
  int rank;
  cgc_context_t ctx;
  cgc_stream_t stream;
  cgc_event_t start, end;
  cgc_comm_t comm;
  ncclComm_t raw_comm;
  void *send, *recv;
} rank_t;

/* One variant at one size: warm-up, then timed iterations each released by the barrier. */
static summary_t time_variant(rank_t* r, variant_t v, size_t count, cgc_graph_t g, CUgraphExec raw_exec,
                              double* samples, double* gpu_samples, summary_t* gpu) {
  CUstream cs = (CUstream)cgc_stream_native(r->stream);
  for (int i = 0; i < bench.warmup + bench.iters; i++) {
    pthread_barrier_wait(&bench.barrier);
    int64_t t0 = now_ns();
    CGC(cgc_event_record(r->start, r->stream));
    if (v == EAGER) {
      CGC(cgc_all_reduce(r->comm, r->send, r->recv, count, CGC_FLOAT32, CGC_SUM, r->stream));
    } else if (v == CGC_GRAPH) {
      CGC(cgc_graph_launch(g, r->stream));
    } else {
      CU(cuGraphLaunch(raw_exec, cs));
    }
    CGC(cgc_event_record(r->end, r->stream));
    CGC(cgc_stream_synchronize(r->stream));
    double host_us = (double)(now_ns() - t0) / 1e3;
    float ms = 0;
    CGC(cgc_event_elapsed_ms(r->start, r->end, &ms));
    if (i >= bench.warmup) {
      samples[i - bench.warmup] = host_us;
      gpu_samples[i - bench.warmup] = ms * 1000.0;
    }
  }
  *gpu = summarize(gpu_samples, (size_t)bench.iters);
  return summarize(samples, (size_t)bench.iters);
}

/* Zeroes this rank's result and waits: every variant starts from nothing. */
static void clear_recv(rank_t* r, size_t count) {
  CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->recv, 0, count, (CUstream)cgc_stream_native(r->stream)));
  CGC(cgc_stream_synchronize(r->stream));
}

/* True when the first and last elements are the sum over the 2 ranks of 1.0f. */
static bool sum_is_two(rank_t* r, size_t count) {
  CGC(cgc_stream_synchronize(r->stream));
  float first = 0, last = 0;
  CU(cuMemcpyDtoH(&first, (CUdeviceptr)(uintptr_t)r->recv, sizeof first));
  CU(cuMemcpyDtoH(&last, (CUdeviceptr)(uintptr_t)r->recv + (count - 1) * sizeof(float), sizeof last));
  return first == 2.0f && last == 2.0f;
}

static void* run_rank(void* arg) {
  rank_t* r = arg;
  CGC(cgc_context_create(r->rank, &r->ctx));
  CUdevice dev;
  CUcontext primary;
  CU(cuDeviceGet(&dev, r->rank));
  CU(cuDevicePrimaryCtxRetain(&primary, dev));
  CU(cuCtxPushCurrent(primary));
  CGC(cgc_stream_create(r->ctx, CGC_STREAM_NON_BLOCKING, 0, &r->stream));
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &r->start));
  CGC(cgc_event_create(r->ctx, CGC_EVENT_TIMING, &r->end));
  CGC(cgc_comm_create(r->ctx, kRanks, &bench.id, r->rank, &r->comm));
  /* The floor's communicator: NCCL's own, on the device whose primary context is current. */
  NCCL(ncclCommInitRank(&r->raw_comm, kRanks, bench.raw_id, r->rank));
  CGC(cgc_malloc(r->ctx, kMaxBytes, r->stream, &r->send));
  CGC(cgc_malloc(r->ctx, kMaxBytes, r->stream, &r->recv));
  CUstream cs = (CUstream)cgc_stream_native(r->stream);
  /* 1.0f everywhere: the sum over 2 ranks is 2.0f, checked after each size. */
  CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->send, 0x3f800000u, kMaxBytes / 4, cs));
  CGC(cgc_stream_synchronize(r->stream));
  double* samples = new_samples((size_t)bench.iters);
  double* gpu_samples = new_samples((size_t)bench.iters);
  summary_t eager_gpu, graph_gpu, floor_gpu;
  for (int s = 0; s < kSizes; s++) {
    size_t count = kSizeBytes[s] / sizeof(float);
    /* Each variant starts from a cleared result and is checked on its own: a graph that does
     * nothing must not pass on what the variant before it wrote. */
    clear_recv(r, count);
    summary_t eager = time_variant(r, EAGER, count, NULL, NULL, samples, gpu_samples, &eager_gpu);
    bool correct = sum_is_two(r, count);

    /* ThreadLocal captures: the other rank's thread keeps making calls (synchronisations,
     * instantiation) that a Global capture would count against this one. */
    cgc_graph_t g = NULL;
    cgc_capture_options_t opts = {.struct_size = sizeof opts, .mode = CGC_CAPTURE_MODE_THREAD_LOCAL};
    CGC(cgc_capture_begin(r->stream, &opts));
    CGC(cgc_all_reduce(r->comm, r->send, r->recv, count, CGC_FLOAT32, CGC_SUM, r->stream));
    CGC(cgc_capture_end(r->stream, &g));
    CGC(cgc_graph_upload(g, r->stream));
    clear_recv(r, count);
    summary_t graph = time_variant(r, CGC_GRAPH, count, g, NULL, samples, gpu_samples, &graph_gpu);
    correct = sum_is_two(r, count) && correct;

    /* One eager all-reduce of this size on the raw communicator first, as the eager variant did
     * on cgc's: NCCL sets up connections lazily at a first use, which a capture must not see. */
    NCCL(ncclAllReduce(r->send, r->recv, count, kNcclFloat32, kNcclSum, r->raw_comm, cs));
    CU(cuStreamSynchronize(cs));
    CUgraph raw = NULL;
    CUgraphExec raw_exec = NULL;
    CU(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    int nr = raw_nccl.ncclAllReduce(r->send, r->recv, count, kNcclFloat32, kNcclSum, r->raw_comm, cs);
    CU(cuStreamEndCapture(cs, &raw));
    if (nr != 0) fail_with("raw ncclAllReduce failed: %s", raw_nccl.ncclGetErrorString(nr));
    CU(cuGraphInstantiateWithFlags(&raw_exec, raw, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    CU(cuGraphUpload(raw_exec, cs));
    clear_recv(r, count);
    summary_t floor = time_variant(r, RAW_GRAPH, count, NULL, raw_exec, samples, gpu_samples, &floor_gpu);
    correct = sum_is_two(r, count) && correct;
    if (r->rank == 0) {
      bench.eager[s] = eager;
      bench.cgc_graph[s] = graph;
      bench.raw_graph[s] = floor;
      bench.eager_gpu[s] = eager_gpu;
      bench.cgc_graph_gpu[s] = graph_gpu;
      bench.raw_graph_gpu[s] = floor_gpu;
      bench.correct[s] = correct;
    }
    CGC(cgc_graph_destroy(g));
    CU(cuGraphExecDestroy(raw_exec));
    CU(cuGraphDestroy(raw));
  }
  free(samples);
  free(gpu_samples);
  pthread_barrier_wait(&bench.barrier);
  NCCL(ncclCommDestroy(r->raw_comm));
  CGC(cgc_event_destroy(r->start));
  CGC(cgc_event_destroy(r->end));
  CGC(cgc_free(r->send));
  CGC(cgc_free(r->recv));
  CGC(cgc_comm_destroy(r->comm));
  CGC(cgc_stream_destroy(r->stream));
  CGC(cgc_context_destroy(r->ctx));
  CUcontext popped;
  CU(cuCtxPopCurrent(&popped));
  CU(cuDevicePrimaryCtxRelease(dev));
  return NULL;
}

/* One table: host or GPU figures, median / p90 per variant, and the ratios. */
static void print_table(const char* title, const summary_t* eager, const summary_t* graph, const summary_t* floor,
                        bool with_check) {
  printf("\n%s, us (median / p90)\n", title);
  printf("%-8s | %17s | %17s | %17s | %8s | %12s%s\n", "size", "eager", "cgc graph", "raw NCCL graph", "cgc/raw",
         "graph/eager", with_check ? " | check" : "");
  for (int s = 0; s < kSizes; s++) {
    char b[32];
    bytes_label(b, sizeof b, kSizeBytes[s]);
    printf("%-8s | %7.1f / %7.1f | %7.1f / %7.1f | %7.1f / %7.1f | %8.3f | %12.3f%s\n", b, eager[s].median,
           eager[s].p90, graph[s].median, graph[s].p90, floor[s].median, floor[s].p90,
           graph[s].median / floor[s].median, graph[s].median / eager[s].median,
           !with_check ? "" : bench.correct[s] ? " | ok" : " | WRONG SUM");
  }
}

int main(int argc, char** argv) {
  bench_tool = "nccl_bench";
  const char* json_path = NULL;
  bench.iters = 200;
  bench.warmup = 20;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      bench.iters = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--iters N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (bench.iters < 10) bench.iters = 10;
  int devices = 0;
  char why[512] = "";
  if (cgc_device_count(&devices) != CGC_SUCCESS || devices < kRanks || !bench_driver_load(why, sizeof why)) {
    printf("nccl_bench: no GPU pair here (%d device(s); %s%s): nothing measured\n", devices, cgc_last_error(), why);
    return 1;
  }
  int version = 0;
  if (cgc_nccl_version(&version) != CGC_SUCCESS) {
    printf("nccl_bench: no NCCL here (%s): nothing measured\n", cgc_last_error());
    return 1;
  }
  if (!load_raw_nccl(why, sizeof why)) {
    printf("nccl_bench: cgc found NCCL but this program cannot load it for the floor (%s)\n", why);
    return 1;
  }
  CGC(cgc_comm_unique_id(&bench.id));
  NCCL(ncclGetUniqueId(&bench.raw_id));
  pthread_barrier_init(&bench.barrier, NULL, kRanks);
  rank_t ranks[kRanks];
  pthread_t threads[kRanks];
  for (int r = 0; r < kRanks; r++) {
    memset(&ranks[r], 0, sizeof ranks[r]);
    ranks[r].rank = r;
    if (pthread_create(&threads[r], NULL, run_rank, &ranks[r]) != 0) fail_with("pthread_create failed");
  }
  for (int r = 0; r < kRanks; r++) pthread_join(threads[r], NULL);

  char name[128] = "?";
  CUdevice dev;
  if (drv.cuDeviceGet(&dev, 0) == CUDA_SUCCESS) drv.cuDeviceGetName(name, sizeof name, dev);
  uint32_t v = cgc_version();
  printf("all_reduce (float32 sum) on %d x %s, NCCL %d, driver %d, cgc %u.%u.%u; %d iterations each\n", kRanks,
         name, version, drv.version, v >> 16, (v >> 8) & 0xffu, v & 0xffu, bench.iters);
  print_table("host latency = launch + stream sync", bench.eager, bench.cgc_graph, bench.raw_graph, true);
  print_table("GPU latency = events around the launch call", bench.eager_gpu, bench.cgc_graph_gpu,
              bench.raw_graph_gpu, false);

  json_t j;
  json_begin(&j);
  jstr(&j, "tool", "nccl_bench");
  jstr(&j, "device", name);
  jint(&j, "ranks", kRanks);
  jint(&j, "nccl_version", version);
  jint(&j, "driver_version", drv.version);
  jint(&j, "cgc_version_code", v);
  jstr(&j, "unit", "us; host: launch + stream sync, gpu: events around the launch");
  jint(&j, "iterations", bench.iters);
  jopen(&j, "all_reduce", '[');
  for (int s = 0; s < kSizes; s++) {
    jopen(&j, NULL, '{');
    jint(&j, "bytes", (long long)kSizeBytes[s]);
    json_row(&j, "cgc_graph", "raw_graph", "cgc_graph_over_raw", bench.cgc_graph[s], bench.raw_graph[s],
             bench.cgc_graph[s].median / bench.raw_graph[s].median);
    jnum(&j, "eager_median", bench.eager[s].median);
    jnum(&j, "eager_p90", bench.eager[s].p90);
    json_row(&j, "cgc_graph_gpu", "raw_graph_gpu", "cgc_graph_gpu_over_raw", bench.cgc_graph_gpu[s],
             bench.raw_graph_gpu[s], bench.cgc_graph_gpu[s].median / bench.raw_graph_gpu[s].median);
    jnum(&j, "eager_gpu_median", bench.eager_gpu[s].median);
    jbool(&j, "correct", bench.correct[s]);
    jclose(&j, '}');
  }
  jclose(&j, ']');
  for (int s = 0; s < kSizes; s++)
    if (!bench.correct[s]) bench_failed_checks++;
  jint(&j, "failed_checks", bench_failed_checks);
  if (!json_finish(&j, json_path)) fail_with("cannot write %s", json_path);
  return bench_failed_checks ? 3 : 0;
}
