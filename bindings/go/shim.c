/* See shim.h for why these exist. Each shim is one call through the table plus, on failure, a
 * copy of cgc_last_error() taken on the same thread before any other cgc call can replace it. */
#define _GNU_SOURCE /* strdup, dlerror under -std=c11 */
#include "shim.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* cgo's declarations of the Go functions the package exports (hostfunc.go), for the host
 * function trampolines below. */
#include "_cgo_export.h"

/* Set once by cgcgo_load (the Go side serialises it with sync.Once and calls nothing else
 * before it succeeds); read-only afterwards, so no further synchronisation is needed. */
static const cgc_api_t* api;

static char* format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return strdup(buf);
}

int cgcgo_load(const char* path, char** msg) {
  /* RTLD_LOCAL: cgc's symbols are reached through the table only, so they need not (and should
   * not) become visible to other libraries of the process. */
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* e = dlerror();
    *msg = format("dlopen failed: %s", e ? e : "unknown error");
    return 1;
  }
  cgc_status_t (*get_api)(uint32_t, const cgc_api_t**) =
      (cgc_status_t(*)(uint32_t, const cgc_api_t**))dlsym(lib, "cgc_get_api");
  if (get_api == NULL) {
    *msg = format("it has no symbol cgc_get_api, so it is not libcgc (or is older than 1.0)");
    dlclose(lib);
    return 1;
  }
  const cgc_api_t* table = NULL;
  cgc_status_t st = get_api(CGC_VERSION, &table);
  if (st != CGC_SUCCESS || table == NULL) {
    *msg = format("cgc_get_api(%u.%u.%u) refused with status %d: the library is older than this binding's "
                  "header (capi/cgc.h) or of another major version",
                  (unsigned)CGC_VERSION_MAJOR, (unsigned)CGC_VERSION_MINOR, (unsigned)CGC_VERSION_PATCH, (int)st);
    dlclose(lib);
    return 1;
  }
  /* The binding calls every entry of its header's table, so the library's must be at least as
   * long (an older minor version's table is a shorter prefix). */
  if (table->struct_size < sizeof(cgc_api_t)) {
    *msg = format("its function table has %zu bytes, this binding needs %zu (library older than the header)",
                  table->struct_size, sizeof(cgc_api_t));
    dlclose(lib);
    return 1;
  }
  uint32_t v = table->cgc_version();
  if ((v >> 16) != CGC_VERSION_MAJOR) {
    *msg = format("it is version %u.%u.%u; this binding needs major version %u", v >> 16, (v >> 8) & 0xffu,
                  v & 0xffu, (unsigned)CGC_VERSION_MAJOR);
    dlclose(lib);
    return 1;
  }
  api = table; /* the library stays loaded for the life of the process */
  return 0;
}

static void take_error(char** msg) {
  const char* m = api->cgc_last_error();
  *msg = strdup(m != NULL ? m : "");
}

#define CALL(expr)                                      \
  do {                                                  \
    cgc_status_t st_ = (expr);                          \
    if (st_ != CGC_SUCCESS && msg != NULL) take_error(msg); \
    return st_;                                         \
  } while (0)

uint32_t cgcgo_version(void) { return api->cgc_version(); }
const char* cgcgo_status_string(int status) { return api->cgc_status_string((cgc_status_t)status); }

const char* cgcgo_status_name(int status) {
  switch (status) {
#define CGCGO_STATUS_NAME_CASE_(name, value, text) \
  case value:                                      \
    return #name;
    CGC_STATUS_LIST(CGCGO_STATUS_NAME_CASE_)
#undef CGCGO_STATUS_NAME_CASE_
  }
  return NULL;
}

cgc_status_t cgcgo_device_count(int* count, char** msg) { CALL(api->cgc_device_count(count)); }
cgc_status_t cgcgo_context_create(int device, cgc_context_t* out, char** msg) {
  CALL(api->cgc_context_create(device, out));
}
cgc_status_t cgcgo_context_destroy(cgc_context_t ctx, char** msg) { CALL(api->cgc_context_destroy(ctx)); }
cgc_status_t cgcgo_context_synchronize(cgc_context_t ctx, char** msg) { CALL(api->cgc_context_synchronize(ctx)); }

