// A multi-thread random API-sequence test of the whole library on a real GPU.
//
//   stress_test [--seed N] [--seconds S] [--threads T] [--illegal] [--no-adopted] [--no-pool-malloc]
//
// Threads share one context, the device cache and some streams; each runs a random sequence of:
// allocations with known contents (checked before every free), cgc_record_stream on another
// stream followed by an immediate free, captures (ThreadLocal and Relaxed; with --illegal also
// Global, while other threads synchronise) with fork/join, side-stream allocations, blocks freed
// inside the capture, deliberate unjoined forks and bad calls, replays on several streams with
// outputs checked, graphs destroyed while their replay still runs, streams created and destroyed
// with work pending, and cgc_empty_cache; host functions eagerly and in captures (their data must
// be released exactly once each by the end), copies out through cgc_memcpy_dtoh_async, updates
// of graphs by capture (1.2), WHILE bodies that allocate from the capture's pool and draw
// from a generator (1.3), and captures begun with the driver alone (as PyTorch begins its own)
// that a new pool adopts, allocated into through cgc_torch_malloc on two streams, with
// cgc_record_stream_native, replayed, checked and the pool released (1.4); eager blocks from
// cgc_pool_malloc (1.5) of the thread's own pool, the one its graphs record into (their contents
// are checked like other blocks: a graph reusing one, or one reusing a graph's memory, shows), and
// of an NCCL pool that every thread shares (a one-rank communicator's registered arena; absent
// without NCCL), released at the end. Host functions call cgc (each call must be refused: none
// may reach the driver there). Beside the workers a thread frees memory of its own with raw
// cuMemFree behind a long kernel, over and over (on driver 580 cuEventRecord and launches wait
// behind it), and every worker times cache-hit cgc_malloc + cgc_free pairs on a stream of its own:
// the worst pair is reported (target: under 1 ms; no cgc lock may be held across a driver call
// that waits, so no hit ever waits behind that free). At the end every block is freed and the
// device's stats must read bytes_allocated == 0 and, after cgc_empty_cache, bytes_reserved == 0.
// With NCCL, one more thread makes and releases one-rank communicators and NCCL pools beside the
// captures (a capture begun meanwhile that NCCL's setup or teardown would break is refused).
// A saver thread captures two graphs of one structure into a pool at fixed addresses, each also
// drawing from a generator, makes them a family and launches both, saves them, gives everything
// back, restores them (as a family every other round, on one, two or cgc's choice of threads)
// and checks them and the restored generator's state, over and over (1.6).
//
// Exit status: 0 when every check held (or there is no GPU: "skipped"), 1 otherwise. The last
// line is a summary the bundle's runner reads: "STRESS: ok|FAILED ...".
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <array>
#include <cstring>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "capi/cgc.h"
#include "src/driver.h"

extern "C" const unsigned char cgc_test_kernels_fatbin[];

namespace {

struct Options {
  uint64_t seed = 1;
  double seconds = 10;
  int threads = 8;
  bool illegal = false;
  bool adopted = true;  // --no-adopted leaves 1.4's driver-begun captures out (to compare)
  bool pool_malloc = true;  // --no-pool-malloc leaves 1.5's cgc_pool_malloc out (to compare)
};

struct Counters {
  std::atomic<long> ops{0}, mallocs{0}, frees{0}, checks{0}, captures{0}, captures_failed_on_purpose{0},
      captures_broken{0}, replays{0}, replays_checked{0}, refused{0}, stream_swaps{0}, empty_caches{0},
      destroyed_while_running{0};
  // Host functions (1.1): launched (eager or captured; each call releases its data exactly once),
  // released, and calls run (eager once, captured at every replay).
  std::atomic<long> host_funcs{0}, host_releases{0}, host_calls{0};
  std::atomic<long> updates{0}; // 1.2: graphs updated in place by a capture
  std::atomic<long> loops{0};   // 1.3: captures with a WHILE body that allocates and draws
  std::atomic<long> adopted{0}; // 1.4: captures begun with the driver, adopted by a pool
  std::atomic<long> pool_mallocs{0}, arena_mallocs{0}, arena_full{0}; // 1.5: cgc_pool_malloc
  std::atomic<long> bad_contents{0}, unexpected{0};
  std::atomic<long> hit_pairs{0}, worst_hit_ns{0};      // timed cache-hit cgc_malloc + cgc_free pairs
  std::atomic<long> foreign_frees{0}, foreign_free_ns{0};  // the raw cuMemFree thread: count, longest
  std::atomic<long> host_refusals{0};                     // cgc calls refused inside host functions
};

Counters counters;
std::mutex report_lock;
cgc_context_t ctx = nullptr;
CUcontext primary = nullptr;
CUfunction k_add = nullptr, k_stamp = nullptr, k_spin = nullptr;
std::vector<cgc_stream_t> shared_streams;
Options opts;
cgc_comm_t arena_comm = nullptr;  // a one-rank communicator, for the shared NCCL pool
cgc_pool_t arena_pool = nullptr;  // 1.5: every thread's cgc_pool_malloc shares it (NULL without NCCL)
std::atomic<size_t> pool_reserved_at_end{0};  // the threads' pools' memory when they are released
// A capture begun with the driver is unknown to cgc until a pool adopts it: a device-wide
// synchronisation in between (an NCCL pool's release, NCCL's own teardown) breaks it, as any
// library's would. Like a framework that begins its own captures, the test keeps such calls out
// of that window: adopted captures hold it shared from their begin to their adoption, the NCCL
// churn thread holds it alone around its setup and teardown calls.
std::shared_mutex foreign_capture_window;
// Set while the saver releases its pool at fixed addresses: cgc refuses that release while an
// adopted capture is open (it synchronises the device), and at 16 threads one nearly always is, so
// no adopted capture begins meanwhile and the open ones drain (a release refused for 30 s was
// seen on an H200).
std::atomic<int> saver_releasing{0};

constexpr unsigned kIn = 4096;  // floats a graph reads and writes

// A status nobody expected: counted, and the first few are printed with the message.
void Unexpected(const char* what, cgc_status_t st) {
  long n = ++counters.unexpected;
  if (n <= 20) {
    std::lock_guard<std::mutex> g(report_lock);
    std::fprintf(stderr, "UNEXPECTED %s: %s -- %s\n", what, cgc_status_string(st), cgc_last_error());
  }
}

bool Expect(const char* what, cgc_status_t st, std::initializer_list<cgc_status_t> allowed) {
  for (cgc_status_t a : allowed)
    if (st == a) {
      if (st == CGC_ERROR_CAPTURE_UNSUPPORTED) counters.refused++;
      return st == CGC_SUCCESS;
    }
  Unexpected(what, st);
  return false;
}

CUresult Launch(CUfunction f, CUstream s, unsigned n, void** args) {
  unsigned block = 256, grid = (n + block - 1) / block;
  return cgc__drv.cuLaunchKernel(f, grid ? grid : 1, 1, 1, block, 1, 1, 0, s, args, nullptr);
}

void CountHostCall(void*) { counters.host_calls++; }

// A host function that calls cgc: every call that would reach the driver must be refused there.
struct InsideHost {
  cgc_event_t event;
  cgc_stream_t stream;
};
void CallCgcInside(void* user) {
  counters.host_calls++;
  auto* in = static_cast<InsideHost*>(user);
  int complete = 0, count = 0;
  cgc_capture_status_t status;
  for (cgc_status_t st : {cgc_event_query(in->event, &complete), cgc_stream_synchronize(in->stream),
                          cgc_stream_capture_status(in->stream, &status, nullptr), cgc_device_count(&count)}) {
    if (st == CGC_ERROR_INVALID_STATE)
      counters.host_refusals++;
    else
      Unexpected("a cgc call inside a host function", st);
  }
}
void ReleaseInsideHost(void* user) {
  counters.host_releases++;
  delete static_cast<InsideHost*>(user);
}
void CountHostRelease(void*) { counters.host_releases++; }

CUstream Native(cgc_stream_t s) { return static_cast<CUstream>(cgc_stream_native(s)); }

// Synchronises `s` through cgc; while another thread's Global capture makes that illegal cgc
// refuses, and we wait and try again.
bool Sync(cgc_stream_t s) {
  for (;;) {
    cgc_status_t st = cgc_stream_synchronize(s);
    if (st == CGC_SUCCESS) return true;
    if (st != CGC_ERROR_CAPTURE_UNSUPPORTED) {
      Unexpected("cgc_stream_synchronize", st);
      return false;
    }
    counters.refused++;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

struct Block {
  void* p;
  unsigned words;
  uint32_t seed;
  cgc_stream_t stream;
};

struct Graph {
  cgc_graph_t g;
  void* out;       // the graph's output block (allocated in the capture)
  bool shared_pool;
};

class Worker {
 public:
  explicit Worker(int index) : index_(index), rng_(opts.seed * 1000003u + index) {}

  void Run() {
    if (cgc__drv.cuCtxPushCurrent(primary) != CUDA_SUCCESS) {
      Unexpected("cuCtxPushCurrent", CGC_ERROR_CUDA);
      return;
    }
    Setup();
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts.seconds);
    while (host_ != nullptr && std::chrono::steady_clock::now() < end) {
      Step();
      counters.ops++;
    }
    Teardown();
    CUcontext popped;
    cgc__drv.cuCtxPopCurrent(&popped);
  }

 private:
  void Setup() {
    for (auto& s : own_) Expect("cgc_stream_create", cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s), {CGC_SUCCESS});
    Expect("cgc_pool_create", cgc_pool_create(ctx, &pool_), {CGC_SUCCESS});
    Expect("cgc_rng_create", cgc_rng_create(ctx, 1000 + index_, &gen_), {CGC_SUCCESS});
    for (auto& e : events_) Expect("cgc_event_create", cgc_event_create(ctx, 0, &e), {CGC_SUCCESS});
    Expect("cgc_stream_create", cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &hit_stream_), {CGC_SUCCESS});
    Expect("cgc_malloc (anchor)", cgc_malloc(ctx, 512, hit_stream_, &anchor_), {CGC_SUCCESS});
    void* warm = nullptr;  // the 4 KiB block the timed pairs take, cut from the anchor's segment
    if (Expect("cgc_malloc (hit)", cgc_malloc(ctx, 4096, hit_stream_, &warm), {CGC_SUCCESS}))
      Expect("cgc_free (hit)", cgc_free(warm), {CGC_SUCCESS});
    // Page-locked memory: cuMemAllocHost would break another thread's Global capture, so this
    // thread asks for it in Relaxed mode, as a well-behaved framework does.
    cgc_capture_mode_t mode = CGC_CAPTURE_MODE_RELAXED;
    cgc_capture_mode_exchange(&mode);
    if (cgc__drv.cuMemAllocHost(&host_, 8 << 20) != CUDA_SUCCESS) host_ = nullptr;
    for (auto& e : raw_events_)  // the driver's own, for the captures cgc did not begin
      if (cgc__drv.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) host_ = nullptr;
    cgc_capture_mode_exchange(&mode);
    if (host_ == nullptr) {
      Unexpected("cuMemAllocHost", CGC_ERROR_OUT_OF_MEMORY);
      return;
    }
    // The graphs' input: random floats, eager memory of this thread.
    Expect("cgc_malloc", cgc_malloc(ctx, kIn * 4, own_[0], &in_), {CGC_SUCCESS});
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    auto* f = static_cast<float*>(host_);
    for (unsigned i = 0; i < kIn; i++) f[i] = input_[i] = d(rng_);
    cgc__drv.cuMemcpyHtoDAsync(Dev(in_), host_, kIn * 4, Native(own_[0]));
    Sync(own_[0]);
    for (unsigned i = 0; i < kIn; i++) expected_[i] = ((input_[i] + 1.0f) + 2.0f) + 0.5f;
  }

