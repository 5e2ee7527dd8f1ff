// libcgc_torch.so.1: the bridge between PyTorch's CUDAPluggableAllocator and cgc, so that the
// captures PyTorch begins itself (torch.cuda.graph, CUDAGraph.capture_begin,
// make_graphed_callables) allocate from cgc's private pools. (torch.compile's CUDA-graph trees
// also need allocator checkpoints, which PyTorch's CUDAPluggableAllocator refuses.)
//
// PyTorch (2.3 and later) asks its allocator to take part in graph capture through hooks of
// C++ types (std::function), which a C library cannot receive: this library receives them and
// turns them into calls of cgc's C ABI, so libcgc.so.1 itself stays free of the C++ runtime.
// It is loaded by the Python binding (cgc.use_as_torch_allocator) and is what PyTorch calls:
//   cgc_torch_bridge_malloc / _free   the CUDAPluggableAllocator's allocation functions
//   beginAllocateToPool(dev, id, filter)  -> a route: a torch pool id, its cgc pool, the filter
//   endAllocateToPool(dev, id)             -> the route ends (and the pool's adoption)
//   releasePool(dev, id)                   -> one user of the torch pool id fewer; at none, the
//                                             cgc pool is released
//   record_stream / empty_cache            -> cgc_record_stream_native / cgc_empty_cache
// A route is how PyTorch says "allocations on streams this filter accepts come from pool id":
// the filter (PyTorch's: "the stream is in my capture") is asked only when cgc_torch_malloc
// refuses an allocation because its stream is in a capture cgc did not begin; the first route
// that accepts the stream has its pool adopt that capture (cgc_pool_adopt_capture), after which
// cgc routes every allocation of the capture, on any of its streams, by the capture's id, as it
// does for its own captures. A route that has claimed a capture is not asked again.
//
// Captures that fail: PyTorch calls neither endAllocateToPool nor releasePool for a capture whose
// cudaStreamEndCapture failed, and its filter may point into a CUDAGraph freed since. So:
// - a claimed route's filter is never asked again, and unclaimed routes are asked the calling
//   thread's first (another thread's stale unclaimed route is still asked, as PyTorch's own
//   allocator asks every capture under way);
// - PyTorch begins and ends a thread's captures on that thread, so the thread's next begin and
//   its torch.cuda.empty_cache() end its claimed routes whose capture is over (asked on that
//   thread: no other thread ends that capture), with their pools' adoptions (cgc_empty_cache
//   waits for every open adoption to end), and drop the failed capture's use of the torch pool,
//   which PyTorch never releases; at the last use the cgc pool is released;
// - a begin also ends the thread's unclaimed routes (their capture cannot be asked about without
//   the filter), which keep their use: such a capture may still run on another stream, and
//   PyTorch releases its use when it ends.
// A begin for a pool id that another thread's open route records into is refused, as PyTorch's
// own allocator refuses it.
//
// Thread safety: one mutex (State::lock) guards the pools, the routes and the contexts, and
// torch's filters are asked under it (so no route ends while its filter runs). Under it the
// bridge calls cgc_context_create, cgc_pool_create/retain/release,
// cgc_pool_adopt/end_adopted_capture and the filters (cudaStreamGetCaptureInfo): none waits for
// the GPU's work (a pool's release hands its memory to cgc's cache without freeing it; ending an
// adoption may record events). The allocation path takes it only when cgc refused an allocation
// while a route is open: the first allocation of each torch capture.
#include <dlfcn.h>
#include <link.h>
#include <sys/types.h>

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <typeinfo>
#include <vector>

#include "bindings/torch_bridge/torch_abi.h"
#include "capi/cgc.h"

#define BRIDGE_API extern "C" __attribute__((visibility("default")))

