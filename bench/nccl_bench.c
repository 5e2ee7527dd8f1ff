/* nccl_bench: all-reduce (float32 sum) latency on N GPUs, cgc against raw NCCL, for three kinds
 * of buffer and sizes from 8 B to 64 MiB.
 *
 * Ranks. One rank per GPU; N is every visible GPU unless --ranks asks for fewer (N >= 2).
 * --threads (the default) runs the ranks as threads of this process; --processes runs each in a
 * process of its own, as torchrun and vLLM do and as NCCL recommends. The rank processes are
 * forked before this program makes any CUDA or cgc call, so none inherits a driver state (the
 * GPU count is asked by a child forked for that alone). What the processes share is one
 * anonymous mapping made before the forks: a process-shared pthread barrier for the untimed
 * steps, a spinning barrier for the timed ones, the communicators' unique ids (rank 0 makes them
 * and publishes them there before the others pass the barrier) and the figures rank 0 writes for
 * the parent to print. The parent waits at most --timeout seconds; a rank that fails leaves the
 * others waiting for it in a barrier or a collective forever, so the parent then ends them too,
 * and on a timeout it names the ranks that hung and kills them.
 *
 * Two sides in every run, each with a communicator of its own. cgc's side: cgc_comm_create,
 * cgc_all_reduce eager and captured through cgc (cgc_capture_begin, ThreadLocal), cgc's stream
 * and events. The raw side, what a program gets from NCCL and the driver without cgc (the floor):
 * ncclCommInitRank from the libnccl.so.2 this program loads itself, a stream and events of its
 * own, ncclAllReduce eager and between cuStreamBeginCapture and cuStreamEndCapture.
 *
 * Buffer kinds, on each side one send and one recv buffer of 64 MiB per rank:
 *   plain       cgc_malloc                                   | cuMemAlloc
 *   registered  cgc_nccl_pool_create(REGISTERED), pool_malloc | ncclMemAlloc + ncclCommRegister
 *   symmetric   cgc_nccl_pool_create(SYMMETRIC), pool_malloc  | ncclMemAlloc + ncclCommWindowRegister
 * An NCCL too old for a kind gives cgc's pool the next kind down (the table says which it got);
 * a raw side whose NCCL lacks the calls of a kind is left out with a note.
 *
 * Variants at every size; cgc's and the raw side's alternate, one of each per round:
 *   eager-1    one all-reduce, then a stream synchronisation
 *   graph-1    one replay of an uploaded graph of one all-reduce, then a synchronisation
 *   eager-100  100 all-reduces, then one synchronisation; reported per all-reduce
 *   graph-100  one replay of a graph of 100 back-to-back all-reduces, then one synchronisation;
 *              per all-reduce
 * Host latency is what a decode step sees: from the launch call to the end of the stream
 * synchronisation, on every rank, each round released by the barrier on all ranks at once;
 * the figures are rank 0's median and 90th percentile. The 100-op variants also read GPU time
 * from events recorded just before the launch and after it (the host's enqueue work included,
 * its synchronisation not). Every variant starts from a zeroed result and is checked on every
 * rank (first and last element = N, the sum of N ones): a graph that does nothing must not pass
 * on what the variant before it wrote.
 *
 * The breakdown (8 B, 4 KiB, 256 KiB) looks for where the time of one replay + sync goes, against
 * an eager call: the launch call alone, the synchronisation call alone, the GPU time (events
 * around the launch), and launch + polling the stream until it is done in place of the blocking
 * synchronisation, which may sleep and wait to be woken. The node census counts the nodes of the
 * graphs of both sides by type, to see whether NCCL put host or event nodes into them; cgc's
 * graphs also end with one event record node of cgc's own (its completion record).
 *
 * Timed rounds start at a spinning barrier: a blocking (futex) barrier wakes the ranks tens of
 * microseconds apart, and that skew would count in the latency of whichever rank's collective
 * waits for a late peer.
 *
 * NCCL_NVLS_ENABLE=0 in every process of the run, set before anything loads NCCL: NVLink
 * multicast can take a host's shared GPUs out of service, so the machines this runs on keep it
 * off. NCCL_GRAPH_MIXING_SUPPORT is left as found and printed as NCCL sees it: read after cgc has
 * loaded NCCL, since CGC_NCCL_GRAPH_MIXING=off makes cgc set it then.
 *
 *   nccl_bench [--threads | --processes] [--ranks N] [--quick] [--max-bytes B] [--iters N]
 *              [--timeout S] [--json FILE]
 * Without 2 GPUs or without NCCL it says so and exits with status 1; a failed call, or a rank
 * that fails or hangs, exits with status 2, a wrong sum with status 3. CGC_NCCL_LIBRARY names
 * the NCCL library, as for cgc. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/harness.h"

/* ---- the raw side's NCCL ------------------------------------------------------------------
 * The functions the floor needs, declared as NCCL's stable ABI has them (the build has no
 * nccl.h; an ncclUniqueId is 128 bytes, as cgc_comm_id_t; ncclWindow_t is an opaque pointer). */
typedef struct nccl_comm* ncclComm_t;
typedef struct nccl_window* ncclWindow_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
enum { kNcclFloat32 = 7, kNcclSum = 0, kNcclWinCollSymmetric = 0x01 };
#define RAW_NCCL_REQUIRED(X)                                                 \
  X(ncclGetUniqueId, int, (ncclUniqueId*))                                   \
  X(ncclCommInitRank, int, (ncclComm_t*, int, ncclUniqueId, int))            \
  X(ncclCommDestroy, int, (ncclComm_t))                                      \
  X(ncclGetErrorString, const char*, (int))                                  \
  X(ncclAllReduce, int, (const void*, void*, size_t, int, int, ncclComm_t, CUstream))
/* NULL where this NCCL lacks them: the last error's text (2.13), buffer registration (2.19),
 * symmetric windows (2.27). */
#define RAW_NCCL_OPTIONAL(X)                                                 \
  X(ncclGetLastError, const char*, (ncclComm_t))                             \
  X(ncclMemAlloc, int, (void**, size_t))                                     \
  X(ncclMemFree, int, (void*))                                               \
  X(ncclCommRegister, int, (ncclComm_t, void*, size_t, void**))              \
  X(ncclCommDeregister, int, (ncclComm_t, void*))                            \
  X(ncclCommWindowRegister, int, (ncclComm_t, void*, size_t, ncclWindow_t*, int)) \
  X(ncclCommWindowDeregister, int, (ncclComm_t, ncclWindow_t))
#define RAW_NCCL_FIELD(name, ret, params) ret(*name) params;
static struct {
  RAW_NCCL_REQUIRED(RAW_NCCL_FIELD)
  RAW_NCCL_OPTIONAL(RAW_NCCL_FIELD)
} raw_nccl;
#undef RAW_NCCL_FIELD

/* Loads the library cgc uses: loaded by cgc first under the same soname, dlopen hands back that
 * very copy, so both sides run the same NCCL. */
