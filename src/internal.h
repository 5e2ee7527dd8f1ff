/* What the files of src/ share: object layouts, magics, error helpers, context scopes.
 * Names shared across files are cgc__<object>_<verb>; nothing here is exported. Comments cite
 * the rules of docs/SEMANTICS.md as "SEMANTICS n" and the contract as docs/CONTRACT.md.
 *
 * Sections follow the layers, lowest first; a file calls only into its own layer and the ones
 * above it in this header:
 *   status.c, driver.c, handle.c      messages, the driver table, handle checks,
 *   lockcheck.c                       and the lock rule's check (lockcheck.h)
 *   device.c                          per-device state, the current-context scope
 *   stream_ref.c                      what a stream handle means on the calling thread
 *   registry.c                        the captures under way, fork/join bookkeeping, refusals
 *   enqueue.c                         what every call that enqueues work on a stream does first
 *   blocks.c, allocator.c, reclaim.c, joins.c, fences.c, segments.c, cache.c
 *                                     the caching allocator's layers (allocator.h)
 *   alloc.c, pool.c, snapshot.c       its entry points: allocations, private pools, the snapshot
 *   address_pool.c                    pools at fixed addresses (an arena reserved at a base)
 *   graph.c, rng.c, nccl.c, module.c, hostfn.c   graphs and the objects graphs hold
 *   capture.c, stream.c, event.c, context.c, copy.c, memop.c, conditional.c, api.c
 *                                     the public entry points that drive the rest
 *   saved_file.c, save.c, restore.c   saved graphs (1.6): the file's bytes, saving, restoring
 *
 * The locks, their order and which of them are hot (taken by cgc_malloc, cgc_free,
 * cgc_record_stream, cgc_event_record, cgc_graph_launch) are one list: CGC_LOCKS in lockcheck.h.
 * No hot lock is held across a driver call that can wait for the GPU: only the calls of
 * driver.h's CGC_DRIVER_NEVER_WAITS (measured by bench/driver_waits) may run under one, and with
 * CGC_LOCK_CHECK=1 (the tests) anything else aborts. docs/DESIGN.md, "Layers and locks". */
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

/* Sets this thread's last error to "func: <formatted>" and its last status (cgc_last_status) to
 * `status`, and returns `status`. */
