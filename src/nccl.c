/* NCCL communicators and collectives that work eagerly and inside captures (nccl_lib.c loads
 * NCCL; nccl_pool.c makes NCCL pools).
 *
 * Order: each rank's NCCL kernels wait for their peers in the order they were enqueued, so every
 * rank must issue eager calls and graph launches in the same order, as with plain NCCL; cgc
 * reorders nothing.
 *
 * Graph mixing (NCCL_GRAPH_MIXING_SUPPORT, on by default): NCCL makes every graph holding a
 * collective wait, inside the graph, for the communicator's earlier work, so that graphs and
 * eager calls of one communicator may be outstanding on several streams at once; it costs about
 * a microsecond per collective (docs/PERFORMANCE.md). With mixing off that is the program's job.
 * cgc does it for the work it issues: with mixing off, each communicator remembers the stream its
 * last eager collective or graph launch went to (an event recorded after it), and work issued on
 * another stream first waits for that event. So turning mixing off is safe for everything done
 * through cgc; CGC_NCCL_GRAPH_MIXING=off asks cgc to turn it off (docs/NCCL.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/nccl.h"


/* Frees what the handle owns besides NCCL's communicator (the device's context current or not:
 * destroying an event needs none). */
static void free_comm_parts(cgc_comm_t comm) {
  if (comm->order_event != NULL) CGC_DRV(cuEventDestroy)(comm->order_event);
  comm->order_event = NULL;
  if (comm->scratch != 0) {
    cgc__ctx_scope_t scope;
    if (cgc__ctx_enter(comm->dev, &scope, "cgc_comm_destroy") == CGC_SUCCESS) {
      cgc__relaxed_mem_free(comm->scratch);
      cgc__ctx_leave(&scope);
    }
    comm->scratch = 0;
  }
  pthread_mutex_destroy(&comm->order_lock);
}

/* Before work of `comm` on `stream` (context current): wait for its last work if that went to
 * another stream. */
CUresult cgc__comm_order_before(cgc_comm_t comm, CUstream stream, uint64_t key) {
  CUresult r = CUDA_SUCCESS;
  cgc__mutex_lock(&comm->order_lock, CGC__LOCK_ORDER);
  if (comm->order_key != 0 && comm->order_key != key) r = CGC_DRV(cuStreamWaitEvent)(stream, comm->order_event, 0);
  cgc__mutex_unlock(&comm->order_lock, CGC__LOCK_ORDER);
  return r;
}

/* After it: the event marks it as the communicator's last work. */
CUresult cgc__comm_order_after(cgc_comm_t comm, CUstream stream, uint64_t key) {
  CUresult r = CGC_DRV(cuEventRecord)(comm->order_event, stream);
  if (r != CUDA_SUCCESS) return r;
  cgc__mutex_lock(&comm->order_lock, CGC__LOCK_ORDER);
  comm->order_key = key;
  cgc__mutex_unlock(&comm->order_lock, CGC__LOCK_ORDER);
  return r;
}

/* Frees the handle once: after destroy, when no graph holds it any more. */
static void retire_once(cgc_comm_t comm) {
  bool expected = false;
  if (atomic_compare_exchange_strong(&comm->retired, &expected, true)) {
    free_comm_parts(comm);
    cgc__retire(comm);
  }
}

void cgc__comm_retain(void* object) { atomic_fetch_add(&((cgc_comm_t)object)->graph_refs, 1); }

void cgc__comm_release(void* object) {
  cgc_comm_t comm = object;
  if (atomic_fetch_sub(&comm->graph_refs, 1) == 1 && atomic_load(&comm->destroyed)) retire_once(comm);
}

static uint64_t comm_capture_done(void* object, bool kept) {
  (void)object;
  (void)kept;
  return 0;
}

/* What a graph holding collectives does with the communicator: hold it, so that destroying it
 * first is refused rather than left to hang (NCCL >= 2.26 waits in ncclCommDestroy for every
 * graph that references the communicator). Nothing to do at launch. */
static const cgc__use_ops_t comm_use_ops = {
    .kind = "communicator", .retain = cgc__comm_retain, .release = cgc__comm_release, .capture_done = comm_capture_done};

/* Key 0: launched into a capture cgc did not begin, whose launches cgc cannot see; nothing to do. */
static CUresult comm_before_launch(void* object, uint64_t amount, CUstream stream, uint64_t stream_key,
                                   uint64_t* undo) {
  (void)amount;
  (void)undo; /* a wait on the communicator's last work: nothing to give back if the launch fails */
  return stream_key == 0 ? CUDA_SUCCESS : cgc__comm_order_before(object, stream, stream_key);
}

