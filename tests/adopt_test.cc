// 1.4 on a real GPU: captures cgc did not begin (begun here with the driver, as PyTorch's
// CUDAGraph begins them) allocating from a cgc pool once it adopts them, on every stream of the
// capture; what adoption refuses; a released adopted pool's memory never serving other streams;
// and record_stream for a native stream.
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::MemoryTest;
using cgc_test::RandomFloats;

class Adopt : public MemoryTest {
 protected:
  void SetUp() override {
    MemoryTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    device_ = cgc_test::TestDevice();
    cs_ = static_cast<CUstream>(cgc_stream_native(stream));
    CGC_ASSERT_OK(cgc_pool_create(ctx, &pool_));
  }
  void TearDown() override {
    if (pool_ != nullptr) {
      EXPECT_EQ(cgc_pool_release(pool_), CGC_SUCCESS) << cgc_last_error();
    }
    MemoryTest::TearDown();
  }
  // PyTorch's entry point: what torch.cuda.graph's allocations call.
  void* TorchMalloc(size_t bytes, CUstream s) {
    void* p = cgc_torch_malloc(static_cast<ssize_t>(bytes), device_, s);
    EXPECT_NE(p, nullptr) << cgc_last_error();
    return p;
  }
  // Ends the driver's capture on cs_ and instantiates it, as PyTorch's capture_end does.
  CUgraphExec EndAndInstantiate() {
    CUgraph g = nullptr;
    CUgraphExec exec = nullptr;
    EXPECT_EQ(cgc__drv.cuStreamEndCapture(cs_, &g), CUDA_SUCCESS);
    if (g == nullptr) return nullptr;
    EXPECT_EQ(cgc__drv.cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
    cgc__drv.cuGraphDestroy(g);
    return exec;
  }
  std::string Error(cgc_status_t expected, cgc_status_t got) {
    EXPECT_EQ(got, expected) << cgc_last_error();
    return cgc_last_error();
  }

  int device_ = 0;
  CUstream cs_ = nullptr;
  cgc_pool_t pool_ = nullptr;
};

TEST_F(Adopt, ACaptureCgcDidNotBeginAllocatesFromThePoolOnEveryStream) {
  constexpr unsigned n = 1 << 16;
  constexpr size_t bytes = n * sizeof(float);
  CUdeviceptr in = Alloc(bytes);
  std::vector<float> x = RandomFloats(n, 41);
  Upload(in, x);
  cgc_stream_t side = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  CUstream ss = static_cast<CUstream>(cgc_stream_native(side));
  CUevent fork = nullptr, join = nullptr;
  CU_ASSERT_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CU_ASSERT_OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));

  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cgc_torch_malloc(bytes, device_, cs_), nullptr) << "refused until a pool adopts the capture";
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool_, cs_));
  void* t = TorchMalloc(bytes, cs_);
  Add(stream, Dev(t), in, 1.0f, n);  // t = x + 1
  // A side stream forked in by the driver alone: the same capture, so the same pool.
  CU_ASSERT_OK(cuEventRecord(fork, cs_));
  CU_ASSERT_OK(cuStreamWaitEvent(ss, fork, 0));
  void* u = TorchMalloc(bytes, ss);
  Add(side, Dev(u), Dev(t), 2.0f, n);  // u = x + 3
  CU_ASSERT_OK(cuEventRecord(join, ss));
  CU_ASSERT_OK(cuStreamWaitEvent(cs_, join, 0));
  // cgc_malloc asks whether its stream captures while a pool adopts a capture.
  void* out = Malloc(bytes, stream);
  Add(stream, Dev(out), Dev(u), 4.0f, n);  // out = x + 7
  EXPECT_EQ(Stats(pool_).bytes_allocated, 3 * bytes) << "all three blocks come from the pool";
  // Freed in the capture with no other use: the next allocation of the stream reuses it, as
  // replays repeat the same order.
  CGC_ASSERT_OK(cgc_free(t));
  void* again = TorchMalloc(bytes, cs_);
  EXPECT_EQ(again, t);
  CGC_ASSERT_OK(cgc_free(again));
  CUgraphExec exec = EndAndInstantiate();
  ASSERT_NE(exec, nullptr);
  CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool_));
  cgc_memory_stats_t ps = Stats(pool_);
  EXPECT_EQ(ps.bytes_allocated, 2 * bytes) << "u and out are the graph's outputs";
  EXPECT_GE(ps.bytes_reserved, 3 * bytes);

  CU_ASSERT_OK(cuGraphLaunch(exec, cs_));
  std::vector<float> y = Download(Dev(out), n);
  for (unsigned i = 0; i < n; i += 97) ASSERT_FLOAT_EQ(y[i], x[i] + 7.0f) << i;
  // The capture is over: the stream's allocations are eager again, not the pool's.
  void* eager = TorchMalloc(bytes, cs_);
  EXPECT_EQ(Stats(pool_).bytes_allocated, 2 * bytes);
  CGC_ASSERT_OK(cgc_free(eager));

  CU_ASSERT_OK(cuStreamSynchronize(cs_));
  CU_ASSERT_OK(cuGraphExecDestroy(exec));
  CGC_ASSERT_OK(cgc_free(u));
  CGC_ASSERT_OK(cgc_free(out));
  cgc__drv.cuEventDestroy(fork);
  cgc__drv.cuEventDestroy(join);
  CGC_ASSERT_OK(cgc_stream_destroy(side));
}