  static CUdeviceptr Dev(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

  cgc_stream_t AnyStream() {
    if (rng_() % 3 == 0) return shared_streams[rng_() % shared_streams.size()];
    return own_[rng_() % own_.size()];
  }

  void Step() {
    HitPair();
    unsigned r = rng_() % 100;
    if (r < 28) return MallocStamp();
    if (r < 50) return CheckFree(rng_() % 8 == 0);
    if (r < 56) return UseElsewhere();
    if (r < 70) {
      unsigned kind = rng_() % 10;
      if (kind < 2) return UpdateGraph();
      if (kind < 4 && opts.adopted) return AdoptedCapture();
      return CaptureGraph(nullptr);
    }
    if (r < 86) return Replay();
    if (r < 93) return DestroyGraph();
    if (r < 95) return SwapStream();
    if (r < 97) return EagerHostFunction();
    if (r < 99) return EmptyCache();
    BadCalls();
  }

  void MallocStamp() {
    size_t bytes = (rng_() % 10 == 0) ? (1 << 20) + rng_() % (5 << 20) : 256 + rng_() % (128 << 10);
    cgc_stream_t s = AnyStream();
    void* p = nullptr;
    unsigned from = opts.pool_malloc ? rng_() % 8 : 2;
    if (from == 0) {  // eager memory of the pool this thread's graphs record into (on its own
      // streams: between steps none of them captures)
      s = own_[rng_() % own_.size()];
      if (!Expect("cgc_pool_malloc", cgc_pool_malloc(pool_, bytes, s, &p), {CGC_SUCCESS})) return;
      counters.pool_mallocs++;
    } else if (from == 1 && arena_pool != nullptr) {  // the shared, fixed NCCL arena: it may be full
      s = own_[rng_() % own_.size()];
      cgc_status_t st = cgc_pool_malloc(arena_pool, bytes, s, &p);
      if (!Expect("cgc_pool_malloc (NCCL pool)", st, {CGC_SUCCESS, CGC_ERROR_OUT_OF_MEMORY})) return;
      if (st != CGC_SUCCESS) {
        counters.arena_full++;
        return;
      }
      counters.arena_mallocs++;
    } else if (!Expect("cgc_malloc", cgc_malloc(ctx, bytes, s, &p), {CGC_SUCCESS})) {
      return;
    }
    counters.mallocs++;
    Block b{p, static_cast<unsigned>(bytes / 4), static_cast<uint32_t>(rng_()), s};
    Stamp(b, b.stream);
    live_.push_back(b);
    if (live_.size() > 48) CheckFree(false);
  }

  void Stamp(const Block& b, cgc_stream_t s) {
    CUdeviceptr d = Dev(b.p);
    uint32_t seed = b.seed;
    unsigned n = b.words;
    void* args[] = {&d, &seed, &n};
    if (Launch(k_stamp, Native(s), n, args) != CUDA_SUCCESS) Unexpected("stamp launch", CGC_ERROR_CUDA);
  }

  bool Check(const Block& b) {
    if (host_ == nullptr) return true;
    unsigned words = b.words < (8u << 20) / 4 ? b.words : (8u << 20) / 4;
    if (cgc__drv.cuMemcpyDtoHAsync(host_, Dev(b.p), words * 4ull, Native(b.stream)) != CUDA_SUCCESS) {
      Unexpected("cuMemcpyDtoHAsync", CGC_ERROR_CUDA);
      return false;
    }
    if (!Sync(b.stream)) return false;
    counters.checks++;
    const uint32_t* w = static_cast<const uint32_t*>(host_);
    for (unsigned i = 0; i < words; i += 1 + i / 64) {
      if (w[i] != b.seed * 2654435761u + i) {
        if (++counters.bad_contents <= 5) {
          std::lock_guard<std::mutex> g(report_lock);
          std::fprintf(stderr, "BAD CONTENTS: block %p word %u is %08x, expected %08x\n", b.p, i, w[i],
                       b.seed * 2654435761u + i);
        }
        return false;
      }
    }
    return true;
  }

  void CheckFree(bool all) {
    while (!live_.empty()) {
      size_t k = rng_() % live_.size();
      Block b = live_[k];
      live_.erase(live_.begin() + long(k));
      Check(b);
      if (Expect("cgc_free", cgc_free(b.p), {CGC_SUCCESS})) counters.frees++;
      if (!all) return;
    }
  }

  // A stream other than `not_this`: one of this thread's or a shared one.
  cgc_stream_t OtherStream(cgc_stream_t not_this) {
    for (;;) {
      cgc_stream_t s = AnyStream();
      if (s != not_this) return s;
    }
  }

  // The block is rewritten on another stream after a while and marked used there. Freed at once,
  // it must not be handed out before that work is done (a later owner's check would see the late
  // write); kept, its use stream may be destroyed before the free, which must then not touch it.
  void UseElsewhere() {
    if (live_.empty()) return;
    size_t k = rng_() % live_.size();
    Block b = live_[k];
    live_.erase(live_.begin() + long(k));
    cgc_stream_t other = OtherStream(b.stream);
    Expect("cgc_event_record", cgc_event_record(events_[0], b.stream), {CGC_SUCCESS});
    Expect("cgc_stream_wait_event", cgc_stream_wait_event(other, events_[0]), {CGC_SUCCESS});
    long long cycles = 200000 + rng_() % 2000000;
    void* args[] = {&cycles};
    cgc__drv.cuLaunchKernel(k_spin, 1, 1, 1, 1, 1, 1, 0, Native(other), args, nullptr);
    Block late{b.p, b.words, b.seed ^ 0x5a5a5a5au, other};
    Stamp(late, other);
    Expect("cgc_record_stream", cgc_record_stream(b.p, other), {CGC_SUCCESS});
    if (rng_() % 3 == 0) {
      live_.push_back(late);  // checked on `other`, after the late write
      return;
    }
    if (Expect("cgc_free", cgc_free(b.p), {CGC_SUCCESS})) counters.frees++;
  }

  cgc_capture_mode_t PickMode() {
    if (opts.illegal && rng_() % 2 == 0) return CGC_CAPTURE_MODE_GLOBAL;
    return rng_() % 2 ? CGC_CAPTURE_MODE_THREAD_LOCAL : CGC_CAPTURE_MODE_RELAXED;
  }

  // What a call inside a capture may return: in the illegal mix another thread may have broken
  // the capture.
  std::initializer_list<cgc_status_t> InCapture() const {
    static const std::initializer_list<cgc_status_t> legal = {CGC_SUCCESS};
    static const std::initializer_list<cgc_status_t> illegal = {CGC_SUCCESS, CGC_ERROR_CAPTURE_INVALIDATED};
    return opts.illegal ? illegal : legal;
  }

  // in -> t = in + 1 (origin) -> u = t + 2 (side) -> out = u + 0.5 (origin), t and u freed inside.
  // 1.2: a graph of a private pool captured again into itself (cgc_capture_options_t.update):
  // the same topology, so the executable is updated in place while earlier replays may run.
  void UpdateGraph() {
    for (size_t k = 0; k < graphs_.size(); k++)
      if (!graphs_[k].shared_pool) return CaptureGraph(&graphs_[k]);
    CaptureGraph(nullptr);
  }

  void CaptureGraph(Graph* target) {
    if (target == nullptr && graphs_.size() >= 12) return DestroyGraph();
    // Graphs sharing the thread's pool are captured on its two stable streams (own_[0] and
    // own_[3] are never swapped), as frameworks capture on fixed streams: a pool's free blocks
    // serve later captures on the stream they were freed on. Graphs with a private pool use
    // the streams that come and go.
    bool shared_pool = target != nullptr ? target->shared_pool : rng_() % 2 == 0;
    cgc_stream_t origin = shared_pool ? own_[0] : own_[1 + rng_() % 2];
    cgc_stream_t side = shared_pool ? own_[3] : (origin == own_[1] ? own_[2] : own_[1]);
    cgc_capture_options_t o = {sizeof o, PickMode(), shared_pool ? pool_ : nullptr,
                               rng_() % 4 == 0 ? CGC_CAPTURE_UPLOAD : 0u, target != nullptr ? target->g : nullptr};
    // Refused while the NCCL thread's setup or teardown would break the capture (a gate).
    if (!Expect("cgc_capture_begin", cgc_capture_begin(origin, &o), {CGC_SUCCESS, CGC_ERROR_CAPTURE_UNSUPPORTED})) return;
    bool unjoined = rng_() % 16 == 0;
    std::vector<void*> allocated;
    void *t = nullptr, *u = nullptr, *out = nullptr;
    bool ok = Expect("cgc_malloc (capture)", cgc_malloc(ctx, kIn * 4, origin, &t), InCapture());
    if (ok) allocated.push_back(t);
    ok = ok && Add(t, in_, 1.0f, origin);
    ok = ok && Expect("cgc_event_record", cgc_event_record(events_[1], origin), InCapture());
    ok = ok && Expect("cgc_stream_wait_event", cgc_stream_wait_event(side, events_[1]), InCapture());
    ok = ok && Expect("cgc_malloc (side)", cgc_malloc(ctx, kIn * 4, side, &u), InCapture());
    if (u) allocated.push_back(u);
    ok = ok && Add(u, t, 2.0f, side);
    ok = ok && Expect("cgc_record_stream", cgc_record_stream(t, side), {CGC_SUCCESS});
    if (ok && !unjoined) {
      ok = Expect("cgc_event_record", cgc_event_record(events_[2], side), InCapture()) &&
           Expect("cgc_stream_wait_event", cgc_stream_wait_event(origin, events_[2]), InCapture());
    }
    ok = ok && Expect("cgc_malloc (capture)", cgc_malloc(ctx, kIn * 4, origin, &out), InCapture());
    if (out) allocated.push_back(out);
    if (ok && !unjoined && rng_() % 3 == 0) {
      ok = LoopOnce(origin, out, u);
    } else {
      ok = ok && (unjoined || Add(out, u, 0.5f, origin));
    }
    if (unjoined) ok = ok && Add(out, t, 0.5f, origin);
    if (ok && rng_() % 2 == 0) {  // a host node: its data goes when the graph (or the failed capture) does
      counters.host_funcs++;      // counted only when launched: each launch releases exactly once
      ok = Expect("cgc_launch_host_func (capture)", cgc_launch_host_func(origin, CountHostCall, nullptr, CountHostRelease),
                  InCapture());
    }
    // Bad calls inside a capture: refused, and the capture goes on.
    Expect("cgc_capture_begin (again)", cgc_capture_begin(origin, &o), {CGC_ERROR_INVALID_STATE});
    cgc_graph_t wrong = nullptr;
    Expect("cgc_capture_end (side)", cgc_capture_end(side, &wrong), {CGC_ERROR_INVALID_STATE});
    Expect("cgc_stream_synchronize (capturing)", cgc_stream_synchronize(origin), {CGC_ERROR_CAPTURE_UNSUPPORTED});
    // t and u are freed in the capture: their memory serves later allocations of this capture.
    if (t) Expect("cgc_free (capture)", cgc_free(t), {CGC_SUCCESS});
    if (u) Expect("cgc_free (capture)", cgc_free(u), {CGC_SUCCESS});
    cgc_graph_t g = nullptr;
    cgc_status_t st = cgc_capture_end(origin, &g);
    counters.captures++;
    if (unjoined) {
      counters.captures_failed_on_purpose++;
      Expect("cgc_capture_end (unjoined)", st,
             opts.illegal ? std::initializer_list<cgc_status_t>{CGC_ERROR_CAPTURE_UNJOINED, CGC_ERROR_CAPTURE_INVALIDATED}
                          : std::initializer_list<cgc_status_t>{CGC_ERROR_CAPTURE_UNJOINED});
      if (g) cgc_graph_destroy(g);
      if (out) Expect("cgc_free", cgc_free(out), {CGC_SUCCESS});
      cgc_capture_status_t cs = CGC_CAPTURE_ACTIVE;
      cgc_stream_capture_status(side, &cs, nullptr);
      if (cs != CGC_CAPTURE_NONE) Unexpected("side stream left capturing", CGC_ERROR_INVALID_STATE);
      return;
    }
    if (opts.illegal && st == CGC_ERROR_CAPTURE_INVALIDATED) counters.captures_broken++;
    if (!Expect("cgc_capture_end", st, InCapture()) || !ok) {
      if (g && g != (target != nullptr ? target->g : nullptr)) cgc_graph_destroy(g);
      if (out) cgc_free(out);
      return;
    }
    if (target != nullptr) {
      // Updated: the graph now writes the new output. Replays launched before may still write
      // the old one, on any stream: wait for them before it goes back.
      if (g != target->g) Unexpected("cgc_capture_end (update) handed back another graph", CGC_ERROR_INTERNAL);
      counters.updates++;
      for (cgc_stream_t s : shared_streams) Sync(s);
      for (cgc_stream_t s : own_) Sync(s);
      Expect("cgc_free (the output before the update)", cgc_free(target->out), {CGC_SUCCESS});
      target->out = out;
      return;
    }
    graphs_.push_back(Graph{g, out, shared_pool});
  }

  // 1.3: out = u + 0.5 inside a WHILE body that runs once per replay (its condition, graph
  // memory, is set before the node and cleared by the body), through a temporary the body
  // allocates from the capture's pool and frees, after a generator draw into it that the next
  // step overwrites: allocations, draws and loop states of many threads' captures at once.
  bool LoopOnce(cgc_stream_t origin, void* out, void* u) {
    void *condition = nullptr, *tmp = nullptr;
    if (!Expect("cgc_malloc (condition)", cgc_malloc(ctx, sizeof(uint32_t), origin, &condition), InCapture()))
      return false;
    bool ok = Expect("cgc_memset_d32_async", cgc_memset_d32_async(condition, 1, 1, origin), InCapture());
    cgc_stream_t body = nullptr;
    ok = ok && Expect("cgc_capture_conditional_begin",
                      cgc_capture_conditional_begin(origin, CGC_CONDITIONAL_WHILE,
                                                    static_cast<const uint32_t*>(condition), &body),
                      InCapture());
    if (ok) {
      counters.loops++;
      ok = Expect("cgc_malloc (body)", cgc_malloc(ctx, kIn * 4, body, &tmp), InCapture()) &&
           Expect("cgc_rng_uniform (body)", cgc_rng_uniform(gen_, static_cast<float*>(tmp), kIn, body), InCapture()) &&
           Add(tmp, u, 0.5f, body) && Add(out, tmp, 0.0f, body) &&
           Expect("cgc_memset_d32_async (body)", cgc_memset_d32_async(condition, 0, 1, body), InCapture());
      if (tmp) Expect("cgc_free (body)", cgc_free(tmp), {CGC_SUCCESS});
      ok = Expect("cgc_capture_conditional_end", cgc_capture_conditional_end(body), InCapture()) && ok;
    }
    Expect("cgc_free (condition)", cgc_free(condition), {CGC_SUCCESS});
    return ok;
  }

  // 1.4: what torch.cuda.graph does with cgc as its allocator, with the driver alone: begin a
  // capture, let the thread's adopting pool adopt it (shared by its adopted captures, as torch
  // shares a graph_pool_handle), allocate through PyTorch's entry point on the origin and a side
  // stream forked and joined with the driver's events, record the side stream's use, free
  // inside, end, instantiate, replay and check. One time in 32 the pool is released while the
  // output lives and the graph's executable goes after the check (its memory then waits for
  // cgc_empty_cache), and the next adopted capture gets a new pool.
  void AdoptedCapture() {
    if (saver_releasing.load() > 0) return;  // the saver's pool release goes first
    cgc_stream_t origin = own_[1 + rng_() % 2];
    cgc_stream_t side = origin == own_[1] ? own_[2] : own_[1];
    CUstream o = Native(origin), sd = Native(side);
    if (adopting_pool_ == nullptr &&
        !Expect("cgc_pool_create", cgc_pool_create(ctx, &adopting_pool_), {CGC_SUCCESS}))
      return;
    cgc_pool_t pool = adopting_pool_;
    CUstreamCaptureMode mode = rng_() % 2 ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL : CU_STREAM_CAPTURE_MODE_RELAXED;
    std::shared_lock<std::shared_mutex> unknown_to_cgc(foreign_capture_window);
    if (cgc__drv.cuStreamBeginCapture(o, mode) != CUDA_SUCCESS) {
      Unexpected("cuStreamBeginCapture", CGC_ERROR_CUDA);
      return;
    }
    bool ok = Expect("cgc_pool_adopt_capture", cgc_pool_adopt_capture(pool, o), {CGC_SUCCESS});
    unknown_to_cgc.unlock();
    void* t = ok ? cgc_torch_malloc(kIn * 4, 0, o) : nullptr;
    ok = ok && t != nullptr && Add(t, in_, 1.0f, origin);
    ok = ok && cgc__drv.cuEventRecord(raw_events_[0], o) == CUDA_SUCCESS &&
         cgc__drv.cuStreamWaitEvent(sd, raw_events_[0], 0) == CUDA_SUCCESS;
    void* u = ok ? cgc_torch_malloc(kIn * 4, 0, sd) : nullptr;
    ok = ok && u != nullptr && Add(u, t, 2.0f, side);
    ok = ok && Expect("cgc_record_stream_native", cgc_record_stream_native(t, sd), {CGC_SUCCESS});
    ok = ok && cgc__drv.cuEventRecord(raw_events_[1], sd) == CUDA_SUCCESS &&
         cgc__drv.cuStreamWaitEvent(o, raw_events_[1], 0) == CUDA_SUCCESS;
    void* out = ok ? cgc_torch_malloc(kIn * 4, 0, o) : nullptr;
    ok = ok && out != nullptr && Add(out, u, 0.5f, origin);
    if (t) Expect("cgc_free (adopted)", cgc_free(t), {CGC_SUCCESS});
    if (u) Expect("cgc_free (adopted)", cgc_free(u), {CGC_SUCCESS});
    CUgraph graph = nullptr;
    CUresult ended = cgc__drv.cuStreamEndCapture(o, &graph);
    Expect("cgc_pool_end_adopted_capture", cgc_pool_end_adopted_capture(pool), {CGC_SUCCESS});
    if (!ok || ended != CUDA_SUCCESS) {
      std::lock_guard<std::mutex> g(report_lock);
      std::fprintf(stderr, "the adopted capture: a step failed (%s), cuStreamEndCapture -> CUresult %d\n",
                   ok ? "none" : "see the line before", int(ended));
      Unexpected("the adopted capture", CGC_ERROR_CUDA);
    }
    CUgraphExec exec = nullptr;
    if (ok && ended == CUDA_SUCCESS) {
      cgc_capture_mode_t relaxed = CGC_CAPTURE_MODE_RELAXED;  // as a framework instantiates
      cgc_capture_mode_exchange(&relaxed);
      if (cgc__drv.cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS) exec = nullptr;
      cgc_capture_mode_exchange(&relaxed);
      if (exec == nullptr) Unexpected("cuGraphInstantiateWithFlags", CGC_ERROR_CUDA);
    }
    if (graph) cgc__drv.cuGraphDestroy(graph);
    counters.adopted++;
    // Released while its graph lives: replays cgc cannot see keep the memory from other streams.
    // Rarely: like PyTorch's released graph pools, a released adopted pool's memory goes back to
    // the driver only at an empty_cache, which other threads' adopted captures (under way nearly
    // all the time at 16 threads) hold back, so each release parks its memory until the end.
    if (rng_() % 32 == 0) {
      Expect("cgc_pool_release", cgc_pool_release(pool), {CGC_SUCCESS});
      adopting_pool_ = nullptr;
    }
    if (exec != nullptr && cgc__drv.cuGraphLaunch(exec, o) == CUDA_SUCCESS) {
      counters.replays++;
      CheckReplayOutput(out, origin, "adopted");
    }
    Sync(origin);
    if (exec != nullptr) cgc__drv.cuGraphExecDestroy(exec);
    if (out) Expect("cgc_free (adopted output)", cgc_free(out), {CGC_SUCCESS});
  }

  bool Add(void* out, void* in, float v, cgc_stream_t s) {
    CUdeviceptr o = Dev(out), i = Dev(in);
    unsigned n = kIn;
    void* args[] = {&o, &i, &v, &n};
    CUresult r = Launch(k_add, Native(s), n, args);
    if (r != CUDA_SUCCESS && !opts.illegal) Unexpected("add launch", CGC_ERROR_CUDA);
    return r == CUDA_SUCCESS;
  }

  void Replay() {
    if (graphs_.empty()) return CaptureGraph(nullptr);
    Graph& gr = graphs_[rng_() % graphs_.size()];
    cgc_stream_t s = AnyStream();
    if (!Expect("cgc_graph_launch", cgc_graph_launch(gr.g, s), {CGC_SUCCESS})) return;
    counters.replays++;
    if (rng_() % 3 == 0) {
      // Destroyed while its replay may still run: a private pool's memory must wait for it.
      if (!gr.shared_pool) {
        counters.destroyed_while_running++;
        Expect("cgc_graph_destroy", cgc_graph_destroy(gr.g), {CGC_SUCCESS});
        gr.g = nullptr;
        // The output is written by that replay: hand it out again only once it is done.
        Expect("cgc_record_stream", cgc_record_stream(gr.out, s), {CGC_SUCCESS});
        Expect("cgc_free", cgc_free(gr.out), {CGC_SUCCESS});
        graphs_.erase(graphs_.begin() + (&gr - graphs_.data()));
        return;
      }
    }
    if (host_ != nullptr) CheckReplayOutput(gr.out, s, "cgc");
  }

  // Copies a replay's output (written on `s`) out and compares it with the expected values.
  void CheckReplayOutput(void* out, cgc_stream_t s, const char* graph_kind) {
    if (!Expect("cgc_memcpy_dtoh_async", cgc_memcpy_dtoh_async(host_, out, kIn * 4, s), {CGC_SUCCESS})) return;
    if (!Sync(s)) return;
    counters.replays_checked++;
    const float* f = static_cast<const float*>(host_);
    for (unsigned i = 0; i < kIn; i += 7)
      if (f[i] != expected_[i]) {
        if (++counters.bad_contents <= 5) {
          std::lock_guard<std::mutex> g(report_lock);
          std::fprintf(stderr, "BAD REPLAY OUTPUT (%s graph): %u is %g, expected %g\n", graph_kind, i, f[i], expected_[i]);
        }
        break;
      }
  }

  void DestroyGraph() {
    if (graphs_.empty()) return;
    size_t k = rng_() % graphs_.size();
    Graph gr = graphs_[k];
    graphs_.erase(graphs_.begin() + long(k));
    if (rng_() % 2) Expect("cgc_graph_reset", cgc_graph_reset(gr.g), {CGC_SUCCESS});
    Expect("cgc_graph_destroy", cgc_graph_destroy(gr.g), {CGC_SUCCESS});
    // Replays of this graph may run on any stream: wait for the device's work on this thread's
    // streams before the output goes back (it is the user's block, freed like any other).
    for (cgc_stream_t s : shared_streams) Sync(s);
    for (cgc_stream_t s : own_) Sync(s);
    Expect("cgc_free", cgc_free(gr.out), {CGC_SUCCESS});
  }

  // A stream destroyed with work pending and blocks allocated on it or marked used by it.
  void SwapStream() {
    size_t k = 1 + rng_() % 2;  // own_[0] (`in_` was allocated on it) and own_[3] stay
    cgc_stream_t old = own_[k];
    // Blocks of this stream move to another stream for their checks (after a wait on an event).
    Expect("cgc_event_record", cgc_event_record(events_[0], old), {CGC_SUCCESS});
    Expect("cgc_stream_wait_event", cgc_stream_wait_event(own_[0], events_[0]), {CGC_SUCCESS});
    for (Block& b : live_)
      if (b.stream == old) b.stream = own_[0];
    if (!Expect("cgc_stream_destroy", cgc_stream_destroy(old), {CGC_SUCCESS})) return;
    counters.stream_swaps++;
    Expect("cgc_stream_create", cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &own_[k]), {CGC_SUCCESS});
  }