namespace {

using torch::cuda::CUDAPluggableAllocator::BeginAllocateToPoolFn;
using torch::cuda::CUDAPluggableAllocator::PoolFn;
using torch::cuda::CUDAPluggableAllocator::RecordStreamFn;
using torch::cuda::CUDAPluggableAllocator::ResetFn;
using torch::cuda::CUDAPluggableAllocator::StreamFilter;
using PoolKey = std::tuple<int, unsigned long long, unsigned long long>;  // device, torch pool id

constexpr int kMaxDevices = 64;

struct PoolEntry {
  cgc_pool_t pool = nullptr;  // one reference of the bridge's
  long users = 0;             // begins less releases, as PyTorch counts a pool's use
};

struct Route {
  PoolKey key;
  StreamFilter filter;
  cgc_pool_t pool;
  std::thread::id thread;  // the thread that began it (and, with PyTorch, ends it)
  bool claimed;            // its pool adopted the capture the filter accepted
  void* stream = nullptr;  // the stream it was claimed through
  unsigned long long capture_id = 0;  // the driver's id of the capture it claimed (0: unknown)
};

// Everything the hooks share. Allocated once and never freed: PyTorch may release a pool from
// a graph's destructor during interpreter shutdown, after this library's static destructors.
struct State {
  std::mutex lock;                        // guards everything below but `api`, `open_routes` and `used_devices`
  std::map<PoolKey, PoolEntry> pools;     // torch pool id -> cgc pool
  std::vector<Route> routes;              // open routes, oldest first
  cgc_context_t contexts[kMaxDevices] = {};  // made on first need, kept for the process
  bool attached = false;
  std::atomic<const cgc_api_t*> api{nullptr};  // set once by cgc_torch_bridge_load
  std::atomic<int> open_routes{0};             // routes not yet claimed: the malloc path's hint
  std::atomic<unsigned long> claims{0};        // captures claimed so far: a refused malloc retries if it grew
  std::atomic<unsigned long long> used_devices{0};  // devices cgc allocated on (empty_cache's list)
};

State& state() {
  static State* s = new State;
  return *s;
}

const cgc_api_t* api() { return state().api.load(std::memory_order_acquire); }

void put_error(char* error, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void put_error(char* error, size_t size, const char* fmt, ...) {
  if (error == nullptr || size == 0) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(error, size, fmt, args);
  va_end(args);
}

std::string cgc_message(const char* what) { return std::string(what) + ": " + api()->cgc_last_error(); }

// (lock held) The cgc context of `device`, made on first need.
cgc_context_t context_for(State& s, int device) {
  if (device < 0 || device >= kMaxDevices) throw std::runtime_error("cgc torch bridge: device " + std::to_string(device) + " is out of range");
  if (s.contexts[device] == nullptr && api()->cgc_context_create(device, &s.contexts[device]) != CGC_SUCCESS)
    throw std::runtime_error(cgc_message("cgc torch bridge: cgc_context_create"));
  return s.contexts[device];
}

void drop_user(State& s, const PoolKey& key);

// Why a route ends: PyTorch's endAllocateToPool (or its pool's release), or the bridge's finding
// that the capture it claimed failed: PyTorch then calls neither endAllocateToPool nor
// releasePool (a CUDAGraph whose capture did not end releases nothing), so the capture's use of
// the pool is dropped here, else the torch pool could never be released. A route that never
// claimed a capture and is ended at its thread's next begin keeps its use: its capture may still
// run, and PyTorch then releases the use itself.
enum class RouteEnd { kByPyTorch, kCaptureFailed, kNeverClaimed };

// (lock held) Ends a route: its pool stops adopting the capture it claimed.
std::vector<Route>::iterator end_route(State& s, std::vector<Route>::iterator it, RouteEnd why) {
  if (it->claimed) {
    cgc_status_t st = api()->cgc_pool_end_adopted_capture(it->pool);
    if (st != CGC_SUCCESS && st != CGC_ERROR_INVALID_STATE)
      fprintf(stderr, "cgc torch bridge: %s\n", api()->cgc_last_error());
  } else {
    s.open_routes.fetch_sub(1, std::memory_order_release);
  }
  PoolKey key = it->key;
  auto next = s.routes.erase(it);
  // drop_user ends no other route (one route per pool id, and it is gone), so `next` stays valid.
  if (why == RouteEnd::kCaptureFailed) drop_user(s, key);
  return next;
}

std::vector<Route>::iterator find_route(State& s, const PoolKey& key) {
  for (auto it = s.routes.begin(); it != s.routes.end(); ++it)
    if (it->key == key) return it;
  return s.routes.end();
}

bool claimed_capture_is_over(State& s, const Route& r);

// (lock held) Ends this thread's routes whose captures failed: a claimed route whose capture is
// over (asked on this thread, which begins and ends its captures itself), and with `unclaimed`
// also the thread's routes that never claimed one (their capture's state cannot be asked
// without the filter, which may point into a freed CUDAGraph).
void end_failed_routes(State& s, bool unclaimed) {
  std::thread::id self = std::this_thread::get_id();
  for (auto it = s.routes.begin(); it != s.routes.end();) {
    if (it->thread != self) {
      ++it;
    } else if (it->claimed) {
      it = claimed_capture_is_over(s, *it) ? end_route(s, it, RouteEnd::kCaptureFailed) : it + 1;
    } else {
      it = unclaimed ? end_route(s, it, RouteEnd::kNeverClaimed) : it + 1;
    }
  }
}

// ---- the hooks PyTorch calls ----

void begin_allocate_to_pool(int device, c10::cuda::MempoolId_t id, StreamFilter filter) {
  State& s = state();
  PoolKey key{device, id.first, id.second};
  std::lock_guard<std::mutex> hold(s.lock);
  // Routes this thread left open belong to captures that failed, unless a claimed one's capture
  // still runs (on another stream: PyTorch allows captures into different pools at once).
  end_failed_routes(s, true);
  if (find_route(s, key) != s.routes.end())
    throw std::runtime_error("cgc torch bridge: beginAllocateToPool: pool (" + std::to_string(id.first) + ", " +
                             std::to_string(id.second) +
                             ") is being recorded into by another thread's capture (PyTorch's own allocator refuses "
                             "this too: one capture per pool at a time)");
  cgc_context_t ctx = context_for(s, device);  // may throw: before anything changes
  PoolEntry& entry = s.pools[key];
  if (entry.pool == nullptr && api()->cgc_pool_create(ctx, &entry.pool) != CGC_SUCCESS) {
    s.pools.erase(key);
    throw std::runtime_error(cgc_message("cgc torch bridge: cgc_pool_create"));
  }
  entry.users++;
  s.routes.push_back(Route{key, std::move(filter), entry.pool, std::this_thread::get_id(), false});
  s.open_routes.fetch_add(1, std::memory_order_release);
}

void end_allocate_to_pool(int device, c10::cuda::MempoolId_t id) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  auto it = find_route(s, PoolKey{device, id.first, id.second});
  if (it != s.routes.end()) end_route(s, it, RouteEnd::kByPyTorch);
}

// (lock held) One user of the torch pool fewer; at none its cgc pool is released. A route left
// open with the pool (a capture that failed before its end) goes first: it must not hand out the
// pool once the bridge's reference is dropped. Blocks still allocated from the pool (a graph's
// outputs) keep its memory until they are freed; cgc returns it to the driver at the next
// empty_cache.
void drop_user(State& s, const PoolKey& key) {
  auto it = s.pools.find(key);
  if (it == s.pools.end() || --it->second.users > 0) return;
  auto route = find_route(s, key);
  if (route != s.routes.end()) end_route(s, route, RouteEnd::kByPyTorch);
  if (api()->cgc_pool_release(it->second.pool) != CGC_SUCCESS)
    fprintf(stderr, "cgc torch bridge: %s\n", api()->cgc_last_error());
  s.pools.erase(it);
}

void release_pool(int device, c10::cuda::MempoolId_t id) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  drop_user(s, PoolKey{device, id.first, id.second});
}

