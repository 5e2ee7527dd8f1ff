/* cgc: CUDA-graph capture with the semantics of PyTorch's torch.cuda.graph, behind a stable C ABI.
 *
 * This is the public header: every function of libcgc.so.1 is declared below as a plain
 * prototype, grouped by topic, each with what it does, its arguments, the statuses it returns
 * beyond the common ones, its thread and capture rules, and the version that added it. It
 * includes no CUDA header: native CUDA handles (CUstream, CUgraph, CUgraphExec) pass as void*, so
 * a C, C++, Rust or Go program needs only this file (with cgc_api.h, which it includes: the
 * function table for dlopen users) and libcgc.so.1. docs/CONTRACT.md states the contract,
 * docs/SEMANTICS.md the behaviour rule by rule (cited below as "SEMANTICS n").
 *
 * Topics, in order:
 *    1. versions, statuses and errors        7. memory and pools
 *    2. handles                              8. work in graphs: copies, host functions,
 *    3. devices and contexts                    memory operations, kernels (1.1)
 *    4. streams and events                   9. graphs that change: updates, conditionals (1.2, 1.3)
 *    5. capture                             10. NCCL
 *    6. graphs                              11. random numbers
 *                                           12. PyTorch and adopted captures (1.4)
 *                                           13. saved graphs (1.6)
 *                                           14. the function table (cgc_api.h)
 *
 * Conventions (every function, unless its comment says otherwise)
 * - It returns cgc_status_t; outputs go through pointer arguments, and an output handle or pointer
 *   is set to NULL on failure. A failed call changes nothing (CONTRACT: nothing is left half done).
 * - Common statuses, not repeated below: CGC_ERROR_INVALID_ARGUMENT for a NULL output pointer, a
 *   NULL handle, an unknown flag bit or a value out of range (the message names the argument);
 *   CGC_ERROR_INVALID_HANDLE for a destroyed handle or one of another kind (detected in the common
 *   case); CGC_ERROR_NO_DRIVER / CGC_ERROR_NO_DEVICE without a driver or GPU; CGC_ERROR_CUDA for a
 *   driver call that failed (cgc_last_error names it and the driver's error); CGC_ERROR_OUT_OF_MEMORY.
 * - cgc_last_error() is a thread-local message naming the function, the argument or driver call,
 *   and the driver's error name. It describes the most recent call on this thread that failed or
 *   warned (an empty capture warns); a successful call leaves it unchanged. cgc_last_status()
 *   (1.6) is the status that goes with it (CGC_SUCCESS for a warning).
 * - Option structs start with struct_size; a NULL pointer, or a zeroed struct with struct_size
 *   set, means the defaults. Fields are only ever appended.
 * - Threads: every function may be called from any thread; an object must not be destroyed while
 *   another thread uses it. Inside a host function (cgc_launch_host_func) every call that would
 *   reach the driver is refused with CGC_ERROR_INVALID_STATE (SEMANTICS 22).
 * - Captures on other threads: no cgc call breaks a capture cgc began. A call that the driver
 *   counts as unsafe during a capture (a synchronisation, a stream or event query, a
 *   communicator's setup or teardown) and that would break one by the driver's rule for this
 *   thread's capture mode (in Global mode: any Global capture on any thread, and this thread's
 *   own Global or ThreadLocal capture) is refused with CGC_ERROR_CAPTURE_UNSUPPORTED before it
 *   reaches the driver; the message names the capture and how to proceed (wait for its end,
 *   capture in ThreadLocal mode, or switch this thread to Relaxed). What cgc does internally
 *   (allocation, cache trimming, instantiation, destruction) runs in Relaxed mode and never
 *   breaks a capture. The user's own driver calls still follow the driver's rule.
 * - "Since 1.x" marks what a minor version added; everything else is 1.0.
 */
#ifndef CGC_H_
#define CGC_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t, for the PyTorch allocator entry points */

#if defined(CGC_BUILDING_LIBRARY)
#define CGC_API __attribute__((visibility("default")))
#else
#define CGC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ==== 1. Versions, statuses and errors ======================================================= */

#define CGC_VERSION_MAJOR 1 /* also the soname: libcgc.so.1 */
/* 1.1: the work a graph is made of (copies, sets, host functions, memory operations, kernels);
 * 1.2: graphs that change without recapture (exec update, per-node updates), IF and WHILE nodes;
 * 1.3: IF/ELSE and SWITCH nodes, loops whose body sets the condition, allocations and generator
 * draws inside conditional bodies;
 * 1.4: captures that others begin (torch.cuda.graph with cgc as PyTorch's allocator) allocating
 * from a cgc pool, record_stream for a native stream;
 * 1.5: pools of memory registered with a communicator (symmetric windows), eager allocation from
 * a pool (docs/CHANGELOG.md);
 * 1.6: the status of the last failed call (cgc_last_status), for entry points that return none;
 * the memory snapshot; pools at fixed addresses and claims; graphs saved and restored */
#define CGC_VERSION_MINOR 6
#define CGC_VERSION_PATCH 0
#define CGC_VERSION ((CGC_VERSION_MAJOR << 16) | (CGC_VERSION_MINOR << 8) | CGC_VERSION_PATCH)

/* Status codes, pinned forever: values are never renumbered or reused, new ones are appended
 * (cgc_api.h's CGC_STATUS_LIST repeats them with their text, checked against this enum). */
typedef enum cgc_status {
  CGC_SUCCESS = 0,                     /* no error */
  CGC_ERROR_INVALID_ARGUMENT = 1,      /* an argument is NULL, out of range or inconsistent */
  CGC_ERROR_INVALID_HANDLE = 2,        /* the handle was destroyed or is of another kind */
  CGC_ERROR_INVALID_STATE = 3,         /* the object is not in a state that allows this call (e.g.
                                        * capture_end without begin, launch after reset) */
  CGC_ERROR_NO_DRIVER = 4,             /* the CUDA driver (libcuda.so.1) could not be loaded */
  CGC_ERROR_NO_DEVICE = 5,             /* no usable CUDA device */
  CGC_ERROR_OUT_OF_MEMORY = 6,         /* the device is out of memory */
  CGC_ERROR_CAPTURE_UNSUPPORTED = 7,   /* the call is not allowed while a capture is under way */
  CGC_ERROR_CAPTURE_INVALIDATED = 8,   /* the capture was invalidated by an earlier call */
  CGC_ERROR_CAPTURE_UNJOINED = 9,      /* a stream forked into the capture was not joined back */
  CGC_ERROR_CAPTURE_LEGACY_STREAM = 10, /* graphs cannot be captured on the legacy default stream */
  CGC_ERROR_NCCL_UNAVAILABLE = 11,     /* NCCL (libnccl.so.2 >= 2.9.6) could not be loaded */
  CGC_ERROR_NCCL = 12,                 /* an NCCL call failed */
  CGC_ERROR_CUDA = 13,                 /* another driver error; cgc_last_error names it */
  CGC_ERROR_NOT_SUPPORTED = 14,        /* the driver or device is too old for the request */
  CGC_ERROR_INTERNAL = 15,             /* an internal error in cgc */
  CGC_ERROR_NOT_SAVABLE = 16,          /* since 1.6: a graph holds what a saved file cannot rebuild */
  CGC_ERROR_SAVED_MISMATCH = 17        /* since 1.6: a saved file this process cannot restore (damaged, or
                                        * of another format, architecture or driver, or a kernel it lacks) */
} cgc_status_t;

/* The library's version, (major << 16) | (minor << 8) | patch. Compare with CGC_VERSION to
 * detect a header/library mismatch. Returns the version, not a status. */
CGC_API uint32_t cgc_version(void);

/* A static English name for `status` ("CGC_ERROR_INVALID_ARGUMENT: ..."); never NULL, also for
 * values this version does not know. */
CGC_API const char* cgc_status_string(cgc_status_t status);

/* This thread's message for the most recent failing (or warning) cgc call; "" when none. Valid
 * until the next cgc call on this thread. */
CGC_API const char* cgc_last_error(void);

/* Since 1.6. The status that goes with cgc_last_error(), on this thread: the status of the
 * failure its message describes, or CGC_SUCCESS when the message is a warning or "" (no cgc call
 * of this thread has failed or warned yet). A failure sets message and status together; a warning
 * (a call that succeeds with something to say, such as an empty capture) replaces the message and
 * resets the status to CGC_SUCCESS; detail a failure adds to its own message keeps its status; a
 * call that succeeds without a warning changes neither. So cgc_last_status() != CGC_SUCCESS
 * exactly when cgc_last_error() is a failure's message, and right after a call that failed it is
 * the status that call returned (were undoing a failed call's work to fail too, message and
 * status would both describe that later failure). It exists for the entry points that cannot
 * return a status: cgc_torch_malloc returns NULL on failure (and for a size of 0, which is no
 * failure), and PyTorch's allocator backend raises torch.cuda.OutOfMemoryError only when
 * cgc_last_status() is then CGC_ERROR_OUT_OF_MEMORY (device or host memory), its plain error for
 * any other refusal. Returns the status, not a status of its own call: it never fails, reaches no
 * driver and may be called anywhere, inside host functions and captures too. */
CGC_API cgc_status_t cgc_last_status(void);

/* ==== 2. Handles ============================================================================= */

typedef struct cgc_context_s* cgc_context_t;   /* one device (its primary context) */
typedef struct cgc_stream_s* cgc_stream_t;     /* a stream cgc made, or one it borrows */
typedef struct cgc_event_s* cgc_event_t;
typedef struct cgc_graph_s* cgc_graph_t;       /* captured graph + its executable, like torch.cuda.CUDAGraph */
typedef struct cgc_pool_s* cgc_pool_t;         /* private memory pool, like graph_pool_handle() */
typedef struct cgc_comm_s* cgc_comm_t;         /* NCCL communicator */
typedef struct cgc_rng_s* cgc_rng_t;           /* graph-safe Philox generator */
typedef struct cgc_module_s* cgc_module_t;     /* since 1.1: a loaded fatbin, cubin or PTX image */
typedef struct cgc_function_s* cgc_function_t; /* since 1.1: a kernel of a module; lives as long as the module */

/* ==== 3. Devices and contexts ================================================================ */