  void EagerHostFunction() {
    counters.host_funcs++;
    if (rng_() % 2 == 0) {
      Expect("cgc_launch_host_func", cgc_launch_host_func(AnyStream(), CountHostCall, nullptr, CountHostRelease),
             {CGC_SUCCESS});
      return;
    }
    // Handles that outlive every host function: the refusal must come before any handle is read,
    // and a shared stream is destroyed only after the threads end.
    Expect("cgc_launch_host_func",
           cgc_launch_host_func(AnyStream(), CallCgcInside, new InsideHost{events_[0], shared_streams[0]},
                                ReleaseInsideHost),
           {CGC_SUCCESS});
  }

  // A cache-hit cgc_malloc + cgc_free on the thread's own stream, timed. The anchor block keeps
  // the small segment these come from allocated, so that another thread's cgc_empty_cache never
  // gives it back: every timed pair is a hit.
  void HitPair() {
    void* p = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    cgc_status_t a = cgc_malloc(ctx, 4096, hit_stream_, &p);
    cgc_status_t f = p != nullptr ? cgc_free(p) : CGC_SUCCESS;
    long ns = static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - t0).count());
    if (!Expect("cgc_malloc (hit)", a, {CGC_SUCCESS}) || !Expect("cgc_free (hit)", f, {CGC_SUCCESS})) return;
    counters.hit_pairs++;
    long worst = counters.worst_hit_ns.load();
    while (ns > worst && !counters.worst_hit_ns.compare_exchange_weak(worst, ns)) {
    }
  }

  void EmptyCache() {
    counters.empty_caches++;
    Expect("cgc_empty_cache", cgc_empty_cache(ctx), {CGC_SUCCESS, CGC_ERROR_INVALID_STATE});
  }

  void BadCalls() {
    Expect("cgc_free (foreign)", cgc_free(this), {CGC_ERROR_INVALID_ARGUMENT});
    cgc_graph_t g = nullptr;
    Expect("cgc_capture_end (none)", cgc_capture_end(own_[1], &g), {CGC_ERROR_INVALID_STATE});
    Expect("cgc_record_stream (foreign)", cgc_record_stream(this, own_[0]), {CGC_ERROR_INVALID_ARGUMENT});
  }

  void Teardown() {
    if (anchor_ != nullptr) Expect("cgc_free (anchor)", cgc_free(anchor_), {CGC_SUCCESS});
    if (hit_stream_ != nullptr) Expect("cgc_stream_destroy", cgc_stream_destroy(hit_stream_), {CGC_SUCCESS});
    for (Graph& gr : graphs_) Expect("cgc_graph_destroy", cgc_graph_destroy(gr.g), {CGC_SUCCESS});
    for (cgc_stream_t s : own_) Sync(s);
    for (cgc_stream_t s : shared_streams) Sync(s);
    for (Graph& gr : graphs_) Expect("cgc_free", cgc_free(gr.out), {CGC_SUCCESS});
    graphs_.clear();
    CheckFree(true);
    Expect("cgc_free", cgc_free(in_), {CGC_SUCCESS});
    for (cgc_stream_t s : own_) Expect("cgc_stream_destroy", cgc_stream_destroy(s), {CGC_SUCCESS});
    for (cgc_event_t e : events_) Expect("cgc_event_destroy", cgc_event_destroy(e), {CGC_SUCCESS});
    for (CUevent e : raw_events_)
      if (e != nullptr) cgc__drv.cuEventDestroy(e);
    cgc_memory_stats_t ps = {sizeof ps, 0, 0, 0, 0, 0, 0};
    if (cgc_memory_stats(ctx, pool_, &ps) == CGC_SUCCESS) pool_reserved_at_end += ps.bytes_reserved;
    Expect("cgc_pool_release", cgc_pool_release(pool_), {CGC_SUCCESS});
    if (adopting_pool_ != nullptr) Expect("cgc_pool_release", cgc_pool_release(adopting_pool_), {CGC_SUCCESS});
    Expect("cgc_rng_destroy", cgc_rng_destroy(gen_), {CGC_SUCCESS});
    if (host_ != nullptr) {
      cgc_capture_mode_t mode = CGC_CAPTURE_MODE_RELAXED;
      cgc_capture_mode_exchange(&mode);
      cgc__drv.cuMemFreeHost(host_);
      cgc_capture_mode_exchange(&mode);
    }
  }

  int index_;
  std::mt19937_64 rng_;
  std::array<cgc_stream_t, 4> own_{};
  std::array<cgc_event_t, 3> events_{};
  std::array<CUevent, 2> raw_events_{};
  cgc_pool_t pool_ = nullptr;  // shared by this thread's graphs (replayed in order, never at once)
  cgc_pool_t adopting_pool_ = nullptr;  // adopts this thread's driver-begun captures (1.4)
  cgc_rng_t gen_ = nullptr;    // drawn from in this thread's loop bodies (numbers not checked)
  void* host_ = nullptr;       // page-locked: copies out of it never synchronise by surprise
  void* in_ = nullptr;
  cgc_stream_t hit_stream_ = nullptr;  // the timed cache-hit pairs' stream, never swapped
  void* anchor_ = nullptr;
  float input_[kIn];
  float expected_[kIn];
  std::vector<Block> live_;
  std::vector<Graph> graphs_;
};

