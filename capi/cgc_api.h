/* cgc_api.h: the function table of libcgc.so.1, and the lists that describe its ABI.
 *
 * capi/cgc.h includes this file: a program that links libcgc.so.1 needs nothing here. A program
 * that dlopens the library resolves one symbol, cgc_get_api, and calls everything through the
 * table:
 *   const cgc_api_t* api;
 *   get_api(CGC_VERSION, &api);            (get_api = dlsym(lib, "cgc_get_api"))
 *   api->cgc_graph_launch(graph, stream);
 * The table is append-only: a minor version adds fields at the end, never moves or removes one.
 * struct_size tells the caller how much of it this library has (an older library's table is a
 * prefix of a newer header's struct).
 *
 * The lists below are the ABI as data, X-macro lists for the tools that describe it
 * (tools/abi_describe.c prints them; tools/abi/abi-<version>.txt records each release; the
 * bindings check their own declarations against that description). Each repeats what cgc.h
 * declares, and the library's build checks that they agree (src/api.c): every table entry has the
 * type of its prototype in cgc.h, every status its enumerator's value, every struct field list the
 * struct's layout. */
#ifndef CGC_API_H_
#define CGC_API_H_

#include "cgc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every function but cgc_get_api, in the table's order (the ABI: entries are only appended),
 * X(return type, name, (parameters)). */
