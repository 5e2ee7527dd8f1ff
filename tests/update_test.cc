// Graphs that change without recapture (1.2): a capture that updates an existing graph's
// executable in place (or instantiates it anew when the driver refuses the new topology), and
// per-node updates of kernel nodes.
#include <gtest/gtest.h>

#include <atomic>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::GpuTest;

constexpr unsigned kN = 4096;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Update : public GpuTest {
 protected:
  cgc_graph_info_t Info(cgc_graph_t g) {
    cgc_graph_info_t info = {};
    info.struct_size = sizeof info;
    EXPECT_EQ(cgc_graph_info(g, &info), CGC_SUCCESS) << cgc_last_error();
    return info;
  }
  cgc_capture_options_t UpdateOf(cgc_graph_t g) {
    cgc_capture_options_t o = {};
    o.struct_size = sizeof o;
    o.update = g;
    return o;
  }
  // Fills each buffer with its value, one kernel per buffer.
  cgc_graph_t CaptureFills(const std::vector<CUdeviceptr>& bufs, const std::vector<float>& values,
                           const cgc_capture_options_t* o = nullptr) {
    if (cgc_capture_begin(stream, o) != CGC_SUCCESS) {
      ADD_FAILURE() << cgc_last_error();
      return nullptr;
    }
    for (size_t i = 0; i < bufs.size(); i++) Fill(stream, bufs[i], values[i], kN);
    cgc_graph_t g = nullptr;
    cgc_status_t st = cgc_capture_end(stream, &g);
    EXPECT_EQ(st, CGC_SUCCESS) << cgc_last_error();
    return g;
  }
  void ExpectAll(CUdeviceptr p, float v, const char* what) {
    std::vector<float> got = Download(p, kN);
    for (unsigned i = 0; i < kN; i += 97) ASSERT_EQ(got[i], v) << what << " at " << i;
  }
};

TEST_F(Update, NewPointersAndValuesOfTheSameTopologyUpdateInPlace) {
  CUdeviceptr a = Alloc(kN * 4), b = Alloc(kN * 4), c = Alloc(kN * 4);
  cgc_graph_t g = CaptureFills({a, b}, {1.0f, 2.0f});
  ASSERT_NE(g, nullptr);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(a, 1.0f, "a");
  void* exec_before = cgc_graph_native_exec(g);
  cgc_capture_options_t o = UpdateOf(g);
  cgc_graph_t same = CaptureFills({c, b}, {3.0f, 4.0f}, &o);  // a new pointer, new values
  EXPECT_EQ(same, g) << "the update hands back the graph it updated";
  cgc_graph_info_t info = Info(g);
  EXPECT_EQ(info.update_count, 1u);
  EXPECT_EQ(info.last_update, CGC_GRAPH_UPDATE_IN_PLACE);
  EXPECT_EQ(info.last_update_result, 0);
  EXPECT_EQ(info.kernel_nodes, 2u);
  EXPECT_EQ(cgc_graph_native_exec(g), exec_before) << "in place: the same executable";
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(a, 1.0f, "a (no longer written)");
  ExpectAll(b, 4.0f, "b");
  ExpectAll(c, 3.0f, "c");
  CGC_EXPECT_OK(cgc_graph_destroy(g));
}

TEST_F(Update, AChangedTopologyIsInstantiatedAnewAndSaysWhy) {
  CUdeviceptr a = Alloc(kN * 4), b = Alloc(kN * 4);
  cgc_graph_t g = CaptureFills({a}, {1.0f});
  ASSERT_NE(g, nullptr);
  cgc_capture_options_t o = UpdateOf(g);
  ASSERT_EQ(cgc_capture_begin(stream, &o), CGC_SUCCESS) << cgc_last_error();
  Fill(stream, a, 5.0f, kN);
  Fill(stream, b, 6.0f, kN);  // one node more
  cgc_graph_t same = nullptr;
  ASSERT_EQ(cgc_capture_end(stream, &same), CGC_SUCCESS) << cgc_last_error();
  EXPECT_EQ(same, g);
  EXPECT_TRUE(Contains(cgc_last_error(), "TOPOLOGY_CHANGED")) << cgc_last_error();
  cgc_graph_info_t info = Info(g);
  EXPECT_EQ(info.last_update, CGC_GRAPH_UPDATE_REINSTANTIATED);
  EXPECT_EQ(info.last_update_result, 2) << "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED";
  EXPECT_EQ(info.kernel_nodes, 2u);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(a, 5.0f, "a");
  ExpectAll(b, 6.0f, "b");
  CGC_EXPECT_OK(cgc_graph_destroy(g));
}