bool ParseArgs(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stress_test: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") opts.seed = std::strtoull(next("--seed"), nullptr, 0);
    else if (a == "--seconds") opts.seconds = std::atof(next("--seconds"));
    else if (a == "--threads") opts.threads = std::atoi(next("--threads"));
    else if (a == "--illegal") opts.illegal = true;
    else if (a == "--no-adopted") opts.adopted = false;
    else if (a == "--no-pool-malloc") opts.pool_malloc = false;
    else {
      std::fprintf(stderr, "usage: stress_test [--seed N] [--seconds S] [--threads T] [--illegal] [--no-adopted] [--no-pool-malloc]\n");
      return false;
    }
  }
  return opts.threads > 0 && opts.seconds >= 0;
}

// Frees memory of its own with raw cuMemFree behind a long kernel on a raw stream of its own, over
// and over until `stop`: on driver 580 each free waits for the kernel, and other threads'
// cuEventRecord and launches wait behind it.
void ForeignFreer(std::atomic<bool>* stop) {
  if (cgc__drv.cuCtxPushCurrent(primary) != CUDA_SUCCESS) return;
  CUstream s = nullptr;
  cgc_capture_mode_t relaxed = CGC_CAPTURE_MODE_RELAXED;  // its frees never break another thread's capture
  cgc_capture_mode_exchange(&relaxed);
  if (cgc__drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) {
    while (!stop->load()) {
      CUdeviceptr p = 0;
      if (cgc__drv.cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS) break;
      long long cycles = 40000000;  // about 20 ms
      void* args[] = {&cycles};
      cgc__drv.cuLaunchKernel(k_spin, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr);
      auto t0 = std::chrono::steady_clock::now();
      cgc__drv.cuMemFree(p);
      long ns = static_cast<long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      counters.foreign_frees++;
      if (ns > counters.foreign_free_ns.load()) counters.foreign_free_ns = ns;
    }
    cgc__drv.cuStreamSynchronize(s);
    cgc__drv.cuStreamDestroy(s);
  }
  cgc_capture_mode_exchange(&relaxed);
  CUcontext popped;
  cgc__drv.cuCtxPopCurrent(&popped);
}

