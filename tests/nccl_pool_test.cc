// NCCL pools (1.5) and eager allocation from pools on one GPU: a one-rank communicator is enough
// for everything but the ranks' agreement, which tests/multi_gpu checks with several ranks.
// What is checked: the arena's fixed capacity, memory kinds, collectives on its blocks eagerly
// and in replays, the keys that keep eager and captured blocks of one pool apart, and the rules
// of the collective release.
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;

// NVLink multicast stays off in every process that loads NCCL on the lent machines.
class NoNvlsEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { setenv("NCCL_NVLS_ENABLE", "0", 1); }
};
::testing::Environment* const no_nvls = ::testing::AddGlobalTestEnvironment(new NoNvlsEnvironment);

constexpr size_t kCapacity = 8 << 20;

class NcclPool : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    int version = 0;
    if (cgc_nccl_version(&version) != CGC_SUCCESS) GTEST_SKIP() << "skipped: no NCCL here: " << cgc_last_error();
    cgc_comm_id_t id;
    CGC_ASSERT_OK(cgc_comm_unique_id(&id));
    CGC_ASSERT_OK(cgc_comm_create(ctx, 1, &id, 0, &comm_));
  }
  void TearDown() override {
    if (pool_ != nullptr) CGC_EXPECT_OK(cgc_pool_release(pool_));
    if (comm_ != nullptr) CGC_EXPECT_OK(cgc_comm_destroy(comm_));
    GpuTest::TearDown();
  }
  // A registered pool of kCapacity (registration is local to the rank: one rank suffices).
  void MakePool(cgc_nccl_memory_t wanted = CGC_NCCL_MEMORY_REGISTERED) {
    cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
    CGC_ASSERT_OK(cgc_nccl_pool_create(comm_, kCapacity - 12345, wanted, &pool_, &got));
    EXPECT_LE(got, wanted);
    got_ = got;
  }
  cgc_comm_t comm_ = nullptr;
  cgc_pool_t pool_ = nullptr;
  cgc_nccl_memory_t got_ = CGC_NCCL_MEMORY_PLAIN;
};

TEST_F(NcclPool, HoldsItsWholeRoundedCapacityAtOnceAndNeverGrows) {
  MakePool();
  cgc_memory_stats_t s = Stats(pool_);
  EXPECT_EQ(s.bytes_reserved, kCapacity) << "rounded up to whole 2 MiB pages";
  EXPECT_EQ(s.num_driver_allocs, 1u);
  void* a = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, 6 << 20, stream, &a));
  void* b = &b;
  EXPECT_EQ(cgc_pool_malloc(pool_, 4 << 20, stream, &b), CGC_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(b, nullptr);
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find("cgc_pool_malloc"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(kCapacity)), std::string::npos) << "names the capacity: " << msg;
  EXPECT_EQ(Stats(pool_).bytes_reserved, kCapacity) << "nothing was added from the driver";
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, 4 << 20, stream, &b));  // the freed memory serves the same stream again
  CGC_ASSERT_OK(cgc_free(b));
}

// The arena never grows: requests are cut to size, not rounded up to the size classes (which
// hand out up to 1 MiB more than asked when the rest is small).
TEST_F(NcclPool, RequestsAreCutToSizeSoTheWholeCapacityServes) {
  cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
  CGC_ASSERT_OK(cgc_nccl_pool_create(comm_, 2 << 20, CGC_NCCL_MEMORY_REGISTERED, &pool_, &got));
  void* a = nullptr;
  void* b = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, 1 << 20, stream, &a));
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, 1 << 20, stream, &b));  // the second half of a 2 MiB arena
  EXPECT_EQ(Stats(pool_).bytes_allocated, size_t(2) << 20) << "each block is exactly its request";
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_free(b));
  void* parts[4] = {};
  for (void*& p : parts) CGC_ASSERT_OK(cgc_pool_malloc(pool_, 512 << 10, stream, &p));  // freed memory, cut again
  for (void* p : parts) CGC_ASSERT_OK(cgc_free(p));
}

