// Defects that programs using only the public contract hit under concurrency, each fixed with
// this test failing before the fix: calls inside host functions that reached the driver, a crash
// of cgc_empty_cache beside an adopted capture's end, memory stranded on destroyed streams, and
// wrong statuses for waits on invalidated captures.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::MemoryTest;

class Trust : public MemoryTest {
 protected:
  // The pool's memory of a dead stream: a capture (in `mode`) into `pool` on a stream of its own
  // allocates `bytes`, writes `value` there and frees it (the pool keeps that memory, keyed to the
  // stream); then that stream is destroyed and its work waited for. *graph is the capture's.
  void CaptureOnADeadStream(cgc_pool_t pool, cgc_capture_mode_t mode, size_t bytes, float value, cgc_graph_t* graph) {
    cgc_stream_t side = nullptr;
    CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
    cgc_capture_options_t o = {};
    o.struct_size = sizeof o;
    o.mode = mode;
    o.pool = pool;
    CGC_ASSERT_OK(cgc_capture_begin(side, &o));
    void* t = Malloc(bytes, side);
    Fill(side, Dev(t), value, static_cast<unsigned>(bytes / 4));  // every replay writes this memory
    CGC_ASSERT_OK(cgc_free(t));  // freed in its capture: the pool keeps it, keyed to `side`
    CGC_ASSERT_OK(cgc_capture_end(side, graph));
    CGC_ASSERT_OK(cgc_stream_destroy(side));  // the pool's segment now waits for the stream's last work
    CU_ASSERT_OK(cuCtxSynchronize());
  }
};

// What the host function saw: each call's status, by name.
struct InsideHostFunction {
  cgc_context_t ctx;
  cgc_stream_t stream;
  CUstream native;
  cgc_event_t event;
  cgc_graph_t graph;
  cgc_rng_t rng;
  std::vector<std::pair<const char*, cgc_status_t>> seen;
};

void CallEverythingThatReachesTheDriver(void* user) {
  auto* in = static_cast<InsideHostFunction*>(user);
  int complete = 0, count = 0;
  float ms = 0;
  cgc_capture_status_t status;
  uint64_t id = 0;
  cgc_stream_t wrapped = nullptr;
  cgc_capture_mode_t mode = CGC_CAPTURE_MODE_RELAXED;
  in->seen = {
      {"cgc_event_query", cgc_event_query(in->event, &complete)},
      {"cgc_event_synchronize", cgc_event_synchronize(in->event)},
      {"cgc_event_elapsed_ms", cgc_event_elapsed_ms(in->event, in->event, &ms)},
      {"cgc_event_destroy", cgc_event_destroy(in->event)},
      {"cgc_stream_capture_status", cgc_stream_capture_status(in->stream, &status, &id)},
      {"cgc_graph_upload", cgc_graph_upload(in->graph, in->stream)},
      {"cgc_graph_debug_dump", cgc_graph_debug_dump(in->graph, "/dev/null")},
      {"cgc_stream_wrap", cgc_stream_wrap(in->ctx, in->native, &wrapped)},
      {"cgc_group_start", cgc_group_start()},
      {"cgc_group_end", cgc_group_end()},
      {"cgc_comm_abort", cgc_comm_abort(nullptr)},
      {"cgc_device_count", cgc_device_count(&count)},
      {"cgc_capture_mode_exchange", cgc_capture_mode_exchange(&mode)},
      {"cgc_rng_destroy", cgc_rng_destroy(in->rng)},
  };
}

