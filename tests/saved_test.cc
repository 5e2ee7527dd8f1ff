// Graphs saved and restored (1.6, SEMANTICS 38): a graph captured into a pool at fixed
// addresses, saved, its pool released, rebuilt from the bytes and replayed to the same result;
// kernels of cgc's modules and of images added by key; what is refused and how it is named;
// damaged bytes. The restore in another process is bench/saved_graphs's (cgc_bench saved).
#include <gtest/gtest.h>

#include <algorithm>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr size_t kMiB = size_t{1} << 20;
constexpr unsigned kN = 4096;
// A saved file's header as src/saved_file.h lays it out: the magic, 2 x 32-bit (format, byte
// order), 2 x 64-bit (size, checksum at byte 24), 4 x 32-bit, 10 x 64-bit; the checksum covers
// what follows it.
constexpr size_t kHeaderBytes = 8 + 2 * 4 + 2 * 8 + 4 * 4 + 10 * 8, kChecksumAt = 24;

// Bases far from other tests' pools (pool_test's 0x6000-0x6300, the bindings' 0x6400-0x6a00).
constexpr uintptr_t kBase = 0x6b0000000000ull;

// The file's checksum as src/saved_file.c describes it (format 5), written here again: the body
// in 4 MiB chunks, each hashed alone (four lanes of 8-byte words starting from the FNV basis xor
// the lane's and the chunk's numbers, each (lane ^ word) * the FNV prime then folded by lane >> 29,
// the lanes and the bytes after the last whole 32 then folded in as FNV-1a), then the chunks'
// hashes and the body's length folded in as FNV-1a.
uint64_t Checksum(const uint8_t* p, size_t n) {
  const uint64_t basis = 0xcbf29ce484222325ull, prime = 0x100000001b3ull;
  const size_t chunk = size_t{4} << 20;
  uint64_t h = basis;
  for (size_t c = 0; c * chunk < n; c++) {
    const uint8_t* q = p + c * chunk;
    size_t m = std::min(chunk, n - c * chunk);
    uint64_t lane[4];
    for (uint64_t l = 0; l < 4; l++) lane[l] = basis ^ (uint64_t(c) << 2 | l);
    size_t i = 0;
    for (; m - i >= 32; i += 32)
      for (int l = 0; l < 4; l++) {
        uint64_t word;
        std::memcpy(&word, q + i + 8 * l, sizeof word);
        lane[l] = (lane[l] ^ word) * prime;
        lane[l] ^= lane[l] >> 29;
      }
    uint64_t ch = basis;
    for (uint64_t l : lane) ch = (ch ^ l) * prime;
    for (; i < m; i++) ch = (ch ^ q[i]) * prime;
    h = (h ^ ch) * prime;
  }
  return (h ^ uint64_t(n)) * prime;
}

// A kernel as PTX text that the driver loads itself: out[i] = value (as 32-bit words).
std::string RecordedPtx(const std::string& name) {
  return ".version 8.0\n.target sm_75\n.address_size 64\n"
         ".visible .entry " + name + "(.param .u64 p, .param .u32 v, .param .u32 n) {\n"
         "  .reg .pred %q;\n  .reg .b32 %r<6>;\n  .reg .b64 %rd<4>;\n"
         "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [v];\n  ld.param.u32 %r2, [n];\n"
         "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
         "  mad.lo.s32 %r3, %r3, %r4, %r5;\n  setp.ge.u32 %q, %r3, %r2;\n  @%q bra DONE;\n"
         "  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r3, 4;\n  add.s64 %rd2, %rd2, %rd3;\n"
         "  st.global.u32 [%rd2], %r1;\nDONE:\n  ret;\n}\n";
}

class SavedTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    CGC_ASSERT_OK(cgc_module_load(ctx, cgc_test_kernels_fatbin, &module));
    CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_fill", &fill));
    CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_add", &add));
  }
  void TearDown() override {
    if (module != nullptr) {
      EXPECT_EQ(cgc_module_unload(module), CGC_SUCCESS) << cgc_last_error();
    }
    GpuTest::TearDown();
  }
  void CgcFill(void* p, float v) {
    unsigned n = kN;
    void* args[] = {&p, &v, &n};
    CGC_ASSERT_OK(cgc_launch_kernel(fill, kN / 256, 1, 1, 256, 1, 1, 0, stream, args));
  }
  void CgcAdd(void* out, void* in, float v) {
    unsigned n = kN;
    void* args[] = {&out, &in, &v, &n};
    CGC_ASSERT_OK(cgc_launch_kernel(add, kN / 256, 1, 1, 256, 1, 1, 0, stream, args));
  }
  // Captures into `pool`: a kernel fills a scratch block, a copy and a set work on more scratch,
  // a kernel writes `*out` (left allocated: the graph's output) from them.
  void CaptureWork(cgc_pool_t pool, cgc_graph_t* graph, void** out) {
    cgc_capture_options_t options = Into(pool);
    CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
    void *in = Malloc(kN * 4, stream), *copy = Malloc(kN * 4, stream), *zeros = Malloc(kN * 4, stream);
    *out = Malloc(kN * 4, stream);
    CgcFill(in, 2.0f);
    CGC_ASSERT_OK(cgc_memcpy_dtod_async(copy, in, kN * 4, stream));
    CGC_ASSERT_OK(cgc_memset_d32_async(zeros, 0, kN, stream));
    CgcAdd(copy, copy, 1.0f);
    CgcAdd(*out, copy, 0.5f);
    CGC_ASSERT_OK(cgc_free(in));
    CGC_ASSERT_OK(cgc_free(copy));
    CGC_ASSERT_OK(cgc_free(zeros));
    CGC_ASSERT_OK(cgc_capture_end(stream, graph));
  }
  std::vector<uint8_t> Save(std::vector<cgc_graph_t> graphs, const cgc_save_options_t* options = nullptr) {
    size_t size = 0;
    cgc_status_t st = cgc_graphs_save(graphs.data(), graphs.size(), options, nullptr, 0, &size);
    EXPECT_EQ(st, CGC_SUCCESS) << cgc_last_error();
    if (st != CGC_SUCCESS) return {};
    std::vector<uint8_t> bytes(size);
    size_t written = 0;
    EXPECT_EQ(cgc_graphs_save(graphs.data(), graphs.size(), options, bytes.data(), bytes.size(), &written),
              CGC_SUCCESS)
        << cgc_last_error();
    EXPECT_EQ(written, size);
    return bytes;
  }
  cgc_saved_info_t Info(const std::vector<uint8_t>& bytes) {
    cgc_saved_info_t info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(cgc_saved_info(bytes.data(), bytes.size(), &info), CGC_SUCCESS) << cgc_last_error();
    return info;
  }
  // A pool at the tests' fixed base, and the capture options that record into it.
  cgc_pool_t FixedPool() {
    cgc_pool_t pool = nullptr;
    EXPECT_EQ(cgc_pool_create_at(ctx, reinterpret_cast<void*>(kBase), 64 * kMiB, &pool), CGC_SUCCESS)
        << cgc_last_error();
    return pool;
  }
  static cgc_capture_options_t Into(cgc_pool_t pool) {
    cgc_capture_options_t options{};
    options.struct_size = sizeof options;
    options.pool = pool;
    return options;
  }
  // Everything of a graph goes: the graph, its output, its pool (whose range is given back).
  void GiveBack(cgc_graph_t graph, void* out, cgc_pool_t pool) {
    CGC_ASSERT_OK(cgc_graph_destroy(graph));
    CGC_ASSERT_OK(cgc_free(out));
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
    CGC_ASSERT_OK(cgc_pool_release(pool));
  }
  // The one graph and pool of `bytes`, rebuilt.
  void RestoreOne(const std::vector<uint8_t>& bytes, cgc_graph_t* graph, cgc_pool_t* pool) {
    CGC_ASSERT_OK(cgc_graphs_restore(ctx, bytes.data(), bytes.size(), nullptr, graph, 1, pool, 1));
  }
  cgc_module_t module = nullptr;
  cgc_function_t fill = nullptr, add = nullptr;
};

