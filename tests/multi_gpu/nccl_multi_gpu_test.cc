// Captured NCCL collectives across GPUs, one process per GPU.
//
// Run plainly, this binary is the launcher: it starts one copy of itself per GPU (CGC_RANK,
// CGC_NRANKS and CGC_ID_DIR in the environment), passes NCCL unique ids between them through
// files in CGC_ID_DIR, kills every rank if they are not done within CGC_MULTI_GPU_TIMEOUT
// seconds (default 300) and says which ranks hung, then prints each rank's GoogleTest summary
// and an overall one. With fewer than 2 GPUs, or without NCCL, it reports the tests as skipped
// with the reason. Run with CGC_RANK set, it is one rank: a GoogleTest program.
//
// Ranks: min(GPUs, 8), or CGC_NRANKS. Every rank runs with NCCL_NVLS_ENABLE=0 (the launcher sets
// it). CGC_MULTI_GPU_STRESS_SECONDS=<s> runs the stress test (Stress.*) for that long, and raises
// the timeout to at least s + 120; CGC_MULTI_GPU_STRESS_SEED picks another sequence for it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;

int Rank() { return std::atoi(std::getenv("CGC_RANK")); }
int NRanks() { return std::atoi(std::getenv("CGC_NRANKS")); }

// ---- unique ids through files: rank 0 writes <dir>/<tag>.id atomically, the others wait ----

bool ShareId(const std::string& tag, cgc_comm_id_t* id, std::string* err) {
  std::string dir = std::getenv("CGC_ID_DIR");
  std::string path = dir + "/" + tag + ".id";
  if (Rank() == 0) {
    if (cgc_comm_unique_id(id) != CGC_SUCCESS) {
      *err = cgc_last_error();
      return false;
    }
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id->internal, sizeof id->internal);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      *err = "cannot publish " + path;
      return false;
    }
    return true;
  }
  for (int i = 0; i < 6000; i++) {  // up to 60 s
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(id->internal, sizeof id->internal)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  *err = "rank 0 never published " + path;
  return false;
}

cgc_comm_t CreateComm(cgc_context_t ctx, const std::string& tag) {
  cgc_comm_id_t id;
  std::string err;
  if (!ShareId(tag, &id, &err)) {
    ADD_FAILURE() << err;
    return nullptr;
  }
  cgc_comm_t comm = nullptr;
  cgc_status_t st = cgc_comm_create(ctx, NRanks(), &id, Rank(), &comm);
  EXPECT_EQ(st, CGC_SUCCESS) << cgc_last_error();
  return comm;
}

constexpr uint32_t kK = 2654435761u;  // the stamp kernel writes p[j] = seed * kK + j

class Nccl : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (comm_ == nullptr) {  // one communicator for the whole run: created once, kept
      CGC_ASSERT_OK(cgc_context_create(cgc_test::TestDevice(), &comm_ctx_));
      comm_ = CreateComm(comm_ctx_, "main");
    }
    ASSERT_NE(comm_, nullptr);
    rank_ = Rank();
    n_ = NRanks();
  }
  void* Malloc(size_t bytes) { return GpuTest::Malloc(bytes, stream); }
  uint32_t Seed(int rank, int step) const { return uint32_t(rank * 1000 + step + 1); }
  uint32_t SeedSum(int step) const {
    uint32_t s = 0;
    for (int r = 0; r < n_; r++) s += Seed(r, step);
    return s;
  }
  // Every one of the n words at device address p equals expected(j); else the first that does not.
  template <class F>
  ::testing::AssertionResult WordsMatch(const void* p, size_t n, F expected) {
    std::vector<uint32_t> got = DownloadWords(Dev(p), n);
    for (size_t j = 0; j < n; j++) {
      uint32_t want = expected(j);
      if (got[j] != want)
        return ::testing::AssertionFailure() << "word " << j << " of " << n << " is " << got[j] << ", expected "
                                             << want;
    }
    return ::testing::AssertionSuccess();
  }

  static cgc_comm_t comm_;
  static cgc_context_t comm_ctx_;
  int rank_ = 0, n_ = 0;
};
cgc_comm_t Nccl::comm_ = nullptr;
cgc_context_t Nccl::comm_ctx_ = nullptr;

TEST_F(Nccl, EagerAllReduceSumsEveryRank) {
  constexpr unsigned c = 4096;
  void* buf = Malloc(c * 4);
  Stamp(stream, Dev(buf), Seed(rank_, 0), c);
  CGC_ASSERT_OK(cgc_all_reduce(comm_, buf, buf, c, CGC_UINT32, CGC_SUM, stream));
  std::vector<uint32_t> out = DownloadWords(Dev(buf), c);
  uint32_t seeds = 0;
  for (int r = 0; r < n_; r++) seeds += Seed(r, 0);
  for (unsigned j = 0; j < c; j++) ASSERT_EQ(out[j], seeds * kK + uint32_t(n_) * j) << j;
  CGC_ASSERT_OK(cgc_free(buf));
}

TEST_F(Nccl, CapturedAllReduceGivesTheExactSumOnEveryReplayWithFreshInputs) {
  constexpr unsigned c = 1 << 18;
  void* send = Malloc(c * 4);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));  // Global mode
  void* recv = Malloc(c * 4);                          // from the capture's private pool
  CGC_ASSERT_OK(cgc_all_reduce(comm_, send, recv, c, CGC_UINT32, CGC_SUM, stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  cgc_memory_stats_t ps = {sizeof ps, 0, 0, 0, 0, 0, 0};
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_graph_pool(g, &pool));
  CGC_ASSERT_OK(cgc_memory_stats(ctx, pool, &ps));
  EXPECT_EQ(ps.bytes_allocated, size_t(c) * 4);
  std::vector<uint32_t> out;
  for (int step = 0; step < 100; step++) {
    Stamp(stream, Dev(send), Seed(rank_, step), c);  // inputs rewritten before each replay
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    out = DownloadWords(Dev(recv), c);
    uint32_t seeds = 0;
    for (int r = 0; r < n_; r++) seeds += Seed(r, step);
    for (unsigned j = 0; j < c; j += 997) ASSERT_EQ(out[j], seeds * kK + uint32_t(n_) * j) << "step " << step;
    ASSERT_EQ(out[c - 1], seeds * kK + uint32_t(n_) * (c - 1)) << "step " << step;
  }
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_free(recv));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Nccl, CapturedAllGatherCollectsEveryRanksBlock) {
  constexpr unsigned c = 8192;
  void* send = Malloc(c * 4);
  void* recv = Malloc(size_t(c) * 4 * n_);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_all_gather(comm_, send, recv, c, CGC_UINT32, stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (int step = 0; step < 3; step++) {
    Stamp(stream, Dev(send), Seed(rank_, step), c);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    std::vector<uint32_t> out = DownloadWords(Dev(recv), size_t(c) * n_);
    for (int r = 0; r < n_; r++)
      for (unsigned j = 0; j < c; j += 61) ASSERT_EQ(out[r * c + j], Seed(r, step) * kK + j) << r;
  }
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_free(recv));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Nccl, CapturedReduceScatterSumsEachRanksShare) {
  constexpr unsigned c = 8192;
  void* send = Malloc(size_t(c) * 4 * n_);
  void* recv = Malloc(c * 4);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_reduce_scatter(comm_, send, recv, c, CGC_UINT32, CGC_SUM, stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  Stamp(stream, Dev(send), Seed(rank_, 7), c * n_);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  std::vector<uint32_t> out = DownloadWords(Dev(recv), c);
  uint32_t seeds = 0;
  for (int r = 0; r < n_; r++) seeds += Seed(r, 7);
  for (unsigned j = 0; j < c; j += 31) ASSERT_EQ(out[j], seeds * kK + uint32_t(n_) * (rank_ * c + j)) << j;
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_free(recv));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Nccl, CapturedBroadcastCopiesTheRootsData) {
  constexpr unsigned c = 4096;
  void* send = Malloc(c * 4);
  void* recv = Malloc(c * 4);
  for (int root : {0, n_ - 1}) {
    CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
    CGC_ASSERT_OK(cgc_broadcast(comm_, send, recv, c, CGC_UINT32, root, stream));
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    Stamp(stream, Dev(send), Seed(rank_, 3), c);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    std::vector<uint32_t> out = DownloadWords(Dev(recv), c);
    for (unsigned j = 0; j < c; j += 17) ASSERT_EQ(out[j], Seed(root, 3) * kK + j) << "root " << root;
    CGC_ASSERT_OK(cgc_graph_destroy(g));
  }
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_free(recv));
}

