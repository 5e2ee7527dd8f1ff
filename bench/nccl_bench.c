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
 * the NCCL library, as for cgc.
 *
 * The files, one concern each, sharing nccl_bench.h: this one (the options, the shared mapping,
 * main), nccl_plan.c (sizes, names, round counts), nccl_raw.c (the raw side's NCCL),
 * nccl_spawn.c (the probe, the rank processes or threads), nccl_rank.c (one rank, size by size),
 * nccl_buffers.c (the buffer kinds), nccl_graphs.c (both sides' graphs, the node census),
 * nccl_timing.c (the timed rounds) and nccl_report.c (the tables and the JSON). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench/nccl_bench.h"

/* ---- main ------------------------------------------------------------------------------------- */

shared_t* sh; /* mapped by main before any fork */
config_t cfg; /* set by main before any rank starts */

/* NVLink multicast stays off in every process of the run (see the opening comment); set before anything
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