/* The number of CUDA devices into *count. CGC_ERROR_NO_DRIVER without libcuda.so.1;
 * CGC_ERROR_NO_DEVICE when the driver sees no GPU (*count is then 0). */
CGC_API cgc_status_t cgc_device_count(int* count);

/* A handle on `device`'s primary context (retained, so it is shared with the CUDA runtime and any
 * framework in the process). Objects created from it keep it alive: destroying the handle while
 * streams, events or graphs of it exist only drops the caller's reference. */
CGC_API cgc_status_t cgc_context_create(int device, cgc_context_t* out);

/* Drops the handle. When the device's last handle goes, cgc gives back what it holds there and
 * no longer needs: cached segments (first waiting for work that memory still waits for, such as
 * a destroyed graph's last replay), spare events, freed generator state, its kernels when no
 * generator is left. Allocated blocks and referenced pools keep their memory. */
CGC_API cgc_status_t cgc_context_destroy(cgc_context_t ctx);

/* Waits for all work on the device (cuCtxSynchronize). Refused (CGC_ERROR_CAPTURE_UNSUPPORTED)
 * while a capture of the device is under way on any thread, or a pool adopts one (the driver
 * would break it). */
CGC_API cgc_status_t cgc_context_synchronize(cgc_context_t ctx);

/* ==== 4. Streams and events ================================================================== */

#define CGC_STREAM_NON_BLOCKING 0x1u /* does not synchronise with the legacy default stream */
#define CGC_EVENT_TIMING 0x1u        /* without it events are created with timing disabled (faster) */

/* A new stream on ctx's device. flags: 0 or CGC_STREAM_NON_BLOCKING. priority: 0 is the default;
 * lower numbers are higher priority, clamped to the device's range (cgc_stream_priority_range). */
CGC_API cgc_status_t cgc_stream_create(cgc_context_t ctx, unsigned flags, int priority, cgc_stream_t* out);

/* Borrows an existing CUstream / cudaStream_t of ctx's device (NULL or cudaStreamLegacy = the
 * legacy default stream; cudaStreamPerThread is accepted too and means the calling thread's own
 * stream at every call). cgc_stream_destroy frees only the handle; the stream stays the caller's,
 * who must not destroy it while blocks that recorded a use of it (cgc_record_stream) are alive. */
CGC_API cgc_status_t cgc_stream_wrap(cgc_context_t ctx, void* native_stream, cgc_stream_t* out);

/* The CUstream behind the handle (NULL for the legacy default stream, or for a bad handle).
 * Returns the stream, not a status. */
CGC_API void* cgc_stream_native(cgc_stream_t stream);

/* Destroys an owned stream (pending work still completes); a borrowed stream's handle goes and
 * the stream stays. For an owned stream, what the allocator owes it is settled first: blocks that
 * recorded a use of it wait for an event recorded now, and its cached memory goes to other
 * streams once its work is done. CGC_ERROR_INVALID_STATE while the stream is capturing, and for a
 * conditional body's lent stream (cgc_capture_conditional_end gives that back). */
CGC_API cgc_status_t cgc_stream_destroy(cgc_stream_t stream);

/* Waits until all work on the stream has finished (cuStreamSynchronize). An unsafe call during a
 * capture: refused (CGC_ERROR_CAPTURE_UNSUPPORTED) where it would break one, and on a capturing
 * stream. */
CGC_API cgc_status_t cgc_stream_synchronize(cgc_stream_t stream);

/* *complete = 1 when all work on the stream has finished, 0 when some is still running. Refused
 * during captures as cgc_stream_synchronize. */
CGC_API cgc_status_t cgc_stream_query(cgc_stream_t stream, int* complete);

/* Makes future work on `stream` wait for `event`'s last record. Inside a capture this is the fork
 * (a stream outside the capture waits on an event recorded in it and joins the capture) and the
 * join (the origin stream waits on an event recorded on a side stream). cgc remembers forks so
 * that cgc_capture_end can name side streams that were never joined. CGC_ERROR_CAPTURE_INVALIDATED
 * when the event was recorded in a capture that an earlier call invalidated. */
CGC_API cgc_status_t cgc_stream_wait_event(cgc_stream_t stream, cgc_event_t event);

/* Since 1.1. The priorities streams of ctx's device can have: `greatest` is the highest priority
 * (the lowest number), `least` the lowest (0). cgc_stream_create clamps into [greatest, least]. */
CGC_API cgc_status_t cgc_stream_priority_range(cgc_context_t ctx, int* least, int* greatest);

/* Since 1.1. The stream's priority as the driver has it (after clamping). */
CGC_API cgc_status_t cgc_stream_priority(cgc_stream_t stream, int* priority);

/* Since 1.1. The driver's id of the stream (cuStreamGetId: unique in the process, never reused;
 * for the per-thread stream, the calling thread's). Refused (CGC_ERROR_CAPTURE_UNSUPPORTED) for a
 * borrowed stream whose id cgc has not learnt while it captures: asking would break the capture. */
CGC_API cgc_status_t cgc_stream_id(cgc_stream_t stream, uint64_t* id);

/* Since 1.1. The stream's device ordinal and its CUcontext (the device's primary context). Either
 * output may be NULL. */
CGC_API cgc_status_t cgc_stream_device(cgc_stream_t stream, int* device, void** native_context);

/* Since 1.1. Copies the driver's attributes of `src` (access-policy window, synchronisation
 * policy, priority where settable) onto `dst` (cuStreamCopyAttributes). Both of one device. */
CGC_API cgc_status_t cgc_stream_copy_attributes(cgc_stream_t dst, cgc_stream_t src);

/* Since 1.1. The L2 access-policy window of a stream (CUaccessPolicyWindow). */
typedef enum cgc_access_property { /* the values of CUaccessProperty */
  CGC_ACCESS_NORMAL = 0,
  CGC_ACCESS_STREAMING = 1,
  CGC_ACCESS_PERSISTING = 2
} cgc_access_property_t;
typedef struct cgc_access_policy {
  size_t struct_size;
  void* base;                          /* start of the window (device memory) */
  size_t bytes;                        /* its size; 0 turns the window off */
  float hit_ratio;                     /* the fraction of accesses that get hit_property, in [0, 1] */
  cgc_access_property_t hit_property;
  cgc_access_property_t miss_property;
} cgc_access_policy_t;

/* Since 1.1. Sets the stream's L2 access-policy window; kernels launched (or captured) on it
 * afterwards carry it. bytes above the device's maximum window size or hit_ratio outside [0, 1]
 * are CGC_ERROR_INVALID_ARGUMENT (a window on a device that has none: CGC_ERROR_NOT_SUPPORTED). */
CGC_API cgc_status_t cgc_stream_set_access_policy(cgc_stream_t stream, const cgc_access_policy_t* policy);

/* Since 1.1. The stream's window into *policy (fields up to policy->struct_size). */
CGC_API cgc_status_t cgc_stream_get_access_policy(cgc_stream_t stream, cgc_access_policy_t* policy);

/* A new event on ctx's device. flags: 0 (timing disabled, the fastest) or CGC_EVENT_TIMING. */
CGC_API cgc_status_t cgc_event_create(cgc_context_t ctx, unsigned flags, cgc_event_t* out);

/* Destroys the event (a pending record still completes). */
CGC_API cgc_status_t cgc_event_destroy(cgc_event_t event);

/* Records the event on `stream` (cuEventRecord): later waits and queries refer to the work
 * enqueued on the stream so far. Inside a capture the record is captured and noted for the
 * fork/join bookkeeping (cgc_stream_wait_event). */
CGC_API cgc_status_t cgc_event_record(cgc_event_t event, cgc_stream_t stream);

/* Waits until the event's last record has completed. An unsafe call during a capture: refused
 * (CGC_ERROR_CAPTURE_UNSUPPORTED) where it would break one. */
CGC_API cgc_status_t cgc_event_synchronize(cgc_event_t event);

/* *complete = 1 when the recorded work has finished. Like cuEventQuery it is an unsafe call during
 * a capture: refused (CGC_ERROR_CAPTURE_UNSUPPORTED) where it would break one. */
CGC_API cgc_status_t cgc_event_query(cgc_event_t event, int* complete);

/* Milliseconds between two completed records of CGC_EVENT_TIMING events (CGC_ERROR_CUDA, with
 * the driver's CUDA_ERROR_NOT_READY, while a record has not completed; CGC_ERROR_CUDA for events
 * without timing). */
CGC_API cgc_status_t cgc_event_elapsed_ms(cgc_event_t start, cgc_event_t end, float* ms);

/* ==== 5. Capture ============================================================================= */

typedef enum cgc_capture_mode {      /* the values of CUstreamCaptureMode */
  CGC_CAPTURE_MODE_GLOBAL = 0,       /* the default: an unsafe call from any thread breaks the capture */
  CGC_CAPTURE_MODE_THREAD_LOCAL = 1, /* only the capturing thread's unsafe calls break it */
  CGC_CAPTURE_MODE_RELAXED = 2       /* no call is checked */
} cgc_capture_mode_t;

typedef enum cgc_capture_status {
  CGC_CAPTURE_NONE = 0,   /* the stream is not capturing */
  CGC_CAPTURE_ACTIVE = 1, /* capturing */
  CGC_CAPTURE_BROKEN = 2  /* capturing, but invalidated: capture_end will fail */
} cgc_capture_status_t;

#define CGC_CAPTURE_UPLOAD 0x1u              /* upload the executable at capture_end */
#define CGC_CAPTURE_AUTO_FREE_ON_LAUNCH 0x2u /* cudaGraphInstantiateFlagAutoFreeOnLaunch (always on) */

typedef struct cgc_capture_options {
  size_t struct_size;      /* sizeof(cgc_capture_options_t) */
  cgc_capture_mode_t mode; /* default GLOBAL */
  cgc_pool_t pool;         /* NULL: a new private pool; else allocate into (share) this pool */
  unsigned flags;          /* CGC_CAPTURE_* */
  /* Since 1.2: NULL, or a graph this capture updates (SEMANTICS 27): cgc_capture_end then hands
   * back that graph with its executable updated in place when the driver accepts the new graph
   * (same topology), or instantiated anew when it does not; the capture allocates from its pool.
   * Until the end the graph replays the old graph and cannot be reset, destroyed or changed per
   * node (CGC_ERROR_INVALID_STATE): end every update capture you begin. */
  struct cgc_graph_s* update;
} cgc_capture_options_t;

