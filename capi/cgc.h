/* cgc: CUDA-graph capture with the semantics of PyTorch's torch.cuda.graph, behind a stable C ABI.
 *
 * This is the only public header. It includes no CUDA header: native CUDA handles (CUstream,
 * CUgraph, CUgraphExec) pass as void*, so a C, C++, Rust or Go program needs only this file and
 * libcgc.so.1. The contract is ../shared/design/ABI.md; docs/ holds the rules in short.
 *
 * Conventions
 * - Every function returns cgc_status_t unless stated; outputs go through pointer arguments and
 *   an output handle is set to NULL on failure.
 * - cgc_last_error() is a thread-local message naming the function, the argument or driver call,
 *   and the driver's error name. It describes the most recent call on this thread that failed
 *   or warned (an empty capture warns); a successful call leaves it unchanged.
 * - Handles are opaque. NULL where a handle is required is CGC_ERROR_INVALID_ARGUMENT; a destroyed
 *   handle is detected in the common case and gives CGC_ERROR_INVALID_HANDLE.
 * - Option structs start with struct_size; a NULL pointer, or a zeroed struct with struct_size
 *   set, means the defaults. Fields are only ever appended.
 * - Every function may be called from any thread; an object must not be destroyed while another
 *   thread uses it.
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

/* ---- versions, status ---------------------------------------------------------------------- */

#define CGC_VERSION_MAJOR 1 /* also the soname: libcgc.so.1 */
#define CGC_VERSION_MINOR 0
#define CGC_VERSION_PATCH 0
#define CGC_VERSION ((CGC_VERSION_MAJOR << 16) | (CGC_VERSION_MINOR << 8) | CGC_VERSION_PATCH)

/* The library's version, (major << 16) | (minor << 8) | patch. Compare with CGC_VERSION to detect
 * a header/library mismatch. */
CGC_API uint32_t cgc_version(void);

/* Status codes are pinned forever: values are never renumbered or reused. */
typedef enum cgc_status {
  CGC_SUCCESS = 0,
  CGC_ERROR_INVALID_ARGUMENT = 1,
  CGC_ERROR_INVALID_HANDLE = 2,
  CGC_ERROR_INVALID_STATE = 3,          /* e.g. capture_end without begin, launch after reset */
  CGC_ERROR_NO_DRIVER = 4,              /* libcuda.so.1 could not be loaded */
  CGC_ERROR_NO_DEVICE = 5,              /* the driver sees no usable GPU */
  CGC_ERROR_OUT_OF_MEMORY = 6,
  CGC_ERROR_CAPTURE_UNSUPPORTED = 7,    /* a call not allowed while a capture is under way */
  CGC_ERROR_CAPTURE_INVALIDATED = 8,    /* the capture was broken by an earlier call */
  CGC_ERROR_CAPTURE_UNJOINED = 9,       /* a forked stream was not joined before capture_end */
  CGC_ERROR_CAPTURE_LEGACY_STREAM = 10, /* capture on the legacy default stream */
  CGC_ERROR_NCCL_UNAVAILABLE = 11,
  CGC_ERROR_NCCL = 12,
  CGC_ERROR_CUDA = 13,                  /* any other driver error; cgc_last_error names it */
  CGC_ERROR_NOT_SUPPORTED = 14,         /* driver or device too old for the request */
  CGC_ERROR_INTERNAL = 15
} cgc_status_t;

/* A static English name for `status` ("CGC_ERROR_INVALID_ARGUMENT: ..."); never NULL, also for
 * values this version does not know. */
CGC_API const char* cgc_status_string(cgc_status_t status);

/* This thread's message for the most recent failing (or warning) cgc call; "" when none.
 * Valid until the next cgc call on this thread. */
CGC_API const char* cgc_last_error(void);

/* ---- handles ------------------------------------------------------------------------------- */

typedef struct cgc_context_s* cgc_context_t; /* one device (its primary context) */
typedef struct cgc_stream_s* cgc_stream_t;
typedef struct cgc_event_s* cgc_event_t;
typedef struct cgc_graph_s* cgc_graph_t; /* captured graph + its executable, like torch.cuda.CUDAGraph */
typedef struct cgc_pool_s* cgc_pool_t;   /* private memory pool, like graph_pool_handle() */
typedef struct cgc_comm_s* cgc_comm_t;   /* NCCL communicator */
typedef struct cgc_rng_s* cgc_rng_t;     /* graph-safe Philox generator */

/* ---- devices, streams, events -------------------------------------------------------------- */