static bool load_raw_nccl(char* why, size_t why_size) {
  const char* path = getenv("CGC_NCCL_LIBRARY");
  if (path == NULL || path[0] == '\0') path = "libnccl.so.2";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept for the life of the process */
  if (lib == NULL) {
    const char* e = dlerror();
    snprintf(why, why_size, "dlopen(%s): %s", path, e ? e : "unknown reason");
    return false;
  }
  const char* missing = NULL;
#define RAW_NCCL_RESOLVE(name, ret, params)        \
  *(void**)&raw_nccl.name = dlsym(lib, #name);     \
  if (raw_nccl.name == NULL && missing == NULL) missing = #name;
  RAW_NCCL_REQUIRED(RAW_NCCL_RESOLVE)
#undef RAW_NCCL_RESOLVE
#define RAW_NCCL_RESOLVE_OPTIONAL(name, ret, params) *(void**)&raw_nccl.name = dlsym(lib, #name);
  RAW_NCCL_OPTIONAL(RAW_NCCL_RESOLVE_OPTIONAL)
#undef RAW_NCCL_RESOLVE_OPTIONAL
  if (missing != NULL) snprintf(why, why_size, "%s has no %s", path, missing);
  return missing == NULL;
}

static _Noreturn void fail_nccl(const char* call, int result) {
  const char* detail = raw_nccl.ncclGetLastError != NULL ? raw_nccl.ncclGetLastError(NULL) : NULL;
  if (detail == NULL) detail = "";
  fail_with("%s failed: %s (ncclResult_t %d)%s%s", call, raw_nccl.ncclGetErrorString(result), result,
            detail[0] != '\0' ? "; NCCL says: " : "", detail);
}

#define NCCL(call)                          \
  do {                                      \
    int nr_ = raw_nccl.call;                \
    if (nr_ != 0) fail_nccl(#call, nr_);    \
  } while (0)

/* ---- what is measured ------------------------------------------------------------------------ */

enum {
  kKinds = 3, /* indexed by cgc_nccl_memory_t: plain, registered, symmetric */
  kSizes = 9,
  kOps = 4,
  kNodeTypes = 16, /* CUgraphNodeType values this program names; others count together */
  kHundred = 100,  /* all-reduces per launch in the 100-op variants */
  kWarmupOne = 20,
  kWarmupHundred = 3,
};
static const size_t kBufBytes = (size_t)64 << 20; /* one send and one recv buffer per side and kind */
/* Both buffers and slack; the same on every rank, as the collective pool creation wants. */
static const size_t kPoolBytes = ((size_t)2 * 64 + 4) << 20;
static const size_t kSmallBytes = (size_t)256 << 10; /* --quick stops here */
static const size_t kSizeBytes[kSizes] = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 67108864};
static const size_t kBreakdownBytes[] = {8, 4096, 262144};
static const unsigned kOneFloat = 0x3f800000u; /* 1.0f */

static const char* const kKindName[kKinds] = {"plain", "registered", "symmetric"};
static const char* const kKindHow[kKinds] = {
    "cgc: cgc_malloc | raw: cuMemAlloc",
    "cgc: cgc_nccl_pool_create(REGISTERED) + cgc_pool_malloc | raw: ncclMemAlloc + ncclCommRegister",
    "cgc: cgc_nccl_pool_create(SYMMETRIC) + cgc_pool_malloc | raw: ncclMemAlloc + ncclCommWindowRegister(symmetric)",
};

/* The four things timed at every size; a round runs cgc's op and then the raw side's. */
typedef enum { OP_EAGER, OP_RAW_EAGER, OP_GRAPH, OP_RAW_GRAPH } op_kind_t;
static const char* const kOpKey[kOps] = {"eager", "raw_eager", "cgc_graph", "raw_graph"};
static const char* const kOpLabel[kOps] = {"eager", "raw eager", "cgc graph", "raw graph"};

/* When a check ran: after the 1-op variants, the 100-op ones, or the breakdown's. */
enum { PHASE_ONE, PHASE_HUNDRED, PHASE_BREAKDOWN, kPhases };
static const char* const kPhaseName[kPhases] = {"1-op", "100-op", "breakdown"};

/* The graphs whose nodes are counted. */
enum { G_CGC_1, G_RAW_1, G_CGC_100, G_RAW_100, kGraphs };
static const char* const kGraphKey[kGraphs] = {"cgc_graph_1", "raw_graph_1", "cgc_graph_100", "raw_graph_100"};
static const char* const kGraphLabel[kGraphs] = {"cgc graph-1", "raw graph-1", "cgc graph-100", "raw graph-100"};
static const char* const kNodeTypeName[kNodeTypes + 1] = {
    "kernel",      "memcpy",        "memset",       "host",      "child graph",     "empty",
    "event wait",  "event record",  "ext semaphore signal", "ext semaphore wait", "mem alloc", "mem free",
    "batch mem op", "conditional",  "type 14",      "type 15",   "other"};

typedef struct census {
  bool taken;
  int nodes[kNodeTypes + 1]; /* by CUgraphNodeType; [kNodeTypes]: types beyond */
} census_t;

typedef struct breakdown {
  summary_t launch, sync, gpu, spin; /* us */
} breakdown_t;

/* Rank 0's figures for one kind and size (us), and every rank's failed checks. */
typedef struct size_result {
  bool measured, has_breakdown;
  int iters_one, iters_hundred;
  summary_t one[kOps];         /* host: launch + sync of one all-reduce */
  summary_t hundred[kOps];     /* host, per all-reduce: 100 launched, one sync */
  summary_t hundred_gpu[kOps]; /* GPU, per all-reduce: events around the launch */
  breakdown_t breakdown[kOps];
  census_t census[kGraphs];
  atomic_int wrong[kPhases][kOps]; /* ranks whose result was wrong */
} size_result_t;

typedef struct kind_result {
  bool measured;
  bool raw;                  /* the raw side has this kind */
  cgc_nccl_memory_t cgc_got; /* what cgc's pool is (an older NCCL may give less) */
  char raw_note[200];        /* why the raw side is missing */
  size_result_t size[kSizes];
} kind_result_t;

/* Everything the ranks and the parent share, in one anonymous shared mapping made before any
 * fork. Zero-filled by mmap, which is the initial state of its atomics and flags. */
typedef struct shared {
  pthread_barrier_t barrier;                    /* untimed steps */
  atomic_uint spin_arrived, spin_generation;    /* timed rounds */
  cgc_comm_id_t id;                             /* made by rank 0 */
  ncclUniqueId raw_id;
  /* what the probe found */
  bool usable;
  int devices, nccl_version, driver_version;
  uint32_t cgc_version;
  char device_name[128];
  char mixing[96]; /* NCCL_GRAPH_MIXING_SUPPORT once cgc has loaded NCCL */
  char why[640];
  kind_result_t kind[kKinds];
} shared_t;
static shared_t* sh;

/* Set by main before any rank starts; read-only afterwards. */
static struct {
  int ranks; /* 0: every visible GPU */
  bool processes, quick;
  size_t max_bytes;
  int iters; /* the 1-op count at small sizes; every count scales with it */
  int timeout_s;
  const char* json_path;
} cfg;

static bool size_wanted(int s) {
  return kSizeBytes[s] <= cfg.max_bytes && (!cfg.quick || kSizeBytes[s] <= kSmallBytes);
}

static bool breakdown_size(size_t bytes) {
  for (size_t i = 0; i < sizeof kBreakdownBytes / sizeof kBreakdownBytes[0]; i++)
    if (kBreakdownBytes[i] == bytes) return true;
  return false;
}

/* Timed rounds per size: 200 (1-op) and 30 (100-op) up to 2 MiB, fewer above, where a 100-op
 * round of 64 MiB takes about 30 ms on NVLink; the whole run at N = 2 stays well inside three
 * minutes. --iters N scales every count by N / 200, down to floors that keep a p90 meaningful. */
static int scaled(int base, int floor) {
  long long n = (long long)base * cfg.iters / 200;
  return n < floor ? floor : (int)n;
}
static int iters_one(size_t bytes) { return scaled(bytes <= ((size_t)2 << 20) ? 200 : 100, 10); }
static int iters_hundred(size_t bytes) {
  return scaled(bytes <= ((size_t)2 << 20) ? 30 : bytes <= ((size_t)16 << 20) ? 15 : 10, 5);
}

/* ---- barriers -------------------------------------------------------------------------------- */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Releases every rank within about a microsecond of the last arrival (see the header). The last
 * to arrive resets the count before it moves the generation on, so a rank that hurries into the
 * next barrier counts after the reset. A rank that has waited a while yields the CPU between
 * looks: where ranks and NCCL's threads outnumber the cores, a pure spin would keep the rank it
 * waits for from running. */
static void spin_barrier(void) {
  unsigned generation = atomic_load_explicit(&sh->spin_generation, memory_order_acquire);
  if (atomic_fetch_add_explicit(&sh->spin_arrived, 1, memory_order_acq_rel) == (unsigned)cfg.ranks - 1) {
    atomic_store_explicit(&sh->spin_arrived, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->spin_generation, 1, memory_order_release);
    return;
  }
  for (unsigned spins = 0; atomic_load_explicit(&sh->spin_generation, memory_order_acquire) == generation; spins++) {
    if (spins < 4096) cpu_relax();
    else sched_yield();
  }
}

static void barrier(void) { pthread_barrier_wait(&sh->barrier); }

/* ---- one rank ------------------------------------------------------------------------------- */

typedef struct rank {
  int rank;
  CUdevice dev;
  cgc_context_t ctx;
  /* cgc's side */
  cgc_stream_t stream;
  CUstream stream_native; /* for the driver's memsets on cgc's buffers */
  cgc_event_t start, end;
  cgc_comm_t comm;
  cgc_pool_t pool; /* the current kind's (NULL for plain) */
  void *send, *recv;
  /* the raw side */
  CUstream raw_stream;
  CUevent raw_start, raw_end;
  ncclComm_t raw_comm;
  bool raw_on;                 /* the raw side has the current kind */
  CUdeviceptr raw_plain[2];    /* plain: cuMemAlloc'ed */
  void* raw_base;              /* registered, symmetric: one ncclMemAlloc for both buffers */
  void* raw_handle;            /* registered */
  ncclWindow_t raw_window;     /* symmetric */
  void *raw_send, *raw_recv;
  double* samples[8]; /* two per op in time_ops, four per op in time_breakdown */
} rank_t;

/* One timed thing: an eager call or a graph replay, on cgc's side or the raw one. */
typedef struct op {
  op_kind_t kind;
  int reps;               /* all-reduces per launch */
  cgc_graph_t graph;      /* OP_GRAPH */
  CUgraph raw_graph;      /* OP_RAW_GRAPH */
  CUgraphExec raw_exec;
} op_t;

static bool is_raw(const op_t* op) { return op->kind == OP_RAW_EAGER || op->kind == OP_RAW_GRAPH; }

/* Everything between the timer's start and the wait: the all-reduces or the replay. */
static void launch(rank_t* r, const op_t* op, size_t count) {
  switch (op->kind) {
    case OP_EAGER:
      for (int i = 0; i < op->reps; i++)
        CGC(cgc_all_reduce(r->comm, r->send, r->recv, count, CGC_FLOAT32, CGC_SUM, r->stream));
      break;
    case OP_RAW_EAGER:
      for (int i = 0; i < op->reps; i++)
        NCCL(ncclAllReduce(r->raw_send, r->raw_recv, count, kNcclFloat32, kNcclSum, r->raw_comm, r->raw_stream));
      break;
    case OP_GRAPH:
      CGC(cgc_graph_launch(op->graph, r->stream));
      break;
    case OP_RAW_GRAPH:
      CU(cuGraphLaunch(op->raw_exec, r->raw_stream));
      break;
  }
}

/* The blocking wait of `op`'s side. */
static void wait_done(rank_t* r, const op_t* op) {
  if (is_raw(op)) CU(cuStreamSynchronize(r->raw_stream));
  else CGC(cgc_stream_synchronize(r->stream));
}

/* The same wait by asking the stream until it is done: no sleep, no wake-up. */
static void poll_done(rank_t* r, const op_t* op) {
  if (is_raw(op)) {
    CUresult q;
    while ((q = drv.cuStreamQuery(r->raw_stream)) == CUDA_ERROR_NOT_READY) continue;
    if (q != CUDA_SUCCESS) fail_cu("cuStreamQuery(raw_stream)", q);
  } else {
    int done = 0;
    while (!done) CGC(cgc_stream_query(r->stream, &done));
  }
}

/* Records the start (end false) or end event of `op`'s side on its stream. */
static void mark(rank_t* r, const op_t* op, bool end) {
  if (is_raw(op)) CU(cuEventRecord(end ? r->raw_end : r->raw_start, r->raw_stream));
  else CGC(cgc_event_record(end ? r->end : r->start, r->stream));
}

static double elapsed_us(rank_t* r, const op_t* op) {
  float ms = 0;
  if (is_raw(op)) CU(cuEventElapsedTime(&ms, r->raw_start, r->raw_end));
  else CGC(cgc_event_elapsed_ms(r->start, r->end, &ms));
  return ms * 1000.0;
}

/* Zeroes the results `ops` write and waits: every variant starts from nothing. */
static void clear_results(rank_t* r, const op_t* ops, int n, size_t count) {
  for (int k = 0; k < n; k++) {
    if (is_raw(&ops[k])) {
      CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->raw_recv, 0, count, r->raw_stream));
      CU(cuStreamSynchronize(r->raw_stream));
    } else {
      CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->recv, 0, count, r->stream_native));
      CGC(cgc_stream_synchronize(r->stream));
    }
  }
}