TEST_F(Adopt, WhatCannotBeAdoptedIsRefusedByName) {
  std::string msg = Error(CGC_ERROR_INVALID_STATE, cgc_pool_adopt_capture(pool_, cs_));
  EXPECT_NE(msg.find("not capturing"), std::string::npos) << msg;
  msg = Error(CGC_ERROR_INVALID_STATE, cgc_pool_end_adopted_capture(pool_));
  EXPECT_NE(msg.find("adopts no capture"), std::string::npos) << msg;
  EXPECT_EQ(cgc_pool_adopt_capture(nullptr, cs_), CGC_ERROR_INVALID_ARGUMENT);

  // A capture cgc began has its own pool already.
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  msg = Error(CGC_ERROR_INVALID_STATE, cgc_pool_adopt_capture(pool_, cs_));
  EXPECT_NE(msg.find("which cgc began"), std::string::npos) << msg;
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_destroy(g));

  // One capture per pool, and one pool per capture.
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  CUstream os = static_cast<CUstream>(cgc_stream_native(other));
  cgc_pool_t second = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &second));
  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_ASSERT_OK(cuStreamBeginCapture(os, CU_STREAM_CAPTURE_MODE_RELAXED));
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool_, cs_));
  msg = Error(CGC_ERROR_INVALID_STATE, cgc_pool_adopt_capture(pool_, os));
  EXPECT_NE(msg.find("one capture at a time"), std::string::npos) << msg;
  msg = Error(CGC_ERROR_INVALID_STATE, cgc_pool_adopt_capture(second, cs_));
  EXPECT_NE(msg.find("allocates from pool"), std::string::npos) << msg;
  // A cgc capture into a pool that adopts one is refused too.
  cgc_stream_t third = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &third));
  cgc_capture_options_t into = {sizeof into, CGC_CAPTURE_MODE_RELAXED, pool_, 0};
  msg = Error(CGC_ERROR_INVALID_STATE, cgc_capture_begin(third, &into));
  EXPECT_NE(msg.find("one capture at a time"), std::string::npos) << msg;
  cgc_capture_status_t third_status = CGC_CAPTURE_NONE;
  CGC_EXPECT_OK(cgc_stream_capture_status(third, &third_status, nullptr));
  EXPECT_EQ(third_status, CGC_CAPTURE_NONE) << "a refused begin leaves nothing capturing";
  CGC_ASSERT_OK(cgc_stream_destroy(third));
  // The cache is not given back while an adopted capture may still allocate.
  msg = Error(CGC_ERROR_INVALID_STATE, cgc_empty_cache(ctx));
  EXPECT_NE(msg.find("capture cgc did not begin"), std::string::npos) << msg;
  CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool_));
  msg = Error(CGC_ERROR_INVALID_STATE, cgc_pool_end_adopted_capture(pool_));
  EXPECT_NE(msg.find("adopts no capture"), std::string::npos) << "a second end is refused: " << msg;
  CUgraph raw = nullptr;
  CU_ASSERT_OK(cuStreamEndCapture(os, &raw));
  if (raw) cgc__drv.cuGraphDestroy(raw);
  raw = nullptr;
  CU_ASSERT_OK(cuStreamEndCapture(cs_, &raw));
  if (raw) cgc__drv.cuGraphDestroy(raw);

  // An invalidated capture says so.
  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_NE(cgc__drv.cuStreamSynchronize(cs_), CUDA_SUCCESS) << "a synchronisation invalidates the capture";
  msg = Error(CGC_ERROR_CAPTURE_INVALIDATED, cgc_pool_adopt_capture(pool_, cs_));
  raw = nullptr;
  cgc__drv.cuStreamEndCapture(cs_, &raw);
  if (raw) cgc__drv.cuGraphDestroy(raw);
  CGC_ASSERT_OK(cgc_pool_release(second));
  CGC_ASSERT_OK(cgc_stream_destroy(other));
}

