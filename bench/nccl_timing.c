/* nccl_bench's timed rounds: the spinning barrier that starts each, the launch and the wait of an
 * op on either side, the events around it, zeroing and checking the results, and the loops that
 * time a variant and the breakdown. Kept in one file so that the code inside the timed window
 * (launch, wait, poll, mark) is compiled together with the loops that time it, the same for cgc's
 * side and the raw one. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#include "bench/nccl_bench.h"

/* ---- barriers -------------------------------------------------------------------------------- */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Releases every rank within about a microsecond of the last arrival (see nccl_bench.c's opening
 * comment). The last to arrive resets the count before it moves the generation on, so a rank that
 * hurries into the next barrier counts after the reset. A rank that has waited a while yields the
 * CPU between looks: where ranks and NCCL's threads outnumber the cores, a pure spin would keep
 * the rank it waits for from running. */
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

/* ---- one op on either side, and the timed loops ------------------------------------------------ */

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
void clear_results(rank_t* r, const op_t* ops, int n, size_t count) {
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
void check_results(rank_t* r, const op_t* ops, int n, size_t count, atomic_int* wrong, const char* what) {
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
void time_breakdown(rank_t* r, const op_t* ops, int n, size_t count, int warmup, int iters, breakdown_t* out) {
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
void run_variant(rank_t* r, const op_t* ops, int n, size_t count, int warmup, int iters, summary_t* host,
                 summary_t* gpu, atomic_int* wrong, const char* what) {
  clear_results(r, ops, n, count);
  time_ops(r, ops, n, count, warmup, iters, host, gpu);
  check_results(r, ops, n, count, wrong, what);
}