TEST_F(SavedTest, AGraphRestoredAfterItsPoolWasReleasedWritesTheSameBytesAtTheSameAddress) {
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_graph_t graph = nullptr;
  void* out = nullptr;
  ASSERT_NO_FATAL_FAILURE(CaptureWork(pool, &graph, &out));
  CGC_ASSERT_OK(cgc_graph_launch(graph, stream));
  std::vector<float> first = Download(Dev(out), kN);
  ASSERT_EQ(first[0], 3.5f);

  std::vector<uint8_t> bytes = Save({graph});
  ASSERT_FALSE(bytes.empty());
  cgc_saved_info_t info = Info(bytes);
  EXPECT_EQ(info.n_graphs, 1u);
  EXPECT_EQ(info.n_pools, 1u);
  EXPECT_EQ(info.n_modules, 1u);
  EXPECT_EQ(info.n_nodes, 5u) << "fill, copy, set and two adds";
  EXPECT_EQ(info.pool_bytes, 2 * kMiB);
  EXPECT_GT(info.image_bytes, 0u);
  EXPECT_EQ(info.compute_major >= 7, true);

  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));
  cgc_graph_t restored = nullptr;
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(RestoreOne(bytes, &restored, &restored_pool));
  // The output block is allocated again at its address: a claim of it is refused.
  EXPECT_EQ(cgc_pool_claim(restored_pool, out, kN * 4), CGC_ERROR_INVALID_STATE);
  CGC_ASSERT_OK(cgc_memset_d32_async(out, 0, kN, stream));
  CGC_ASSERT_OK(cgc_graph_launch(restored, stream));
  std::vector<float> again = Download(Dev(out), kN);
  EXPECT_EQ(std::memcmp(first.data(), again.data(), kN * 4), 0);
  cgc_graph_info_t gi{};
  gi.struct_size = sizeof gi;
  CGC_ASSERT_OK(cgc_graph_info(restored, &gi));
  EXPECT_EQ(gi.node_count, 5u);
  EXPECT_EQ(gi.kernel_nodes, 3u);
  EXPECT_EQ(gi.memcpy_nodes, 1u);
  EXPECT_EQ(gi.memset_nodes, 1u);
  // A new allocation from the restored pool never lands on the graph's scratch memory.
  void* later = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(restored_pool, kN * 4, stream, &later));
  EXPECT_GE(reinterpret_cast<uintptr_t>(later), kBase + 2 * kMiB);
  CGC_ASSERT_OK(cgc_free(later));
  // A restored graph can be saved again.
  EXPECT_FALSE(Save({restored}).empty());

  ASSERT_NO_FATAL_FAILURE(GiveBack(restored, out, restored_pool));
}

TEST_F(SavedTest, AKernelOfAModuleCgcDidNotLoadIsSavedByTheKeyOfAnAddedImage) {
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_capture_options_t options = Into(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
  void* out = Malloc(kN * 4, stream);
  Fill(stream, Dev(out), 7.0f, kN);  // the fixture's kernels: loaded through the driver, not cgc
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));

  size_t size = 0;
  EXPECT_EQ(cgc_graphs_save(&graph, 1, nullptr, nullptr, 0, &size), CGC_ERROR_NOT_SAVABLE);
  EXPECT_TRUE(Contains(cgc_last_error(), "cgc_test_fill")) << cgc_last_error();
  EXPECT_TRUE(Contains(cgc_last_error(), "cgc_module_add_image")) << cgc_last_error();
  EXPECT_EQ(cgc_last_status(), CGC_ERROR_NOT_SAVABLE);

  CGC_ASSERT_OK(cgc_module_add_image(ctx, "cgc tests", cgc_test_kernels_fatbin, cgc_test_kernels_fatbin_size));
  CGC_EXPECT_OK(cgc_module_add_image(ctx, "cgc tests", cgc_test_kernels_fatbin, cgc_test_kernels_fatbin_size));
  EXPECT_EQ(cgc_module_add_image(ctx, "cgc tests", "other bytes", 11), CGC_ERROR_INVALID_STATE);
  std::vector<uint8_t> bytes = Save({graph});
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(Info(bytes).image_bytes, 0u) << "an image added by key is named, not written";

  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));
  cgc_graph_t restored = nullptr;
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(RestoreOne(bytes, &restored, &restored_pool));
  CGC_ASSERT_OK(cgc_graph_launch(restored, stream));
  EXPECT_EQ(Download(Dev(out), kN)[kN - 1], 7.0f);
  ASSERT_NO_FATAL_FAILURE(GiveBack(restored, out, restored_pool));
}

