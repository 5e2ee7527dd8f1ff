// Families (1.6, SEMANTICS 41): graphs of one structure sharing one executable, switched to a
// member at its launch; refusals; resets in any order; members launched from two threads; and a
// restore that makes families (CGC_RESTORE_FAMILIES), whose members are built at their first use.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr size_t kMiB = size_t{1} << 20;
// Bases far from the other tests' pools: the first, or under ThreadSanitizer (whose shadow memory
// takes that range) one in the high range it leaves to the program.
constexpr uintptr_t kBases[] = {0x6d0000000000ull, 0x7ed000000000ull, 0x7ef000000000ull};

class FamilyTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    CGC_ASSERT_OK(cgc_module_load(ctx, cgc_test_kernels_fatbin, &module));
    CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_fill", &fill));
    CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_add", &add));
  }
  void TearDown() override {
    for (void* p : outputs) EXPECT_EQ(cgc_free(p), CGC_SUCCESS) << cgc_last_error();
    if (module != nullptr) {
      EXPECT_EQ(cgc_module_unload(module), CGC_SUCCESS) << cgc_last_error();
    }
    GpuTest::TearDown();
  }
  // A graph of `n` floats: fill with v, then add 1 (two kernels); with `extra`, a third kernel
  // (another structure). Its output is kept in `outputs`.
  cgc_graph_t Capture(unsigned n, float v, bool extra = false, cgc_pool_t pool = nullptr) {
    cgc_capture_options_t options{};
    options.struct_size = sizeof options;
    options.pool = pool;
    EXPECT_EQ(cgc_capture_begin(stream, &options), CGC_SUCCESS) << cgc_last_error();
    void* out = Malloc(n * 4, stream);
    outputs.push_back(out);
    void* fill_args[] = {&out, &v, &n};
    EXPECT_EQ(cgc_launch_kernel(fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, fill_args), CGC_SUCCESS);
    float one = 1.0f;
    void* add_args[] = {&out, &out, &one, &n};
    EXPECT_EQ(cgc_launch_kernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, add_args), CGC_SUCCESS);
    if (extra) {
      EXPECT_EQ(cgc_launch_kernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, add_args), CGC_SUCCESS);
    }
    cgc_graph_t g = nullptr;
    EXPECT_EQ(cgc_capture_end(stream, &g), CGC_SUCCESS) << cgc_last_error();
    return g;
  }
  // Zeroes graph i's output, launches it and checks every float is `want`.
  void LaunchAndCheck(cgc_graph_t g, size_t i, unsigned n, float want) {
    CGC_ASSERT_OK(cgc_memset_d32_async(outputs[i], 0, n, stream));
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    std::vector<float> got = Download(Dev(outputs[i]), n);
    for (unsigned k = 0; k < n; k += 61) ASSERT_EQ(got[k], want) << "graph " << i << " float " << k;
  }
  // A pool of fixed addresses at the first of kBases the driver gives.
  cgc_status_t FixedPool(cgc_pool_t* pool) {
    cgc_status_t st = CGC_ERROR_INVALID_STATE;
    for (uintptr_t base : kBases)
      if ((st = cgc_pool_create_at(ctx, reinterpret_cast<void*>(base), 64 * kMiB, pool)) == CGC_SUCCESS) break;
    return st;
  }
  // Saves `graphs` (captured into `pool`) into *bytes, gives them back with their outputs' blocks
  // and the pool, and restores the bytes as families into restored[0..n) and *restored_pool. The
  // outputs stay listed: the restore allocates them again at their addresses (the test frees them).
  void SaveAndRestoreAsFamilies(const std::vector<cgc_graph_t>& graphs, cgc_pool_t pool, cgc_graph_t* restored,
                                cgc_pool_t* restored_pool, std::vector<uint8_t>* bytes) {
    size_t size = 0;
    CGC_ASSERT_OK(cgc_graphs_save(graphs.data(), graphs.size(), nullptr, nullptr, 0, &size));
    bytes->resize(size);
    CGC_ASSERT_OK(cgc_graphs_save(graphs.data(), graphs.size(), nullptr, bytes->data(), size, &size));
    for (cgc_graph_t g : graphs) CGC_ASSERT_OK(cgc_graph_destroy(g));
    for (void* p : outputs) CGC_ASSERT_OK(cgc_free(p));
    CGC_ASSERT_OK(cgc_pool_release(pool));
    cgc_restore_options_t options{};
    options.struct_size = sizeof options;
    options.flags = CGC_RESTORE_FAMILIES;
    CGC_ASSERT_OK(cgc_graphs_restore(ctx, bytes->data(), bytes->size(), &options, restored, graphs.size(),
                                     restored_pool, 1));
  }
  cgc_graph_info_t Info(cgc_graph_t g) {
    cgc_graph_info_t info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(cgc_graph_info(g, &info), CGC_SUCCESS) << cgc_last_error();
    return info;
  }
  cgc_module_t module = nullptr;
  cgc_function_t fill = nullptr, add = nullptr;
  std::vector<void*> outputs;
};

