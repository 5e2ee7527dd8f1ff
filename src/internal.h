/* What the files of src/ share: object layouts, magics, error helpers, context scopes.
 * Names shared across files are cgc__<object>_<verb>; nothing here is exported. */
#ifndef CGC_INTERNAL_H_
#define CGC_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capi/cgc.h"
#include "src/driver.h"

/* ---- status and messages (status.c) ---- */

/* Sets this thread's last error to "func: <formatted>" and returns `status`. */
cgc_status_t cgc__fail(cgc_status_t status, const char* func, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sets the last error to a warning from a call that succeeds (e.g. an empty capture). */
void cgc__warn(const char* func, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends to the current last error (used to add detail after cgc__cu_fail). */
void cgc__append(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* Opt-in debug logging to stderr: CGC_LOG=debug. */
void cgc__log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define CGC_CHECK_ARG(cond, ...)                                        \
  do {                                                                  \
    if (!(cond)) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, __VA_ARGS__); \
  } while (0)

/* ---- handles (handle.c) ---- */

/* Every object starts with a magic word naming its kind. A destroyed object's word becomes
 * CGC_MAGIC_DEAD and its memory is parked in a quarantine for a while, so that a second destroy
 * or a use after destroy reads DEAD (INVALID_HANDLE) instead of touching reused memory. */
enum {
  CGC_MAGIC_CONTEXT = 0x43474331u, /* "CGC1" */
  CGC_MAGIC_STREAM = 0x43475354u,
  CGC_MAGIC_EVENT = 0x43474556u,
  CGC_MAGIC_GRAPH = 0x43474752u,
  CGC_MAGIC_POOL = 0x4347504Fu,
  CGC_MAGIC_COMM = 0x4347434Du,
  CGC_MAGIC_RNG = 0x4347524Eu,
  CGC_MAGIC_DEAD = 0xDEADC6C0u,
};

/* CGC_SUCCESS when h is a live object of kind `magic`; otherwise INVALID_ARGUMENT (NULL) or
 * INVALID_HANDLE (destroyed, or another kind), with a message naming func and arg. */
cgc_status_t cgc__check_handle(const void* h, uint32_t magic, const char* func, const char* arg);
#define CGC_CHECK_HANDLE(h, magic)                                               \
  do {                                                                           \
    cgc_status_t check_st_ = cgc__check_handle((h), (magic), __func__, #h);      \
    if (check_st_ != CGC_SUCCESS) return check_st_;                              \
  } while (0)
/* Inline form for hot paths: true when h is live of that kind. */
static inline bool cgc__is_live(const void* h, uint32_t magic) {
  return h != NULL && *(const volatile uint32_t*)h == magic;
}
/* Poisons `obj` (whose first word is its magic) and frees it after a delay. */
void cgc__retire(void* obj);

/* ---- devices and contexts (context.c) ---- */

struct cgc__allocator;

/* Per-device state shared by every context handle of that device: the primary context (retained
 * once, for the life of the process, because cached memory and loaded kernels live in it) and
 * the caching allocator. Created on first use, never freed. */
struct cgc__device {
  int ordinal;
  CUdevice cu_device;
  CUcontext cu;                 /* the primary context */
  struct cgc__allocator* alloc; /* alloc.c */
  struct cgc__kernels* kernels; /* the library's own kernels, loaded on first use (rng.c) */
};

/* A context handle is the user's ticket to a device; objects made from it point at the device,
 * so destroying the handle first leaves them working. */
struct cgc_context_s {
  uint32_t magic;
  struct cgc__device* dev;
};

/* The state of device `ordinal`, created (primary context retained) on first use. */
cgc_status_t cgc__device_get(int ordinal, struct cgc__device** out, const char* func);

/* Makes the device's primary context current on this thread for the duration of a call, if it
 * is not already, and puts the caller's context back afterwards: a framework's current context
 * is never changed behind its back. */
typedef struct cgc__ctx_scope {
  bool pushed;
} cgc__ctx_scope_t;
cgc_status_t cgc__ctx_enter(struct cgc__device* dev, cgc__ctx_scope_t* scope, const char* func);
void cgc__ctx_leave(cgc__ctx_scope_t* scope);

/* ---- streams and events (stream.c, event.c) ---- */

struct cgc_stream_s {
  uint32_t magic;
  struct cgc__device* dev;
  CUstream cu;  /* NULL for the legacy default stream */
  bool owned;   /* created by cgc_stream_create: destroyed with the handle */
  bool legacy;  /* the legacy default stream: needs ctx current for every call on it */
};

struct cgc_event_s {
  uint32_t magic;
  struct cgc__device* dev;
  CUevent cu;
  /* Fork/join bookkeeping of the last record (guarded by the capture registry's lock):
   * the capture it was recorded into (0: none), the stream it was recorded on and when. */
  uint64_t capture_id;
  CUstream recorded_on;
  uint64_t record_seq;
};

/* ---- captures (capture.c) ---- */

/* A side stream forked into a capture through cgc_stream_wait_event, and what joined it. */
struct cgc__side {
  CUstream cu;
  uint64_t fork_seq;   /* last time it waited on an event of the capture (new work may follow) */
  uint64_t joined_seq; /* latest record on it that the origin has (transitively) waited on */
  /* streams whose events this side stream waited on: joining it joins them up to `seq` */
  struct cgc__absorbed {
    CUstream from;
    uint64_t event_seq; /* the record waited on */
    uint64_t at_seq;    /* when the wait happened */
  }* absorbed;
  size_t n_absorbed, cap_absorbed;
};

/* An object a capture (then its graph) uses and holds a reference on. */
enum cgc__use_kind { CGC_USE_RNG = 1, CGC_USE_COMM = 2 };
struct cgc__use {
  int kind;
  void* object;
};

struct cgc__capture {
  uint64_t id; /* the driver's capture id; 0 until cuStreamBeginCapture returned */
  struct cgc__device* dev;
  CUstream origin;
  cgc_capture_mode_t mode;
  unsigned flags;
  cgc_pool_t pool; /* holds a reference for the capture's duration (NULL until pools exist) */
  struct cgc__side* sides;
  size_t n_sides, cap_sides;
  struct cgc__use* uses; /* generators and communicators used; handed to the graph at the end */
  size_t n_uses, cap_uses;
  struct cgc__capture* next;
};

/* Number of captures begun through cgc and not yet ended, process-wide. While it is non-zero
 * the library does no cuMemFree and no event query (SEMANTICS 5). */
extern atomic_int cgc__captures_underway;

/* Fork/join bookkeeping hooks called by event.c / stream.c after the driver call succeeded. */
void cgc__capture_note_record(cgc_event_t ev, cgc_stream_t stream);
void cgc__capture_note_wait(cgc_stream_t stream, cgc_event_t ev);
/* True if a capture begun through cgc is under way with `stream` as its origin. */
bool cgc__capture_has_origin(CUstream stream);

/* True if side stream `stream` of capture `id` was joined to the origin by a record made after
 * bookkeeping sequence `since`. */
bool cgc__capture_side_joined(uint64_t id, const void* stream, uint64_t since);
/* The current bookkeeping sequence number. */
uint64_t cgc__capture_seq(void);
/* The id of the capture `stream` takes part in (0 when it is not capturing), asking the driver.
 * CGC_ERROR_INVALID_STATE, with a message, when it is capturing outside cgc (cuStreamBeginCapture
 * called directly): work that needs cgc's bookkeeping cannot be captured there. */
cgc_status_t cgc__stream_capture_id(cgc_stream_t stream, uint64_t* id, const char* func);
/* Records that capture `id` uses `object`; *added is true the first time, when the caller takes
 * a reference that the capture (then its graph) holds. CGC_ERROR_INVALID_STATE without such a
 * capture. */
cgc_status_t cgc__capture_add_use(uint64_t id, int kind, void* object, bool* added, const char* func);

/* ---- pools and the allocator (pool.c, alloc.c) ---- */

/* Takes the pool a capture records into (`requested`, or a new one), marks it recording and
 * holds a reference for the capture. */
cgc_status_t cgc__pool_begin_capture(struct cgc__device* dev, cgc_pool_t requested, CUstream origin,
                                     cgc_pool_t* out, const char* func);
void cgc__pool_capture_started(cgc_pool_t pool, uint64_t capture_id);
/* The capture is over: blocks it deferred are settled (`members`: the capture's streams) and its
 * reference passes to the new graph, or is dropped. */
void cgc__pool_end_capture(cgc_pool_t pool, bool graph_keeps_ref, const CUstream* members, size_t n_members);
/* Drops an internal (graph) reference. NULL is fine. */
void cgc__pool_unref(cgc_pool_t pool);
size_t cgc__pool_reserved(cgc_pool_t pool);
cgc_status_t cgc__malloc(struct cgc__device* dev, size_t size, CUstream stream, bool legacy, void** out,
                         const char* func);

/* ---- NCCL (nccl.c) ---- */

/* For bench/nccl_bench.c's floor: the ncclComm_t behind a communicator (NULL if dead or
 * aborted) and an NCCL function of the library cgc loaded (NULL without NCCL). */
void* cgc__comm_native(cgc_comm_t comm);
void* cgc__nccl_function(const char* name);

/* ---- graphs (graph.c) ---- */

/* A generator a graph draws from, and how far one replay advances it. */
struct cgc__rng_use {
  cgc_rng_t rng;
  uint64_t offset_per_replay; /* a multiple of 4 */
};

struct cgc_graph_s {
  uint32_t magic;
  struct cgc__device* dev;
  CUgraph graph;    /* NULL after reset */
  CUgraphExec exec; /* NULL after reset */
  cgc_pool_t pool;  /* one reference, dropped at reset */
  size_t node_count;
  atomic_uint_fast64_t replays;
  atomic_int uploaded;
  struct cgc__rng_use* rngs; /* each replay first writes these generators' state (rng.c) */
  size_t n_rngs;
  cgc_comm_t* comms; /* communicators its collectives use: they may not be destroyed first */
  size_t n_comms;
};

/* Wraps an ended capture's graph: instantiates (and uploads with CGC_CAPTURE_UPLOAD). Takes
 * ownership of `graph`, of the pool reference and of the uses (their references) in every
 * case. */
cgc_status_t cgc__graph_create(struct cgc__device* dev, CUgraph graph, size_t node_count, cgc_pool_t pool,
                               struct cgc__use* uses, size_t n_uses, unsigned flags, CUstream upload_stream,
                               const char* func, cgc_graph_t* out);
/* Drops the references of uses that no graph will take (a failed capture). */
void cgc__release_uses(struct cgc__use* uses, size_t n_uses);

/* ---- generators and communicators, as graphs see them (rng.c, nccl.c) ---- */

/* The capture that used `rng` is over: returns what one replay consumes, clears its capture state. */
uint64_t cgc__rng_capture_done(cgc_rng_t rng);
/* Writes the generator's seed and offset to its device slots on `stream`, then advances the
 * offset by `amount`: what each replay does before cuGraphLaunch. */
CUresult cgc__rng_replay_prologue(cgc_rng_t rng, uint64_t amount, CUstream stream);
void cgc__rng_unref(cgc_rng_t rng);
void cgc__comm_unref(cgc_comm_t comm);

#endif /* CGC_INTERNAL_H_ */
