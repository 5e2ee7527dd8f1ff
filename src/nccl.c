/* NCCL, loaded at run time: communicators and collectives that work eagerly and inside captures.
 *
 * libnccl.so.2 is dlopen'ed once on first use (CGC_NCCL_LIBRARY=<path> names another file; then
 * the usual install locations are tried). Capturing collectives needs NCCL >= 2.9.6; older or
 * missing NCCL makes every NCCL entry point return CGC_ERROR_NCCL_UNAVAILABLE (SEMANTICS 20).
 *
 * The few NCCL types used here are declared below rather than taken from nccl.h: they are part of
 * NCCL's stable ABI (an opaque communicator pointer, a 128-byte unique id, int enums whose values
 * cgc_dtype_t and cgc_reduce_op_t mirror), and the build then needs no NCCL headers.
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
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

typedef struct nccl_comm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef int ncclResult_t; /* ncclSuccess = 0 */
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef struct nccl_window* ncclWindow_t; /* 2.27: a registered window, opaque */
enum { kNcclWinCollSymmetric = 0x01, kNcclInt32 = 2, kNcclMax = 2 };

_Static_assert(sizeof(cgc_comm_id_t) == sizeof(ncclUniqueId), "cgc_comm_id_t carries an ncclUniqueId");

/* X(name, return type, (parameter types)) */
#define CGC_NCCL_ENTRIES(X, OPT)                                                                           \
  X(ncclGetVersion, ncclResult_t, (int*))                                                                  \
  X(ncclGetUniqueId, ncclResult_t, (ncclUniqueId*))                                                        \
  X(ncclCommInitRank, ncclResult_t, (ncclComm_t*, int, ncclUniqueId, int))                                 \
  X(ncclCommDestroy, ncclResult_t, (ncclComm_t))                                                           \
  X(ncclCommAbort, ncclResult_t, (ncclComm_t))                                                             \
  X(ncclGetErrorString, const char*, (ncclResult_t))                                                       \
  X(ncclAllReduce, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream)) \
  X(ncclAllGather, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, CUstream))       \
  X(ncclReduceScatter, ncclResult_t,                                                                       \
    (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream))                       \
  X(ncclBroadcast, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream))  \
  X(ncclSend, ncclResult_t, (const void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream))              \
  X(ncclRecv, ncclResult_t, (void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream))                    \
  X(ncclGroupStart, ncclResult_t, (void))                                                                  \
  X(ncclGroupEnd, ncclResult_t, (void))                                                                    \
  OPT(ncclGetLastError, const char*, (ncclComm_t))                                                         \
  OPT(ncclMemAlloc, ncclResult_t, (void**, size_t))                  /* 2.19 */                            \
  OPT(ncclMemFree, ncclResult_t, (void*))                                                                  \
  OPT(ncclCommRegister, ncclResult_t, (ncclComm_t, void*, size_t, void**))                                 \
  OPT(ncclCommDeregister, ncclResult_t, (ncclComm_t, void*))                                               \
  OPT(ncclCommWindowRegister, ncclResult_t, (ncclComm_t, void*, size_t, ncclWindow_t*, int)) /* 2.27 */    \
  OPT(ncclCommWindowDeregister, ncclResult_t, (ncclComm_t, ncclWindow_t))

#define NCCL_FIELD(name, ret, params) ret(*name) params;
static struct {
  CGC_NCCL_ENTRIES(NCCL_FIELD, NCCL_FIELD)
  int version;
} nccl;
#undef NCCL_FIELD

enum {
  kMinCaptureVersion = 20906, /* 2.9.6: first NCCL whose collectives may be graph-captured */
  kAvgBf16Version = 21000,    /* 2.10.0: ncclAvg and ncclBfloat16 */
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static void* nccl_library; /* the dlopen handle, kept for the life of the process */
static cgc_status_t load_status = CGC_ERROR_INTERNAL;
static char load_message[1024];

static void* open_nccl(char* tried, size_t tried_size) {
  const char* candidates[] = {
      getenv("CGC_NCCL_LIBRARY"),
      "libnccl.so.2",
      "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
      "/usr/local/cuda/lib/libnccl.so.2",
      "/usr/local/cuda/lib64/libnccl.so.2",
      "/usr/local/nccl/lib/libnccl.so.2",
  };
  size_t used = 0;
  for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
    const char* path = candidates[i];
    if (path == NULL || path[0] == '\0') continue;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) return lib;
    int n = snprintf(tried + used, tried_size - used, "%s%s", used ? ", " : "", path);
    if (n > 0 && (size_t)n < tried_size - used) used += (size_t)n;
    /* An explicit CGC_NCCL_LIBRARY is the only candidate: a wrong path must not be papered over. */
    if (i == 0) return NULL;
  }
  return NULL;
}

/* NCCL_GRAPH_MIXING_SUPPORT=0 as NCCL will read it (once, at its first use; set before it loads). */
static bool mixing_off;

/* CGC_NCCL_GRAPH_MIXING=off turns NCCL's graph mixing off for the process, unless the user set
 * NCCL_GRAPH_MIXING_SUPPORT already (theirs wins). Runs once, before libnccl.so.2 is opened; NCCL
 * reads the variable at its first communicator, so a process that used NCCL before cgc keeps what
 * NCCL read then: cgc says so. */