static CUresult comm_after_launch(void* object, CUstream stream, uint64_t stream_key) {
  return stream_key == 0 ? CUDA_SUCCESS : cgc__comm_order_after(object, stream, stream_key);
}

/* With graph mixing off, the graph's launches also keep the communicator's work in one order. */
static const cgc__use_ops_t comm_ordered_use_ops = {.kind = "communicator",
                                                    .retain = cgc__comm_retain,
                                                    .release = cgc__comm_release,
                                                    .capture_done = comm_capture_done,
                                                    .before_launch = comm_before_launch,
                                                    .after_launch = comm_after_launch};

/* A collective enqueued into a cgc capture: the capture (then its graph) holds the communicator. */
static cgc_status_t note_capture(cgc_comm_t comm, cgc_stream_t stream, const char* func) {
  if (stream->kind == CGC__STREAM_LEGACY) return CGC_SUCCESS;
  /* Asked always (one cuStreamGetCaptureInfo, tens of ns beside a collective's microseconds): a
   * collective into an invalidated capture is refused as every other call is, whoever began it,
   * instead of NCCL's failing it or capturing it into a graph that will never be. */
  cgc__stream_ref_t ref;
  cgc_status_t st = cgc__stream_resolve(stream, true, &ref, func);
  if (st != CGC_SUCCESS || !ref.capturing) return st;
  if (ref.invalidated) return cgc__refuse_invalidated(&ref, "a collective", func);
  /* A capture cgc did not begin: NCCL captures the collective all the same; nothing to hold. */
  if (!cgc__registry_is_cgc_capture(ref.capture_id)) return CGC_SUCCESS;
  return cgc__registry_add_use(ref.capture_id, comm->order_event != NULL ? &comm_ordered_use_ops : &comm_use_ops,
                               comm, func);
}

/* With graph mixing on, a replay of a graph holding collectives waits about 30 us longer when one
 * process drives several GPUs (docs/PERFORMANCE.md: NCCL's mixing nodes then complete late; with
 * one GPU per process they do not). The first communicator on a second device says so, once. */
static void note_devices(int ordinal) {
  static atomic_int first_device = -1;
  static atomic_bool said;
  int expected = -1;
  if (cgc__nccl_mixing_off() || atomic_compare_exchange_strong(&first_device, &expected, ordinal) || expected == ordinal) return;
  if (!atomic_exchange(&said, true))
    cgc__warn("cgc_comm_create",
              "this process drives communicators on devices %d and %d with NCCL's graph mixing on: each replay of a "
              "graph holding collectives then takes about 30 us longer to complete (docs/NCCL.md); "
              "CGC_NCCL_GRAPH_MIXING=off turns mixing off and has cgc keep each communicator's work in order",
              expected, ordinal);
}

/* A one-element all-reduce, synchronised, right after init: NCCL connects its rings and trees
 * lazily, and that setup must not happen inside a Global capture (SEMANTICS 18). */
static cgc_status_t connect_eagerly(cgc_comm_t comm, const char* func) {
  CUstream s = NULL;
  CUresult cr;
  cgc_status_t st;
  CGC_TRY_GOTO(st, CGC_CU(func, cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0)), out);
  CGC_TRY_GOTO(st, CGC_CU(func, cuMemsetD32Async(comm->scratch, 0x3f800000u /* 1.0f */, 1, s)), out);
  void* buf = (void*)(uintptr_t)comm->scratch;
  ncclResult_t r = cgc__nccl.ncclAllReduce(buf, buf, 1, 7 /* float32 */, 0 /* sum */, comm->nccl, s);
  if (r != 0) {
    st = cgc__nccl_fail(r, comm->nccl, func, "ncclAllReduce (connection warm-up)");
    goto out;
  }
  NCCL_RELAXED(cr, CGC_DRV(cuStreamSynchronize)(s));
  st = cgc__cu_fail(cr, func, "cuStreamSynchronize");
out: /* success and failure release the same things */
  if (s != NULL) CGC_DRV(cuStreamDestroy)(s);
  return st;
}