TEST_F(Nccl, CapturedSendRecvRingPassesDataToTheNextRank) {
  constexpr unsigned c = 4096;
  void* send = Malloc(c * 4);
  void* recv = Malloc(c * 4);
  int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_group_start());
  CGC_ASSERT_OK(cgc_send(comm_, send, c, CGC_UINT32, next, stream));
  CGC_ASSERT_OK(cgc_recv(comm_, recv, c, CGC_UINT32, prev, stream));
  CGC_ASSERT_OK(cgc_group_end());
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (int step = 0; step < 5; step++) {
    Stamp(stream, Dev(send), Seed(rank_, step), c);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    std::vector<uint32_t> out = DownloadWords(Dev(recv), c);
    for (unsigned j = 0; j < c; j += 13) ASSERT_EQ(out[j], Seed(prev, step) * kK + j) << "step " << step;
  }
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_free(recv));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Nccl, CaptureHoldsComputeAndACollectiveOnAJoinedSideStream) {
  constexpr unsigned c = 1 << 16;
  cgc_stream_t side = nullptr;
  cgc_event_t fork = nullptr, join = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &fork));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &join));
  void* x = Malloc(c * 4);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  Fill(stream, Dev(x), float(rank_ + 1), c);               // compute on the origin
  CGC_ASSERT_OK(cgc_event_record(fork, stream));
  CGC_ASSERT_OK(cgc_stream_wait_event(side, fork));
  void* y = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, c * 4, side, &y));       // side-stream buffer from the pool
  CGC_ASSERT_OK(cgc_all_reduce(comm_, x, y, c, CGC_FLOAT32, CGC_SUM, side));
  CGC_ASSERT_OK(cgc_event_record(join, side));
  CGC_ASSERT_OK(cgc_stream_wait_event(stream, join));
  Axpb(stream, Dev(y), 2.0f, 1.0f, c);                     // compute after the join
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (int i = 0; i < 3; i++) CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  float sum = float(n_ * (n_ + 1) / 2);
  std::vector<float> out = Download(Dev(y), c);
  EXPECT_EQ(out[0], 2.0f * sum + 1.0f);
  EXPECT_EQ(out[c - 1], 2.0f * sum + 1.0f);
  CGC_ASSERT_OK(cgc_free(x));
  CGC_ASSERT_OK(cgc_free(y));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(side));
  CGC_ASSERT_OK(cgc_event_destroy(fork));
  CGC_ASSERT_OK(cgc_event_destroy(join));
}

TEST_F(Nccl, GlobalCaptureWorksOnAFreshCommunicatorWithNoEagerCollective) {
  cgc_comm_t fresh = CreateComm(ctx, "fresh");
  ASSERT_NE(fresh, nullptr);
  constexpr unsigned c = 1024;
  void* buf = Malloc(c * 4);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));  // first user collective, inside Global capture
  CGC_ASSERT_OK(cgc_all_reduce(fresh, buf, buf, c, CGC_FLOAT32, CGC_MAX, stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  Fill(stream, Dev(buf), float(rank_ + 10), c);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  EXPECT_EQ(Download(Dev(buf), c)[c / 2], float(n_ - 1 + 10));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_free(buf));
  CGC_ASSERT_OK(cgc_comm_destroy(fresh));
}

// A graph replayed on one stream, then an eager collective of the same communicator on another
// stream that reads the graph's result: the eager one must run after the graph's collective. With
// NCCL's graph mixing on, NCCL orders them; with it off (run the suite with
// CGC_NCCL_GRAPH_MIXING=off), cgc does (SEMANTICS 33). Without either, the eager all-reduce would
// start while the graph still spins and sum zeros (or the two kernels of one communicator would
// run at once).
TEST_F(Nccl, WorkOfOneCommunicatorOnTwoStreamsRunsInIssueOrder) {
  constexpr unsigned c = 4096;
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  void* x = Malloc(c * 4);
  void* y = Malloc(c * 4);
  CU_ASSERT_OK(cuMemsetD32Async(Dev(y), 0, c, (CUstream)cgc_stream_native(stream)));
  cgc_graph_t g = nullptr;
  cgc_capture_options_t opts = {};
  opts.struct_size = sizeof opts;
  opts.mode = CGC_CAPTURE_MODE_THREAD_LOCAL;
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  Spin(stream, 20 * 1000 * 1000);  // ~10 ms: the eager collective is issued long before this ends
  CGC_ASSERT_OK(cgc_all_reduce(comm_, x, y, c, CGC_UINT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (int round = 0; round < 3; round++) {
    Stamp(stream, Dev(x), Seed(rank_, round), c);
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    CGC_ASSERT_OK(cgc_all_reduce(comm_, y, y, c, CGC_UINT32, CGC_SUM, other));  // y = n * (graph's sum)
    CGC_ASSERT_OK(cgc_stream_synchronize(other));
    uint32_t n = uint32_t(n_), seeds = SeedSum(round);
    EXPECT_TRUE(WordsMatch(y, c, [&](size_t j) { return n * (seeds * kK + n * uint32_t(j)); })) << "round " << round;
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  }
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_free(x));
  CGC_ASSERT_OK(cgc_free(y));
  CGC_ASSERT_OK(cgc_stream_destroy(other));
}

// A release that one rank cannot make (it still holds a block) is refused on every rank: no rank
// may drop a registration its peers keep using.
TEST_F(Nccl, AnNcclPoolReleaseOneRankCannotMakeIsRefusedOnEveryRank) {
  cgc_pool_t pool = nullptr;
  cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
  CGC_ASSERT_OK(cgc_nccl_pool_create(comm_, 4 << 20, CGC_NCCL_MEMORY_REGISTERED, &pool, &got));
  void* held = nullptr;
  if (rank_ == 0) CGC_ASSERT_OK(cgc_pool_malloc(pool, 4096, stream, &held));
  EXPECT_EQ(cgc_pool_release(pool), CGC_ERROR_INVALID_STATE) << "rank " << rank_ << ": " << cgc_last_error();
  // The pool still works on every rank.
  void* buf = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 4096, stream, &buf));
  Stamp(stream, Dev(buf), Seed(rank_, 7), 1024);
  CGC_ASSERT_OK(cgc_all_reduce(comm_, buf, buf, 1024, CGC_UINT32, CGC_SUM, stream));
  uint32_t n = uint32_t(n_), seeds = SeedSum(7);
  EXPECT_TRUE(WordsMatch(buf, 1024, [&](size_t j) { return seeds * kK + n * uint32_t(j); }));
  CGC_ASSERT_OK(cgc_free(buf));
  if (held != nullptr) CGC_ASSERT_OK(cgc_free(held));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(Nccl, GraphsOnTwoCommunicatorsReplayInSequence) {
  cgc_comm_t second = CreateComm(ctx, "second");
  ASSERT_NE(second, nullptr);
  constexpr unsigned c = 2048;
  void* a = Malloc(c * 4);
  void* b = Malloc(c * 4);
  cgc_graph_t ga = nullptr, gb = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_all_reduce(comm_, a, a, c, CGC_FLOAT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_capture_end(stream, &ga));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_all_reduce(second, a, b, c, CGC_FLOAT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_capture_end(stream, &gb));
  for (int i = 0; i < 10; i++) {
    Fill(stream, Dev(a), 1.0f, c);
    CGC_ASSERT_OK(cgc_graph_launch(ga, stream));  // a = n
    CGC_ASSERT_OK(cgc_graph_launch(gb, stream));  // b = n * n
  }
  EXPECT_EQ(Download(Dev(b), c)[5], float(n_ * n_));
  CGC_ASSERT_OK(cgc_graph_destroy(ga));
  CGC_ASSERT_OK(cgc_graph_destroy(gb));
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_comm_destroy(second));
}

TEST_F(Nccl, ACommunicatorWithLiveGraphsCannotBeDestroyedFirst) {
  cgc_comm_t held = CreateComm(ctx, "held");
  ASSERT_NE(held, nullptr);
  void* buf = Malloc(4096);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_all_reduce(held, buf, buf, 1024, CGC_FLOAT32, CGC_SUM, stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  // NCCL >= 2.26 would wait in ncclCommDestroy for the graph: cgc refuses instead of hanging.
  EXPECT_EQ(cgc_comm_destroy(held), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("destroy them first"), std::string::npos) << cgc_last_error();
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));  // still usable
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_comm_destroy(held));
  CGC_ASSERT_OK(cgc_free(buf));
}