TEST_F(SavedTest, AKernelArgumentOutsideTheSavedPoolsIsRefusedNamingTheNodeAndArgument) {
  void* elsewhere = Malloc(kN * 4, stream);  // the device cache's: not at a fixed address
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_capture_options_t options = Into(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
  void* in = Malloc(kN * 4, stream);
  CgcFill(in, 1.0f);
  CgcAdd(elsewhere, in, 1.0f);
  CGC_ASSERT_OK(cgc_free(in));
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  size_t size = 0;
  EXPECT_EQ(cgc_graphs_save(&graph, 1, nullptr, nullptr, 0, &size), CGC_ERROR_NOT_SAVABLE);
  std::string error = cgc_last_error();
  EXPECT_TRUE(Contains(error, "graph 0, node 1 (kernel 'cgc_test_add'), argument 0")) << error;
  EXPECT_EQ(size, 0u);
  CGC_ASSERT_OK(cgc_graph_destroy(graph));
  CGC_ASSERT_OK(cgc_free(elsewhere));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(SavedTest, AGraphOfAnOrdinaryPoolOrHoldingAHostFunctionIsRefused) {
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* p = Malloc(kN * 4, stream);
  CgcFill(p, 1.0f);
  CGC_ASSERT_OK(cgc_free(p));
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  size_t size = 0;
  EXPECT_EQ(cgc_graphs_save(&graph, 1, nullptr, nullptr, 0, &size), CGC_ERROR_NOT_SAVABLE);
  EXPECT_TRUE(Contains(cgc_last_error(), "not at fixed addresses")) << cgc_last_error();
  CGC_ASSERT_OK(cgc_graph_destroy(graph));

  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_capture_options_t options = Into(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
  CGC_ASSERT_OK(cgc_launch_host_func(stream, [](void*) {}, nullptr, nullptr));
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  EXPECT_EQ(cgc_graphs_save(&graph, 1, nullptr, nullptr, 0, &size), CGC_ERROR_NOT_SAVABLE);
  EXPECT_TRUE(Contains(cgc_last_error(), "graph 0")) << cgc_last_error();
  CGC_ASSERT_OK(cgc_graph_destroy(graph));
  // A pool that is not at fixed addresses is no saved pool either.
  cgc_pool_t ordinary = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &ordinary));
  CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
  void* kept = Malloc(kN * 4, stream);
  CgcFill(kept, 1.0f);
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  cgc_save_options_t save{};
  save.struct_size = sizeof save;
  save.pools = &ordinary;
  save.n_pools = 1;
  EXPECT_EQ(cgc_graphs_save(&graph, 1, &save, nullptr, 0, &size), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(cgc_last_error(), "options->pools[0]")) << cgc_last_error();
  CGC_ASSERT_OK(cgc_graph_destroy(graph));
  CGC_ASSERT_OK(cgc_pool_release(ordinary));
  CGC_ASSERT_OK(cgc_free(kept));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(SavedTest, DamagedForeignOrMismatchedBytesAreRefusedAndLeaveNothingBehind) {
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_graph_t graph = nullptr;
  void* out = nullptr;
  ASSERT_NO_FATAL_FAILURE(CaptureWork(pool, &graph, &out));
  std::vector<uint8_t> bytes = Save({graph});
  ASSERT_FALSE(bytes.empty());
  cgc_graph_t g = nullptr;
  cgc_pool_t p = nullptr;
  // The pool's range is still reserved here: the restore cannot have it, and leaves nothing.
  cgc_memory_stats_t before = Stats();
  EXPECT_EQ(cgc_graphs_restore(ctx, bytes.data(), bytes.size(), nullptr, &g, 1, &p, 1), CGC_ERROR_INVALID_STATE);
  EXPECT_TRUE(Contains(cgc_last_error(), "saved pool 0")) << cgc_last_error();
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(Stats().bytes_reserved, before.bytes_reserved);
  // Wrong counts, damaged and truncated bytes.
  EXPECT_EQ(cgc_graphs_restore(ctx, bytes.data(), bytes.size(), nullptr, &g, 1, nullptr, 0), CGC_ERROR_INVALID_ARGUMENT);
  std::vector<uint8_t> damaged = bytes;
  damaged[damaged.size() / 2] ^= 0x40;
  EXPECT_EQ(cgc_graphs_restore(ctx, damaged.data(), damaged.size(), nullptr, &g, 1, &p, 1), CGC_ERROR_SAVED_MISMATCH);
  EXPECT_TRUE(Contains(cgc_last_error(), "damaged")) << cgc_last_error();
  cgc_saved_info_t info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(cgc_saved_info(bytes.data(), bytes.size() - 8, &info), CGC_ERROR_SAVED_MISMATCH);
  EXPECT_EQ(cgc_saved_info("not a saved file at all", 24, &info), CGC_ERROR_SAVED_MISMATCH);
  // A buffer too small says how much is needed.
  size_t size = 0;
  std::vector<uint8_t> small(16);
  EXPECT_EQ(cgc_graphs_save(&graph, 1, nullptr, small.data(), small.size(), &size), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(size, bytes.size());
  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));
}

TEST_F(SavedTest, AKernelNodesPriorityIsKeptAndSetAgain) {
  int least = 0, greatest = 0;
  CGC_ASSERT_OK(cgc_stream_priority_range(ctx, &least, &greatest));
  if (least == greatest) GTEST_SKIP() << "the device has one stream priority";
  cgc_stream_t urgent = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, greatest, &urgent));
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_capture_options_t options = Into(pool);
  CGC_ASSERT_OK(cgc_capture_begin(urgent, &options));
  void* out = Malloc(kN * 4, urgent);
  float v = 5.0f;
  unsigned n = kN;
  void* args[] = {&out, &v, &n};
  CGC_ASSERT_OK(cgc_launch_kernel(fill, kN / 256, 1, 1, 256, 1, 1, 0, urgent, args));
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(urgent, &graph));
  auto priority_of_first_kernel = [](cgc_graph_t g) {
    CUgraph native = static_cast<CUgraph>(cgc_graph_native(g));
    size_t n_nodes = 16;
    CUgraphNode nodes[16];
    EXPECT_EQ(cgc__drv.cuGraphGetNodes(native, nodes, &n_nodes), CUDA_SUCCESS);
    for (size_t i = 0; i < n_nodes; i++) {
      CUgraphNodeType type;
      EXPECT_EQ(cgc__drv.cuGraphNodeGetType(nodes[i], &type), CUDA_SUCCESS);
      if (type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
      CUlaunchAttributeValue value{};
      EXPECT_EQ(cgc__drv.cuGraphKernelNodeGetAttribute(nodes[i], CU_LAUNCH_ATTRIBUTE_PRIORITY, &value), CUDA_SUCCESS);
      return value.priority;
    }
    return -1000;
  };
  int captured = priority_of_first_kernel(graph);
  ASSERT_EQ(captured, greatest) << "the premise: a captured kernel node keeps its stream's priority";
  std::vector<uint8_t> bytes = Save({graph});
  ASSERT_FALSE(bytes.empty());
  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));
  cgc_graph_t restored = nullptr;
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(RestoreOne(bytes, &restored, &restored_pool));
  EXPECT_EQ(priority_of_first_kernel(restored), greatest);
  CGC_ASSERT_OK(cgc_graph_launch(restored, stream));
  EXPECT_EQ(Download(Dev(out), kN)[0], 5.0f);
  ASSERT_NO_FATAL_FAILURE(GiveBack(restored, out, restored_pool));
  CGC_ASSERT_OK(cgc_stream_destroy(urgent));
}