cgc_status_t cgc_comm_create(cgc_context_t ctx, int nranks, const cgc_comm_id_t* id, int rank, cgc_comm_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_TRY(cgc__nccl_load(__func__));
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(id != NULL, "id is NULL");
  CGC_CHECK_ARG(nranks >= 1, "nranks is %d", nranks);
  CGC_CHECK_ARG(rank >= 0 && rank < nranks, "rank %d is outside [0, %d)", rank, nranks);
  cgc_comm_t comm = calloc(1, sizeof *comm);
  if (comm == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  comm->dev = ctx->dev; /* before any failure: free_comm_parts gives the scratch back on it */
  /* NCCL's setup allocates and synchronises, also on its own threads, for milliseconds: a Global
   * capture begun meanwhile on another thread is refused (the gate). */
  cgc__gate_t gate;
  cgc_status_t st = cgc__capture_gate_close(&gate, ctx->dev, CGC__GUARD_AS_GLOBAL,
                                            "ncclCommInitRank (it allocates and synchronises)", __func__);
  if (st != CGC_SUCCESS) { /* order_lock is not initialised yet: not fail's cleanup */
    free(comm);
    return st;
  }
  cgc__ctx_scope_t scope = {false};
  bool initialised = false;
  ncclResult_t r;
  pthread_mutex_init(&comm->order_lock, NULL);
  /* NCCL takes the device from the current context. */
  CGC_TRY_GOTO(st, cgc__ctx_enter(ctx->dev, &scope, __func__), fail);
  if (cgc__nccl_mixing_off())
    CGC_TRY_GOTO(st, CGC_CU(__func__, cuEventCreate(&comm->order_event, CU_EVENT_DISABLE_TIMING)), fail);
  CGC_TRY_GOTO(st, cgc__cu_fail(cgc__relaxed_mem_alloc(&comm->scratch, 16), __func__, "cuMemAlloc (16 bytes)"), fail);
  ncclUniqueId nid;
  memcpy(nid.internal, id->internal, sizeof nid.internal);
  NCCL_RELAXED(r, cgc__nccl.ncclCommInitRank(&comm->nccl, nranks, nid, rank));
  if (r != 0) {
    st = cgc__nccl_fail(r, NULL, __func__, "ncclCommInitRank");
    goto fail;
  }
  initialised = true;
  comm->rank = rank;
  comm->nranks = nranks;
  CGC_TRY_GOTO(st, connect_eagerly(comm, __func__), fail);
  cgc__ctx_leave(&scope);
  cgc__capture_gate_open(&gate);
  comm->magic = CGC_MAGIC_COMM;
  *out = comm;
  note_devices(ctx->dev->ordinal);
  return CGC_SUCCESS;

fail:
  if (initialised) NCCL_RELAXED(r, cgc__nccl.ncclCommAbort(comm->nccl));
  cgc__ctx_leave(&scope);
  free_comm_parts(comm);
  cgc__capture_gate_open(&gate);
  free(comm);
  return st;
}

/* NCCL loaded, a live comm that was not aborted. */
cgc_status_t cgc__comm_check(cgc_comm_t comm, const char* func) {
  CGC_TRY(cgc__nccl_load(func));
  CGC_TRY(cgc__check_handle(comm, CGC_MAGIC_COMM, func, "comm"));
  if (atomic_load(&comm->aborted))
    return cgc__fail(CGC_ERROR_INVALID_STATE, func, "communicator %p was aborted: destroy it and create another",
                     (void*)comm);
  return CGC_SUCCESS;
}

cgc_status_t cgc_comm_destroy(cgc_comm_t comm) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_TRY(cgc__nccl_load(__func__));
  CGC_CHECK_HANDLE(comm, CGC_MAGIC_COMM);
  int refs = atomic_load(&comm->graph_refs);
  if (refs > 0 && !atomic_load(&comm->aborted))
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "%d graph(s) or capture(s) hold collectives on communicator %p, or NCCL pools of it exist: "
                     "destroy them first, and release the pools (ncclCommDestroy would wait for the graphs)",
                     refs, (void*)comm);
  if (!atomic_load(&comm->aborted)) {
    cgc__gate_t gate;
    CGC_TRY(cgc__capture_gate_close(&gate, comm->dev, CGC__GUARD_AS_GLOBAL,
                                    "ncclCommDestroy (it frees and synchronises)", __func__));
    cgc__ctx_scope_t scope;
    cgc_status_t st = cgc__ctx_enter(comm->dev, &scope, __func__);
    if (st != CGC_SUCCESS) { /* nothing was destroyed: the handle stays, and a retry can succeed */
      cgc__capture_gate_open(&gate);
      return st;
    }
    ncclResult_t r;
    NCCL_RELAXED(r, cgc__nccl.ncclCommDestroy(comm->nccl));
    /* NCCL frees the communicator's resources also when its destroy reports an error: the handle
     * goes either way, and the error is returned. */
    if (r != 0) st = cgc__nccl_fail(r, NULL, __func__, "ncclCommDestroy");
    cgc__ctx_leave(&scope);
    free_comm_parts(comm);
    cgc__capture_gate_open(&gate);
    cgc__retire(comm);
    return st;
  }
  /* Aborted: NCCL frees it. Graphs that still hold it keep the handle's memory until they go. */
  comm->magic = CGC_MAGIC_DEAD;
  atomic_store(&comm->destroyed, true);
  if (atomic_load(&comm->graph_refs) == 0) retire_once(comm);
  return CGC_SUCCESS;
}