// SEMANTICS 22: inside a host function every cgc call that would reach the driver is refused
// with INVALID_STATE, and a refused destroy leaves its object alive (it was destroyed, or its
// memory leaked, before the fix).
TEST_F(Trust, EveryCallThatReachesTheDriverIsRefusedInsideAHostFunction) {
  InsideHostFunction in{};
  in.ctx = ctx;
  in.stream = stream;
  in.native = static_cast<CUstream>(cgc_stream_native(stream));
  CGC_ASSERT_OK(cgc_event_create(ctx, CGC_EVENT_TIMING, &in.event));
  CGC_ASSERT_OK(cgc_event_record(in.event, stream));
  CGC_ASSERT_OK(cgc_rng_create(ctx, 7, &in.rng));
  CUdeviceptr a = Alloc(4096);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  Fill(stream, a, 1.0f, 1024);
  CGC_ASSERT_OK(cgc_capture_end(stream, &in.graph));
  CGC_ASSERT_OK(cgc_launch_host_func(stream, CallEverythingThatReachesTheDriver, &in, nullptr));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ASSERT_EQ(in.seen.size(), 14u);
  for (const auto& [name, st] : in.seen) EXPECT_EQ(st, CGC_ERROR_INVALID_STATE) << name;
  // Refused destroys left their objects working.
  int complete = 0;
  CGC_EXPECT_OK(cgc_event_query(in.event, &complete));
  EXPECT_EQ(complete, 1);
  CGC_EXPECT_OK(cgc_rng_uniform(in.rng, reinterpret_cast<float*>(a), 256, stream));
  CGC_EXPECT_OK(cgc_stream_synchronize(stream));
  CGC_EXPECT_OK(cgc_event_destroy(in.event));
  CGC_EXPECT_OK(cgc_rng_destroy(in.rng));
  CGC_EXPECT_OK(cgc_graph_destroy(in.graph));
}

// The crash: cgc_empty_cache on one thread while another ends a capture that a pool adopted
// (cuStreamEndCapture, then cgc_pool_end_adopted_capture), PyTorch's torch.cuda.empty_cache()
// beside another thread's torch.cuda.graph exit. cgc asked the driver about the adopted stream
// while its capture was being ended (driver 580 crashes there); it must decide from its records.
TEST_F(Trust, EmptyCacheBesideAdoptedCapturesEnding) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  std::atomic<bool> stop{false};
  std::atomic<long> emptied{0}, refused{0}, other{0};
  std::thread emptier([&] {
    while (!stop.load()) {
      cgc_status_t st = cgc_empty_cache(ctx);
      if (st == CGC_SUCCESS) emptied++;
      else if (st == CGC_ERROR_INVALID_STATE) refused++;
      else other++;
    }
  });
  CUstream cs = nullptr;
  ASSERT_EQ(cgc__drv.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const int device = cgc_test::TestDevice();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  int rounds = 0;
  while (std::chrono::steady_clock::now() < deadline && !HasFailure()) {
    ASSERT_EQ(cgc__drv.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    CGC_ASSERT_OK(cgc_pool_adopt_capture(pool, cs));
    void* p = cgc_torch_malloc(1 << 20, device, cs);
    EXPECT_NE(p, nullptr) << cgc_last_error();
    CUgraph g = nullptr;
    ASSERT_EQ(cgc__drv.cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool));
    cgc__drv.cuGraphDestroy(g);
    CGC_EXPECT_OK(cgc_free(p));
    rounds++;
  }
  stop = true;
  emptier.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(rounds, 10);
  EXPECT_GT(emptied.load(), 0);
  CGC_EXPECT_OK(cgc_pool_release(pool));
  cgc__drv.cuStreamDestroy(cs);
  // Nothing of the rounds stays reserved once the cache is emptied.
  CGC_EXPECT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats().bytes_reserved, baseline_.bytes_reserved);
}

// Memory stranded: a capture's output freed after its capture stream was destroyed (the natural
// order in C) stayed keyed to the dead stream, so the next allocation of its size was a new
// driver allocation. Once the dead stream's work is done its memory serves other streams.
TEST_F(Trust, ACaptureOutputFreedAfterItsStreamIsDestroyedServesOtherStreams) {
  constexpr size_t kBytes = 32u << 20;
  cgc_stream_t side = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(side, nullptr));
  void* out = Malloc(kBytes, side);
  Fill(side, Dev(out), 2.0f, kBytes / 4);
  CGC_ASSERT_OK(cgc_capture_end(side, &g));
  CGC_ASSERT_OK(cgc_graph_launch(g, side));
  CGC_ASSERT_OK(cgc_stream_synchronize(side));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(side));
  CGC_ASSERT_OK(cgc_free(out));
  const cgc_memory_stats_t before = Stats();
  void* again = Malloc(kBytes, stream);
  const cgc_memory_stats_t after = Stats();
  EXPECT_EQ(after.num_driver_allocs, before.num_driver_allocs) << "the dead stream's segment was not reused";
  EXPECT_EQ(after.bytes_reserved, before.bytes_reserved);
  CGC_EXPECT_OK(cgc_free(again));
}