TEST_F(NcclPool, EagerAndCapturedAllReducesOnItsBlocksAreExact) {
  MakePool();
  const unsigned n = 4096;
  void* send = nullptr;
  void* recv = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, n * sizeof(float), stream, &send));
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, n * sizeof(float), stream, &recv));
  Fill(stream, Dev(send), 3.0f, n);
  CGC_ASSERT_OK(cgc_all_reduce(comm_, send, recv, n, CGC_FLOAT32, CGC_SUM, stream));
  for (float v : Download(Dev(recv), n)) ASSERT_EQ(v, 3.0f);

  // A capture into the pool: a temporary from the pool between the input and the result.
  cgc_capture_options_t opts = {};
  opts.struct_size = sizeof opts;
  opts.pool = pool_;
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  void* tmp = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, n * sizeof(float), stream, &tmp));
  Add(stream, Dev(tmp), Dev(send), 1.0f, n);
  CGC_ASSERT_OK(cgc_all_reduce(comm_, tmp, recv, n, CGC_FLOAT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_free(tmp));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (int replay = 0; replay < 3; replay++) {
    float input = 10.0f * (float)replay;
    Fill(stream, Dev(send), input, n);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    std::vector<float> out = Download(Dev(recv), n);
    for (unsigned i = 0; i < n; i++) ASSERT_EQ(out[i], input + 1.0f) << "replay " << replay << " element " << i;
  }
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_free(recv));
}

TEST_F(NcclPool, EagerBlocksAndCapturedBlocksOfOnePoolStayApart) {
  MakePool();
  const size_t bytes = 1 << 20;
  void* eager = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, bytes, stream, &eager));
  CGC_ASSERT_OK(cgc_free(eager));  // free for the stream's eager use, not for a capture's
  cgc_capture_options_t opts = {};
  opts.struct_size = sizeof opts;
  opts.pool = pool_;
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  void* captured = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, bytes, stream, &captured));
  Fill(stream, Dev(captured), 1.0f, bytes / sizeof(float));
  CGC_ASSERT_OK(cgc_free(captured));  // a temporary: its memory is the graph's at every replay
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  EXPECT_NE(captured, eager) << "a capture took a block eager work may still use";
  void* again = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, bytes, stream, &again));
  EXPECT_NE(again, captured) << "eager work got memory the graph writes at every replay";
  EXPECT_EQ(again, eager) << "the eager block is reused by eager work on its stream";
  CGC_ASSERT_OK(cgc_free(again));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(NcclPool, ReleaseIsRefusedWhileGraphsOrBlocksHoldItAndTheCommunicatorWaitsForIt) {
  MakePool();
  void* block = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, 4096, stream, &block));
  cgc_capture_options_t opts = {};
  opts.struct_size = sizeof opts;
  opts.pool = pool_;
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  CGC_ASSERT_OK(cgc_all_reduce(comm_, block, block, 1024, CGC_FLOAT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));

  EXPECT_EQ(cgc_pool_release(pool_), CGC_ERROR_INVALID_STATE);
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find("1 block(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 graph(s)"), std::string::npos) << msg;
  EXPECT_EQ(cgc_comm_destroy(comm_), CGC_ERROR_INVALID_STATE) << "the pool and the graph hold the communicator";
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));  // a refused release changed nothing
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  EXPECT_EQ(cgc_pool_release(pool_), CGC_ERROR_INVALID_STATE) << "a block is still allocated";
  EXPECT_NE(std::string(cgc_last_error()).find("1 block(s)"), std::string::npos) << cgc_last_error();
  CGC_ASSERT_OK(cgc_free(block));
  cgc_memory_stats_t before = Stats();
  CGC_ASSERT_OK(cgc_pool_release(pool_));
  pool_ = nullptr;
  EXPECT_EQ(Stats().bytes_reserved, before.bytes_reserved - kCapacity) << "the arena went back at the release";
  CGC_ASSERT_OK(cgc_comm_destroy(comm_));
  comm_ = nullptr;
}