/* The body of cgc_capture: enqueue the work to capture on `stream`; a status other than
 * CGC_SUCCESS discards the capture. */
typedef cgc_status_t (*cgc_capture_fn)(cgc_stream_t stream, void* user);

/* Starts capturing `stream` into a new graph (SEMANTICS 1-5). Allocations on any stream of the
 * capture come from its pool from now on. CGC_ERROR_CAPTURE_UNSUPPORTED for a Global capture (and,
 * while an NCCL pool is released, any capture of that device) while another thread sets up or
 * tears down a communicator or an NCCL pool: that call would break it.
 * CGC_ERROR_CAPTURE_LEGACY_STREAM on the legacy default stream (capture on a created stream;
 * replaying on the default stream is fine);
 * CGC_ERROR_INVALID_STATE if the stream is already capturing or the pool is being recorded into by
 * another capture; CGC_ERROR_INVALID_ARGUMENT for a bad mode or flag. */
CGC_API cgc_status_t cgc_capture_begin(cgc_stream_t stream, const cgc_capture_options_t* options);

/* Ends the capture begun on `stream` and instantiates it into *out (AutoFreeOnLaunch, node
 * priorities where the driver has them; uploaded with CGC_CAPTURE_UPLOAD). The driver capture
 * ends whatever happened: CGC_ERROR_CAPTURE_UNJOINED names the side streams that were forked and
 * not joined back, CGC_ERROR_CAPTURE_INVALIDATED reports an earlier illegal call; either way no
 * stream is left capturing and the stream can capture again. An empty capture succeeds and says
 * so in cgc_last_error() (not for an update capture). With cgc_capture_options_t.update (1.2),
 * *out is that graph, updated (SEMANTICS 27; cgc_graph_info's last_update says how, and when it
 * had to be instantiated anew cgc_last_error() says why). CGC_ERROR_INVALID_STATE, the capture
 * still under way: on a side stream instead of the origin, from another thread than the one
 * that began a Global or ThreadLocal capture, while conditional bodies are open, when the stream
 * captures under a capture cgc did not begin, or while another thread ends this one. */
CGC_API cgc_status_t cgc_capture_end(cgc_stream_t stream, cgc_graph_t* out);

/* cgc_capture_begin, body(stream, user), cgc_capture_end. If body returns an error, the
 * conditional bodies it left open are ended, the capture is ended and its graph discarded (a graph
 * to update stays as it was), and body's status is returned. */
CGC_API cgc_status_t cgc_capture(cgc_stream_t stream, const cgc_capture_options_t* options, cgc_capture_fn body,
                                 void* user, cgc_graph_t* out);

/* Whether `stream` is capturing now and, if so, the driver's capture id (capture_id may be NULL;
 * it is 0 when not capturing). Safe during any capture. */
CGC_API cgc_status_t cgc_stream_capture_status(cgc_stream_t stream, cgc_capture_status_t* status,
                                               uint64_t* capture_id);

/* Swaps this thread's capture-interaction mode with *mode (cuThreadExchangeStreamCaptureMode):
 * call once to push a mode, again with the returned value to pop it. */
CGC_API cgc_status_t cgc_capture_mode_exchange(cgc_capture_mode_t* mode);

/* ==== 6. Graphs ============================================================================== */

/* How a capture with cgc_capture_options_t.update changed its graph (since 1.2). */
typedef enum cgc_graph_update {
  CGC_GRAPH_UPDATE_NONE = 0,          /* never updated */
  CGC_GRAPH_UPDATE_IN_PLACE = 1,      /* the executable took the new graph (cuGraphExecUpdate) */
  CGC_GRAPH_UPDATE_REINSTANTIATED = 2 /* the driver refused (last_update_result says why): a new executable */
} cgc_graph_update_t;

/* What cgc_graph_info reports. The node counts are by the driver's CUgraphNodeType (the comment
 * of each gives its value). */
typedef struct cgc_graph_info {
  size_t struct_size;
  size_t node_count;          /* the captured nodes (not cgc's completion record) */
  uint64_t replay_count;      /* successful launches */
  int uploaded;               /* 1 after cgc_graph_upload or CGC_CAPTURE_UPLOAD */
  size_t pool_bytes_reserved; /* bytes its pool holds */
  /* since 1.1: the captured nodes by kind (0 after reset) */
  size_t kernel_nodes;        /* 0 */
  size_t memcpy_nodes;        /* 1 */
  size_t memset_nodes;        /* 2 */
  size_t host_nodes;          /* 3 */
  size_t child_graph_nodes;   /* 4 */
  size_t empty_nodes;         /* 5 */
  size_t event_wait_nodes;    /* 6 */
  size_t event_record_nodes;  /* 7; cgc's own completion record is not counted */
  size_t mem_alloc_nodes;     /* 10 */
  size_t mem_free_nodes;      /* 11 */
  size_t mem_op_nodes;        /* 12: stream write/wait-value operations and batches of them */
  size_t conditional_nodes;   /* 13 */
  size_t other_nodes;         /* kinds not listed (external semaphores, kinds newer than this header) */
  /* since 1.2: updates by capture (cgc_capture_options_t.update) */
  uint64_t update_count;          /* captures that updated this graph */
  cgc_graph_update_t last_update; /* how the last one did it */
  /* the driver's CUgraphExecUpdateResult of the last update: 0 when the executable took the new
   * graph in place, else why it did not (e.g. 2 = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED) */
  int last_update_result;
  /* since 1.6: families (cgc_graph_share_executable) */
  size_t family_size; /* graphs sharing its executable: 1 with its own, 0 after reset */
  int family_result;  /* why its last join was refused (a CUgraphExecUpdateResult); 0 when none was */
} cgc_graph_info_t;

/* Replays `graph` on `stream` (any stream of the graph's device, the legacy default stream
 * included). Does not synchronise. Graphs sharing a pool must be replayed in the order they were
 * captured and never concurrently (PyTorch's rule). A failed launch leaves the graph's generators
 * where they were. CGC_ERROR_INVALID_STATE after cgc_graph_reset; CGC_ERROR_CAPTURE_UNSUPPORTED
 * into a capture, checked while a cgc capture is under way (SEMANTICS 26). Inside a host
 * function: CGC_ERROR_INVALID_STATE on the default streams, for graphs holding generators or
 * ordered communicators, or while a cgc capture is under way; otherwise the driver's own refusal
 * (CGC_ERROR_CUDA, CUDA_ERROR_NOT_PERMITTED), as the fast path makes no check of its own. */
CGC_API cgc_status_t cgc_graph_launch(cgc_graph_t graph, cgc_stream_t stream);

/* Uploads the executable on `stream` ahead of the first launch, so that launch is as fast as the
 * rest. CGC_ERROR_INVALID_STATE after cgc_graph_reset. */
CGC_API cgc_status_t cgc_graph_upload(cgc_graph_t graph, cgc_stream_t stream);

/* Fills as much of *info as its struct_size has room for. The node counts (1.1) are asked of the
 * driver at this call; not while another thread resets the graph. */
CGC_API cgc_status_t cgc_graph_info(cgc_graph_t graph, cgc_graph_info_t* info);

/* The pool the graph allocated into (borrowed: cgc_pool_retain it to keep it beyond the graph's
 * reset or destroy). Passing it in cgc_capture_options_t.pool shares it, like CUDAGraph.pool().
 * CGC_ERROR_INVALID_STATE after reset. */
CGC_API cgc_status_t cgc_graph_pool(cgc_graph_t graph, cgc_pool_t* pool);

/* Writes the graph in Graphviz DOT form (verbose) to dot_path. CGC_ERROR_INVALID_STATE after
 * cgc_graph_reset. */
CGC_API cgc_status_t cgc_graph_debug_dump(cgc_graph_t graph, const char* dot_path);

/* Like CUDAGraph.reset(): frees the executable and graph now and drops the pool reference; the
 * handle stays valid (launch is then CGC_ERROR_INVALID_STATE). Resetting twice is fine. Never waits
 * for the device, except that a graph holding host functions or kernels of cgc modules (1.1), or
 * generator draws inside a WHILE body (1.3), first waits for its replays launched so far to
 * finish (they may still use them): not while one of them waits for work to come. Refused
 * (CGC_ERROR_INVALID_STATE) while a capture updates it. */
CGC_API cgc_status_t cgc_graph_reset(cgc_graph_t graph);

/* cgc_graph_reset, then the handle is freed. */
CGC_API cgc_status_t cgc_graph_destroy(cgc_graph_t graph);

/* The CUgraph behind the handle, owned by it (NULL after reset or for a bad handle). Valid until
 * reset or destroy. Besides the captured nodes the graph ends with one event record node of
 * cgc's, which tells when the last replay is over (cgc_graph_info does not count it). Returns the
 * graph, not a status. A family member restored unbuilt (1.6, CGC_RESTORE_FAMILIES) is built
 * first (NULL, cgc_last_error saying why, if that fails). Do not read it while another thread
 * launches a member of its family: the driver allows one thread in a graph at once. */
CGC_API void* cgc_graph_native(cgc_graph_t graph);

/* The CUgraphExec behind the handle, as cgc_graph_native. A family member's (1.6) is its family's,
 * holding whichever member's nodes were launched last (or its own, when the driver refused it at
 * its first switch): launch members with cgc_graph_launch. */
CGC_API void* cgc_graph_native_exec(cgc_graph_t graph);

/* ==== 7. Memory and pools ====================================================================
 *
 * cgc_malloc is a stream-ordered caching allocator per device, like PyTorch's: a block freed on a
 * stream is at once reusable on that stream; one used on other streams (cgc_record_stream) waits
 * for their work. During a capture, allocations on any stream of that capture (side streams
 * forked in included) come from the capture's private pool. A pool shared by several captures
 * (cgc_capture_options_t.pool) lets later graphs reuse what earlier ones freed, so graphs captured
 * one after another use about the memory of the largest; such graphs must be replayed in capture
 * order and never concurrently. Blocks allocated in a capture and never freed are the graph's
 * outputs: they stay valid after the graph is destroyed (SEMANTICS 11-16). */