// The same for cgc_pool_malloc: a pool's eager blocks of a destroyed stream serve the pool's
// eager allocations on other streams once the dead stream's work is done.
TEST_F(Trust, PoolMallocMemoryOfADestroyedStreamServesOtherStreams) {
  constexpr size_t kBytes = 8u << 20;
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  cgc_stream_t side = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  void* p = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, kBytes, side, &p));
  Fill(side, Dev(p), 1.0f, kBytes / 4);
  CGC_ASSERT_OK(cgc_free(p));
  CGC_ASSERT_OK(cgc_stream_destroy(side));
  CU_ASSERT_OK(cuCtxSynchronize());  // the dead stream's work is done
  const cgc_memory_stats_t before = Stats(pool);
  void* q = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, kBytes, stream, &q));
  const cgc_memory_stats_t after = Stats(pool);
  EXPECT_EQ(after.num_driver_allocs, before.num_driver_allocs) << "the dead stream's pool memory was not reused";
  CGC_EXPECT_OK(cgc_free(q));
  CGC_EXPECT_OK(cgc_pool_release(pool));
}

// A pool's memory that a capture on a destroyed stream left free: a later capture on another stream
// takes it (a capture's memory serves captures), inside its own capture. Found by the stress test
// in this rework: the dead stream's fence was queried there without Relaxed mode, and the query (a
// call the driver counts as unsafe) invalidated the ThreadLocal capture.
TEST_F(Trust, ACaptureThatTakesADeadStreamsSegmentStaysValid) {
  constexpr size_t kBytes = 8u << 20;
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  cgc_graph_t g1 = nullptr;
  ASSERT_NO_FATAL_FAILURE(CaptureOnADeadStream(pool, CGC_CAPTURE_MODE_THREAD_LOCAL, kBytes, 1.0f, &g1));
  CGC_ASSERT_OK(cgc_graph_destroy(g1));
  const cgc_memory_stats_t before = Stats(pool);
  cgc_capture_options_t o = {};
  o.struct_size = sizeof o;
  o.mode = CGC_CAPTURE_MODE_THREAD_LOCAL;
  o.pool = pool;
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  void* q = Malloc(kBytes, stream);  // a miss in the pool for this stream: the dead stream's segment
  Fill(stream, Dev(q), 3.0f, kBytes / 4);
  cgc_graph_t g2 = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g2));
  EXPECT_EQ(Stats(pool).num_driver_allocs, before.num_driver_allocs) << "the dead stream's segment was reused";
  CGC_ASSERT_OK(cgc_graph_launch(g2, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_EXPECT_OK(cgc_graph_destroy(g2));
  CGC_EXPECT_OK(cgc_free(q));
  CGC_EXPECT_OK(cgc_pool_release(pool));
}

// Found by review of this rework: a pool's eager allocation (cgc_pool_malloc) took the memory a
// capture on a destroyed stream left in the pool, which that capture's graph still writes at every
// replay. Eager and captured memory of a pool stay apart when their stream is gone too.
TEST_F(Trust, APoolsEagerMemoryNeverTakesALiveGraphsMemoryOfADeadStream) {
  constexpr size_t kBytes = 8u << 20;
  constexpr unsigned n = kBytes / 4;
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  cgc_graph_t g = nullptr;  // every replay writes 2.0 into the dead stream's memory
  ASSERT_NO_FATAL_FAILURE(CaptureOnADeadStream(pool, CGC_CAPTURE_MODE_GLOBAL, kBytes, 2.0f, &g));
  void* p = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, kBytes, stream, &p));
  Fill(stream, Dev(p), 5.0f, n);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  std::vector<float> got = Download(Dev(p), n);
  for (unsigned i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 5.0f) << "the graph's replay wrote the eager block at " << i;
  CGC_EXPECT_OK(cgc_free(p));
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_pool_release(pool));
}