// Saved bytes are input from outside the process: a file with bits flipped anywhere after its
// header, and its checksum made to match again (so every section's reads are exercised, not only
// the checksum), must be restored or refused, never crash, and a refusal must leave nothing (every
// other round as a family, whose second member is built at its first use or refused then). The
// kernels are of an added image, so that no flip lands in an image the driver would parse.
TEST_F(SavedTest, RestoringFlippedBitsEitherWorksOrLeavesNothingAndNeverCrashes) {
  CGC_ASSERT_OK(cgc_module_add_image(ctx, "cgc tests", cgc_test_kernels_fatbin, cgc_test_kernels_fatbin_size));
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_capture_options_t options = Into(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
  void *in = Malloc(kN * 4, stream), *out = Malloc(kN * 4, stream);
  Fill(stream, Dev(in), 2.0f, kN);
  CGC_ASSERT_OK(cgc_memset_d32_async(out, 0, kN, stream));
  CGC_ASSERT_OK(cgc_memcpy_dtod_async(out, in, kN * 4, stream));
  Add(stream, Dev(out), Dev(in), 1.0f, kN);
  CGC_ASSERT_OK(cgc_free(in));
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  // The graph twice: restored as a family every other round, the second built at its first use.
  std::vector<uint8_t> bytes = Save({graph, graph});
  ASSERT_FALSE(bytes.empty());
  ASSERT_EQ(Info(bytes).image_bytes, 0u);
  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));

  const size_t header = kHeaderBytes, checksum_at = kChecksumAt;
  ASSERT_GT(bytes.size(), header);
  const size_t reserved_before = Stats().bytes_reserved;
  std::mt19937 rng(7);
  int restored = 0, refused = 0, built_later = 0, refused_later = 0;
  for (int round = 0; round < 400; round++) {
    std::vector<uint8_t> b = bytes;
    for (int flips = 1 + int(rng() % 3); flips > 0; flips--) b[header + rng() % (b.size() - header)] ^= uint8_t(1u << (rng() % 8));
    uint64_t h = Checksum(&b[header], b.size() - header);
    std::memcpy(&b[checksum_at], &h, sizeof h);
    cgc_graph_t g[2] = {};
    cgc_pool_t p = nullptr;
    cgc_restore_options_t families{};
    families.struct_size = sizeof families;
    families.flags = CGC_RESTORE_FAMILIES;
    cgc_status_t st = cgc_graphs_restore(ctx, b.data(), b.size(), round % 2 == 1 ? &families : nullptr, g, 2, &p, 1);
    if (st != CGC_SUCCESS) {
      refused++;
      ASSERT_EQ(g[0], nullptr) << "round " << round;
      ASSERT_EQ(g[1], nullptr) << "round " << round;
      ASSERT_EQ(p, nullptr) << "round " << round;
      ASSERT_EQ(Stats().bytes_reserved, reserved_before) << "round " << round << ": " << cgc_last_error();
      continue;
    }
    restored++;  // not launched: flipped arguments may point anywhere
    if (round % 2 == 1) {  // the family's second member is built now, or says why it cannot be
      cgc_graph_info_t info{};
      info.struct_size = sizeof info;
      if (cgc_graph_info(g[1], &info) == CGC_SUCCESS) {
        built_later++;
      } else {
        refused_later++;
        EXPECT_TRUE(Contains(cgc_last_error(), "at its first use")) << cgc_last_error();
      }
    }
    CGC_ASSERT_OK(cgc_graph_destroy(g[0]));
    CGC_ASSERT_OK(cgc_graph_destroy(g[1]));
    cgc_segment_info_t segments[64];
    cgc_block_info_t blocks[256];
    size_t n_segments = 0, n_blocks = 0;
    CGC_ASSERT_OK(cgc_memory_snapshot(ctx, segments, 64, blocks, 256, &n_segments, &n_blocks));
    for (size_t si = 0; si < n_segments; si++) {
      if (segments[si].pool != p) continue;
      for (size_t bi = segments[si].first_block; bi < segments[si].first_block + segments[si].n_blocks; bi++)
        if (blocks[bi].state == CGC_BLOCK_STATE_ALLOCATED) CGC_ASSERT_OK(cgc_free(blocks[bi].address));
    }
    CGC_ASSERT_OK(cgc_pool_release(p));
    ASSERT_EQ(Stats().bytes_reserved, reserved_before) << "round " << round;
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(restored, 0) << "every flipped file refused: is kHeaderBytes the header's size?";
  std::printf("flipped files: %d restored, %d refused; as families, the second member built at its first use: %d, "
              "refused then: %d\n", restored, refused, built_later, refused_later);
}

