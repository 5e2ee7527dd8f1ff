/* nccl_bench's plan: what is measured. The sizes and the names of the kinds, ops, phases, graphs
 * and node types that nccl_bench.h enumerates, which sizes a run measures (--quick,
 * --max-bytes), which have a breakdown, and how many timed rounds each gets (--iters). One place
 * for them, so that a size or a count changes everywhere at once. */
#include <stddef.h>

#include "bench/nccl_bench.h"

static const size_t kSmallBytes = (size_t)256 << 10; /* --quick stops here */
const size_t kSizeBytes[kSizes] = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 67108864};
static const size_t kBreakdownBytes[] = {8, 4096, 262144};

const char* const kKindName[kKinds] = {"plain", "registered", "symmetric"};
const char* const kKindHow[kKinds] = {
    "cgc: cgc_malloc | raw: cuMemAlloc",
    "cgc: cgc_nccl_pool_create(REGISTERED) + cgc_pool_malloc | raw: ncclMemAlloc + ncclCommRegister",
    "cgc: cgc_nccl_pool_create(SYMMETRIC) + cgc_pool_malloc | raw: ncclMemAlloc + ncclCommWindowRegister(symmetric)",
};

const char* const kOpKey[kOps] = {"eager", "raw_eager", "cgc_graph", "raw_graph"};
const char* const kOpLabel[kOps] = {"eager", "raw eager", "cgc graph", "raw graph"};

const char* const kPhaseName[kPhases] = {"1-op", "100-op", "breakdown"};

const char* const kGraphKey[kGraphs] = {"cgc_graph_1", "raw_graph_1", "cgc_graph_100", "raw_graph_100"};
const char* const kGraphLabel[kGraphs] = {"cgc graph-1", "raw graph-1", "cgc graph-100", "raw graph-100"};
const char* const kNodeTypeName[kNodeTypes + 1] = {
    "kernel",      "memcpy",        "memset",       "host",      "child graph",     "empty",
    "event wait",  "event record",  "ext semaphore signal", "ext semaphore wait", "mem alloc", "mem free",
    "batch mem op", "conditional",  "type 14",      "type 15",   "other"};

bool size_wanted(int s) {
  return kSizeBytes[s] <= cfg.max_bytes && (!cfg.quick || kSizeBytes[s] <= kSmallBytes);
}

bool breakdown_size(size_t bytes) {
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
int iters_one(size_t bytes) { return scaled(bytes <= ((size_t)2 << 20) ? 200 : 100, 10); }
int iters_hundred(size_t bytes) {
  return scaled(bytes <= ((size_t)2 << 20) ? 30 : bytes <= ((size_t)16 << 20) ? 15 : 10, 5);
}