static void decide_graph_mixing(void) {
  const char* asked = getenv("CGC_NCCL_GRAPH_MIXING");
  const char* nccl_setting = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  if (asked != NULL && (strcmp(asked, "off") == 0 || strcmp(asked, "0") == 0) && nccl_setting == NULL) {
    void* already = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (already != NULL) {
      dlclose(already);
      cgc__log("CGC_NCCL_GRAPH_MIXING=off: libnccl.so.2 was loaded before cgc; if it made a communicator "
               "already, it keeps graph mixing on, and cgc orders nothing");
    } else {
      setenv("NCCL_GRAPH_MIXING_SUPPORT", "0", 0);
      nccl_setting = "0";
    }
  }
  mixing_off = nccl_setting != NULL && strtol(nccl_setting, NULL, 0) == 0 && nccl_setting[0] != '\0';
}

/* Decided when the library is loaded: setenv while other threads may call getenv is a race
 * (glibc's environment is not thread-safe), and a program's threads usually start after its
 * libraries load. A program that sets CGC_NCCL_GRAPH_MIXING itself later is read at NCCL's first
 * use, as before. */
static pthread_once_t mixing_once = PTHREAD_ONCE_INIT;
__attribute__((constructor)) static void decide_graph_mixing_at_load(void) {
  if (getenv("CGC_NCCL_GRAPH_MIXING") != NULL) pthread_once(&mixing_once, decide_graph_mixing);
}