TEST_F(FamilyTest, MembersShareOneExecutableAndEachLaunchRunsItsOwnNodes) {
  cgc_graph_t a = Capture(1024, 1.0f), b = Capture(4096, 5.0f), c = Capture(256, 9.0f);
  CGC_ASSERT_OK(cgc_graph_share_executable(b, a));
  CGC_ASSERT_OK(cgc_graph_share_executable(c, a));
  CGC_EXPECT_OK(cgc_graph_share_executable(c, b));  // a member of that family already
  EXPECT_EQ(cgc_graph_native_exec(a), cgc_graph_native_exec(b));
  EXPECT_EQ(cgc_graph_native_exec(a), cgc_graph_native_exec(c));
  EXPECT_EQ(Info(a).family_size, 3u);
  EXPECT_EQ(Info(c).family_size, 3u);
  for (int round = 0; round < 3; round++) {
    ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(b, 1, 4096, 6.0f));
    ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(a, 0, 1024, 2.0f));
    ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(c, 2, 256, 10.0f));
    ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(c, 2, 256, 10.0f));  // unchanged member: no switch
  }
  CGC_ASSERT_OK(cgc_graph_upload(b, stream));
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(b, 1, 4096, 6.0f));
  // The leader goes first; the members keep the executable.
  CGC_ASSERT_OK(cgc_graph_destroy(a));
  EXPECT_EQ(Info(b).family_size, 2u);
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(c, 2, 256, 10.0f));
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(b, 1, 4096, 6.0f));
  CGC_ASSERT_OK(cgc_graph_reset(b));
  EXPECT_EQ(Info(b).family_size, 0u);
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(c, 2, 256, 10.0f));
  EXPECT_EQ(Info(c).family_size, 1u);
  CGC_ASSERT_OK(cgc_graph_destroy(c));
  CGC_ASSERT_OK(cgc_graph_destroy(b));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
}