// A replay still running on another stream when the update ends keeps what it was launched
// with; the next replay, ordered after it on that stream, runs the new graph.
TEST_F(Update, AReplayRunningElsewhereIsNotAffectedAndTheNextOneIsUpdated) {
  CUdeviceptr a = Alloc(kN * 4), b = Alloc(kN * 4);
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  Spin(stream, 200LL * 1000 * 1000);
  Fill(stream, a, 1.0f, kN);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_launch(g, other));  // still spinning while the update happens
  cgc_capture_options_t o = UpdateOf(g);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  Spin(stream, 1000);
  Fill(stream, b, 2.0f, kN);
  cgc_graph_t same = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &same));
  EXPECT_EQ(Info(g).last_update, CGC_GRAPH_UPDATE_IN_PLACE);
  CGC_ASSERT_OK(cgc_graph_launch(g, other));
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  ExpectAll(a, 1.0f, "a, written by the replay launched before the update");
  ExpectAll(b, 2.0f, "b, written by the replay after it");
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_stream_destroy(other));
}

TEST_F(Update, AGraphBeingUpdatedCannotBeUpdatedResetOrDestroyedByAnotherCall) {
  CUdeviceptr a = Alloc(kN * 4);
  cgc_graph_t g = CaptureFills({a}, {1.0f});
  ASSERT_NE(g, nullptr);
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  cgc_capture_options_t o = UpdateOf(g);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  Fill(stream, a, 2.0f, kN);
  EXPECT_EQ(cgc_capture_begin(other, &o), CGC_ERROR_INVALID_STATE);
  EXPECT_TRUE(Contains(cgc_last_error(), "already being updated")) << cgc_last_error();
  cgc_capture_status_t cs = CGC_CAPTURE_ACTIVE;
  CGC_ASSERT_OK(cgc_stream_capture_status(other, &cs, nullptr));
  EXPECT_EQ(cs, CGC_CAPTURE_NONE) << "the refused begin left nothing capturing";
  EXPECT_EQ(cgc_graph_reset(g), CGC_ERROR_INVALID_STATE);
  EXPECT_EQ(cgc_graph_destroy(g), CGC_ERROR_INVALID_STATE);
  EXPECT_EQ(cgc_graph_kernel_node_set_enabled(g, 0, 0), CGC_ERROR_INVALID_STATE);
  // Launching it meanwhile is fine: the old executable runs.
  CGC_EXPECT_OK(cgc_graph_launch(g, other));
  cgc_graph_t same = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &same));
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  // Over: a second update may begin, and the graph goes normally.
  CGC_ASSERT_OK(cgc_capture_begin(other, &o));
  Fill(other, a, 3.0f, kN);
  CGC_ASSERT_OK(cgc_capture_end(other, &same));
  EXPECT_EQ(Info(g).update_count, 2u);
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_stream_destroy(other));
}

TEST_F(Update, BadUpdateTargetsAreRefused) {
  CUdeviceptr a = Alloc(kN * 4);
  cgc_graph_t g = CaptureFills({a}, {1.0f});
  ASSERT_NE(g, nullptr);
  cgc_pool_t other_pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &other_pool));
  cgc_capture_options_t o = UpdateOf(g);
  o.pool = other_pool;
  EXPECT_EQ(cgc_capture_begin(stream, &o), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(cgc_last_error(), "pool")) << cgc_last_error();
  o.pool = nullptr;
  CGC_ASSERT_OK(cgc_graph_reset(g));
  EXPECT_EQ(cgc_capture_begin(stream, &o), CGC_ERROR_INVALID_STATE);
  EXPECT_TRUE(Contains(cgc_last_error(), "reset")) << cgc_last_error();
  unsigned char junk[64] = {1};
  o.update = reinterpret_cast<cgc_graph_t>(junk);
  EXPECT_EQ(cgc_capture_begin(stream, &o), CGC_ERROR_INVALID_HANDLE);
  cgc_capture_status_t cs = CGC_CAPTURE_ACTIVE;
  CGC_ASSERT_OK(cgc_stream_capture_status(stream, &cs, nullptr));
  EXPECT_EQ(cs, CGC_CAPTURE_NONE);
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_pool_release(other_pool));
}