cgc_status_t cgcgo_stream_create(cgc_context_t ctx, unsigned flags, int priority, cgc_stream_t* out, char** msg) {
  CALL(api->cgc_stream_create(ctx, flags, priority, out));
}
cgc_status_t cgcgo_stream_wrap(cgc_context_t ctx, uintptr_t native, cgc_stream_t* out, char** msg) {
  CALL(api->cgc_stream_wrap(ctx, (void*)native, out));
}
uintptr_t cgcgo_stream_native(cgc_stream_t stream) { return (uintptr_t)api->cgc_stream_native(stream); }
cgc_status_t cgcgo_stream_destroy(cgc_stream_t stream, char** msg) { CALL(api->cgc_stream_destroy(stream)); }
cgc_status_t cgcgo_stream_synchronize(cgc_stream_t stream, char** msg) { CALL(api->cgc_stream_synchronize(stream)); }
cgc_status_t cgcgo_stream_query(cgc_stream_t stream, int* complete, char** msg) {
  CALL(api->cgc_stream_query(stream, complete));
}
cgc_status_t cgcgo_stream_wait_event(cgc_stream_t stream, cgc_event_t event, char** msg) {
  CALL(api->cgc_stream_wait_event(stream, event));
}

cgc_status_t cgcgo_event_create(cgc_context_t ctx, unsigned flags, cgc_event_t* out, char** msg) {
  CALL(api->cgc_event_create(ctx, flags, out));
}
cgc_status_t cgcgo_event_destroy(cgc_event_t event, char** msg) { CALL(api->cgc_event_destroy(event)); }
cgc_status_t cgcgo_event_record(cgc_event_t event, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_event_record(event, stream));
}
cgc_status_t cgcgo_event_synchronize(cgc_event_t event, char** msg) { CALL(api->cgc_event_synchronize(event)); }
cgc_status_t cgcgo_event_query(cgc_event_t event, int* complete, char** msg) {
  CALL(api->cgc_event_query(event, complete));
}
cgc_status_t cgcgo_event_elapsed_ms(cgc_event_t start, cgc_event_t end, float* ms, char** msg) {
  CALL(api->cgc_event_elapsed_ms(start, end, ms));
}

cgc_status_t cgcgo_capture_begin(cgc_stream_t stream, int mode, cgc_pool_t pool, unsigned flags, cgc_graph_t update,
                                 char** msg) {
  /* Built here rather than in Go so that the Go side never hands C a struct holding pointers. */
  cgc_capture_options_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.mode = (cgc_capture_mode_t)mode;
  o.pool = pool;
  o.flags = flags;
  o.update = update;
  CALL(api->cgc_capture_begin(stream, &o));
}
cgc_status_t cgcgo_capture_end(cgc_stream_t stream, cgc_graph_t* out, char** msg) {
  CALL(api->cgc_capture_end(stream, out));
}
cgc_status_t cgcgo_stream_capture_status(cgc_stream_t stream, int* status, uint64_t* id, char** msg) {
  cgc_capture_status_t s = CGC_CAPTURE_NONE;
  cgc_status_t st = api->cgc_stream_capture_status(stream, &s, id);
  if (st != CGC_SUCCESS) take_error(msg);
  *status = (int)s;
  return st;
}
cgc_status_t cgcgo_capture_mode_exchange(int* mode, char** msg) {
  cgc_capture_mode_t m = (cgc_capture_mode_t)*mode;
  cgc_status_t st = api->cgc_capture_mode_exchange(&m);
  if (st != CGC_SUCCESS) take_error(msg);
  *mode = (int)m;
  return st;
}

cgc_status_t cgcgo_graph_launch(cgc_graph_t graph, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_graph_launch(graph, stream));
}
cgc_status_t cgcgo_graph_upload(cgc_graph_t graph, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_graph_upload(graph, stream));
}
cgc_status_t cgcgo_graph_info(cgc_graph_t graph, cgc_graph_info_t* info, char** msg) {
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  CALL(api->cgc_graph_info(graph, info));
}
/* Lent pool + one reference of ours, in one call: the Go Pool owns that reference, so it stays
 * valid (and comparable) after the graph is reset or destroyed. */