TEST_F(NcclPool, ASymmetricPoolOnOneRankIsMadeOrRefusedWithNcclsReason) {
  cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
  cgc_status_t st = cgc_nccl_pool_create(comm_, kCapacity, CGC_NCCL_MEMORY_SYMMETRIC, &pool_, &got);
  if (st != CGC_SUCCESS) {
    // NCCL may decline a window on a one-rank communicator: then it says why, and nothing is held.
    EXPECT_EQ(st, CGC_ERROR_NCCL) << cgc_last_error();
    EXPECT_NE(std::string(cgc_last_error()).find("ncclCommWindowRegister"), std::string::npos) << cgc_last_error();
    EXPECT_EQ(pool_, nullptr);
    return;
  }
  std::printf("one-rank symmetric pool: got kind %d\n", (int)got);
  void* p = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool_, 4096, stream, &p));
  Fill(stream, Dev(p), 2.0f, 1024);
  CGC_ASSERT_OK(cgc_all_reduce(comm_, p, p, 1024, CGC_FLOAT32, CGC_SUM, stream));
  for (float v : Download(Dev(p), 1024)) ASSERT_EQ(v, 2.0f);
  CGC_ASSERT_OK(cgc_free(p));
}

// cgc_pool_malloc on an ordinary pool: eager memory that graphs captured into it never take.
class PoolMalloc : public cgc_test::MemoryTest {};

// An ordinary pool with an eager block, dissolved while its graph's last replay may run: its
// segments wait in a drain, then serve their streams again, cgc_pool_malloc's included (its
// eager key is dropped on the way, else no allocation would ever ask for it again).
TEST_F(PoolMalloc, EagerMemoryOfADissolvedPoolServesItsStreamAgain) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  cgc_capture_options_t opts = {};
  opts.struct_size = sizeof opts;
  opts.pool = pool;
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  void* out = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, 12 << 20, stream, &out));  // its own 12 MiB segment
  Fill(stream, Dev(out), 1.0f, 1024);
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  void* eager = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 3 << 20, stream, &eager));  // a 20 MiB segment of the pool
  CGC_ASSERT_OK(cgc_free(eager));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_graph_destroy(g));  // its last replay may still run: the pool's memory drains
  CGC_ASSERT_OK(cgc_free(out));
  CGC_ASSERT_OK(cgc_pool_release(pool));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  uint64_t allocs = Stats().num_driver_allocs;
  void* big = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, 16 << 20, stream, &big));  // only the eager block's segment fits
  EXPECT_EQ(Stats().num_driver_allocs, allocs) << "the dissolved pool's eager segment was not reused";
  CGC_ASSERT_OK(cgc_free(big));
}

TEST_F(PoolMalloc, EagerBlocksOfAnOrdinaryPoolAreCountedAndRefusedInsideCaptures) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  void* p = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 3 << 20, stream, &p));
  EXPECT_EQ(Stats(pool).bytes_allocated, (size_t)3 << 20);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* inside = &inside;
  EXPECT_EQ(cgc_pool_malloc(pool, 512, stream, &inside), CGC_ERROR_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(inside, nullptr);
  EXPECT_NE(std::string(cgc_last_error()).find("options->pool"), std::string::npos) << cgc_last_error();
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_pool_release(pool));  // an ordinary pool lives on while its block does
  Fill(stream, Dev(p), 5.0f, 1024);
  for (float v : Download(Dev(p), 1024)) ASSERT_EQ(v, 5.0f);
  CGC_ASSERT_OK(cgc_free(p));
}