typedef struct cgc_memory_stats {
  size_t struct_size;
  size_t bytes_reserved;  /* obtained from the driver */
  size_t bytes_allocated; /* handed out and not yet freed (block sizes, 512-byte rounded) */
  size_t peak_bytes_allocated;
  size_t peak_bytes_reserved;
  uint64_t num_driver_allocs; /* cuMemAlloc calls so far */
  uint64_t num_driver_frees;
} cgc_memory_stats_t;

/* Since 1.6. One segment (a driver allocation) of cgc_memory_snapshot: its blocks are
 * blocks[first_block] to blocks[first_block + n_blocks - 1], in address order. */
typedef struct cgc_segment_info {
  void* address;
  size_t size;
  size_t allocated_bytes; /* its blocks handed out and not yet freed */
  cgc_pool_t pool;        /* the private pool it belongs to; NULL: the device's cache */
  uint64_t stream_id;     /* the stream its first block is kept for (cgc_stream_id); 0: any stream, or none
                           * that has an id (a capture's blocks, a destroyed stream's) */
  int small;              /* 1: a segment of small requests (2 MiB, for requests up to 1 MiB) */
  size_t first_block;
  size_t n_blocks;
} cgc_segment_info_t;

/* Since 1.6. A block's state in cgc_memory_snapshot. */
typedef enum cgc_block_state {
  CGC_BLOCK_STATE_FREE = 0,      /* cached: reusable */
  CGC_BLOCK_STATE_ALLOCATED = 1, /* handed out and not yet freed */
  CGC_BLOCK_STATE_WAITING = 2,   /* freed, not yet reusable: work recorded on it may still run */
} cgc_block_state_t;

/* Since 1.6. One block of a segment in cgc_memory_snapshot. */
typedef struct cgc_block_info {
  void* address;
  size_t size;      /* what the block spans (512-byte multiple) */
  size_t requested; /* what was asked for, for an allocated block; 0 otherwise */
  cgc_block_state_t state;
} cgc_block_info_t;

/* Since 1.6. The device's memory as cgc holds it: every segment (the device cache's and every
 * pool's) with its blocks, sorted by address, like PyTorch's memory snapshot. *n_segments and
 * *n_blocks get the totals. When they fit in max_segments and max_blocks, `segments` and `blocks`
 * are filled; otherwise nothing is written but the totals: call again with arrays that large
 * (pass 0 and NULL to ask for the totals; they may grow in between). A diagnostic: it walks every
 * block with the device allocator's lock held, which allocations on other threads wait for (no
 * driver call is made). A segment whose blocks another thread holds at that moment with the lock
 * dropped (handing the segment back to the driver, recording the fences of freed blocks) is not
 * listed; the segments' sizes then add up to less than bytes_reserved. */
CGC_API cgc_status_t cgc_memory_snapshot(cgc_context_t ctx, cgc_segment_info_t* segments, size_t max_segments,
                                         cgc_block_info_t* blocks, size_t max_blocks, size_t* n_segments,
                                         size_t* n_blocks);

/* Allocates `size` bytes into *out, ordered on `stream` (512-byte aligned). During a capture on
 * `stream` the block comes from the capture's pool. size 0 gives NULL and success.
 * CGC_ERROR_OUT_OF_MEMORY after giving cached memory back and retrying, with the sizes in the
 * message; CGC_ERROR_CAPTURE_UNSUPPORTED when `stream` captures under a capture cgc did not begin
 * (a raw cuStreamBeginCapture) and no pool adopted it (cgc_pool_adopt_capture): eager memory must
 * not go into a graph. cgc_malloc asks the driver whether its stream captures while a cgc capture
 * is under way or a pool adopts one (with none, its cache hit makes no driver call, so begin
 * captures with cgc_capture_begin); cgc_torch_malloc always asks. CGC_ERROR_CAPTURE_INVALIDATED
 * on a stream whose capture an earlier call invalidated. */
CGC_API cgc_status_t cgc_malloc(cgc_context_t ctx, size_t size, cgc_stream_t stream, void** out);

/* Frees a block of cgc_malloc (or cgc_pool_malloc, cgc_torch_malloc), ordered on its allocation
 * stream. NULL is a no-op; a pointer cgc did not hand out, or one already freed, is
 * CGC_ERROR_INVALID_ARGUMENT and changes nothing. */
CGC_API cgc_status_t cgc_free(void* ptr);

/* Like Tensor.record_stream: `ptr` is used by work on `stream` too, so after cgc_free it is not
 * reused before that work is done (outside captures: events; inside: joins or capture end). On
 * the per-thread stream the event is recorded at this call (no other thread can record on that
 * stream later): call it after enqueueing the work. */
CGC_API cgc_status_t cgc_record_stream(void* ptr, cgc_stream_t stream);

/* Gives the device cache's unused segments back to the driver (cuMemFree, which waits for the
 * device). Pools still referenced keep theirs, and memory whose last user may still run waits.
 * CGC_ERROR_INVALID_STATE while a capture of the device is under way or a pool adopts one. */
CGC_API cgc_status_t cgc_empty_cache(cgc_context_t ctx);

/* Stats of the whole device (pool NULL) or of one pool into *stats (fields up to its
 * struct_size). */
CGC_API cgc_status_t cgc_memory_stats(cgc_context_t ctx, cgc_pool_t pool, cgc_memory_stats_t* stats);

/* A new pool (like torch.cuda.graph_pool_handle()) holding one reference of the caller's. */
CGC_API cgc_status_t cgc_pool_create(cgc_context_t ctx, cgc_pool_t* out);

/* Takes one more reference of the caller's (e.g. on a pool lent by cgc_graph_pool). */
CGC_API cgc_status_t cgc_pool_retain(cgc_pool_t pool);

/* Drops one of the caller's references; CGC_ERROR_INVALID_STATE if the caller holds none. The
 * pool lives on while graphs captured into it or blocks allocated from it exist; then its memory
 * returns to the device's cache, for any stream once its graphs' last replays are over. An NCCL
 * pool's last release is collective and refused while a capture of the device is under way
 * (cgc_nccl_pool_create). */
CGC_API cgc_status_t cgc_pool_release(cgc_pool_t pool);

/* Since 1.5. cgc_malloc from `pool`, outside captures: ordered on `stream` (of the pool's device,
 * not capturing: inside a capture its options->pool decides). Blocks allocated so are reused only
 * by cgc_pool_malloc on the same stream, never by a capture, so graphs' memory and eager memory of
 * one pool stay apart (SEMANTICS 32). Freed with cgc_free. CGC_ERROR_CAPTURE_UNSUPPORTED on a
 * capturing stream or a conditional body's stream. */
CGC_API cgc_status_t cgc_pool_malloc(cgc_pool_t pool, size_t size, cgc_stream_t stream, void** out);

/* Since 1.6. A private pool whose memory lies at fixed virtual addresses: [base, base + capacity)
 * is reserved with the driver at exactly `base` and backed with device memory in 2 MiB steps as
 * the pool's allocations need it. Captures (options->pool), cgc_pool_malloc and cgc_pool_claim
 * allocate from it as from any pool, but its memory never moves and never goes to the device's
 * cache: the same requests in the same order get the same addresses, in this process or in
 * another that reserves the same base (SEMANTICS 37). base and capacity must be multiples of 2 MiB
 * (of the device's granularity if larger: CGC_ERROR_INVALID_ARGUMENT names it);
 * CGC_ERROR_INVALID_STATE when the driver cannot give that range in this process (part of it is
 * in use); CGC_ERROR_OUT_OF_MEMORY for an allocation beyond the capacity. cgc_pool_claim in it
 * backs the range up to the claimed block first. Where the driver refuses a small range at a base,
 * cgc reserves more there (256 MiB, 1 GiB or 4 GiB; the pool still ends at its capacity), which
 * other pools' ranges must then avoid. Its last cgc_pool_release synchronises the
 * device and gives the range back; it is refused while graphs, captures or allocated blocks hold
 * the pool. The memory is this device's only (no peer access or IPC). */
CGC_API cgc_status_t cgc_pool_create_at(cgc_context_t ctx, void* base, size_t capacity, cgc_pool_t* out);

/* Since 1.6. Allocates exactly [ptr, ptr + size rounded up to 512 bytes) from `pool`'s free memory,
 * as a block that cgc_free frees: a range the pool holds and no block of it uses, after its free
 * neighbours are merged (CGC_ERROR_INVALID_STATE otherwise, saying what holds the range;
 * CGC_ERROR_INVALID_ARGUMENT for a NULL or unaligned ptr or a zero size). The block keeps the
 * stream key of the free memory it is cut from, so it is reused as that memory would have been.
 * Not for an NCCL pool (CGC_ERROR_NOT_SUPPORTED). Used to put a pool back to a state it had (its
 * live blocks at their addresses: PyTorch's setCheckpointPoolState, which torch.compile's
 * CUDA-graph trees call when execution leaves a recorded path); SEMANTICS 36. */
CGC_API cgc_status_t cgc_pool_claim(cgc_pool_t pool, void* ptr, size_t size);

/* ==== 8. Work in graphs: copies, host functions, memory operations, kernels (since 1.1) =======
 *
 * Everything here is usable eagerly and inside a capture, where it becomes a graph node that runs
 * at every replay (SEMANTICS 21-26). Copies, sets, memory operations and kernel launches are not
 * unsafe calls: they are legal while another thread captures in Global mode (on a created stream:
 * the legacy default stream waits for blocking streams, and work on it while one of them captures
 * breaks that capture, as with the driver), except an eager copy with pageable host memory, which
 * the driver synchronises: it is refused like an unsafe call where it would break a cgc capture.
 * Pointers are device pointers (cgc_malloc, any memory of the device, or page-locked host memory,
 * whose address is also its device address) unless a parameter says host. */

/* Host memory flags (cgc_host_alloc, cgc_host_register). */
#define CGC_HOST_WRITE_COMBINED 0x1u /* alloc: fast for the GPU to read, very slow for the CPU to read */
#define CGC_HOST_READ_ONLY 0x2u      /* register: the device only reads it */

/* Page-locked host memory of `bytes` (portable, mapped) into *out, which copies in captures need
 * (a captured copy reads or writes it at every replay: SEMANTICS 21). flags: 0 or
 * CGC_HOST_WRITE_COMBINED. */
