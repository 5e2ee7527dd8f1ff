// Graphs on a real GPU: replay, upload, info, DOT dump, reset/destroy, concurrent replays.
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::GpuTest;
using cgc_test::RandomFloats;

constexpr unsigned kN = 1 << 14;

class Graph : public GpuTest {
 protected:
  // Captures p = p * 1 + step, `kernels` times, into a new graph.
  cgc_graph_t CaptureIncrements(cgc_stream_t s, CUdeviceptr p, float step, int kernels, unsigned flags = 0) {
    cgc_capture_options_t o = {sizeof o, CGC_CAPTURE_MODE_GLOBAL, nullptr, flags};
    cgc_graph_t g = nullptr;
    EXPECT_EQ(cgc_capture_begin(s, &o), CGC_SUCCESS) << cgc_last_error();
    for (int i = 0; i < kernels; i++) Axpb(s, p, 1.0f, step, kN);
    EXPECT_EQ(cgc_capture_end(s, &g), CGC_SUCCESS) << cgc_last_error();
    return g;
  }
  cgc_graph_info_t Info(cgc_graph_t g) {
    cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
    EXPECT_EQ(cgc_graph_info(g, &info), CGC_SUCCESS) << cgc_last_error();
    return info;
  }
};

TEST_F(Graph, ReplayCountCountsSuccessfulLaunches) {
  CUdeviceptr p = Alloc(kN * 4);
  std::vector<float> in = RandomFloats(kN, 7);
  Upload(p, in);
  cgc_graph_t g = CaptureIncrements(stream, p, 0.25f, 4);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Info(g).replay_count, 0u);
  for (int i = 0; i < 5; i++) CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  EXPECT_EQ(Info(g).replay_count, 5u);
  EXPECT_EQ(Info(g).node_count, 4u);
  std::vector<float> out = Download(p, kN);
  for (unsigned i = 0; i < kN; i += 101) ASSERT_NEAR(out[i], in[i] + 5.0f, 1e-5f);
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, UploadMarksTheGraphUploaded) {
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 2);
  EXPECT_EQ(Info(g).uploaded, 0);
  CGC_ASSERT_OK(cgc_graph_upload(g, stream));
  EXPECT_EQ(Info(g).uploaded, 1);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, UploadFlagUploadsAtCaptureEnd) {
  CUdeviceptr p = Alloc(kN * 4);
  Fill(stream, p, 1.0f, kN);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 3, CGC_CAPTURE_UPLOAD);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Info(g).uploaded, 1);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  EXPECT_EQ(Download(p, kN)[9], 4.0f);
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, InfoFillsOnlyWhatAnOlderStructHolds) {
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 2);
  struct {
    cgc_graph_info_t info;
    unsigned char canary[8];
  } old;
  std::memset(&old, 0xAB, sizeof old);
  old.info.struct_size = offsetof(cgc_graph_info_t, replay_count);  // a v0 caller: two fields
  CGC_ASSERT_OK(cgc_graph_info(g, &old.info));
  EXPECT_EQ(old.info.node_count, 2u);
  const unsigned char* tail = reinterpret_cast<const unsigned char*>(&old.info.replay_count);
  EXPECT_EQ(tail[0], 0xAB);  // not written
  old.info.struct_size = 0;
  EXPECT_EQ(cgc_graph_info(g, &old.info), CGC_ERROR_INVALID_ARGUMENT);
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, DebugDumpWritesDot) {
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 3);
  std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/cgc_graph_test.dot";
  CGC_ASSERT_OK(cgc_graph_debug_dump(g, path.c_str()));
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("digraph"), std::string::npos);
  EXPECT_NE(text.str().find("cgc_test_axpb"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_EQ(cgc_graph_debug_dump(g, "/nonexistent-dir/x.dot"), CGC_ERROR_CUDA);
  EXPECT_NE(std::string(cgc_last_error()).find("/nonexistent-dir/x.dot"), std::string::npos) << cgc_last_error();
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, NativeHandlesAreThoseOfTheCapture) {
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 2);
  CUgraph native = static_cast<CUgraph>(cgc_graph_native(g));
  ASSERT_NE(native, nullptr);
  ASSERT_NE(cgc_graph_native_exec(g), nullptr);
  size_t nodes = 0;
  CU_ASSERT_OK(cuGraphGetNodes(native, nullptr, &nodes));
  EXPECT_EQ(nodes, 3u) << "the two captured kernels and cgc's completion record (the graph's last node)";
  cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
  CGC_ASSERT_OK(cgc_graph_info(g, &info));
  EXPECT_EQ(info.node_count, 2u) << "cgc_graph_info counts the captured nodes only";
  // The exec launches directly through the driver as well.
  CU_ASSERT_OK(cuGraphLaunch(static_cast<CUgraphExec>(cgc_graph_native_exec(g)), (CUstream)cgc_stream_native(stream)));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, LaunchAfterResetIsInvalidState) {
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 2);
  CGC_ASSERT_OK(cgc_graph_reset(g));
  EXPECT_EQ(cgc_graph_launch(g, stream), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("reset"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_graph_upload(g, stream), CGC_ERROR_INVALID_STATE);
  EXPECT_EQ(cgc_graph_native(g), nullptr);
  EXPECT_EQ(cgc_graph_native_exec(g), nullptr);
  EXPECT_EQ(cgc_graph_debug_dump(g, "/tmp/x.dot"), CGC_ERROR_INVALID_STATE);
  cgc_pool_t pool = reinterpret_cast<cgc_pool_t>(0x1);
  EXPECT_EQ(cgc_graph_pool(g, &pool), CGC_ERROR_INVALID_STATE);
  EXPECT_EQ(pool, nullptr);
  CGC_EXPECT_OK(cgc_graph_reset(g));  // twice is fine
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, DestroyedGraphIsAnInvalidHandle) {
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 1);
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  EXPECT_EQ(cgc_graph_destroy(g), CGC_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(cgc_last_error()).find("already destroyed"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_graph_launch(g, stream), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_graph_reset(g), CGC_ERROR_INVALID_HANDLE);
  cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
  EXPECT_EQ(cgc_graph_info(g, &info), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_graph_native(g), nullptr);
}