cgc_status_t cgcgo_graph_pool_retained(cgc_graph_t graph, cgc_pool_t* pool, char** msg) {
  cgc_status_t st = api->cgc_graph_pool(graph, pool);
  if (st == CGC_SUCCESS) st = api->cgc_pool_retain(*pool);
  if (st != CGC_SUCCESS) {
    *pool = NULL;
    take_error(msg);
  }
  return st;
}
cgc_status_t cgcgo_graph_debug_dump(cgc_graph_t graph, const char* path, char** msg) {
  CALL(api->cgc_graph_debug_dump(graph, path));
}
cgc_status_t cgcgo_graph_reset(cgc_graph_t graph, char** msg) { CALL(api->cgc_graph_reset(graph)); }
cgc_status_t cgcgo_graph_destroy(cgc_graph_t graph, char** msg) { CALL(api->cgc_graph_destroy(graph)); }
uintptr_t cgcgo_graph_native(cgc_graph_t graph) { return (uintptr_t)api->cgc_graph_native(graph); }
uintptr_t cgcgo_graph_native_exec(cgc_graph_t graph) { return (uintptr_t)api->cgc_graph_native_exec(graph); }

cgc_status_t cgcgo_pool_create(cgc_context_t ctx, cgc_pool_t* out, char** msg) {
  CALL(api->cgc_pool_create(ctx, out));
}
cgc_status_t cgcgo_pool_release(cgc_pool_t pool, char** msg) { CALL(api->cgc_pool_release(pool)); }
cgc_status_t cgcgo_malloc(cgc_context_t ctx, size_t size, cgc_stream_t stream, uintptr_t* out, char** msg) {
  void* p = NULL;
  cgc_status_t st = api->cgc_malloc(ctx, size, stream, &p);
  if (st != CGC_SUCCESS) take_error(msg);
  *out = (uintptr_t)p;
  return st;
}
cgc_status_t cgcgo_free(uintptr_t ptr, char** msg) { CALL(api->cgc_free((void*)ptr)); }
cgc_status_t cgcgo_record_stream(uintptr_t ptr, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_record_stream((void*)ptr, stream));
}
cgc_status_t cgcgo_empty_cache(cgc_context_t ctx, char** msg) { CALL(api->cgc_empty_cache(ctx)); }
cgc_status_t cgcgo_memory_stats(cgc_context_t ctx, cgc_pool_t pool, cgc_memory_stats_t* stats, char** msg) {
  memset(stats, 0, sizeof *stats);
  stats->struct_size = sizeof *stats;
  CALL(api->cgc_memory_stats(ctx, pool, stats));
}

