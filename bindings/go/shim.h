/* C side of the Go binding: loads libcgc with dlopen and wraps each entry of its function table.
 *
 * Why shims at all: cgc_last_error() is thread-local, and a goroutine may move to another OS
 * thread between two cgo calls. So every shim calls the table entry and, when it fails, copies
 * the message in the same C call, on the same thread. The copy is malloc'd (*msg); the Go side
 * frees it. On success *msg is left NULL, so the fast path allocates nothing.
 *
 * Device addresses and native CUDA handles cross as uintptr_t, not void*: they are not host
 * memory, and keeping them out of Go's pointer types keeps the garbage collector away from them.
 *
 * Internal to the package; not an API. */
#ifndef CGCGO_SHIM_H_
#define CGCGO_SHIM_H_

#include <stdint.h>
#include <stdlib.h>

#include "capi/cgc.h"

/* 0 on success; otherwise *msg says why (malloc'd). Called once, under sync.Once. */
int cgcgo_load(const char* path, char** msg);

uint32_t cgcgo_version(void);
const char* cgcgo_status_string(int status);

/* The header's status list seen from Go: how many codes, and each one's enum name ("CGC_SUCCESS";
 * NULL outside 0..CGCGO_STATUS_COUNT-1). The codes are 0..count-1 with no gaps. */
#define CGCGO_COUNT_STATUS_(name, value, text) +1
enum { CGCGO_STATUS_COUNT = 0 CGC_STATUS_LIST(CGCGO_COUNT_STATUS_) };
#undef CGCGO_COUNT_STATUS_
const char* cgcgo_status_name(int status);

cgc_status_t cgcgo_device_count(int* count, char** msg);
cgc_status_t cgcgo_context_create(int device, cgc_context_t* out, char** msg);
cgc_status_t cgcgo_context_destroy(cgc_context_t ctx, char** msg);
cgc_status_t cgcgo_context_synchronize(cgc_context_t ctx, char** msg);