// PyTorch's pool rule: the recapture allocates from the graph's pool, so memory the old capture
// freed serves the new one, and the pool does not grow with each update.
TEST_F(Update, TheRecaptureAllocatesFromTheGraphsPool) {
  auto capture_with_temporaries = [&](const cgc_capture_options_t* o, void** out) {
    EXPECT_EQ(cgc_capture_begin(stream, o), CGC_SUCCESS) << cgc_last_error();
    void* t = nullptr;
    EXPECT_EQ(cgc_malloc(ctx, kN * 4, stream, &t), CGC_SUCCESS);
    Fill(stream, cgc_test::Dev(t), 1.0f, kN);
    EXPECT_EQ(cgc_malloc(ctx, kN * 4, stream, out), CGC_SUCCESS);
    Add(stream, cgc_test::Dev(*out), cgc_test::Dev(t), 1.0f, kN);
    EXPECT_EQ(cgc_free(t), CGC_SUCCESS);
    cgc_graph_t g = nullptr;
    EXPECT_EQ(cgc_capture_end(stream, &g), CGC_SUCCESS) << cgc_last_error();
    return g;
  };
  void* out1 = nullptr;
  cgc_graph_t g = capture_with_temporaries(nullptr, &out1);
  ASSERT_NE(g, nullptr);
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_graph_pool(g, &pool));
  size_t reserved = Info(g).pool_bytes_reserved;
  CGC_ASSERT_OK(cgc_free(out1));  // the old output is not needed after the update
  cgc_capture_options_t o = UpdateOf(g);
  void* out2 = nullptr;
  for (int round = 0; round < 5; round++) {
    cgc_graph_t same = capture_with_temporaries(&o, &out2);
    ASSERT_EQ(same, g);
    cgc_pool_t now = nullptr;
    CGC_ASSERT_OK(cgc_graph_pool(g, &now));
    EXPECT_EQ(now, pool) << "the same pool";
    EXPECT_EQ(Info(g).pool_bytes_reserved, reserved) << "round " << round << ": the pool grew";
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
    ExpectAll(cgc_test::Dev(out2), 2.0f, "out");
    CGC_ASSERT_OK(cgc_free(out2));
  }
  CGC_EXPECT_OK(cgc_graph_destroy(g));
}

// ---- per-node updates ----

TEST_F(Update, KernelNodesCanBeDisabledAndGivenNewArguments) {
  CUdeviceptr a = Alloc(kN * 4), b = Alloc(kN * 4), c = Alloc(kN * 4), d = Alloc(kN * 4);
  cgc_graph_t g = CaptureFills({a, b, c}, {1.0f, 2.0f, 3.0f});
  ASSERT_NE(g, nullptr);
  Upload(a, std::vector<float>(kN, 0.0f));
  Upload(b, std::vector<float>(kN, 0.0f));
  CGC_ASSERT_OK(cgc_graph_kernel_node_set_enabled(g, 1, 0));  // b's fill
  float v = 7.0f;
  unsigned n = kN;
  void* args[] = {&d, &v, &n};
  CGC_ASSERT_OK(cgc_graph_kernel_node_set_args(g, 2, args));  // c's fill now writes 7 into d
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(a, 1.0f, "a");
  ExpectAll(b, 0.0f, "b (disabled)");
  ExpectAll(d, 7.0f, "d (new arguments)");
  CGC_ASSERT_OK(cgc_graph_kernel_node_set_enabled(g, 1, 1));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(b, 2.0f, "b (enabled again)");
  EXPECT_EQ(cgc_graph_kernel_node_set_enabled(g, 3, 0), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(cgc_last_error(), "3 kernel nodes")) << cgc_last_error();
  EXPECT_EQ(cgc_graph_kernel_node_set_args(g, 0, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  CGC_ASSERT_OK(cgc_graph_reset(g));
  EXPECT_EQ(cgc_graph_kernel_node_set_enabled(g, 0, 0), CGC_ERROR_INVALID_STATE);
  CGC_EXPECT_OK(cgc_graph_destroy(g));
}

// A host function of the old graph is released once the update has replaced it (after the
// replays that could still call it).
void CountRelease(void* user) { ++*static_cast<std::atomic<int>*>(user); }
void Nothing(void*) {}

TEST_F(Update, TheOldGraphsHostFunctionsAreReleasedByTheUpdate) {
  std::atomic<int> released{0};
  CUdeviceptr a = Alloc(kN * 4);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  Fill(stream, a, 1.0f, kN);
  CGC_ASSERT_OK(cgc_launch_host_func(stream, Nothing, &released, CountRelease));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  cgc_capture_options_t o = UpdateOf(g);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  Fill(stream, a, 2.0f, kN);
  CGC_ASSERT_OK(cgc_launch_host_func(stream, Nothing, &released, CountRelease));
  cgc_graph_t same = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &same));
  EXPECT_EQ(released, 1) << "the old record goes with the old graph";
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(a, 2.0f, "a");
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  EXPECT_EQ(released, 2);
}