// 1.6: graphs saved and restored beside the workers, over and over until `stop`: a graph of cgc's
// own kernels captured (ThreadLocal) into a pool at fixed addresses, replayed and its output
// checked, saved, everything of it given back (graph, output, pool), restored from the bytes,
// replayed into the zeroed output and checked to the same bytes, and given back again. The thread
// is in Relaxed mode, so its synchronisations never break another thread's capture; a pool release
// refused while a capture of the device is under way is retried.
void Saver(std::atomic<bool>* stop, std::atomic<long>* rounds) {
  if (cgc__drv.cuCtxPushCurrent(primary) != CUDA_SUCCESS) return;
  cgc_capture_mode_t relaxed = CGC_CAPTURE_MODE_RELAXED;
  cgc_capture_mode_exchange(&relaxed);
  cgc_stream_t s = nullptr;
  cgc_module_t module = nullptr;
  cgc_function_t fill = nullptr, add = nullptr;
  void* host = nullptr;
  cgc_rng_t gen = nullptr; /* both graphs draw from it; saved with them */
  const uintptr_t bases[] = {0x720000000000ull, 0x7ec000000000ull, 0x005000000000ull, 0x560000000000ull};
  const unsigned n = kIn;
  // A pool's release synchronises the device, which breaks a capture begun with the driver and
  // not yet adopted (unknown to cgc): like the NCCL churn, it holds that window alone. Refused
  // while a capture of the device is under way, it is tried again, for at most 30 s.
  auto release = [&](cgc_pool_t pool) {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    saver_releasing++;
    for (;;) {
      cgc_status_t st;
      {
        std::unique_lock<std::shared_mutex> window(foreign_capture_window);
        st = cgc_pool_release(pool);
      }
      if (st != CGC_ERROR_CAPTURE_UNSUPPORTED || std::chrono::steady_clock::now() > give_up) {
        saver_releasing--;
        return Expect("cgc_pool_release (saved)", st, {CGC_SUCCESS});
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
  auto check = [&](void* out, float want) {
    if (!Expect("cgc_memcpy_dtoh_async", cgc_memcpy_dtoh_async(host, out, n * 4, s), {CGC_SUCCESS}) ||
        !Expect("cgc_stream_synchronize", cgc_stream_synchronize(s), {CGC_SUCCESS}))
      return;
    counters.checks++;
    const float* f = static_cast<const float*>(host);
    for (unsigned i = 0; i < n; i += 97)
      if (f[i] != want) {
        counters.bad_contents++;
        std::lock_guard<std::mutex> g(report_lock);
        std::fprintf(stderr, "BAD CONTENTS: a restored graph's output word %u is %g, expected %g\n", i, f[i], want);
        return;
      }
  };
  bool ready = Expect("cgc_stream_create", cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s), {CGC_SUCCESS}) &&
               Expect("cgc_module_load", cgc_module_load(ctx, cgc_test_kernels_fatbin, &module), {CGC_SUCCESS}) &&
               Expect("cgc_module_get_function", cgc_module_get_function(module, "cgc_test_fill", &fill), {CGC_SUCCESS}) &&
               Expect("cgc_module_get_function", cgc_module_get_function(module, "cgc_test_add", &add), {CGC_SUCCESS}) &&
               Expect("cgc_rng_create (saved)", cgc_rng_create(ctx, 77, &gen), {CGC_SUCCESS}) &&
               cgc__drv.cuMemAllocHost(&host, n * 4) == CUDA_SUCCESS;
  for (long round = 0; ready && !stop->load(); round++) {
    cgc_pool_t pool = nullptr;
    // The first base the driver gives in this process: under ThreadSanitizer, whose runtime keeps
    // most of the address space, the driver offered 0x7e80'0000'0000 for 0x7200'0000'0000, so the
    // saver also tries ranges such a process leaves to the program. The restore re-reserves the
    // same base.
    for (uintptr_t at : bases) {
      cgc_status_t st = cgc_pool_create_at(ctx, reinterpret_cast<void*>(at), 64 << 20, &pool);
      if (st == CGC_SUCCESS) break;
      if (st != CGC_ERROR_INVALID_STATE) {  // only "the driver cannot give that base" is expected
        Unexpected("cgc_pool_create_at", st);
        break;
      }
    }
    if (pool == nullptr) {
      Unexpected("cgc_pool_create_at (no base given)", CGC_ERROR_INVALID_STATE);
      break;
    }
    cgc_capture_options_t options{};
    options.struct_size = sizeof options;
    options.mode = CGC_CAPTURE_MODE_THREAD_LOCAL;
    options.pool = pool;
    // Two graphs of one structure (fill, add), each with its own output: a family before the
    // save, and after the restore in every other round.
    void* out[2] = {nullptr, nullptr};
    cgc_graph_t graph[2] = {nullptr, nullptr};
    const float v[2] = {float(round % 1000), float(round % 1000) + 0.5f};
    unsigned count = n;
    bool captured = true;
    for (int k = 0; k < 2 && captured; k++) {
      void* in = nullptr;
      // Refused while another thread's device-wide call is under way (an NCCL pool's release).
      captured = Expect("cgc_capture_begin (saved)", cgc_capture_begin(s, &options),
                        {CGC_SUCCESS, CGC_ERROR_CAPTURE_UNSUPPORTED});
      if (!captured) break;
      Expect("cgc_malloc", cgc_malloc(ctx, n * 4, s, &in), {CGC_SUCCESS});
      Expect("cgc_malloc", cgc_malloc(ctx, n * 4, s, &out[k]), {CGC_SUCCESS});
      float value = v[k];
      void* fill_args[] = {&in, &value, &count};
      Expect("cgc_launch_kernel", cgc_launch_kernel(fill, n / 256, 1, 1, 256, 1, 1, 0, s, fill_args), {CGC_SUCCESS});
      float one = 1.0f;
      void* add_args[] = {&out[k], &in, &one, &count};
      Expect("cgc_launch_kernel", cgc_launch_kernel(add, n / 256, 1, 1, 256, 1, 1, 0, s, add_args), {CGC_SUCCESS});
      Expect("cgc_rng_uniform (saved)", cgc_rng_uniform(gen, static_cast<float*>(in), n, s), {CGC_SUCCESS});
      Expect("cgc_free", cgc_free(in), {CGC_SUCCESS});
      captured = Expect("cgc_capture_end (saved)", cgc_capture_end(s, &graph[k]), {CGC_SUCCESS});
    }
    std::vector<uint8_t> bytes;
    size_t size = 0;
    if (captured && Expect("cgc_graph_share_executable", cgc_graph_share_executable(graph[1], graph[0]), {CGC_SUCCESS})) {
      for (int k : {1, 0, 1}) {
        if (!Expect("cgc_graph_launch (family)", cgc_graph_launch(graph[k], s), {CGC_SUCCESS})) break;
        check(out[k], v[k] + 1.0f);
      }
      if (Expect("cgc_graphs_save", cgc_graphs_save(graph, 2, nullptr, nullptr, 0, &size), {CGC_SUCCESS})) {
        bytes.resize(size);
        Expect("cgc_graphs_save", cgc_graphs_save(graph, 2, nullptr, bytes.data(), size, &size), {CGC_SUCCESS});
      }
    }
    uint64_t saved_seed = 0, saved_offset = 0; /* the generator as the save read it */
    Expect("cgc_rng_get_state", cgc_rng_get_state(gen, &saved_seed, &saved_offset), {CGC_SUCCESS});
    for (int k = 0; k < 2; k++) {
      if (graph[k] != nullptr) Expect("cgc_graph_destroy", cgc_graph_destroy(graph[k]), {CGC_SUCCESS});
      if (out[k] != nullptr) Expect("cgc_free", cgc_free(out[k]), {CGC_SUCCESS});
    }
    if (!release(pool)) break;
    if (bytes.empty()) continue; /* the capture was refused meanwhile: another round */
    cgc_graph_t restored[2] = {nullptr, nullptr};
    cgc_pool_t restored_pool = nullptr;
    cgc_restore_options_t restore_options{};
    restore_options.struct_size = sizeof restore_options;
    restore_options.flags = round % 2 == 1 ? CGC_RESTORE_FAMILIES : 0;
    restore_options.threads = unsigned(round % 3);  // cgc's choice, one thread, two
    cgc_rng_t restored_gen = nullptr;
    restore_options.generators = &restored_gen;
    restore_options.n_generators = 1;
    if (!Expect("cgc_graphs_restore",
                cgc_graphs_restore(ctx, bytes.data(), bytes.size(), &restore_options, restored, 2, &restored_pool, 1),
                {CGC_SUCCESS}))
      break;
    int launched = 0;
    for (int k : {1, 0}) {
      Expect("cgc_memset_d32_async", cgc_memset_d32_async(out[k], 0, n, s), {CGC_SUCCESS});
      if (Expect("cgc_graph_launch (restored)", cgc_graph_launch(restored[k], s), {CGC_SUCCESS})) {
        launched++;
        check(out[k], v[k] + 1.0f);
      }
    }
    /* The restored generator: the saved state, moved on by each restored replay's draw. */
    uint64_t seed = 0, offset = 0;
    if (Expect("cgc_rng_get_state (restored)", cgc_rng_get_state(restored_gen, &seed, &offset), {CGC_SUCCESS}) &&
        (seed != saved_seed || offset != saved_offset + uint64_t(launched) * ((n + 3) / 4 * 4))) {
      counters.bad_contents++;
      std::lock_guard<std::mutex> g(report_lock);
      std::fprintf(stderr, "BAD CONTENTS: the restored generator is at seed %llu offset %llu, expected %llu, %llu\n",
                   (unsigned long long)seed, (unsigned long long)offset, (unsigned long long)saved_seed,
                   (unsigned long long)(saved_offset + uint64_t(launched) * ((n + 3) / 4 * 4)));
    }
    Expect("cgc_rng_destroy (restored)", cgc_rng_destroy(restored_gen), {CGC_SUCCESS});
    for (int k = 0; k < 2; k++) {
      Expect("cgc_graph_destroy", cgc_graph_destroy(restored[k]), {CGC_SUCCESS});
      Expect("cgc_free", cgc_free(out[k]), {CGC_SUCCESS});
    }
    if (!release(restored_pool)) break;
    (*rounds)++;
  }
  if (s != nullptr) {
    cgc_stream_synchronize(s);
    Expect("cgc_stream_destroy", cgc_stream_destroy(s), {CGC_SUCCESS});
  }
  if (module != nullptr) Expect("cgc_module_unload", cgc_module_unload(module), {CGC_SUCCESS});
  if (gen != nullptr) Expect("cgc_rng_destroy (saved)", cgc_rng_destroy(gen), {CGC_SUCCESS});
  if (host != nullptr) cgc__drv.cuMemFreeHost(host);
  cgc_capture_mode_exchange(&relaxed);
  CUcontext popped;
  cgc__drv.cuCtxPopCurrent(&popped);
}

// Makes and releases one-rank communicators and NCCL pools, over and over until `stop`, beside the
// workers' captures (Global ones too with --illegal): NCCL's setup and teardown make calls that
// break a Global capture, so cgc refuses them while such a capture is under way, and refuses a
// capture begun meanwhile that they would break (the gate). Each round allocates from its pool and all-reduces
// there eagerly. A release refused while a capture of the device is under way is retried.
void NcclChurner(std::atomic<bool>* stop, std::atomic<long>* rounds) {
  if (cgc__drv.cuCtxPushCurrent(primary) != CUDA_SUCCESS) return;
  cgc_stream_t s = nullptr;
  if (Expect("cgc_stream_create (NCCL churn)", cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s), {CGC_SUCCESS})) {
    while (!stop->load()) {
      cgc_comm_id_t id;
      cgc_comm_t comm = nullptr;
      cgc_pool_t pool = nullptr;
      if (!Expect("cgc_comm_unique_id", cgc_comm_unique_id(&id), {CGC_SUCCESS})) break;
      cgc_status_t created;
      {
        std::unique_lock<std::shared_mutex> alone(foreign_capture_window);
        created = cgc_comm_create(ctx, 1, &id, 0, &comm);
      }
      if (!Expect("cgc_comm_create (NCCL churn)", created, {CGC_SUCCESS, CGC_ERROR_CAPTURE_UNSUPPORTED})) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      cgc_status_t made;
      {
        std::unique_lock<std::shared_mutex> alone(foreign_capture_window);
        made = cgc_nccl_pool_create(comm, 4 << 20, CGC_NCCL_MEMORY_REGISTERED, &pool, nullptr);
      }
      if (Expect("cgc_nccl_pool_create (NCCL churn)", made, {CGC_SUCCESS, CGC_ERROR_CAPTURE_UNSUPPORTED})) {
        void* p = nullptr;
        if (Expect("cgc_pool_malloc (NCCL churn)", cgc_pool_malloc(pool, 1 << 20, s, &p), {CGC_SUCCESS})) {
          Expect("cgc_all_reduce (NCCL churn)", cgc_all_reduce(comm, p, p, 1024, CGC_FLOAT32, CGC_SUM, s), {CGC_SUCCESS});
          Expect("cgc_free (NCCL churn)", cgc_free(p), {CGC_SUCCESS});
        }
        auto release = [&] {
          std::unique_lock<std::shared_mutex> alone(foreign_capture_window);
          return cgc_pool_release(pool);
        };
        cgc_status_t released;
        while ((released = release()) == CGC_ERROR_CAPTURE_UNSUPPORTED)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        Expect("cgc_pool_release (NCCL churn)", released, {CGC_SUCCESS});
      }
      auto destroy = [&] {
        std::unique_lock<std::shared_mutex> alone(foreign_capture_window);
        return cgc_comm_destroy(comm);
      };
      cgc_status_t destroyed;
      while ((destroyed = destroy()) == CGC_ERROR_CAPTURE_UNSUPPORTED)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (Expect("cgc_comm_destroy (NCCL churn)", destroyed, {CGC_SUCCESS})) (*rounds)++;
    }
    Expect("cgc_stream_synchronize (NCCL churn)", cgc_stream_synchronize(s), {CGC_SUCCESS, CGC_ERROR_CAPTURE_UNSUPPORTED});
    Expect("cgc_stream_destroy (NCCL churn)", cgc_stream_destroy(s), {CGC_SUCCESS});
  }
  CUcontext popped;
  cgc__drv.cuCtxPopCurrent(&popped);
}

}  // namespace