void record_stream(void* ptr, CUstream_st* stream) {
  if (ptr == nullptr) return;  // an empty tensor's storage
  cgc_status_t st = api()->cgc_record_stream_native(ptr, stream);
  // Memory cgc did not allocate (an IPC or DLPack tensor): nothing to record, as PyTorch's own
  // allocator skips pointers it does not know.
  if (st != CGC_SUCCESS && st != CGC_ERROR_INVALID_ARGUMENT)
    throw std::runtime_error(std::string("cgc: ") + api()->cgc_last_error());
}

// (lock held) Whether the capture route `r` claimed is over, on the thread that began the route
// (PyTorch begins and ends a thread's captures on that thread, so no other thread ends this
// capture). Its stream may be another thread's capture stream now (torch.cuda.graph's default
// capture stream is shared): when another route claimed a capture through the same stream, that
// one is under way there and r's is over, known without asking the driver (cgc never asks the
// driver about a stream another thread may be ending a capture on: driver 580 crashes there).
// Otherwise the stream is asked; what remains is a capture on it that allocated nothing through
// the bridge, ending on another thread at that instant.
bool claimed_capture_is_over(State& s, const Route& r) {
  for (const Route& other : s.routes)
    if (&other != &r && other.claimed && other.stream == r.stream && other.capture_id != r.capture_id) return true;
  cgc_stream_t handle = nullptr;
  if (api()->cgc_stream_wrap(context_for(s, std::get<0>(r.key)), r.stream, &handle) != CGC_SUCCESS) return false;
  cgc_capture_status_t status = CGC_CAPTURE_ACTIVE;
  uint64_t id = 0;
  bool asked = api()->cgc_stream_capture_status(handle, &status, &id) == CGC_SUCCESS;
  api()->cgc_stream_destroy(handle);  // a wrapped stream: the handle goes, the stream stays
  return asked && (status != CGC_CAPTURE_ACTIVE || (r.capture_id != 0 && id != r.capture_id));
}