TEST_F(Adopt, AReleasedAdoptedPoolsMemoryGoesBackToTheDriverNotToOtherStreams) {
  constexpr size_t bytes = 3 << 20;
  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool_, cs_));
  void* t = TorchMalloc(bytes, cs_);
  Fill(stream, Dev(t), 1.0f, bytes / 4);
  CGC_ASSERT_OK(cgc_free(t));
  CUgraphExec exec = EndAndInstantiate();
  ASSERT_NE(exec, nullptr);
  CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool_));
  size_t pool_reserved = Stats(pool_).bytes_reserved;
  ASSERT_GE(pool_reserved, bytes);
  // Replays cgc cannot see may still use the memory when the pool is released.
  CU_ASSERT_OK(cuGraphLaunch(exec, cs_));
  CGC_ASSERT_OK(cgc_pool_release(pool_));
  pool_ = nullptr;
  size_t reserved = Stats().bytes_reserved;
  void* eager = Malloc(bytes, stream);
  EXPECT_NE(eager, t) << "the released pool's block served an eager allocation";
  CGC_ASSERT_OK(cgc_free(eager));
  EXPECT_GE(Stats().bytes_reserved, reserved) << "nothing went back before empty_cache";
  CU_ASSERT_OK(cuStreamSynchronize(cs_));
  CU_ASSERT_OK(cuGraphExecDestroy(exec));
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats().bytes_reserved, baseline_.bytes_reserved) << "empty_cache gives it back to the driver";
}

// An adoption lasts until its adopter ends it, also when its capture failed (PyTorch never calls
// endAllocateToPool then; the bridge ends the route itself): cgc knows adoptions from its own
// records and never asks the driver whether another thread's capture is over (asking about a
// stream whose capture another thread is ending crashes driver 580).
TEST_F(Adopt, AnAdoptionLastsUntilItsAdopterEndsIt) {
  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_RELAXED));
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool_, cs_));
  void* t = TorchMalloc(4096, cs_);
  EXPECT_NE(cgc__drv.cuStreamSynchronize(cs_), CUDA_SUCCESS) << "invalidates it";
  std::string msg = Error(CGC_ERROR_INVALID_STATE, cgc_empty_cache(ctx));
  EXPECT_NE(msg.find("cgc_pool_end_adopted_capture"), std::string::npos) << msg;
  CUgraph raw = nullptr;
  EXPECT_NE(cgc__drv.cuStreamEndCapture(cs_, &raw), CUDA_SUCCESS) << "the failed end, as torch's capture_end sees it";
  if (raw) cgc__drv.cuGraphDestroy(raw);
  Error(CGC_ERROR_INVALID_STATE, cgc_empty_cache(ctx));  // still adopted: its adopter has not ended it
  // The pool records one capture at a time: a second adoption waits for the first one's end.
  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_RELAXED));
  Error(CGC_ERROR_INVALID_STATE, cgc_pool_adopt_capture(pool_, cs_));
  raw = nullptr;
  CU_ASSERT_OK(cuStreamEndCapture(cs_, &raw));
  if (raw) cgc__drv.cuGraphDestroy(raw);
  CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool_));  // only its adopter ends it
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  CGC_ASSERT_OK(cgc_free(t));
  // The pool serves the next capture.
  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_RELAXED));
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool_, cs_));
  CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool_));
  raw = nullptr;
  CU_ASSERT_OK(cuStreamEndCapture(cs_, &raw));
  if (raw) cgc__drv.cuGraphDestroy(raw);
}