#define CGC_API_FUNCTIONS(X)                                                                                         \
  /* 1.0: the original contract */                                                                                    \
  X(uint32_t, cgc_version, (void))                                                                                    \
  X(const char*, cgc_status_string, (cgc_status_t status))                                                            \
  X(const char*, cgc_last_error, (void))                                                                              \
  X(cgc_status_t, cgc_device_count, (int* count))                                                                     \
  X(cgc_status_t, cgc_context_create, (int device, cgc_context_t* out))                                               \
  X(cgc_status_t, cgc_context_destroy, (cgc_context_t ctx))                                                           \
  X(cgc_status_t, cgc_context_synchronize, (cgc_context_t ctx))                                                       \
  X(cgc_status_t, cgc_stream_create, (cgc_context_t ctx, unsigned flags, int priority, cgc_stream_t* out))            \
  X(cgc_status_t, cgc_stream_wrap, (cgc_context_t ctx, void* native_stream, cgc_stream_t* out))                       \
  X(void*, cgc_stream_native, (cgc_stream_t stream))                                                                  \
  X(cgc_status_t, cgc_stream_destroy, (cgc_stream_t stream))                                                          \
  X(cgc_status_t, cgc_stream_synchronize, (cgc_stream_t stream))                                                      \
  X(cgc_status_t, cgc_stream_query, (cgc_stream_t stream, int* complete))                                             \
  X(cgc_status_t, cgc_stream_wait_event, (cgc_stream_t stream, cgc_event_t event))                                    \
  X(cgc_status_t, cgc_event_create, (cgc_context_t ctx, unsigned flags, cgc_event_t* out))                            \
  X(cgc_status_t, cgc_event_destroy, (cgc_event_t event))                                                             \
  X(cgc_status_t, cgc_event_record, (cgc_event_t event, cgc_stream_t stream))                                         \
  X(cgc_status_t, cgc_event_synchronize, (cgc_event_t event))                                                         \
  X(cgc_status_t, cgc_event_query, (cgc_event_t event, int* complete))                                                \
  X(cgc_status_t, cgc_event_elapsed_ms, (cgc_event_t start, cgc_event_t end, float* ms))                              \
  X(cgc_status_t, cgc_capture_begin, (cgc_stream_t stream, const cgc_capture_options_t* options))                     \
  X(cgc_status_t, cgc_capture_end, (cgc_stream_t stream, cgc_graph_t* out))                                           \
  X(cgc_status_t, cgc_capture,                                                                                        \
    (cgc_stream_t stream, const cgc_capture_options_t* options, cgc_capture_fn body, void* user, cgc_graph_t* out))   \
  X(cgc_status_t, cgc_stream_capture_status,                                                                          \
    (cgc_stream_t stream, cgc_capture_status_t* status, uint64_t* capture_id))                                        \
  X(cgc_status_t, cgc_capture_mode_exchange, (cgc_capture_mode_t* mode))                                              \
  X(cgc_status_t, cgc_graph_launch, (cgc_graph_t graph, cgc_stream_t stream))                                         \
  X(cgc_status_t, cgc_graph_upload, (cgc_graph_t graph, cgc_stream_t stream))                                         \
  X(cgc_status_t, cgc_graph_info, (cgc_graph_t graph, cgc_graph_info_t* info))                                        \
  X(cgc_status_t, cgc_graph_pool, (cgc_graph_t graph, cgc_pool_t* pool))                                              \
  X(cgc_status_t, cgc_graph_debug_dump, (cgc_graph_t graph, const char* dot_path))                                    \
  X(cgc_status_t, cgc_graph_reset, (cgc_graph_t graph))                                                               \
  X(cgc_status_t, cgc_graph_destroy, (cgc_graph_t graph))                                                             \
  X(void*, cgc_graph_native, (cgc_graph_t graph))                                                                     \
  X(void*, cgc_graph_native_exec, (cgc_graph_t graph))                                                                \
  X(cgc_status_t, cgc_pool_create, (cgc_context_t ctx, cgc_pool_t* out))                                              \
  X(cgc_status_t, cgc_pool_retain, (cgc_pool_t pool))                                                                 \
  X(cgc_status_t, cgc_pool_release, (cgc_pool_t pool))                                                                \
  X(cgc_status_t, cgc_malloc, (cgc_context_t ctx, size_t size, cgc_stream_t stream, void** out))                      \
  X(cgc_status_t, cgc_free, (void* ptr))                                                                              \
  X(cgc_status_t, cgc_record_stream, (void* ptr, cgc_stream_t stream))                                                \
  X(cgc_status_t, cgc_empty_cache, (cgc_context_t ctx))                                                               \
  X(cgc_status_t, cgc_memory_stats, (cgc_context_t ctx, cgc_pool_t pool, cgc_memory_stats_t* stats))                  \
  X(void*, cgc_torch_malloc, (ssize_t size, int device, void* stream))                                                \
  X(void, cgc_torch_free, (void* ptr, ssize_t size, int device, void* stream))                                        \
  X(cgc_status_t, cgc_nccl_version, (int* version))                                                                   \
  X(cgc_status_t, cgc_comm_unique_id, (cgc_comm_id_t* id))                                                            \
  X(cgc_status_t, cgc_comm_create,                                                                                    \
    (cgc_context_t ctx, int nranks, const cgc_comm_id_t* id, int rank, cgc_comm_t* out))                              \
  X(cgc_status_t, cgc_comm_destroy, (cgc_comm_t comm))                                                                \
  X(cgc_status_t, cgc_comm_abort, (cgc_comm_t comm))                                                                  \
  X(cgc_status_t, cgc_all_reduce,                                                                                     \
    (cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype, cgc_reduce_op_t op,              \
     cgc_stream_t stream))                                                                                            \
  X(cgc_status_t, cgc_all_gather,                                                                                     \
    (cgc_comm_t comm, const void* send, void* recv, size_t send_count, cgc_dtype_t dtype, cgc_stream_t stream))       \
  X(cgc_status_t, cgc_reduce_scatter,                                                                                 \
    (cgc_comm_t comm, const void* send, void* recv, size_t recv_count, cgc_dtype_t dtype, cgc_reduce_op_t op,         \
     cgc_stream_t stream))                                                                                            \
  X(cgc_status_t, cgc_broadcast,                                                                                      \
    (cgc_comm_t comm, const void* send, void* recv, size_t count, cgc_dtype_t dtype, int root, cgc_stream_t stream))  \
  X(cgc_status_t, cgc_send,                                                                                           \
    (cgc_comm_t comm, const void* buf, size_t count, cgc_dtype_t dtype, int peer, cgc_stream_t stream))               \
  X(cgc_status_t, cgc_recv,                                                                                           \
    (cgc_comm_t comm, void* buf, size_t count, cgc_dtype_t dtype, int peer, cgc_stream_t stream))                     \
  X(cgc_status_t, cgc_group_start, (void))                                                                            \
  X(cgc_status_t, cgc_group_end, (void))                                                                              \
  X(cgc_status_t, cgc_rng_create, (cgc_context_t ctx, uint64_t seed, cgc_rng_t* out))                                 \
  X(cgc_status_t, cgc_rng_destroy, (cgc_rng_t rng))                                                                   \
  X(cgc_status_t, cgc_rng_uniform, (cgc_rng_t rng, float* out, size_t n, cgc_stream_t stream))                        \
  X(cgc_status_t, cgc_rng_normal,                                                                                     \
    (cgc_rng_t rng, float* out, size_t n, float mean, float stddev, cgc_stream_t stream))                             \
  X(cgc_status_t, cgc_rng_get_state, (cgc_rng_t rng, uint64_t* seed, uint64_t* offset))                               \
  X(cgc_status_t, cgc_rng_set_state, (cgc_rng_t rng, uint64_t seed, uint64_t offset))                                 \
  /* since 1.1 */                                                                                                     \
  X(cgc_status_t, cgc_stream_priority_range, (cgc_context_t ctx, int* least, int* greatest))                          \
  X(cgc_status_t, cgc_stream_priority, (cgc_stream_t stream, int* priority))                                          \
  X(cgc_status_t, cgc_stream_id, (cgc_stream_t stream, uint64_t* id))                                                 \
  X(cgc_status_t, cgc_stream_device, (cgc_stream_t stream, int* device, void** native_context))                       \
  X(cgc_status_t, cgc_stream_copy_attributes, (cgc_stream_t dst, cgc_stream_t src))                                   \
  X(cgc_status_t, cgc_stream_set_access_policy, (cgc_stream_t stream, const cgc_access_policy_t* policy))             \
  X(cgc_status_t, cgc_stream_get_access_policy, (cgc_stream_t stream, cgc_access_policy_t* policy))                   \
  X(cgc_status_t, cgc_host_alloc, (cgc_context_t ctx, size_t bytes, unsigned flags, void** out))                      \
  X(cgc_status_t, cgc_host_free, (void* ptr))                                                                         \
  X(cgc_status_t, cgc_host_register, (cgc_context_t ctx, void* ptr, size_t bytes, unsigned flags))                    \
  X(cgc_status_t, cgc_host_unregister, (void* ptr))                                                                   \
  X(cgc_status_t, cgc_memcpy_htod_async, (void* dst, const void* src, size_t bytes, cgc_stream_t stream))             \
  X(cgc_status_t, cgc_memcpy_dtoh_async, (void* dst, const void* src, size_t bytes, cgc_stream_t stream))             \
  X(cgc_status_t, cgc_memcpy_dtod_async, (void* dst, const void* src, size_t bytes, cgc_stream_t stream))             \
  X(cgc_status_t, cgc_memset_d8_async, (void* dst, uint8_t value, size_t count, cgc_stream_t stream))                 \
  X(cgc_status_t, cgc_memset_d16_async, (void* dst, uint16_t value, size_t count, cgc_stream_t stream))               \
  X(cgc_status_t, cgc_memset_d32_async, (void* dst, uint32_t value, size_t count, cgc_stream_t stream))               \
  X(cgc_status_t, cgc_launch_host_func, (cgc_stream_t stream, cgc_host_fn fn, void* user, cgc_host_fn release))       \
  X(cgc_status_t, cgc_stream_write_value32, (cgc_stream_t stream, void* address, uint32_t value, unsigned flags))     \
  X(cgc_status_t, cgc_stream_write_value64, (cgc_stream_t stream, void* address, uint64_t value, unsigned flags))     \
  X(cgc_status_t, cgc_stream_wait_value32, (cgc_stream_t stream, void* address, uint32_t value, unsigned flags))      \
  X(cgc_status_t, cgc_stream_wait_value64, (cgc_stream_t stream, void* address, uint64_t value, unsigned flags))      \
  X(cgc_status_t, cgc_stream_batch_mem_op, (cgc_stream_t stream, const cgc_mem_op_t* ops, size_t count))              \
  X(cgc_status_t, cgc_module_load, (cgc_context_t ctx, const void* image, cgc_module_t* out))                         \
  X(cgc_status_t, cgc_module_unload, (cgc_module_t module))                                                           \
  X(cgc_status_t, cgc_module_get_function, (cgc_module_t module, const char* name, cgc_function_t* out))              \
  X(cgc_status_t, cgc_function_get_attribute,                                                                         \
    (cgc_function_t function, cgc_function_attribute_t attribute, int* value))                                        \
  X(cgc_status_t, cgc_function_set_attribute,                                                                         \
    (cgc_function_t function, cgc_function_attribute_t attribute, int value))                                         \
  X(cgc_status_t, cgc_launch_kernel,                                                                                  \
    (cgc_function_t function, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z, uint32_t block_x,                    \
     uint32_t block_y, uint32_t block_z, uint32_t shared_bytes, cgc_stream_t stream, void** args))                    \
  /* since 1.2 */                                                                                                     \
  X(cgc_status_t, cgc_graph_kernel_node_set_enabled, (cgc_graph_t graph, size_t kernel_index, int enabled))           \
  X(cgc_status_t, cgc_graph_kernel_node_set_args, (cgc_graph_t graph, size_t kernel_index, void** args))              \
  X(cgc_status_t, cgc_capture_conditional_begin,                                                                      \
    (cgc_stream_t stream, cgc_conditional_kind_t kind, const uint32_t* condition, cgc_stream_t* body))                \
  X(cgc_status_t, cgc_capture_conditional_end, (cgc_stream_t body))                                                   \
  /* since 1.3 */                                                                                                     \
  X(cgc_status_t, cgc_capture_conditional_begin_bodies,                                                               \
    (cgc_stream_t stream, cgc_conditional_kind_t kind, const uint32_t* condition, unsigned flags,                     \
     size_t n_bodies, cgc_stream_t* bodies, uint64_t* handle))                                                        \
  /* since 1.4 */                                                                                                     \
  X(cgc_status_t, cgc_pool_adopt_capture, (cgc_pool_t pool, void* native_stream))                                     \
  X(cgc_status_t, cgc_pool_end_adopted_capture, (cgc_pool_t pool))                                                    \
  X(cgc_status_t, cgc_record_stream_native, (void* ptr, void* native_stream))                                         \
  /* since 1.5 */                                                                                                     \
  X(cgc_status_t, cgc_nccl_pool_create,                                                                               \
    (cgc_comm_t comm, size_t capacity, cgc_nccl_memory_t wanted, cgc_pool_t* out, cgc_nccl_memory_t* got))            \
  X(cgc_status_t, cgc_pool_malloc, (cgc_pool_t pool, size_t size, cgc_stream_t stream, void** out))                   \
  /* since 1.6 */                                                                                                     \
  X(cgc_status_t, cgc_last_status, (void))                                                                            \
  X(cgc_status_t, cgc_memory_snapshot,                                                                                \
    (cgc_context_t ctx, cgc_segment_info_t* segments, size_t max_segments, cgc_block_info_t* blocks,                  \
     size_t max_blocks, size_t* n_segments, size_t* n_blocks))                                                        \
  X(cgc_status_t, cgc_pool_claim, (cgc_pool_t pool, void* ptr, size_t size))                                          \
  X(cgc_status_t, cgc_pool_create_at, (cgc_context_t ctx, void* base, size_t capacity, cgc_pool_t* out))                \
  X(cgc_status_t, cgc_graphs_save,                                                                                    \
    (const cgc_graph_t* graphs, size_t n_graphs, const cgc_save_options_t* options, void* buffer, size_t capacity,    \
     size_t* size))                                                                                                   \
  X(cgc_status_t, cgc_saved_info, (const void* data, size_t size, cgc_saved_info_t* info))                            \
  X(cgc_status_t, cgc_graphs_restore,                                                                                 \
    (cgc_context_t ctx, const void* data, size_t size, const cgc_restore_options_t* options, cgc_graph_t* graphs,     \
     size_t n_graphs, cgc_pool_t* pools, size_t n_pools))                                                             \
  X(cgc_status_t, cgc_module_add_image, (cgc_context_t ctx, const char* key, const void* image, size_t size))         \
  X(cgc_status_t, cgc_graph_share_executable, (cgc_graph_t graph, cgc_graph_t leader))                               \
  X(cgc_status_t, cgc_module_record, (int on, size_t* images, size_t* bytes))                                         \