/* Counts this rank in `wrong` for each op whose result's first or last element is not N, the sum
 * of N ones. */
static void check_results(rank_t* r, const op_t* ops, int n, size_t count, atomic_int* wrong, const char* what) {
  for (int k = 0; k < n; k++) {
    wait_done(r, &ops[k]);
    CUdeviceptr recv = (CUdeviceptr)(uintptr_t)(is_raw(&ops[k]) ? r->raw_recv : r->recv);
    float first = 0, last = 0;
    CU(cuMemcpyDtoH(&first, recv, sizeof first));
    CU(cuMemcpyDtoH(&last, recv + (count - 1) * sizeof(float), sizeof last));
    if (first == (float)cfg.ranks && last == (float)cfg.ranks) continue;
    atomic_fetch_add(&wrong[ops[k].kind], 1);
    fprintf(stderr, "nccl_bench: rank %d, %s, %zu B: %s result %g ... %g, expected %d\n", r->rank, what,
            count * sizeof(float), kOpLabel[ops[k].kind], first, last, cfg.ranks);
  }
}

/* Times the `n` ops interleaved: each round releases the ranks at the barrier once per op, then
 * times that op's launch to the end of its stream's synchronisation, with events around the launch
 * when `gpu` is given. Figures per all-reduce, stored by rank 0 at [op kind]. */