CGC_API cgc_status_t cgc_host_alloc(cgc_context_t ctx, size_t bytes, unsigned flags, void** out);

/* Frees cgc_host_alloc memory (NULL is a no-op, like free). The caller makes sure no work (no
 * graph) still uses it. */
CGC_API cgc_status_t cgc_host_free(void* ptr);

/* Page-locks the caller's buffer [ptr, ptr + bytes) (portable, mapped) so that copies in captures
 * may use it. flags: 0 or CGC_HOST_READ_ONLY. */
CGC_API cgc_status_t cgc_host_register(cgc_context_t ctx, void* ptr, size_t bytes, unsigned flags);

/* Undoes cgc_host_register of the buffer starting at `ptr`. As with cgc_host_free, no work (no
 * graph) may still use it. */
CGC_API cgc_status_t cgc_host_unregister(void* ptr);

/* Copies `bytes` from host memory `src` to device memory `dst`, ordered on `stream`. Inside a
 * capture `src` must be page-locked (cgc_host_alloc / cgc_host_register): a captured copy reads it
 * again at every replay, which the driver cannot do from pageable memory; in a cgc capture such a
 * copy is refused (CGC_ERROR_CAPTURE_UNSUPPORTED) before it can break the capture. Eagerly,
 * pageable memory is fine (the copy is staged and the call returns once `src` may be reused),
 * except where it would break a capture, as above. bytes 0 is a no-op. */
CGC_API cgc_status_t cgc_memcpy_htod_async(void* dst, const void* src, size_t bytes, cgc_stream_t stream);

/* Copies from device memory `src` to host memory `dst` (page-locked inside a capture, as above). */
CGC_API cgc_status_t cgc_memcpy_dtoh_async(void* dst, const void* src, size_t bytes, cgc_stream_t stream);

/* Copies `bytes` between device memory. */
CGC_API cgc_status_t cgc_memcpy_dtod_async(void* dst, const void* src, size_t bytes, cgc_stream_t stream);

/* Set `count` 8-, 16- or 32-bit elements at `dst` (aligned to the element) to `value`. */
CGC_API cgc_status_t cgc_memset_d8_async(void* dst, uint8_t value, size_t count, cgc_stream_t stream);
CGC_API cgc_status_t cgc_memset_d16_async(void* dst, uint16_t value, size_t count, cgc_stream_t stream);
CGC_API cgc_status_t cgc_memset_d32_async(void* dst, uint32_t value, size_t count, cgc_stream_t stream);

/* A host function: runs on a driver thread, in stream order. It must not call cgc or CUDA (the
 * driver forbids it: cgc refuses such calls with CGC_ERROR_INVALID_STATE where it can see them,
 * the driver with CUDA_ERROR_NOT_PERMITTED or worse elsewhere). */
typedef void (*cgc_host_fn)(void* user);

/* Runs fn(user) on a driver thread once the stream's earlier work is done; later work waits for
 * it. Eagerly it runs once; inside a capture it becomes a host node that runs at every replay.
 * `release` (may be NULL) is called with `user` exactly once, when nothing can call fn any more:
 * after the eager call (on the driver thread, under fn's rules; if earlier work on the stream
 * failed, fn is skipped and release still runs), when the graph is reset or destroyed (on that
 * thread, after the graph's last replay; it may call cgc but not reset the same graph), when the
 * capture fails (in cgc_capture_end), and before this call returns if it fails (inside a capture:
 * when the capture ends). A host node needs a capture begun with cgc (CGC_ERROR_CAPTURE_UNSUPPORTED
 * in another one: nothing would release `user`). */
CGC_API cgc_status_t cgc_launch_host_func(cgc_stream_t stream, cgc_host_fn fn, void* user, cgc_host_fn release);

/* Stream memory operations: the flags of waits (CUstreamWaitValue_flags) ... */
#define CGC_WAIT_GEQ 0x0u          /* until (int32_t)(*addr - value) >= 0: a counter that wraps */
#define CGC_WAIT_EQ 0x1u           /* until *addr == value */
#define CGC_WAIT_AND 0x2u          /* until (*addr & value) != 0 */
#define CGC_WAIT_NOR 0x3u          /* until ~(*addr | value) != 0 (devices with the NOR capability) */
#define CGC_WAIT_FLUSH 0x40000000u /* also make remote writes before the wait visible */
/* ... writes take flags 0: a write is ordered after the stream's earlier writes (the driver's v2
 * operations have no unordered write). A batch may hold a barrier, whose flags say its scope: */
#define CGC_BARRIER_SYSTEM 0x0u /* earlier writes visible to the whole system (host, peers) */
#define CGC_BARRIER_GPU 0x1u    /* earlier writes visible to the device */

typedef enum cgc_mem_op_kind { /* the values of CUstreamBatchMemOpType */
  CGC_MEM_OP_WAIT_VALUE_32 = 1,
  CGC_MEM_OP_WRITE_VALUE_32 = 2,
  CGC_MEM_OP_FLUSH_REMOTE_WRITES = 3,
  CGC_MEM_OP_WAIT_VALUE_64 = 4,
  CGC_MEM_OP_WRITE_VALUE_64 = 5,
  CGC_MEM_OP_BARRIER = 6 /* batches only: a memory barrier (flags CGC_BARRIER_*) */
} cgc_mem_op_kind_t;

/* One operation of a batch. Its layout is fixed forever (arrays of it are passed): no struct_size
 * (24 bytes: cgc is 64-bit only, as CUDA 12 is). flags: CGC_WAIT_* for waits, 0 for writes and
 * flushes, CGC_BARRIER_* for barriers; address and value are unused by flushes and barriers. */
typedef struct cgc_mem_op {
  cgc_mem_op_kind_t kind;
  unsigned flags;
  void* address;
  uint64_t value;
} cgc_mem_op_t;

/* Stream memory operations (cuStreamWriteValue32 and its kin): a write of `value` to the 4- or
 * 8-byte aligned `address`, or a wait until the value there meets a CGC_WAIT_* condition, in
 * stream order; captured they become memory-operation nodes. Streams and graphs hand work over
 * through a flag this way without the host. CGC_ERROR_NOT_SUPPORTED (with the reason) where the
 * device lacks them (64-bit operations, CGC_WAIT_NOR, CGC_WAIT_FLUSH have their own
 * capabilities). A wait for a value no work will write hangs the stream, as with the driver. */
CGC_API cgc_status_t cgc_stream_write_value32(cgc_stream_t stream, void* address, uint32_t value, unsigned flags);
CGC_API cgc_status_t cgc_stream_write_value64(cgc_stream_t stream, void* address, uint64_t value, unsigned flags);
CGC_API cgc_status_t cgc_stream_wait_value32(cgc_stream_t stream, void* address, uint32_t value, unsigned flags);
CGC_API cgc_status_t cgc_stream_wait_value64(cgc_stream_t stream, void* address, uint64_t value, unsigned flags);

/* `count` operations (1 to 255, the driver's limit) in one call, in order. */
CGC_API cgc_status_t cgc_stream_batch_mem_op(cgc_stream_t stream, const cgc_mem_op_t* ops, size_t count);

typedef enum cgc_function_attribute {         /* the values of CUfunction_attribute */
  CGC_FUNC_MAX_THREADS_PER_BLOCK = 0,         /* read only */
  CGC_FUNC_SHARED_SIZE_BYTES = 1,             /* static shared memory; read only */
  CGC_FUNC_CONST_SIZE_BYTES = 2,              /* read only */
  CGC_FUNC_LOCAL_SIZE_BYTES = 3,              /* read only */
  CGC_FUNC_NUM_REGS = 4,                      /* read only */
  CGC_FUNC_PTX_VERSION = 5,                   /* read only */
  CGC_FUNC_BINARY_VERSION = 6,                /* read only */
  CGC_FUNC_CACHE_MODE_CA = 7,                 /* read only */
  CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8, /* settable: needed above 48 KiB of dynamic shared memory */
  CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT = 9 /* settable: percent of L1 given to shared memory */
} cgc_function_attribute_t;

/* Loads a module from an image in memory: a fatbin, a cubin or NUL-terminated PTX text (which the
 * driver compiles for the device; its compile log is in the error message). The image may be
 * freed once this returns. */
CGC_API cgc_status_t cgc_module_load(cgc_context_t ctx, const void* image, cgc_module_t* out);

/* Drops the caller's module: its function handles become invalid now; the code stays loaded until
 * the graphs whose captures launched its kernels are reset or destroyed. Eager launches hold
 * nothing: synchronise them before unloading. */
CGC_API cgc_status_t cgc_module_unload(cgc_module_t module);

/* The kernel named `name` (its extern "C" or mangled name); CGC_ERROR_INVALID_ARGUMENT naming it
 * when the module has none. Asking twice gives the same handle, owned by the module. */
CGC_API cgc_status_t cgc_module_get_function(cgc_module_t module, const char* name, cgc_function_t* out);

/* The kernel's `attribute` (cuFuncGetAttribute) into *value. */
CGC_API cgc_status_t cgc_function_get_attribute(cgc_function_t function, cgc_function_attribute_t attribute,
                                                int* value);

/* Sets a settable attribute: only CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES and
 * CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT; the others are CGC_ERROR_INVALID_ARGUMENT. */
CGC_API cgc_status_t cgc_function_set_attribute(cgc_function_t function, cgc_function_attribute_t attribute,
                                                int value);

/* Launches `function` on a grid of grid_x*grid_y*grid_z blocks of block_x*block_y*block_z threads
 * with `shared_bytes` of dynamic shared memory, ordered on `stream` (captured as a kernel node
 * inside a capture: the graph then keeps the module loaded). `args` points at one pointer per
 * kernel parameter, each to the parameter's value (as cuLaunchKernel); the values are copied at
 * the call. Zero dimensions are CGC_ERROR_INVALID_ARGUMENT. */
CGC_API cgc_status_t cgc_launch_kernel(cgc_function_t function, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                       uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                                       cgc_stream_t stream, void** args);

/* ==== 9. Graphs that change: per-node updates and conditional nodes (since 1.2, 1.3) ==========
 *
 * A graph is updated by a capture with cgc_capture_options_t.update (SEMANTICS 27), per node
 * (below, SEMANTICS 28), and decides on the device with conditional nodes (SEMANTICS 29). */