cgc_status_t cgcgo_nccl_version(int* version, char** msg) { CALL(api->cgc_nccl_version(version)); }
cgc_status_t cgcgo_comm_unique_id(cgc_comm_id_t* id, char** msg) { CALL(api->cgc_comm_unique_id(id)); }
cgc_status_t cgcgo_comm_create(cgc_context_t ctx, int nranks, const cgc_comm_id_t* id, int rank, cgc_comm_t* out,
                               char** msg) {
  CALL(api->cgc_comm_create(ctx, nranks, id, rank, out));
}
cgc_status_t cgcgo_comm_destroy(cgc_comm_t comm, char** msg) { CALL(api->cgc_comm_destroy(comm)); }
cgc_status_t cgcgo_comm_abort(cgc_comm_t comm, char** msg) { CALL(api->cgc_comm_abort(comm)); }
cgc_status_t cgcgo_all_reduce(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t count, int dtype, int op,
                              cgc_stream_t stream, char** msg) {
  CALL(api->cgc_all_reduce(comm, (const void*)send, (void*)recv, count, (cgc_dtype_t)dtype, (cgc_reduce_op_t)op,
                           stream));
}
cgc_status_t cgcgo_all_gather(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t send_count, int dtype,
                              cgc_stream_t stream, char** msg) {
  CALL(api->cgc_all_gather(comm, (const void*)send, (void*)recv, send_count, (cgc_dtype_t)dtype, stream));
}
cgc_status_t cgcgo_reduce_scatter(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t recv_count, int dtype,
                                  int op, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_reduce_scatter(comm, (const void*)send, (void*)recv, recv_count, (cgc_dtype_t)dtype,
                               (cgc_reduce_op_t)op, stream));
}
cgc_status_t cgcgo_broadcast(cgc_comm_t comm, uintptr_t send, uintptr_t recv, size_t count, int dtype, int root,
                             cgc_stream_t stream, char** msg) {
  CALL(api->cgc_broadcast(comm, (const void*)send, (void*)recv, count, (cgc_dtype_t)dtype, root, stream));
}
cgc_status_t cgcgo_send(cgc_comm_t comm, uintptr_t buf, size_t count, int dtype, int peer, cgc_stream_t stream,
                        char** msg) {
  CALL(api->cgc_send(comm, (const void*)buf, count, (cgc_dtype_t)dtype, peer, stream));
}
cgc_status_t cgcgo_recv(cgc_comm_t comm, uintptr_t buf, size_t count, int dtype, int peer, cgc_stream_t stream,
                        char** msg) {
  CALL(api->cgc_recv(comm, (void*)buf, count, (cgc_dtype_t)dtype, peer, stream));
}
cgc_status_t cgcgo_group_start(char** msg) { CALL(api->cgc_group_start()); }
cgc_status_t cgcgo_group_end(char** msg) { CALL(api->cgc_group_end()); }

cgc_status_t cgcgo_rng_create(cgc_context_t ctx, uint64_t seed, cgc_rng_t* out, char** msg) {
  CALL(api->cgc_rng_create(ctx, seed, out));
}
cgc_status_t cgcgo_rng_destroy(cgc_rng_t rng, char** msg) { CALL(api->cgc_rng_destroy(rng)); }
cgc_status_t cgcgo_rng_uniform(cgc_rng_t rng, uintptr_t out, size_t n, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_rng_uniform(rng, (float*)out, n, stream));
}
cgc_status_t cgcgo_rng_normal(cgc_rng_t rng, uintptr_t out, size_t n, float mean, float stddev,
                              cgc_stream_t stream, char** msg) {
  CALL(api->cgc_rng_normal(rng, (float*)out, n, mean, stddev, stream));
}
cgc_status_t cgcgo_rng_get_state(cgc_rng_t rng, uint64_t* seed, uint64_t* offset, char** msg) {
  CALL(api->cgc_rng_get_state(rng, seed, offset));
}
cgc_status_t cgcgo_rng_set_state(cgc_rng_t rng, uint64_t seed, uint64_t offset, char** msg) {
  CALL(api->cgc_rng_set_state(rng, seed, offset));
}

/* ---- 1.1: the work a graph is made of ---- */

/* Lent to the library where an empty Go slice gives NULL (see shim.h): never read or written. */
static unsigned char empty_host_buffer[1];
static const cgc_mem_op_t empty_mem_ops[1];