// A wait, from another thread, on an event of an invalidated capture whose origin is a
// per-thread stream returned CGC_ERROR_CUDA: cgc asked the driver about "the per-thread stream",
// which on the waiting thread is another stream. It says CAPTURE_INVALIDATED now.
TEST_F(Trust, AWaitOnAnInvalidatedPerThreadCaptureFromAnotherThreadSaysInvalidated) {
  cgc_stream_t per_thread = nullptr;
  CGC_ASSERT_OK(cgc_stream_wrap(ctx, reinterpret_cast<void*>(CU_STREAM_PER_THREAD), &per_thread));
  cgc_event_t fork = nullptr;
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &fork));
  CUdeviceptr a = Alloc(4096);
  std::atomic<int> step{0};
  cgc_status_t waited = CGC_SUCCESS;
  std::string message;
  std::thread waiter([&] {
    while (step.load() != 1) std::this_thread::yield();
    waited = cgc_stream_wait_event(stream, fork);  // no current context on this thread
    message = cgc_last_error();
    step = 2;
  });
  cgc_capture_options_t o = {};
  o.struct_size = sizeof o;
  o.mode = CGC_CAPTURE_MODE_RELAXED;
  CGC_ASSERT_OK(cgc_capture_begin(per_thread, &o));
  Fill(per_thread, a, 1.0f, 1024);
  CGC_ASSERT_OK(cgc_event_record(fork, per_thread));
  EXPECT_NE(cgc__drv.cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);  // invalidates it
  step = 1;
  while (step.load() != 2) std::this_thread::yield();
  waiter.join();
  EXPECT_EQ(waited, CGC_ERROR_CAPTURE_INVALIDATED) << message;
  cgc_graph_t g = nullptr;
  EXPECT_EQ(cgc_capture_end(per_thread, &g), CGC_ERROR_CAPTURE_INVALIDATED);
  CGC_EXPECT_OK(cgc_event_destroy(fork));
  CGC_EXPECT_OK(cgc_stream_destroy(per_thread));
}

// For a capture cgc did not begin, CAPTURE_INVALIDATED messages told the caller to call
// cgc_capture_end, which refuses such captures: they say to end it where it was begun.
TEST_F(Trust, InvalidatedForeignCapturesAreNotSentToCgcCaptureEnd) {
  CUstream cs = static_cast<CUstream>(cgc_stream_native(stream));
  cgc_rng_t rng = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 1, &rng));
  CUdeviceptr a = Alloc(4096);
  ASSERT_EQ(cgc__drv.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_NE(cgc__drv.cuStreamSynchronize(cs), CUDA_SUCCESS);  // invalidates it
  EXPECT_EQ(cgc_rng_uniform(rng, reinterpret_cast<float*>(a), 256, stream), CGC_ERROR_CAPTURE_INVALIDATED);
  std::string draw = cgc_last_error();
  EXPECT_EQ(cgc_launch_host_func(stream, [](void*) {}, nullptr, nullptr), CGC_ERROR_CAPTURE_INVALIDATED);
  std::string host = cgc_last_error();
  CUgraph g = nullptr;
  cgc__drv.cuStreamEndCapture(cs, &g);
  if (g != nullptr) cgc__drv.cuGraphDestroy(g);
  for (const std::string& m : {draw, host}) {
    EXPECT_EQ(m.find("cgc_capture_end"), std::string::npos) << m;
    EXPECT_NE(m.find("did not begin"), std::string::npos) << m;
  }
  CGC_EXPECT_OK(cgc_rng_destroy(rng));
}