// Members that differ in a few nodes (one buffer for all, as a server's static inputs are; one
// kernel's value differs) are switched node by node; one whose set node differs too is switched
// by whole updates; every launch runs its own member's nodes, also after the leader, whose graph
// the executable was instantiated from, has gone.
TEST_F(FamilyTest, MembersThatDifferInAFewNodesRunTheirOwnInAnyOrderAndAfterTheLeaderLeaves) {
  constexpr unsigned kN = 2048;
  constexpr int kAdds = 30;
  void* buf = Malloc(kN * 4, stream);
  void* scratch = Malloc(kN * 4, stream);
  outputs.push_back(buf);
  outputs.push_back(scratch);
  auto capture = [&](float v, unsigned set_to) {
    cgc_capture_options_t options{};
    options.struct_size = sizeof options;
    EXPECT_EQ(cgc_capture_begin(stream, &options), CGC_SUCCESS) << cgc_last_error();
    EXPECT_EQ(cgc_memset_d32_async(scratch, set_to, kN, stream), CGC_SUCCESS) << cgc_last_error();
    unsigned n = kN;
    void* fill_args[] = {&buf, &v, &n};
    EXPECT_EQ(cgc_launch_kernel(fill, kN / 256, 1, 1, 256, 1, 1, 0, stream, fill_args), CGC_SUCCESS);
    float one = 1.0f;
    void* add_args[] = {&buf, &buf, &one, &n};
    for (int i = 0; i < kAdds; i++)
      EXPECT_EQ(cgc_launch_kernel(add, kN / 256, 1, 1, 256, 1, 1, 0, stream, add_args), CGC_SUCCESS);
    cgc_graph_t g = nullptr;
    EXPECT_EQ(cgc_capture_end(stream, &g), CGC_SUCCESS) << cgc_last_error();
    return g;
  };
  const float values[] = {1.0f, 2.0f, 3.0f, 4.0f};
  const unsigned sets[] = {0, 0, 0, 7};  // the last member's set differs: it does not pair
  cgc_graph_t g[4];
  for (int i = 0; i < 4; i++) g[i] = capture(values[i], sets[i]);
  for (int i = 1; i < 4; i++) CGC_ASSERT_OK(cgc_graph_share_executable(g[i], g[0]));
  EXPECT_EQ(Info(g[3]).family_size, 4u);
  auto run = [&](int i) {
    CGC_ASSERT_OK(cgc_memset_d32_async(buf, 0, kN, stream));
    CGC_ASSERT_OK(cgc_memset_d32_async(scratch, 1, kN, stream));
    CGC_ASSERT_OK(cgc_graph_launch(g[i], stream));
    std::vector<float> got = Download(Dev(buf), kN);
    std::vector<uint32_t> set = DownloadWords(Dev(scratch), kN);
    for (unsigned k = 0; k < kN; k += 67) {
      ASSERT_EQ(got[k], values[i] + kAdds) << "member " << i << " float " << k;
      ASSERT_EQ(set[k], sets[i]) << "member " << i << " word " << k;
    }
  };
  const int order[] = {1, 2, 0, 3, 2, 1, 3, 0, 0, 2, 3, 3, 1};
  for (int i : order) ASSERT_NO_FATAL_FAILURE(run(i));
  CGC_ASSERT_OK(cgc_graph_destroy(g[0]));
  EXPECT_EQ(Info(g[1]).family_size, 3u);
  const int after[] = {2, 1, 3, 1, 2, 2, 3};
  for (int i : after) ASSERT_NO_FATAL_FAILURE(run(i));
  CGC_ASSERT_OK(cgc_graph_destroy(g[2]));
  for (int i : {1, 3, 1}) ASSERT_NO_FATAL_FAILURE(run(i));
  CGC_ASSERT_OK(cgc_graph_destroy(g[1]));
  ASSERT_NO_FATAL_FAILURE(run(3));
  CGC_ASSERT_OK(cgc_graph_destroy(g[3]));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
}