static void* abort_in_background(void* nccl_comm) {
  ncclResult_t r;
  NCCL_RELAXED(r, cgc__nccl.ncclCommAbort((ncclComm_t)nccl_comm));
  cgc__log("ncclCommAbort of %p finished in the background: ncclResult %d", nccl_comm, r);
  return NULL;
}

cgc_status_t cgc_comm_abort(cgc_comm_t comm) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_TRY(cgc__nccl_load(__func__));
  CGC_CHECK_HANDLE(comm, CGC_MAGIC_COMM);
  bool expected = false;
  if (!atomic_compare_exchange_strong(&comm->aborted, &expected, true)) return CGC_SUCCESS; /* already */
  /* No context push: abort is meant to be called from a watchdog thread while another thread
   * is blocked on the communicator's work; NCCL sets the device itself.
   * ncclCommAbort first raises the flags that make the communicator's kernels quit, then waits
   * until every CUDA graph holding its collectives is destroyed (NCCL >= 2.26). With graphs
   * alive that wait would hang the caller, so the call then runs on a detached thread: the
   * kernels still quit at once, and NCCL reclaims the rest when the graphs go. */
  if (atomic_load(&comm->graph_refs) > 0) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&thread, &attr, abort_in_background, comm->nccl);
    pthread_attr_destroy(&attr);
    if (err == 0) return CGC_SUCCESS;
    cgc__log("cgc_comm_abort: no thread for a background abort (error %d): aborting here", err);
  }
  ncclResult_t r;
  NCCL_RELAXED(r, cgc__nccl.ncclCommAbort(comm->nccl));
  if (r != 0) return cgc__nccl_fail(r, NULL, __func__, "ncclCommAbort");
  return CGC_SUCCESS;
}

static cgc_status_t check_dtype(cgc_dtype_t dtype, const char* func) {
  if ((unsigned)dtype > CGC_BFLOAT16)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "dtype %d is not a cgc_dtype_t", (int)dtype);
  if (dtype == CGC_BFLOAT16 && cgc__nccl.version < kAvgBf16Version)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func, "bfloat16 needs NCCL >= 2.10 (loaded: %d)", cgc__nccl.version);
  return CGC_SUCCESS;
}

static cgc_status_t check_op(cgc_reduce_op_t op, const char* func) {
  if ((unsigned)op > CGC_AVG)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "op %d is not a cgc_reduce_op_t", (int)op);
  if (op == CGC_AVG && cgc__nccl.version < kAvgBf16Version)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func, "CGC_AVG needs NCCL >= 2.10 (loaded: %d)", cgc__nccl.version);
  return CGC_SUCCESS;
}

/* Shared checks of every collective: NCCL, comm, stream on the comm's device, buffers. */
static cgc_status_t check_call(cgc_comm_t comm, cgc_stream_t stream, cgc_dtype_t dtype, size_t count, const void* a,
                               const void* b, const char* func) {
  CGC_TRY(cgc__comm_check(comm, func));
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  CGC_TRY(check_dtype(dtype, func));
  if (stream->dev != comm->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "stream %p is on device %d, the communicator on device %d",
                     (void*)stream->cu, stream->dev->ordinal, comm->dev->ordinal);
  if (count > 0 && (a == NULL || b == NULL)) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "a buffer is NULL");
  if (stream->body != NULL) return cgc__refuse_in_body(stream, "a collective", func);
  return CGC_SUCCESS;
}

/* With graph mixing off, an eager collective on a stream that is not capturing is ordered after
 * the communicator's last work (order_before); *order_key is then its stream's key, else 0.
 * Context current. */