cgc_status_t cgcgo_stream_priority_range(cgc_context_t ctx, int* least, int* greatest, char** msg) {
  CALL(api->cgc_stream_priority_range(ctx, least, greatest));
}
cgc_status_t cgcgo_stream_priority(cgc_stream_t stream, int* priority, char** msg) {
  CALL(api->cgc_stream_priority(stream, priority));
}
cgc_status_t cgcgo_stream_id(cgc_stream_t stream, uint64_t* id, char** msg) { CALL(api->cgc_stream_id(stream, id)); }
cgc_status_t cgcgo_stream_device(cgc_stream_t stream, int* device, uintptr_t* native_context, char** msg) {
  void* native = NULL;
  cgc_status_t st = api->cgc_stream_device(stream, device, &native);
  if (st != CGC_SUCCESS) take_error(msg);
  *native_context = (uintptr_t)native;
  return st;
}
cgc_status_t cgcgo_stream_copy_attributes(cgc_stream_t dst, cgc_stream_t src, char** msg) {
  CALL(api->cgc_stream_copy_attributes(dst, src));
}
cgc_status_t cgcgo_stream_set_access_policy(cgc_stream_t stream, uintptr_t base, size_t bytes, float hit_ratio,
                                            int hit_property, int miss_property, char** msg) {
  cgc_access_policy_t p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.base = (void*)base;
  p.bytes = bytes;
  p.hit_ratio = hit_ratio;
  p.hit_property = (cgc_access_property_t)hit_property;
  p.miss_property = (cgc_access_property_t)miss_property;
  CALL(api->cgc_stream_set_access_policy(stream, &p));
}
cgc_status_t cgcgo_stream_get_access_policy(cgc_stream_t stream, uintptr_t* base, size_t* bytes, float* hit_ratio,
                                            int* hit_property, int* miss_property, char** msg) {
  cgc_access_policy_t p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  cgc_status_t st = api->cgc_stream_get_access_policy(stream, &p);
  if (st != CGC_SUCCESS) take_error(msg);
  *base = (uintptr_t)p.base;
  *bytes = p.bytes;
  *hit_ratio = p.hit_ratio;
  *hit_property = (int)p.hit_property;
  *miss_property = (int)p.miss_property;
  return st;
}

cgc_status_t cgcgo_host_alloc(cgc_context_t ctx, size_t bytes, unsigned flags, void** out, char** msg) {
  CALL(api->cgc_host_alloc(ctx, bytes, flags, out));
}
cgc_status_t cgcgo_host_free(void* ptr, char** msg) { CALL(api->cgc_host_free(ptr)); }
cgc_status_t cgcgo_host_register(cgc_context_t ctx, void* ptr, size_t bytes, unsigned flags, char** msg) {
  CALL(api->cgc_host_register(ctx, ptr, bytes, flags));
}
cgc_status_t cgcgo_host_unregister(void* ptr, char** msg) { CALL(api->cgc_host_unregister(ptr)); }

cgc_status_t cgcgo_memcpy_htod_async(uintptr_t dst, const void* src, size_t bytes, cgc_stream_t stream, char** msg) {
  if (src == NULL && bytes == 0) src = empty_host_buffer;
  CALL(api->cgc_memcpy_htod_async((void*)dst, src, bytes, stream));
}
cgc_status_t cgcgo_memcpy_dtoh_async(void* dst, uintptr_t src, size_t bytes, cgc_stream_t stream, char** msg) {
  if (dst == NULL && bytes == 0) dst = empty_host_buffer;
  CALL(api->cgc_memcpy_dtoh_async(dst, (const void*)src, bytes, stream));
}
cgc_status_t cgcgo_memcpy_dtod_async(uintptr_t dst, uintptr_t src, size_t bytes, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_memcpy_dtod_async((void*)dst, (const void*)src, bytes, stream));
}
cgc_status_t cgcgo_memset_d8_async(uintptr_t dst, uint8_t value, size_t count, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_memset_d8_async((void*)dst, value, count, stream));
}
cgc_status_t cgcgo_memset_d16_async(uintptr_t dst, uint16_t value, size_t count, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_memset_d16_async((void*)dst, value, count, stream));
}
cgc_status_t cgcgo_memset_d32_async(uintptr_t dst, uint32_t value, size_t count, cgc_stream_t stream, char** msg) {
  CALL(api->cgc_memset_d32_async((void*)dst, value, count, stream));
}

/* The trampolines: cgc_host_fn signatures around the Go functions exported by hostfunc.go. The
 * handle travels as the library's `user` pointer; it is a number, never dereferenced. */
static void run_go_host_function(void* user) { cgcgoRunHostFunction((uintptr_t)user); }
static void release_go_host_function(void* user) { cgcgoReleaseHostFunction((uintptr_t)user); }