/* Since 1.2. Enables or disables (enabled 0) kernel node `kernel_index` of an instantiated graph,
 * without recapture. Kernel nodes are numbered 0 .. kernel_nodes - 1 (cgc_graph_info) in the
 * order they were captured (enqueued, across the capture's streams); cgc's own kernels count too
 * (a generator's draw is one, a collective's are NCCL's), except the condition kernel cgc adds
 * before each conditional node, and kernels inside conditional bodies are not numbered (SEMANTICS
 * 29). A disabled kernel does nothing at later replays, its dependencies still hold. Changes only
 * the executable (cgc_graph_native and dumps show what was captured). Refused (CGC_ERROR_INVALID_STATE) while an update capture of the graph
 * is under way; not while another thread launches the graph (the driver's rule for one graph). */
CGC_API cgc_status_t cgc_graph_kernel_node_set_enabled(cgc_graph_t graph, size_t kernel_index, int enabled);

/* Since 1.2. Gives captured kernel `kernel_index` new argument values for later replays (one
 * pointer per parameter, as cgc_launch_kernel; e.g. a new buffer), same kernel, grid and block.
 * The rules of cgc_graph_kernel_node_set_enabled apply. */
CGC_API cgc_status_t cgc_graph_kernel_node_set_args(cgc_graph_t graph, size_t kernel_index, void** args);

/* Since 1.2. The kinds of conditional node (the driver's CUgraphConditionalNodeType). */
typedef enum cgc_conditional_kind {
  CGC_CONDITIONAL_IF = 0,    /* the body runs once if *condition != 0 where the node stands (with a
                              * second body, 1.3: that one runs if it is 0) */
  CGC_CONDITIONAL_WHILE = 1, /* the body runs while *condition != 0, read before each iteration */
  CGC_CONDITIONAL_SWITCH = 2 /* 1.3: body i runs once if *condition == i; none if it is n_bodies or more */
} cgc_conditional_kind_t;

/* Since 1.3. Generator draws inside a WHILE body: iteration i of a replay draws what the i-th of
 * as many eager draws would, for i below this many; each replay advances the generator by this
 * many iterations' worth, so what follows the loop never repeats its numbers; later iterations
 * draw from a counter space of their own (fresh, not an eager run's). Not in a WHILE nested in
 * another (refused). SEMANTICS 29. */
#define CGC_LOOP_EAGER_ITERATIONS ((uint64_t)65536)

/* Since 1.3. The most bodies a node may have (a SWITCH's; each is a lent stream while captured). */
#define CGC_CONDITIONAL_MAX_BODIES 256

/* Since 1.3. Flags of cgc_capture_conditional_begin_bodies. */
enum {
  /* WHILE only: cgc reads *condition before the node alone; after that the body's own kernels
   * decide whether another iteration follows, through the node's handle (CUDA's device function
   * cudaGraphSetConditional(handle, value)), saving cgc's kernel at every iteration. A body that
   * never sets it loops for ever. */
  CGC_CONDITIONAL_BODY_SETS_CONDITION = 1
};

/* Since 1.2. Adds a conditional node at this point of the capture under way on `stream` (a cgc
 * capture, or a body of one) and lends *body, a stream whose work until
 * cgc_capture_conditional_end(*body) is the node's body. `condition` is device memory (a
 * uint32_t) the caller's kernels write: cgc's own kernel reads it before the node, and for WHILE
 * again as each iteration's last work, so a body that writes it decides whether it runs again. A
 * body holds kernels (of cgc modules or the caller's own), copies, sets, nested conditionals and
 * (1.3) allocations from the capture's pool and generator draws, on *body alone; host functions,
 * stream memory operations, events and collectives are refused there (SEMANTICS 29 says why).
 * The capture cannot end while a body is open; a node that could not be completed makes the
 * capture's end discard the graph. CGC_ERROR_NOT_SUPPORTED with a driver older than CUDA 12.4. */
CGC_API cgc_status_t cgc_capture_conditional_begin(cgc_stream_t stream, cgc_conditional_kind_t kind,
                                                   const uint32_t* condition, cgc_stream_t* body);

/* Since 1.3. A conditional node with every body at once: IF with 1 body or 2 (IF/ELSE), WHILE
 * with 1, SWITCH with 1 to CGC_CONDITIONAL_MAX_BODIES; bodies[i] is lent for body i (end each with
 * cgc_capture_conditional_end). `flags`: 0 or CGC_CONDITIONAL_BODY_SETS_CONDITION. *handle (may be
 * NULL) is the node's conditional handle (a cudaGraphConditionalHandle) for the caller's kernels.
 * IF/ELSE and SWITCH need a driver for CUDA 12.8 (CGC_ERROR_NOT_SUPPORTED before). Otherwise as
 * cgc_capture_conditional_begin. */
CGC_API cgc_status_t cgc_capture_conditional_begin_bodies(cgc_stream_t stream, cgc_conditional_kind_t kind,
                                                          const uint32_t* condition, unsigned flags,
                                                          size_t n_bodies, cgc_stream_t* bodies, uint64_t* handle);

/* Since 1.2. Ends the body begun on `body` and gives back the lent stream: the handle is then
 * gone, also when this fails (a second end is refused), except when the end is refused because a
 * body begun inside this one is still open (1.3: CGC_ERROR_INVALID_STATE; end that one first).
 * CGC_ERROR_CAPTURE_INVALIDATED when the body's capture was invalidated: the capture it belongs to
 * is then discarded at its end. */
CGC_API cgc_status_t cgc_capture_conditional_end(cgc_stream_t body);

/* ==== 10. NCCL ===============================================================================
 *
 * Collectives on a capturing stream are captured and run at every replay (SEMANTICS 18-20).
 * libnccl.so.2 (>= 2.9.6) is loaded at run time (CGC_NCCL_LIBRARY=<path> names it); without it
 * every function here returns CGC_ERROR_NCCL_UNAVAILABLE. NCCL errors are CGC_ERROR_NCCL with
 * NCCL's own error string and last-error text in cgc_last_error(). As with NCCL itself, every rank
 * must enqueue eager collectives and launch graphs holding collectives in the same order
 * (docs/NCCL.md). Counts are in elements of `dtype`; buffers are device memory of the
 * communicator's device; `stream` must be of that device. Every collective returns
 * CGC_ERROR_INVALID_STATE after cgc_comm_abort, CGC_ERROR_NOT_SUPPORTED for CGC_BFLOAT16 or CGC_AVG
 * with an NCCL older than 2.10, and CGC_ERROR_CAPTURE_INVALIDATED into an invalidated capture. */

/* An ncclUniqueId: make it on one rank (cgc_comm_unique_id), pass it to the others. */
typedef struct cgc_comm_id {
  char internal[128];
} cgc_comm_id_t;
typedef enum cgc_dtype { /* the values of ncclDataType_t */
  CGC_INT8,
  CGC_UINT8,
  CGC_INT32,
  CGC_UINT32,
  CGC_INT64,
  CGC_UINT64,
  CGC_FLOAT16,
  CGC_FLOAT32,
  CGC_FLOAT64,
  CGC_BFLOAT16 /* NCCL >= 2.10 */
} cgc_dtype_t;
typedef enum cgc_reduce_op { CGC_SUM, CGC_PROD, CGC_MAX, CGC_MIN, CGC_AVG /* NCCL >= 2.10 */ } cgc_reduce_op_t;

/* NCCL's version code into *version (e.g. 22809 for 2.28.9). */
CGC_API cgc_status_t cgc_nccl_version(int* version);

/* A new unique id (ncclGetUniqueId) for cgc_comm_create; make it on one rank and give it to all. */
CGC_API cgc_status_t cgc_comm_unique_id(cgc_comm_id_t* id);

/* Joins rank `rank` of `nranks` on ctx's device (blocks until every rank has joined), then
 * connects eagerly with a one-element all-reduce, so that the first collective inside a Global
 * capture needs no setup. Refused (CGC_ERROR_CAPTURE_UNSUPPORTED) while a capture it would break
 * is under way (NCCL's threads are in Global mode); a capture it would break, begun on another
 * thread meanwhile, is refused. */
CGC_API cgc_status_t cgc_comm_create(cgc_context_t ctx, int nranks, const cgc_comm_id_t* id, int rank,
                                     cgc_comm_t* out);

/* Destroys the communicator (ncclCommDestroy). CGC_ERROR_INVALID_STATE while graphs or captures
 * hold collectives on it or NCCL pools of it exist (NCCL would wait for the graphs); refused
 * during captures as cgc_comm_create. After cgc_comm_abort it only frees the handle (graphs that
 * still hold it keep its memory until they go). */
CGC_API cgc_status_t cgc_comm_destroy(cgc_comm_t comm);

/* Aborts the communicator's outstanding work (callable from another thread to unblock a hung
 * collective). Afterwards only cgc_comm_destroy may be called on it. With graphs holding it alive
 * the abort finishes on a thread of its own (NCCL waits for those graphs). */
CGC_API cgc_status_t cgc_comm_abort(cgc_comm_t comm);

/* recv[i] = op over the ranks of send[i], for i < count (send == recv works in place). */
CGC_API cgc_status_t cgc_all_reduce(cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype,
                                    cgc_reduce_op_t op, cgc_stream_t stream);

/* Each rank's `send_count` elements, concatenated in rank order into recv (nranks * send_count
 * elements). */
CGC_API cgc_status_t cgc_all_gather(cgc_comm_t comm, const void* send, void* recv, size_t send_count,
                                    cgc_dtype_t dtype, cgc_stream_t stream);

/* The reduction (op) of every rank's send (nranks * recv_count elements), of which this rank gets
 * the rank-th block of `recv_count` elements in recv. */
CGC_API cgc_status_t cgc_reduce_scatter(cgc_comm_t comm, const void* send, void* recv, size_t recv_count,
                                        cgc_dtype_t dtype, cgc_reduce_op_t op, cgc_stream_t stream);

/* `count` elements of rank `root`'s send into every rank's recv (send is read on root only). */
CGC_API cgc_status_t cgc_broadcast(cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype,
                                   int root, cgc_stream_t stream);

/* Point to point: `count` elements of buf to rank `peer`, which receives them with cgc_recv. A
 * send and its receive must be issued on both ranks (inside a group when both ranks send too). */