#define CGC_API_FIELD_(ret, name, params) ret(*name) params;
typedef struct cgc_api {
  size_t struct_size; /* sizeof(cgc_api_t) of the library that filled it */
  CGC_API_FUNCTIONS(CGC_API_FIELD_)
} cgc_api_t;
#undef CGC_API_FIELD_

/* The function table for `version` (pass CGC_VERSION) into *out. CGC_ERROR_NOT_SUPPORTED for
 * another major version or a newer minor version than this library's; an older minor version gets
 * the table (read struct_size before using fields it may not have). The table is static: never
 * freed. */
CGC_API cgc_status_t cgc_get_api(uint32_t version, const cgc_api_t** out);

/* Every status code, X(name, value, what it means): cgc_status_string's texts. */
#define CGC_STATUS_LIST(X)                                                                                            \
  X(CGC_SUCCESS, 0, "no error")                                                                                       \
  X(CGC_ERROR_INVALID_ARGUMENT, 1, "an argument is NULL, out of range or inconsistent")                               \
  X(CGC_ERROR_INVALID_HANDLE, 2, "the handle was destroyed or is of another kind")                                    \
  X(CGC_ERROR_INVALID_STATE, 3, "the object is not in a state that allows this call")                                 \
  X(CGC_ERROR_NO_DRIVER, 4, "the CUDA driver (libcuda.so.1) could not be loaded")                                     \
  X(CGC_ERROR_NO_DEVICE, 5, "no usable CUDA device")                                                                  \
  X(CGC_ERROR_OUT_OF_MEMORY, 6, "the device is out of memory")                                                        \
  X(CGC_ERROR_CAPTURE_UNSUPPORTED, 7, "the call is not allowed while a capture is under way")                         \
  X(CGC_ERROR_CAPTURE_INVALIDATED, 8, "the capture was invalidated by an earlier call")                               \
  X(CGC_ERROR_CAPTURE_UNJOINED, 9, "a stream forked into the capture was not joined back")                            \
  X(CGC_ERROR_CAPTURE_LEGACY_STREAM, 10, "graphs cannot be captured on the legacy default stream")                    \
  X(CGC_ERROR_NCCL_UNAVAILABLE, 11, "NCCL (libnccl.so.2 >= 2.9.6) could not be loaded")                               \
  X(CGC_ERROR_NCCL, 12, "an NCCL call failed")                                                                        \
  X(CGC_ERROR_CUDA, 13, "a CUDA driver call failed")                                                                  \
  X(CGC_ERROR_NOT_SUPPORTED, 14, "the driver or device is too old for the request")                                   \
  X(CGC_ERROR_INTERNAL, 15, "an internal error in cgc")                                                              \
  X(CGC_ERROR_NOT_SAVABLE, 16, "a graph holds what a saved file cannot rebuild")                                      \
  X(CGC_ERROR_SAVED_MISMATCH, 17, "a saved file this process cannot restore")

