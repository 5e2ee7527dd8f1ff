// Captured NCCL collectives across GPUs, one process per GPU.
//
// Run plainly, this binary is the launcher: it starts one copy of itself per GPU (CGC_RANK,
// CGC_NRANKS and CGC_ID_DIR in the environment), passes NCCL unique ids between them through
// files in CGC_ID_DIR, kills every rank if they are not done within CGC_MULTI_GPU_TIMEOUT
// seconds (default 300) and says which ranks hung, then prints each rank's GoogleTest summary
// and an overall one. With fewer than 2 GPUs, or without NCCL, it reports the tests as skipped
// with the reason. Run with CGC_RANK set, it is one rank: a GoogleTest program.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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
  char dir_template[] = "/tmp/cgc_multi_gpu_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::printf("launching %d ranks (NCCL %d, %d GPUs), timeout %d s, logs in %s\n", nranks, version, devices,
              timeout, dir);
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
                  line.rfind("[       OK ]", 0) == 0 || status[r] != 0;
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
