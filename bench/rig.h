/* cgc_bench's rig: what its scenarios share. One context and one non-blocking stream on device
 * 0, the benchmark kernels (bench_kernels.cu), reproducible test data, the tiny LCG kernel with
 * an exact host model (so every replay's result is checked), and the list of scenarios.
 *
 * The rig's primary context is current on the main thread; the "raw" side of a comparison uses
 * the same stream through its CUstream (`cs`). */
#ifndef CGC_BENCH_RIG_H_
#define CGC_BENCH_RIG_H_

#include "bench/harness.h"

typedef struct rig {
  cgc_context_t ctx;
  CUdevice dev;
  CUcontext primary;
  CUmodule module;
  CUfunction k_lcg, k_layer;
  cgc_stream_t s; /* the stream everything runs on (non-blocking) */
  CUstream cs;    /* its CUstream: what the raw side uses */
  char device_name[256];
} rig_t;

typedef struct opts {
  bool full;
  const char* json_path;
  unsigned scenarios; /* bit k: scenario k runs */
} opts_t;

/* The targets, tallied by the scenarios for the summary at the end. */
typedef struct targets {
  double launch_worst_ratio;  /* scenario 1, worst size */
  double capture_worst_ratio; /* scenario 3, worst size and variant */
  double alloc_worst_ns;      /* scenario 4, worst cgc case */
  double memory_ratio;        /* scenario 5, (c) / largest alone */
  double memory_ratio_released;
  double mixed_worst_ratio;   /* scenario 7, worst size */
  double update_worst_ratio;  /* scenario 8: cgc capture + update / capture + instantiate, >= 1000 nodes */
  double update_step_worst_ratio; /* scenario 8: the driver's update step / instantiation step */
  double loop_host_ratio, loop_gpu_ratio; /* scenario 9 at K = 64: WHILE (body sets it) / K raw launches */
  bool have_launch, have_capture, have_alloc, have_memory, have_mixed, have_update, have_update_step, have_loop;
} targets_t;

/* The scenarios, one file each (scenario_<name>.c): X(number, name, what it compares). A new
 * scenario is a file and a line here. */
#define BENCH_SCENARIOS(X)                                                                   \
  X(1, launch, "host cost of one replay launch: cgc_graph_launch vs cuGraphLaunch")          \
  X(2, replay, "replay + sync vs eager launches of the same kernels + sync")                 \
  X(3, capture, "capture + instantiate (+ upload): cgc vs the driver's calls")              \
  X(4, alloc, "allocator pair on a cache hit: cgc_malloc+cgc_free vs cuMemAllocAsync/Alloc") \
  X(5, memory, "memory of 35 graphs: private pools vs one shared pool, both orders")         \
  X(6, multistream, "fork/join over 4 streams vs the same work on one stream")                \
  X(7, mixed, "capture + instantiate of copies, sets, kernels, host functions: cgc vs the driver") \
  X(8, update, "capture + exec update vs capture + instantiate, cgc and the driver")        \
  X(9, loop, "a loop on the device (WHILE node) vs K launches vs eager")

typedef void scenario_fn(const rig_t* r, const opts_t* o, json_t* j, targets_t* t);
#define BENCH_DECLARE_SCENARIO(number, name, what) scenario_fn scenario_##name;
BENCH_SCENARIOS(BENCH_DECLARE_SCENARIO)
#undef BENCH_DECLARE_SCENARIO

/* bench/bench_kernels.cu, compiled to a fatbin and embedded by //tools:fatbin.bzl. */
extern const unsigned char cgc_bench_kernels_fatbin[];
extern const size_t cgc_bench_kernels_fatbin_size;

/* ---- test data and device memory ------------------------------------------------------------ */

uint32_t rand_u32(void); /* xorshift64: reproducible, never all zeros */
float rand_float(void);  /* uniform in [-1, 1) */
void random_words(uint32_t* w, size_t n);
CUdeviceptr dev_alloc(size_t bytes); /* cuMemAlloc */
/* Copies on the rig's stream and waits (the stream is non-blocking, so the legacy stream's
 * synchronous copies would not be ordered with it). */
void to_device(const rig_t* r, CUdeviceptr dst, const void* src, size_t bytes);
void to_host(const rig_t* r, void* dst, CUdeviceptr src, size_t bytes);

/* ---- the LCG kernel --------------------------------------------------------------------------- */

enum { kTinyThreads = 32 }; /* the "tiny kernel": one warp, one LCG step */

/* n words at p, each advanced by `steps` LCG steps, on `stream`. */
CUresult launch_lcg(const rig_t* r, CUstream stream, CUdeviceptr p, unsigned n, unsigned steps);
/* True when the n words at p are `init` advanced by `steps` LCG steps; a mismatch counts in
 * bench_failed_checks. */
bool lcg_matches(const rig_t* r, CUdeviceptr p, const uint32_t* init, unsigned n, uint64_t steps);
/* A graph of `nodes` tiny kernels in a chain on buf (32 words), captured with cgc and uploaded. */
cgc_graph_t capture_chain(const rig_t* r, CUdeviceptr buf, unsigned nodes);

/* ---- rows of graphs of N nodes (scenarios 1 and 2) ------------------------------------------- */

/* Repetitions: fewer for big graphs, whose replays take milliseconds. */
int launch_reps(unsigned nodes, bool full);
void size_label(char* buf, size_t cap, unsigned nodes); /* "1 node", "10 nodes" */
/* One row: the printed table and the JSON. */
void report_node_row(json_t* j, const char* scenario, unsigned nodes, int reps, const char* a_name,
                     const char* b_name, const char* ratio_name, summary_t sa, summary_t sb, double ratio,
                     const char* note, bool ok);

#endif /* CGC_BENCH_RIG_H_ */