// A failed launch of a graph that draws left its generator advanced (CONTRACT: a failed call
// leaves nothing half done): the launch's first step, writing the generator's state on the
// launch stream, fails on a stream whose capture (not cgc's) was invalidated.
TEST_F(Trust, AFailedLaunchLeavesTheGeneratorWhereItWas) {
  cgc_rng_t rng = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 7, &rng));
  float* out = static_cast<float*>(Malloc(4096 * sizeof(float), stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_rng_uniform(rng, out, 4096, stream));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  uint64_t before = 0, after = 0;
  CGC_ASSERT_OK(cgc_rng_get_state(rng, nullptr, &before));
  CUstream cs = static_cast<CUstream>(cgc_stream_native(stream));
  ASSERT_EQ(cgc__drv.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_NE(cgc__drv.cuStreamSynchronize(cs), CUDA_SUCCESS);  // invalidates it
  EXPECT_NE(cgc_graph_launch(g, stream), CGC_SUCCESS);
  CUgraph foreign = nullptr;
  cgc__drv.cuStreamEndCapture(cs, &foreign);
  if (foreign != nullptr) cgc__drv.cuGraphDestroy(foreign);
  CGC_ASSERT_OK(cgc_rng_get_state(rng, nullptr, &after));
  EXPECT_EQ(after, before) << "the failed launch advanced the generator";
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));  // the next replay draws what the failed one would have
  CGC_ASSERT_OK(cgc_rng_get_state(rng, nullptr, &after));
  EXPECT_EQ(after, before + 4096);
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_free(out));
  CGC_EXPECT_OK(cgc_rng_destroy(rng));
}

// cgc_rng_destroy, cgc_graph_destroy and cgc_rng_create gave a dead generator's device slots back
// with cuMemFree, which waits for every kernel of the device: each call stalled for as long as any
// kernel ran. The slots now wait, in stream order, for the replays that may still read them, and
// serve the device's next generator. A replay of a destroyed graph, spinning between its state's
// write and its draw while a new generator's graph writes its own state, draws its own numbers
// (reused slots would hand it the new generator's seed).
TEST_F(Trust, GeneratorAndGraphTeardownNeverWaitForTheDevice) {
  constexpr size_t n = 1 << 16;
  cgc_stream_t busy = nullptr, other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &busy));
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  float* first = static_cast<float*>(Malloc(n * sizeof(float), stream));
  float* second = static_cast<float*>(Malloc(n * sizeof(float), stream));
  float* expected = static_cast<float*>(Malloc(n * sizeof(float), stream));
  cgc_rng_t reference = nullptr;  // an eager draw of the first graph's numbers
  CGC_ASSERT_OK(cgc_rng_create(ctx, 11, &reference));
  CGC_ASSERT_OK(cgc_rng_uniform(reference, expected, n, stream));
  CGC_ASSERT_OK(cgc_rng_destroy(reference));
  cgc_rng_t rng = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 11, &rng));
  cgc_graph_t g1 = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(busy, nullptr));
  Spin(busy, 2000000000LL);  // about a second at each replay, between the state's write and the draw
  CGC_ASSERT_OK(cgc_rng_uniform(rng, first, n, busy));
  CGC_ASSERT_OK(cgc_capture_end(busy, &g1));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_graph_launch(g1, busy));  // its state is written now; its draw reads it a second later
  const auto start = std::chrono::steady_clock::now();
  CGC_ASSERT_OK(cgc_graph_destroy(g1));
  CGC_ASSERT_OK(cgc_rng_destroy(rng));
  cgc_rng_t next = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 99, &next));
  cgc_graph_t g2 = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(other, nullptr));
  CGC_ASSERT_OK(cgc_rng_uniform(next, second, n, other));
  CGC_ASSERT_OK(cgc_capture_end(other, &g2));
  CGC_ASSERT_OK(cgc_graph_launch(g2, other));  // writes its generator's state while g1's replay spins
  CGC_ASSERT_OK(cgc_graph_destroy(g2));
  CGC_ASSERT_OK(cgc_rng_destroy(next));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  bool spin_over = false;
  {
    int complete = 0;
    cgc_event_t e = nullptr;
    CGC_ASSERT_OK(cgc_event_create(ctx, 0, &e));
    CGC_ASSERT_OK(cgc_event_record(e, busy));
    CGC_ASSERT_OK(cgc_event_query(e, &complete));
    spin_over = complete != 0;
    CGC_ASSERT_OK(cgc_event_destroy(e));
  }
  // Waiting for the device would have waited for g1's replay, spin included (no absolute bound:
  // the sanitizer slows the calls, not the spin).
  EXPECT_FALSE(spin_over) << "destroying and creating generators and graphs waited for the device (" << ms
                          << " ms)";
  CGC_ASSERT_OK(cgc_stream_synchronize(busy));
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  std::vector<float> got = Download(Dev(first), n), want = Download(Dev(expected), n);
  for (size_t i = 0; i < n; i += 97) ASSERT_EQ(got[i], want[i]) << "the destroyed graph's replay drew other numbers at " << i;
  CGC_EXPECT_OK(cgc_free(first));
  CGC_EXPECT_OK(cgc_free(second));
  CGC_EXPECT_OK(cgc_free(expected));
  CGC_EXPECT_OK(cgc_stream_destroy(busy));
  CGC_EXPECT_OK(cgc_stream_destroy(other));
}