// Twelve graphs of two structures, restored on one thread and on several, with and without
// families, each replay writing what its original wrote; and damage found while the records are
// indexed (the last graph's edge made to point backwards, found by the threads that walk the
// records; a record's length made wrong, found by them or by the hop over the lengths before) is
// the call's failure, with its message, and leaves nothing.
TEST_F(SavedTest, GraphsRestoredOnSeveralThreadsRunAsOnOneAndAFailureInAPassLeavesNothing) {
  constexpr int kGraphs = 12;
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  std::vector<cgc_graph_t> graphs(kGraphs);
  std::vector<void*> outs(kGraphs);
  for (int i = 0; i < kGraphs; i++) {
    cgc_capture_options_t options = Into(pool);
    CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
    outs[i] = Malloc(kN * 4, stream);
    CgcFill(outs[i], float(i));
    CgcAdd(outs[i], outs[i], 1.0f);
    if (i % 2 == 1) CgcAdd(outs[i], outs[i], 1.0f);  // the second structure
    CGC_ASSERT_OK(cgc_capture_end(stream, &graphs[i]));
  }
  std::vector<uint8_t> bytes = Save(graphs);
  ASSERT_FALSE(bytes.empty());
  for (int i = 0; i < kGraphs; i++) CGC_ASSERT_OK(cgc_graph_destroy(graphs[i]));
  for (int i = 0; i < kGraphs; i++) CGC_ASSERT_OK(cgc_free(outs[i]));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_pool_release(pool));
  const size_t reserved_before = Stats().bytes_reserved;

  for (unsigned threads : {1u, 3u, 16u}) {
    for (bool families : {false, true}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + (families ? ", families" : ""));
      cgc_restore_options_t options{};
      options.struct_size = sizeof options;
      options.flags = families ? CGC_RESTORE_FAMILIES : 0;
      options.threads = threads;
      std::vector<cgc_graph_t> restored(kGraphs);
      cgc_pool_t p = nullptr;
      CGC_ASSERT_OK(cgc_graphs_restore(ctx, bytes.data(), bytes.size(), &options, restored.data(), kGraphs, &p, 1));
      std::vector<CUgraphExec> executables;
      for (int i = kGraphs - 1; i >= 0; i--) {
        CGC_ASSERT_OK(cgc_memset_d32_async(outs[i], 0, kN, stream));
        CGC_ASSERT_OK(cgc_graph_launch(restored[i], stream));
        std::vector<float> got = Download(Dev(outs[i]), kN);
        float want = float(i) + (i % 2 == 1 ? 2.0f : 1.0f);
        for (unsigned k = 0; k < kN; k += 97) ASSERT_EQ(got[k], want) << "graph " << i << " float " << k;
        CUgraphExec e = static_cast<CUgraphExec>(cgc_graph_native_exec(restored[i]));
        if (std::find(executables.begin(), executables.end(), e) == executables.end()) executables.push_back(e);
      }
      EXPECT_EQ(executables.size(), families ? 2u : size_t{kGraphs});
      for (cgc_graph_t g : restored) CGC_ASSERT_OK(cgc_graph_destroy(g));
      for (void* out : outs) CGC_ASSERT_OK(cgc_free(out));
      CGC_ASSERT_OK(cgc_stream_synchronize(stream));
      CGC_ASSERT_OK(cgc_pool_release(p));
      ASSERT_EQ(Stats().bytes_reserved, reserved_before);
    }
  }

  // The graphs' section is the file's last: its last 8 bytes are the last graph's last edge. And
  // each graph's record says its length, after 24 bytes of counts: the last graph's is the one
  // 64-bit field, 4-aligned, that counts the bytes from its end to the file's end, and the one
  // before it counts those up to the last graph's counts. A length too short, reaching into the
  // next record, or past the file's end, is damage.
  std::vector<std::vector<uint8_t>> damaged;
  damaged.push_back(bytes);
  uint32_t backwards[2] = {1, 0};
  std::memcpy(&damaged.back()[bytes.size() - 8], backwards, 8);
  auto length_field_ending_at = [&bytes](size_t end) {
    std::vector<size_t> found;
    for (size_t at = kHeaderBytes; at + 8 <= end; at += 4) {
      uint64_t v;
      std::memcpy(&v, &bytes[at], sizeof v);
      if (v == end - at - 8) found.push_back(at);
    }
    return found;
  };
  std::vector<size_t> last = length_field_ending_at(bytes.size());
  ASSERT_EQ(last.size(), 1u) << "the last graph's record length is not one field";
  std::vector<size_t> before_last = length_field_ending_at(last[0] - 24);
  ASSERT_EQ(before_last.size(), 1u) << "the next-to-last graph's record length is not one field";
  const uint64_t kPastAnyEnd = uint64_t{1} << 60;
  for (size_t at : {last[0], before_last[0]})
    for (uint64_t delta : {uint64_t(-8), uint64_t{8}, kPastAnyEnd}) {
      damaged.push_back(bytes);
      uint64_t v;
      std::memcpy(&v, &bytes[at], sizeof v);
      v += delta;
      std::memcpy(&damaged.back()[at], &v, sizeof v);
    }
  for (std::vector<uint8_t>& b : damaged) {
    uint64_t h = Checksum(&b[kHeaderBytes], b.size() - kHeaderBytes);
    std::memcpy(&b[kChecksumAt], &h, sizeof h);
  }
  for (const std::vector<uint8_t>& b : damaged) {
    for (bool families : {false, true}) {
      cgc_restore_options_t options{};
      options.struct_size = sizeof options;
      options.flags = families ? CGC_RESTORE_FAMILIES : 0;
      options.threads = 4;
      std::vector<cgc_graph_t> restored(kGraphs);
      cgc_pool_t p = nullptr;
      EXPECT_EQ(cgc_graphs_restore(ctx, b.data(), b.size(), &options, restored.data(), kGraphs, &p, 1),
                CGC_ERROR_SAVED_MISMATCH);
      EXPECT_TRUE(Contains(cgc_last_error(), "cgc_graphs_restore: the file is damaged")) << cgc_last_error();
      EXPECT_FALSE(Contains(cgc_last_error(), "checksum")) << "the record, not the checksum: " << cgc_last_error();
      EXPECT_EQ(cgc_last_status(), CGC_ERROR_SAVED_MISMATCH);
      for (cgc_graph_t g : restored) EXPECT_EQ(g, nullptr);
      EXPECT_EQ(p, nullptr);
      EXPECT_EQ(Stats().bytes_reserved, reserved_before);
    }
  }
  cgc_restore_options_t too_many{};
  too_many.struct_size = sizeof too_many;
  too_many.threads = 65;
  std::vector<cgc_graph_t> restored(kGraphs);
  cgc_pool_t p = nullptr;
  EXPECT_EQ(cgc_graphs_restore(ctx, bytes.data(), bytes.size(), &too_many, restored.data(), kGraphs, &p, 1),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(cgc_last_error(), "options->threads is 65")) << cgc_last_error();
}

