/* nccl_bench's shared declarations: what its files (nccl_*.c, one concern each; nccl_bench.c's
 * comment describes the program) need of each other. The raw side's NCCL as this program declares
 * it, what is measured (kinds, sizes, ops, graphs) and where the figures go (the mapping that the
 * ranks and the parent share), one rank's state and one timed op, and each file's entry points. */
#ifndef CGC_BENCH_NCCL_BENCH_H_
#define CGC_BENCH_NCCL_BENCH_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
typedef struct raw_nccl {
  RAW_NCCL_REQUIRED(RAW_NCCL_FIELD)
  RAW_NCCL_OPTIONAL(RAW_NCCL_FIELD)
} raw_nccl_t;
#undef RAW_NCCL_FIELD
extern raw_nccl_t raw_nccl; /* nccl_raw.c; set by load_raw_nccl, read-only afterwards */

/* Loads the library cgc uses (nccl_raw.c); false with the reason in `why` if it cannot. */
bool load_raw_nccl(char* why, size_t why_size);
_Noreturn void fail_nccl(const char* call, int result);

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

/* The sizes measured, and the names of the kinds, ops, phases, graphs and node types (nccl_plan.c). */
extern const size_t kSizeBytes[kSizes];
extern const char* const kKindName[kKinds];
extern const char* const kKindHow[kKinds];

/* The four things timed at every size; a round runs cgc's op and then the raw side's. */
typedef enum { OP_EAGER, OP_RAW_EAGER, OP_GRAPH, OP_RAW_GRAPH } op_kind_t;
extern const char* const kOpKey[kOps];
extern const char* const kOpLabel[kOps];

/* When a check ran: after the 1-op variants, the 100-op ones, or the breakdown's. */
enum { PHASE_ONE, PHASE_HUNDRED, PHASE_BREAKDOWN, kPhases };
extern const char* const kPhaseName[kPhases];

/* The graphs whose nodes are counted. */
enum { G_CGC_1, G_RAW_1, G_CGC_100, G_RAW_100, kGraphs };
extern const char* const kGraphKey[kGraphs];
extern const char* const kGraphLabel[kGraphs];
extern const char* const kNodeTypeName[kNodeTypes + 1];

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
extern shared_t* sh; /* nccl_bench.c's main maps it */

/* Set by main before any rank starts; read-only afterwards. */
typedef struct config {
  int ranks; /* 0: every visible GPU */
  bool processes, quick;
  size_t max_bytes;
  int iters; /* the 1-op count at small sizes; every count scales with it */
  int timeout_s;
  const char* json_path;
} config_t;
extern config_t cfg;

/* Which sizes this run measures, which have a breakdown, and how many timed rounds (nccl_plan.c). */
bool size_wanted(int s);
bool breakdown_size(size_t bytes);
int iters_one(size_t bytes);
int iters_hundred(size_t bytes);

/* The untimed steps' barrier; the timed rounds' spinning one is nccl_timing.c's. */
static inline void barrier(void) { pthread_barrier_wait(&sh->barrier); }

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

/* The timed rounds (nccl_timing.c): zeroing and checking the results, a variant timed and
 * checked, the breakdown. Figures are rank 0's, stored at [op kind]. */
void clear_results(rank_t* r, const op_t* ops, int n, size_t count);
void check_results(rank_t* r, const op_t* ops, int n, size_t count, atomic_int* wrong, const char* what);
void run_variant(rank_t* r, const op_t* ops, int n, size_t count, int warmup, int iters, summary_t* host,
                 summary_t* gpu, atomic_int* wrong, const char* what);
void time_breakdown(rank_t* r, const op_t* ops, int n, size_t count, int warmup, int iters, breakdown_t* out);

/* The graphs of both sides and their node census (nccl_graphs.c). */
cgc_graph_t capture_cgc(rank_t* r, size_t count, int reps);
void capture_raw(rank_t* r, size_t count, int reps, op_t* op);
void take_census(CUgraph g, census_t* c);

/* Both sides' buffers of one kind (nccl_buffers.c). */
void setup_kind(rank_t* r, int kind);
void teardown_kind(rank_t* r, int kind);

/* One rank from start to end (nccl_rank.c). */
void run_rank(int rank);

/* Starting the ranks (nccl_spawn.c): the probe of what the run needs (here or, for --processes,
 * in a child), then the ranks as processes or threads; each returns the exit status, 0 if well. */
void probe(void);
int probe_in_child(void);
int run_processes(void);
int run_threads(void);

/* The report (nccl_report.c): the run's facts, the tables, and the JSON (returns the failed checks). */
void print_header(void);
void print_results(void);
int write_json(void);

#endif /* CGC_BENCH_NCCL_BENCH_H_ */