/* Every public struct's fields in order, X(type, name, array suffix), and the list of structs,
 * X(type, its field list). */
#define CGC_CAPTURE_OPTIONS_FIELDS(X)                                                                                 \
  X(size_t, struct_size, )                                                                                            \
  X(cgc_capture_mode_t, mode, )                                                                                       \
  X(cgc_pool_t, pool, )                                                                                               \
  X(unsigned, flags, )                                                                                                \
  X(cgc_graph_t, update, )
#define CGC_GRAPH_INFO_FIELDS(X)                                                                                      \
  X(size_t, struct_size, )                                                                                            \
  X(size_t, node_count, )                                                                                             \
  X(uint64_t, replay_count, )                                                                                         \
  X(int, uploaded, )                                                                                                  \
  X(size_t, pool_bytes_reserved, )                                                                                    \
  X(size_t, kernel_nodes, )                                                                                           \
  X(size_t, memcpy_nodes, )                                                                                           \
  X(size_t, memset_nodes, )                                                                                           \
  X(size_t, host_nodes, )                                                                                             \
  X(size_t, child_graph_nodes, )                                                                                      \
  X(size_t, empty_nodes, )                                                                                            \
  X(size_t, event_wait_nodes, )                                                                                       \
  X(size_t, event_record_nodes, )                                                                                     \
  X(size_t, mem_alloc_nodes, )                                                                                        \
  X(size_t, mem_free_nodes, )                                                                                         \
  X(size_t, mem_op_nodes, )                                                                                           \
  X(size_t, conditional_nodes, )                                                                                      \
  X(size_t, other_nodes, )                                                                                            \
  X(uint64_t, update_count, )                                                                                         \
  X(cgc_graph_update_t, last_update, )                                                                                \
  X(int, last_update_result, )                                                                                       \
  X(size_t, family_size, )                                                                                            \
  X(int, family_result, )