// A verifying save (CGC_SAVE_VERIFY) replays each graph beside its rebuild from the saved bytes:
// a graph whose replays write the same bytes passes, and the pools end as its own replay left
// them; one whose every replay writes something else (the device's timer) is refused, naming the
// graph, the pool and the offset, and the pools still end as its own replay left them.
TEST_F(SavedTest, AVerifyingSaveReplaysEachGraphBesideItsRebuildAndRefusesWhatDiffers) {
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_graph_t graph = nullptr;
  void* out = nullptr;
  ASSERT_NO_FATAL_FAILURE(CaptureWork(pool, &graph, &out));
  CGC_ASSERT_OK(cgc_memset_d32_async(out, 0, kN, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  cgc_save_options_t verify{};
  verify.struct_size = sizeof verify;
  verify.flags = CGC_SAVE_VERIFY;
  std::vector<uint8_t> bytes = Save({graph}, &verify);
  ASSERT_FALSE(bytes.empty());
  std::vector<float> got = Download(Dev(out), kN);
  for (unsigned k = 0; k < kN; k += 61) ASSERT_EQ(got[k], 3.5f) << "float " << k;  // the graph's replay: 2 + 1 + 0.5
  // The same bytes as a save without verifying, but for the header's measures of what a restore
  // takes on the device besides the pools (its modules and executables), which only a verifying
  // save makes: the families' (one executable for each structure) at most the whole's.
  std::vector<uint8_t> plain = Save({graph});
  cgc_saved_info_t measured = Info(bytes), unmeasured = Info(plain);
  EXPECT_LE(measured.family_restore_bytes, measured.restore_bytes);
  EXPECT_EQ(unmeasured.restore_bytes, 0u);
  EXPECT_EQ(unmeasured.family_restore_bytes, 0u);
  std::printf("a verifying save measured %zu bytes a restore takes besides the pools (%zu as families)\n",
              measured.restore_bytes, measured.family_restore_bytes);
  ASSERT_EQ(plain.size(), bytes.size());
  EXPECT_TRUE(std::equal(plain.begin() + kHeaderBytes, plain.end(), bytes.begin() + kHeaderBytes));
  EXPECT_TRUE(std::equal(plain.begin(), plain.begin() + kHeaderBytes - 16, bytes.begin()));
  cgc_save_options_t unknown = verify;
  unknown.flags = 2;
  size_t size = 0;
  EXPECT_EQ(cgc_graphs_save(&graph, 1, &unknown, nullptr, 0, &size), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(cgc_last_error(), "options->flags has unknown bits 0x2")) << cgc_last_error();

  cgc_function_t clock = nullptr;
  CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_clock", &clock));
  cgc_capture_options_t options = Into(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
  void* stamp = Malloc(64, stream);
  void* args[] = {&stamp};
  CGC_ASSERT_OK(cgc_launch_kernel(clock, 1, 1, 1, 1, 1, 1, 0, stream, args));
  cgc_graph_t timed = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &timed));
  CGC_ASSERT_OK(cgc_memset_d32_async(stamp, 0, 2, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_graphs_save(&timed, 1, &verify, nullptr, 0, &size));  // no bytes, nothing replayed
  std::vector<uint8_t> timed_bytes(size);
  EXPECT_EQ(cgc_graphs_save(&timed, 1, &verify, timed_bytes.data(), size, &size), CGC_ERROR_NOT_SAVABLE);
  const std::string why = cgc_last_error();
  EXPECT_TRUE(Contains(why, "graph 0, rebuilt from the saved bytes, wrote other bytes")) << why;
  EXPECT_TRUE(Contains(why, "saved pool 0")) << why;
  EXPECT_TRUE(Contains(why, "differs first at offset")) << why;
  std::vector<float> words = Download(Dev(stamp), 2);
  uint64_t stamped = 0;
  std::memcpy(&stamped, words.data(), sizeof stamped);
  EXPECT_NE(stamped, 0u);  // what the graph's own replay wrote
  CGC_ASSERT_OK(cgc_graph_destroy(timed));
  CGC_ASSERT_OK(cgc_free(stamp));
  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));
}