// The device's last cgc_context_destroy while a destroyed graph's replay still ran: the graph's
// pool memory waited for that replay, and nothing settled it until a later context allocated, so
// the memory stayed reserved. The last context now waits for such work and gives it back.
TEST_F(Trust, TheLastContextGivesBackADestroyedGraphsMemoryWhoseReplayStillRuns) {
  constexpr size_t kBytes = 64u << 20;
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* t = Malloc(kBytes, stream);
  Fill(stream, Dev(t), 1.0f, kBytes / 4);
  CGC_ASSERT_OK(cgc_free(t));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  Spin(stream, 400000000LL);  // about 200 ms: the replay below is still queued behind it
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_graph_destroy(g));  // its pool's memory now waits for the replay
  CGC_ASSERT_OK(cgc_stream_destroy(stream));
  stream = nullptr;
  CGC_ASSERT_OK(cgc_context_destroy(ctx));  // the device's last cgc context
  ctx = nullptr;
  CGC_ASSERT_OK(cgc_context_create(cgc_test::TestDevice(), &ctx));
  EXPECT_EQ(Stats().bytes_reserved, baseline_.bytes_reserved) << "the graph's memory stayed reserved";
}

// A device-wide synchronisation while a pool adopts a capture cgc did not begin (PyTorch's own):
// cgc_context_synchronize's guard knew only cgc's captures, so cuCtxSynchronize ran and broke the
// adopted capture (found by the stress test's NCCL churn: an NCCL pool's release synchronises the
// device). Such calls are refused while an adoption is open, and the capture survives.
TEST_F(Trust, DeviceWideCallsAreRefusedWhileAnAdoptedCaptureIsOpen) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  CUstream cs = static_cast<CUstream>(cgc_stream_native(stream));
  ASSERT_EQ(cgc__drv.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool, cs));
  void* p = cgc_torch_malloc(1 << 20, cgc_test::TestDevice(), cs);
  ASSERT_NE(p, nullptr) << cgc_last_error();
  Fill(stream, Dev(p), 1.0f, (1 << 20) / 4);
  cgc_status_t synced = CGC_SUCCESS;
  std::string said;
  std::thread other([&] {  // another thread: its capture mode does not matter to cuCtxSynchronize
    synced = cgc_context_synchronize(ctx);
    said = cgc_last_error();
  });
  other.join();
  EXPECT_EQ(synced, CGC_ERROR_CAPTURE_UNSUPPORTED) << said;
  EXPECT_NE(said.find("cgc_pool_end_adopted_capture"), std::string::npos) << said;
  CGC_EXPECT_OK(cgc_free(p));
  CUgraph g = nullptr;
  EXPECT_EQ(cgc__drv.cuStreamEndCapture(cs, &g), CUDA_SUCCESS) << "the adopted capture was broken";
  CGC_EXPECT_OK(cgc_pool_end_adopted_capture(pool));
  if (g != nullptr) cgc__drv.cuGraphDestroy(g);
  CGC_EXPECT_OK(cgc_context_synchronize(ctx));  // allowed again
  CGC_EXPECT_OK(cgc_pool_release(pool));
}

}  // namespace