TEST_F(FamilyTest, AGraphOfAnotherStructureKeepsItsOwnAndSaysWhy) {
  cgc_graph_t a = Capture(1024, 1.0f), other = Capture(1024, 3.0f, true);
  EXPECT_EQ(cgc_graph_share_executable(other, a), CGC_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(Contains(cgc_last_error(), "cuGraphExecUpdate")) << cgc_last_error();
  cgc_graph_info_t info = Info(other);
  EXPECT_NE(info.family_result, 0);
  EXPECT_EQ(info.family_size, 1u);
  EXPECT_NE(cgc_graph_native_exec(a), cgc_graph_native_exec(other));
  // Both still run their own nodes (the leader's executable is updated back at its launch).
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(other, 1, 1024, 5.0f));
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(a, 0, 1024, 2.0f));
  // Refusals: itself, per-node updates and updates by capture of a member.
  EXPECT_EQ(cgc_graph_share_executable(a, a), CGC_ERROR_INVALID_ARGUMENT);
  cgc_graph_t b = Capture(2048, 4.0f);
  CGC_ASSERT_OK(cgc_graph_share_executable(b, a));
  EXPECT_EQ(cgc_graph_kernel_node_set_enabled(b, 0, 0), CGC_ERROR_INVALID_STATE);
  EXPECT_TRUE(Contains(cgc_last_error(), "family")) << cgc_last_error();
  cgc_capture_options_t update{};
  update.struct_size = sizeof update;
  update.update = b;
  EXPECT_EQ(cgc_capture_begin(stream, &update), CGC_ERROR_INVALID_STATE);
  EXPECT_TRUE(Contains(cgc_last_error(), "family")) << cgc_last_error();
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(b, 2, 2048, 5.0f));
  CGC_ASSERT_OK(cgc_graph_destroy(b));
  CGC_ASSERT_OK(cgc_graph_destroy(other));
  CGC_ASSERT_OK(cgc_graph_destroy(a));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
}

TEST_F(FamilyTest, MembersLaunchedFromTwoThreadsRunOneAtATimeOrAreRefused) {
  cgc_graph_t a = Capture(1024, 1.0f), b = Capture(1024, 7.0f);
  CGC_ASSERT_OK(cgc_graph_share_executable(b, a));
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  std::atomic<int> launched{0}, refused{0}, unexpected{0};
  auto run = [&](cgc_graph_t g, cgc_stream_t s) {
    CUcontext c = primary;
    cgc__drv.cuCtxPushCurrent(c);
    for (int i = 0; i < 2000; i++) {
      cgc_status_t st = cgc_graph_launch(g, s);
      if (st == CGC_SUCCESS) {
        launched++;
      } else if (st == CGC_ERROR_INVALID_STATE) {
        refused++;
      } else {
        unexpected++;
      }
    }
    cgc__drv.cuCtxPopCurrent(&c);
  };
  std::thread t1(run, a, stream), t2(run, b, other);
  t1.join();
  t2.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(launched + refused, 4000);
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(a, 0, 1024, 2.0f));
  ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(b, 1, 1024, 8.0f));
  std::printf("launches from two threads: %d run, %d refused\n", launched.load(), refused.load());
  CGC_ASSERT_OK(cgc_graph_destroy(a));
  CGC_ASSERT_OK(cgc_graph_destroy(b));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_stream_destroy(other));
}

TEST_F(FamilyTest, ARestoreMakesOneExecutableForEachStructure) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(FixedPool(&pool));
  const unsigned sizes[] = {1024, 2048, 512, 4096};
  std::vector<cgc_graph_t> graphs;
  for (int i = 0; i < 4; i++) graphs.push_back(Capture(sizes[i], float(i), i % 2 == 1, pool));
  std::vector<uint8_t> bytes;
  std::vector<void*> kept = outputs;
  cgc_graph_t restored[4] = {};
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(SaveAndRestoreAsFamilies(graphs, pool, restored, &restored_pool, &bytes));
  EXPECT_EQ(cgc_graph_native_exec(restored[0]), cgc_graph_native_exec(restored[2]));
  EXPECT_EQ(cgc_graph_native_exec(restored[1]), cgc_graph_native_exec(restored[3]));
  EXPECT_NE(cgc_graph_native_exec(restored[0]), cgc_graph_native_exec(restored[1]));
  for (int i = 0; i < 4; i++) EXPECT_EQ(Info(restored[i]).family_size, 2u) << i;
  for (int round = 0; round < 2; round++)
    for (int i = 3; i >= 0; i--)
      ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(restored[i], size_t(i), sizes[i], float(i) + (i % 2 == 1 ? 2.0f : 1.0f)));
  for (cgc_graph_t g : restored) CGC_ASSERT_OK(cgc_graph_destroy(g));
  for (void* p : kept) CGC_ASSERT_OK(cgc_free(p));
  outputs.clear();
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_pool_release(restored_pool));
}