cgc_status_t cgcgo_launch_host_func(cgc_stream_t stream, uintptr_t handle, char** msg) {
  /* The library calls release_go_host_function exactly once, also when this call fails. */
  CALL(api->cgc_launch_host_func(stream, run_go_host_function, (void*)handle, release_go_host_function));
}

cgc_status_t cgcgo_stream_write_value32(cgc_stream_t stream, uintptr_t address, uint32_t value, unsigned flags,
                                        char** msg) {
  CALL(api->cgc_stream_write_value32(stream, (void*)address, value, flags));
}
cgc_status_t cgcgo_stream_write_value64(cgc_stream_t stream, uintptr_t address, uint64_t value, unsigned flags,
                                        char** msg) {
  CALL(api->cgc_stream_write_value64(stream, (void*)address, value, flags));
}
cgc_status_t cgcgo_stream_wait_value32(cgc_stream_t stream, uintptr_t address, uint32_t value, unsigned flags,
                                       char** msg) {
  CALL(api->cgc_stream_wait_value32(stream, (void*)address, value, flags));
}
cgc_status_t cgcgo_stream_wait_value64(cgc_stream_t stream, uintptr_t address, uint64_t value, unsigned flags,
                                       char** msg) {
  CALL(api->cgc_stream_wait_value64(stream, (void*)address, value, flags));
}
cgc_status_t cgcgo_stream_batch_mem_op(cgc_stream_t stream, const void* ops, size_t count, char** msg) {
  /* An empty batch still reaches the library, which names the count as the problem. */
  if (ops == NULL && count == 0) ops = empty_mem_ops;
  CALL(api->cgc_stream_batch_mem_op(stream, (const cgc_mem_op_t*)ops, count));
}

cgc_status_t cgcgo_module_load(cgc_context_t ctx, const void* image, cgc_module_t* out, char** msg) {
  CALL(api->cgc_module_load(ctx, image, out));
}
cgc_status_t cgcgo_module_unload(cgc_module_t module, char** msg) { CALL(api->cgc_module_unload(module)); }
cgc_status_t cgcgo_module_get_function(cgc_module_t module, const char* name, cgc_function_t* out, char** msg) {
  CALL(api->cgc_module_get_function(module, name, out));
}
cgc_status_t cgcgo_function_get_attribute(cgc_function_t function, int attribute, int* value, char** msg) {
  CALL(api->cgc_function_get_attribute(function, (cgc_function_attribute_t)attribute, value));
}
cgc_status_t cgcgo_function_set_attribute(cgc_function_t function, int attribute, int value, char** msg) {
  CALL(api->cgc_function_set_attribute(function, (cgc_function_attribute_t)attribute, value));
}

/* Most kernels take a handful of parameters: their pointers fit on the stack. */
enum { kKernelArgsOnStack = 32 };

/* The `void** args` of cgc_launch_kernel and cgc_graph_kernel_node_set_args: one pointer per
 * slot, in `on_stack` (kKernelArgsOnStack entries) when they fit, else malloc'd (the caller frees
 * an array that is not on_stack). Never NULL for a kernel without parameters either, since
 * cgc_graph_kernel_node_set_args refuses NULL; NULL only when out of memory, with *msg set. */
static void** kernel_args(void* slots, size_t count, void** on_stack, const char* func, char** msg) {
  void** args = on_stack;
  if (count > kKernelArgsOnStack) {
    args = malloc(count * sizeof *args);
    if (args == NULL) {
      *msg = format("cgc (Go binding): %s: out of host memory for %zu kernel arguments", func, count);
      return NULL;
    }
  }
  for (size_t i = 0; i < count; i++) args[i] = (unsigned char*)slots + i * CGCGO_KERNEL_SLOT_BYTES;
  return args;
}

cgc_status_t cgcgo_launch_kernel(cgc_function_t function, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                 uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                                 cgc_stream_t stream, void* slots, size_t count, char** msg) {
  void* on_stack[kKernelArgsOnStack];
  void** args = kernel_args(slots, count, on_stack, "cgc_launch_kernel", msg);
  if (args == NULL) return CGC_ERROR_OUT_OF_MEMORY;
  cgc_status_t st =
      api->cgc_launch_kernel(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, args);
  if (st != CGC_SUCCESS) take_error(msg);
  if (args != on_stack) free(args);
  return st;
}