CGC_API cgc_status_t cgc_send(cgc_comm_t comm, const void* buf, size_t count, cgc_dtype_t dtype, int peer,
                              cgc_stream_t stream);
CGC_API cgc_status_t cgc_recv(cgc_comm_t comm, void* buf, size_t count, cgc_dtype_t dtype, int peer,
                              cgc_stream_t stream);

/* ncclGroupStart / ncclGroupEnd: the calls between them (on this thread) are issued together.
 * Groups nest; the outermost end issues them. */
CGC_API cgc_status_t cgc_group_start(void);
CGC_API cgc_status_t cgc_group_end(void);

/* Since 1.5. The kinds of memory an NCCL pool holds (docs/NCCL.md, SEMANTICS 31). */
typedef enum cgc_nccl_memory {
  CGC_NCCL_MEMORY_PLAIN = 0,      /* cuMemAlloc'ed, not registered with the communicator */
  CGC_NCCL_MEMORY_REGISTERED = 1, /* ncclMemAlloc'ed and registered (ncclCommRegister, NCCL >= 2.19) */
  CGC_NCCL_MEMORY_SYMMETRIC = 2,  /* ncclMemAlloc'ed, a symmetric window (ncclCommWindowRegister, NCCL >= 2.27) */
} cgc_nccl_memory_t;

/* Since 1.5. A pool of `capacity` bytes (rounded up to 2 MiB) of memory registered with `comm`:
 * made at once, on `comm`'s device, and never grown. Collective: every rank of `comm` calls it
 * with the same capacity and kind. `wanted` is the best kind asked for; an older NCCL gives the
 * next one down (SYMMETRIC -> REGISTERED -> PLAIN), *got (may be NULL) says which, and so does
 * cgc_last_error's text when it is not `wanted`. The ranks compare their kinds: one that differs
 * is refused on every rank (CGC_ERROR_INVALID_STATE), since NCCL leaves mixing registered and
 * unregistered buffers undefined. Captures allocate from it through options->pool, eager code
 * through cgc_pool_malloc; allocation beyond the capacity is CGC_ERROR_OUT_OF_MEMORY. For
 * symmetric kernels every rank must allocate from it in the same order with the same sizes (then
 * blocks sit at the same offsets). Releasing its last reference (cgc_pool_release) is collective
 * too: it synchronises the device and drops the registration. It is refused with
 * CGC_ERROR_CAPTURE_UNSUPPORTED while any capture of the device is under way or adopted, and with
 * CGC_ERROR_INVALID_STATE while a graph holds the pool, a block of it is allocated, or inside a
 * group.
 * The pool holds `comm`: cgc_comm_destroy is refused meanwhile. Refused inside a group, and during
 * captures as cgc_comm_create, which it also follows for captures begun meanwhile. */
CGC_API cgc_status_t cgc_nccl_pool_create(cgc_comm_t comm, size_t capacity, cgc_nccl_memory_t wanted,
                                          cgc_pool_t* out, cgc_nccl_memory_t* got);

/* ==== 11. Random numbers =====================================================================
 *
 * Philox4x32-10 generators with PyTorch's graph semantics (SEMANTICS 17): a draw captured into a
 * graph produces fresh numbers on every replay, exactly those N eager runs of the captured draws
 * would produce from the same state. Each draw of n numbers advances the generator's offset by n
 * rounded up to a multiple of 4. Graphs drawing from one generator must not run concurrently on
 * different streams. */

/* A generator on ctx's device at (seed, offset 0). */
CGC_API cgc_status_t cgc_rng_create(cgc_context_t ctx, uint64_t seed, cgc_rng_t* out);

/* Drops the handle. Graphs that draw from it keep its state alive until they are reset or
 * destroyed; never waits for the device. */
CGC_API cgc_status_t cgc_rng_destroy(cgc_rng_t rng);

/* n floats in [0, 1) into device memory `out`, ordered on `stream` (captured if it captures).
 * A failed draw leaves the generator where it was. CGC_ERROR_INVALID_STATE on a stream capturing
 * under a capture cgc did not begin, or while another capture draws from the generator;
 * CGC_ERROR_CAPTURE_INVALIDATED in an invalidated capture; CGC_ERROR_CAPTURE_UNSUPPORTED for a draw
 * in a WHILE loop nested in another, or from more than 8 generators in one loop (SEMANTICS 29). */
CGC_API cgc_status_t cgc_rng_uniform(cgc_rng_t rng, float* out, size_t n, cgc_stream_t stream);

/* n normal floats (Box-Muller) with the given mean and standard deviation, as cgc_rng_uniform. */
CGC_API cgc_status_t cgc_rng_normal(cgc_rng_t rng, float* out, size_t n, float mean, float stddev,
                                    cgc_stream_t stream);

/* The state the next eager draw (or replay) starts from; either output may be NULL (not both). */
CGC_API cgc_status_t cgc_rng_get_state(cgc_rng_t rng, uint64_t* seed, uint64_t* offset);

/* Sets the state (offset a multiple of 4); takes effect for the next eager draw or replay.
 * CGC_ERROR_INVALID_STATE while a capture draws from the generator, unless nothing changes. */
CGC_API cgc_status_t cgc_rng_set_state(cgc_rng_t rng, uint64_t seed, uint64_t offset);

/* ==== 12. PyTorch and adopted captures (since 1.4 but the allocator entry points) ============= */

/* PyTorch's CUDAPluggableAllocator entry points:
 * torch.cuda.memory.CUDAPluggableAllocator(path, "cgc_torch_malloc", "cgc_torch_free"). They use
 * the device's state directly (no context handle). cgc_torch_malloc returns the block, or NULL on
 * failure (cgc_last_error says why); cgc_torch_free frees it (size, device and stream are
 * PyTorch's and unused). docs/TORCH.md says how the bridge library adds graph pools. */
CGC_API void* cgc_torch_malloc(ssize_t size, int device, void* stream);
CGC_API void cgc_torch_free(void* ptr, ssize_t size, int device, void* stream);

/* Since 1.4. A capture cgc did not begin (a framework's own: torch.cuda.graph when cgc is
 * PyTorch's allocator) allocates from `pool`: from this call until
 * cgc_pool_end_adopted_capture(pool), cgc_malloc and cgc_torch_malloc on any stream of the capture
 * that `native_stream` (a CUstream of the pool's device) takes part in take their blocks from
 * `pool`, exactly as in a capture begun with options->pool = pool (SEMANTICS 30). The capture must
 * be active and not one of cgc's (CGC_ERROR_INVALID_STATE otherwise; CGC_ERROR_CAPTURE_INVALIDATED
 * for an invalidated one); a pool records one capture at a time. The pool holds a reference of its
 * own until the end. `native_stream` must stay valid until then. The adoption lasts until that
 * call, also when the capture failed: cgc_empty_cache is refused meanwhile, and so are another
 * adoption by the pool and the calls that would break a Global capture or any capture of the
 * device (cgc does not know the adopted capture's mode). cgc does not see the replays of graphs it
 * did not instantiate, so a pool that adopted a capture never hands its memory to other streams
 * once it is released: the memory returns to the driver at cgc_empty_cache (PyTorch's own
 * allocator treats a released graph pool the same way). Since 1.6, the calling thread is the
 * adopter: its frees and allocations in the capture read the capture graph's joins, so that a
 * block used on side streams is reused after they joined (SEMANTICS 12); call it on the thread
 * that will end the capture, or make sure the adopter makes no cgc call while another thread
 * ends it (the driver cannot be asked about a capture being ended). Other threads' frees wait
 * for the capture's end. */
CGC_API cgc_status_t cgc_pool_adopt_capture(cgc_pool_t pool, void* native_stream);

/* Since 1.4. Ends the adoption begun by cgc_pool_adopt_capture (call it after the capture ended,
 * or was abandoned): allocations on the capture's streams are refused again, and blocks freed
 * during it with uses on other streams are settled. CGC_ERROR_INVALID_STATE when the pool adopts
 * none. */
CGC_API cgc_status_t cgc_pool_end_adopted_capture(cgc_pool_t pool);

/* Since 1.4. cgc_record_stream for a native CUstream (PyTorch's record_stream hook passes one):
 * `ptr` is used by work on `native_stream` too, so after cgc_free it is not reused before that
 * work is done. */
CGC_API cgc_status_t cgc_record_stream_native(void* ptr, void* native_stream);


/* ==== 13. Saved graphs (since 1.6) ===========================================================
 *
 * A set of graphs, written to a buffer in one process and rebuilt in another on the same GPU
 * architecture and CUDA driver version, ready to replay without capturing anything again
 * (SEMANTICS 38). Nothing is relocated: every address a saved graph uses must lie in a pool at
 * fixed addresses (cgc_pool_create_at), which the restore reserves again at the same base, with
 * the same blocks allocated at the same addresses. Kernels are found again by module and name:
 * a module's image is the one cgc_module_load loaded (kept by cgc and written into the buffer),
 * or one added by key with cgc_module_add_image (the key is written; the restoring process adds
 * the same image under the same key). */

/* Since 1.6. What cgc_graphs_save keeps besides the graphs. */
typedef struct cgc_save_options {
  size_t struct_size;
  /* More pools at fixed addresses to save with the graphs (the memory their kernels read that
   * no graph allocated: weights, inputs, a KV cache), in this order after the graphs' pools. */
  const cgc_pool_t* pools;
  size_t n_pools;
  unsigned flags; /* CGC_SAVE_VERIFY, or 0 */
} cgc_save_options_t;

/* Since 1.6. cgc_save_options_t.flags: after the bytes are written, each graph is rebuilt from
 * them in this process (its modules loaded again from the bytes or by key) and replayed beside
 * the graph itself from the same contents of the saved pools; their replays must leave the pools
 * byte-equal, or the save fails with CGC_ERROR_NOT_SAVABLE naming the graph, the pool and the
 * first differing offset. It catches what the checks cannot see (a launch attribute the driver
 * does not report, an image under a key that builds another kernel). Each graph is replayed
 * twice, and the pools are left as the graph's own replay left them; the saved pools' backed
 * bytes are copied to host memory three times over. The rebuild also measures the device memory
 * a restore takes besides the pools, written into the header (cgc_saved_info_t.restore_bytes):
 * for that every rebuilt executable is alive at once, so the device needs that much room too
 * (without it nothing is measured and they are made one at a time). Only with a buffer, and only
 * while nothing else runs on the saved pools' memory; graphs whose replays are not deterministic
 * fail it. A graph that draws is replayed with its generator's state as its last launch left it
 * (launch it once first; no graph of that generator may replay meanwhile), and the generator does
 * not move on. */