// ---- found by review (issue 14) ----

cgc_status_t FailingBody(cgc_stream_t, void*) { return CGC_ERROR_INVALID_ARGUMENT; }

// cgc_capture with `update` and a body that fails: the graph stays as it was (it was updated with
// the partial capture and then destroyed).
TEST_F(Update, AFailingBodyLeavesTheGraphToUpdateAsItWas) {
  CUdeviceptr a = Alloc(kN * 4);
  cgc_graph_t g = CaptureFills({a}, {1.0f});
  ASSERT_NE(g, nullptr);
  cgc_capture_options_t o = UpdateOf(g);
  cgc_graph_t out = nullptr;
  EXPECT_EQ(cgc_capture(stream, &o, FailingBody, nullptr, &out), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  Upload(a, std::vector<float>(kN, 0.0f));
  ASSERT_EQ(cgc_graph_launch(g, stream), CGC_SUCCESS) << "the graph is alive: " << cgc_last_error();
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(a, 1.0f, "a");
  EXPECT_EQ(Info(g).update_count, 0u);
  CGC_EXPECT_OK(cgc_graph_destroy(g));
}

// A replay launched before an update in place still runs when the graph is destroyed: the pool's
// memory must wait for it (the fence used to be only the new event, which that replay never
// records).
TEST_F(Update, PoolMemoryWaitsForReplaysLaunchedBeforeAnUpdateInPlace) {
  CUdeviceptr out = Alloc(kN * 4);
  auto capture = [&](const cgc_capture_options_t* o) {
    EXPECT_EQ(cgc_capture_begin(stream, o), CGC_SUCCESS) << cgc_last_error();
    void* t = nullptr;
    EXPECT_EQ(cgc_malloc(ctx, kN * 4, stream, &t), CGC_SUCCESS);
    Fill(stream, cgc_test::Dev(t), 1.0f, kN);
    Spin(stream, 300LL * 1000 * 1000);  // t is the replay's while this runs
    Add(stream, out, cgc_test::Dev(t), 0.0f, kN);
    EXPECT_EQ(cgc_free(t), CGC_SUCCESS);
    cgc_graph_t g = nullptr;
    EXPECT_EQ(cgc_capture_end(stream, &g), CGC_SUCCESS) << cgc_last_error();
    return g;
  };
  cgc_graph_t g = capture(nullptr);
  ASSERT_NE(g, nullptr);
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));  // spins
  cgc_capture_options_t o = UpdateOf(g);
  cgc_stream_t capturer = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &capturer));
  std::swap(stream, capturer);  // capture the update on another stream than the one replaying
  cgc_graph_t same = capture(&o);
  std::swap(stream, capturer);
  ASSERT_EQ(same, g);
  ASSERT_EQ(Info(g).last_update, CGC_GRAPH_UPDATE_IN_PLACE);
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  // The pool's memory goes back to the device only after that replay: what another stream
  // allocates and writes now must not land in the replay's t.
  for (int i = 0; i < 4; i++) {
    void* p = nullptr;
    CGC_ASSERT_OK(cgc_malloc(ctx, kN * 4, other, &p));
    Fill(other, cgc_test::Dev(p), 99.0f, kN);
    CGC_ASSERT_OK(cgc_free(p));
  }
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  ExpectAll(out, 1.0f, "out (the replay's t was overwritten by another stream)");
  CGC_EXPECT_OK(cgc_stream_destroy(capturer));
  CGC_EXPECT_OK(cgc_stream_destroy(other));
}