TEST_F(FamilyTest, MembersRestoredUnbuiltAreBuiltAtTheirFirstUseWhateverItIs) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(FixedPool(&pool));
  constexpr int kGraphs = 8;
  const unsigned sizes[kGraphs] = {1024, 2048, 512, 4096, 768, 1536, 256, 3072};
  std::vector<cgc_graph_t> graphs;
  for (int i = 0; i < kGraphs; i++) graphs.push_back(Capture(sizes[i], float(i), i % 2 == 1, pool));
  const size_t kernels_of[2] = {Info(graphs[0]).kernel_nodes, Info(graphs[1]).kernel_nodes};
  std::vector<uint8_t> bytes;
  std::vector<void*> kept = outputs;
  cgc_graph_t r[kGraphs] = {};
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(SaveAndRestoreAsFamilies(graphs, pool, r, &restored_pool, &bytes));
  // The restore's bytes are the caller's again at once: the unbuilt members keep a copy.
  std::fill(bytes.begin(), bytes.end(), uint8_t{0xab});
  auto want = [&](int i) { return float(i) + (i % 2 == 1 ? 2.0f : 1.0f); };

  // Each first use builds: info (counts), a DOT dump, the native graph, a save, a launch.
  cgc_graph_info_t info = Info(r[2]);
  EXPECT_EQ(info.kernel_nodes, kernels_of[0]);
  EXPECT_EQ(info.family_size, 4u);
  EXPECT_EQ(info.family_result, 0);
  const std::string dot = ::testing::TempDir() + "/cgc_family_unbuilt.dot";
  CGC_ASSERT_OK(cgc_graph_debug_dump(r[3], dot.c_str()));
  EXPECT_EQ(std::remove(dot.c_str()), 0);
  EXPECT_NE(cgc_graph_native(r[4]), nullptr);
  EXPECT_EQ(cgc_graph_native_exec(r[4]), cgc_graph_native_exec(r[0]));
  size_t again = 0;
  CGC_ASSERT_OK(cgc_graphs_save(&r[5], 1, nullptr, nullptr, 0, &again));
  std::vector<uint8_t> one(again);
  CGC_ASSERT_OK(cgc_graphs_save(&r[5], 1, nullptr, one.data(), again, &again));
  cgc_saved_info_t saved{};
  saved.struct_size = sizeof saved;
  CGC_ASSERT_OK(cgc_saved_info(one.data(), one.size(), &saved));
  EXPECT_EQ(saved.n_graphs, 1u);
  EXPECT_EQ(saved.n_nodes, kernels_of[1]);
  // Members launched in an order unlike the file's, one never used, the leaders gone early.
  for (int i : {7, 2, 5, 0}) ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(r[i], size_t(i), sizes[i], want(i)));
  CGC_ASSERT_OK(cgc_graph_destroy(r[1]));  // a leader, never launched
  CGC_ASSERT_OK(cgc_graph_destroy(r[0]));  // a leader, launched
  CGC_ASSERT_OK(cgc_graph_destroy(r[6]));  // never used at all
  EXPECT_EQ(Info(r[4]).family_size, 2u);
  for (int i : {3, 4, 5, 7, 2, 3}) ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(r[i], size_t(i), sizes[i], want(i)));
  for (int i : {2, 3, 4, 5, 7}) CGC_ASSERT_OK(cgc_graph_destroy(r[i]));
  for (void* p : kept) CGC_ASSERT_OK(cgc_free(p));
  outputs.clear();
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_pool_release(restored_pool));
}