/* Number of CUDA devices. Errors: CGC_ERROR_NO_DRIVER without libcuda.so.1; CGC_ERROR_NO_DEVICE
 * when the driver sees no GPU (count is then 0). */
CGC_API cgc_status_t cgc_device_count(int* count);

/* A handle on `device`'s primary context (retained, so it is shared with the CUDA runtime and
 * any framework in the process). Objects created from it keep it alive: destroying the handle
 * while streams, events or graphs of it exist only drops the caller's reference. */
CGC_API cgc_status_t cgc_context_create(int device, cgc_context_t* out);
CGC_API cgc_status_t cgc_context_destroy(cgc_context_t ctx);
/* Waits for all work on the device (cuCtxSynchronize). Not allowed during a Global capture. */
CGC_API cgc_status_t cgc_context_synchronize(cgc_context_t ctx);

#define CGC_STREAM_NON_BLOCKING 0x1u /* does not synchronise with the legacy default stream */
/* A new stream on ctx's device. priority: 0 is the default; lower numbers are higher priority,
 * clamped to the device's range. Unknown flag bits are CGC_ERROR_INVALID_ARGUMENT. */
CGC_API cgc_status_t cgc_stream_create(cgc_context_t ctx, unsigned flags, int priority, cgc_stream_t* out);
/* Borrows an existing CUstream / cudaStream_t of ctx's device (NULL or cudaStreamLegacy = the
 * legacy default stream; cudaStreamPerThread is accepted too). cgc_stream_destroy frees only the
 * handle; the stream stays the caller's. */
CGC_API cgc_status_t cgc_stream_wrap(cgc_context_t ctx, void* native_stream, cgc_stream_t* out);
/* The CUstream behind the handle (NULL for the legacy default stream, or for a bad handle). */
CGC_API void* cgc_stream_native(cgc_stream_t stream);
/* Destroys an owned stream (pending work still completes); borrowed streams are not destroyed.
 * Refused with CGC_ERROR_INVALID_STATE while a capture begun with cgc is under way on it. */
CGC_API cgc_status_t cgc_stream_destroy(cgc_stream_t stream);
CGC_API cgc_status_t cgc_stream_synchronize(cgc_stream_t stream);
/* *complete = 1 when all work on the stream has finished, 0 when some is still running. */
CGC_API cgc_status_t cgc_stream_query(cgc_stream_t stream, int* complete);
/* Makes future work on `stream` wait for `event`'s last record. Inside a capture this is the
 * fork (a stream outside the capture waits on an event recorded in it and joins the capture)
 * and the join (the origin stream waits on an event recorded on a side stream). cgc remembers
 * forks so that cgc_capture_end can name side streams that were never joined. */
CGC_API cgc_status_t cgc_stream_wait_event(cgc_stream_t stream, cgc_event_t event);

#define CGC_EVENT_TIMING 0x1u /* without it events are created with timing disabled (faster) */
CGC_API cgc_status_t cgc_event_create(cgc_context_t ctx, unsigned flags, cgc_event_t* out);
CGC_API cgc_status_t cgc_event_destroy(cgc_event_t event);
CGC_API cgc_status_t cgc_event_record(cgc_event_t event, cgc_stream_t stream);
CGC_API cgc_status_t cgc_event_synchronize(cgc_event_t event);
/* *complete = 1 when the recorded work has finished. Like cuEventQuery it is an unsafe call
 * during a Global-mode capture. */
CGC_API cgc_status_t cgc_event_query(cgc_event_t event, int* complete);
/* Milliseconds between two completed records of CGC_EVENT_TIMING events. */
CGC_API cgc_status_t cgc_event_elapsed_ms(cgc_event_t start, cgc_event_t end, float* ms);

/* ---- capture ------------------------------------------------------------------------------- */

typedef enum cgc_capture_mode { /* same values as CUstreamCaptureMode */
  CGC_CAPTURE_MODE_GLOBAL = 0,  /* the default: an unsafe call from any thread breaks the capture */
  CGC_CAPTURE_MODE_THREAD_LOCAL = 1, /* only the capturing thread's unsafe calls break it */
  CGC_CAPTURE_MODE_RELAXED = 2       /* no call is checked */
} cgc_capture_mode_t;

typedef enum cgc_capture_status {
  CGC_CAPTURE_NONE = 0,   /* the stream is not capturing */
  CGC_CAPTURE_ACTIVE = 1, /* capturing */
  CGC_CAPTURE_BROKEN = 2  /* capturing, but invalidated: capture_end will fail */
} cgc_capture_status_t;