TEST_F(Nccl, BadArgumentsAreRefusedWithAReason) {
  void* buf = Malloc(1024);
  EXPECT_EQ(cgc_all_reduce(comm_, buf, buf, 16, static_cast<cgc_dtype_t>(42), CGC_SUM, stream),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cgc_last_error()).find("dtype 42"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_all_reduce(comm_, buf, buf, 16, CGC_FLOAT32, static_cast<cgc_reduce_op_t>(9), stream),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_all_reduce(comm_, nullptr, buf, 16, CGC_FLOAT32, CGC_SUM, stream), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_broadcast(comm_, buf, buf, 16, CGC_FLOAT32, n_, stream), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_send(comm_, buf, 16, CGC_FLOAT32, -1, stream), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_recv(comm_, buf, 16, CGC_FLOAT32, n_, stream), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_all_gather(comm_, buf, buf, 16, CGC_FLOAT32, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  cgc_comm_t c = reinterpret_cast<cgc_comm_t>(0x1);
  cgc_comm_id_t id = {};
  EXPECT_EQ(cgc_comm_create(ctx, 2, &id, 5, &c), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  // Creating a communicator during a capture would break it: refused up front.
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  EXPECT_EQ(cgc_comm_create(ctx, n_, &id, rank_, &c), CGC_ERROR_CAPTURE_UNSUPPORTED);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_free(buf));
}

// Last: it leaves a communicator aborted. Rank 0 enqueues an all-reduce that rank 1 never
// joins; a watchdog thread aborts the communicator, which must unblock the waiting host thread.
// Every rank then sees its communicator refuse further work: an error, not a hang.
TEST_F(Nccl, AbortUnblocksACollectiveThatNeverCompletes) {
  cgc_comm_t doomed = CreateComm(ctx, "abort");
  ASSERT_NE(doomed, nullptr);
  constexpr unsigned c = 1024;
  void* buf = Malloc(c * 4);
  // A live graph holding a collective on the communicator: NCCL's own abort would wait for it
  // to be destroyed; cgc's must still unblock the hung collective at once.
  cgc_stream_t capture_stream = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &capture_stream));
  CGC_ASSERT_OK(cgc_capture_begin(capture_stream, nullptr));
  CGC_ASSERT_OK(cgc_all_reduce(doomed, buf, buf, c, CGC_FLOAT32, CGC_SUM, capture_stream));
  cgc_graph_t held = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(capture_stream, &held));
  auto start = std::chrono::steady_clock::now();
  if (rank_ == 0) {
    CGC_ASSERT_OK(cgc_all_reduce(doomed, buf, buf, c, CGC_FLOAT32, CGC_SUM, stream));
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      EXPECT_EQ(cgc_comm_abort(doomed), CGC_SUCCESS) << cgc_last_error();
    });
    cgc_status_t st = cgc_stream_synchronize(stream);  // blocks until the abort frees the kernel
    watchdog.join();
    std::printf("rank 0: stream synchronize returned %s after the abort\n", cgc_status_string(st));
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(3));  // never joins the collective
    CGC_ASSERT_OK(cgc_comm_abort(doomed));
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 60.0);
  EXPECT_EQ(cgc_all_reduce(doomed, buf, buf, c, CGC_FLOAT32, CGC_SUM, stream), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("aborted"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_comm_abort(doomed), CGC_SUCCESS) << "aborting twice is harmless";
  CGC_ASSERT_OK(cgc_comm_destroy(doomed));  // allowed once aborted, even with the graph alive
  EXPECT_EQ(cgc_comm_destroy(doomed), CGC_ERROR_INVALID_HANDLE);
  CGC_ASSERT_OK(cgc_graph_destroy(held));  // releases the communicator's last holder
  CGC_ASSERT_OK(cgc_stream_destroy(capture_stream));
  cgc_free(buf);
}

// ---- NCCL pools (1.5): memory registered with a communicator, eager and captured ----
//
// Each test runs on every rank and makes the same pool calls in the same order everywhere
// (creation and the last release are collective). With NCCL 2.28 every kind is available; an
// older NCCL may give the next kind down, which the tests accept (got <= wanted) and print.

constexpr size_t kMiB = size_t(1) << 20;

