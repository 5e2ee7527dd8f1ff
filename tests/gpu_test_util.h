// Shared helpers of the GPU tests: skip without a GPU, a fixture with a context, a stream and the
// tests' own kernels (tests/kernels/test_kernels.cu, embedded as a fatbin and loaded through the
// driver API), and checked wrappers around the few driver calls tests make themselves.
#ifndef CGC_TESTS_GPU_TEST_UTIL_H_
#define CGC_TESTS_GPU_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "capi/cgc.h"
#include "src/driver.h"

extern "C" const unsigned char cgc_test_kernels_fatbin[];
extern "C" const size_t cgc_test_kernels_fatbin_size;

// Status checks that print cgc_last_error() on failure.
#define CGC_ASSERT_OK(expr)                                                              \
  do {                                                                                   \
    cgc_status_t cgc_st_ = (expr);                                                       \
    ASSERT_EQ(cgc_st_, CGC_SUCCESS) << #expr << " -> " << cgc_last_error();              \
  } while (0)
#define CGC_EXPECT_OK(expr)                                                              \
  do {                                                                                   \
    cgc_status_t cgc_st_ = (expr);                                                       \
    EXPECT_EQ(cgc_st_, CGC_SUCCESS) << #expr << " -> " << cgc_last_error();              \
  } while (0)
// Driver calls the tests make directly, through cgc's own driver table.
#define CU_ASSERT_OK(call)                                                               \
  do {                                                                                   \
    CUresult cu_r_ = cgc__drv.call;                                                      \
    ASSERT_EQ(cu_r_, CUDA_SUCCESS) << #call << " -> CUresult " << cu_r_;                 \
  } while (0)

namespace cgc_test {

// True when cgc sees at least `need` GPUs; otherwise *why says what is missing.
bool GpusAvailable(int need, std::string* why);

#define CGC_REQUIRE_GPUS(n)                                                              \
  do {                                                                                   \
    std::string cgc_why_;                                                                \
    if (!::cgc_test::GpusAvailable((n), &cgc_why_)) GTEST_SKIP() << cgc_why_;            \
  } while (0)
#define CGC_REQUIRE_GPU() CGC_REQUIRE_GPUS(1)

// The device GpuTest fixtures use (default 0; multi-GPU workers set their rank's).
void SetTestDevice(int ordinal);
int TestDevice();

// A cgc_malloc pointer (or any device pointer held as void*) as the driver's CUdeviceptr.
inline CUdeviceptr Dev(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

// Random floats in [-1, 1): tests never run on zeros.
std::vector<float> RandomFloats(size_t n, uint32_t seed);

// A device context, a non-blocking stream and the test kernels. Each test starts with the
// primary context current on its thread.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Device memory from cuMemAlloc (outside cgc's allocator), freed at TearDown.
  CUdeviceptr Alloc(size_t bytes);
  void Upload(CUdeviceptr dst, const std::vector<float>& src);
  // Waits for all work on the device, then copies back.
  std::vector<float> Download(CUdeviceptr src, size_t n);
  std::vector<uint32_t> DownloadWords(CUdeviceptr src, size_t n);

  // cgc_malloc on the fixture's context (checked; NULL on failure) and cgc_memory_stats of the
  // device (pool NULL) or of a pool.
  void* Malloc(size_t bytes, cgc_stream_t s);
  cgc_memory_stats_t Stats(cgc_pool_t pool = nullptr);

  // Kernel launches on a cgc stream (checked).
  void Add(cgc_stream_t s, CUdeviceptr out, CUdeviceptr in, float v, unsigned n);
  void Axpb(cgc_stream_t s, CUdeviceptr p, float a, float b, unsigned n);
  void Fill(cgc_stream_t s, CUdeviceptr p, float v, unsigned n);
  void Stamp(cgc_stream_t s, CUdeviceptr p, uint32_t seed, unsigned n);
  void Spin(cgc_stream_t s, long long cycles);
  // The same launches returning the raw result (for calls expected to fail during capture).
  CUresult LaunchAdd(cgc_stream_t s, CUdeviceptr out, CUdeviceptr in, float v, unsigned n);

  cgc_context_t ctx = nullptr;
  cgc_stream_t stream = nullptr;  // non-blocking
  CUcontext primary = nullptr;
  CUfunction k_add = nullptr, k_axpb = nullptr, k_fill = nullptr, k_stamp = nullptr, k_spin = nullptr;

 private:
  CUresult Launch(CUfunction f, cgc_stream_t s, unsigned n, void** args);
  CUmodule module_ = nullptr;
  std::vector<CUdeviceptr> allocations_;
  bool skipped_ = true;
};

// A GpuTest that starts from an empty device cache and remembers the device's memory stats then,
// for tests that compare reserved and allocated bytes against that baseline.
class MemoryTest : public GpuTest {
 protected:
  void SetUp() override;
  cgc_memory_stats_t baseline_{};
};

}  // namespace cgc_test

#endif  // CGC_TESTS_GPU_TEST_UTIL_H_