/* ---- 1.2 ---- */

cgc_status_t cgcgo_graph_kernel_node_set_enabled(cgc_graph_t graph, size_t kernel_index, int enabled, char** msg) {
  CALL(api->cgc_graph_kernel_node_set_enabled(graph, kernel_index, enabled));
}

cgc_status_t cgcgo_graph_kernel_node_set_args(cgc_graph_t graph, size_t kernel_index, void* slots, size_t count,
                                              char** msg) {
  void* on_stack[kKernelArgsOnStack];
  void** args = kernel_args(slots, count, on_stack, "cgc_graph_kernel_node_set_args", msg);
  if (args == NULL) return CGC_ERROR_OUT_OF_MEMORY;
  cgc_status_t st = api->cgc_graph_kernel_node_set_args(graph, kernel_index, args);
  if (st != CGC_SUCCESS) take_error(msg);
  if (args != on_stack) free(args);
  return st;
}

cgc_status_t cgcgo_capture_conditional_begin(cgc_stream_t stream, int kind, uintptr_t condition, cgc_stream_t* body,
                                             char** msg) {
  CALL(api->cgc_capture_conditional_begin(stream, (cgc_conditional_kind_t)kind, (const uint32_t*)condition, body));
}
cgc_status_t cgcgo_capture_conditional_end(cgc_stream_t body, char** msg) {
  CALL(api->cgc_capture_conditional_end(body));
}

/* ---- 1.3 ---- */

cgc_status_t cgcgo_capture_conditional_begin_bodies(cgc_stream_t stream, int kind, uintptr_t condition, unsigned flags,
                                                    size_t n_bodies, cgc_stream_t* bodies, uint64_t* handle,
                                                    char** msg) {
  CALL(api->cgc_capture_conditional_begin_bodies(stream, (cgc_conditional_kind_t)kind, (const uint32_t*)condition,
                                                 flags, n_bodies, bodies, handle));
}

/* ---- 1.4 ---- */

cgc_status_t cgcgo_pool_adopt_capture(cgc_pool_t pool, uintptr_t native_stream, char** msg) {
  CALL(api->cgc_pool_adopt_capture(pool, (void*)native_stream));
}
cgc_status_t cgcgo_pool_end_adopted_capture(cgc_pool_t pool, char** msg) {
  CALL(api->cgc_pool_end_adopted_capture(pool));
}
cgc_status_t cgcgo_record_stream_native(uintptr_t ptr, uintptr_t native_stream, char** msg) {
  CALL(api->cgc_record_stream_native((void*)ptr, (void*)native_stream));
}

/* ---- 1.5 ---- */

cgc_status_t cgcgo_nccl_pool_create(cgc_comm_t comm, size_t capacity, int wanted, cgc_pool_t* out, int* got,
                                    char** msg) {
  cgc_nccl_memory_t kind = (cgc_nccl_memory_t)wanted;
  cgc_status_t st = api->cgc_nccl_pool_create(comm, capacity, (cgc_nccl_memory_t)wanted, out, &kind);
  if (st != CGC_SUCCESS) {
    take_error(msg);
    return st;
  }
  *got = (int)kind;
  return st;
}
cgc_status_t cgcgo_pool_malloc(cgc_pool_t pool, size_t size, cgc_stream_t stream, uintptr_t* out, char** msg) {
  void* p = NULL;
  cgc_status_t st = api->cgc_pool_malloc(pool, size, stream, &p);
  if (st != CGC_SUCCESS) take_error(msg);
  *out = (uintptr_t)p;
  return st;
}

/* ---- 1.6 ---- */

