// libcgc_torch.so.1: cgc as PyTorch's allocator through PyTorch's CUDAPluggableAllocator, for
// where the complete backend (backend.cc, built against the installed PyTorch's headers) cannot
// be built: no C++ compiler or no PyTorch headers. PyTorch (2.3 and later) asks its pluggable
// allocator to take part in graph capture through hooks of C++ types (std::function), which a C
// library cannot receive: this library receives them and turns them into the routes of
// routes.cc, so libcgc.so.1 itself stays free of the C++ runtime. It is loaded by the Python
// binding (cgc.use_as_torch_allocator) and is what PyTorch calls:
//   cgc_torch_bridge_malloc / _free        the CUDAPluggableAllocator's allocation functions
//   beginAllocateToPool / endAllocateToPool / releasePool, record_stream, empty_cache: routes.h
// The hooks' declarations are written out in torch_abi.h (this path cannot use PyTorch's
// headers), checked against each PyTorch at attach. What this path lacks beside the backend
// (statistics, snapshots, checkpoints, MemPool scopes, PyTorch's out-of-memory error) is in
// docs/TORCH.md.
#include <dlfcn.h>
#include <link.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "bindings/torch_bridge/routes.h"
#include "bindings/torch_bridge/torch_abi.h"
#include "capi/cgc.h"

#define BRIDGE_API extern "C" __attribute__((visibility("default")))

namespace {

using torch::cuda::CUDAPluggableAllocator::BeginAllocateToPoolFn;
using torch::cuda::CUDAPluggableAllocator::PoolFn;
using torch::cuda::CUDAPluggableAllocator::RecordStreamFn;
using torch::cuda::CUDAPluggableAllocator::ResetFn;
using torch::cuda::CUDAPluggableAllocator::StreamFilter;

std::mutex attach_lock;
bool attached = false;  // guarded by attach_lock

using cgc_torch::put_error;

void begin_allocate_to_pool(int device, c10::cuda::MempoolId_t id, StreamFilter filter) {
  cgc_torch::begin_allocate_to_pool(device, id.first, id.second, std::move(filter));
}
void end_allocate_to_pool(int device, c10::cuda::MempoolId_t id) {
  cgc_torch::end_allocate_to_pool(device, id.first, id.second);
}
void release_pool(int device, c10::cuda::MempoolId_t id) { cgc_torch::release_pool(device, id.first, id.second); }
void record_stream(void* ptr, CUstream_st* stream) { cgc_torch::record_stream(ptr, stream); }
void empty_cache() { cgc_torch::empty_cache(); }

// Where the dynamic loader has PyTorch's libraries: every loaded object whose name says torch
// or c10, looked up without loading anything new.
std::vector<void*> torch_libraries() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name;
        if (name != nullptr && (strstr(name, "libtorch") != nullptr || strstr(name, "libc10") != nullptr))
          static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names);
  std::vector<void*> handles;
  for (const std::string& name : names) {
    void* h = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (h != nullptr) handles.push_back(h);
  }
  return handles;
}

template <class Fn>
void call_setter(void* setter, void* allocator, Fn fn) {
  // A non-virtual member function takes `this` first; a std::function argument passes by
  // invisible reference in either form (Itanium C++ ABI), so this is the member call.
  reinterpret_cast<void (*)(void*, Fn)>(setter)(allocator, std::move(fn));
}

}  // namespace

// ---- what the Python binding calls (ctypes) ----

// Loads cgc's function table from the libcgc.so.1 at `libcgc_path` (already loaded by the
// binding: the same copy). Returns 0, or -1 with a message in `error`.
BRIDGE_API int cgc_torch_bridge_load(const char* libcgc_path, char* error, size_t error_size) {
  return cgc_torch::load_api(libcgc_path, error, error_size);
}