static void time_ops(rank_t* r, const op_t* ops, int n, size_t count, int warmup, int iters, summary_t* host,
                     summary_t* gpu) {
  for (int i = 0; i < warmup + iters; i++) {
    for (int k = 0; k < n; k++) {
      const op_t* op = &ops[k];
      spin_barrier();
      int64_t t0 = now_ns();
      if (gpu != NULL) mark(r, op, false);
      launch(r, op, count);
      if (gpu != NULL) mark(r, op, true);
      wait_done(r, op);
      int64_t t1 = now_ns();
      if (i < warmup) continue;
      r->samples[2 * k][i - warmup] = (double)(t1 - t0) / 1e3 / op->reps;
      if (gpu != NULL) r->samples[2 * k + 1][i - warmup] = elapsed_us(r, op) / op->reps;
    }
  }
  if (r->rank != 0) return;
  for (int k = 0; k < n; k++) {
    host[ops[k].kind] = summarize(r->samples[2 * k], (size_t)iters);
    if (gpu != NULL) gpu[ops[k].kind] = summarize(r->samples[2 * k + 1], (size_t)iters);
  }
}

/* Where one launch + sync spends its time: per round and op, once with the launch call and the
 * synchronisation call timed apart (events around the launch for the GPU time), once with the
 * blocking synchronisation replaced by polling. */
static void time_breakdown(rank_t* r, const op_t* ops, int n, size_t count, int warmup, int iters, breakdown_t* out) {
  for (int i = 0; i < warmup + iters; i++) {
    for (int k = 0; k < n; k++) {
      const op_t* op = &ops[k];
      spin_barrier();
      mark(r, op, false);
      int64_t t0 = now_ns();
      launch(r, op, count);
      int64_t t1 = now_ns();
      mark(r, op, true);
      int64_t t2 = now_ns();
      wait_done(r, op);
      int64_t t3 = now_ns();
      if (i < warmup) continue;
      r->samples[4 * k][i - warmup] = (double)(t1 - t0) / 1e3;
      r->samples[4 * k + 1][i - warmup] = (double)(t3 - t2) / 1e3;
      r->samples[4 * k + 2][i - warmup] = elapsed_us(r, op);
    }
    for (int k = 0; k < n; k++) {
      const op_t* op = &ops[k];
      spin_barrier();
      int64_t t0 = now_ns();
      launch(r, op, count);
      poll_done(r, op);
      int64_t t1 = now_ns();
      if (i >= warmup) r->samples[4 * k + 3][i - warmup] = (double)(t1 - t0) / 1e3;
    }
  }
  if (r->rank != 0) return;
  for (int k = 0; k < n; k++) {
    breakdown_t* b = &out[ops[k].kind];
    b->launch = summarize(r->samples[4 * k], (size_t)iters);
    b->sync = summarize(r->samples[4 * k + 1], (size_t)iters);
    b->gpu = summarize(r->samples[4 * k + 2], (size_t)iters);
    b->spin = summarize(r->samples[4 * k + 3], (size_t)iters);
  }
}

/* One variant: from zeroed results, timed, checked. */
static void run_variant(rank_t* r, const op_t* ops, int n, size_t count, int warmup, int iters, summary_t* host,
                        summary_t* gpu, atomic_int* wrong, const char* what) {
  clear_results(r, ops, n, count);
  time_ops(r, ops, n, count, warmup, iters, host, gpu);
  check_results(r, ops, n, count, wrong, what);
}

/* A graph of `reps` all-reduces through cgc. ThreadLocal: in --threads the other ranks' threads
 * keep making calls (synchronisations, instantiations) that a Global capture would count against
 * this one. Uploaded, so that its first replay costs what the others do. */
static cgc_graph_t capture_cgc(rank_t* r, size_t count, int reps) {
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
static void capture_raw(rank_t* r, size_t count, int reps, op_t* op) {
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
static void take_census(CUgraph g, census_t* c) {
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

/* Whether this NCCL has the raw side's calls for `kind`; if not, `note` says what it lacks. */
static bool raw_kind_available(int kind, char* note, size_t note_size) {
  const char* missing = NULL;
  if (kind == CGC_NCCL_MEMORY_PLAIN) return true;
  if (raw_nccl.ncclMemAlloc == NULL) missing = "ncclMemAlloc";
  else if (raw_nccl.ncclMemFree == NULL) missing = "ncclMemFree";
  else if (kind == CGC_NCCL_MEMORY_REGISTERED && raw_nccl.ncclCommRegister == NULL) missing = "ncclCommRegister";
  else if (kind == CGC_NCCL_MEMORY_REGISTERED && raw_nccl.ncclCommDeregister == NULL) missing = "ncclCommDeregister";
  else if (kind == CGC_NCCL_MEMORY_SYMMETRIC && raw_nccl.ncclCommWindowRegister == NULL)
    missing = "ncclCommWindowRegister";
  else if (kind == CGC_NCCL_MEMORY_SYMMETRIC && raw_nccl.ncclCommWindowDeregister == NULL)
    missing = "ncclCommWindowDeregister";
  if (missing != NULL)
    snprintf(note, note_size, "this NCCL has no %s (registration needs NCCL >= 2.19, symmetric windows >= 2.27): "
             "no raw %s side", missing, kKindName[kind]);
  return missing == NULL;
}

/* Both sides' buffers of `kind`, send filled with 1.0f. */
static void setup_kind(rank_t* r, int kind) {
  cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
  if (kind == CGC_NCCL_MEMORY_PLAIN) {
    CGC(cgc_malloc(r->ctx, kBufBytes, r->stream, &r->send));
    CGC(cgc_malloc(r->ctx, kBufBytes, r->stream, &r->recv));
  } else {
    /* Collective, with the same capacity and kind on every rank; both blocks are then at the same
     * offsets everywhere, as symmetric kernels need. */
    CGC(cgc_nccl_pool_create(r->comm, kPoolBytes, (cgc_nccl_memory_t)kind, &r->pool, &got));
    CGC(cgc_pool_malloc(r->pool, kBufBytes, r->stream, &r->send));
    CGC(cgc_pool_malloc(r->pool, kBufBytes, r->stream, &r->recv));
  }
  CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->send, kOneFloat, kBufBytes / 4, r->stream_native));
  CGC(cgc_stream_synchronize(r->stream));

  char note[sizeof sh->kind[0].raw_note] = "";
  r->raw_on = raw_kind_available(kind, note, sizeof note);
  if (kind == CGC_NCCL_MEMORY_PLAIN) {
    CU(cuMemAlloc(&r->raw_plain[0], kBufBytes));
    CU(cuMemAlloc(&r->raw_plain[1], kBufBytes));
    r->raw_send = (void*)(uintptr_t)r->raw_plain[0];
    r->raw_recv = (void*)(uintptr_t)r->raw_plain[1];
  } else if (r->raw_on) {
    /* One allocation and one registration for both buffers, as cgc's pool has. */
    NCCL(ncclMemAlloc(&r->raw_base, 2 * kBufBytes));
    if (kind == CGC_NCCL_MEMORY_REGISTERED)
      NCCL(ncclCommRegister(r->raw_comm, r->raw_base, 2 * kBufBytes, &r->raw_handle));
    else
      NCCL(ncclCommWindowRegister(r->raw_comm, r->raw_base, 2 * kBufBytes, &r->raw_window, kNcclWinCollSymmetric));
    r->raw_send = r->raw_base;
    r->raw_recv = (char*)r->raw_base + kBufBytes;
  }
  if (r->raw_on) {
    CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->raw_send, kOneFloat, kBufBytes / 4, r->raw_stream));
    CU(cuStreamSynchronize(r->raw_stream));
  }
  if (r->rank == 0) {
    kind_result_t* kr = &sh->kind[kind];
    kr->measured = true;
    kr->raw = r->raw_on;
    kr->cgc_got = got;
    snprintf(kr->raw_note, sizeof kr->raw_note, "%s", note);
  }
}

