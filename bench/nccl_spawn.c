/* nccl_bench's start of the ranks: the probe of what the run needs (GPUs, the driver, NCCL for
 * both sides), in this process or, for --processes, in a child of its own; the rank processes,
 * forked before this program touches CUDA, or the rank threads; and the wait for them, which ends
 * the others when one fails and names and kills those that hang. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/nccl_bench.h"

/* What the run needs, found in the process that calls it: GPUs, the driver for the raw side, NCCL
 * for both sides. Notes the header's facts in the shared mapping; sh->usable false with the reason
 * in sh->why when the run cannot go on. */
void probe(void) {
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
int probe_in_child(void) {
  pid_t parent = getpid();
  pid_t pid = fork_flushed();
  if (pid == 0) {
    become_child(parent);
    probe();
    exit(0);
  }
  return wait_children(&pid, 1, "GPU probe");
}

int run_processes(void) {
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
int run_threads(void) {
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