// A block read on side streams and freed in the capture is reused on its stream once every side
// stream has joined it, as seen in the capture graph's edges (the joins are the driver's events,
// which cgc never sees), and not before: PyTorch's graph_capture_record_stream_reuse.
TEST_F(Adopt, ABlockUsedOnSideStreamsIsReusedOnlyAfterEverySideStreamJoined) {
  if (cgc__drv.cuGraphNodeGetDependencies == nullptr) GTEST_SKIP() << "the driver predates CUDA 12.3's graph edges";
  constexpr unsigned n = 1 << 12;
  constexpr size_t bytes = n * sizeof(float);
  CUdeviceptr in = Alloc(bytes);
  std::vector<float> x = RandomFloats(n, 43);
  Upload(in, x);
  cgc_stream_t side[2] = {nullptr, nullptr};
  CUstream ss[2] = {nullptr, nullptr};
  CUevent fork = nullptr, join[2] = {nullptr, nullptr};
  CU_ASSERT_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  for (int i = 0; i < 2; i++) {
    CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side[i]));
    ss[i] = static_cast<CUstream>(cgc_stream_native(side[i]));
    CU_ASSERT_OK(cuEventCreate(&join[i], CU_EVENT_DISABLE_TIMING));
  }

  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool_, cs_));
  void* sink = TorchMalloc(bytes, cs_);
  void* data = TorchMalloc(bytes, cs_);
  Add(stream, Dev(data), in, 1.0f, n);  // data = x + 1
  CU_ASSERT_OK(cuEventRecord(fork, cs_));
  void* out[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; i++) {
    CU_ASSERT_OK(cuStreamWaitEvent(ss[i], fork, 0));
    out[i] = TorchMalloc(bytes, ss[i]);
    Add(side[i], Dev(out[i]), Dev(data), 2.0f + i, n);  // out[i] = x + 3 + i
    CGC_ASSERT_OK(cgc_record_stream_native(data, ss[i]));
  }
  CGC_ASSERT_OK(cgc_free(data));
  void* before = TorchMalloc(bytes, cs_);
  EXPECT_NE(before, data) << "reused while both side streams may still read it";
  // The first side stream joins: the other may still read it.
  CU_ASSERT_OK(cuEventRecord(join[0], ss[0]));
  CU_ASSERT_OK(cuStreamWaitEvent(cs_, join[0], 0));
  Add(stream, Dev(sink), Dev(out[0]), 0.0f, n);
  void* half = TorchMalloc(bytes, cs_);
  EXPECT_NE(half, data) << "reused before the second side stream joined";
  CU_ASSERT_OK(cuEventRecord(join[1], ss[1]));
  CU_ASSERT_OK(cuStreamWaitEvent(cs_, join[1], 0));
  Add(stream, Dev(sink), Dev(out[1]), 0.0f, n);  // sink = x + 4
  void* after = TorchMalloc(bytes, cs_);
  EXPECT_EQ(after, data) << "not reused after every side stream joined";
  Add(stream, Dev(after), Dev(sink), 10.0f, n);  // after = x + 14, over what the sides read
  CUgraphExec exec = EndAndInstantiate();
  ASSERT_NE(exec, nullptr);
  CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool_));

  CU_ASSERT_OK(cuGraphLaunch(exec, cs_));
  std::vector<float> y0 = Download(Dev(out[0]), n), y1 = Download(Dev(out[1]), n), z = Download(Dev(after), n);
  for (unsigned i = 0; i < n; i += 61) {
    ASSERT_FLOAT_EQ(y0[i], x[i] + 3.0f) << i;
    ASSERT_FLOAT_EQ(y1[i], x[i] + 4.0f) << i;
    ASSERT_FLOAT_EQ(z[i], x[i] + 14.0f) << i;
  }
  CU_ASSERT_OK(cuStreamSynchronize(cs_));
  CU_ASSERT_OK(cuGraphExecDestroy(exec));
  for (void* p : {sink, before, half, after, out[0], out[1]}) CGC_ASSERT_OK(cgc_free(p));
  cgc__drv.cuEventDestroy(fork);
  for (int i = 0; i < 2; i++) {
    cgc__drv.cuEventDestroy(join[i]);
    CGC_ASSERT_OK(cgc_stream_destroy(side[i]));
  }
}