typedef struct cgc_capture_options {
  size_t struct_size;      /* sizeof(cgc_capture_options_t) */
  cgc_capture_mode_t mode; /* default GLOBAL */
  cgc_pool_t pool;         /* NULL: a new private pool; else allocate into (share) this pool */
  unsigned flags;          /* CGC_CAPTURE_* below */
} cgc_capture_options_t;

#define CGC_CAPTURE_UPLOAD 0x1u              /* upload the executable at capture_end */
#define CGC_CAPTURE_AUTO_FREE_ON_LAUNCH 0x2u /* cudaGraphInstantiateFlagAutoFreeOnLaunch (always on) */

/* Starts capturing `stream` into a new graph. Errors: CGC_ERROR_CAPTURE_LEGACY_STREAM on the
 * legacy default stream (capture on a created stream; replaying on the default stream is
 * fine); CGC_ERROR_INVALID_STATE if the stream is already capturing or the pool is being
 * recorded into by another capture; CGC_ERROR_INVALID_ARGUMENT for a bad mode or flag. */
CGC_API cgc_status_t cgc_capture_begin(cgc_stream_t stream, const cgc_capture_options_t* options);
/* Ends the capture begun on `stream` and instantiates it (AutoFreeOnLaunch, node priorities
 * where the driver has them; uploaded with CGC_CAPTURE_UPLOAD). The driver capture ends
 * whatever happened: CGC_ERROR_CAPTURE_UNJOINED names the side streams that were forked and not
 * joined back, CGC_ERROR_CAPTURE_INVALIDATED reports an earlier illegal call; either way no
 * stream is left capturing and the stream can capture again. An empty capture succeeds and
 * says so in cgc_last_error(). */
CGC_API cgc_status_t cgc_capture_end(cgc_stream_t stream, cgc_graph_t* out);

typedef cgc_status_t (*cgc_capture_fn)(cgc_stream_t stream, void* user);
/* begin, body(stream, user), end. If body returns an error the capture is still ended, the
 * graph discarded, and body's status returned. */
CGC_API cgc_status_t cgc_capture(cgc_stream_t stream, const cgc_capture_options_t* options,
                                 cgc_capture_fn body, void* user, cgc_graph_t* out);
/* Whether `stream` is capturing now and, if so, the driver's capture id (capture_id may be
 * NULL; it is 0 when not capturing). Safe during any capture. */
CGC_API cgc_status_t cgc_stream_capture_status(cgc_stream_t stream, cgc_capture_status_t* status,
                                               uint64_t* capture_id);
/* Swaps this thread's capture-interaction mode with *mode (cuThreadExchangeStreamCaptureMode):
 * call once to push a mode, again with the returned value to pop it. */
CGC_API cgc_status_t cgc_capture_mode_exchange(cgc_capture_mode_t* mode);

/* ---- graphs -------------------------------------------------------------------------------- */

typedef struct cgc_graph_info {
  size_t struct_size;
  size_t node_count;
  uint64_t replay_count;      /* successful launches */
  int uploaded;               /* 1 after cgc_graph_upload or CGC_CAPTURE_UPLOAD */
  size_t pool_bytes_reserved; /* bytes its pool holds */
} cgc_graph_info_t;

/* Replays `graph` on `stream` (any stream of the graph's device, the legacy default stream
 * included). Does not synchronise. Graphs sharing a pool must be replayed in the order they
 * were captured and never concurrently (PyTorch's rule). Errors: CGC_ERROR_INVALID_STATE after
 * cgc_graph_reset; CGC_ERROR_INVALID_HANDLE if destroyed. */
CGC_API cgc_status_t cgc_graph_launch(cgc_graph_t graph, cgc_stream_t stream);
/* Uploads the executable on `stream` ahead of the first launch, so that launch is as fast as
 * the rest. */
CGC_API cgc_status_t cgc_graph_upload(cgc_graph_t graph, cgc_stream_t stream);
CGC_API cgc_status_t cgc_graph_info(cgc_graph_t graph, cgc_graph_info_t* info);
/* The pool the graph allocated into (borrowed: cgc_pool_retain it to keep it beyond the graph's
 * reset or destroy). Passing it in cgc_capture_options_t.pool shares it, like
 * CUDAGraph.pool(). CGC_ERROR_INVALID_STATE after reset. */
CGC_API cgc_status_t cgc_graph_pool(cgc_graph_t graph, cgc_pool_t* pool);
/* Writes the graph in Graphviz DOT form (verbose) to dot_path. */
CGC_API cgc_status_t cgc_graph_debug_dump(cgc_graph_t graph, const char* dot_path);
/* Like CUDAGraph.reset(): frees the executable and graph now and drops the pool reference; the
 * handle stays valid (launch is then CGC_ERROR_INVALID_STATE). Resetting twice is fine. */