int main(int argc, char** argv) {
  if (!ParseArgs(argc, argv)) return 2;
  int devices = 0;
  cgc_status_t st = cgc_device_count(&devices);
  if (st != CGC_SUCCESS || devices == 0) {
    std::printf("skipped: no usable GPU (%s -- %s)\nSTRESS: skipped\n", cgc_status_string(st), cgc_last_error());
    return 0;
  }
  if (cgc_context_create(0, &ctx) != CGC_SUCCESS) {
    std::printf("cgc_context_create: %s\nSTRESS: FAILED\n", cgc_last_error());
    return 1;
  }
  CUdevice dev;
  CUmodule module = nullptr;
  if (cgc__drv.cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cgc__drv.cuDevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS ||
      cgc__drv.cuCtxPushCurrent(primary) != CUDA_SUCCESS ||
      cgc__drv.cuModuleLoadData(&module, cgc_test_kernels_fatbin) != CUDA_SUCCESS ||
      cgc__drv.cuModuleGetFunction(&k_add, module, "cgc_test_add") != CUDA_SUCCESS ||
      cgc__drv.cuModuleGetFunction(&k_stamp, module, "cgc_test_stamp") != CUDA_SUCCESS ||
      cgc__drv.cuModuleGetFunction(&k_spin, module, "cgc_test_spin") != CUDA_SUCCESS) {
    std::printf("setting up the test kernels failed\nSTRESS: FAILED\n");
    return 1;
  }
  for (int i = 0; i < 4; i++) {
    cgc_stream_t s = nullptr;
    Expect("cgc_stream_create", cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s), {CGC_SUCCESS});
    shared_streams.push_back(s);
  }
  // The shared NCCL pool (1.5): a one-rank communicator's registered arena. Made before the
  // threads start (no capture may run meanwhile), released after they end.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  int nccl_version = 0;
  cgc_comm_id_t id;
  if (cgc_nccl_version(&nccl_version) == CGC_SUCCESS) {
    cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
    if (!Expect("cgc_comm_unique_id", cgc_comm_unique_id(&id), {CGC_SUCCESS}) ||
        !Expect("cgc_comm_create", cgc_comm_create(ctx, 1, &id, 0, &arena_comm), {CGC_SUCCESS}) ||
        !Expect("cgc_nccl_pool_create",
                cgc_nccl_pool_create(arena_comm, size_t(256) << 20, CGC_NCCL_MEMORY_REGISTERED, &arena_pool, &got),
                {CGC_SUCCESS}))
      arena_pool = nullptr;
    else
      std::printf("shared NCCL pool: 256 MiB, kind %d (NCCL %d)\n", int(got), nccl_version);
  } else {
    std::printf("no NCCL (%s): no shared NCCL pool\n", cgc_last_error());
  }
  std::printf("stress_test: %d threads, %.0f s, seed %llu%s\n", opts.threads, opts.seconds,
              (unsigned long long)opts.seed, opts.illegal ? ", illegal mix (Global captures while others synchronise)" : "");
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  std::atomic<bool> stop_freer{false};
  std::thread freer(ForeignFreer, &stop_freer);
  std::atomic<long> nccl_rounds{0};
  std::thread churner;
  if (arena_pool != nullptr) churner = std::thread(NcclChurner, &stop_freer, &nccl_rounds);
  std::atomic<long> saved_rounds{0};
  std::thread saver(Saver, &stop_freer, &saved_rounds);
  for (int t = 0; t < opts.threads; t++) threads.emplace_back([t] { Worker(t).Run(); });
  for (auto& th : threads) th.join();
  stop_freer = true;
  freer.join();
  if (churner.joinable()) churner.join();
  saver.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (cgc_stream_t s : shared_streams) Expect("cgc_stream_destroy", cgc_stream_destroy(s), {CGC_SUCCESS});
  if (arena_pool != nullptr) Expect("cgc_pool_release (NCCL pool)", cgc_pool_release(arena_pool), {CGC_SUCCESS});
  if (arena_comm != nullptr) Expect("cgc_comm_destroy", cgc_comm_destroy(arena_comm), {CGC_SUCCESS});
  cgc__drv.cuCtxSynchronize();
  cgc_memory_stats_t before = {sizeof before, 0, 0, 0, 0, 0, 0};
  cgc_memory_stats(ctx, nullptr, &before);
  Expect("cgc_empty_cache", cgc_empty_cache(ctx), {CGC_SUCCESS});
  cgc_memory_stats_t after = {sizeof after, 0, 0, 0, 0, 0, 0};
  cgc_memory_stats(ctx, nullptr, &after);
  cgc__drv.cuModuleUnload(module);
  CUcontext popped;
  cgc__drv.cuCtxPopCurrent(&popped);
  cgc_context_destroy(ctx);
  cgc__drv.cuDevicePrimaryCtxRelease(dev);

  const Counters& c = counters;
  std::printf("ops %ld (%.0f/s): mallocs %ld, frees %ld, blocks checked %ld; captures %ld (%ld unjoined on purpose, "
              "%ld broken by the illegal mix), replays %ld (%ld checked), graphs destroyed while replaying %ld, "
              "streams destroyed with work pending %ld, empty_cache %ld, calls refused %ld\n",
              c.ops.load(), c.ops.load() / elapsed, c.mallocs.load(), c.frees.load(), c.checks.load(),
              c.captures.load(), c.captures_failed_on_purpose.load(), c.captures_broken.load(), c.replays.load(),
              c.replays_checked.load(), c.destroyed_while_running.load(), c.stream_swaps.load(),
              c.empty_caches.load(), c.refused.load());
  std::printf("host functions %ld launched, %ld released, %ld calls run; graphs updated by capture %ld; loop "
              "bodies that allocate and draw %ld; captures begun with the driver and adopted by a pool %ld\n",
              c.host_funcs.load(), c.host_releases.load(), c.host_calls.load(), c.updates.load(), c.loops.load(),
              c.adopted.load());
  std::printf("cgc_pool_malloc: %ld from the threads' own pools, %ld from the shared NCCL pool (%ld refused: full)\n",
              c.pool_mallocs.load(), c.arena_mallocs.load(), c.arena_full.load());
  std::printf("the threads' pools held %zu bytes when released; communicators and NCCL pools made and released "
              "beside the captures: %ld\n",
              pool_reserved_at_end.load(), nccl_rounds.load());
  std::printf("cache-hit cgc_malloc + cgc_free: %ld timed pairs, worst %.1f us, while a raw cuMemFree waited behind a "
              "kernel %ld times (longest %.1f ms); cgc calls refused inside host functions %ld\n",
              c.hit_pairs.load(), c.worst_hit_ns.load() / 1e3, c.foreign_frees.load(), c.foreign_free_ns.load() / 1e6,
              c.host_refusals.load());
  std::printf("graphs saved, given back and restored beside the captures (1.6): %ld\n", saved_rounds.load());
  std::printf("end: %zu bytes allocated, %zu reserved before cgc_empty_cache, %zu after; peak reserved %zu\n",
              before.bytes_allocated, before.bytes_reserved, after.bytes_reserved, after.peak_bytes_reserved);
  bool ok = c.bad_contents == 0 && c.unexpected == 0 && before.bytes_allocated == 0 && after.bytes_reserved == 0 &&
            c.captures > 0 && c.replays_checked > 0 && c.host_funcs == c.host_releases && saved_rounds > 0;
  std::printf("STRESS: %s (bad contents %ld, unexpected statuses %ld)\n", ok ? "ok" : "FAILED", c.bad_contents.load(),
              c.unexpected.load());
  return ok ? 0 : 1;
}