void empty_cache() {
  State& s = state();
  {
    // cgc's empty_cache waits for every open adoption to end: this thread's whose capture failed
    // (PyTorch then never calls endAllocateToPool) end now.
    std::lock_guard<std::mutex> hold(s.lock);
    end_failed_routes(s, false);
  }
  unsigned long long used = s.used_devices.load(std::memory_order_acquire);
  for (int device = 0; device < kMaxDevices; device++) {
    if ((used >> device & 1) == 0) continue;
    cgc_context_t ctx;
    {
      std::lock_guard<std::mutex> hold(s.lock);
      ctx = context_for(s, device);
    }
    // Refused while a capture of the device is under way, as PyTorch's own skips it then.
    api()->cgc_empty_cache(ctx);
  }
}

// (lock held) The driver's id of the capture `stream` takes part in (0 when it cannot say), asked on
// the allocating thread while that capture allocates.
unsigned long long capture_id_of(State& s, int device, void* stream) {
  cgc_stream_t handle = nullptr;
  if (api()->cgc_stream_wrap(context_for(s, device), stream, &handle) != CGC_SUCCESS) return 0;
  cgc_capture_status_t status = CGC_CAPTURE_NONE;
  uint64_t id = 0;
  if (api()->cgc_stream_capture_status(handle, &status, &id) != CGC_SUCCESS || status != CGC_CAPTURE_ACTIVE) id = 0;
  api()->cgc_stream_destroy(handle);
  return id;
}

// Asks the unclaimed routes of `device` whether `stream` is theirs, the calling thread's first
// (under the lock: no route ends while its filter runs); the first that says yes has its pool
// adopt the stream's capture. A claimed route is never asked again: cgc routes its capture by id,
// and its filter may point into a CUDAGraph whose capture failed and which is freed since. True
// when the allocation is worth retrying: a pool adopts the capture now, or some capture was
// claimed since `claims_before` (another thread's allocation may have claimed this one).
bool claim_capture(int device, void* stream, unsigned long claims_before) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  std::thread::id self = std::this_thread::get_id();
  for (int pass = 0; pass < 2; pass++) {
    for (Route& r : s.routes) {
      if (std::get<0>(r.key) != device || r.claimed || (r.thread == self) != (pass == 0)) continue;
      bool accepts = false;
      try {
        accepts = r.filter(static_cast<CUstream_st*>(stream));
      } catch (...) {  // PyTorch's filter asks the runtime; a failure there means "not mine"
        accepts = false;
      }
      if (!accepts) continue;
      if (api()->cgc_pool_adopt_capture(r.pool, stream) != CGC_SUCCESS) return false;
      r.claimed = true;
      r.stream = stream;
      r.capture_id = capture_id_of(s, device, stream);
      s.open_routes.fetch_sub(1, std::memory_order_release);
      s.claims.fetch_add(1, std::memory_order_release);
      return true;
    }
  }
  return s.claims.load(std::memory_order_acquire) != claims_before;
}

void note_device(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  State& s = state();
  unsigned long long bit = 1ull << device;
  if ((s.used_devices.load(std::memory_order_relaxed) & bit) == 0) s.used_devices.fetch_or(bit, std::memory_order_release);
}

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
  State& s = state();
  if (s.api.load() != nullptr) return 0;
  void* lib = dlopen(libcgc_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    put_error(error, error_size, "cgc_torch_bridge_load: cannot load %s: %s", libcgc_path, dlerror());
    return -1;
  }
  using GetApi = cgc_status_t (*)(uint32_t, const cgc_api_t**);
  auto get_api = reinterpret_cast<GetApi>(dlsym(lib, "cgc_get_api"));
  const cgc_api_t* table = nullptr;
  if (get_api == nullptr || get_api(CGC_VERSION, &table) != CGC_SUCCESS ||
      table->struct_size < offsetof(cgc_api_t, cgc_record_stream_native) + sizeof(void*)) {
    put_error(error, error_size,
              "cgc_torch_bridge_load: %s is not libcgc.so.1 of version %d.%d or newer (its table lacks what the "
              "bridge calls)",
              libcgc_path, CGC_VERSION_MAJOR, CGC_VERSION_MINOR);
    return -1;
  }
  s.api.store(table, std::memory_order_release);
  return 0;
}