#define CGC_SAVE_VERIFY 1u

/* Since 1.6. Writes `graphs` (n_graphs of them, captured by cgc, none reset) with what rebuilding
 * them needs into `buffer` (capacity bytes), and the bytes written into *size. With buffer NULL
 * (capacity 0) only *size is set: the bytes needed. Written: each graph's nodes and edges; its
 * kernels' module images (or keys), names, attributes and argument bytes; the layout of every
 * pool the graphs were captured into and of options->pools: base, capacity, how far it is backed,
 * and its blocks allocated now (outputs the application still holds, weights); the device's
 * architecture and the driver's version. Every node is checked before anything is written: a
 * kernel argument's every 8-byte word, and each copy's or set's operands, must be an address inside
 * one of those pools or no address the driver knows (a number), but for the state of a generator
 * the graph draws from (cgc_rng_uniform/normal in the capture), which is saved with the
 * generator's seed and offset now; a graph whose pool is not at fixed
 * addresses, a kernel of a module cgc cannot name, host nodes, event nodes, memory allocation
 * and free nodes, child graphs, conditional nodes, memory operations, NCCL
 * collectives, and an executable changed by per-node updates are refused with
 * CGC_ERROR_NOT_SAVABLE, the message naming the graph, the node, its kind, the kernel and the
 * argument. CGC_ERROR_INVALID_ARGUMENT when capacity is too small (*size says how much is
 * needed). With CGC_SAVE_VERIFY in options->flags each graph is then replayed beside its rebuild
 * from the bytes (CGC_ERROR_NOT_SAVABLE when they write different bytes). Needs a CUDA 12.4 driver
 * (CGC_ERROR_NOT_SUPPORTED before). The checksum of bytes over 4 MiB is made on up to 4 threads,
 * joined before it returns. Not while another thread updates, resets or destroys one of the
 * graphs. */
CGC_API cgc_status_t cgc_graphs_save(const cgc_graph_t* graphs, size_t n_graphs, const cgc_save_options_t* options,
                                     void* buffer, size_t capacity, size_t* size);

/* Since 1.6. What a saved buffer holds and needs, read without touching the device. */
typedef struct cgc_saved_info {
  size_t struct_size;
  uint32_t format_version;  /* of the buffer's layout */
  int compute_major;        /* the architecture it was saved on (e.g. 9, 0) */
  int compute_minor;
  int driver_version;       /* cuDriverGetVersion of the saving process, e.g. 13000 */
  size_t n_graphs;
  size_t n_pools;           /* pools cgc_graphs_restore creates, in this order */
  size_t n_modules;         /* module images, embedded or by key */
  size_t n_nodes;           /* the graphs' nodes, all together */
  size_t pool_bytes;        /* device memory the restored pools back: exactly their backed ranges */
  size_t image_bytes;       /* of the embedded module images */
  /* Device memory a restore takes besides pool_bytes: the modules it loads and the graphs'
   * executables, as a verifying save (CGC_SAVE_VERIFY) measured them in the saving process
   * (cuMemGetInfo around its rebuild; other work on the device meanwhile shows in it). Not in
   * them: memory the driver takes once per process, which the saving process had paid
   * (SEMANTICS 42). 0 when the buffer was saved without verifying. */
  size_t restore_bytes;        /* every graph with an executable of its own */
  size_t family_restore_bytes; /* with CGC_RESTORE_FAMILIES: one executable for each structure */
  size_t n_generators;         /* generators the graphs draw from, created again by the restore */
} cgc_saved_info_t;

/* Since 1.6. Fills as much of *info as its struct_size has room for, from `data` (size bytes of
 * cgc_graphs_save's output). Needs no driver and allocates nothing on the device, so a server can
 * size the rest of its memory first; the checksum of a buffer over 4 MiB is read on up to 4
 * threads, joined before it returns. CGC_ERROR_SAVED_MISMATCH for a buffer that is not one, is
 * damaged or truncated, or of another format version. */
CGC_API cgc_status_t cgc_saved_info(const void* data, size_t size, cgc_saved_info_t* info);

/* Since 1.6. cgc_restore_options_t.flags: restored graphs of one structure (the same nodes of the
 * same kinds and kernels, the same edges) join one family (cgc_graph_share_executable): the first
 * of each structure is built and instantiated, the others join unbuilt and are built at their
 * first use (launch, upload, info, dump, native graph, save), from a copy of the bytes cgc keeps
 * until then; a member the driver refuses to switch to then gets an executable of its own
 * (cgc_graph_info's family_result says why). */
#define CGC_RESTORE_FAMILIES 1u

/* Since 1.6. Options of cgc_graphs_restore. */
typedef struct cgc_restore_options {
  size_t struct_size;
  unsigned flags;   /* CGC_RESTORE_FAMILIES, or 0 */
  unsigned threads; /* host threads that read the checksum (at most 4 of them), check the graphs'
                     * records, instantiate the graphs and make family members, the calling thread
                     * one of them (at most 64; the graphs are built on the calling thread): 0 lets
                     * cgc choose (up to 4, as many as there are CPUs), 1 restores on the calling
                     * thread alone */
  /* Out: the generators the graphs draw from (cgc_saved_info's n_generators), created again with
   * the seed and offset they had at the save, each with a reference of the caller's
   * (cgc_rng_destroy); NULL (n_generators 0) leaves them to the graphs alone. */
  cgc_rng_t* generators;
  size_t n_generators;
} cgc_restore_options_t;

/* Since 1.6. Rebuilds the graphs of `data` (size bytes of cgc_graphs_save's output) on ctx's device:
 * its pools are created at their bases (cgc_pool_create_at) with the blocks allocated at save
 * time claimed at their addresses (the application's to free with cgc_free, as in the saving
 * process), the rest of their backed ranges kept for the graphs; modules are loaded (embedded
 * images; images by key from cgc_module_add_image); each kernel is checked against its saved
 * attributes (registers, static shared and local memory, binary version); each graph is built
 * with its nodes, edges and kernel node attributes, and instantiated as a capture's. graphs[]
 * receives n_graphs graphs and pools[] n_pools pools (cgc_saved_info's counts; each pool with
 * one reference, released with cgc_pool_release when the application is done with its blocks and
 * graphs). A generator the graphs drew from is created again with its seed and offset at the
 * save, so the first replay draws what the saving process's next replay would have drawn; each
 * restored graph advances it as the saved one did (SEMANTICS 17, 40).
 * CGC_ERROR_SAVED_MISMATCH, naming what differs, for a damaged buffer, another format
 * version, another architecture or driver version, a module key not added, or a kernel missing
 * or with other attributes; CGC_ERROR_INVALID_STATE when a pool's range cannot be reserved here
 * (cgc_pool_create_at's message). On failure nothing is left: no graph, pool, generator or module
 * (options->generators' entries are NULL). Graphs that share a generator share it after a restore
 * only when they were saved in one call: each call's file creates its own. */
CGC_API cgc_status_t cgc_graphs_restore(cgc_context_t ctx, const void* data, size_t size,
                                        const cgc_restore_options_t* options, cgc_graph_t* graphs, size_t n_graphs,
                                        cgc_pool_t* pools, size_t n_pools);

/* Since 1.6. Families: `graph` gives up its own executable and shares `leader`'s, so that graphs
 * of one topology that differ in their nodes' parameters (one per batch size) hold one
 * executable (SEMANTICS 41). A launch or upload of a member the executable does not hold updates
 * it in place to that member's nodes first (cuGraphExecUpdate: no device synchronisation; it
 * costs a part of an instantiation), then launches. Members replay one at a time, in launch
 * order, whatever their streams; a launch while another thread launches a member of the same
 * family is refused (CGC_ERROR_INVALID_STATE), never waits. Members take no per-node updates and
 * no updates by capture (CGC_ERROR_INVALID_STATE). The driver decides who can join: a refused
 * update is CGC_ERROR_NOT_SUPPORTED, `graph` keeps its own executable and cgc_graph_info's
 * family_result says why. The last member's reset frees the executable. Not while another thread
 * launches, resets or destroys either graph. */
CGC_API cgc_status_t cgc_graph_share_executable(cgc_graph_t graph, cgc_graph_t leader);

/* Since 1.6. Adds a module image under `key` (a NUL-terminated name of up to 255 bytes; the image
 * is copied): cgc_graphs_save names a kernel of a module cgc did not load (the application's own,
 * a library's) by this key when the image has a kernel of that name with the same attributes, and
 * cgc_graphs_restore loads the image added under the key a buffer names. Adding another image
 * under a key already taken is CGC_ERROR_INVALID_STATE; the same image again is fine. Images stay
 * for the life of the process. CGC_ERROR_CUDA when the driver cannot load the image. */
CGC_API cgc_status_t cgc_module_add_image(cgc_context_t ctx, const char* key, const void* image, size_t size);

/* Since 1.6. The record of module images: with `on` set, every module the driver loads in this
 * process from then on (cuBLAS's, cuDNN's, Triton's, the application's; a lazily loaded one at
 * its first kernel) has its image copied and kept for the life of the process, until a call with
 * `on` 0 stops the recording (the images kept stay). cgc_graphs_save finds a kernel of a module
 * cgc did not load among the images added by key, then among those recorded (by name and the
 * same attributes), and writes a recorded image into the buffer, as it writes cgc_module_load's.
 * The record uses CUPTI (libcupti, opened at the first call: CGC_CUPTI_LIBRARY names it), which
 * takes one client per process: CGC_ERROR_INVALID_STATE while a profiler or sanitizer is
 * subscribed, and a profiler started later is refused while the record is on;
 * CGC_ERROR_NOT_SUPPORTED, naming what was tried, without libcupti. `images` and `bytes`, when
 * not NULL, receive how many images the record holds and their size, after the call. */
CGC_API cgc_status_t cgc_module_record(int on, size_t* images, size_t* bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* ==== 14. The function table ================================================================= */
#include "cgc_api.h"

#endif /* CGC_H_ */