// Another thread's free in the capture is not asked about (the adopter's thread alone queries the
// capture, which only it ends): its block is reused after the capture's end, as before.
TEST_F(Adopt, AFreeOnAnotherThreadWaitsForTheCapturesEnd) {
  constexpr size_t bytes = 1 << 16;
  cgc_stream_t side = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  CUstream ss = static_cast<CUstream>(cgc_stream_native(side));
  CUevent fork = nullptr, join = nullptr;
  CU_ASSERT_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CU_ASSERT_OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  CU_ASSERT_OK(cuStreamBeginCapture(cs_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CGC_ASSERT_OK(cgc_pool_adopt_capture(pool_, cs_));
  void* data = TorchMalloc(bytes, cs_);
  CU_ASSERT_OK(cuEventRecord(fork, cs_));
  CU_ASSERT_OK(cuStreamWaitEvent(ss, fork, 0));
  void* out = TorchMalloc(bytes, ss);
  CGC_ASSERT_OK(cgc_record_stream_native(data, ss));
  cgc_status_t freed = CGC_ERROR_INVALID_STATE;
  std::thread other([&] { freed = cgc_free(data); });
  other.join();
  CGC_ASSERT_OK(freed);
  CU_ASSERT_OK(cuEventRecord(join, ss));
  CU_ASSERT_OK(cuStreamWaitEvent(cs_, join, 0));
  void* after = TorchMalloc(bytes, cs_);
  EXPECT_NE(after, data) << "reused on the strength of a query another thread made";
  CUgraphExec exec = EndAndInstantiate();
  ASSERT_NE(exec, nullptr);
  CGC_ASSERT_OK(cgc_pool_end_adopted_capture(pool_));
  CU_ASSERT_OK(cuGraphExecDestroy(exec));
  CGC_ASSERT_OK(cgc_free(after));
  CGC_ASSERT_OK(cgc_free(out));
  cgc__drv.cuEventDestroy(fork);
  cgc__drv.cuEventDestroy(join);
  CGC_ASSERT_OK(cgc_stream_destroy(side));
}

TEST_F(Adopt, RecordStreamNativeKeepsABlockFromReuseWhileTheOtherStreamRuns) {
  constexpr size_t bytes = 1 << 20;
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  void* p = Malloc(bytes, stream);
  Spin(other, 200000000);  // about 0.1 s: the block is still in use when it is freed
  CGC_ASSERT_OK(cgc_record_stream_native(p, cgc_stream_native(other)));
  CGC_ASSERT_OK(cgc_free(p));
  void* q = Malloc(bytes, stream);
  EXPECT_NE(q, p) << "reused while the stream it was recorded on still runs";
  CGC_ASSERT_OK(cgc_free(q));
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  EXPECT_EQ(cgc_record_stream_native(nullptr, cs_), CGC_ERROR_INVALID_ARGUMENT);
  std::string msg = Error(CGC_ERROR_INVALID_ARGUMENT, cgc_record_stream_native(reinterpret_cast<void*>(0x1000), cs_));
  EXPECT_NE(msg.find("not a live allocation"), std::string::npos) << msg;
  CGC_ASSERT_OK(cgc_stream_destroy(other));
}

}  // namespace
