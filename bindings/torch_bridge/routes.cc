// The routes of routes.h: torch pool ids, their cgc pools, and the captures and MemPool scopes
// that allocate from them. Kept free of PyTorch's headers so that both the backend and the
// pluggable bridge use the same code.
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
// - a begin also ends the thread's unclaimed capture routes (their capture cannot be asked about
//   without the filter), which keep their use: such a capture may still run on another stream,
//   and PyTorch releases its use when it ends. MemPool scopes are not captures and stay.
// A begin for a pool id that another thread's open route records into is refused, as PyTorch's
// own allocator refuses it.
#include "bindings/torch_bridge/routes.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace cgc_torch {

namespace {

using PoolKey = std::tuple<int, unsigned long long, unsigned long long>;  // device, torch pool id

constexpr int kMaxDevices = 64;

struct PoolEntry {
  cgc_pool_t pool = nullptr;  // one reference of these routes'
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
  // A scope, not a capture: its filter accepted, on the thread that began it, a stream no capture
  // runs on (torch.cuda.MemPool's use_mem_pool, the CUDA-graph trees' warm-up), or later
  // routed an eager allocation. A scope is never ended as a failed capture's, never claims a
  // capture, and stays open across its thread's captures until PyTorch ends it.
  bool scope = false;
};

// Everything the hooks share. Allocated once and never freed: PyTorch may release a pool from
// a graph's destructor during interpreter shutdown, after this library's static destructors.
struct State {
  std::mutex lock;                        // guards everything below but `api`, `open_routes` and `used_devices`
  std::map<PoolKey, PoolEntry> pools;     // torch pool id -> cgc pool
  std::vector<Route> routes;              // open routes, oldest first
  cgc_context_t contexts[kMaxDevices] = {};  // made on first need, kept for the process
  std::atomic<const cgc_api_t*> api{nullptr};  // set once by load_api
  std::atomic<int> open_routes{0};             // routes not yet claimed: the malloc path's hint
  std::atomic<int> live_routes{0};             // routes open, claimed or not (routes.size() without the lock)
  std::atomic<unsigned long> claims{0};        // captures claimed so far: a refused malloc retries if it grew
  std::atomic<unsigned long long> used_devices{0};  // devices cgc allocated on (empty_cache's list)
};

State& state() {
  static State* s = new State;
  return *s;
}



std::string cgc_message(const char* what) { return std::string(what) + ": " + api()->cgc_last_error(); }

// (lock held) The cgc context of `device`, made on first need.
cgc_context_t context_for(State& s, int device) {
  if (device < 0 || device >= kMaxDevices) throw std::runtime_error("cgc torch: device " + std::to_string(device) + " is out of range");
  if (s.contexts[device] == nullptr && api()->cgc_context_create(device, &s.contexts[device]) != CGC_SUCCESS)
    throw std::runtime_error(cgc_message("cgc torch: cgc_context_create"));
  return s.contexts[device];
}

void drop_user(State& s, const PoolKey& key);

// (lock held) The entry of `key`, its cgc pool made if it has none, with one user more. Throws
// std::runtime_error (nothing changed) when the context or the pool cannot be made.
PoolEntry& use_pool(State& s, const PoolKey& key) {
  cgc_context_t ctx = context_for(s, std::get<0>(key));
  PoolEntry& entry = s.pools[key];
  if (entry.pool == nullptr && api()->cgc_pool_create(ctx, &entry.pool) != CGC_SUCCESS) {
    s.pools.erase(key);
    throw std::runtime_error(cgc_message("cgc torch: cgc_pool_create"));
  }
  entry.users++;
  return entry;
}

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
      fprintf(stderr, "cgc torch: %s\n", api()->cgc_last_error());
  } else {
    s.open_routes.fetch_sub(1, std::memory_order_release);
  }
  s.live_routes.fetch_sub(1, std::memory_order_release);
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
    if (it->thread != self || it->scope) {
      ++it;
    } else if (it->claimed) {
      it = claimed_capture_is_over(s, *it) ? end_route(s, it, RouteEnd::kCaptureFailed) : it + 1;
    } else {
      it = unclaimed ? end_route(s, it, RouteEnd::kNeverClaimed) : it + 1;
    }
  }
}