CGC_API cgc_status_t cgc_graph_reset(cgc_graph_t graph);
/* reset + free the handle. */
CGC_API cgc_status_t cgc_graph_destroy(cgc_graph_t graph);
/* The CUgraph / CUgraphExec behind the handle, owned by it (NULL after reset or for a bad
 * handle). Valid until reset or destroy. */
CGC_API void* cgc_graph_native(cgc_graph_t graph);
CGC_API void* cgc_graph_native_exec(cgc_graph_t graph);

/* ---- pools and the graph-aware caching allocator ------------------------------------------
 *
 * cgc_malloc is a stream-ordered caching allocator per device, like PyTorch's: a block freed on
 * a stream is at once reusable on that stream; one used on other streams (cgc_record_stream)
 * waits for their work. During a capture, allocations on any stream of that capture (side
 * streams forked in included) come from the capture's private pool. A pool shared by several
 * captures (cgc_capture_options_t.pool) lets later graphs reuse what earlier ones freed, so
 * graphs captured one after another use about the memory of the largest; such graphs must be
 * replayed in capture order and never concurrently. Blocks allocated in a capture and never
 * freed are the graph's outputs: they stay valid after the graph is destroyed. */

typedef struct cgc_memory_stats {
  size_t struct_size;
  size_t bytes_reserved;       /* obtained from the driver */
  size_t bytes_allocated;      /* handed out and not yet freed (block sizes, 512-byte rounded) */
  size_t peak_bytes_allocated;
  size_t peak_bytes_reserved;
  uint64_t num_driver_allocs; /* cuMemAlloc calls so far */
  uint64_t num_driver_frees;
} cgc_memory_stats_t;

/* A new pool (like torch.cuda.graph_pool_handle()) holding one reference of the caller's. */
CGC_API cgc_status_t cgc_pool_create(cgc_context_t ctx, cgc_pool_t* out);
/* Takes one more reference of the caller's (e.g. on a pool lent by cgc_graph_pool). */
CGC_API cgc_status_t cgc_pool_retain(cgc_pool_t pool);
/* Drops one of the caller's references; CGC_ERROR_INVALID_STATE if the caller holds none. The
 * pool lives on while graphs captured into it or blocks allocated from it exist; then its
 * memory returns to the device's cache. */
CGC_API cgc_status_t cgc_pool_release(cgc_pool_t pool);
/* Allocates `size` bytes, ordered on `stream` (512-byte aligned). During a capture on `stream`
 * the block comes from the capture's pool. size 0 gives NULL and success. Errors:
 * CGC_ERROR_OUT_OF_MEMORY after freeing cached memory and retrying (never during a capture),
 * with the sizes in the message. */
CGC_API cgc_status_t cgc_malloc(cgc_context_t ctx, size_t size, cgc_stream_t stream, void** out);
/* Frees a block of cgc_malloc, ordered on its allocation stream. NULL is a no-op; a pointer cgc
 * did not hand out, or one already freed, is CGC_ERROR_INVALID_ARGUMENT and changes nothing. */
CGC_API cgc_status_t cgc_free(void* ptr);
/* Like Tensor.record_stream: `ptr` is used by work on `stream` too, so after cgc_free it is not
 * reused before that work is done (outside captures: events; inside: joins or capture end). */
CGC_API cgc_status_t cgc_record_stream(void* ptr, cgc_stream_t stream);
/* Gives the device cache's unused segments back to the driver. Pools still referenced keep
 * theirs. CGC_ERROR_INVALID_STATE while a capture is under way. */
CGC_API cgc_status_t cgc_empty_cache(cgc_context_t ctx);
/* Stats of the whole device (pool NULL) or of one pool. */
CGC_API cgc_status_t cgc_memory_stats(cgc_context_t ctx, cgc_pool_t pool /* NULL: whole context */,
                                      cgc_memory_stats_t* stats);
/* PyTorch CUDAPluggableAllocator entry points:
 * torch.cuda.memory.CUDAPluggableAllocator(path, "cgc_torch_malloc", "cgc_torch_free").
 * They use the device's state directly; malloc returns NULL on failure (cgc_last_error says why). */
CGC_API void* cgc_torch_malloc(ssize_t size, int device, void* stream);
CGC_API void cgc_torch_free(void* ptr, ssize_t size, int device, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CGC_H_ */