cgc_status_t cgc__fail(cgc_status_t status, const char* func, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sets the last error to a warning from a call that succeeds (e.g. an empty capture), and the last
 * status to CGC_SUCCESS: never on a path that returns a failure (cgc__append adds to its message). */
void cgc__warn(const char* func, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes another thread's failure this thread's: its message as that thread's last error held it
 * (a call's worker threads, whose caller returns their first failure), and `status`. */
cgc_status_t cgc__carry_failure(cgc_status_t status, const char* message);
/* Appends to the current last error (used to add detail after cgc__cu_fail); the status stays. */
void cgc__append(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* Opt-in debug logging to stderr: CGC_LOG=debug. */
void cgc__log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether CGC_LOG=debug is on (for readings made only to be logged). */
bool cgc__log_on(void);

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
  CGC_MAGIC_MODULE = 0x43474D44u,
  CGC_MAGIC_FUNCTION = 0x43474655u,
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

/* ---- devices and the current context (device.c) ---- */

struct cgc__allocator;

/* Per-device state shared by every context handle of that device: the primary context (retained
 * once, for the life of the process, because cached memory and loaded kernels live in it), the
 * caching allocator and the library's kernels. Created on first use, never freed, so any
 * object may keep a pointer to it. */
struct cgc__device {
  int ordinal;
  CUdevice cu_device;
  CUcontext cu;                           /* the primary context */
  _Atomic(struct cgc__allocator*) alloc;  /* alloc.c, created on first use */
  struct cgc__kernels* kernels;           /* rng.c, guarded by its kernels_lock */
  atomic_uint_fast64_t legacy_stream_id;  /* the legacy stream's driver id; 0 until asked */
  atomic_int contexts;                    /* live cgc_context_t handles of the device */
  atomic_int adopted_captures;            /* its pools' open adoptions (pool.c counts them) */
  /* CGC__MEMOP_* capabilities for stream memory operations (memop.c); 0 until asked. */
  atomic_uint memop_caps;
  _Atomic(CUstream) fence_stream; /* cgc__device_fence_stream's, NULL until first needed */
  /* cgc's conditional-node kernel (conditional.c), NULL until the device's first conditional:
   * graph.c leaves it out of the kernel nodes it counts and numbers. */
  _Atomic(CUfunction) condition_kernel;
};

/* A context handle is the user's ticket to a device; objects made from it point at the device,
 * so destroying the handle first leaves them working. */
struct cgc_context_s {
  uint32_t magic;
  struct cgc__device* dev;
};

/* The state of device `ordinal`, created (primary context retained) on first use. After the
 * first call for a device this is two loads: no driver call, no lock. */
cgc_status_t cgc__device_get(int ordinal, struct cgc__device** out, const char* func);

/* Makes the device's primary context current on this thread for the duration of a call, if it
 * is not already, and puts the caller's context back afterwards: a framework's current context
 * is never changed behind its back. */
typedef struct cgc__ctx_scope {
  bool pushed;
} cgc__ctx_scope_t;
cgc_status_t cgc__ctx_enter(struct cgc__device* dev, cgc__ctx_scope_t* scope, const char* func);
void cgc__ctx_leave(cgc__ctx_scope_t* scope);
/* A stream of the device's own (created on first use, kept for the process) on which cgc records
 * events ordered after other events, without waiting on the host (graph.c). */
cgc_status_t cgc__device_fence_stream(struct cgc__device* dev, CUstream* out, const char* func);

/* > 0 while this thread runs a host function of cgc_launch_host_func (hostfn.c): the driver
 * forbids CUDA calls there, so cgc__ctx_enter and cgc__stream_resolve refuse with
 * INVALID_STATE instead of letting the driver fail (or deadlock). */
cgc_status_t cgc__refuse_in_host_function(const char* func);
/* The first statement of every public function that can reach the driver (SEMANTICS 22): inside
 * a host function it is refused before it changes anything. Under CGC_LOCK_CHECK any driver call
 * made there anyway aborts the tests (lockcheck.h). */
#define CGC_REFUSE_IN_HOST_FUNCTION()                                                                  \
  do {                                                                                                 \
    if (__builtin_expect(cgc__host_function_depth > 0, 0)) return cgc__refuse_in_host_function(__func__); \
  } while (0)

/* ---- streams as the calling thread sees them (stream_ref.c) ---- */

/* What a stream handle wraps. The legacy and per-thread default streams are one handle for
 * many real streams (one per context, one per thread): every call on them needs the device's
 * context current, and their identity is resolved on the calling thread. */
typedef enum cgc__stream_kind {
  CGC__STREAM_OWNED = 0,    /* cgc_stream_create: destroyed with the handle */
  CGC__STREAM_BORROWED = 1, /* cgc_stream_wrap of an ordinary stream: the caller's */
  CGC__STREAM_LEGACY = 2,   /* the legacy default stream (NULL / cudaStreamLegacy) */
  CGC__STREAM_PER_THREAD = 3, /* cudaStreamPerThread: the calling thread's own stream */
} cgc__stream_kind_t;

struct cgc_stream_s {
  uint32_t magic;
  struct cgc__device* dev;
  CUstream cu; /* NULL for the legacy stream, CU_STREAM_PER_THREAD for the per-thread stream */
  cgc__stream_kind_t kind;
  bool special; /* legacy or per-thread: the context must be current for every call on it */
  /* Set on a stream cgc lends for a conditional body (conditional.c): what to end it with; taken
   * (exchanged for NULL) by the one call that ends the body. */
  _Atomic(struct cgc__body*) body;
  /* The driver's id of an ordinary stream (unique for the life of the process, never reused,
   * unlike the CUstream's address); 0 while unknown (wrapped while it was capturing: asking
   * the driver for a capturing stream's id invalidates the capture). */
  atomic_uint_fast64_t id;
};

/* A key that no driver stream id takes: for a stream whose id cannot be asked now (it is
 * capturing), its address marked with the top bit. Only ever compared within one capture. */
#define CGC__KEY_OF_ADDRESS(cu) ((uint64_t)(uintptr_t)(cu) | ((uint64_t)1 << 63))
/* A key no stream ever has (the top two bits set: a stream's address key has bit 62 clear, a
 * dying segment's key bit 63 clear), made unique by an address of cgc's: cached memory under it
 * serves no allocation, and only cgc_empty_cache's cuMemFree (which waits for the device) takes
 * it back. */
#define CGC__KEY_NO_STREAM(p) ((uint64_t)(uintptr_t)(p) | ((uint64_t)3 << 62))
/* 1.5: the key of a pool's blocks that cgc_pool_malloc hands out on a stream (its key with bit 61,
 * which no id, address key or dying key has): reused only by cgc_pool_malloc on that stream, never
 * by a capture into the pool, so that eager memory and graphs' memory of one pool stay apart. */
#define CGC__KEY_POOL_EAGER_BIT ((uint64_t)1 << 61)
#define CGC__KEY_POOL_EAGER(key) ((key) | CGC__KEY_POOL_EAGER_BIT)

/* One stream, resolved for the calling thread. */
typedef struct cgc__stream_ref {
  CUstream cu;         /* what to pass to the driver (the context made current for `special`) */
  uint64_t key;        /* the driver's stream id, or CGC__KEY_OF_ADDRESS while capturing */
  uint64_t capture_id; /* the capture it takes part in (0: none, or not asked) */
  bool capturing;      /* in a capture (active or invalidated) */
  bool invalidated;    /* ...and that capture was invalidated (the driver then reports id 0) */
  bool special;        /* legacy or per-thread */
} cgc__stream_ref_t;

/* Resolves `s` for this thread: its key and, with `ask_capture`, whether it captures (one
 * cuStreamGetCaptureInfo; the legacy stream never captures and costs nothing). Enters and
 * leaves the device's context by itself where the stream needs it. */
cgc_status_t cgc__stream_resolve(cgc_stream_t s, bool ask_capture, cgc__stream_ref_t* out, const char* func);
/* The same for a native CUstream of `dev` (PyTorch's allocator entry points): always asks
 * whether it captures. */
cgc_status_t cgc__stream_resolve_native(struct cgc__device* dev, CUstream cu, cgc__stream_ref_t* out,
                                        const char* func);
/* A new owned stream of `dev` (cgc_stream_create without a context handle: conditional.c lends
 * such streams for conditional bodies). */
cgc_status_t cgc__stream_create(struct cgc__device* dev, unsigned flags, int priority, cgc_stream_t* out,
                                const char* func);
/* Enters the device's context when the stream needs it (legacy, per-thread). */
cgc_status_t cgc__stream_enter(cgc_stream_t s, cgc__ctx_scope_t* scope, const char* func);

/* ---- events (event.c) ---- */

struct cgc_event_s {
  uint32_t magic;
  struct cgc__device* dev;
  CUevent cu;
  /* Fork/join bookkeeping of the last record made while a capture was under way (guarded by
   * the registry lock): the capture it was recorded into (0: none), the stream key it was
   * recorded on and when. */
  uint64_t capture_id;
  uint64_t recorded_on;
  uint64_t record_seq;
};

/* ---- the captures under way (registry.c) ---- */

/* An object a capture (then its graph) uses and holds a reference on, with what a graph does
 * with it: a small table of operations, so that graphs know no kind of object by name. */
typedef struct cgc__use_ops {
  const char* kind;                /* for messages: "generator", "communicator" */
  void (*retain)(void* object);    /* one more reference (an atomic add: no lock, no driver) */
  void (*release)(void* object);   /* drops one; may free the object (no lock held) */
  /* The capture that used the object is over; `kept`: a graph now holds it. Returns what each
   * replay passes to before_launch (e.g. how far it advances a generator). */
  uint64_t (*capture_done)(void* object, bool kept);
  /* Run before each launch of a graph holding the object, on the launch stream with the device's
   * context current; NULL when the object needs nothing at launch. `stream_key` (stream_ref.c) is
   * given to graphs with an after_launch use; 0 otherwise and in a capture cgc did not begin.
   * `*undo` is handed to launch_failed if the launch does not happen after all. */
  CUresult (*before_launch)(void* object, uint64_t amount, CUstream stream, uint64_t stream_key, uint64_t* undo);
  /* A launch whose before_launch succeeded failed later (a later use's step, cuGraphLaunch): give
   * back what before_launch took (CONTRACT: a failed call leaves nothing half done). NULL: nothing
   * to give back. */
  void (*launch_failed)(void* object, uint64_t amount, uint64_t undo);
  /* True when the object may be released only after the graph's last replay is over (a host
   * function's data, a module's code): reset then waits for the graph's completion event. */
  bool release_after_replays;
  /* True when replays read the object's device memory, which it frees in stream order: before
   * releasing it, a reset makes the device's fence stream wait for the graph's last replay
   * (never waiting itself), and the object frees that memory once a record on the fence stream
   * made at its death completes (a generator's slots). */
  bool ordered_after_replays;
  /* Run after each successful launch, as before_launch; NULL when nothing is needed. */
  CUresult (*after_launch)(void* object, CUstream stream, uint64_t stream_key);
} cgc__use_ops_t;

struct cgc__use {
  const cgc__use_ops_t* ops;
  void* object;
  uint64_t amount; /* capture_done's answer, once the capture is over */
  bool settled;    /* amount known already, no capture to end: a restored graph's (its file says) */
};

/* ---- a graph's uses (uses.c) ---- */

/* A graph's uses: objects it holds, those with a launch prologue first. */
typedef struct cgc__graph_uses {
  struct cgc__use* uses;
  size_t n_uses, n_prologue;
  bool ordered; /* a use runs after_launch with the launch stream's key (a communicator's order) */
} cgc__graph_uses_t;
/* Moves a capture's uses into `out` (capture_done told each that a graph keeps it). False when
 * out of host memory (nothing moved). */
bool cgc__take_uses(cgc__graph_uses_t* out, const struct cgc__use* uses, size_t n_uses);
/* Whether a use may be released only after the graph's last replay (release_after_replays). */
bool cgc__releases_after_replays(const struct cgc__use* uses, size_t n_uses);
/* Before uses whose memory replays read are dropped (ordered_after_replays): the device's fence
 * stream waits for `last_replay`, never the caller (the context is current). Only if that cannot
 * be enqueued does the caller wait for the replay itself, in Relaxed mode. */
void cgc__order_fence_stream_after(struct cgc__device* dev, CUevent last_replay, const struct cgc__use* uses,
                                   size_t n_uses, const char* func);
/* Releases a graph's uses and frees their array. */
void cgc__release_taken(struct cgc__use* uses, size_t n_uses);
/* Drops the references of uses that no graph will take (a failed capture). */
void cgc__release_uses(struct cgc__use* uses, size_t n_uses);

/* A side stream forked into a capture through cgc_stream_wait_event, and what joined it. */
struct cgc__side {
  uint64_t key;
  CUstream cu;         /* for messages and the final capture check */
  uint64_t fork_seq;   /* last time it waited on an event of the capture (new work may follow) */
  uint64_t joined_seq; /* latest record on it that the origin has (transitively) waited on */
  /* streams whose events this side stream waited on: joining it joins them up to `seq` */
  struct cgc__absorbed {
    uint64_t from;
    uint64_t event_seq; /* the record waited on */
    uint64_t at_seq;    /* when the wait happened */
  }* absorbed;
  size_t n_absorbed, cap_absorbed;
};

typedef enum cgc__capture_state {
  CGC__CAPTURE_BEGINNING = 0, /* registered; the driver capture is being begun */
  CGC__CAPTURE_ACTIVE = 1,
  CGC__CAPTURE_ENDING = 2, /* one thread is ending it: any other end is refused */
} cgc__capture_state_t;

typedef struct cgc_pool_s* cgc__pool_ptr;

struct cgc__capture {
  uint64_t id; /* the driver's capture id; 0 until cuStreamBeginCapture returned */
  struct cgc__device* dev;
  CUstream origin;     /* as the beginning thread passes it to the driver */
  uint64_t origin_key; /* its stream key (unique, also for per-thread streams) */
  bool origin_per_thread;
  cgc_capture_mode_t mode;
  pthread_t thread; /* the thread that began it */
  unsigned flags;
  cgc__capture_state_t state;
  cgc__pool_ptr pool; /* holds a reference for the capture's duration */
  CUevent done;       /* recorded as the graph's last node: see graph.c */
  struct cgc__side* sides;
  size_t n_sides, cap_sides;
  struct cgc__use* uses; /* objects used; handed to the graph at the end */
  size_t n_uses, cap_uses;
  /* The graph this capture updates (cgc_capture_options_t.update), marked `updating` for the
   * capture's duration: nothing else may reset, destroy or update it meanwhile. */
  cgc_graph_t update;
  /* Conditional bodies being captured into this capture's graph, in the order they opened (an id
   * of 0: a body being set up, reserved so that no end can start meanwhile). Calls on a body
   * stream take part in this capture; it cannot end while one is open. `broken`: a conditional
   * node could not be completed, so the capture's graph must not be kept (its end fails). */
  struct cgc__open_body {
    uint64_t id;       /* the driver's id of the body capture, 0 while reserved */
    cgc_stream_t lent; /* the stream its work goes to */
  }* bodies;
  size_t n_bodies, cap_bodies;
  struct cgc__body* retired_bodies; /* ended bodies' records, freed when the capture is taken out */
  bool broken;
  /* A conditional body's capture was invalidated: the capture still ends with a graph, and
   * destroying that graph crashed driver 580 (conditional.c says how it was measured), so the
   * discarded graph is left allocated. */
  bool graph_unsafe;
  struct cgc__capture* next;
};

/* Captures begun through cgc and not yet ended, process-wide (a relaxed hint for fast paths;
 * decisions that need it exact take the registry lock). */
int cgc__captures_underway(void);
/* Pools adopting a capture cgc did not begin, process-wide (pool.c counts them; defined in
 * registry.c, whose guards refuse device-wide and NCCL setup calls while any is open, as for a
 * Global capture: cgc does not know the adopted capture's mode). While non-zero, cgc_malloc asks
 * whether its stream captures. */
extern atomic_int cgc__adopted_captures;

/* Registers `c` (state BEGINNING) before the driver begins, so that its pool is routed to from
 * the first instant. INVALID_STATE when its origin is already the origin of a capture. */
cgc_status_t cgc__registry_add(struct cgc__capture* c, const char* func);
/* The driver began capture `id`: `c` becomes ACTIVE. */
void cgc__registry_activate(struct cgc__capture* c, uint64_t id);
/* Takes `c` out (after the driver capture ended, or failed to begin). */
void cgc__registry_remove(struct cgc__capture* c);
/* The capture whose origin is `ref`'s stream, claimed for ending (ACTIVE -> ENDING): exactly
 * one of several threads ending it at once gets it; the others get INVALID_STATE. */
cgc_status_t cgc__registry_claim_end(const cgc__stream_ref_t* ref, struct cgc__capture** out, const char* func);
/* Whether driver capture `id` is one cgc began and has not ended yet, or a conditional body of
 * one being captured. */
bool cgc__registry_is_cgc_capture(uint64_t id);
/* A conditional body in the cgc capture that `id` (the capture or one of its bodies) belongs to:
 * reserved first (INVALID_STATE when that capture is not under way: ended, or being ended), so
 * that no end of the capture can start while the node is being added; then opened with its
 * driver capture id and lent stream, or given back; closed at its end. */
cgc_status_t cgc__registry_reserve_body(uint64_t id, const char* func);
void cgc__registry_open_body(uint64_t id, uint64_t body_id, cgc_stream_t lent);
void cgc__registry_unreserve_body(uint64_t id);
/* Closing a body keeps its record until the capture is taken out of the registry (then freed),
 * so that a late call on the body's stream never reads freed memory. */
void cgc__registry_close_body(uint64_t body_id, struct cgc__body* record);
/* The capture `id` belongs to must not be kept: its end fails (CAPTURE_INVALIDATED). */
void cgc__registry_mark_broken(uint64_t id);
/* The same, for a capture whose conditional body's capture was invalidated (graph_unsafe). */
void cgc__registry_mark_body_invalidated(uint64_t id);
/* The lent stream of the last body opened in the capture whose origin is stream `key` (NULL when
 * none): cgc_capture ends them before discarding the capture. */
cgc_stream_t cgc__registry_last_body(uint64_t key);
/* Whether a recorded capture has the stream of `key` as its origin or a side stream. */
bool cgc__registry_has_stream(uint64_t key);
/* Gives a claimed capture back (ENDING -> ACTIVE): the driver kept it going. */
void cgc__registry_unclaim(struct cgc__capture* c);

/* cuEventRecord / cuStreamWaitEvent with the fork/join bookkeeping updated in the same critical
 * section, so that it sees records and waits in the driver's order. `ref` is resolved with
 * ask_capture when a capture is under way. */
cgc_status_t cgc__registry_record(cgc_event_t ev, const cgc__stream_ref_t* ref, const char* func);
cgc_status_t cgc__registry_wait(const cgc__stream_ref_t* ref, cgc_event_t ev, const char* func);
/* True if side stream `key` of capture `id` was joined to the origin by a record made after
 * bookkeeping sequence `since`. */
bool cgc__registry_side_joined(uint64_t id, uint64_t key, uint64_t since);
/* The current bookkeeping sequence number. */
uint64_t cgc__registry_seq(void);
/* The cgc capture `ref` (resolved with ask_capture) takes part in, 0 when none (for a
 * conditional body's stream, the capture the body belongs to). INVALID_STATE
 * when it captures under a capture cgc did not begin: work that needs cgc's bookkeeping
 * cannot be recorded into it; CAPTURE_INVALIDATED when the capture was invalidated. */
cgc_status_t cgc__registry_capture_of(const cgc__stream_ref_t* ref, uint64_t* id, const char* func);
/* CAPTURE_INVALIDATED for `what` on `ref`'s stream, whose capture was invalidated, saying how to
 * end it: with cgc_capture_end when cgc began it, else where it was begun. */
cgc_status_t cgc__refuse_invalidated(const cgc__stream_ref_t* ref, const char* what, const char* func);
/* Records that capture `id` uses `object`, retaining it the first time (the capture, then its
 * graph, holds that reference). INVALID_STATE without such a capture. */
cgc_status_t cgc__registry_add_use(uint64_t id, const cgc__use_ops_t* ops, void* object, const char* func);
/* The same for an object made for this use (no capture can know it yet): no search. */
cgc_status_t cgc__registry_add_new_use(uint64_t id, const cgc__use_ops_t* ops, void* object, const char* func);

/* Whether the calling thread may make a call the driver counts as unsafe during a capture (a
 * synchronisation, a stream or event query, a communicator's setup or teardown):
 * CAPTURE_UNSUPPORTED, naming the capture it would break and how to proceed, when the driver's
 * rule says it would break a cgc capture under way. */
typedef enum cgc__guard {
  CGC__GUARD_THIS_THREAD, /* the calling thread's own capture mode decides (Relaxed: allowed) */
  CGC__GUARD_AS_GLOBAL,   /* as from a thread in Global mode: for NCCL, whose own threads are */
  CGC__GUARD_DEVICE,      /* any capture of `dev`, from any mode: cuCtxSynchronize waits for it */
} cgc__guard_t;
cgc_status_t cgc__capture_guard(struct cgc__device* dev, cgc__guard_t kind, const char* call, const char* func);
/* The guard for a setup or teardown call that makes many driver calls over milliseconds, some on
 * threads not cgc's (a communicator's setup, an NCCL pool's registration): checked as
 * cgc__capture_guard, and on success the gate stays closed until cgc__capture_gate_open. A
 * cgc_capture_begin on another thread that the call would break (Global mode on any device; any
 * mode on `dev` for CGC__GUARD_DEVICE) is refused meanwhile (CAPTURE_UNSUPPORTED). The gate
 * lives on the caller's stack. */
typedef struct cgc__gate {
  struct cgc__device* dev;
  cgc__guard_t kind;
  pthread_t thread;
  const char* call; /* for the waiting capture's log line */
  struct cgc__gate* next;
} cgc__gate_t;
cgc_status_t cgc__capture_gate_close(cgc__gate_t* gate, struct cgc__device* dev, cgc__guard_t kind, const char* call,
                                     const char* func);
void cgc__capture_gate_open(cgc__gate_t* gate);
/* The number of cgc captures under way on `dev` (exact, under the registry lock), and one of
 * them for messages. */
int cgc__registry_count_on(struct cgc__device* dev, CUstream* origin);

/* ---- calls that enqueue work on a stream (enqueue.c) ---- */

/* Whether a call that enqueues work asks the driver if its stream captures (one
 * cuStreamGetCaptureInfo, about 20 ns). */
typedef enum cgc__ask {
  CGC__ASK_NEVER,          /* the work is the same captured or not (a set, a memory operation) */
  CGC__ASK_WHILE_CAPTURES, /* only while a cgc capture is under way (a kernel: its graph holds the code) */
  CGC__ASK_ALWAYS,         /* also in a capture of the driver's alone (a host function: eager and
                            * captured calls release their data differently) */
} cgc__ask_t;
/* What a call that enqueues work on `s` does first: refuses it inside a host function, resolves
 * the stream (asking as `ask` says; when not asked ref->capturing is false and no driver call is
 * made but cuCtxGetCurrent) and makes the device's context current (leave `scope` with
 * cgc__ctx_leave, also on failure). The legacy stream never captures: never asked. */
cgc_status_t cgc__enqueue_begin(cgc_stream_t s, cgc__ask_t ask, cgc__stream_ref_t* ref, cgc__ctx_scope_t* scope,
                                const char* func);
/* The cgc capture that `ref` (from cgc__enqueue_begin) records into, or 0 when it does not
 * capture; CAPTURE_UNSUPPORTED, naming `what`, when it captures under a capture cgc did not
 * begin or one already invalidated (no graph would hold what `what` needs). */
cgc_status_t cgc__enqueue_capture(const cgc__stream_ref_t* ref, const char* what, uint64_t* id, const char* func);
/* CAPTURE_UNSUPPORTED for `what` (an allocation, a host function, ...) on `s`, a conditional
 * body's stream (s->body set), naming what a body may hold. */
cgc_status_t cgc__refuse_in_body(cgc_stream_t s, const char* what, const char* func);

/* ---- conditional bodies (conditional.c) ---- */

/* Generators drawn from inside one WHILE body, and WHILE loops around a draw: the limits of the
 * bookkeeping below (rng.c refuses a draw beyond them, naming them). One loop: each loop
 * reserves CGC_LOOP_EAGER_ITERATIONS iterations of offsets per replay, and nested loops'
 * reservations would multiply (2^32 and more per replay), wrapping the 64-bit offset within a few
 * thousand replays. The device side (kernels/philox.cu's LoopChain) has room for 4. */
enum { CGC__LOOP_GENERATORS = 8, CGC__LOOP_DEPTH = 1 };

/* One body of a conditional node being captured, from cgc_capture_conditional_begin(_bodies)
 * to the end of the capture it belongs to (the registry frees it then, so that a late call on
 * the body's stream never reads freed memory). Written by the call that begins it before it is
 * published on the lent stream; `open_children` is atomic; the loop fields are rng.c's, guarded
 * by its loop lock. */
struct cgc__body {
  struct cgc__device* dev;
  cgc_conditional_kind_t kind;
  unsigned flags;                  /* CGC_CONDITIONAL_BODY_SETS_CONDITION */
  CUgraphConditionalHandle handle; /* shared by the node's bodies */
  const uint32_t* condition;
  uint64_t body_id;    /* the driver's id of this body's capture */
  uint64_t capture_id; /* the cgc capture it belongs to */
  uint64_t outer_key;  /* the key of the stream the node was added on: the body's memory goes to it */
  struct cgc__body* parent; /* the body the node was added in (NULL: the capture itself) */
  atomic_int open_children; /* bodies of nodes added in this one and not yet ended */
  /* The kernel node before the conditional node (it sets the condition); for WHILE it also
   * zeroes `loop_states` before each run of the node, once a draw needed them. */
  CUgraphNode set_node;
  CUfunction set_kernel;
  CUdeviceptr loop_states; /* WHILE with draws: CGC__LOOP_GENERATORS states of 32 bytes */
  struct cgc__loop_generator {
    void* rng;      /* cgc_rng_t: the capture holds it */
    uint64_t begin; /* the generator's position in the graph when the loop first drew from it */
  } generators[CGC__LOOP_GENERATORS];
  int n_generators;
  /* rng.c's work at the end of each iteration (NULL when the loop draws nothing): adds the
   * kernel that advances the loop's states on `stream`, the body's. */
  cgc_status_t (*end_iteration)(struct cgc__body* b, CUstream stream, const char* func);
  struct cgc__body* next_retired; /* the registry's list of ended bodies */
};

/* A conditional body ended: the blocks of the capture's pool allocated under the body stream's
 * key `body_key`, free or not, pass to `outer_key`, the stream the node was added on (the whole
 * node runs before that stream's later work). */
void cgc__alloc_body_ended(struct cgc__device* dev, uint64_t capture_id, uint64_t body_key, uint64_t outer_key);
/* The device memory of a WHILE body's generator states (allocated on the first call, zeroed by
 * the kernel before the node at every run of it, freed with the graph). */
cgc_status_t cgc__body_loop_states(struct cgc__body* loop, CUdeviceptr* out, const char* func);

/* ---- pools and the allocator (its layers below alloc.c and pool.c: allocator.h) ---- */

/* Takes the pool a capture records into (`requested`, or a new one), marks it recording and
 * routes allocations of streams capturing from `origin` (key `origin_key`) to it from now on;
 * holds a reference for the capture. */
cgc_status_t cgc__pool_begin_capture(struct cgc__device* dev, cgc_pool_t requested, CUstream origin,
                                     uint64_t origin_key, cgc_pool_t* out, const char* func);
void cgc__pool_capture_started(cgc_pool_t pool, uint64_t capture_id);
/* The capture is over: routing stops, blocks it deferred are settled (`members`: the keys of
 * the capture's streams) and its reference passes to the new graph, or is dropped. */
void cgc__pool_end_capture(cgc_pool_t pool, bool graph_keeps_ref, const uint64_t* members, size_t n_members);
/* Drops a graph's reference. `fence`, when not NULL, is an event that completes once the
 * graph's last replay has; the pool's memory goes to other work only after it (ownership of
 * the event passes to the pool). NULL pool is fine. */
void cgc__pool_unref(cgc_pool_t pool, CUevent fence);
size_t cgc__pool_reserved(cgc_pool_t pool);
cgc_status_t cgc__malloc(struct cgc__device* dev, size_t size, const cgc__stream_ref_t* ref, void** out,
                         const char* func);
/* cgc_pool_malloc: an eager block of `pool` for stream `ref` (not capturing), under the stream's
 * pool-eager key (CGC__KEY_POOL_EAGER). */
cgc_status_t cgc__pool_malloc(cgc_pool_t pool, size_t size, const cgc__stream_ref_t* ref, void** out,
                              const char* func);
/* cgc_pool_claim: [ptr, ptr + size rounded) of `pool`'s free memory as an allocated block. */
cgc_status_t cgc__pool_claim(cgc_pool_t pool, uint64_t ptr, size_t size, const char* func);

/* 1.6, saved graphs: a pool at fixed addresses as a saved file describes it (pool.c). A block by
 * its offset from the pool's base. */
typedef struct cgc__saved_block {
  uint64_t offset;
  uint64_t size;
} cgc__saved_block_t;
typedef struct cgc__pool_layout {
  uint64_t base, capacity, backed; /* the range, and how much of it from base is backed */
  cgc__saved_block_t* blocks;      /* allocated now, in address order (malloc'ed: the caller frees it) */
  size_t n_blocks;
} cgc__pool_layout_t;
/* Whether `pool` is a pool at fixed addresses (cgc_pool_create_at's), and its device. */
bool cgc__pool_is_fixed(cgc_pool_t pool);
struct cgc__device* cgc__pool_device(cgc_pool_t pool);
/* The layout of fixed pool `pool` now; INVALID_STATE while a capture records into it. */
cgc_status_t cgc__pool_layout(cgc_pool_t pool, cgc__pool_layout_t* out, const char* func);
/* One more reference for a graph (dropped by cgc__pool_unref). */
void cgc__pool_hold(cgc_pool_t pool);
/* Gives back a fixed pool that no stream work ever used (a failed restore's: its graphs were never
 * launched), without synchronising the device, so that it goes even while captures run; false
 * (nothing done) while anything holds it. The device's context current. */
bool cgc__pool_discard_unused(cgc_pool_t pool, const char* func);

/* Memory a pool is made of at addresses that never move, never given to the device cache:
 * 1.5's NCCL pools (a registered arena made by nccl_pool.c, all of it at once: one segment) and
 * 1.6's pools at fixed addresses (address_pool.c: a virtual range reserved at the caller's base,
 * backed by physical memory as the pool grows, a segment per growth). The pool is made with
 * cgc__pool_create_arena; its release (cgc_pool_release of the last reference, refused while
 * graphs, captures or allocated blocks hold it) synchronises the device, then calls `drop` once,
 * without locks, with the device's context current: it frees the memory and the struct, and
 * returns what failed (the pool is gone either way). */
typedef struct cgc__arena {
  CUdeviceptr base;
  size_t size;   /* the range: [base, base + size) */
  size_t mapped;   /* what is backed now, from base (allocator lock; an NCCL arena's is its size) */
  size_t pieces;   /* the driver allocations backing it, counted as segments (allocator lock) */
  size_t granule;  /* what it grows by a multiple of */
  bool growing;    /* a thread is backing more of it, with the allocator lock dropped (allocator lock) */
  const char* what; /* "NCCL pool", "pool at fixed addresses": for messages */
  cgc_status_t (*drop)(struct cgc__arena* arena, const char* func);
  /* The ranks' agreement on a step (its release): `local` is this rank's verdict (with its
   * cgc_last_error); returns success only if every rank's was. Collective; no lock held. An
   * arena of one process returns `local`. */
  cgc_status_t (*agree)(struct cgc__arena* arena, cgc_status_t local, const char* step, const char* func);
  /* Backs [base + mapped, base + mapped + bytes) with physical memory (no lock held; the caller
   * claimed `growing`); NULL for an arena that never grows. */
  cgc_status_t (*grow)(struct cgc__arena* arena, size_t bytes, const char* func);
} cgc__arena_t;
/* A pool of `dev` holding one user reference, whose memory is `arena` (owned by the pool from
 * now on, also on failure: then `drop` has run). */
cgc_status_t cgc__pool_create_arena(struct cgc__device* dev, cgc__arena_t* arena, cgc_pool_t* out, const char* func);
/* Undoes cgc__pool_create_arena of a pool nothing used yet (another rank failed a later step):
 * drops the arena, frees the pool. The device's context current. */
void cgc__pool_discard_arena(cgc_pool_t pool);
/* A stream handle is going away: events are recorded on it now for every block that recorded a
 * use of it, and its cached segments go to other streams once its work is done, so that
 * nothing later touches the dead stream or hands its memory out too early. */
cgc_status_t cgc__alloc_stream_ending(struct cgc__device* dev, const cgc__stream_ref_t* ref, const char* func);
/* The last context handle of the device is gone: cached segments and spare events go back to
 * the driver (blocks still allocated, and pools still referenced, keep theirs). */
void cgc__alloc_trim(struct cgc__device* dev);
/* Called by a capture's begin after the registry counts it and before the driver begins it:
 * waits until no free is recording fences on use streams (they record only while no capture
 * of the device is registered), so that a fence can never be captured instead of run. (A capture
 * begun with the driver directly is beyond it until a pool adopts it: docs/DESIGN.md.) */
void cgc__alloc_wait_fencing(struct cgc__device* dev);

/* ---- graphs (graph.c) ---- */

/* The launch attributes a graph's kernel node carries and the driver reports back (CUDA 13.0):
 * a saved file keeps them (saved_file.h); a family pairs members only if they agree on them and
 * on those nodes take but do not report (family.c). */
#define CGC_REPORTED_NODE_ATTRIBUTES(X)                       \
  X(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW)                 \
  X(CU_LAUNCH_ATTRIBUTE_COOPERATIVE)                          \
  X(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)                    \
  X(CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE) \
  X(CU_LAUNCH_ATTRIBUTE_PRIORITY)                             \
  X(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP)                  \
  X(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN)

/* 1.6: how a graph restored as a family member without its CUgraph gets one at its first use.
 * restore.c makes it; family.c calls it under the family's claim, the context current. `build`
 * makes the graph, its last node recording `done` (the graph's completion event); `drop` frees
 * what is left, once, whether it was built or not. */
typedef struct cgc__deferred {
  cgc_status_t (*build)(struct cgc__deferred* d, CUevent done, CUgraph* graph, const char* func);
  void (*drop)(struct cgc__deferred* d);
} cgc__deferred_t;

struct cgc_graph_s {
  uint32_t magic;
  struct cgc__device* dev;
  CUgraph graph;    /* NULL after reset */
  CUgraphExec exec; /* NULL after reset */
  /* Recorded by the graph's last node at every replay (replays of one executable run one
   * after another), so it completes when the last replay has: what the pool waits for before
   * its memory serves other work. NULL after reset. */
  CUevent done;
  cgc_pool_t pool; /* one reference, dropped at reset */
  size_t node_count;
  atomic_uint_fast64_t replays;
  atomic_int uploaded;
  struct cgc__use* uses; /* objects the graph holds */
  size_t n_uses;
  size_t n_prologue; /* how many of them run at launch (before_launch, after_launch): the fast path tests this */
  bool ordered;      /* one of them orders a communicator's work: its launch asks the stream's key */
  /* Serialises what inspects the CUgraph (node counts, DOT dumps, per-node updates): the driver
   * does not allow two threads in one graph at once. Guards `counts`, `counted` and
   * `kernel_nodes`. */
  pthread_mutex_t inspect_lock;
  cgc_graph_info_t counts; /* the node counts by kind, once `counted` */
  bool counted;
  CUgraphNode* kernel_nodes; /* the kernel nodes in capture order, once `counted` */
  /* The graph the executable was instantiated from, when an update in place gave the executable
   * a newer `graph`: the executable's nodes are its nodes (per-node updates name them). NULL
   * when it is `graph`. Guarded by inspect_lock, as is `any_disabled` (a kernel node was
   * disabled: an update in place enables them again). */
  CUgraph exec_graph;
  bool any_disabled;
  /* A per-node update changed the executable's kernel arguments (inspect_lock): its graph no
   * longer says what it runs, so it cannot be saved (an update by capture clears it). */
  bool args_changed;
  /* Updates by capture (1.2). `updating` is set by the capture that will update the graph, from
   * its begin to its end (a compare-and-swap: one capture at a time); the counters are written
   * by that capture's end alone. */
  atomic_bool updating;
  /* 1.6: the family whose executable `exec` is (family.c), NULL when it has its own; set by the
   * join, which no launch of the graph may overlap. family_result: why its last join was refused
   * (a CUgraphExecUpdateResult), 0 when none was. */
  _Atomic(struct cgc__family*) family;
  atomic_int family_result;
  /* 1.6: the executable of its own a member launches when the driver refused its first switch
   * (family.c; written under the family's claim, read without it). */
  _Atomic(CUgraphExec) family_own;
  /* 1.6: a restore's family member not built yet (NULL once built, or for any other graph):
   * `graph` is NULL until its first use builds it (family.c, under the family's claim). */
  struct cgc__deferred* deferred;
  uint64_t update_count;
  cgc_graph_update_t last_update;
  int last_update_result;
};

/* Wraps an ended capture's graph: instantiates (and uploads with CGC_CAPTURE_UPLOAD). Takes
 * ownership of `graph`, `done`, the pool reference and the uses (their references) in every
 * case. */
cgc_status_t cgc__graph_create(struct cgc__device* dev, CUgraph graph, CUevent done, size_t node_count, cgc_pool_t pool,
                               struct cgc__use* uses, size_t n_uses, unsigned flags, CUstream upload_stream,
                               const char* func, cgc_graph_t* out);
/* The same for a graph that shares `leader`'s executable (a family's, family.c) when the driver
 * takes its nodes in an update, and is instantiated otherwise (a restore's, 1.6). With `deferred`
 * (and no `graph`) it joins unbuilt, without a trial: its first use builds it. Takes `deferred`
 * too, in every case. */
cgc_status_t cgc__graph_create_member(struct cgc__device* dev, CUgraph graph, CUevent done, size_t node_count,
                                      cgc_pool_t pool, struct cgc__use* uses, size_t n_uses, unsigned flags,
                                      CUstream upload_stream, cgc_graph_t leader, cgc__deferred_t* deferred,
                                      const char* func, cgc_graph_t* out);
/* Applies an ended capture's graph to `g` (cgc_capture_options_t.update): the executable takes
 * it in place when the driver accepts it, else a new executable replaces the old one, and the
 * old graph, completion event and uses go (after the replays still using them). Takes ownership
 * of `graph`, `done`, the pool reference and the uses in every case; on failure `g` is left as it
 * was. */
cgc_status_t cgc__graph_update(cgc_graph_t g, CUgraph graph, CUevent done, size_t node_count, cgc_pool_t pool,
                               struct cgc__use* uses, size_t n_uses, unsigned flags, CUstream upload_stream,
                               const char* func);

/* ---- families: graphs sharing one executable (family.c, 1.6) ---- */

/* The launch of family member `g` when the executable holds its nodes already: true when it was
 * launched (*r: cuGraphLaunch's result); false, doing nothing, when a switch is needed or another
 * thread has the family (the caller takes the slow path). No context needed. */
bool cgc__family_launch_held(cgc_graph_t g, CUstream stream, CUresult* r);
/* Before a launch or upload of family member `g` (context current): claims the family (refused
 * with INVALID_STATE while another thread launches one of its members: never waits), builds `g`
 * if it is unbuilt, and updates the executable to `g`'s nodes if it holds another member's;
 * *exec is what to launch (the family's, or `g`'s own when the driver refused it). cgc__family_exit
 * gives the family back. */
cgc_status_t cgc__family_enter(cgc_graph_t g, CUgraphExec* exec, const char* func);
void cgc__family_exit(cgc_graph_t g);
/* Claims member `g`'s family for a use that reads its CUgraph, which no switch reads meanwhile
 * (its inspect_lock held, context current; waits for the family), and builds `g` if it is
 * unbuilt; cgc__family_exit gives the family back. On failure nothing is held. */
cgc_status_t cgc__family_hold(cgc_graph_t g, const char* func);
/* What a launch of `g` runs: its family's executable, or its own (never waits). */
void* cgc__family_exec(cgc_graph_t g);
/* At a reset of member `g` (its inspect_lock held, context current): it leaves; if the executable
 * held its nodes it takes another member's; the last member destroys it. Sets g->exec and
 * g->family to NULL. */
cgc_status_t cgc__family_leave(cgc_graph_t g, const char* func);
/* `graph` (its inspect_lock held, both graphs claimed through `updating`, context current; an
 * executable of its own or none, a restore's) joins `leader`'s family, which is made if the
 * leader has none: a trial update of the executable to `graph`'s nodes. NOT_SUPPORTED when the
 * driver refuses (graph->family_result says why; nothing changed). */
cgc_status_t cgc__family_join(cgc_graph_t graph, cgc_graph_t leader, const char* func);
/* The graphs sharing `g`'s executable (1 for a graph with its own, 0 after reset), and
 * *result its family_result; `g`'s inspect_lock held (never waits for the family). */
size_t cgc__family_size(cgc_graph_t g, int* result);

/* ---- generators (rng.c) ----
 * Generators and communicators hand graphs their cgc__use_ops_t through cgc__registry_add_use;
 * the tables stay private to rng.c and nccl.c: a new kind of graph-held object is one file. */

/* The last context handle of the device is gone: the generators' freed slots go back, and the
 * kernels module too when no generator of the device is alive. */
void cgc__rng_device_release(struct cgc__device* dev);
/* For saved graphs (1.6). The generator a graph's use is of (NULL for another kind of use); its
 * state now (under its lock) and the address of the slots its draws read; a use of it that
 * advances it by `amount` a replay (one reference more); and, when `fn` is one of the library's
 * own kernels (a draw's), their image, which a saved file carries as any module's. */
cgc_rng_t cgc__rng_of_use(const struct cgc__use* use);
void cgc__rng_state(cgc_rng_t rng, uint64_t* seed, uint64_t* offset, uint64_t* slots);
struct cgc__use cgc__rng_use(cgc_rng_t rng, uint64_t amount);
bool cgc__rng_kernels_image(struct cgc__device* dev, CUfunction fn, const void** image, size_t* size);

/* ---- modules: what saved graphs need of them (module.c, 1.6) ---- */

/* Where a kernel's code comes from, for a saved file: a module cgc_module_load loaded (its image,
 * which the file carries) or an image added by key (the file names the key). */
typedef struct cgc__kernel_origin {
  const void* image; /* valid while the graph holds the module; an added image's for the process */
  size_t size;
  const char* key;   /* NULL for a module of cgc_module_load */
} cgc__kernel_origin_t;
/* Names the module of kernel `fn`, called `name`, of a graph holding `uses` (the context
 * current): one of the graph's modules, else an added image with a kernel of that name and the
 * same identity. NOT_SAVABLE, naming the kernel, when neither. */
cgc_status_t cgc__module_origin(struct cgc__device* dev, CUfunction fn, const char* name, const struct cgc__use* uses,
                                size_t n_uses, cgc__kernel_origin_t* out, const char* func);
/* What tells two builds of one kernel apart (cuFuncGetAttribute; the context current). */
typedef struct cgc__kernel_identity {
  int registers, static_shared, constant, local, binary_version, max_threads;
} cgc__kernel_identity_t;
cgc_status_t cgc__kernel_identity(CUfunction fn, cgc__kernel_identity_t* out, const char* func);
/* True when `found` differs from `wanted`; `what` then says how ("registers 40, not 32"). */
bool cgc__kernel_identity_differs(const cgc__kernel_identity_t* wanted, const cgc__kernel_identity_t* found,
                                  char* what, size_t what_size);
/* The image added under `key` (its size in *size), or NULL: kept for the life of the process. */
const void* cgc__module_added_image(const char* key, size_t* size);
/* The record (recorder.c, 1.6): an image the driver loaded, copied and kept unless an equal one
 * is (called inside the driver's module load, on any thread: no driver call, module.c's leaf
 * lock); and how many the record holds, and their bytes. */
void cgc__module_record_image(const void* image, size_t size);
void cgc__module_recorded(uint64_t* images, uint64_t* bytes);
/* For a restore (the context current): new module code loaded from `image` (one reference), a
 * kernel of it by name (SAVED_MISMATCH when it has none), the use that hands the reference to a
 * graph, and the release of a reference no graph took. */
cgc_status_t cgc__module_code_load(struct cgc__device* dev, const void* image, size_t size, void** code,
                                   const char* func);
cgc_status_t cgc__module_code_kernel(void* code, const char* name, CUfunction* out, const char* func);
struct cgc__use cgc__module_code_use(void* code);
void cgc__module_code_release(void* code);

#endif /* CGC_INTERNAL_H_ */