#define CGC_MEMORY_STATS_FIELDS(X)                                                                                    \
  X(size_t, struct_size, )                                                                                            \
  X(size_t, bytes_reserved, )                                                                                         \
  X(size_t, bytes_allocated, )                                                                                        \
  X(size_t, peak_bytes_allocated, )                                                                                   \
  X(size_t, peak_bytes_reserved, )                                                                                    \
  X(uint64_t, num_driver_allocs, )                                                                                    \
  X(uint64_t, num_driver_frees, )
#define CGC_COMM_ID_FIELDS(X)                                                                                         \
  X(char, internal, [128])
#define CGC_ACCESS_POLICY_FIELDS(X)                                                                                   \
  X(size_t, struct_size, )                                                                                            \
  X(void*, base, )                                                                                                    \
  X(size_t, bytes, )                                                                                                  \
  X(float, hit_ratio, )                                                                                               \
  X(cgc_access_property_t, hit_property, )                                                                            \
  X(cgc_access_property_t, miss_property, )
#define CGC_MEM_OP_FIELDS(X)                                                                                          \
  X(cgc_mem_op_kind_t, kind, )                                                                                        \
  X(unsigned, flags, )                                                                                                \
  X(void*, address, )                                                                                                 \
  X(uint64_t, value, )
#define CGC_SEGMENT_INFO_FIELDS(X)                                                                                    \
  X(void*, address, )                                                                                                 \
  X(size_t, size, )                                                                                                   \
  X(size_t, allocated_bytes, )                                                                                        \
  X(cgc_pool_t, pool, )                                                                                               \
  X(uint64_t, stream_id, )                                                                                            \
  X(int, small, )                                                                                                     \
  X(size_t, first_block, )                                                                                            \
  X(size_t, n_blocks, )