TEST_F(FamilyTest, UnbuiltMembersLaunchedAndInspectedFromThreadsAreBuiltOnce) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(FixedPool(&pool));
  constexpr int kGraphs = 6;
  std::vector<cgc_graph_t> graphs;
  for (int i = 0; i < kGraphs; i++) graphs.push_back(Capture(1024 * (i + 1), float(i), false, pool));
  std::vector<uint8_t> bytes;
  std::vector<void*> kept = outputs;
  cgc_graph_t r[kGraphs] = {};
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(SaveAndRestoreAsFamilies(graphs, pool, r, &restored_pool, &bytes));
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  std::atomic<int> launched{0}, refused{0}, unexpected{0};
  auto launcher = [&](int first, cgc_stream_t s) {
    CUcontext c = primary;
    cgc__drv.cuCtxPushCurrent(c);
    for (int k = 0; k < 300; k++) {
      cgc_status_t st = cgc_graph_launch(r[(first + k) % kGraphs], s);
      if (st == CGC_SUCCESS) launched++;
      else if (st == CGC_ERROR_INVALID_STATE) refused++;
      else unexpected++;
    }
    cgc__drv.cuCtxPopCurrent(&c);
  };
  auto inspector = [&]() {
    for (int k = 0; k < 300; k++) {
      cgc_graph_info_t info{};
      info.struct_size = sizeof info;
      if (cgc_graph_info(r[(5 * k) % kGraphs], &info) != CGC_SUCCESS || info.kernel_nodes != 2) unexpected++;
    }
  };
  std::thread t1(launcher, 0, stream), t2(launcher, 3, other), t3(inspector);
  t1.join();
  t2.join();
  t3.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(launched + refused, 600);
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  for (int i = kGraphs - 1; i >= 0; i--)
    ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(r[i], size_t(i), 1024 * (i + 1), float(i) + 1.0f));
  std::printf("launches from two threads, info from a third: %d run, %d refused\n", launched.load(), refused.load());
  for (cgc_graph_t g : r) CGC_ASSERT_OK(cgc_graph_destroy(g));
  for (void* p : kept) CGC_ASSERT_OK(cgc_free(p));
  outputs.clear();
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_stream_destroy(other));
  CGC_ASSERT_OK(cgc_pool_release(restored_pool));
}

// A 2D memset of another width (cuMemsetD2D32Async on the capturing stream: cgc's own sets are
// 1D, which the driver updates whatever their size): the driver refuses to update a 2D set's
// shape, so such members share a structure but not an executable. Null when the driver lacks it.
using MemsetD2D32 = CUresult (*)(CUdeviceptr, size_t, unsigned, size_t, size_t, CUstream);
MemsetD2D32 DriverMemsetD2D32() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto get_proc = lib != nullptr ? reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"))
                                 : nullptr;
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found;
  if (get_proc == nullptr ||
      get_proc("cuMemsetD2D32Async", &fn, 3020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) != CUDA_SUCCESS)
    fn = nullptr;
  return reinterpret_cast<MemsetD2D32>(fn);
}