/* Frees what setup_kind made, blocks before their pool (whose release is collective, as is the
 * raw window's deregistration: every rank gets here in the same order). */
static void teardown_kind(rank_t* r, int kind) {
  CU(cuStreamSynchronize(r->raw_stream));
  CGC(cgc_free(r->send));
  CGC(cgc_free(r->recv));
  CGC(cgc_stream_synchronize(r->stream));
  if (r->pool != NULL) CGC(cgc_pool_release(r->pool));
  r->pool = NULL;
  r->send = r->recv = NULL;
  if (kind == CGC_NCCL_MEMORY_PLAIN) {
    CU(cuMemFree(r->raw_plain[0]));
    CU(cuMemFree(r->raw_plain[1]));
  } else if (r->raw_on) {
    if (kind == CGC_NCCL_MEMORY_REGISTERED) NCCL(ncclCommDeregister(r->raw_comm, r->raw_handle));
    else NCCL(ncclCommWindowDeregister(r->raw_comm, r->raw_window));
    NCCL(ncclMemFree(r->raw_base));
  }
  r->raw_send = r->raw_recv = r->raw_base = NULL;
  barrier();
}

/* One rank from start to end: its device, both sides' communicators, every kind and size. */
static void run_rank(int rank) {
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

/* ---- starting the ranks ------------------------------------------------------------------- */

/* What the run needs, found in the process that calls it: GPUs, the driver for the raw side, NCCL
 * for both sides. Notes the header's facts in the shared mapping; sh->usable false with the reason
 * in sh->why when the run cannot go on. */
static void probe(void) {
  char why[512] = "";
  int devices = 0;
  cgc_status_t st = cgc_device_count(&devices);
  sh->devices = devices;
  if (st != CGC_SUCCESS || devices < 2 || !bench_driver_load(why, sizeof why)) {
    snprintf(sh->why, sizeof sh->why, "no GPU pair here (%d device(s); %s%s)", devices,
             st != CGC_SUCCESS ? cgc_last_error() : "", why);
    return;
  }
  sh->driver_version = drv.version;
  sh->cgc_version = cgc_version();
  CUdevice dev;
  if (drv.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      drv.cuDeviceGetName(sh->device_name, sizeof sh->device_name, dev) != CUDA_SUCCESS)
    snprintf(sh->device_name, sizeof sh->device_name, "?");
  if (cgc_nccl_version(&sh->nccl_version) != CGC_SUCCESS) {
    snprintf(sh->why, sizeof sh->why, "no NCCL here (%s)", cgc_last_error());
    return;
  }
  const char* mixing = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  const char* cgc_mixing = getenv("CGC_NCCL_GRAPH_MIXING");
  snprintf(sh->mixing, sizeof sh->mixing, "%s%s%s%s", mixing != NULL ? mixing : "default (1)",
           cgc_mixing != NULL ? " (CGC_NCCL_GRAPH_MIXING=" : "", cgc_mixing != NULL ? cgc_mixing : "",
           cgc_mixing != NULL ? ")" : "");
  if (!load_raw_nccl(why, sizeof why)) {
    snprintf(sh->why, sizeof sh->why, "cgc found NCCL but this program cannot load it for the raw side (%s)", why);
    return;
  }
  sh->usable = true;
}

/* Waits for the children `pids` (-1 once reaped) until all have ended or the timeout passes. The
 * first that fails ends the others, which would wait for it forever; those still running at the
 * timeout are named as hung and killed. 0 when every child ended with status 0, else 2. */
static int wait_children(pid_t* pids, int n, const char* what) {
  int64_t deadline = now_ns() + (int64_t)cfg.timeout_s * 1000000000;
  int running = n, status = 0;
  while (running > 0 && now_ns() < deadline) {
    bool reaped = false;
    for (int i = 0; i < n; i++) {
      int ws = 0;
      if (pids[i] < 0 || waitpid(pids[i], &ws, WNOHANG) != pids[i]) continue;
      pids[i] = -1;
      running--;
      reaped = true;
      if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) continue;
      if (status == 0) {
        if (WIFEXITED(ws)) printf("nccl_bench: %s %d failed (exit status %d)", what, i, WEXITSTATUS(ws));
        else printf("nccl_bench: %s %d was killed by signal %d", what, i, WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
        printf("%s\n", running > 0 ? "; ending the others" : "");
        for (int j = 0; j < n; j++)
          if (pids[j] > 0) kill(pids[j], SIGKILL);
      }
      status = 2;
    }
    if (!reaped) nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
  }
  for (int i = 0; i < n; i++) {
    if (pids[i] < 0) continue;
    printf("nccl_bench: %s %d hung: still running after %d s; killed\n", what, i, cfg.timeout_s);
    kill(pids[i], SIGKILL);
    waitpid(pids[i], NULL, 0);
    status = 2;
  }
  fflush(stdout);
  return status;
}

/* A child that ends with the parent, so that no rank outlives an interrupted run. */
static void become_child(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(2); /* the parent was gone before prctl */
}

/* fork() with stdio flushed, so that no child prints the parent's buffered lines again. */
static pid_t fork_flushed(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) fail_with("fork failed: %s", strerror(errno));
  return pid;
}