// After an update in place the executable still has the nodes of the graph it was instantiated
// from: per-node updates must reach them (and an update enables disabled kernels again).
TEST_F(Update, PerNodeUpdatesAfterAnUpdateInPlace) {
  CUdeviceptr a = Alloc(kN * 4), b = Alloc(kN * 4), c = Alloc(kN * 4), d = Alloc(kN * 4), e = Alloc(kN * 4);
  cgc_graph_t g = CaptureFills({a, b}, {1.0f, 2.0f});
  ASSERT_NE(g, nullptr);
  CGC_ASSERT_OK(cgc_graph_kernel_node_set_enabled(g, 0, 0));  // disabled before the update
  cgc_capture_options_t o = UpdateOf(g);
  ASSERT_EQ(CaptureFills({c, d}, {3.0f, 4.0f}, &o), g);
  ASSERT_EQ(Info(g).last_update, CGC_GRAPH_UPDATE_IN_PLACE);
  for (CUdeviceptr p : {a, b, c, d, e}) Upload(p, std::vector<float>(kN, 0.0f));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(c, 3.0f, "c (the update enabled kernel 0 again)");
  ExpectAll(d, 4.0f, "d");
  float v = 5.0f;
  unsigned n = kN;
  void* args[] = {&e, &v, &n};
  CGC_ASSERT_OK(cgc_graph_kernel_node_set_args(g, 0, args));
  CGC_ASSERT_OK(cgc_graph_kernel_node_set_enabled(g, 1, 0));
  for (CUdeviceptr p : {c, d, e}) Upload(p, std::vector<float>(kN, 0.0f));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ExpectAll(e, 5.0f, "e (kernel 0's new arguments)");
  ExpectAll(c, 0.0f, "c (no longer written)");
  ExpectAll(d, 0.0f, "d (kernel 1 disabled)");
  ExpectAll(a, 0.0f, "a");
  CGC_EXPECT_OK(cgc_graph_destroy(g));
}

// Reset and destroy take the graph as an update does: whichever comes first wins, the other is
// refused, and nothing touches a destroyed graph.
TEST_F(Update, UpdatesAndDestroysOnTwoThreadsNeverMeetHalfway) {
  CUdeviceptr a = Alloc(kN * 4);
  for (int round = 0; round < 20; round++) {
    cgc_graph_t g = CaptureFills({a}, {1.0f});
    ASSERT_NE(g, nullptr);
    cgc_stream_t other = nullptr;
    CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
    std::atomic<bool> go{false};
    cgc_status_t destroyed = CGC_ERROR_INTERNAL;
    std::thread destroyer([&] {
      while (!go) std::this_thread::yield();
      destroyed = cgc_graph_destroy(g);
    });
    cgc_capture_options_t o = UpdateOf(g);
    go = true;
    cgc_status_t began = cgc_capture_begin(other, &o);
    if (began == CGC_SUCCESS) {
      Fill(other, a, 2.0f, kN);
      cgc_graph_t same = nullptr;
      EXPECT_EQ(cgc_capture_end(other, &same), CGC_SUCCESS) << cgc_last_error();
    }
    destroyer.join();
    if (began == CGC_SUCCESS) {
      // The update won: the destroy was refused (or came after the end).
      if (destroyed != CGC_SUCCESS) {
        EXPECT_EQ(destroyed, CGC_ERROR_INVALID_STATE);
        CGC_EXPECT_OK(cgc_graph_destroy(g));
      }
    } else {
      EXPECT_TRUE(began == CGC_ERROR_INVALID_STATE || began == CGC_ERROR_INVALID_HANDLE) << began;
      EXPECT_EQ(destroyed, CGC_SUCCESS);
    }
    CGC_EXPECT_OK(cgc_stream_destroy(other));
  }
}

}  // namespace