static cgc_status_t order_eager(cgc_comm_t comm, cgc_stream_t stream, uint64_t* order_key, const char* func) {
  *order_key = 0;
  if (comm->order_event == NULL) return CGC_SUCCESS;
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, true, &ref, func));
  if (ref.capturing && !ref.invalidated && !cgc__registry_is_cgc_capture(ref.capture_id))
    cgc__warn(func,
              "stream %p captures under a capture cgc did not begin, and NCCL's graph mixing is off: cgc cannot "
              "order that graph's launches after communicator %p's other work (SEMANTICS 33); launch it on the "
              "stream of that work, or leave mixing on",
              (void*)ref.cu, (void*)comm);
  if (ref.capturing) return CGC_SUCCESS; /* captured: its graph's launches are ordered */
  CGC_TRY(cgc__cu_fail(cgc__comm_order_before(comm, ref.cu, ref.key), func,
                       "cuStreamWaitEvent (after the communicator's last work)"));
  *order_key = ref.key;
  return CGC_SUCCESS;
}

/* Collectives inside ncclGroupStart/End are launched at the group's end: with mixing off their
 * order events are recorded then. Per thread, as NCCL's groups are. */
typedef struct grouped_work {
  cgc_comm_t comm;
  CUstream cu;
  uint64_t key;
} grouped_work_t;
static _Thread_local int group_depth;
static _Thread_local grouped_work_t* grouped;
static _Thread_local size_t n_grouped, cap_grouped;

/* After a collective was enqueued on a stream that is ordered (order_key != 0): its order event
 * now, or at its group's end. Context current. The collective is issued whatever happens here: a
 * failure is said (cgc_last_error's warning), not returned, since a caller that retried would
 * issue it twice. */
static void order_enqueued(cgc_comm_t comm, CUstream cu, uint64_t order_key, const char* func) {
  if (group_depth == 0) {
    CUresult r = cgc__comm_order_after(comm, cu, order_key);
    if (r != CUDA_SUCCESS)
      cgc__warn(func, "the collective was issued, but cuEventRecord of communicator %p's order failed (CUresult %d): "
                "its later work on other streams may not wait for it", (void*)comm, (int)r);
    return;
  }
  if (n_grouped == cap_grouped) {
    size_t cap = cap_grouped ? 2 * cap_grouped : 16;
    grouped_work_t* more = realloc(grouped, cap * sizeof *more);
    if (more == NULL) {
      cgc__warn(func, "out of host memory: communicator %p's order is not recorded at the group's end", (void*)comm);
      return;
    }
    grouped = more;
    cap_grouped = cap;
  }
  grouped[n_grouped++] = (grouped_work_t){comm, cu, order_key};
}

/* Runs an NCCL enqueue with the device current (the legacy stream and NCCL's own device lookups
 * both resolve through it) and maps its result. */
#define ENQUEUE(comm, stream, call_text, expr)                                                          \
  do {                                                                                                   \
    cgc__ctx_scope_t scope_;                                                                             \
    uint64_t order_key_ = 0;                                                                             \
    CGC_TRY(note_capture((comm), (stream), __func__));                                                   \
    CGC_TRY(cgc__ctx_enter((comm)->dev, &scope_, __func__));                                             \
    cgc_status_t st_ = order_eager((comm), (stream), &order_key_, __func__);                             \
    ncclResult_t r_ = 0;                                                                                 \
    if (st_ == CGC_SUCCESS) {                                                                            \
      r_ = (expr);                                                                                       \
      st_ = r_ == 0 ? CGC_SUCCESS : cgc__nccl_fail(r_, (comm)->nccl, __func__, call_text);                    \
    }                                                                                                    \
    if (st_ == CGC_SUCCESS && order_key_ != 0) order_enqueued((comm), stream->cu, order_key_, __func__);         \
    cgc__ctx_leave(&scope_);                                                                             \
    return st_;                                                                                          \
  } while (0)

cgc_status_t cgc_all_reduce(cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype,
                            cgc_reduce_op_t op, cgc_stream_t stream) {
  CGC_TRY(check_call(comm, stream, dtype, count, send, recv, __func__));
  CGC_TRY(check_op(op, __func__));
  ENQUEUE(comm, stream, "ncclAllReduce", cgc__nccl.ncclAllReduce(send, recv, count, dtype, op, comm->nccl, stream->cu));
}