const char* KindName(cgc_nccl_memory_t k) {
  switch (k) {
    case CGC_NCCL_MEMORY_PLAIN: return "PLAIN";
    case CGC_NCCL_MEMORY_REGISTERED: return "REGISTERED";
    case CGC_NCCL_MEMORY_SYMMETRIC: return "SYMMETRIC";
  }
  return "?";
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

cgc_capture_options_t IntoPool(cgc_pool_t pool) {
  cgc_capture_options_t o = {};
  o.struct_size = sizeof o;
  o.pool = pool;
  return o;
}

class NcclPool : public Nccl {
 protected:
  // A pool on `comm` (collective: every rank calls it alike). Checks got <= wanted and prints it.
  cgc_pool_t MakePool(cgc_comm_t comm, size_t capacity, cgc_nccl_memory_t wanted) {
    cgc_pool_t pool = nullptr;
    cgc_nccl_memory_t got = static_cast<cgc_nccl_memory_t>(-1);
    cgc_status_t st = cgc_nccl_pool_create(comm, capacity, wanted, &pool, &got);
    EXPECT_EQ(st, CGC_SUCCESS) << "cgc_nccl_pool_create -> " << cgc_last_error();
    if (st != CGC_SUCCESS) return nullptr;
    EXPECT_NE(pool, nullptr);
    EXPECT_GE(int(got), int(CGC_NCCL_MEMORY_PLAIN));
    EXPECT_LE(int(got), int(wanted)) << "a pool never gets a better kind than it asked for";
    if (rank_ == 0)  // the kinds agree on every rank, or the pool is refused
      std::printf("rank 0: NCCL pool of %zu bytes: asked for %s, got %s\n", capacity, KindName(wanted), KindName(got));
    got_ = got;
    return pool;
  }
  void* PoolMalloc(cgc_pool_t pool, size_t bytes) {
    void* p = nullptr;
    cgc_status_t st = cgc_pool_malloc(pool, bytes, stream, &p);
    EXPECT_EQ(st, CGC_SUCCESS) << "cgc_pool_malloc(" << bytes << ") -> " << cgc_last_error();
    EXPECT_NE(p, nullptr);
    return p;
  }
  // The all-reduce of pattern Seed(rank, step) once (n * j + sum of seeds * kK), and twice (the
  // first one's result summed again over the ranks).
  uint32_t Once(int step, size_t j) const { return SeedSum(step) * kK + uint32_t(n_) * uint32_t(j); }
  uint32_t Twice(int step, size_t j) const { return uint32_t(n_) * Once(step, j); }

  // Eager all-reduces on blocks of a pool of kind `wanted`, then a graph captured into the pool
  // (a temporary of the pool between two all-reduces) replayed with fresh inputs; then everything
  // is given back, the pool's collective release and the communicator's destroy included.
  void EagerAndCapturedAllReducesOnAPool(cgc_nccl_memory_t wanted, const std::string& tag) {
    cgc_comm_t comm = CreateComm(ctx, tag);
    ASSERT_NE(comm, nullptr);
    cgc_pool_t pool = MakePool(comm, 64 * kMiB, wanted);
    ASSERT_NE(pool, nullptr);
    constexpr unsigned c = 1 << 20;
    void* send = PoolMalloc(pool, c * 4);
    void* recv = PoolMalloc(pool, c * 4);
    void* f = PoolMalloc(pool, c * 4);
    ASSERT_TRUE(send && recv && f);
    EXPECT_FALSE(Overlap(send, c * 4, recv, c * 4) || Overlap(send, c * 4, f, c * 4) || Overlap(recv, c * 4, f, c * 4));

    // Eager: an integer all-reduce and an in-place float one (exact: small integers).
    Stamp(stream, Dev(send), Seed(rank_, 0), c);
    CGC_ASSERT_OK(cgc_all_reduce(comm, send, recv, c, CGC_UINT32, CGC_SUM, stream));
    ASSERT_TRUE(WordsMatch(recv, c, [&](size_t j) { return Once(0, j); })) << "eager all-reduce";
    Fill(stream, Dev(f), float(rank_ + 1), c);
    CGC_ASSERT_OK(cgc_all_reduce(comm, f, f, c, CGC_FLOAT32, CGC_SUM, stream));
    std::vector<float> fs = Download(Dev(f), c);
    for (unsigned j = 0; j < c; j++) ASSERT_EQ(fs[j], float(n_ * (n_ + 1) / 2)) << "eager float all-reduce, " << j;

    // Captured into the pool: send -> tmp (the pool's, freed inside the capture) -> recv, and f in place.
    cgc_capture_options_t opts = IntoPool(pool);
    CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
    void* tmp = nullptr;
    CGC_ASSERT_OK(cgc_malloc(ctx, c * 4, stream, &tmp));
    CGC_ASSERT_OK(cgc_all_reduce(comm, send, tmp, c, CGC_UINT32, CGC_SUM, stream));
    CGC_ASSERT_OK(cgc_all_reduce(comm, tmp, recv, c, CGC_UINT32, CGC_SUM, stream));
    CGC_ASSERT_OK(cgc_all_reduce(comm, f, f, c, CGC_FLOAT32, CGC_SUM, stream));
    CGC_ASSERT_OK(cgc_free(tmp));
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    EXPECT_FALSE(Overlap(tmp, c * 4, send, c * 4) || Overlap(tmp, c * 4, recv, c * 4) || Overlap(tmp, c * 4, f, c * 4))
        << "the capture's temporary is one of the eager blocks";
    for (int step = 1; step <= 3; step++) {
      Stamp(stream, Dev(send), Seed(rank_, step), c);  // fresh inputs before every replay
      Fill(stream, Dev(f), float(rank_ + 1 + step), c);
      CGC_ASSERT_OK(cgc_graph_launch(g, stream));
      ASSERT_TRUE(WordsMatch(recv, c, [&](size_t j) { return Twice(step, j); })) << "replay " << step;
      fs = Download(Dev(f), c);
      float want = float(n_ * (n_ + 1) / 2 + n_ * step);
      for (unsigned j = 0; j < c; j++) ASSERT_EQ(fs[j], want) << "replay " << step << ", float word " << j;
    }
    CGC_ASSERT_OK(cgc_free(send));
    CGC_ASSERT_OK(cgc_free(recv));
    CGC_ASSERT_OK(cgc_free(f));
    CGC_ASSERT_OK(cgc_graph_destroy(g));
    CGC_ASSERT_OK(cgc_pool_release(pool));  // the last reference: collective
    CGC_ASSERT_OK(cgc_comm_destroy(comm));  // no pool holds it any more
  }

  cgc_nccl_memory_t got_ = CGC_NCCL_MEMORY_PLAIN;
};

TEST_F(NcclPool, RegisteredPoolGivesExactEagerAndReplayedAllReducesThenReleases) {
  EagerAndCapturedAllReducesOnAPool(CGC_NCCL_MEMORY_REGISTERED, "pool_registered");
}

TEST_F(NcclPool, SymmetricPoolGivesExactEagerAndReplayedAllReducesThenReleases) {
  EagerAndCapturedAllReducesOnAPool(CGC_NCCL_MEMORY_SYMMETRIC, "pool_symmetric");
}

TEST_F(NcclPool, ReleaseAndCommDestroyAreRefusedWhileThePoolIsInUse) {
  cgc_comm_t comm = CreateComm(ctx, "pool_refusals");
  ASSERT_NE(comm, nullptr);
  cgc_pool_t pool = MakePool(comm, 16 * kMiB, CGC_NCCL_MEMORY_SYMMETRIC);
  ASSERT_NE(pool, nullptr);
  constexpr unsigned c = 4096;
  void* buf = PoolMalloc(pool, c * 4);
  ASSERT_NE(buf, nullptr);

  // A capture into the pool under way holds it: refused (INVALID_STATE as a holder, or
  // CAPTURE_UNSUPPORTED since the release would synchronise the device), and the capture goes on.
  cgc_capture_options_t opts = IntoPool(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  cgc_status_t during = cgc_pool_release(pool);
  EXPECT_TRUE(during == CGC_ERROR_INVALID_STATE || during == CGC_ERROR_CAPTURE_UNSUPPORTED)
      << "released during a capture into it: " << cgc_status_string(during) << " " << cgc_last_error();
  if (rank_ == 0) std::printf("rank 0: release during a capture: %s\n", cgc_status_string(during));
  void* tmp = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, c * 4, stream, &tmp));
  CGC_ASSERT_OK(cgc_all_reduce(comm, buf, tmp, c, CGC_UINT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_all_reduce(comm, tmp, buf, c, CGC_UINT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_free(tmp));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  Stamp(stream, Dev(buf), Seed(rank_, 1), c);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  ASSERT_TRUE(WordsMatch(buf, c, [&](size_t j) { return Twice(1, j); }));

  // A graph captured into it (and a block) hold it; the pool holds the communicator.
  EXPECT_EQ(cgc_pool_release(pool), CGC_ERROR_INVALID_STATE) << "released while a graph holds it";
  EXPECT_EQ(cgc_comm_destroy(comm), CGC_ERROR_INVALID_STATE) << "destroyed under a pool and a graph";
  Stamp(stream, Dev(buf), Seed(rank_, 2), c);  // nothing changed: the graph replays as before
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  ASSERT_TRUE(WordsMatch(buf, c, [&](size_t j) { return Twice(2, j); })) << "after the refusals";
  CGC_ASSERT_OK(cgc_graph_destroy(g));

  // A block still allocated holds it; the pool alone holds the communicator.
  EXPECT_EQ(cgc_pool_release(pool), CGC_ERROR_INVALID_STATE) << "released while a block is allocated";
  EXPECT_EQ(cgc_comm_destroy(comm), CGC_ERROR_INVALID_STATE) << "destroyed while a pool of it exists";
  Stamp(stream, Dev(buf), Seed(rank_, 3), c);  // the block and the communicator still work
  CGC_ASSERT_OK(cgc_all_reduce(comm, buf, buf, c, CGC_UINT32, CGC_SUM, stream));
  ASSERT_TRUE(WordsMatch(buf, c, [&](size_t j) { return Once(3, j); })) << "eager all-reduce after the refusals";

  CGC_ASSERT_OK(cgc_free(buf));
  CGC_ASSERT_OK(cgc_pool_release(pool));
  CGC_ASSERT_OK(cgc_comm_destroy(comm));
}

TEST_F(NcclPool, AllocationBeyondCapacityIsOutOfMemoryAndThePoolKeepsWorking) {
  constexpr size_t capacity = 8 * kMiB;  // asked for a little less: rounded up to 2 MiB
  cgc_pool_t pool = MakePool(comm_, capacity - 12345, CGC_NCCL_MEMORY_SYMMETRIC);
  ASSERT_NE(pool, nullptr);
  constexpr unsigned big = unsigned(6 * kMiB / 4), mid = unsigned(4 * kMiB / 4), small = unsigned(kMiB / 4);
  void* a = PoolMalloc(pool, big * 4);
  ASSERT_NE(a, nullptr);
  void* over = &over;
  EXPECT_EQ(cgc_pool_malloc(pool, mid * 4, stream, &over), CGC_ERROR_OUT_OF_MEMORY) << "6 + 4 MiB in 8 MiB";
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find(std::to_string(capacity)), std::string::npos) << "names the pool's capacity: " << msg;
  EXPECT_EQ(over, nullptr);
  EXPECT_EQ(cgc_pool_malloc(pool, 2 * capacity, stream, &over), CGC_ERROR_OUT_OF_MEMORY) << "twice the capacity";

  // The block already there still works, and freeing it makes room again.
  Stamp(stream, Dev(a), Seed(rank_, 1), big);
  CGC_ASSERT_OK(cgc_all_reduce(comm_, a, a, big, CGC_UINT32, CGC_SUM, stream));
  ASSERT_TRUE(WordsMatch(a, big, [&](size_t j) { return Once(1, j); })) << "all-reduce after the refusals";
  CGC_ASSERT_OK(cgc_free(a));
  void* b = PoolMalloc(pool, mid * 4);
  ASSERT_NE(b, nullptr);

  // Inside a capture into the pool: too much is refused as well, and the capture goes on.
  cgc_capture_options_t opts = IntoPool(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  void* huge = &huge;
  EXPECT_EQ(cgc_malloc(ctx, 2 * capacity, stream, &huge), CGC_ERROR_OUT_OF_MEMORY) << "in the capture";
  EXPECT_NE(std::string(cgc_last_error()).find(std::to_string(capacity)), std::string::npos) << cgc_last_error();
  void* t = nullptr;
  CGC_EXPECT_OK(cgc_malloc(ctx, small * 4, stream, &t));
  if (t != nullptr) CGC_EXPECT_OK(cgc_all_reduce(comm_, b, t, small, CGC_UINT32, CGC_SUM, stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  ASSERT_NE(t, nullptr);
  for (int step = 2; step <= 3; step++) {
    Stamp(stream, Dev(b), Seed(rank_, step), mid);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    ASSERT_TRUE(WordsMatch(t, small, [&](size_t j) { return Once(step, j); })) << "replay of step " << step;
  }
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_free(t));
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(NcclPool, AFreedEagerBlockIsNotTakenByALaterCaptureIntoThePool) {
  cgc_pool_t pool = MakePool(comm_, 32 * kMiB, CGC_NCCL_MEMORY_SYMMETRIC);
  ASSERT_NE(pool, nullptr);
  constexpr unsigned c = 1 << 18;
  void* send = PoolMalloc(pool, c * 4);
  void* eager = PoolMalloc(pool, c * 4);
  ASSERT_TRUE(send && eager);
  CGC_ASSERT_OK(cgc_free(eager));  // free on `stream`: reusable by eager allocations on it only
  cgc_capture_options_t opts = IntoPool(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));  // the same stream, the same size
  void* captured = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, c * 4, stream, &captured));
  CGC_ASSERT_OK(cgc_all_reduce(comm_, send, captured, c, CGC_UINT32, CGC_SUM, stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  EXPECT_NE(captured, eager);
  EXPECT_FALSE(Overlap(captured, c * 4, eager, c * 4)) << "the capture took memory of a just-freed eager block";
  // Eager work takes its block back and writes it between replays: neither disturbs the other.
  void* again = PoolMalloc(pool, c * 4);
  ASSERT_NE(again, nullptr);
  EXPECT_FALSE(Overlap(again, c * 4, captured, c * 4));
  for (int step = 1; step <= 3; step++) {
    Stamp(stream, Dev(send), Seed(rank_, step), c);
    Stamp(stream, Dev(again), 7777u + step, c);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    ASSERT_TRUE(WordsMatch(captured, c, [&](size_t j) { return Once(step, j); })) << "replay " << step;
    ASSERT_TRUE(WordsMatch(again, c, [&](size_t j) { return (7777u + step) * kK + uint32_t(j); }))
        << "the eager block changed under a replay, step " << step;
  }
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_free(captured));
  CGC_ASSERT_OK(cgc_free(again));
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(NcclPool, ATemporaryFreedInsideACaptureIsNotHandedToALaterPoolMalloc) {
  cgc_pool_t pool = MakePool(comm_, 32 * kMiB, CGC_NCCL_MEMORY_SYMMETRIC);
  ASSERT_NE(pool, nullptr);
  constexpr unsigned c = 1 << 18;
  void* send = PoolMalloc(pool, c * 4);
  void* recv = PoolMalloc(pool, c * 4);
  ASSERT_TRUE(send && recv);
  cgc_capture_options_t opts = IntoPool(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  void* tmp = nullptr;
  CGC_ASSERT_OK(cgc_malloc(ctx, c * 4, stream, &tmp));
  CGC_ASSERT_OK(cgc_all_reduce(comm_, send, tmp, c, CGC_UINT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_all_reduce(comm_, tmp, recv, c, CGC_UINT32, CGC_SUM, stream));
  CGC_ASSERT_OK(cgc_free(tmp));  // the graph's memory at every replay
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  void* eager = PoolMalloc(pool, c * 4);  // the capture's stream, the temporary's size
  ASSERT_NE(eager, nullptr);
  EXPECT_NE(eager, tmp);
  EXPECT_FALSE(Overlap(eager, c * 4, tmp, c * 4)) << "cgc_pool_malloc handed out the graph's temporary";
  for (int step = 1; step <= 3; step++) {
    Stamp(stream, Dev(send), Seed(rank_, step), c);
    Stamp(stream, Dev(eager), 4242u + step, c);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));  // writes tmp: must leave `eager` alone
    ASSERT_TRUE(WordsMatch(recv, c, [&](size_t j) { return Twice(step, j); })) << "replay " << step;
    ASSERT_TRUE(WordsMatch(eager, c, [&](size_t j) { return (4242u + step) * kK + uint32_t(j); }))
        << "a replay wrote the eager block, step " << step;
  }
  // The eager block works in collectives of its own.
  Stamp(stream, Dev(eager), Seed(rank_, 9), c);
  CGC_ASSERT_OK(cgc_all_reduce(comm_, eager, eager, c, CGC_UINT32, CGC_SUM, stream));
  ASSERT_TRUE(WordsMatch(eager, c, [&](size_t j) { return Once(9, j); }));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_free(eager));
  CGC_ASSERT_OK(cgc_free(send));
  CGC_ASSERT_OK(cgc_free(recv));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(NcclPool, TheSameAllocationSequenceGivesTheSameOffsetsOnEveryRank) {
  cgc_pool_t pool = MakePool(comm_, 32 * kMiB, CGC_NCCL_MEMORY_SYMMETRIC);
  ASSERT_NE(pool, nullptr);
  const std::vector<size_t> eager_sizes = {4096, kMiB + 512, 96 * 1024, 3 * kMiB, 512, 200 * 1024 + 4};
  const std::vector<size_t> captured_sizes = {256 * 1024, 8192, 2 * kMiB + 1024};
  std::vector<void*> blocks;
  for (size_t s : eager_sizes) {
    blocks.push_back(PoolMalloc(pool, s));
    ASSERT_NE(blocks.back(), nullptr);
  }
  // A capture into the pool allocates too (outputs it keeps): stamp and all-reduce in place.
  cgc_capture_options_t opts = IntoPool(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  for (size_t i = 0; i < captured_sizes.size(); i++) {
    void* p = nullptr;
    CGC_ASSERT_OK(cgc_malloc(ctx, captured_sizes[i], stream, &p));
    unsigned words = unsigned(captured_sizes[i] / 4);
    Stamp(stream, Dev(p), Seed(rank_, 20 + int(i)), words);
    CGC_ASSERT_OK(cgc_all_reduce(comm_, p, p, words, CGC_UINT32, CGC_SUM, stream));
    blocks.push_back(p);
  }
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));

  // Offsets from the first block, gathered from every rank (through plain memory, not the pool's).
  const size_t k = blocks.size();
  std::vector<uint64_t> mine(k);
  for (size_t i = 0; i < k; i++)
    mine[i] = uint64_t(reinterpret_cast<uintptr_t>(blocks[i])) - uint64_t(reinterpret_cast<uintptr_t>(blocks[0]));
  void* offsets = Malloc(k * 8);
  void* all = Malloc(k * 8 * n_);
  ASSERT_TRUE(offsets && all);
  CGC_ASSERT_OK(cgc_memcpy_htod_async(offsets, mine.data(), k * 8, stream));
  CGC_ASSERT_OK(cgc_all_gather(comm_, offsets, all, k, CGC_UINT64, stream));
  std::vector<uint32_t> words = DownloadWords(Dev(all), k * 2 * n_);
  std::vector<uint64_t> gathered(k * n_);
  std::memcpy(gathered.data(), words.data(), gathered.size() * 8);
  for (int r = 0; r < n_; r++)
    for (size_t i = 0; i < k; i++)
      EXPECT_EQ(gathered[r * k + i], mine[i]) << "block " << i << ": rank " << r << " has another offset than rank "
                                              << rank_;

  // Collectives on the blocks, eager and replayed, give exact sums.
  for (size_t i = 0; i < eager_sizes.size(); i++) {
    unsigned w = unsigned(eager_sizes[i] / 4);
    Stamp(stream, Dev(blocks[i]), Seed(rank_, int(i)), w);
    CGC_ASSERT_OK(cgc_all_reduce(comm_, blocks[i], blocks[i], w, CGC_UINT32, CGC_SUM, stream));
    ASSERT_TRUE(WordsMatch(blocks[i], w, [&](size_t j) { return Once(int(i), j); })) << "eager block " << i;
  }
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  for (size_t i = 0; i < captured_sizes.size(); i++) {
    unsigned w = unsigned(captured_sizes[i] / 4);
    ASSERT_TRUE(WordsMatch(blocks[eager_sizes.size() + i], w, [&](size_t j) { return Once(20 + int(i), j); }))
        << "captured block " << i;
  }
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  for (void* p : blocks) CGC_ASSERT_OK(cgc_free(p));
  CGC_ASSERT_OK(cgc_free(offsets));
  CGC_ASSERT_OK(cgc_free(all));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

// Ranks asking for different kinds (rank 0 PLAIN, the others REGISTERED) are refused on every
// rank, unless every rank ended with PLAIN anyway (an NCCL without registration); either way the
// ranks agree, and the communicator is left without a pool.
TEST_F(NcclPool, RanksAskingForDifferentKindsAreRefusedOnEveryRank) {
  cgc_comm_t comm = CreateComm(ctx, "pool_mixed");
  ASSERT_NE(comm, nullptr);
  cgc_nccl_memory_t wanted = rank_ == 0 ? CGC_NCCL_MEMORY_PLAIN : CGC_NCCL_MEMORY_REGISTERED;
  cgc_pool_t pool = nullptr;
  cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
  cgc_status_t st = cgc_nccl_pool_create(comm, 4 * kMiB, wanted, &pool, &got);
  std::printf("rank %d: asked for %s: %s (%s)\n", rank_, KindName(wanted), cgc_status_string(st), cgc_last_error());
  bool made = st == CGC_SUCCESS;
  if (made) {
    EXPECT_EQ(got, CGC_NCCL_MEMORY_PLAIN) << "a pool made although this rank's kind differs from rank 0's";
  } else {
    EXPECT_EQ(st, CGC_ERROR_INVALID_STATE) << cgc_last_error();
    EXPECT_EQ(pool, nullptr);
  }
  // Every rank's outcome, summed over the ranks: all made, or none.
  uint32_t* flags = static_cast<uint32_t*>(Malloc(8));
  ASSERT_NE(flags, nullptr);
  CGC_ASSERT_OK(cgc_memset_d32_async(flags, made ? 1u : 0u, 1, stream));
  CGC_ASSERT_OK(cgc_memset_d32_async(flags + 1, made ? 0u : 1u, 1, stream));
  CGC_ASSERT_OK(cgc_all_reduce(comm, flags, flags, 2, CGC_UINT32, CGC_SUM, stream));
  std::vector<uint32_t> sums = DownloadWords(Dev(flags), 2);
  EXPECT_TRUE((sums[0] == uint32_t(n_) && sums[1] == 0) || (sums[0] == 0 && sums[1] == uint32_t(n_)))
      << sums[0] << " ranks made the pool, " << sums[1] << " were refused";
  if (made && sums[0] == uint32_t(n_)) CGC_EXPECT_OK(cgc_pool_release(pool));
  CGC_ASSERT_OK(cgc_free(flags));
  CGC_ASSERT_OK(cgc_comm_destroy(comm));  // refused if a pool of it were left behind
}

// ---- the timed stress test (CGC_MULTI_GPU_STRESS_SECONDS) ----
//
// Every rank runs the same pseudo-random sequence (one seed for all ranks: the order of
// collectives and graph launches is the same everywhere, as NCCL requires). Each round the ranks
// first agree, through an eager all-reduce, whether the time is up and whether an abort round is
// due, so that they stop, and abort, together. A round (re)captures graphs of one collective on
// each of two communicators (all-reduce, all-gather, reduce-scatter, broadcast or a send/recv
// ring; outputs sometimes allocated inside the capture), sometimes a third into a symmetric NCCL
// pool (a temporary of the pool between the collective and its output), and replays them a few
// times with fresh inputs, one after the other or each communicator's on its own stream
// concurrently, with eager collectives in between; every output is checked word by word. An
// abort round (every max(5, seconds / 3) seconds, and at least once) hangs a collective of one
// communicator on rank 0, aborts it from a watchdog thread on rank 0 (the other ranks abort theirs),
// destroys it with its graph (and its pool, if it has one) still alive, and recreates it with a
// new id. Each rank prints a summary line: rounds, graphs captured, replays, aborts, seconds.

double StressSeconds() {
  const char* s = std::getenv("CGC_MULTI_GPU_STRESS_SECONDS");
  if (s == nullptr) return 0;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  return end != s && v > 0 ? v : 0;
}

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kRing };
constexpr int kColls = 5;
const char* CollName(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return "all-reduce";
    case Coll::kAllGather: return "all-gather";
    case Coll::kReduceScatter: return "reduce-scatter";
    case Coll::kBroadcast: return "broadcast";
    case Coll::kRing: return "send/recv ring";
  }
  return "?";
}

struct Op {
  Coll coll = Coll::kAllReduce;
  size_t count = 1;  // per rank: all-gather's input, reduce-scatter's output
  int root = 0;      // broadcast
};

class Stress : public Nccl {
 protected:
  // A graph of one collective on communicator `comm` (replayed on stream s_[comm]).
  struct Slot {
    cgc_graph_t g = nullptr;
    int comm = 0;
    Op op;
    void* in = nullptr;
    void* out = nullptr;
    uint64_t step = 0;  // the inputs' step at the last replay
  };

  void TearDown() override {
    // After a failure, what the test left (the other ranks may be stuck: the launcher ends them).
    for (cgc_stream_t s : s_) {
      cgc_capture_status_t cs = CGC_CAPTURE_NONE;
      if (s && cgc_stream_capture_status(s, &cs, nullptr) == CGC_SUCCESS && cs != CGC_CAPTURE_NONE) {
        cgc_graph_t g = nullptr;
        cgc_capture_end(s, &g);
        if (g) cgc_graph_destroy(g);
      }
    }
    for (Slot* s : {&reg_[0], &reg_[1], &pooled_})
      if (s->g) cgc_graph_destroy(s->g);
    for (cgc_stream_t s : s_)
      if (s) cgc_stream_destroy(s);
    Nccl::TearDown();
  }

  uint32_t Pick(uint32_t n) { return uint32_t(rng_() % n); }
  static uint32_t StressSeed(int rank, uint64_t step) { return uint32_t(step) * 1024u + uint32_t(rank) + 1u; }
  size_t InWords(const Op& op) const { return op.coll == Coll::kReduceScatter ? op.count * n_ : op.count; }
  size_t OutWords(const Op& op) const { return op.coll == Coll::kAllGather ? op.count * n_ : op.count; }

  Op RandomOp() {
    static const size_t counts[] = {1, 3, 64, 1000, 4096, 30001, 65536};
    Op op;
    op.coll = static_cast<Coll>(Pick(kColls));
    op.count = counts[Pick(sizeof counts / sizeof counts[0])];
    op.root = int(Pick(uint32_t(n_)));
    return op;
  }

  cgc_status_t Enqueue(cgc_comm_t comm, const Op& op, const void* in, void* out, cgc_stream_t s) {
    switch (op.coll) {
      case Coll::kAllReduce: return cgc_all_reduce(comm, in, out, op.count, CGC_UINT32, CGC_SUM, s);
      case Coll::kAllGather: return cgc_all_gather(comm, in, out, op.count, CGC_UINT32, s);
      case Coll::kReduceScatter: return cgc_reduce_scatter(comm, in, out, op.count, CGC_UINT32, CGC_SUM, s);
      case Coll::kBroadcast: return cgc_broadcast(comm, in, out, op.count, CGC_UINT32, op.root, s);
      case Coll::kRing: {
        cgc_status_t st = cgc_group_start();
        if (st != CGC_SUCCESS) return st;
        cgc_status_t a = cgc_send(comm, in, op.count, CGC_UINT32, (rank_ + 1) % n_, s);
        cgc_status_t b = cgc_recv(comm, out, op.count, CGC_UINT32, (rank_ + n_ - 1) % n_, s);
        cgc_status_t e = cgc_group_end();
        return a != CGC_SUCCESS ? a : b != CGC_SUCCESS ? b : e;
      }
    }
    return CGC_ERROR_INVALID_ARGUMENT;
  }

  // Every output word of `op` after inputs stamped with StressSeed(rank, step) on every rank.
  ::testing::AssertionResult OutputIsExact(const Op& op, uint64_t step, const void* out) {
    uint32_t sum = 0;
    for (int r = 0; r < n_; r++) sum += StressSeed(r, step);
    const uint32_t n = uint32_t(n_), count = uint32_t(op.count);
    ::testing::AssertionResult r = WordsMatch(out, OutWords(op), [&](size_t jj) -> uint32_t {
      uint32_t j = uint32_t(jj);
      switch (op.coll) {
        case Coll::kAllReduce: return sum * kK + n * j;
        case Coll::kAllGather: return StressSeed(int(j / count), step) * kK + j % count;
        case Coll::kReduceScatter: return sum * kK + n * (uint32_t(rank_) * count + j);
        case Coll::kBroadcast: return StressSeed(op.root, step) * kK + j;
        case Coll::kRing: return StressSeed((rank_ + n_ - 1) % n_, step) * kK + j;
      }
      return 0;
    });
    if (!r) r << " (" << CollName(op.coll) << " of " << op.count << " words, root " << op.root << ", step " << step
              << ", round " << rounds_ << ")";
    return r;
  }

  void* Alloc(size_t bytes, int comm, bool from_pool) {
    void* p = nullptr;
    cgc_status_t st = from_pool ? cgc_pool_malloc(pool_, bytes, s_[comm], &p) : cgc_malloc(ctx, bytes, s_[comm], &p);
    EXPECT_EQ(st, CGC_SUCCESS) << (from_pool ? "cgc_pool_malloc" : "cgc_malloc") << "(" << bytes
                               << ") -> " << cgc_last_error();
    return p;
  }

  void Drop(Slot& s) {
    if (s.g) CGC_EXPECT_OK(cgc_graph_destroy(s.g));
    if (s.in) CGC_EXPECT_OK(cgc_free(s.in));
    if (s.out) CGC_EXPECT_OK(cgc_free(s.out));
    s = Slot();
  }

  // (Re)captures `s` on communicator `comm`: into the NCCL pool when `pooled`.
  void Capture(Slot& s, int comm, bool pooled) {
    Drop(s);
    s.comm = comm;
    s.op = RandomOp();
    bool out_inside = !pooled && Pick(2) == 0;  // a graph output from its private pool
    cgc_stream_t st = s_[comm];
    s.in = Alloc(InWords(s.op) * 4, comm, pooled);
    if (!out_inside) s.out = Alloc(OutWords(s.op) * 4, comm, pooled);
    ASSERT_TRUE(s.in && (out_inside || s.out));
    cgc_capture_options_t opts = {};
    opts.struct_size = sizeof opts;
    opts.pool = pooled ? pool_ : nullptr;
    CGC_ASSERT_OK(cgc_capture_begin(st, &opts));
    if (out_inside) CGC_ASSERT_OK(cgc_malloc(ctx, OutWords(s.op) * 4, st, &s.out));
    if (pooled) {
      void* tmp = nullptr;
      CGC_ASSERT_OK(cgc_malloc(ctx, OutWords(s.op) * 4, st, &tmp));  // the pool's
      CGC_ASSERT_OK(Enqueue(comms_[comm], s.op, s.in, tmp, st));
      CGC_ASSERT_OK(cgc_memcpy_dtod_async(s.out, tmp, OutWords(s.op) * 4, st));
      CGC_ASSERT_OK(cgc_free(tmp));
    } else {
      CGC_ASSERT_OK(Enqueue(comms_[comm], s.op, s.in, s.out, st));
    }
    CGC_ASSERT_OK(cgc_capture_end(st, &s.g));
    captures_++;
  }

  // Fresh inputs, then a replay, on the slot's communicator's stream.
  void Launch(Slot& s) {
    s.step = ++step_;
    Stamp(s_[s.comm], Dev(s.in), StressSeed(rank_, s.step), unsigned(InWords(s.op)));
    CGC_ASSERT_OK(cgc_graph_launch(s.g, s_[s.comm]));
    replays_++;
  }

  // An eager collective on a random communicator, on plain memory or the pool's.
  void Eager() {
    int comm = int(Pick(2));
    Op op = RandomOp();
    bool from_pool = pool_ != nullptr && comm == pool_comm_ && Pick(2) == 0;
    void* in = Alloc(InWords(op) * 4, comm, from_pool);
    void* out = Alloc(OutWords(op) * 4, comm, from_pool);
    ASSERT_TRUE(in && out);
    uint64_t step = ++step_;
    Stamp(s_[comm], Dev(in), StressSeed(rank_, step), unsigned(InWords(op)));
    CGC_ASSERT_OK(Enqueue(comms_[comm], op, in, out, s_[comm]));
    ASSERT_TRUE(OutputIsExact(op, step, out)) << "eager on communicator " << comm;
    CGC_ASSERT_OK(cgc_free(in));
    CGC_ASSERT_OK(cgc_free(out));
    eager_++;
  }

  void StartPool() {
    pool_comm_ = int(Pick(2));
    pool_rounds_left_ = 2 + int(Pick(4));
    cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
    CGC_ASSERT_OK(cgc_nccl_pool_create(comms_[pool_comm_], 64 * kMiB, CGC_NCCL_MEMORY_SYMMETRIC, &pool_, &got));
    EXPECT_LE(int(got), int(CGC_NCCL_MEMORY_SYMMETRIC));
    if (pool_phases_ == 0) std::printf("rank %d: stress: symmetric pool asked for, got %s\n", rank_, KindName(got));
    pool_phases_++;
  }

  void EndPool() {
    Drop(pooled_);
    CGC_ASSERT_OK(cgc_pool_release(pool_));  // its graph and blocks are gone
    pool_ = nullptr;
  }

  // The ranks' agreement: whether any rank's time is up, and whether any rank wants an abort round.
  void Vote(bool time_up, bool abort_due, bool* stop, bool* abort) {
    CGC_ASSERT_OK(cgc_memset_d32_async(vote_, time_up ? 1u : 0u, 1, s_[0]));
    CGC_ASSERT_OK(cgc_memset_d32_async(static_cast<uint32_t*>(vote_) + 1, abort_due ? 1u : 0u, 1, s_[0]));
    CGC_ASSERT_OK(cgc_all_reduce(comms_[0], vote_, vote_, 2, CGC_UINT32, CGC_MAX, s_[0]));
    std::vector<uint32_t> v = DownloadWords(Dev(vote_), 2);
    ASSERT_LE(v[0], 1u);
    ASSERT_LE(v[1], 1u);
    *stop = v[0] != 0;
    *abort = v[1] != 0;
  }

  // Rank 0 enqueues a collective on communicator k that no other rank joins; a watchdog thread
  // aborts it, the others abort theirs, and every rank recreates the communicator.
  // A pool of that communicator lives through the abort and is released after it (the memory
  // alone: NCCL dropped the registration with the communicator), before or after the
  // communicator's destroy; a pool of the other communicator goes on being used.
  void AbortRound(int k) {
    const bool pool_dies = pool_ != nullptr && pool_comm_ == k;
    const bool destroy_first = Pick(2) == 0;
    CGC_ASSERT_OK(cgc_stream_synchronize(s_[0]));
    CGC_ASSERT_OK(cgc_stream_synchronize(s_[1]));
    cgc_comm_t doomed = comms_[k];
    auto start = std::chrono::steady_clock::now();
    if (rank_ == 0) {
      cgc_stream_t hung = nullptr;
      CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &hung));
      void* buf = nullptr;
      CGC_ASSERT_OK(cgc_malloc(ctx, 4096 * 4, hung, &buf));
      CGC_ASSERT_OK(cgc_all_reduce(doomed, buf, buf, 4096, CGC_FLOAT32, CGC_SUM, hung));
      std::thread watchdog([&] {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        EXPECT_EQ(cgc_comm_abort(doomed), CGC_SUCCESS) << cgc_last_error();
      });
      cgc_status_t st = cgc_stream_synchronize(hung);  // returns once the abort ends the kernel
      watchdog.join();
      if (aborts_ == 0)
        std::printf("rank 0: stress: the hung stream returned %s after the abort\n", cgc_status_string(st));
      cgc_free(buf);
      CGC_EXPECT_OK(cgc_stream_destroy(hung));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never joins the collective
      CGC_ASSERT_OK(cgc_comm_abort(doomed));
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(waited, 60.0) << "the abort did not unblock the collective";
    EXPECT_EQ(cgc_all_reduce(doomed, vote_, vote_, 2, CGC_UINT32, CGC_MAX, s_[k]), CGC_ERROR_INVALID_STATE)
        << "an aborted communicator took work";
    // Destroyed while a graph of it (and maybe a pool) still exists: allowed once aborted.
    if (destroy_first || !pool_dies) CGC_ASSERT_OK(cgc_comm_destroy(doomed));
    Drop(reg_[k]);
    if (pool_dies) {
      Drop(pooled_);
      CGC_ASSERT_OK(cgc_pool_release(pool_));
      pool_ = nullptr;
      pools_after_abort_++;
    }
    if (!destroy_first && pool_dies) CGC_ASSERT_OK(cgc_comm_destroy(doomed));
    comms_[k] = nullptr;
    gen_[k]++;
    comms_[k] = CreateComm(ctx, "stress_c" + std::to_string(k) + "_gen" + std::to_string(gen_[k]));
    ASSERT_NE(comms_[k], nullptr);
    // The new communicator works at once.
    Op op;
    op.count = 4096;
    void* in = Alloc(op.count * 4, k, false);
    void* out = Alloc(op.count * 4, k, false);
    ASSERT_TRUE(in && out);
    uint64_t step = ++step_;
    Stamp(s_[k], Dev(in), StressSeed(rank_, step), unsigned(op.count));
    CGC_ASSERT_OK(cgc_all_reduce(comms_[k], in, out, op.count, CGC_UINT32, CGC_SUM, s_[k]));
    ASSERT_TRUE(OutputIsExact(op, step, out)) << "first all-reduce on the recreated communicator " << k;
    CGC_ASSERT_OK(cgc_free(in));
    CGC_ASSERT_OK(cgc_free(out));
    aborts_++;
  }

  std::mt19937 rng_;
  cgc_comm_t comms_[2] = {nullptr, nullptr};
  int gen_[2] = {0, 0};
  cgc_stream_t s_[2] = {nullptr, nullptr};
  cgc_pool_t pool_ = nullptr;
  int pool_comm_ = 0, pool_rounds_left_ = 0;
  Slot reg_[2], pooled_;
  void* vote_ = nullptr;
  uint64_t step_ = 0, rounds_ = 0, captures_ = 0, replays_ = 0, eager_ = 0, pool_phases_ = 0, aborts_ = 0;
  uint64_t pools_after_abort_ = 0;  // pools whose communicator was aborted under them
};

