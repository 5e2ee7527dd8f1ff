// Without a CUDA driver every entry point fails cleanly: calls that need the driver return
// CGC_ERROR_NO_DRIVER and say how to fix it; calls given handles (which cannot exist without a
// driver) return INVALID_ARGUMENT. The driver path is forced to a file that does not exist, so
// this runs the same on GPU machines.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "capi/cgc.h"

namespace {

class NoDriverEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { setenv("CGC_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1); }
};
::testing::Environment* const no_driver = ::testing::AddGlobalTestEnvironment(new NoDriverEnvironment);

void ExpectNoDriver(cgc_status_t st, const char* function) {
  EXPECT_EQ(st, CGC_ERROR_NO_DRIVER) << function << ": " << cgc_last_error();
  EXPECT_EQ(cgc_last_status(), CGC_ERROR_NO_DRIVER) << function;  // 1.6
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find(function), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/libcuda.so.1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CGC_CUDA_DRIVER"), std::string::npos) << msg;
}

TEST(NoDriver, DriverEntryPointsReturnNoDriver) {
  int count = 7;
  ExpectNoDriver(cgc_device_count(&count), "cgc_device_count");
  EXPECT_EQ(count, 0);
  cgc_context_t ctx = reinterpret_cast<cgc_context_t>(0x1);
  ExpectNoDriver(cgc_context_create(0, &ctx), "cgc_context_create");
  EXPECT_EQ(ctx, nullptr);
  cgc_capture_mode_t m = CGC_CAPTURE_MODE_RELAXED;
  ExpectNoDriver(cgc_capture_mode_exchange(&m), "cgc_capture_mode_exchange");
  EXPECT_EQ(m, CGC_CAPTURE_MODE_RELAXED);
}

TEST(NoDriver, TorchAllocatorEntryPointsFailWithoutCrashing) {
  EXPECT_EQ(cgc_torch_malloc(1024, 0, nullptr), nullptr);
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find("cgc_torch_malloc"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CGC_CUDA_DRIVER"), std::string::npos) << msg;
  cgc_torch_free(nullptr, 0, 0, nullptr);
}

// 1.6: cgc_torch_malloc returns no status; cgc_last_status() tells why it returned NULL (what
// PyTorch's allocator backend reads to raise OutOfMemoryError for CGC_ERROR_OUT_OF_MEMORY only).
TEST(NoDriver, TorchMallocsFailureStatusIsTheLastStatus) {
  EXPECT_EQ(cgc_torch_malloc(-1, 0, nullptr), nullptr);
  EXPECT_EQ(cgc_last_status(), CGC_ERROR_INVALID_ARGUMENT) << cgc_last_error();
  EXPECT_EQ(cgc_torch_malloc(1024, 0, nullptr), nullptr);
  EXPECT_EQ(cgc_last_status(), CGC_ERROR_NO_DRIVER) << cgc_last_error();
  EXPECT_EQ(cgc_torch_malloc(0, 0, nullptr), nullptr);  // no memory, and no failure
  EXPECT_EQ(cgc_last_status(), CGC_ERROR_NO_DRIVER) << "a size of 0 changes nothing";
}

TEST(NoDriver, RepeatedCallsKeepFailingTheSameWay) {
  int count = 0;
  for (int i = 0; i < 3; i++) ExpectNoDriver(cgc_device_count(&count), "cgc_device_count");
}

TEST(NoDriver, HandleTakingEntryPointsRefuseNullHandles) {
  cgc_stream_t s = nullptr;
  cgc_event_t e = nullptr;
  cgc_graph_t g = nullptr;
  EXPECT_EQ(cgc_stream_create(nullptr, 0, 0, &s), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_stream_wrap(nullptr, nullptr, &s), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_event_create(nullptr, 0, &e), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_capture_begin(nullptr, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_capture_end(nullptr, &g), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_graph_launch(nullptr, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_context_synchronize(nullptr), CGC_ERROR_INVALID_ARGUMENT);
  cgc_pool_t p = nullptr;
  void* m = nullptr;
  EXPECT_EQ(cgc_pool_create(nullptr, &p), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_malloc(nullptr, 16, nullptr, &m), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_empty_cache(nullptr), CGC_ERROR_INVALID_ARGUMENT);
  int x = 0;
  EXPECT_EQ(cgc_free(&x), CGC_ERROR_INVALID_ARGUMENT);
}

}  // namespace