cgc_status_t cgc_all_gather(cgc_comm_t comm, const void* send, void* recv, size_t send_count, cgc_dtype_t dtype,
                            cgc_stream_t stream) {
  CGC_TRY(check_call(comm, stream, dtype, send_count, send, recv, __func__));
  ENQUEUE(comm, stream, "ncclAllGather", cgc__nccl.ncclAllGather(send, recv, send_count, dtype, comm->nccl, stream->cu));
}

cgc_status_t cgc_reduce_scatter(cgc_comm_t comm, const void* send, void* recv, size_t recv_count, cgc_dtype_t dtype,
                                cgc_reduce_op_t op, cgc_stream_t stream) {
  CGC_TRY(check_call(comm, stream, dtype, recv_count, send, recv, __func__));
  CGC_TRY(check_op(op, __func__));
  ENQUEUE(comm, stream, "ncclReduceScatter",
          cgc__nccl.ncclReduceScatter(send, recv, recv_count, dtype, op, comm->nccl, stream->cu));
}

cgc_status_t cgc_broadcast(cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype, int root,
                           cgc_stream_t stream) {
  CGC_TRY(cgc__comm_check(comm, __func__));
  CGC_CHECK_ARG(root >= 0 && root < comm->nranks, "root %d is outside [0, %d)", root, comm->nranks);
  /* Only the root reads `send`; other ranks may pass NULL. */
  CGC_TRY(check_call(comm, stream, dtype, count, comm->rank == root ? send : recv, recv, __func__));
  ENQUEUE(comm, stream, "ncclBroadcast",
          cgc__nccl.ncclBroadcast(send, recv, count, dtype, root, comm->nccl, stream->cu));
}

cgc_status_t cgc_send(cgc_comm_t comm, const void* buf, size_t count, cgc_dtype_t dtype, int peer,
                      cgc_stream_t stream) {
  CGC_TRY(check_call(comm, stream, dtype, count, buf, buf, __func__));
  CGC_CHECK_ARG(peer >= 0 && peer < comm->nranks, "peer %d is outside [0, %d)", peer, comm->nranks);
  ENQUEUE(comm, stream, "ncclSend", cgc__nccl.ncclSend(buf, count, dtype, peer, comm->nccl, stream->cu));
}

cgc_status_t cgc_recv(cgc_comm_t comm, void* buf, size_t count, cgc_dtype_t dtype, int peer, cgc_stream_t stream) {
  CGC_TRY(check_call(comm, stream, dtype, count, buf, buf, __func__));
  CGC_CHECK_ARG(peer >= 0 && peer < comm->nranks, "peer %d is outside [0, %d)", peer, comm->nranks);
  ENQUEUE(comm, stream, "ncclRecv", cgc__nccl.ncclRecv(buf, count, dtype, peer, comm->nccl, stream->cu));
}

cgc_status_t cgc_group_start(void) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_TRY(cgc__nccl_load(__func__));
  ncclResult_t r = cgc__nccl.ncclGroupStart();
  if (r != 0) return cgc__nccl_fail(r, NULL, __func__, "ncclGroupStart");
  group_depth++;
  return CGC_SUCCESS;
}

cgc_status_t cgc_group_end(void) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_TRY(cgc__nccl_load(__func__));
  ncclResult_t r = cgc__nccl.ncclGroupEnd();
  if (group_depth > 0) group_depth--;
  cgc_status_t st = CGC_SUCCESS;
  if (r != 0) st = cgc__nccl_fail(r, NULL, __func__, "ncclGroupEnd");
  /* The outermost end launched the group's collectives: each marks its communicator's order now
   * (after a failed end nothing was launched, and nothing is marked). */
  for (size_t i = 0; group_depth == 0 && i < n_grouped; i++) {
    grouped_work_t* w = &grouped[i];
    cgc__ctx_scope_t scope;
    cgc_status_t marked = st == CGC_SUCCESS ? cgc__ctx_enter(w->comm->dev, &scope, __func__) : st;
    if (marked != CGC_SUCCESS) continue;
    marked = cgc__cu_fail(cgc__comm_order_after(w->comm, w->cu, w->key), __func__, "cuEventRecord (the communicator's order)");
    cgc__ctx_leave(&scope);
    if (st == CGC_SUCCESS) st = marked;
  }
  if (group_depth == 0) { /* nothing stays with the thread between groups */
    free(grouped);
    grouped = NULL;
    n_grouped = cap_grouped = 0;
  }
  return st;
}

int cgc__nccl_group_depth(void) { return group_depth; }