// Installs the pool, record_stream and empty_cache hooks on PyTorch's current allocator, which
// must be the CUDAPluggableAllocator over this library's malloc/free (the binding has just
// made it current). Returns 0, or -1 with the reason in `error` (nothing was installed then).
BRIDGE_API int cgc_torch_bridge_attach(char* error, size_t error_size) {
  if (cgc_torch::api() == nullptr) {
    put_error(error, error_size, "cgc_torch_bridge_attach: call cgc_torch_bridge_load first");
    return -1;
  }
  std::lock_guard<std::mutex> hold(attach_lock);
  if (attached) return 0;
  std::vector<void*> libraries = torch_libraries();
  if (libraries.empty()) {
    put_error(error, error_size, "cgc_torch_bridge_attach: PyTorch's libraries (libtorch*, libc10*) are not loaded in "
                                 "this process: import torch first");
    return -1;
  }
  void* symbols[cgc_torch::kSymbolCount] = {};
  for (int i = 0; i < cgc_torch::kSymbolCount; i++) {
    for (void* h : libraries)
      if ((symbols[i] = dlsym(h, cgc_torch::kSymbols[i])) != nullptr) break;
    if (symbols[i] == nullptr) {
      put_error(error, error_size,
                "cgc_torch_bridge_attach: this PyTorch lacks %s (the bridge needs PyTorch 2.3 or newer; "
                "docs/TORCH.md lists the versions checked)",
                cgc_torch::kSymbols[i]);
      return -1;
    }
  }
  void* allocator = __atomic_load_n(static_cast<void**>(symbols[cgc_torch::kCurrentAllocator]), __ATOMIC_ACQUIRE);
  // The dynamic type, read from the object's vtable (its RTTI slot precedes the first entry),
  // before anything is called on it as a CUDAPluggableAllocator.
  const char* type = "(none)";
  bool primary_base = false;
  if (allocator != nullptr) {
    void** vtable = *static_cast<void***>(allocator);
    type = static_cast<const std::type_info*>(vtable[-1])->name();
    primary_base = vtable[-2] == nullptr;  // offset to top 0: the CUDAAllocator* is the object's `this`
  }
  if (strcmp(type, cgc_torch::kPluggableTypeName) != 0 || !primary_base) {
    put_error(error, error_size,
              "cgc_torch_bridge_attach: PyTorch's current CUDA allocator is a %s, not the CUDAPluggableAllocator "
              "over this bridge: call torch.cuda.memory.change_current_allocator first",
              type);
    return -1;
  }
  call_setter<BeginAllocateToPoolFn>(symbols[cgc_torch::kSetBegin], allocator, begin_allocate_to_pool);
  call_setter<PoolFn>(symbols[cgc_torch::kSetEnd], allocator, end_allocate_to_pool);
  call_setter<PoolFn>(symbols[cgc_torch::kSetRelease], allocator, release_pool);
  call_setter<RecordStreamFn>(symbols[cgc_torch::kSetRecordStream], allocator, record_stream);
  call_setter<ResetFn>(symbols[cgc_torch::kSetReset], allocator, empty_cache);
  attached = true;
  return 0;
}

// The CUDAPluggableAllocator's allocation function. PyTorch does not check it for NULL, so a
// failure is thrown as PyTorch's own allocator throws its errors (a RuntimeError in Python),
// with cgc's message.
BRIDGE_API void* cgc_torch_bridge_malloc(ssize_t size, int device, void* stream) {
  const cgc_api_t* a = cgc_torch::api();
  if (a == nullptr) throw std::runtime_error("cgc torch bridge: cgc_torch_bridge_load was not called");
  cgc_torch::Routed routed;
  void* p = cgc_torch::malloc_routed(size, device, stream, false, &routed);
  if (p == nullptr && size > 0) throw std::runtime_error(std::string("cgc: ") + a->cgc_last_error());
  return p;
}

BRIDGE_API void cgc_torch_bridge_free(void* ptr, ssize_t size, int device, void* stream) {
  cgc_torch::api()->cgc_torch_free(ptr, size, device, stream);
}

// The pool calls (cgc_torch_bridge_pool, _pool_release, _pool_ids, _open_routes) are routes.cc's.