TEST_F(FamilyTest, AnUnbuiltMemberTheDriverWillNotSwitchToGetsItsOwnExecutableAndSaysWhy) {
  MemsetD2D32 memset_2d = DriverMemsetD2D32();
  if (memset_2d == nullptr) GTEST_SKIP() << "libcuda.so.1's cuMemsetD2D32Async is not reachable (another driver path?)";
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(FixedPool(&pool));
  constexpr unsigned kN = 1024, kRows = 4, kPitch = 4096;
  // Graph i: fill + add over kN floats, and a set of widths[i] words in each of kRows rows.
  const unsigned widths[3] = {256, 128, 256};
  const uint32_t words[3] = {0x11111111u, 0x22222222u, 0x33333333u};
  std::vector<void*> grids;
  std::vector<cgc_graph_t> graphs;
  for (int i = 0; i < 3; i++) {
    cgc_capture_options_t options{};
    options.struct_size = sizeof options;
    options.pool = pool;
    CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
    void* out = Malloc(kN * 4, stream);
    void* grid = Malloc(kRows * kPitch, stream);
    outputs.push_back(out);
    grids.push_back(grid);
    float v = float(10 * i);
    unsigned n = kN;
    void* fill_args[] = {&out, &v, &n};
    EXPECT_EQ(cgc_launch_kernel(fill, kN / 256, 1, 1, 256, 1, 1, 0, stream, fill_args), CGC_SUCCESS);
    EXPECT_EQ(memset_2d(Dev(grid), kPitch, words[i], widths[i], kRows, static_cast<CUstream>(cgc_stream_native(stream))),
              CUDA_SUCCESS);
    float one = 1.0f;
    void* add_args[] = {&out, &out, &one, &n};
    EXPECT_EQ(cgc_launch_kernel(add, kN / 256, 1, 1, 256, 1, 1, 0, stream, add_args), CGC_SUCCESS);
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    graphs.push_back(g);
  }
  std::vector<void*> kept = outputs;
  for (void* p : grids) outputs.push_back(p);  // given back with the pool, allocated again by the restore
  std::vector<uint8_t> bytes;
  cgc_graph_t r[3] = {};
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(SaveAndRestoreAsFamilies(graphs, pool, r, &restored_pool, &bytes));
  EXPECT_EQ(Info(r[0]).family_size, 3u);
  // Zeroes graph i's grid, launches it, and checks its floats and each row's words.
  auto run = [&](int i) {
    CGC_ASSERT_OK(cgc_memset_d32_async(grids[i], 0, kRows * kPitch / 4, stream));
    ASSERT_NO_FATAL_FAILURE(LaunchAndCheck(r[i], size_t(i), kN, float(10 * i) + 1.0f));
    std::vector<uint32_t> got = DownloadWords(Dev(grids[i]), kRows * kPitch / 4);
    for (unsigned row = 0; row < kRows; row++)
      for (unsigned w = 0; w < kPitch / 4; w += 31)
        ASSERT_EQ(got[row * kPitch / 4 + w], w < widths[i] ? words[i] : 0u) << "graph " << i << " row " << row;
  };
  // Graph 1's first use is its trial: built, the family's executable refuses its set's width, and
  // it is instantiated alone, saying why; it stays a member (it leaves when it goes) but shares no
  // executable (family_size 1), and the others' family counts 2.
  ASSERT_NO_FATAL_FAILURE(run(1));
  cgc_graph_info_t info = Info(r[1]);
  EXPECT_EQ(info.family_result, int(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED));
  EXPECT_EQ(info.family_size, 1u);
  EXPECT_NE(cgc_graph_native_exec(r[1]), cgc_graph_native_exec(r[0]));
  EXPECT_EQ(Info(r[0]).family_size, 2u);
  // Graph 2 (a set of the leader's width) shares; all three run their own nodes in any order.
  for (int i : {2, 0, 1, 2, 1, 0}) ASSERT_NO_FATAL_FAILURE(run(i));
  EXPECT_EQ(cgc_graph_native_exec(r[2]), cgc_graph_native_exec(r[0]));
  EXPECT_EQ(Info(r[2]).family_result, 0);
  // The leader goes first; the one alone still runs, then goes.
  CGC_ASSERT_OK(cgc_graph_destroy(r[0]));
  for (int i : {1, 2}) ASSERT_NO_FATAL_FAILURE(run(i));
  CGC_ASSERT_OK(cgc_graph_destroy(r[1]));
  ASSERT_NO_FATAL_FAILURE(run(2));
  CGC_ASSERT_OK(cgc_graph_destroy(r[2]));
  for (void* p : kept) CGC_ASSERT_OK(cgc_free(p));
  for (void* p : grids) CGC_ASSERT_OK(cgc_free(p));
  outputs.clear();
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_pool_release(restored_pool));
}

}  // namespace