/* --processes: the probe in a child of its own, so this process never touches CUDA. */
static int probe_in_child(void) {
  pid_t parent = getpid();
  pid_t pid = fork_flushed();
  if (pid == 0) {
    become_child(parent);
    probe();
    exit(0);
  }
  return wait_children(&pid, 1, "GPU probe");
}

static int run_processes(void) {
  pid_t parent = getpid();
  pid_t* pids = xmalloc((size_t)cfg.ranks * sizeof *pids);
  for (int i = 0; i < cfg.ranks; i++) pids[i] = -1;
  for (int rank = 0; rank < cfg.ranks; rank++) {
    pid_t pid = fork_flushed();
    if (pid == 0) {
      become_child(parent);
      static char tool[40];
      snprintf(tool, sizeof tool, "nccl_bench rank %d", rank);
      bench_tool = tool;
      /* cgc loads NCCL first, from wherever it finds it; the raw side's dlopen by soname then gets
       * that copy, as in the probe. */
      char why[512] = "";
      int version = 0;
      if (!bench_driver_load(why, sizeof why)) fail_with("%s", why);
      CGC(cgc_nccl_version(&version));
      if (!load_raw_nccl(why, sizeof why)) fail_with("%s", why);
      run_rank(rank);
      exit(0);
    }
    pids[rank] = pid;
  }
  int status = wait_children(pids, cfg.ranks, "rank");
  free(pids);
  return status;
}

static void* rank_thread(void* arg) {
  run_rank((int)(intptr_t)arg);
  return NULL;
}

/* --threads: a thread per rank. A thread cannot be killed alone, so when the timeout passes the
 * hung ranks are named and the whole process ends. */