// cudaStreamPerThread: a stream that no capture has begun on when a route begins. A capture's
// filter ("the stream takes part in my capture") refuses it, since PyTorch begins a route before
// its capture; a scope's ("the allocating thread is mine") accepts it on the thread that begins.
constexpr uintptr_t kPerThreadStream = 0x2;

void begin_route(int device, unsigned long long id0, unsigned long long id1, StreamFilter filter) {
  State& s = state();
  PoolKey key{device, id0, id1};
  bool scope = false;
  try {
    scope = filter(reinterpret_cast<CUstream_st*>(kPerThreadStream));
  } catch (...) {  // PyTorch's filters ask the runtime; a failure there means "not a scope"
    scope = false;
  }
  std::lock_guard<std::mutex> hold(s.lock);
  // Capture routes this thread left open belong to captures that failed, unless a claimed one's
  // capture still runs (on another stream: PyTorch allows captures into different pools at once).
  // A scope begun inside a capture ends none: that capture is under way.
  if (!scope) end_failed_routes(s, true);
  if (find_route(s, key) != s.routes.end())
    throw std::runtime_error("cgc torch: beginAllocateToPool: pool (" + std::to_string(id0) + ", " +
                             std::to_string(id1) +
                             ") is being recorded into by another thread's capture (PyTorch's own allocator refuses "
                             "this too: one capture per pool at a time)");
  PoolEntry& entry = use_pool(s, key);  // may throw: before anything changes
  Route route{key, std::move(filter), entry.pool, std::this_thread::get_id(), false};
  route.scope = scope;
  s.routes.push_back(std::move(route));
  s.open_routes.fetch_add(1, std::memory_order_release);
  s.live_routes.fetch_add(1, std::memory_order_release);
}

void drop_user(State& s, const PoolKey& key) {
  auto it = s.pools.find(key);
  if (it == s.pools.end() || --it->second.users > 0) return;
  auto route = find_route(s, key);
  if (route != s.routes.end()) end_route(s, route, RouteEnd::kByPyTorch);
  if (api()->cgc_pool_release(it->second.pool) != CGC_SUCCESS)
    fprintf(stderr, "cgc torch: %s\n", api()->cgc_last_error());
  s.pools.erase(it);
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
      // A known scope routes eager memory; a capture on its thread uses the capture's own route.
      if (std::get<0>(r.key) != device || r.claimed || r.scope || (r.thread == self) != (pass == 0)) continue;
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


// The cgc pool of the unclaimed route of `device` whose filter accepts `stream`, the calling
// thread's first, retained for the caller; nullptr when none does. PyTorch's own allocator asks
// its open routes at every allocation the same way: a capture's filter accepts only the streams
// of its capture, a scope's those of its thread.
cgc_pool_t scope_pool(int device, void* stream, PoolKey* key) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  std::thread::id self = std::this_thread::get_id();
  for (int pass = 0; pass < 2; pass++) {
    for (Route& r : s.routes) {
      if (r.claimed || std::get<0>(r.key) != device || (r.thread == self) != (pass == 0)) continue;
      bool accepts = false;
      try {
        accepts = r.filter(static_cast<CUstream_st*>(stream));
      } catch (...) {
        accepts = false;
      }
      if (!accepts || api()->cgc_pool_retain(r.pool) != CGC_SUCCESS) continue;
      *key = r.key;
      return r.pool;
    }
  }
  return nullptr;
}

// An eager allocation from a route's pool, ordered on the native `stream`. nullptr with cgc's
// status in *st on failure (CAPTURE_UNSUPPORTED: the stream captures, and the allocation goes to
// its capture's pool instead).
void* scope_malloc(cgc_pool_t pool, int device, size_t size, void* stream, cgc_status_t* st) {
  State& s = state();
  cgc_context_t ctx;
  {
    std::lock_guard<std::mutex> hold(s.lock);
    ctx = context_for(s, device);
  }
  cgc_stream_t handle = nullptr;
  void* p = nullptr;
  *st = api()->cgc_stream_wrap(ctx, stream, &handle);
  if (*st != CGC_SUCCESS) return nullptr;
  *st = api()->cgc_pool_malloc(pool, size, handle, &p);
  api()->cgc_stream_destroy(handle);  // a wrapped stream: the handle goes, the stream stays
  return p;
}