// A graph that draws from a generator (cgc_rng_uniform in the capture) is saved with it: its seed
// and offset at the save, and where the draw reads the generator's state. The restore creates the
// generator again with that state, so the restored graph's first replay draws what the saving
// process's next replay drew, and each replay moves the generator on as the saved graph's did.
TEST_F(SavedTest, AGraphThatDrawsIsSavedWithItsGeneratorAndDrawsOnWhereTheSavedOneWould) {
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  cgc_rng_t rng = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 1234, &rng));
  cgc_capture_options_t options = Into(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
  void* out = Malloc(kN * 4, stream);
  CGC_ASSERT_OK(cgc_rng_uniform(rng, static_cast<float*>(out), kN, stream));
  CgcAdd(out, out, 1.0f);
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  CGC_ASSERT_OK(cgc_graph_launch(graph, stream));
  uint64_t seed = 0, offset = 0;
  CGC_ASSERT_OK(cgc_rng_get_state(rng, &seed, &offset));
  ASSERT_EQ(offset, kN) << "one replay draws kN numbers";
  cgc_save_options_t verify{};
  verify.struct_size = sizeof verify;
  verify.flags = CGC_SAVE_VERIFY;
  std::vector<uint8_t> bytes = Save({graph}, &verify);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(Info(bytes).n_generators, 1u);
  // What the saving process's next two replays write.
  std::vector<std::vector<uint32_t>> want;
  for (int i = 0; i < 2; i++) {
    CGC_ASSERT_OK(cgc_graph_launch(graph, stream));
    want.push_back(DownloadWords(Dev(out), kN));
  }
  EXPECT_NE(want[0], want[1]);
  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));
  CGC_ASSERT_OK(cgc_rng_destroy(rng));

  cgc_graph_t restored = nullptr;
  cgc_pool_t restored_pool = nullptr;
  cgc_rng_t restored_rng[2] = {nullptr, nullptr};
  cgc_restore_options_t room{};
  room.struct_size = sizeof room;
  room.generators = restored_rng;
  room.n_generators = 2;
  EXPECT_EQ(cgc_graphs_restore(ctx, bytes.data(), bytes.size(), &room, &restored, 1, &restored_pool, 1),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(cgc_last_error(), "the file holds 1 generators")) << cgc_last_error();
  room.n_generators = 1;
  CGC_ASSERT_OK(cgc_graphs_restore(ctx, bytes.data(), bytes.size(), &room, &restored, 1, &restored_pool, 1));
  ASSERT_NE(restored_rng[0], nullptr);
  CGC_ASSERT_OK(cgc_rng_get_state(restored_rng[0], &seed, &offset));
  EXPECT_EQ(seed, 1234u);
  EXPECT_EQ(offset, kN);
  for (int i = 0; i < 2; i++) {
    CGC_ASSERT_OK(cgc_graph_launch(restored, stream));
    EXPECT_EQ(DownloadWords(Dev(out), kN), want[i]) << "replay " << i;
  }
  CGC_ASSERT_OK(cgc_rng_get_state(restored_rng[0], &seed, &offset));
  EXPECT_EQ(offset, 3 * kN);
  // The caller's reference goes; the graph keeps drawing from the generator until it goes too.
  CGC_ASSERT_OK(cgc_rng_destroy(restored_rng[0]));
  CGC_ASSERT_OK(cgc_graph_launch(restored, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  ASSERT_NO_FATAL_FAILURE(GiveBack(restored, out, restored_pool));
}

// What a verifying save measures a restore takes besides the pools, for graphs large enough that
// their executables need new device memory (about 2.6 MiB for 1,000 kernel nodes on an H200;
// the driver hands out its own memory in 2 MiB steps, and a graph of a few nodes fits in what it
// holds already): the two structures' first graphs take at most what all four take.
TEST_F(SavedTest, AVerifyingSaveMeasuresTheDeviceMemoryARestoreTakesBesideThePools) {
  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  std::vector<cgc_graph_t> graphs;
  std::vector<void*> outs;
  for (int i = 0; i < 4; i++) {  // graphs 0 and 2 of one structure, 1 and 3 of another
    cgc_capture_options_t options = Into(pool);
    CGC_ASSERT_OK(cgc_capture_begin(stream, &options));
    void* out = Malloc(kN * 4, stream);
    outs.push_back(out);
    if (i % 2 == 1) CgcFill(out, float(i));
    for (int k = 0; k < 1000; k++) CgcAdd(out, out, 1.0f);
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    graphs.push_back(g);
  }
  cgc_save_options_t verify{};
  verify.struct_size = sizeof verify;
  verify.flags = CGC_SAVE_VERIFY;
  std::vector<uint8_t> bytes = Save(graphs, &verify);
  ASSERT_FALSE(bytes.empty());
  cgc_saved_info_t info = Info(bytes);
  std::printf("4 graphs of 1,000 kernel nodes in 2 structures: a restore takes %.1f MiB besides the pools' %.1f MiB "
              "(%.1f MiB as families)\n",
              double(info.restore_bytes) / kMiB, double(info.pool_bytes) / kMiB,
              double(info.family_restore_bytes) / kMiB);
  EXPECT_GT(info.restore_bytes, 0u);
  EXPECT_LE(info.family_restore_bytes, info.restore_bytes);
  for (cgc_graph_t g : graphs) CGC_ASSERT_OK(cgc_graph_destroy(g));
  for (void* p : outs) CGC_ASSERT_OK(cgc_free(p));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

// A kernel of a module neither cgc loaded nor any key names (PTX the driver loads itself) is saved
// with its image when the record was on as the module loaded (cgc_module_record), and restored
// from the bytes alone after the module is gone; loaded while the record is off, it is refused,
// the message naming the record. Skips where CUPTI is missing or another client holds it.
TEST_F(SavedTest, AKernelOfAModuleLoadedWhileRecordingIsSavedWithItsImage) {
  size_t images = 0, bytes_kept = 0;
  cgc_status_t st = cgc_module_record(1, &images, &bytes_kept);
  if (st == CGC_ERROR_NOT_SUPPORTED || st == CGC_ERROR_INVALID_STATE) GTEST_SKIP() << cgc_last_error();
  CGC_ASSERT_OK(st);
  const size_t images_before = images;
  // The record goes off however the test ends (it is the process's).
  struct RecordOff {
    ~RecordOff() { cgc_module_record(0, nullptr, nullptr); }
  } record_off;
  CUmodule recorded = nullptr, unrecorded = nullptr;
  ASSERT_EQ(cgc__drv.cuModuleLoadData(&recorded, RecordedPtx("cgc_recorded_fill").c_str()), CUDA_SUCCESS);
  CGC_ASSERT_OK(cgc_module_record(0, &images, &bytes_kept));
  EXPECT_GT(images, images_before);
  EXPECT_GT(bytes_kept, 0u);
  std::printf("the record holds %zu images, %zu bytes\n", images, bytes_kept);
  ASSERT_EQ(cgc__drv.cuModuleLoadData(&unrecorded, RecordedPtx("cgc_unrecorded_fill").c_str()), CUDA_SUCCESS);
  CUfunction recorded_fill = nullptr, unrecorded_fill = nullptr;
  ASSERT_EQ(cgc__drv.cuModuleGetFunction(&recorded_fill, recorded, "cgc_recorded_fill"), CUDA_SUCCESS);
  ASSERT_EQ(cgc__drv.cuModuleGetFunction(&unrecorded_fill, unrecorded, "cgc_unrecorded_fill"), CUDA_SUCCESS);

  cgc_pool_t pool = FixedPool();
  ASSERT_NE(pool, nullptr);
  auto capture = [&](CUfunction fn, unsigned value, void** out) {
    cgc_capture_options_t options = Into(pool);
    EXPECT_EQ(cgc_capture_begin(stream, &options), CGC_SUCCESS) << cgc_last_error();
    *out = Malloc(kN * 4, stream);
    unsigned n = kN;
    void* args[] = {out, &value, &n};
    EXPECT_EQ(cgc__drv.cuLaunchKernel(fn, kN / 256, 1, 1, 256, 1, 1, 0, static_cast<CUstream>(cgc_stream_native(stream)),
                                      args, nullptr),
              CUDA_SUCCESS);
    cgc_graph_t g = nullptr;
    EXPECT_EQ(cgc_capture_end(stream, &g), CGC_SUCCESS) << cgc_last_error();
    return g;
  };
  void *out = nullptr, *other = nullptr;
  cgc_graph_t refused = capture(unrecorded_fill, 9u, &other);
  size_t size = 0;
  EXPECT_EQ(cgc_graphs_save(&refused, 1, nullptr, nullptr, 0, &size), CGC_ERROR_NOT_SAVABLE);
  EXPECT_TRUE(Contains(cgc_last_error(), "cgc_module_record")) << cgc_last_error();
  CGC_ASSERT_OK(cgc_graph_destroy(refused));
  CGC_ASSERT_OK(cgc_free(other));
  cgc_graph_t graph = capture(recorded_fill, 0x2a2a2a2au, &out);
  std::vector<uint8_t> bytes = Save({graph});
  ASSERT_FALSE(bytes.empty());
  EXPECT_GT(Info(bytes).image_bytes, 0u);  // the recorded image, in the bytes
  ASSERT_NO_FATAL_FAILURE(GiveBack(graph, out, pool));
  ASSERT_EQ(cgc__drv.cuModuleUnload(recorded), CUDA_SUCCESS);
  ASSERT_EQ(cgc__drv.cuModuleUnload(unrecorded), CUDA_SUCCESS);

  cgc_graph_t restored = nullptr;
  cgc_pool_t restored_pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(RestoreOne(bytes, &restored, &restored_pool));
  CGC_ASSERT_OK(cgc_memset_d32_async(out, 0, kN, stream));
  CGC_ASSERT_OK(cgc_graph_launch(restored, stream));
  std::vector<float> got = Download(Dev(out), kN);
  for (unsigned k = 0; k < kN; k++) {
    uint32_t word = 0;
    std::memcpy(&word, &got[k], sizeof word);
    ASSERT_EQ(word, 0x2a2a2a2au) << "word " << k;
  }
  ASSERT_NO_FATAL_FAILURE(GiveBack(restored, out, restored_pool));
}

// A header written by hand, field by field as src/saved_file.h lays it out, and an 8-byte body:
// cgc_saved_info reads it without the driver, and names each thing it refuses.
std::vector<uint8_t> HandMadeFile(uint32_t format, uint32_t byte_order, int64_t size_delta, bool good_checksum,
                                  size_t body_bytes = 8) {
  std::vector<uint8_t> b;
  auto put = [&b](uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) b.push_back(uint8_t(v >> (8 * i)));
  };
  for (char c : std::string("CGCGRAPH")) b.push_back(uint8_t(c));
  put(format, 4);
  put(byte_order, 4);
  put(0, 8);  // the size, below
  put(0, 8);  // the checksum, below
  put(9, 4), put(0, 4), put(13000, 4), put(0, 4);  // compute 9.0, CUDA 13000, reserved
  // Graphs, pools, modules, kernels, nodes, generators; pool and image bytes; what a restore
  // takes besides (each its own, as families).
  const uint64_t counts[] = {3, 2, 1, 4, 3000, 2, 6 << 20, 12345, 5 << 20, 3 << 20};
  for (uint64_t c : counts) put(c, 8);
  put(0x0123456789abcdefull, 8);  // the body
  for (size_t i = 8; i < body_bytes; i++) b.push_back(uint8_t(i * 131 + (i >> 12)));
  uint64_t h = Checksum(&b[b.size() - body_bytes], body_bytes);
  if (!good_checksum) h ^= 1;
  uint64_t total = uint64_t(int64_t(b.size()) + size_delta);
  for (size_t i = 0; i < 8; i++) b[16 + i] = uint8_t(total >> (8 * i)), b[24 + i] = uint8_t(h >> (8 * i));
  return b;
}

TEST(SavedNoGpu, TheHeaderIsReadWithoutTheDriverAndEachRefusalSaysWhy) {
  cgc_saved_info_t info{};
  info.struct_size = sizeof info;
  std::vector<uint8_t> good = HandMadeFile(5, 0x01020304, 0, true);
  ASSERT_EQ(cgc_saved_info(good.data(), good.size(), &info), CGC_SUCCESS) << cgc_last_error();
  EXPECT_EQ(info.format_version, 5u);
  EXPECT_EQ(info.compute_major, 9);
  EXPECT_EQ(info.compute_minor, 0);
  EXPECT_EQ(info.driver_version, 13000);
  EXPECT_EQ(info.n_graphs, 3u);
  EXPECT_EQ(info.n_pools, 2u);
  EXPECT_EQ(info.n_modules, 1u);
  EXPECT_EQ(info.n_nodes, 3000u);
  EXPECT_EQ(info.pool_bytes, size_t{6} << 20);
  EXPECT_EQ(info.image_bytes, 12345u);
  EXPECT_EQ(info.restore_bytes, size_t{5} << 20);
  EXPECT_EQ(info.family_restore_bytes, size_t{3} << 20);
  EXPECT_EQ(info.n_generators, 2u);
  // An older caller's smaller struct is filled only as far as it reaches.
  cgc_saved_info_t small{};
  small.struct_size = offsetof(cgc_saved_info_t, n_pools);
  small.n_pools = 77;
  ASSERT_EQ(cgc_saved_info(good.data(), good.size(), &small), CGC_SUCCESS);
  EXPECT_EQ(small.n_graphs, 3u);
  EXPECT_EQ(small.n_pools, 77u);
  struct Case {
    std::vector<uint8_t> bytes;
    const char* says;
  } cases[] = {
      {HandMadeFile(1, 0x01020304, 0, true), "format version 1"},
      {HandMadeFile(2, 0x01020304, 0, true), "format version 2"},
      {HandMadeFile(3, 0x01020304, 0, true), "format version 3"},
      {HandMadeFile(4, 0x01020304, 0, true), "format version 4"},
      {HandMadeFile(6, 0x01020304, 0, true), "format version 6"},
      {HandMadeFile(5, 0x04030201, 0, true), "byte order"},
      {HandMadeFile(5, 0x01020304, 8, true), "truncated"},
      {HandMadeFile(5, 0x01020304, 0, false), "damaged"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(cgc_saved_info(c.bytes.data(), c.bytes.size(), &info), CGC_ERROR_SAVED_MISMATCH) << c.says;
    EXPECT_TRUE(Contains(cgc_last_error(), c.says)) << cgc_last_error();
    EXPECT_TRUE(Contains(cgc_last_error(), "cgc_saved_info")) << cgc_last_error();
  }
  for (size_t cut = 0; cut < good.size(); cut += 7)  // every truncation is refused, none read past
    EXPECT_EQ(cgc_saved_info(good.data(), cut, &info), CGC_ERROR_SAVED_MISMATCH) << cut;
}

// A body of several 4 MiB chunks (hashed on threads) checks as the one-thread reference above
// says, and a byte changed in any chunk, or in the short last one, is refused as damage.
TEST(SavedNoGpu, TheChecksumOfABodyOfManyChunksCatchesAChangeInEach) {
  const size_t body = (size_t{9} << 20) + 13;
  std::vector<uint8_t> good = HandMadeFile(5, 0x01020304, 0, true, body);
  cgc_saved_info_t info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(cgc_saved_info(good.data(), good.size(), &info), CGC_SUCCESS) << cgc_last_error();
  const size_t header = good.size() - body;
  for (size_t at : {size_t{0}, (size_t{4} << 20) - 1, size_t{5} << 20, size_t{8} << 20, body - 1}) {
    std::vector<uint8_t> b = good;
    b[header + at] ^= 0x10;
    EXPECT_EQ(cgc_saved_info(b.data(), b.size(), &info), CGC_ERROR_SAVED_MISMATCH) << "byte " << at;
    EXPECT_TRUE(Contains(cgc_last_error(), "damaged")) << cgc_last_error();
  }
}

TEST(SavedNoGpu, BytesThatAreNoSavedFileAreRefusedWithoutTheDriver) {
  cgc_saved_info_t info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(cgc_saved_info("CGCGRAPH but nothing more", 26, &info), CGC_ERROR_SAVED_MISMATCH);
  EXPECT_EQ(cgc_last_status(), CGC_ERROR_SAVED_MISMATCH);
  EXPECT_EQ(cgc_saved_info(nullptr, 0, &info), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_saved_info("x", 1, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  size_t size = 1;
  EXPECT_EQ(cgc_graphs_save(nullptr, 0, nullptr, nullptr, 0, &size), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(size, 0u);
  EXPECT_EQ(cgc_module_add_image(nullptr, "k", "x", 1), CGC_ERROR_INVALID_ARGUMENT);
}

}  // namespace