TEST_F(Graph, WrongHandleKindIsInvalidHandle) {
  // A stream passed where a graph is expected (a classic FFI mistake).
  EXPECT_EQ(cgc_graph_launch(reinterpret_cast<cgc_graph_t>(stream), stream), CGC_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(cgc_last_error()).find("not a live cgc graph"), std::string::npos) << cgc_last_error();
}

TEST_F(Graph, PoolIsNullWithoutPrivatePools) {
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 1);
  cgc_pool_t pool = reinterpret_cast<cgc_pool_t>(0x1);
  CGC_ASSERT_OK(cgc_graph_pool(g, &pool));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Graph, SeparateGraphsReplayConcurrentlyFromSeveralThreads) {
  constexpr int kThreads = 4, kReplays = 200;
  cgc_stream_t streams[kThreads];
  CUdeviceptr bufs[kThreads];
  cgc_graph_t graphs[kThreads];
  std::vector<float> init[kThreads];
  for (int t = 0; t < kThreads; t++) {
    CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &streams[t]));
    bufs[t] = Alloc(kN * 4);
    init[t] = RandomFloats(kN, 50 + t);
    Upload(bufs[t], init[t]);
    graphs[t] = CaptureIncrements(streams[t], bufs[t], float(t + 1), 3);
    ASSERT_NE(graphs[t], nullptr);
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kReplays; i++)
        if (cgc_graph_launch(graphs[t], streams[t]) != CGC_SUCCESS) failures[t]++;
      if (cgc_stream_synchronize(streams[t]) != CGC_SUCCESS) failures[t]++;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; t++) {
    EXPECT_EQ(failures[t], 0);
    EXPECT_EQ(Info(graphs[t]).replay_count, uint64_t(kReplays));
    std::vector<float> out = Download(bufs[t], kN);
    for (unsigned i = 0; i < kN; i += 257)
      ASSERT_NEAR(out[i], init[t][i] + float(t + 1) * 3 * kReplays, 1e-2f) << "thread " << t;
    CGC_ASSERT_OK(cgc_graph_destroy(graphs[t]));
    CGC_ASSERT_OK(cgc_stream_destroy(streams[t]));
  }
}

TEST_F(Graph, LaunchOnAStreamOfAnotherDeviceIsRefused) {
  CGC_REQUIRE_GPUS(2);
  cgc_context_t other = nullptr;
  cgc_stream_t s1 = nullptr;
  CGC_ASSERT_OK(cgc_context_create(1, &other));
  CGC_ASSERT_OK(cgc_stream_create(other, 0, 0, &s1));
  CUdeviceptr p = Alloc(kN * 4);
  cgc_graph_t g = CaptureIncrements(stream, p, 1.0f, 1);
  EXPECT_EQ(cgc_graph_launch(g, s1), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cgc_last_error()).find("device 1"), std::string::npos) << cgc_last_error();
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(s1));
  CGC_ASSERT_OK(cgc_context_destroy(other));
}

}  // namespace