cgc_status_t cgcgo_last_status(void) { return api->cgc_last_status(); }
cgc_status_t cgcgo_pool_claim(cgc_pool_t pool, uintptr_t ptr, size_t size, char** msg) {
  CALL(api->cgc_pool_claim(pool, (void*)ptr, size));
}
cgc_status_t cgcgo_pool_create_at(cgc_context_t ctx, uintptr_t base, size_t capacity, cgc_pool_t* out, char** msg) {
  CALL(api->cgc_pool_create_at(ctx, (void*)base, capacity, out));
}
cgc_status_t cgcgo_memory_snapshot(cgc_context_t ctx, cgcgo_segment_t* segments, size_t max_segments,
                                   cgcgo_block_t* blocks, size_t max_blocks, size_t* n_segments, size_t* n_blocks,
                                   char** msg) {
  if (max_segments == 0 && max_blocks == 0) {
    CALL(api->cgc_memory_snapshot(ctx, NULL, 0, NULL, 0, n_segments, n_blocks));
  }
  cgc_segment_info_t* s = calloc(max_segments ? max_segments : 1, sizeof *s);
  cgc_block_info_t* b = calloc(max_blocks ? max_blocks : 1, sizeof *b);
  if (s == NULL || b == NULL) {
    free(s);
    free(b);
    *msg = format("cgc_memory_snapshot (Go binding): out of host memory for %zu segments and %zu blocks",
                  max_segments, max_blocks);
    return CGC_ERROR_OUT_OF_MEMORY;
  }
  cgc_status_t st = api->cgc_memory_snapshot(ctx, s, max_segments, b, max_blocks, n_segments, n_blocks);
  if (st != CGC_SUCCESS) {
    take_error(msg);
  } else if (*n_segments <= max_segments && *n_blocks <= max_blocks) {
    for (size_t i = 0; i < *n_segments; i++) {
      segments[i] = (cgcgo_segment_t){(uintptr_t)s[i].address, s[i].size,     s[i].allocated_bytes,
                                      (uintptr_t)s[i].pool,    s[i].stream_id, s[i].small,
                                      s[i].first_block,        s[i].n_blocks};
    }
    for (size_t i = 0; i < *n_blocks; i++) {
      blocks[i] = (cgcgo_block_t){(uintptr_t)b[i].address, b[i].size, b[i].requested, (int)b[i].state};
    }
  }
  free(s);
  free(b);
  return st;
}

/* ---- 1.6: saved graphs ---- */

cgc_status_t cgcgo_graphs_save(const cgc_graph_t* graphs, size_t n_graphs, const cgc_pool_t* pools, size_t n_pools,
                               unsigned flags, void* buffer, size_t capacity, size_t* size, char** msg) {
  cgc_save_options_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.pools = pools;
  o.n_pools = n_pools;
  o.flags = flags;
  CALL(api->cgc_graphs_save(graphs, n_graphs, &o, buffer, capacity, size));
}
cgc_status_t cgcgo_saved_info(const void* data, size_t size, cgc_saved_info_t* info, char** msg) {
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  CALL(api->cgc_saved_info(data, size, info));
}
cgc_status_t cgcgo_graphs_restore(cgc_context_t ctx, const void* data, size_t size, unsigned flags, unsigned threads,
                                  cgc_rng_t* generators, size_t n_generators, cgc_graph_t* graphs, size_t n_graphs,
                                  cgc_pool_t* pools, size_t n_pools, char** msg) {
  cgc_restore_options_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.flags = flags;
  o.threads = threads;
  o.generators = generators;
  o.n_generators = n_generators;
  CALL(api->cgc_graphs_restore(ctx, data, size, &o, graphs, n_graphs, pools, n_pools));
}
cgc_status_t cgcgo_module_add_image(cgc_context_t ctx, const char* key, const void* image, size_t size, char** msg) {
  CALL(api->cgc_module_add_image(ctx, key, image, size));
}

/* ---- 1.6: families ---- */

cgc_status_t cgcgo_graph_share_executable(cgc_graph_t graph, cgc_graph_t leader, char** msg) {
  CALL(api->cgc_graph_share_executable(graph, leader));
}

/* ---- 1.6: the record of module images ---- */

cgc_status_t cgcgo_module_record(int on, size_t* images, size_t* bytes, char** msg) {
  CALL(api->cgc_module_record(on, images, bytes));
}