// Installs the pool, record_stream and empty_cache hooks on PyTorch's current allocator, which
// must be the CUDAPluggableAllocator over this library's malloc/free (the binding has just
// made it current). Returns 0, or -1 with the reason in `error` (nothing was installed then).
BRIDGE_API int cgc_torch_bridge_attach(char* error, size_t error_size) {
  State& s = state();
  if (api() == nullptr) {
    put_error(error, error_size, "cgc_torch_bridge_attach: call cgc_torch_bridge_load first");
    return -1;
  }
  std::lock_guard<std::mutex> hold(s.lock);
  if (s.attached) return 0;
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
  s.attached = true;
  return 0;
}

// The CUDAPluggableAllocator's allocation function. PyTorch does not check it for NULL, so a
// failure is thrown as PyTorch's own allocator throws its errors (a RuntimeError in Python),
// with cgc's message.
BRIDGE_API void* cgc_torch_bridge_malloc(ssize_t size, int device, void* stream) {
  const cgc_api_t* a = api();
  if (a == nullptr) throw std::runtime_error("cgc torch bridge: cgc_torch_bridge_load was not called");
  note_device(device);
  State& s = state();
  unsigned long claims_before = s.claims.load(std::memory_order_acquire);
  void* p = a->cgc_torch_malloc(size, device, stream);
  if (p == nullptr && size > 0 && (s.open_routes.load(std::memory_order_acquire) > 0 ||
                                   s.claims.load(std::memory_order_acquire) != claims_before) &&
      claim_capture(device, stream, claims_before))
    p = a->cgc_torch_malloc(size, device, stream);
  if (p == nullptr && size > 0) throw std::runtime_error(std::string("cgc: ") + a->cgc_last_error());
  return p;
}

BRIDGE_API void cgc_torch_bridge_free(void* ptr, ssize_t size, int device, void* stream) {
  api()->cgc_torch_free(ptr, size, device, stream);
}

// The cgc pool behind torch pool id (id0, id1) of `device`, or NULL when there is none. Without
// `create`: a reference of the caller's (cgc_pool_release it), taken under the lock so that a
// release of the torch pool on another thread cannot come between. With `create`: made if
// needed, one user more (cgc.graph's captures into a torch pool id count as users, released with
// cgc_torch_bridge_pool_release as PyTorch's graphs release theirs), and lent, not retained.
BRIDGE_API cgc_pool_t cgc_torch_bridge_pool(int device, unsigned long long id0, unsigned long long id1, int create,
                                            char* error, size_t error_size) {
  State& s = state();
  if (api() == nullptr) {
    put_error(error, error_size, "cgc_torch_bridge_pool: call cgc_torch_bridge_load first");
    return nullptr;
  }
  std::lock_guard<std::mutex> hold(s.lock);
  PoolKey key{device, id0, id1};
  auto it = s.pools.find(key);
  if (!create) {
    if (it == s.pools.end()) return nullptr;
    if (api()->cgc_pool_retain(it->second.pool) != CGC_SUCCESS) {
      put_error(error, error_size, "%s", cgc_message("cgc_torch_bridge_pool: cgc_pool_retain").c_str());
      return nullptr;
    }
    return it->second.pool;
  }
  try {
    cgc_context_t ctx = context_for(s, device);
    PoolEntry& entry = s.pools[key];
    if (entry.pool == nullptr && api()->cgc_pool_create(ctx, &entry.pool) != CGC_SUCCESS) {
      s.pools.erase(key);
      put_error(error, error_size, "%s", cgc_message("cgc_torch_bridge_pool: cgc_pool_create").c_str());
      return nullptr;
    }
    entry.users++;
    return entry.pool;
  } catch (const std::exception& e) {
    put_error(error, error_size, "%s", e.what());
    return nullptr;
  }
}

// One user of torch pool id (id0, id1) fewer (see cgc_torch_bridge_pool).
BRIDGE_API void cgc_torch_bridge_pool_release(int device, unsigned long long id0, unsigned long long id1) {
  release_pool(device, c10::cuda::MempoolId_t{id0, id1});
}

// The torch pool ids of `device` that have a cgc pool, written to ids (pairs) up to `max`;
// returns how many there are.
BRIDGE_API size_t cgc_torch_bridge_pool_ids(int device, unsigned long long* ids, size_t max) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  size_t n = 0;
  for (const auto& [key, entry] : s.pools) {
    if (std::get<0>(key) != device) continue;
    if (n < max) {
      ids[2 * n] = std::get<1>(key);
      ids[2 * n + 1] = std::get<2>(key);
    }
    n++;
  }
  return n;
}

// Routes begun and not ended (a capture under way, or one that failed before its end).
BRIDGE_API int cgc_torch_bridge_open_routes(void) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  return static_cast<int>(s.routes.size());
}
