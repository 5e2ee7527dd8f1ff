// Routes: how allocations of captures (and torch.cuda.MemPool scopes) that PyTorch begins reach
// cgc's private pools. This is the part of PyTorch's allocator interface that does not depend on
// PyTorch's headers, shared by the two ways cgc serves PyTorch:
//   backend.cc  a complete c10 CUDAAllocator, built against the installed PyTorch's own headers
//               (torch.utils.cpp_extension, on first use), PyTorch's current allocator;
//   bridge.cc   libcgc_torch.so.1, the hooks of PyTorch's CUDAPluggableAllocator (the fallback
//               where no compiler or PyTorch headers are there).
// docs/TORCH.md says what a route is and how failed captures end theirs.
//
// Thread safety: one mutex guards the pools, the routes and the contexts; torch's filters are
// asked under it (no route ends while its filter runs). Under it only cgc calls that never wait
// for the GPU are made (context and pool create/retain/release, adopt/end adoption, stream wrap
// and capture status). The allocation path takes it only while a route is open and unclaimed.
#ifndef CGC_TORCH_BRIDGE_ROUTES_H_
#define CGC_TORCH_BRIDGE_ROUTES_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>

#include "capi/cgc.h"

struct CUstream_st;  // cudaStream_t and CUstream are CUstream_st*

namespace cgc_torch {

// PyTorch's "is this stream mine?" (a capture's: the stream takes part in it; a MemPool scope's:
// the allocating thread is the one that opened it).
using StreamFilter = std::function<bool(CUstream_st*)>;

// cgc's function table, loaded once from the libcgc.so.1 at `libcgc_path` (the copy the Python
// binding loaded). Returns 0, or -1 with a message in `error`.
int load_api(const char* libcgc_path, char* error, size_t error_size);
const cgc_api_t* api();  // nullptr until load_api succeeded

// Writes a message into a caller's buffer (nothing when it is NULL or empty).
void put_error(char* error, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// PyTorch's pool calls. begin throws std::runtime_error (before anything changed) for a pool id
// another thread's capture records into, or when cgc cannot make the pool.
void begin_allocate_to_pool(int device, unsigned long long id0, unsigned long long id1, StreamFilter filter);
void end_allocate_to_pool(int device, unsigned long long id0, unsigned long long id1);
void release_pool(int device, unsigned long long id0, unsigned long long id1);  // one user fewer
void create_or_incref_pool(int device, unsigned long long id0, unsigned long long id1);  // one user more
int pool_use_count(int device, unsigned long long id0, unsigned long long id1);  // 0: no such pool

// Tensor.record_stream (memory cgc did not allocate is skipped) and torch.cuda.empty_cache().
void record_stream(void* ptr, CUstream_st* stream);
void empty_cache();

// Where an allocation went: the torch pool id it was routed to ({0, 0}: the device's own memory).
struct Routed {
  unsigned long long id0 = 0, id1 = 0;
};

// cgc_torch_malloc with routing: the allocation of `size` bytes on `stream` of `device`, from the
// pool of the capture the stream takes part in, or of the MemPool scope whose filter accepts it.
// With `eager_routes` (the backend), open MemPool scopes route eager allocations as PyTorch's
// allocator does; the pluggable bridge, whose hooks PyTorch 2.11 calls only around captures,
// passes false. Returns nullptr on failure (cgc_last_error says why).
void* malloc_routed(ssize_t size, int device, void* stream, bool eager_routes, Routed* routed);

// The torch pool id whose route claimed capture `capture_id` of `device` (the driver's id, as
// cudaStreamGetCaptureInfo gives it); false when no open route did.
bool routed_capture(int device, unsigned long long capture_id, Routed* routed);

// An eager allocation from the pool of torch pool id (id0, id1), if it has one; nullptr otherwise
// (cgc_last_error says why when the pool exists).
void* malloc_from_pool(int device, unsigned long long id0, unsigned long long id1, size_t size, void* stream);

// The torch pool id (of `device`) whose cgc pool is `pool`; false when none is.
bool torch_pool_id_of(int device, cgc_pool_t pool, unsigned long long* id0, unsigned long long* id1);

// For the Python binding: the cgc pool behind a torch pool id (routes.cc also exports these as
// cgc_torch_bridge_pool, _pool_release, _pool_ids and _open_routes, from either library).
cgc_pool_t pool_for(int device, unsigned long long id0, unsigned long long id1, bool create, char* error,
                    size_t error_size);
size_t pool_ids(int device, unsigned long long* ids, size_t max);
int open_routes();
bool any_route_open();  // without the lock: the allocation path's hint
bool device_used(int device);  // cgc allocated on `device` for PyTorch (without the lock)

}  // namespace cgc_torch

#endif  // CGC_TORCH_BRIDGE_ROUTES_H_