TEST_F(Stress, MixedCollectivesStayExactForSeconds) {
  const double seconds = StressSeconds();
  if (seconds <= 0)
    GTEST_SKIP() << "set CGC_MULTI_GPU_STRESS_SECONDS to a number of seconds to run the multi-GPU stress test";
  uint32_t seed = 20240611u;
  if (const char* s = std::getenv("CGC_MULTI_GPU_STRESS_SEED")) seed = uint32_t(std::strtoul(s, nullptr, 10));
  rng_.seed(seed);
  const double abort_every = std::max(5.0, seconds / 3);
  for (int k = 0; k < 2; k++) {
    CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s_[k]));
    comms_[k] = CreateComm(ctx, "stress_c" + std::to_string(k) + "_gen0");
    ASSERT_NE(comms_[k], nullptr);
  }
  vote_ = Alloc(8, 0, false);
  ASSERT_NE(vote_, nullptr);
  std::printf("rank %d: stress: %.0f s, seed %u, an abort round every %.0f s\n", rank_, seconds, seed, abort_every);
  std::fflush(stdout);

  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double next_abort = abort_every;
  for (;;) {
    bool stop = false, abort = false;
    double now = elapsed();
    Vote(now >= seconds, now >= next_abort || (now >= seconds && aborts_ == 0), &stop, &abort);
    ASSERT_FALSE(HasFatalFailure());
    if (abort) {
      AbortRound(int(aborts_ % 2));
      ASSERT_FALSE(HasFatalFailure()) << "abort round " << aborts_;
      next_abort = elapsed() + abort_every;
      continue;
    }
    if (stop) break;
    rounds_++;

    // Captures: new graphs where there are none, else sometimes recaptured.
    if (pool_ == nullptr && Pick(4) == 0) StartPool();
    ASSERT_FALSE(HasFatalFailure());
    for (int k = 0; k < 2; k++)
      if (reg_[k].g == nullptr || Pick(3) == 0) Capture(reg_[k], k, false);
    if (pool_ != nullptr && (pooled_.g == nullptr || Pick(2) == 0)) Capture(pooled_, pool_comm_, true);
    ASSERT_FALSE(HasFatalFailure()) << "captures of round " << rounds_;

    // Replays: one after the other, or every graph launched first (each communicator's on its own
    // stream, the same order on every rank) and then checked; eager collectives in between.
    std::vector<Slot*> live = {&reg_[0], &reg_[1]};
    if (pooled_.g != nullptr) live.push_back(&pooled_);
    const bool concurrent = Pick(2) == 0;
    const int replays = 1 + int(Pick(3));
    for (int i = 0; i < replays; i++) {
      for (Slot* s : live) {
        Launch(*s);
        ASSERT_FALSE(HasFatalFailure());
        if (!concurrent) {
          ASSERT_TRUE(OutputIsExact(s->op, s->step, s->out)) << "replay on communicator " << s->comm;
        }
      }
      if (concurrent) {
        for (Slot* s : live) {
          ASSERT_TRUE(OutputIsExact(s->op, s->step, s->out)) << "concurrent replay on communicator " << s->comm;
        }
      }
      if (Pick(3) == 0) Eager();
      ASSERT_FALSE(HasFatalFailure());
    }

    if (pool_ != nullptr && --pool_rounds_left_ == 0) EndPool();
    ASSERT_FALSE(HasFatalFailure());
  }

  if (pool_) EndPool();
  for (Slot* s : {&reg_[0], &reg_[1], &pooled_}) Drop(*s);
  CGC_ASSERT_OK(cgc_free(vote_));
  for (int k = 0; k < 2; k++) {
    CGC_ASSERT_OK(cgc_stream_synchronize(s_[k]));
    CGC_ASSERT_OK(cgc_comm_destroy(comms_[k]));
    comms_[k] = nullptr;
    CGC_ASSERT_OK(cgc_stream_destroy(s_[k]));
    s_[k] = nullptr;
  }
  EXPECT_GE(aborts_, 1u);
  EXPECT_GT(rounds_, 0u);
  std::printf("rank %d: stress: %llu rounds, %llu graphs captured, %llu replays, %llu eager collectives, "
              "%llu pool phases (%llu ended by an abort), %llu aborts in %.1f s\n",
              rank_, (unsigned long long)rounds_, (unsigned long long)captures_, (unsigned long long)replays_,
              (unsigned long long)eager_, (unsigned long long)pool_phases_, (unsigned long long)pools_after_abort_,
              (unsigned long long)aborts_, elapsed());
}