// Communicators and NCCL pools made and released on one thread while another thread captures in
// Global mode: NCCL's setup and teardown make calls that break a Global capture for milliseconds,
// also on its own threads, and a capture begun after the call's check was broken. Such a capture
// is now refused at its begin (the gate: it does not wait, as the call may be a collective its own
// thread must join), and a call that finds a capture under way is refused; every capture that
// begins ends intact.
TEST_F(NcclPool, GlobalCapturesBesideCommunicatorsAndPoolsMadeAndReleasedStayValid) {
  constexpr unsigned n = 1 << 16;
  cgc_stream_t capturing = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &capturing));
  CUdeviceptr buf = Alloc(n * sizeof(float));
  std::atomic<bool> done{false};
  std::atomic<int> made{0}, unexpected{0};
  std::string unexpected_error;
  // Retried while refused: a capture on the other thread is under way.
  auto until_allowed = [](auto call) {
    cgc_status_t st;
    while ((st = call()) == CGC_ERROR_CAPTURE_UNSUPPORTED) std::this_thread::yield();
    return st;
  };
  std::thread setup([&] {
    for (int i = 0; i < 12; i++) {
      cgc_comm_id_t id;
      cgc_comm_t c = nullptr;
      cgc_pool_t p = nullptr;
      cgc_status_t st = cgc_comm_unique_id(&id);
      if (st == CGC_SUCCESS) st = until_allowed([&] { return cgc_comm_create(ctx, 1, &id, 0, &c); });
      if (st == CGC_SUCCESS)
        st = until_allowed([&] { return cgc_nccl_pool_create(c, 4 << 20, CGC_NCCL_MEMORY_REGISTERED, &p, nullptr); });
      if (p != nullptr) {
        cgc_status_t released = until_allowed([&] { return cgc_pool_release(p); });
        if (st == CGC_SUCCESS) st = released;
      }
      if (c != nullptr) {
        cgc_status_t destroyed = until_allowed([&] { return cgc_comm_destroy(c); });
        if (st == CGC_SUCCESS) st = destroyed;
      }
      if (st == CGC_SUCCESS) {
        made++;
      } else if (unexpected++ == 0) {
        unexpected_error = cgc_last_error();
      }
    }
    done = true;
  });
  int captures = 0, held_back = 0, broken = 0;
  std::string broken_error;
  while (!done) {  // the setup thread's calls end whatever happens here: no early return before join
    cgc_graph_t g = nullptr;
    cgc_status_t st = cgc_capture_begin(capturing, nullptr);
    if (st == CGC_ERROR_CAPTURE_UNSUPPORTED) {  // a setup or teardown call runs: refused, not broken later
      held_back++;
      std::this_thread::yield();
      continue;
    }
    for (int k = 0; k < 8 && st == CGC_SUCCESS; k++) {
      float v = 1.0f;
      void* args[] = {&buf, &v, const_cast<unsigned*>(&n)};
      if (cgc__drv.cuLaunchKernel(k_fill, n / 256, 1, 1, 256, 1, 1, 0,
                                  static_cast<CUstream>(cgc_stream_native(capturing)), args, nullptr) != CUDA_SUCCESS)
        break;  // the capture was broken: its end says so
    }
    if (st == CGC_SUCCESS) st = cgc_capture_end(capturing, &g);
    if (st != CGC_SUCCESS && broken++ == 0) broken_error = cgc_last_error();
    if (g != nullptr) cgc_graph_destroy(g);
    captures++;
  }
  setup.join();
  EXPECT_EQ(broken, 0) << broken << " of " << captures << " captures broken beside NCCL's setup, first: " << broken_error;
  EXPECT_EQ(unexpected.load(), 0) << unexpected_error;
  EXPECT_EQ(made.load(), 12);
  EXPECT_GT(captures, 0) << "every capture was held back (" << held_back << ")";
  CGC_EXPECT_OK(cgc_stream_destroy(capturing));
}

}  // namespace