static void load_nccl(void) {
  char tried[512] = "";
  pthread_once(&mixing_once, decide_graph_mixing);
  void* lib = open_nccl(tried, sizeof tried);
  if (lib == NULL) {
    load_status = CGC_ERROR_NCCL_UNAVAILABLE;
    snprintf(load_message, sizeof load_message,
             "NCCL (libnccl.so.2) could not be loaded (tried %s); install NCCL >= 2.9.6 or point "
             "CGC_NCCL_LIBRARY at libnccl.so.2",
             tried);
    return;
  }
  nccl_library = lib;
  const char* missing = NULL;
#define RESOLVE(name, ret, params) \
  if ((*(void**)&nccl.name = dlsym(lib, #name)) == NULL && missing == NULL) missing = #name;
#define RESOLVE_OPTIONAL(name, ret, params) *(void**)&nccl.name = dlsym(lib, #name);
  CGC_NCCL_ENTRIES(RESOLVE, RESOLVE_OPTIONAL)
#undef RESOLVE
#undef RESOLVE_OPTIONAL
  if (missing != NULL) {
    load_status = CGC_ERROR_NCCL_UNAVAILABLE;
    snprintf(load_message, sizeof load_message, "the loaded libnccl.so.2 lacks %s: cgc needs NCCL >= 2.9.6", missing);
    return;
  }
  if (nccl.ncclGetVersion(&nccl.version) != 0 || nccl.version < kMinCaptureVersion) {
    load_status = CGC_ERROR_NCCL_UNAVAILABLE;
    snprintf(load_message, sizeof load_message,
             "NCCL version code %d is too old: capturing collectives needs NCCL >= 2.9.6 (code 20906)", nccl.version);
    return;
  }
  load_status = CGC_SUCCESS;
}

static cgc_status_t nccl_load(const char* func) {
  pthread_once(&load_once, load_nccl);
  if (load_status == CGC_SUCCESS) return CGC_SUCCESS;
  return cgc__fail(load_status, func, "%s", load_message);
}

/* "func: call failed: <NCCL's string> (<NCCL's last error>)". */
static cgc_status_t nccl_fail(ncclResult_t r, ncclComm_t comm, const char* func, const char* call) {
  const char* text = nccl.ncclGetErrorString ? nccl.ncclGetErrorString(r) : "unknown NCCL error";
  const char* last = nccl.ncclGetLastError ? nccl.ncclGetLastError(comm) : NULL;
  return cgc__fail(CGC_ERROR_NCCL, func, "%s failed: ncclResult %d: %s%s%s%s", call, r, text ? text : "?",
                   last && last[0] ? " (" : "", last && last[0] ? last : "", last && last[0] ? ")" : "");
}
cgc_status_t cgc_nccl_version(int* version) {
  cgc_status_t st = nccl_load(__func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_ARG(version != NULL, "version is NULL");
  *version = nccl.version;
  return CGC_SUCCESS;
}

cgc_status_t cgc_comm_unique_id(cgc_comm_id_t* id) {
  cgc_status_t st = nccl_load(__func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_ARG(id != NULL, "id is NULL");
  ncclUniqueId nid;
  ncclResult_t r = nccl.ncclGetUniqueId(&nid);
  if (r != 0) return nccl_fail(r, NULL, __func__, "ncclGetUniqueId");
  memcpy(id->internal, nid.internal, sizeof nid.internal);
  return CGC_SUCCESS;
}

struct cgc_comm_s {
  uint32_t magic;
  struct cgc__device* dev;
  ncclComm_t nccl;
  int rank, nranks;
  atomic_bool aborted;    /* ncclCommAbort freed `nccl`: only destroy may follow */
  atomic_int graph_refs;  /* captures and graphs holding collectives on it, and its NCCL pools */
  atomic_bool destroyed;  /* the user destroyed the (aborted) handle while graphs held it */
  atomic_bool retired;
  /* With graph mixing off: the communicator's last work issued through cgc (an eager collective,
   * a launch of a graph holding it) and the stream it went to (its key; 0: none yet). order_key
   * is guarded by order_lock, held across a cuStreamWaitEvent at most (which never waits for the
   * GPU); the event is recorded before the lock is taken (cuEventRecord can wait): NCCL forbids
   * issuing one communicator's work from two threads at once, so records never race. */
  pthread_mutex_t order_lock;
  CUevent order_event; /* NULL with mixing on */
  uint64_t order_key;
  /* 16 bytes of device memory for the communicator's own small collectives (the connection
   * warm-up, the ranks' agreements on an NCCL pool): made at creation, so that an agreement never
   * depends on an allocation that could fail on one rank only. */
  CUdeviceptr scratch;
};

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
static CUresult order_before(cgc_comm_t comm, CUstream stream, uint64_t key) {
  CUresult r = CUDA_SUCCESS;
  cgc__mutex_lock(&comm->order_lock, CGC__LOCK_ORDER);
  if (comm->order_key != 0 && comm->order_key != key) r = CGC_DRV(cuStreamWaitEvent)(stream, comm->order_event, 0);
  cgc__mutex_unlock(&comm->order_lock, CGC__LOCK_ORDER);
  return r;
}

/* After it: the event marks it as the communicator's last work. */
static CUresult order_after(cgc_comm_t comm, CUstream stream, uint64_t key) {
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

static void comm_retain(void* object) { atomic_fetch_add(&((cgc_comm_t)object)->graph_refs, 1); }

static void comm_release(void* object) {
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
static const cgc__use_ops_t comm_use_ops = {"communicator", comm_retain, comm_release, comm_capture_done, NULL};

/* Key 0: launched into a capture cgc did not begin, whose launches cgc cannot see; nothing to do. */
static CUresult comm_before_launch(void* object, uint64_t amount, CUstream stream, uint64_t stream_key) {
  (void)amount;
  return stream_key == 0 ? CUDA_SUCCESS : order_before(object, stream, stream_key);
}

static CUresult comm_after_launch(void* object, CUstream stream, uint64_t stream_key) {
  return stream_key == 0 ? CUDA_SUCCESS : order_after(object, stream, stream_key);
}

/* With graph mixing off, the graph's launches also keep the communicator's work in one order. */
static const cgc__use_ops_t comm_ordered_use_ops = {
    "communicator", comm_retain, comm_release, comm_capture_done, comm_before_launch, false, comm_after_launch};

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

/* NCCL's setup and teardown allocate, free and synchronise: calls that would break a Global
 * capture under way on another thread. They run with this thread in Relaxed mode (NCCL's own
 * threads are beyond reach: cgc refuses creation and destruction while a capture that they
 * could break is under way). */
#define NCCL_RELAXED(result, call)                              \
  do {                                                           \
    CUstreamCaptureMode previous_ = cgc__relaxed_begin();        \
    (result) = (call);                                           \
    cgc__relaxed_end(previous_);                                 \
  } while (0)

/* With graph mixing on, a replay of a graph holding collectives waits about 30 us longer when one
 * process drives several GPUs (docs/PERFORMANCE.md: NCCL's mixing nodes then complete late; with
 * one GPU per process they do not). The first communicator on a second device says so, once. */
static void note_devices(int ordinal) {
  static atomic_int first_device = -1;
  static atomic_bool said;
  int expected = -1;
  if (mixing_off || atomic_compare_exchange_strong(&first_device, &expected, ordinal) || expected == ordinal) return;
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
  cgc_status_t st = cgc__cu_fail(CGC_DRV(cuStreamCreateWithPriority)(&s, CU_STREAM_NON_BLOCKING, 0), func,
                                 "cuStreamCreateWithPriority");
  if (st != CGC_SUCCESS) goto done;
  st = cgc__cu_fail(CGC_DRV(cuMemsetD32Async)(comm->scratch, 0x3f800000u /* 1.0f */, 1, s), func, "cuMemsetD32Async");
  if (st != CGC_SUCCESS) goto done;
  void* buf = (void*)(uintptr_t)comm->scratch;
  ncclResult_t r = nccl.ncclAllReduce(buf, buf, 1, 7 /* float32 */, 0 /* sum */, comm->nccl, s);
  if (r != 0) {
    st = nccl_fail(r, comm->nccl, func, "ncclAllReduce (connection warm-up)");
    goto done;
  }
  NCCL_RELAXED(cr, CGC_DRV(cuStreamSynchronize)(s));
  st = cgc__cu_fail(cr, func, "cuStreamSynchronize");
done: /* success and failure release the same things */
  if (s != NULL) CGC_DRV(cuStreamDestroy)(s);
  return st;
}

cgc_status_t cgc_comm_create(cgc_context_t ctx, int nranks, const cgc_comm_id_t* id, int rank, cgc_comm_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  cgc_status_t st = nccl_load(__func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(id != NULL, "id is NULL");
  CGC_CHECK_ARG(nranks >= 1, "nranks is %d", nranks);
  CGC_CHECK_ARG(rank >= 0 && rank < nranks, "rank %d is outside [0, %d)", rank, nranks);
  st = cgc__capture_guard(ctx->dev, CGC__GUARD_AS_GLOBAL, "ncclCommInitRank (it allocates and synchronises)", __func__);
  if (st != CGC_SUCCESS) return st;
  cgc__ctx_scope_t scope = {false};
  bool initialised = false;
  ncclResult_t r;
  cgc_comm_t comm = calloc(1, sizeof *comm);
  if (comm == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  pthread_mutex_init(&comm->order_lock, NULL);
  st = cgc__ctx_enter(ctx->dev, &scope, __func__); /* NCCL takes the device from the current context */
  if (st != CGC_SUCCESS) goto fail;
  if (mixing_off) {
    st = cgc__cu_fail(CGC_DRV(cuEventCreate)(&comm->order_event, CU_EVENT_DISABLE_TIMING), __func__, "cuEventCreate");
    if (st != CGC_SUCCESS) goto fail;
  }
  st = cgc__cu_fail(cgc__relaxed_mem_alloc(&comm->scratch, 16), __func__, "cuMemAlloc (16 bytes)");
  if (st != CGC_SUCCESS) goto fail;
  ncclUniqueId nid;
  memcpy(nid.internal, id->internal, sizeof nid.internal);
  NCCL_RELAXED(r, nccl.ncclCommInitRank(&comm->nccl, nranks, nid, rank));
  if (r != 0) {
    st = nccl_fail(r, NULL, __func__, "ncclCommInitRank");
    goto fail;
  }
  initialised = true;
  comm->dev = ctx->dev;
  comm->rank = rank;
  comm->nranks = nranks;
  st = connect_eagerly(comm, __func__);
  if (st != CGC_SUCCESS) goto fail;
  cgc__ctx_leave(&scope);
  comm->magic = CGC_MAGIC_COMM;
  *out = comm;
  note_devices(ctx->dev->ordinal);
  return CGC_SUCCESS;

fail:
  if (initialised) NCCL_RELAXED(r, nccl.ncclCommAbort(comm->nccl));
  cgc__ctx_leave(&scope);
  free_comm_parts(comm);
  free(comm);
  return st;
}

/* NCCL loaded, a live comm that was not aborted. */
static cgc_status_t check_comm(cgc_comm_t comm, const char* func) {
  cgc_status_t st = nccl_load(func);
  if (st == CGC_SUCCESS) st = cgc__check_handle(comm, CGC_MAGIC_COMM, func, "comm");
  if (st == CGC_SUCCESS && atomic_load(&comm->aborted))
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "communicator %p was aborted: destroy it and create another",
                   (void*)comm);
  return st;
}

cgc_status_t cgc_comm_destroy(cgc_comm_t comm) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  cgc_status_t st = nccl_load(__func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_HANDLE(comm, CGC_MAGIC_COMM);
  int refs = atomic_load(&comm->graph_refs);
  if (refs > 0 && !atomic_load(&comm->aborted))
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "%d graph(s) or capture(s) hold collectives on communicator %p, or NCCL pools of it exist: "
                     "destroy them first, and release the pools (ncclCommDestroy would wait for the graphs)",
                     refs, (void*)comm);
  if (!atomic_load(&comm->aborted)) {
    st = cgc__capture_guard(comm->dev, CGC__GUARD_AS_GLOBAL, "ncclCommDestroy (it frees and synchronises)", __func__);
    if (st != CGC_SUCCESS) return st;
    cgc__ctx_scope_t scope;
    st = cgc__ctx_enter(comm->dev, &scope, __func__);
    if (st == CGC_SUCCESS) {
      ncclResult_t r;
      NCCL_RELAXED(r, nccl.ncclCommDestroy(comm->nccl));
      if (r != 0) st = nccl_fail(r, NULL, __func__, "ncclCommDestroy");
      cgc__ctx_leave(&scope);
    }
    free_comm_parts(comm);
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
  NCCL_RELAXED(r, nccl.ncclCommAbort((ncclComm_t)nccl_comm));
  cgc__log("ncclCommAbort of %p finished in the background: ncclResult %d", nccl_comm, r);
  return NULL;
}

cgc_status_t cgc_comm_abort(cgc_comm_t comm) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  cgc_status_t st = nccl_load(__func__);
  if (st != CGC_SUCCESS) return st;
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
  NCCL_RELAXED(r, nccl.ncclCommAbort(comm->nccl));
  if (r != 0) return nccl_fail(r, NULL, __func__, "ncclCommAbort");
  return CGC_SUCCESS;
}

static cgc_status_t check_dtype(cgc_dtype_t dtype, const char* func) {
  if ((unsigned)dtype > CGC_BFLOAT16)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "dtype %d is not a cgc_dtype_t", (int)dtype);
  if (dtype == CGC_BFLOAT16 && nccl.version < kAvgBf16Version)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func, "bfloat16 needs NCCL >= 2.10 (loaded: %d)", nccl.version);
  return CGC_SUCCESS;
}

static cgc_status_t check_op(cgc_reduce_op_t op, const char* func) {
  if ((unsigned)op > CGC_AVG)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "op %d is not a cgc_reduce_op_t", (int)op);
  if (op == CGC_AVG && nccl.version < kAvgBf16Version)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func, "CGC_AVG needs NCCL >= 2.10 (loaded: %d)", nccl.version);
  return CGC_SUCCESS;
}

/* Shared checks of every collective: NCCL, comm, stream on the comm's device, buffers. */
static cgc_status_t check_call(cgc_comm_t comm, cgc_stream_t stream, cgc_dtype_t dtype, size_t count, const void* a,
                               const void* b, const char* func) {
  cgc_status_t st = check_comm(comm, func);
  if (st == CGC_SUCCESS) st = cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream");
  if (st == CGC_SUCCESS) st = check_dtype(dtype, func);
  if (st != CGC_SUCCESS) return st;
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
  cgc_status_t st = cgc__stream_resolve(stream, true, &ref, func);
  if (st == CGC_SUCCESS && ref.capturing && !ref.invalidated && !cgc__registry_is_cgc_capture(ref.capture_id))
    cgc__warn(func,
              "stream %p captures under a capture cgc did not begin, and NCCL's graph mixing is off: cgc cannot "
              "order that graph's launches after communicator %p's other work (SEMANTICS 33); launch it on the "
              "stream of that work, or leave mixing on",
              (void*)ref.cu, (void*)comm);
  if (st != CGC_SUCCESS || ref.capturing) return st; /* captured: its graph's launches are ordered */
  st = cgc__cu_fail(order_before(comm, ref.cu, ref.key), func, "cuStreamWaitEvent (after the communicator's last work)");
  if (st == CGC_SUCCESS) *order_key = ref.key;
  return st;
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
    CUresult r = order_after(comm, cu, order_key);
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
    cgc_status_t st_ = note_capture((comm), (stream), __func__);                                         \
    if (st_ == CGC_SUCCESS) st_ = cgc__ctx_enter((comm)->dev, &scope_, __func__);                        \
    if (st_ != CGC_SUCCESS) return st_;                                                                  \
    st_ = order_eager((comm), (stream), &order_key_, __func__);                                          \
    ncclResult_t r_ = 0;                                                                                 \
    if (st_ == CGC_SUCCESS) {                                                                            \
      r_ = (expr);                                                                                       \
      st_ = r_ == 0 ? CGC_SUCCESS : nccl_fail(r_, (comm)->nccl, __func__, call_text);                    \
    }                                                                                                    \
    if (st_ == CGC_SUCCESS && order_key_ != 0) order_enqueued((comm), stream->cu, order_key_, __func__);         \
    cgc__ctx_leave(&scope_);                                                                             \
    return st_;                                                                                          \
  } while (0)

cgc_status_t cgc_all_reduce(cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype,
                            cgc_reduce_op_t op, cgc_stream_t stream) {
  cgc_status_t st = check_call(comm, stream, dtype, count, send, recv, __func__);
  if (st == CGC_SUCCESS) st = check_op(op, __func__);
  if (st != CGC_SUCCESS) return st;
  ENQUEUE(comm, stream, "ncclAllReduce", nccl.ncclAllReduce(send, recv, count, dtype, op, comm->nccl, stream->cu));
}

cgc_status_t cgc_all_gather(cgc_comm_t comm, const void* send, void* recv, size_t send_count, cgc_dtype_t dtype,
                            cgc_stream_t stream) {
  cgc_status_t st = check_call(comm, stream, dtype, send_count, send, recv, __func__);
  if (st != CGC_SUCCESS) return st;
  ENQUEUE(comm, stream, "ncclAllGather", nccl.ncclAllGather(send, recv, send_count, dtype, comm->nccl, stream->cu));
}

cgc_status_t cgc_reduce_scatter(cgc_comm_t comm, const void* send, void* recv, size_t recv_count, cgc_dtype_t dtype,
                                cgc_reduce_op_t op, cgc_stream_t stream) {
  cgc_status_t st = check_call(comm, stream, dtype, recv_count, send, recv, __func__);
  if (st == CGC_SUCCESS) st = check_op(op, __func__);
  if (st != CGC_SUCCESS) return st;
  ENQUEUE(comm, stream, "ncclReduceScatter",
          nccl.ncclReduceScatter(send, recv, recv_count, dtype, op, comm->nccl, stream->cu));
}

cgc_status_t cgc_broadcast(cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype, int root,
                           cgc_stream_t stream) {
  cgc_status_t st = check_comm(comm, __func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_ARG(root >= 0 && root < comm->nranks, "root %d is outside [0, %d)", root, comm->nranks);
  /* Only the root reads `send`; other ranks may pass NULL. */
  st = check_call(comm, stream, dtype, count, comm->rank == root ? send : recv, recv, __func__);
  if (st != CGC_SUCCESS) return st;
  ENQUEUE(comm, stream, "ncclBroadcast",
          nccl.ncclBroadcast(send, recv, count, dtype, root, comm->nccl, stream->cu));
}

cgc_status_t cgc_send(cgc_comm_t comm, const void* buf, size_t count, cgc_dtype_t dtype, int peer,
                      cgc_stream_t stream) {
  cgc_status_t st = check_call(comm, stream, dtype, count, buf, buf, __func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_ARG(peer >= 0 && peer < comm->nranks, "peer %d is outside [0, %d)", peer, comm->nranks);
  ENQUEUE(comm, stream, "ncclSend", nccl.ncclSend(buf, count, dtype, peer, comm->nccl, stream->cu));
}

cgc_status_t cgc_recv(cgc_comm_t comm, void* buf, size_t count, cgc_dtype_t dtype, int peer, cgc_stream_t stream) {
  cgc_status_t st = check_call(comm, stream, dtype, count, buf, buf, __func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_ARG(peer >= 0 && peer < comm->nranks, "peer %d is outside [0, %d)", peer, comm->nranks);
  ENQUEUE(comm, stream, "ncclRecv", nccl.ncclRecv(buf, count, dtype, peer, comm->nccl, stream->cu));
}

cgc_status_t cgc_group_start(void) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  cgc_status_t st = nccl_load(__func__);
  if (st != CGC_SUCCESS) return st;
  ncclResult_t r = nccl.ncclGroupStart();
  if (r != 0) return nccl_fail(r, NULL, __func__, "ncclGroupStart");
  group_depth++;
  return CGC_SUCCESS;
}

cgc_status_t cgc_group_end(void) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  cgc_status_t st = nccl_load(__func__);
  if (st != CGC_SUCCESS) return st;
  ncclResult_t r = nccl.ncclGroupEnd();
  if (group_depth > 0) group_depth--;
  if (r != 0) st = nccl_fail(r, NULL, __func__, "ncclGroupEnd");
  /* The outermost end launched the group's collectives: each marks its communicator's order now
   * (after a failed end nothing was launched, and nothing is marked). */
  for (size_t i = 0; group_depth == 0 && i < n_grouped; i++) {
    grouped_work_t* w = &grouped[i];
    cgc__ctx_scope_t scope;
    cgc_status_t marked = st == CGC_SUCCESS ? cgc__ctx_enter(w->comm->dev, &scope, __func__) : st;
    if (marked != CGC_SUCCESS) continue;
    marked = cgc__cu_fail(order_after(w->comm, w->cu, w->key), __func__, "cuEventRecord (the communicator's order)");
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

/* ---- NCCL pools (1.5): a pool whose memory is registered with a communicator ---- */

static const char* const kMemoryNames[] = {"plain", "registered", "symmetric"};

/* The arena of an NCCL pool: its memory, where it came from and its registration. */
typedef struct nccl_arena {
  cgc__arena_t base;
  cgc_comm_t comm;       /* held (graph_refs) until the arena is dropped */
  bool from_nccl;        /* ncclMemAlloc'ed (else cuMemAlloc'ed) */
  void* registration;    /* ncclCommRegister's handle, or NULL */
  ncclWindow_t window;   /* ncclCommWindowRegister's window, or NULL */
  cgc_nccl_memory_t kind;
} nccl_arena_t;

/* Drops the registration (collective for a window: every rank releases its pool alike), frees the
 * memory, lets go of the communicator. After an abort NCCL has freed the communicator and what
 * was registered with it: only the memory is left to free. */
static cgc_status_t drop_arena(cgc__arena_t* base, const char* func) {
  nccl_arena_t* arena = (nccl_arena_t*)base;
  cgc_comm_t comm = arena->comm;
  cgc_status_t st = CGC_SUCCESS;
  ncclResult_t r = 0;
  bool comm_alive = comm != NULL && !atomic_load(&comm->aborted);
  if (comm_alive && arena->window != NULL) {
    NCCL_RELAXED(r, nccl.ncclCommWindowDeregister(comm->nccl, arena->window));
    if (r != 0) st = nccl_fail(r, comm->nccl, func, "ncclCommWindowDeregister");
  }
  if (comm_alive && arena->registration != NULL) {
    NCCL_RELAXED(r, nccl.ncclCommDeregister(comm->nccl, arena->registration));
    if (r != 0 && st == CGC_SUCCESS) st = nccl_fail(r, comm->nccl, func, "ncclCommDeregister");
  }
  if (arena->base.base != 0) {
    if (arena->from_nccl) {
      NCCL_RELAXED(r, nccl.ncclMemFree((void*)(uintptr_t)arena->base.base));
      if (r != 0 && st == CGC_SUCCESS) st = nccl_fail(r, NULL, func, "ncclMemFree");
    } else {
      CUresult cr = cgc__relaxed_mem_free(arena->base.base);
      if (st == CGC_SUCCESS) st = cgc__cu_fail(cr, func, "cuMemFree");
    }
  }
  if (comm != NULL) comm_release(comm);
  free(arena);
  return st;
}

/* The best kind this NCCL offers up to `wanted`. */
static cgc_nccl_memory_t available_kind(cgc_nccl_memory_t wanted) {
  if (wanted == CGC_NCCL_MEMORY_SYMMETRIC && (nccl.ncclCommWindowRegister == NULL || nccl.ncclCommWindowDeregister == NULL))
    wanted = CGC_NCCL_MEMORY_REGISTERED;
  if (wanted == CGC_NCCL_MEMORY_REGISTERED &&
      (nccl.ncclMemAlloc == NULL || nccl.ncclMemFree == NULL || nccl.ncclCommRegister == NULL ||
       nccl.ncclCommDeregister == NULL))
    wanted = CGC_NCCL_MEMORY_PLAIN;
  return wanted;
}

/* Allocates the arena's memory: ncclMemAlloc for a kind NCCL registers, else cuMemAlloc. */
static cgc_status_t allocate_arena(nccl_arena_t* arena, cgc_nccl_memory_t kind, const char* func) {
  if (kind == CGC_NCCL_MEMORY_PLAIN)
    return cgc__cu_fail(cgc__relaxed_mem_alloc(&arena->base.base, arena->base.size), func, "cuMemAlloc");
  void* p = NULL;
  ncclResult_t r;
  NCCL_RELAXED(r, nccl.ncclMemAlloc(&p, arena->base.size));
  if (r != 0) return nccl_fail(r, arena->comm->nccl, func, "ncclMemAlloc");
  arena->base.base = (CUdeviceptr)(uintptr_t)p;
  arena->from_nccl = true;
  return CGC_SUCCESS;
}

/* Registers it with the communicator as `kind` (a symmetric window is collective). */
static cgc_status_t register_arena(nccl_arena_t* arena, cgc_nccl_memory_t kind, const char* func) {
  ncclComm_t c = arena->comm->nccl;
  void* p = (void*)(uintptr_t)arena->base.base;
  ncclResult_t r = 0;
  if (kind == CGC_NCCL_MEMORY_SYMMETRIC) {
    NCCL_RELAXED(r, nccl.ncclCommWindowRegister(c, p, arena->base.size, &arena->window, kNcclWinCollSymmetric));
    return r == 0 ? CGC_SUCCESS : nccl_fail(r, c, func, "ncclCommWindowRegister (symmetric)");
  }
  if (kind == CGC_NCCL_MEMORY_REGISTERED) {
    NCCL_RELAXED(r, nccl.ncclCommRegister(c, p, arena->base.size, &arena->registration));
    return r == 0 ? CGC_SUCCESS : nccl_fail(r, c, func, "ncclCommRegister");
  }
  return CGC_SUCCESS;
}

/* Every rank learns the lowest and highest of the ranks' `mine` (an eager all-reduce with max of
 * (mine, -mine) through the 8-byte device buffer `scratch`, waited for). A rank whose own step
 * failed passes -1, so that the others fail with it instead of waiting for it in a later
 * collective step. */
static cgc_status_t agree(cgc_comm_t comm, int mine, int* lowest, int* highest, const char* func) {
  CUstream s = NULL;
  CUdeviceptr scratch = comm->scratch;
  int32_t values[2] = {mine, -mine};
  cgc_status_t st = cgc__cu_fail(CGC_DRV(cuStreamCreateWithPriority)(&s, CU_STREAM_NON_BLOCKING, 0), func,
                                 "cuStreamCreateWithPriority");
  /* With mixing off this collective too waits for the communicator's last work (a graph may
   * still run); its stream's key is one no other stream has. */
  uint64_t key = (uint64_t)(uintptr_t)s | ((uint64_t)1 << 62) | ((uint64_t)1 << 61);
  if (st == CGC_SUCCESS && comm->order_event != NULL)
    st = cgc__cu_fail(order_before(comm, s, key), func, "cuStreamWaitEvent (after the communicator's last work)");
  if (st == CGC_SUCCESS)
    st = cgc__cu_fail(CGC_DRV(cuMemcpyHtoDAsync)(scratch, values, sizeof values, s), func, "cuMemcpyHtoDAsync");
  if (st == CGC_SUCCESS) {
    void* buf = (void*)(uintptr_t)scratch;
    ncclResult_t r = nccl.ncclAllReduce(buf, buf, 2, kNcclInt32, kNcclMax, comm->nccl, s);
    if (r != 0) st = nccl_fail(r, comm->nccl, func, "ncclAllReduce (the ranks' agreement on the pool)");
  }
  if (st == CGC_SUCCESS && comm->order_event != NULL)
    st = cgc__cu_fail(order_after(comm, s, key), func, "cuEventRecord (the communicator's order)");
  if (st == CGC_SUCCESS)
    st = cgc__cu_fail(CGC_DRV(cuMemcpyDtoHAsync)(values, scratch, sizeof values, s), func, "cuMemcpyDtoHAsync");
  if (st == CGC_SUCCESS) {
    CUresult cr;
    NCCL_RELAXED(cr, CGC_DRV(cuStreamSynchronize)(s));
    st = cgc__cu_fail(cr, func, "cuStreamSynchronize");
  }
  if (s != NULL) CGC_DRV(cuStreamDestroy)(s);
  *highest = values[0];
  *lowest = -values[1];
  return st;
}

static const char* memory_name(int kind) { return kind >= 0 && kind <= 2 ? kMemoryNames[kind] : "none (failed)"; }

/* One step every rank takes (allocating, registering): `local` is this rank's result. Each rank
 * then knows whether all succeeded with the same kind; if not, all fail alike, this rank with its
 * own error when it had one. */
static cgc_status_t step_together(cgc_comm_t comm, cgc_status_t local, cgc_nccl_memory_t kind, const char* step,
                                  const char* func) {
  int lowest = 0, highest = 0;
  cgc_status_t st = agree(comm, local == CGC_SUCCESS ? (int)kind : -1, &lowest, &highest, func);
  if (st != CGC_SUCCESS) return st;
  if (local != CGC_SUCCESS) {
    cgc__append(" (no rank of communicator %p does it)", (void*)comm);
    return local;
  }
  if (lowest < 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "another rank of communicator %p failed %s its part of the pool (its cgc_last_error says "
                     "why): no rank does it",
                     (void*)comm, step);
  if (lowest != highest)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "the ranks of communicator %p got different kinds of memory (from %s to %s; this rank: %s): "
                     "NCCL leaves collectives on registered and unregistered buffers undefined, so no rank gets "
                     "the pool; ask every rank for the same kind, with the same NCCL",
                     (void*)comm, memory_name(lowest), memory_name(highest), memory_name(kind));
  return CGC_SUCCESS;
}

/* The ranks' agreement on a step of the pool's life (its release): every rank learns whether all
 * can take it. Inside a group the all-reduce would only be queued, so that is refused (every rank
 * of an SPMD program is inside its group alike). After an abort no collective can run: each rank
 * decides alone (NCCL freed the registration with the communicator). */
static cgc_status_t agree_on_arena(cgc__arena_t* base, cgc_status_t local, const char* step, const char* func) {
  nccl_arena_t* arena = (nccl_arena_t*)base;
  if (atomic_load(&arena->comm->aborted)) return local;
  if (group_depth > 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "inside cgc_group_start/cgc_group_end: the ranks' agreement on %s the NCCL pool would only be "
                     "queued; call it outside the group",
                     step);
  return step_together(arena->comm, local, arena->kind, step, func);
}

cgc_status_t cgc_nccl_pool_create(cgc_comm_t comm, size_t capacity, cgc_nccl_memory_t wanted, cgc_pool_t* out,
                                  cgc_nccl_memory_t* got) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  cgc_status_t st = check_comm(comm, __func__);
  if (st != CGC_SUCCESS) return st;
  CGC_CHECK_ARG((unsigned)wanted <= CGC_NCCL_MEMORY_SYMMETRIC, "wanted %d is not a cgc_nccl_memory_t", (int)wanted);
  CGC_CHECK_ARG(capacity > 0 && capacity <= ((size_t)1 << 48), "capacity %zu is outside (0, 2^48]", capacity);
  /* Refusals before the ranks' first step: as with any collective call, the other ranks then wait
   * for this one (the same program on every rank is refused alike). */
  if (group_depth > 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "inside cgc_group_start/cgc_group_end: the ranks' steps would only be queued; create the pool "
                     "outside the group");
  st = cgc__capture_guard(comm->dev, CGC__GUARD_AS_GLOBAL,
                          "registering memory with NCCL (it allocates, maps and synchronises)", __func__);
  if (st != CGC_SUCCESS) return st;
  cgc__ctx_scope_t scope;
  st = cgc__ctx_enter(comm->dev, &scope, __func__);
  if (st != CGC_SUCCESS) return st;

  /* Every rank steps together from here: a rank that fails alone must not leave the others waiting
   * in the next collective step (the window's registration, the first collective on the pool). */
  cgc_nccl_memory_t kind = available_kind(wanted);
  nccl_arena_t* arena = calloc(1, sizeof *arena);
  cgc_status_t local = arena != NULL ? CGC_SUCCESS : cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  if (arena != NULL) {
    /* Whole 2 MiB pages: ncclMemAlloc's granularity on these GPUs, and 4 KiB-aligned as windows must be. */
    const size_t page = (size_t)2 << 20;
    arena->base.size = (capacity + page - 1) / page * page;
    arena->base.drop = drop_arena;
    arena->base.agree = agree_on_arena;
    arena->comm = comm;
    arena->kind = kind;
    comm_retain(comm);
    local = allocate_arena(arena, kind, __func__);
  }
  cgc_pool_t pool = NULL;
  st = step_together(comm, local, kind, "allocating", __func__);
  if (st == CGC_SUCCESS) {
    local = register_arena(arena, kind, __func__);
    /* The pool (host memory only) is made before the last step, so that no rank can fail after it. */
    if (local == CGC_SUCCESS) {
      local = cgc__pool_create_arena(comm->dev, &arena->base, &pool, __func__); /* drops the arena on failure */
      if (local != CGC_SUCCESS) arena = NULL;
    }
    st = step_together(comm, local, kind, "registering", __func__);
  }
  if (st != CGC_SUCCESS) {
    if (pool != NULL) {
      cgc__pool_discard_arena(pool); /* nothing was allocated from it */
    } else if (arena != NULL) {
      drop_arena(&arena->base, __func__);
    }
    cgc__ctx_leave(&scope);
    return st;
  }
  cgc__ctx_leave(&scope);
  *out = pool;
  if (got != NULL) *got = kind;
  if (kind != wanted)
    cgc__warn(__func__,
              "NCCL %d gives %s memory, not %s (registered needs NCCL >= 2.19, symmetric >= 2.27): pool %p is %s",
              nccl.version, kMemoryNames[kind], kMemoryNames[wanted], (void*)pool, kMemoryNames[kind]);
  return CGC_SUCCESS;
}