static int run_threads(void) {
  pthread_t* threads = xmalloc((size_t)cfg.ranks * sizeof *threads);
  bool* joined = xmalloc((size_t)cfg.ranks * sizeof *joined);
  for (int rank = 0; rank < cfg.ranks; rank++) {
    joined[rank] = false;
    if (pthread_create(&threads[rank], NULL, rank_thread, (void*)(intptr_t)rank) != 0)
      fail_with("pthread_create failed");
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += cfg.timeout_s;
  bool hung = false;
  for (int rank = 0; rank < cfg.ranks; rank++)
    joined[rank] = pthread_timedjoin_np(threads[rank], NULL, &deadline) == 0;
  for (int rank = 0; rank < cfg.ranks; rank++) {
    if (!joined[rank] && pthread_tryjoin_np(threads[rank], NULL) != 0) {
      printf("nccl_bench: rank %d hung: still running after %d s\n", rank, cfg.timeout_s);
      hung = true;
    }
  }
  if (hung) {
    fflush(NULL);
    _exit(2); /* exit() would run handlers under the hung threads' feet */
  }
  free(threads);
  free(joined);
  return 0;
}

/* ---- the report ------------------------------------------------------------------------------- */

static double ratio(summary_t a, summary_t b) { return a.median > 0 && b.median > 0 ? a.median / b.median : NAN; }

static const char* memory_name(cgc_nccl_memory_t m) {
  return (unsigned)m < kKinds ? kKindName[m] : "?";
}

/* "symmetric", or "symmetric (cgc got registered)" when an older NCCL gave cgc's pool less. */
static void kind_label(char* buf, size_t cap, int kind) {
  const kind_result_t* kr = &sh->kind[kind];
  if ((int)kr->cgc_got == kind) snprintf(buf, cap, "%s", kKindName[kind]);
  else snprintf(buf, cap, "%s (cgc got %s)", kKindName[kind], memory_name(kr->cgc_got));
}

static void print_cell(summary_t s, bool present) {
  if (present) printf(" | %8.2f / %8.2f", s.median, s.p90);
  else printf(" | %19s", "-");
}

static void print_ratio(double v) {
  if (v == v) printf(" | %9.3f", v);
  else printf(" | %9s", "-");
}

/* One of a kind's tables: rows are sizes, cells median / p90 per op, then the ratios of medians,
 * and the checks of `phase` (none when negative). */
static void print_table(int kind, const char* title, int which, int phase) {
  kind_result_t* kr = &sh->kind[kind];
  printf("\n%s, us (median / p90)\n", title);
  printf("%-8s", "size");
  for (int op = 0; op < kOps; op++) printf(" | %19s", kOpLabel[op]);
  printf(" | %9s | %9s | %9s%s\n", "graph c/r", "eager c/r", "gr/eager", phase >= 0 ? " | check" : "");
  for (int s = 0; s < kSizes; s++) {
    size_result_t* sr = &kr->size[s];
    if (!sr->measured) continue;
    const summary_t* row = which == 0 ? sr->one : which == 1 ? sr->hundred : sr->hundred_gpu;
    char b[32];
    bytes_label(b, sizeof b, kSizeBytes[s]);
    printf("%-8s", b);
    for (int op = 0; op < kOps; op++) print_cell(row[op], kr->raw || (op != OP_RAW_EAGER && op != OP_RAW_GRAPH));
    print_ratio(kr->raw ? ratio(row[OP_GRAPH], row[OP_RAW_GRAPH]) : NAN);
    print_ratio(kr->raw ? ratio(row[OP_EAGER], row[OP_RAW_EAGER]) : NAN);
    print_ratio(ratio(row[OP_GRAPH], row[OP_EAGER]));
    int wrong = 0;
    for (int op = 0; phase >= 0 && op < kOps; op++) wrong += atomic_load(&sr->wrong[phase][op]);
    if (phase < 0) printf("\n");
    else if (wrong == 0) printf(" | ok\n");
    else printf(" | WRONG SUM (%d)\n", wrong);
  }
}

static void print_breakdown(int kind) {
  const kind_result_t* kr = &sh->kind[kind];
  bool any = false;
  for (int s = 0; s < kSizes; s++) any = any || kr->size[s].has_breakdown;
  if (!any) return;
  printf("\nbreakdown of one all-reduce, us (median / p90): the launch call alone; the sync call alone; GPU time\n"
         "(events around the launch); launch + polling the stream until done in place of the blocking sync;\n"
         "launch + blocking sync from the 1-op table (median)\n");
  printf("%-8s | %-9s | %19s | %19s | %19s | %19s | %8s\n", "size", "variant", "launch", "sync", "GPU",
         "launch + spin", "blocking");
  for (int s = 0; s < kSizes; s++) {
    const size_result_t* sr = &kr->size[s];
    if (!sr->has_breakdown) continue;
    char b[32];
    bytes_label(b, sizeof b, kSizeBytes[s]);
    for (int op = 0; op < kOps; op++) {
      if (!kr->raw && (op == OP_RAW_EAGER || op == OP_RAW_GRAPH)) continue;
      const breakdown_t* bd = &sr->breakdown[op];
      printf("%-8s | %-9s", op == 0 ? b : "", kOpLabel[op]);
      print_cell(bd->launch, true);
      print_cell(bd->sync, true);
      print_cell(bd->gpu, true);
      print_cell(bd->spin, true);
      printf(" | %8.2f\n", sr->one[op].median);
    }
  }
}

/* "kernel 1, host 0, event wait 0, event record 1 (2 nodes)": every type present, and the host
 * and event types always, since whether NCCL adds them is the question. */
static void census_text(const census_t* c, char* buf, size_t cap) {
  size_t len = 0;
  int total = 0;
  buf[0] = '\0';
  for (int t = 0; t <= kNodeTypes; t++) {
    total += c->nodes[t];
    bool always = t == CU_GRAPH_NODE_TYPE_HOST || t == CU_GRAPH_NODE_TYPE_WAIT_EVENT ||
                  t == CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    if (c->nodes[t] == 0 && !always) continue;
    int w = snprintf(buf + len, cap - len, "%s%s %d", len ? ", " : "", kNodeTypeName[t], c->nodes[t]);
    if (w < 0 || (size_t)w >= cap - len) return;
    len += (size_t)w;
  }
  snprintf(buf + len, cap - len, " (%d node%s)", total, total == 1 ? "" : "s");
}

static bool same_census(const census_t* a, const census_t* b) {
  return memcmp(a->nodes, b->nodes, sizeof a->nodes) == 0;
}

/* Each graph's census at the first size, and at any later size where it differs. */
static void print_census(int kind) {
  const kind_result_t* kr = &sh->kind[kind];
  printf("\ngraph nodes by type (cgc's graphs hold, besides NCCL's nodes, one event record node of cgc's\n"
         "own: its completion record):\n");
  for (int g = 0; g < kGraphs; g++) {
    const census_t* shown = NULL;
    for (int s = 0; s < kSizes; s++) {
      const census_t* c = &kr->size[s].census[g];
      if (!kr->size[s].measured || !c->taken || (shown != NULL && same_census(shown, c))) continue;
      char text[400], b[32];
      census_text(c, text, sizeof text);
      bytes_label(b, sizeof b, kSizeBytes[s]);
      printf("  %-13s %-4s %-7s %s\n", shown == NULL ? kGraphLabel[g] : "", shown == NULL ? "at" : "from", b, text);
      shown = c;
    }
  }
}

static void print_header(void) {
  uint32_t v = sh->cgc_version;
  int nv = sh->nccl_version;
  size_t largest = kSizeBytes[0];
  for (int s = 0; s < kSizes; s++)
    if (size_wanted(s)) largest = kSizeBytes[s];
  printf("all_reduce (float32 sum) on %d x %s as %s; NCCL %d.%d.%d, driver %d.%d, cgc %u.%u.%u; NVLS off "
         "(NCCL_NVLS_ENABLE=0), NCCL_GRAPH_MIXING_SUPPORT=%s\n",
         cfg.ranks, sh->device_name, cfg.processes ? "processes" : "threads", nv / 10000, nv % 10000 / 100, nv % 100,
         sh->driver_version / 1000, sh->driver_version % 1000 / 10, v >> 16, (v >> 8) & 0xffu, v & 0xffu,
         sh->mixing);
  printf("timed rounds per size: 1-op %d to %d after %d warm-up, 100-op %d to %d after %d warm-up; rank 0's medians "
         "and p90; cgc and raw alternate\n",
         iters_one(kSizeBytes[0]), iters_one(largest), kWarmupOne, iters_hundred(kSizeBytes[0]), iters_hundred(largest),
         kWarmupHundred);
  fflush(stdout);
}

static void print_results(void) {
  for (int kind = 0; kind < kKinds; kind++) {
    const kind_result_t* kr = &sh->kind[kind];
    if (!kr->measured) continue;
    char label[64];
    kind_label(label, sizeof label, kind);
    printf("\n== %s buffers (%s)\n", label, kKindHow[kind]);
    if ((int)kr->cgc_got != kind)
      printf("note: this NCCL gave cgc's pool %s memory where %s was asked\n", memory_name(kr->cgc_got),
             kKindName[kind]);
    if (!kr->raw) printf("note: %s\n", kr->raw_note);
    print_table(kind, "1 all-reduce: launch + stream sync (host)", 0, PHASE_ONE);
    print_table(kind, "100 all-reduces, then one sync: per all-reduce (host)", 1, PHASE_HUNDRED);
    print_table(kind, "100 all-reduces: per all-reduce from events around the launch (GPU)", 2, -1);
    print_breakdown(kind);
    print_census(kind);
  }
}

static void json_summary(json_t* j, const char* op, const char* variant, summary_t s) {
  char key[80];
  snprintf(key, sizeof key, "%s_%s_median", op, variant);
  jnum(j, key, s.median);
  snprintf(key, sizeof key, "%s_%s_p90", op, variant);
  jnum(j, key, s.p90);
}

/* The same figures as the tables, one object per kind and size; returns the failed checks. */
static int write_json(void) {
  int failed = 0;
  json_t j;
  json_begin(&j);
  jstr(&j, "tool", "nccl_bench");
  jstr(&j, "device", sh->device_name);
  jint(&j, "ranks", cfg.ranks);
  jstr(&j, "mode", cfg.processes ? "processes" : "threads");
  jint(&j, "nccl_version", sh->nccl_version);
  jint(&j, "driver_version", sh->driver_version);
  jint(&j, "cgc_version_code", sh->cgc_version);
  jstr(&j, "nccl_nvls_enable", "0");
  jstr(&j, "nccl_graph_mixing_support", sh->mixing);
  jstr(&j, "unit", "us; _1: launch + sync of one all-reduce (host); _100: per all-reduce of 100 then one sync "
                   "(host); _100_gpu: per all-reduce from events around the launch");
  jint(&j, "warmup_1", kWarmupOne);
  jint(&j, "warmup_100", kWarmupHundred);
  jopen(&j, "results", '[');
  for (int kind = 0; kind < kKinds; kind++) {
    const kind_result_t* kr = &sh->kind[kind];
    for (int s = 0; s < kSizes; s++) {
      size_result_t* sr = &sh->kind[kind].size[s];
      if (!kr->measured || !sr->measured) continue;
      jopen(&j, NULL, '{');
      jstr(&j, "kind", kKindName[kind]);
      jstr(&j, "cgc_memory", memory_name(kr->cgc_got));
      jbool(&j, "raw_side", kr->raw);
      if (!kr->raw) jstr(&j, "raw_note", kr->raw_note);
      jint(&j, "bytes", (long long)kSizeBytes[s]);
      jint(&j, "iterations_1", sr->iters_one);
      jint(&j, "iterations_100", sr->iters_hundred);
      for (int op = 0; op < kOps; op++) {
        if (!kr->raw && (op == OP_RAW_EAGER || op == OP_RAW_GRAPH)) continue;
        json_summary(&j, kOpKey[op], "1", sr->one[op]);
        json_summary(&j, kOpKey[op], "100", sr->hundred[op]);
        json_summary(&j, kOpKey[op], "100_gpu", sr->hundred_gpu[op]);
      }
      jnum(&j, "graph_over_eager_1", ratio(sr->one[OP_GRAPH], sr->one[OP_EAGER]));
      jnum(&j, "graph_over_eager_100", ratio(sr->hundred[OP_GRAPH], sr->hundred[OP_EAGER]));
      if (kr->raw) {
        jnum(&j, "cgc_over_raw_graph_1", ratio(sr->one[OP_GRAPH], sr->one[OP_RAW_GRAPH]));
        jnum(&j, "cgc_over_raw_eager_1", ratio(sr->one[OP_EAGER], sr->one[OP_RAW_EAGER]));
        jnum(&j, "cgc_over_raw_graph_100", ratio(sr->hundred[OP_GRAPH], sr->hundred[OP_RAW_GRAPH]));
        jnum(&j, "cgc_over_raw_graph_100_gpu", ratio(sr->hundred_gpu[OP_GRAPH], sr->hundred_gpu[OP_RAW_GRAPH]));
      }
      jopen(&j, "failed_checks", '{');
      for (int phase = 0; phase < kPhases; phase++) {
        int wrong = 0;
        for (int op = 0; op < kOps; op++) wrong += atomic_load(&sr->wrong[phase][op]);
        jint(&j, kPhaseName[phase], wrong);
        failed += wrong;
      }
      jclose(&j, '}');
      if (sr->has_breakdown) {
        jopen(&j, "breakdown", '{');
        for (int op = 0; op < kOps; op++) {
          if (!kr->raw && (op == OP_RAW_EAGER || op == OP_RAW_GRAPH)) continue;
          const breakdown_t* b = &sr->breakdown[op];
          jopen(&j, kOpKey[op], '{');
          json_summary(&j, "launch", "call", b->launch);
          json_summary(&j, "sync", "call", b->sync);
          json_summary(&j, "gpu", "events", b->gpu);
          json_summary(&j, "launch", "spin", b->spin);
          jclose(&j, '}');
        }
        jclose(&j, '}');
      }
      jopen(&j, "nodes", '{');
      for (int g = 0; g < kGraphs; g++) {
        const census_t* c = &sr->census[g];
        if (!c->taken) continue;
        jopen(&j, kGraphKey[g], '{');
        for (int t = 0; t <= kNodeTypes; t++)
          if (c->nodes[t] != 0) jint(&j, kNodeTypeName[t], c->nodes[t]);
        jclose(&j, '}');
      }
      jclose(&j, '}');
      jclose(&j, '}');
    }
  }
  jclose(&j, ']');
  jint(&j, "failed_checks", failed);
  if (!json_finish(&j, cfg.json_path)) fail_with("cannot write %s", cfg.json_path);
  return failed;
}

/* ---- main ------------------------------------------------------------------------------------- */

/* NVLink multicast stays off in every process of the run (see the header); set before anything
 * loads NCCL, and inherited by the rank processes. */
static void keep_nvls_off(void) {
  const char* was = getenv("NCCL_NVLS_ENABLE");
  if (was != NULL && strcmp(was, "0") != 0)
    fprintf(stderr, "nccl_bench: warning: NCCL_NVLS_ENABLE=%s overridden, forced to 0 (NVLink multicast stays off)\n",
            was);
  if (setenv("NCCL_NVLS_ENABLE", "0", 1) != 0) fail_with("setenv(NCCL_NVLS_ENABLE) failed");
}

static void usage(FILE* to) {
  fprintf(to,
          "usage: nccl_bench [--threads | --processes] [--ranks N] [--quick] [--max-bytes B] [--iters N]\n"
          "                  [--timeout S] [--json FILE]\n"
          "  --threads      one process, a thread per GPU (default)\n"
          "  --processes    a process per GPU, as torchrun and vLLM run ranks\n"
          "  --ranks N      N >= 2 GPUs (default: every visible GPU)\n"
          "  --quick        sizes 8 B to 256 KiB only\n"
          "  --max-bytes B  largest size measured (suffix K or M for KiB, MiB; default 64M)\n"
          "  --iters N      timed rounds of the 1-op variants at small sizes (default 200); every count scales\n"
          "  --timeout S    seconds the ranks may take before they count as hung (default 600)\n"
          "  --json FILE    all figures as JSON\n");
}

static bool parse_int(const char* s, long lo, long hi, int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_bytes(const char* s, size_t* out) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned long long unit = 1;
  if (*end == 'K' || *end == 'k') unit = 1ull << 10;
  else if (*end == 'M' || *end == 'm') unit = 1ull << 20;
  if (unit != 1) end++;
  bool suffix_ok = *end == '\0' || (unit != 1 && strcmp(end, "iB") == 0);
  if (!suffix_ok || v > (1ull << 40)) return false;
  *out = (size_t)(v * unit);
  return true;
}

int main(int argc, char** argv) {
  bench_tool = "nccl_bench";
  keep_nvls_off();
  cfg.max_bytes = kSizeBytes[kSizes - 1];
  cfg.iters = 200;
  cfg.timeout_s = 600;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    bool has_value = i + 1 < argc;
    bool ok = true;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--threads") == 0) {
      cfg.processes = false;
    } else if (strcmp(a, "--processes") == 0) {
      cfg.processes = true;
    } else if (strcmp(a, "--quick") == 0) {
      cfg.quick = true;
    } else if (strcmp(a, "--json") == 0 && has_value) {
      cfg.json_path = argv[++i];
    } else if (strcmp(a, "--ranks") == 0 && has_value) {
      ok = parse_int(argv[++i], 2, 4096, &cfg.ranks);
    } else if (strcmp(a, "--iters") == 0 && has_value) {
      ok = parse_int(argv[++i], 1, 1000000, &cfg.iters);
    } else if (strcmp(a, "--timeout") == 0 && has_value) {
      ok = parse_int(argv[++i], 1, 1000000, &cfg.timeout_s);
    } else if (strcmp(a, "--max-bytes") == 0 && has_value) {
      ok = parse_bytes(argv[++i], &cfg.max_bytes) && cfg.max_bytes >= kSizeBytes[0];
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr, "nccl_bench: bad argument near '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }

  /* Before any fork: what the ranks and the parent share. */
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) fail_with("mmap of the shared region failed: %s", strerror(errno));
  if (cfg.processes) {
    int st = probe_in_child();
    if (st != 0) return st;
  } else {
    probe();
  }
  if (!sh->usable) {
    printf("nccl_bench: %s: nothing measured\n", sh->why);
    return 1;
  }
  if (cfg.ranks == 0) cfg.ranks = sh->devices;
  if (cfg.ranks > sh->devices) {
    printf("nccl_bench: --ranks %d but only %d GPU(s) here: nothing measured\n", cfg.ranks, sh->devices);
    return 1;
  }
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, cfg.processes ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE);
  if (pthread_barrier_init(&sh->barrier, &attr, (unsigned)cfg.ranks) != 0) fail_with("pthread_barrier_init failed");
  pthread_barrierattr_destroy(&attr);

  print_header();
  int status = cfg.processes ? run_processes() : run_threads();
  if (status != 0) return status;
  print_results();
  bench_failed_checks = write_json();
  if (bench_failed_checks) printf("\nnccl_bench: %d wrong result(s), see above\n", bench_failed_checks);
  return bench_failed_checks ? 3 : 0;
}