#define CGC_BLOCK_INFO_FIELDS(X)                                                                                      \
  X(void*, address, )                                                                                                 \
  X(size_t, size, )                                                                                                   \
  X(size_t, requested, )                                                                                              \
  X(cgc_block_state_t, state, )
#define CGC_SAVE_OPTIONS_FIELDS(X)                                                                                    \
  X(size_t, struct_size, )                                                                                            \
  X(const cgc_pool_t*, pools, )                                                                                       \
  X(size_t, n_pools, )                                                                                                \
  X(unsigned, flags, )
#define CGC_SAVED_INFO_FIELDS(X)                                                                                      \
  X(size_t, struct_size, )                                                                                            \
  X(uint32_t, format_version, )                                                                                       \
  X(int, compute_major, )                                                                                             \
  X(int, compute_minor, )                                                                                             \
  X(int, driver_version, )                                                                                            \
  X(size_t, n_graphs, )                                                                                               \
  X(size_t, n_pools, )                                                                                                \
  X(size_t, n_modules, )                                                                                              \
  X(size_t, n_nodes, )                                                                                                \
  X(size_t, pool_bytes, )                                                                                             \
  X(size_t, image_bytes, )                                                                                            \
  X(size_t, restore_bytes, )                                                                                          \
  X(size_t, family_restore_bytes, )                                                                                   \
  X(size_t, n_generators, )
#define CGC_RESTORE_OPTIONS_FIELDS(X)                                                                                 \
  X(size_t, struct_size, )                                                                                            \
  X(unsigned, flags, )                                                                                                \
  X(unsigned, threads, )                                                                                              \
  X(cgc_rng_t*, generators, )                                                                                         \
  X(size_t, n_generators, )
#define CGC_STRUCTS(X)                                                                                                \
  X(cgc_capture_options_t, CGC_CAPTURE_OPTIONS_FIELDS)                                                                \
  X(cgc_graph_info_t, CGC_GRAPH_INFO_FIELDS)                                                                          \
  X(cgc_memory_stats_t, CGC_MEMORY_STATS_FIELDS)                                                                      \
  X(cgc_comm_id_t, CGC_COMM_ID_FIELDS)                                                                                \
  X(cgc_access_policy_t, CGC_ACCESS_POLICY_FIELDS)                                                                    \
  X(cgc_mem_op_t, CGC_MEM_OP_FIELDS)                                                                                  \
  X(cgc_segment_info_t, CGC_SEGMENT_INFO_FIELDS)                                                                      \
  X(cgc_block_info_t, CGC_BLOCK_INFO_FIELDS)                                                                          \
  X(cgc_save_options_t, CGC_SAVE_OPTIONS_FIELDS)                                                                      \
  X(cgc_saved_info_t, CGC_SAVED_INFO_FIELDS)                                                                          \
  X(cgc_restore_options_t, CGC_RESTORE_OPTIONS_FIELDS)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CGC_API_H_ */