// ---- the launcher ----

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int Skip(const std::string& why) {
  std::printf("[==========] multi-GPU NCCL tests\n[  SKIPPED ] 1 test: %s\n", why.c_str());
  return 0;
}

int Launch(int argc, char** argv) {
  int devices = 0;
  if (cgc_device_count(&devices) != CGC_SUCCESS)
    return Skip(std::string("no usable GPU: ") + cgc_last_error());
  if (devices < 2) return Skip("needs 2 GPUs, this machine has " + std::to_string(devices));
  int version = 0;
  if (cgc_nccl_version(&version) != CGC_SUCCESS) return Skip(std::string("no NCCL: ") + cgc_last_error());
  int nranks = devices > 8 ? 8 : devices;
  if (const char* n = std::getenv("CGC_NRANKS")) nranks = std::atoi(n);
  int timeout = 300;
  if (const char* t = std::getenv("CGC_MULTI_GPU_TIMEOUT")) timeout = std::atoi(t);
  // The stress test runs for CGC_MULTI_GPU_STRESS_SECONDS: the ranks get that long and 120 s more.
  const double stress = StressSeconds();
  if (stress > 0 && timeout < int(std::ceil(stress)) + 120) timeout = int(std::ceil(stress)) + 120;
  // NVLink multicast (NVLS) stays off in every rank (the ranks inherit the environment).
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls != nullptr && std::string(nvls) != "0")
    std::printf("NCCL_NVLS_ENABLE=%s overridden: the ranks run with NCCL_NVLS_ENABLE=0\n", nvls);
  if (nvls == nullptr || std::string(nvls) != "0") setenv("NCCL_NVLS_ENABLE", "0", 1);
  char dir_template[] = "/tmp/cgc_multi_gpu_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::printf("launching %d ranks (NCCL %d, %d GPUs), timeout %d s, logs in %s\n", nranks, version, devices,
              timeout, dir);
  if (stress > 0)
    std::printf("stress test: %.0f s\n", stress);
  else
    std::printf("stress test: off (CGC_MULTI_GPU_STRESS_SECONDS=<seconds> runs it)\n");
  std::fflush(stdout);
  std::vector<pid_t> pids(nranks, -1);
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string log = std::string(dir) + "/rank" + std::to_string(r) + ".log";
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      setenv("CGC_RANK", std::to_string(r).c_str(), 1);
      setenv("CGC_NRANKS", std::to_string(nranks).c_str(), 1);
      setenv("CGC_ID_DIR", dir, 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    pids[r] = pid;
  }
  (void)argc;
  std::vector<int> status(nranks, -1);
  int running = nranks;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
  while (running > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < nranks; r++) {
      if (pids[r] < 0) continue;
      int ws = 0;
      if (waitpid(pids[r], &ws, WNOHANG) == pids[r]) {
        status[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        pids[r] = -1;
        running--;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  bool ok = running == 0;
  for (int r = 0; r < nranks; r++) {
    if (pids[r] < 0) continue;
    std::printf("rank %d HUNG: still running after %d s; killed\n", r, timeout);
    kill(pids[r], SIGKILL);
    waitpid(pids[r], nullptr, 0);
  }
  int passed = -1;
  for (int r = 0; r < nranks; r++) {
    std::string log = ReadFile(std::string(dir) + "/rank" + std::to_string(r) + ".log");
    std::istringstream lines(log);
    std::string line;
    std::printf("---- rank %d (exit %d) ----\n", r, status[r]);
    while (std::getline(lines, line)) {
      bool keep = line.rfind("[  FAILED  ]", 0) == 0 || line.rfind("[  PASSED  ]", 0) == 0 ||
                  line.find("Failure") != std::string::npos || line.rfind("rank ", 0) == 0 ||
                  line.rfind("[       OK ]", 0) == 0 || line.rfind("[  SKIPPED ]", 0) == 0 || status[r] != 0;
      if (keep) std::printf("  %s\n", line.c_str());
      int n = 0;
      if (r == 0 && std::sscanf(line.c_str(), "[  PASSED  ] %d test", &n) == 1) passed = n;
    }
    if (status[r] != 0) ok = false;
  }
  if (ok && passed > 0) {
    std::printf("[  PASSED  ] %d tests (on each of %d ranks).\n", passed, nranks);
    return 0;
  }
  std::printf("[  FAILED  ] 1 test, listed below:\n[  FAILED  ] multi-GPU NCCL run (see the rank logs above)\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("CGC_RANK") == nullptr) return Launch(argc, argv);
  cgc_test::SetTestDevice(Rank());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