// A route whose filter accepted a stream that does not capture is a scope (see Route::scope).
void mark_scope(const PoolKey& key) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  auto it = find_route(s, key);
  if (it != s.routes.end()) it->scope = true;
}

}  // namespace

const cgc_api_t* api() { return state().api.load(std::memory_order_acquire); }

void put_error(char* error, size_t size, const char* fmt, ...) {
  if (error == nullptr || size == 0) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(error, size, fmt, args);
  va_end(args);
}

int load_api(const char* libcgc_path, char* error, size_t error_size) {
  State& s = state();
  if (s.api.load() != nullptr) return 0;
  void* lib = dlopen(libcgc_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    put_error(error, error_size, "cgc torch: cannot load %s: %s", libcgc_path, dlerror());
    return -1;
  }
  using GetApi = cgc_status_t (*)(uint32_t, const cgc_api_t**);
  auto get_api = reinterpret_cast<GetApi>(dlsym(lib, "cgc_get_api"));
  const cgc_api_t* table = nullptr;
  // The version this file was built with (1.6: cgc_last_status, cgc_memory_snapshot,
  // cgc_pool_claim): an older library refuses it, and every entry of the table is there.
  if (get_api == nullptr || get_api(CGC_VERSION, &table) != CGC_SUCCESS ||
      table->struct_size < offsetof(cgc_api_t, cgc_pool_claim) + sizeof(void*)) {
    put_error(error, error_size,
              "cgc torch: %s is not libcgc.so.1 of version %d.%d or newer (its table lacks what PyTorch's allocator "
              "calls)",
              libcgc_path, CGC_VERSION_MAJOR, CGC_VERSION_MINOR);
    return -1;
  }
  s.api.store(table, std::memory_order_release);
  return 0;
}

void begin_allocate_to_pool(int device, unsigned long long id0, unsigned long long id1, StreamFilter filter) {
  begin_route(device, id0, id1, std::move(filter));
}

void end_allocate_to_pool(int device, unsigned long long id0, unsigned long long id1) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  auto it = find_route(s, PoolKey{device, id0, id1});
  if (it != s.routes.end()) end_route(s, it, RouteEnd::kByPyTorch);
}

void release_pool(int device, unsigned long long id0, unsigned long long id1) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  drop_user(s, PoolKey{device, id0, id1});
}

void create_or_incref_pool(int device, unsigned long long id0, unsigned long long id1) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  use_pool(s, PoolKey{device, id0, id1});  // may throw: before anything changes
}

int pool_use_count(int device, unsigned long long id0, unsigned long long id1) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  auto it = s.pools.find(PoolKey{device, id0, id1});
  return it == s.pools.end() ? 0 : static_cast<int>(it->second.users);
}

void record_stream(void* ptr, CUstream_st* stream) {
  if (ptr == nullptr) return;  // an empty tensor's storage
  cgc_status_t st = api()->cgc_record_stream_native(ptr, stream);
  // Memory cgc did not allocate (an IPC or DLPack tensor): nothing to record, as PyTorch's own
  // allocator skips pointers it does not know.
  if (st != CGC_SUCCESS && st != CGC_ERROR_INVALID_ARGUMENT)
    throw std::runtime_error(std::string("cgc: ") + api()->cgc_last_error());
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

bool routed_capture(int device, unsigned long long capture_id, Routed* routed) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  for (const Route& r : s.routes) {
    if (r.claimed && r.capture_id == capture_id && std::get<0>(r.key) == device) {
      routed->id0 = std::get<1>(r.key);
      routed->id1 = std::get<2>(r.key);
      return true;
    }
  }
  return false;
}