cgc_status_t cgcgo_stream_create(cgc_context_t ctx, unsigned flags, int priority, cgc_stream_t* out, char** msg);
cgc_status_t cgcgo_stream_wrap(cgc_context_t ctx, uintptr_t native, cgc_stream_t* out, char** msg);
uintptr_t cgcgo_stream_native(cgc_stream_t stream);
cgc_status_t cgcgo_stream_destroy(cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_stream_synchronize(cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_stream_query(cgc_stream_t stream, int* complete, char** msg);
cgc_status_t cgcgo_stream_wait_event(cgc_stream_t stream, cgc_event_t event, char** msg);

cgc_status_t cgcgo_event_create(cgc_context_t ctx, unsigned flags, cgc_event_t* out, char** msg);
cgc_status_t cgcgo_event_destroy(cgc_event_t event, char** msg);
cgc_status_t cgcgo_event_record(cgc_event_t event, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_event_synchronize(cgc_event_t event, char** msg);
cgc_status_t cgcgo_event_query(cgc_event_t event, int* complete, char** msg);
cgc_status_t cgcgo_event_elapsed_ms(cgc_event_t start, cgc_event_t end, float* ms, char** msg);

/* update (1.2): NULL, or the graph the capture updates. */
cgc_status_t cgcgo_capture_begin(cgc_stream_t stream, int mode, cgc_pool_t pool, unsigned flags, cgc_graph_t update,
                                 char** msg);
cgc_status_t cgcgo_capture_end(cgc_stream_t stream, cgc_graph_t* out, char** msg);
cgc_status_t cgcgo_stream_capture_status(cgc_stream_t stream, int* status, uint64_t* id, char** msg);
cgc_status_t cgcgo_capture_mode_exchange(int* mode, char** msg);

cgc_status_t cgcgo_graph_launch(cgc_graph_t graph, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_graph_upload(cgc_graph_t graph, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_graph_info(cgc_graph_t graph, cgc_graph_info_t* info, char** msg);
cgc_status_t cgcgo_graph_pool_retained(cgc_graph_t graph, cgc_pool_t* pool, char** msg);
cgc_status_t cgcgo_graph_debug_dump(cgc_graph_t graph, const char* path, char** msg);
cgc_status_t cgcgo_graph_reset(cgc_graph_t graph, char** msg);
cgc_status_t cgcgo_graph_destroy(cgc_graph_t graph, char** msg);
uintptr_t cgcgo_graph_native(cgc_graph_t graph);
uintptr_t cgcgo_graph_native_exec(cgc_graph_t graph);

cgc_status_t cgcgo_pool_create(cgc_context_t ctx, cgc_pool_t* out, char** msg);
cgc_status_t cgcgo_pool_release(cgc_pool_t pool, char** msg);
cgc_status_t cgcgo_malloc(cgc_context_t ctx, size_t size, cgc_stream_t stream, uintptr_t* out, char** msg);
cgc_status_t cgcgo_free(uintptr_t ptr, char** msg);
cgc_status_t cgcgo_record_stream(uintptr_t ptr, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_empty_cache(cgc_context_t ctx, char** msg);
cgc_status_t cgcgo_memory_stats(cgc_context_t ctx, cgc_pool_t pool, cgc_memory_stats_t* stats, char** msg);

cgc_status_t cgcgo_nccl_version(int* version, char** msg);
cgc_status_t cgcgo_comm_unique_id(cgc_comm_id_t* id, char** msg);
cgc_status_t cgcgo_comm_create(cgc_context_t ctx, int nranks, const cgc_comm_id_t* id, int rank, cgc_comm_t* out,
                               char** msg);
cgc_status_t cgcgo_comm_destroy(cgc_comm_t comm, char** msg);
cgc_status_t cgcgo_comm_abort(cgc_comm_t comm, char** msg);
cgc_status_t cgcgo_all_reduce(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t count, int dtype, int op,
                              cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_all_gather(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t send_count, int dtype,
                              cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_reduce_scatter(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t recv_count, int dtype,
                                  int op, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_broadcast(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t count, int dtype, int root,
                             cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_send(cgc_comm_t comm, uintptr_t buf, size_t count, int dtype, int peer, cgc_stream_t stream,
                        char** msg);
cgc_status_t cgcgo_recv(cgc_comm_t comm, uintptr_t buf, size_t count, int dtype, int peer, cgc_stream_t stream,
                        char** msg);
cgc_status_t cgcgo_group_start(char** msg);
cgc_status_t cgcgo_group_end(char** msg);

cgc_status_t cgcgo_rng_create(cgc_context_t ctx, uint64_t seed, cgc_rng_t* out, char** msg);
cgc_status_t cgcgo_rng_destroy(cgc_rng_t rng, char** msg);
cgc_status_t cgcgo_rng_uniform(cgc_rng_t rng, uintptr_t out, size_t n, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_rng_normal(cgc_rng_t rng, uintptr_t out, size_t n, float mean, float stddev,
                              cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_rng_get_state(cgc_rng_t rng, uint64_t* seed, uint64_t* offset, char** msg);
cgc_status_t cgcgo_rng_set_state(cgc_rng_t rng, uint64_t seed, uint64_t offset, char** msg);

/* ---- 1.1: the work a graph is made of ---- */

cgc_status_t cgcgo_stream_priority_range(cgc_context_t ctx, int* least, int* greatest, char** msg);
cgc_status_t cgcgo_stream_priority(cgc_stream_t stream, int* priority, char** msg);
cgc_status_t cgcgo_stream_id(cgc_stream_t stream, uint64_t* id, char** msg);
cgc_status_t cgcgo_stream_device(cgc_stream_t stream, int* device, uintptr_t* native_context, char** msg);
cgc_status_t cgcgo_stream_copy_attributes(cgc_stream_t dst, cgc_stream_t src, char** msg);
/* The policy crosses field by field: its base is a device address (uintptr_t), and the struct
 * with its struct_size is built on the C side. */
cgc_status_t cgcgo_stream_set_access_policy(cgc_stream_t stream, uintptr_t base, size_t bytes, float hit_ratio,
                                            int hit_property, int miss_property, char** msg);
cgc_status_t cgcgo_stream_get_access_policy(cgc_stream_t stream, uintptr_t* base, size_t* bytes, float* hit_ratio,
                                            int* hit_property, int* miss_property, char** msg);

/* Host memory is void*: it is host memory, C's (cgc_host_alloc) or the caller's. */
cgc_status_t cgcgo_host_alloc(cgc_context_t ctx, size_t bytes, unsigned flags, void** out, char** msg);
cgc_status_t cgcgo_host_free(void* ptr, char** msg);
cgc_status_t cgcgo_host_register(cgc_context_t ctx, void* ptr, size_t bytes, unsigned flags, char** msg);
cgc_status_t cgcgo_host_unregister(void* ptr, char** msg);

/* An empty Go slice has no address (NULL here); the library wants a real pointer even for a
 * copy of 0 bytes, so the shims lend one (nothing is read or written at 0 bytes). */
cgc_status_t cgcgo_memcpy_htod_async(uintptr_t dst, const void* src, size_t bytes, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_memcpy_dtoh_async(void* dst, uintptr_t src, size_t bytes, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_memcpy_dtod_async(uintptr_t dst, uintptr_t src, size_t bytes, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_memset_d8_async(uintptr_t dst, uint8_t value, size_t count, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_memset_d16_async(uintptr_t dst, uint16_t value, size_t count, cgc_stream_t stream, char** msg);
cgc_status_t cgcgo_memset_d32_async(uintptr_t dst, uint32_t value, size_t count, cgc_stream_t stream, char** msg);

/* Enqueues the Go function behind `handle` (a runtime/cgo.Handle) through C trampolines that
 * call the package's exported Go functions; the release trampoline deletes the handle. */
cgc_status_t cgcgo_launch_host_func(cgc_stream_t stream, uintptr_t handle, char** msg);

cgc_status_t cgcgo_stream_write_value32(cgc_stream_t stream, uintptr_t address, uint32_t value, unsigned flags,
                                        char** msg);
cgc_status_t cgcgo_stream_write_value64(cgc_stream_t stream, uintptr_t address, uint64_t value, unsigned flags,
                                        char** msg);
cgc_status_t cgcgo_stream_wait_value32(cgc_stream_t stream, uintptr_t address, uint32_t value, unsigned flags,
                                       char** msg);
cgc_status_t cgcgo_stream_wait_value64(cgc_stream_t stream, uintptr_t address, uint64_t value, unsigned flags,
                                       char** msg);
/* `ops` is the Go slice of MemOp, whose layout is cgc_mem_op_t's (memops.go checks it at compile
 * time); void* because Go's MemOp keeps the address as a number, not a pointer. */
cgc_status_t cgcgo_stream_batch_mem_op(cgc_stream_t stream, const void* ops, size_t count, char** msg);

cgc_status_t cgcgo_module_load(cgc_context_t ctx, const void* image, cgc_module_t* out, char** msg);
cgc_status_t cgcgo_module_unload(cgc_module_t module, char** msg);
cgc_status_t cgcgo_module_get_function(cgc_module_t module, const char* name, cgc_function_t* out, char** msg);
cgc_status_t cgcgo_function_get_attribute(cgc_function_t function, int attribute, int* value, char** msg);
cgc_status_t cgcgo_function_set_attribute(cgc_function_t function, int attribute, int value, char** msg);
/* `slots` holds `count` 8-byte slots (C memory), one per kernel parameter with its value at the
 * start; the shim builds the array of pointers to them that cgc_launch_kernel takes. */
cgc_status_t cgcgo_launch_kernel(cgc_function_t function, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                 uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                                 cgc_stream_t stream, void* slots, size_t count, char** msg);
enum { CGCGO_KERNEL_SLOT_BYTES = 8 };

/* ---- 1.2: graphs that change without recapture ---- */

cgc_status_t cgcgo_graph_kernel_node_set_enabled(cgc_graph_t graph, size_t kernel_index, int enabled, char** msg);
/* `slots` as for cgcgo_launch_kernel (NULL when count is 0: the shim still passes an array). */
cgc_status_t cgcgo_graph_kernel_node_set_args(cgc_graph_t graph, size_t kernel_index, void* slots, size_t count,
                                              char** msg);
/* The condition is a device address, so a uintptr_t as other device addresses; *body is lent by
 * the library until cgcgo_capture_conditional_end. */
cgc_status_t cgcgo_capture_conditional_begin(cgc_stream_t stream, int kind, uintptr_t condition, cgc_stream_t* body,
                                             char** msg);
cgc_status_t cgcgo_capture_conditional_end(cgc_stream_t body, char** msg);

/* ---- 1.3: conditional nodes with several bodies ---- */

/* `bodies` has room for n_bodies handles (Go memory: the library writes C handles there, never
 * Go pointers); *handle is the node's conditional handle, a number the caller's kernels take. */
cgc_status_t cgcgo_capture_conditional_begin_bodies(cgc_stream_t stream, int kind, uintptr_t condition, unsigned flags,
                                                    size_t n_bodies, cgc_stream_t* bodies, uint64_t* handle,
                                                    char** msg);

/* ---- 1.4: captures cgc did not begin allocating from a pool ---- */

/* Native streams are numbers, as for cgcgo_stream_wrap. */
cgc_status_t cgcgo_pool_adopt_capture(cgc_pool_t pool, uintptr_t native_stream, char** msg);
cgc_status_t cgcgo_pool_end_adopted_capture(cgc_pool_t pool, char** msg);
cgc_status_t cgcgo_record_stream_native(uintptr_t ptr, uintptr_t native_stream, char** msg);

/* ---- 1.5: pools of memory registered with a communicator, eager allocation from a pool ---- */

/* Kinds cross as int (cgc_nccl_memory_t is int-sized); *got is written only on success. */
cgc_status_t cgcgo_nccl_pool_create(cgc_comm_t comm, size_t capacity, int wanted, cgc_pool_t* out, int* got,
                                    char** msg);
cgc_status_t cgcgo_pool_malloc(cgc_pool_t pool, size_t size, cgc_stream_t stream, uintptr_t* out, char** msg);

/* ---- 1.6: the status that goes with cgc_last_error(), of the calling OS thread; a pool's free
 * memory claimed at a given address; a pool at fixed addresses; the device's segments and
 * blocks ---- */

cgc_status_t cgcgo_last_status(void);
/* The address crosses as a number, as for cgcgo_free. */
cgc_status_t cgcgo_pool_claim(cgc_pool_t pool, uintptr_t ptr, size_t size, char** msg);
/* The base crosses as a number too: an address to reserve, never dereferenced. */
cgc_status_t cgcgo_pool_create_at(cgc_context_t ctx, uintptr_t base, size_t capacity, cgc_pool_t* out, char** msg);
/* cgc_segment_info_t and cgc_block_info_t with their addresses and pool handles as numbers, so
 * that the Go side can pass arrays of its own memory (no pointer-typed fields for Go's garbage
 * collector to see). cgcgo_memory_snapshot asks for the totals when both capacities are 0;
 * otherwise it calls cgc_memory_snapshot with arrays of its own of those capacities and, when the
 * totals fit, copies them into `segments` and `blocks`. */
typedef struct cgcgo_segment {
  uintptr_t address;
  size_t size;
  size_t allocated_bytes;
  uintptr_t pool;
  uint64_t stream_id;
  int small;
  size_t first_block;
  size_t n_blocks;
} cgcgo_segment_t;
typedef struct cgcgo_block {
  uintptr_t address;
  size_t size;
  size_t requested;
  int state;
} cgcgo_block_t;
cgc_status_t cgcgo_memory_snapshot(cgc_context_t ctx, cgcgo_segment_t* segments, size_t max_segments,
                                   cgcgo_block_t* blocks, size_t max_blocks, size_t* n_segments, size_t* n_blocks,
                                   char** msg);

/* ---- 1.6: saved graphs ---- */

/* The option structs are built here, so that the Go side hands C no struct holding pointers:
 * `graphs` and `pools` are arrays of handles in Go memory (handles are C pointers, so the memory
 * holds no Go pointer), `buffer` and `data` Go byte slices. cgcgo_graphs_save with buffer NULL
 * and capacity 0 sets *size alone; *size is the bytes needed also when the capacity is too
 * small (save options: `flags`, CGC_SAVE_VERIFY or 0). cgcgo_saved_info sets info->struct_size
 * itself. cgcgo_graphs_restore's arrays receive n_graphs graphs and n_pools pools (restore
 * options: `flags`, e.g. CGC_RESTORE_FAMILIES, and `threads`, 0 for cgc's choice), and
 * `generators`, when not NULL, the n_generators generators the graphs draw from (an array of
 * handles in Go memory too; NULL with 0 leaves them to the graphs). */
cgc_status_t cgcgo_graphs_save(const cgc_graph_t* graphs, size_t n_graphs, const cgc_pool_t* pools, size_t n_pools,
                               unsigned flags, void* buffer, size_t capacity, size_t* size, char** msg);
cgc_status_t cgcgo_saved_info(const void* data, size_t size, cgc_saved_info_t* info, char** msg);
cgc_status_t cgcgo_graphs_restore(cgc_context_t ctx, const void* data, size_t size, unsigned flags, unsigned threads,
                                  cgc_rng_t* generators, size_t n_generators, cgc_graph_t* graphs, size_t n_graphs,
                                  cgc_pool_t* pools, size_t n_pools, char** msg);
cgc_status_t cgcgo_module_add_image(cgc_context_t ctx, const char* key, const void* image, size_t size, char** msg);

/* ---- 1.6: families ---- */

cgc_status_t cgcgo_graph_share_executable(cgc_graph_t graph, cgc_graph_t leader, char** msg);

/* ---- 1.6: the record of module images ---- */

/* *images and *bytes (size_t in Go memory) receive what the record holds after the call, also
 * when it fails. */
cgc_status_t cgcgo_module_record(int on, size_t* images, size_t* bytes, char** msg);

#endif /* CGCGO_SHIM_H_ */