void* malloc_routed(ssize_t size, int device, void* stream, bool eager_routes, Routed* routed) {
  const cgc_api_t* a = api();
  note_device(device);
  State& s = state();
  *routed = Routed{};
  if (eager_routes && size > 0 && s.open_routes.load(std::memory_order_acquire) > 0) {
    PoolKey key;
    cgc_pool_t pool = scope_pool(device, stream, &key);
    if (pool != nullptr) {
      cgc_status_t st = CGC_SUCCESS;
      void* p = scope_malloc(pool, device, static_cast<size_t>(size), stream, &st);
      a->cgc_pool_release(pool);  // scope_pool's reference: the block keeps the pool alive
      if (st != CGC_ERROR_CAPTURE_UNSUPPORTED) {  // a capturing stream allocates from its capture's pool
        if (p != nullptr) {
          *routed = Routed{std::get<1>(key), std::get<2>(key)};
          mark_scope(key);
        }
        return p;
      }
    }
  }
  unsigned long claims_before = s.claims.load(std::memory_order_acquire);
  void* p = a->cgc_torch_malloc(size, device, stream);
  if (p == nullptr && size > 0 &&
      (s.open_routes.load(std::memory_order_acquire) > 0 || s.claims.load(std::memory_order_acquire) != claims_before) &&
      claim_capture(device, stream, claims_before))
    p = a->cgc_torch_malloc(size, device, stream);
  return p;
}

void* malloc_from_pool(int device, unsigned long long id0, unsigned long long id1, size_t size, void* stream) {
  cgc_pool_t pool = nullptr;
  {
    State& s = state();
    std::lock_guard<std::mutex> hold(s.lock);
    auto it = s.pools.find(PoolKey{device, id0, id1});
    if (it == s.pools.end() || api()->cgc_pool_retain(it->second.pool) != CGC_SUCCESS) return nullptr;
    pool = it->second.pool;
  }
  cgc_status_t st = CGC_SUCCESS;
  void* p = scope_malloc(pool, device, size, stream, &st);
  api()->cgc_pool_release(pool);  // the block keeps the pool alive
  return p;
}

cgc_pool_t pool_for(int device, unsigned long long id0, unsigned long long id1, bool create, char* error,
                    size_t error_size) {
  State& s = state();
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
    return use_pool(s, key).pool;
  } catch (const std::exception& e) {
    put_error(error, error_size, "%s", e.what());
    return nullptr;
  }
}

bool torch_pool_id_of(int device, cgc_pool_t pool, unsigned long long* id0, unsigned long long* id1) {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  for (const auto& [key, entry] : s.pools) {
    if (std::get<0>(key) == device && entry.pool == pool) {
      *id0 = std::get<1>(key);
      *id1 = std::get<2>(key);
      return true;
    }
  }
  return false;
}

size_t pool_ids(int device, unsigned long long* ids, size_t max) {
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

bool device_used(int device) {
  if (device < 0 || device >= kMaxDevices) return false;
  return (state().used_devices.load(std::memory_order_acquire) >> device & 1) != 0;
}

bool any_route_open() { return state().live_routes.load(std::memory_order_acquire) > 0; }

int open_routes() {
  State& s = state();
  std::lock_guard<std::mutex> hold(s.lock);
  return static_cast<int>(s.routes.size());
}

}  // namespace cgc_torch

// ---- what the Python binding calls (ctypes), exported by both libraries that hold the routes ----

#define CGC_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

// The cgc pool behind torch pool id (id0, id1) of `device`, or NULL when there is none (see
// pool_for): a reference of the caller's without `create`, one user more and lent with it.
CGC_TORCH_EXPORT cgc_pool_t cgc_torch_bridge_pool(int device, unsigned long long id0, unsigned long long id1,
                                                  int create, char* error, size_t error_size) {
  if (cgc_torch::api() == nullptr) {
    cgc_torch::put_error(error, error_size, "cgc_torch_bridge_pool: cgc's function table is not loaded yet");
    return nullptr;
  }
  return cgc_torch::pool_for(device, id0, id1, create != 0, error, error_size);
}

// One user of torch pool id (id0, id1) fewer (see cgc_torch_bridge_pool).
CGC_TORCH_EXPORT void cgc_torch_bridge_pool_release(int device, unsigned long long id0, unsigned long long id1) {
  cgc_torch::release_pool(device, id0, id1);
}

// The torch pool ids of `device` that have a cgc pool, written to ids (pairs) up to `max`;
// returns how many there are.
CGC_TORCH_EXPORT size_t cgc_torch_bridge_pool_ids(int device, unsigned long long* ids, size_t max) {
  return cgc_torch::pool_ids(device, ids, max);
}

// Routes begun and not ended (a capture under way, or one that failed before its end).
CGC_TORCH_EXPORT int cgc_torch_bridge_open_routes(void) { return cgc_torch::open_routes(); }
