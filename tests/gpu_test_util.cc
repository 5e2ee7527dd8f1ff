#include "tests/gpu_test_util.h"

#include <random>

namespace cgc_test {

namespace {
int test_device = 0;
}

void SetTestDevice(int ordinal) { test_device = ordinal; }
int TestDevice() { return test_device; }

bool GpusAvailable(int need, std::string* why) {
  int count = 0;
  cgc_status_t st = cgc_device_count(&count);
  if (st != CGC_SUCCESS) {
    *why = std::string("skipped: no usable GPU (") + cgc_status_string(st) + " -- " + cgc_last_error() + ")";
    return false;
  }
  if (count < need) {
    *why = "skipped: needs " + std::to_string(need) + " GPU(s), this machine has " + std::to_string(count);
    return false;
  }
  return true;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void GpuTest::SetUp() {
  CGC_REQUIRE_GPU();
  skipped_ = false;
  CGC_ASSERT_OK(cgc_context_create(test_device, &ctx));
  CUdevice dev;
  CU_ASSERT_OK(cuDeviceGet(&dev, test_device));
  CU_ASSERT_OK(cuDevicePrimaryCtxRetain(&primary, dev));
  CU_ASSERT_OK(cuCtxPushCurrent(primary));
  CU_ASSERT_OK(cuModuleLoadData(&module_, cgc_test_kernels_fatbin));
  CU_ASSERT_OK(cuModuleGetFunction(&k_add, module_, "cgc_test_add"));
  CU_ASSERT_OK(cuModuleGetFunction(&k_axpb, module_, "cgc_test_axpb"));
  CU_ASSERT_OK(cuModuleGetFunction(&k_fill, module_, "cgc_test_fill"));
  CU_ASSERT_OK(cuModuleGetFunction(&k_stamp, module_, "cgc_test_stamp"));
  CU_ASSERT_OK(cuModuleGetFunction(&k_spin, module_, "cgc_test_spin"));
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &stream));
}

void GpuTest::TearDown() {
  if (skipped_) return;
  // A test that failed mid-capture must not leave the stream capturing for the next one.
  cgc_capture_status_t cs = CGC_CAPTURE_NONE;
  if (stream && cgc_stream_capture_status(stream, &cs, nullptr) == CGC_SUCCESS && cs != CGC_CAPTURE_NONE) {
    cgc_graph_t g = nullptr;
    cgc_capture_end(stream, &g);
    if (g) cgc_graph_destroy(g);
    ADD_FAILURE() << "the test left its stream capturing";
  }
  cgc__drv.cuCtxSynchronize();
  for (CUdeviceptr p : allocations_) cgc__drv.cuMemFree(p);
  if (stream) {
    EXPECT_EQ(cgc_stream_destroy(stream), CGC_SUCCESS) << cgc_last_error();
  }
  if (module_) cgc__drv.cuModuleUnload(module_);
  if (ctx) {
    EXPECT_EQ(cgc_context_destroy(ctx), CGC_SUCCESS) << cgc_last_error();
  }
  CUcontext popped;
  cgc__drv.cuCtxPopCurrent(&popped);
  CUdevice dev;
  if (cgc__drv.cuDeviceGet(&dev, test_device) == CUDA_SUCCESS) cgc__drv.cuDevicePrimaryCtxRelease(dev);
}

CUdeviceptr GpuTest::Alloc(size_t bytes) {
  CUdeviceptr p = 0;
  CUresult r = cgc__drv.cuMemAlloc(&p, bytes);
  EXPECT_EQ(r, CUDA_SUCCESS) << "cuMemAlloc(" << bytes << ")";
  if (r == CUDA_SUCCESS) allocations_.push_back(p);
  return p;
}

void MemoryTest::SetUp() {
  GpuTest::SetUp();
  if (IsSkipped() || HasFatalFailure()) return;
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  baseline_ = Stats();
}

void* GpuTest::Malloc(size_t bytes, cgc_stream_t s) {
  void* p = nullptr;
  cgc_status_t st = cgc_malloc(ctx, bytes, s, &p);
  EXPECT_EQ(st, CGC_SUCCESS) << "cgc_malloc(" << bytes << ") -> " << cgc_last_error();
  return p;
}

cgc_memory_stats_t GpuTest::Stats(cgc_pool_t pool) {
  cgc_memory_stats_t s = {sizeof s, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(cgc_memory_stats(ctx, pool, &s), CGC_SUCCESS) << cgc_last_error();
  return s;
}

void GpuTest::Upload(CUdeviceptr dst, const std::vector<float>& src) {
  EXPECT_EQ(cgc__drv.cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cgc__drv.cuMemcpyHtoDAsync(dst, src.data(), src.size() * sizeof(float), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cgc__drv.cuCtxSynchronize(), CUDA_SUCCESS);
}

std::vector<float> GpuTest::Download(CUdeviceptr src, size_t n) {
  std::vector<float> out(n, -12345.0f);
  EXPECT_EQ(cgc__drv.cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cgc__drv.cuMemcpyDtoHAsync(out.data(), src, n * sizeof(float), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cgc__drv.cuCtxSynchronize(), CUDA_SUCCESS);
  return out;
}

std::vector<uint32_t> GpuTest::DownloadWords(CUdeviceptr src, size_t n) {
  std::vector<uint32_t> out(n, 0xFFFFFFFFu);
  EXPECT_EQ(cgc__drv.cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cgc__drv.cuMemcpyDtoHAsync(out.data(), src, n * sizeof(uint32_t), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cgc__drv.cuCtxSynchronize(), CUDA_SUCCESS);
  return out;
}

CUresult GpuTest::Launch(CUfunction f, cgc_stream_t s, unsigned n, void** args) {
  unsigned block = 256, grid = (n + block - 1) / block;
  if (grid == 0) grid = 1;
  return cgc__drv.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, (CUstream)cgc_stream_native(s), args, nullptr);
}

CUresult GpuTest::LaunchAdd(cgc_stream_t s, CUdeviceptr out, CUdeviceptr in, float v, unsigned n) {
  void* args[] = {&out, &in, &v, &n};
  return Launch(k_add, s, n, args);
}

void GpuTest::Add(cgc_stream_t s, CUdeviceptr out, CUdeviceptr in, float v, unsigned n) {
  ASSERT_EQ(LaunchAdd(s, out, in, v, n), CUDA_SUCCESS);
}

void GpuTest::Axpb(cgc_stream_t s, CUdeviceptr p, float a, float b, unsigned n) {
  void* args[] = {&p, &a, &b, &n};
  ASSERT_EQ(Launch(k_axpb, s, n, args), CUDA_SUCCESS);
}

void GpuTest::Fill(cgc_stream_t s, CUdeviceptr p, float v, unsigned n) {
  void* args[] = {&p, &v, &n};
  ASSERT_EQ(Launch(k_fill, s, n, args), CUDA_SUCCESS);
}

void GpuTest::Stamp(cgc_stream_t s, CUdeviceptr p, uint32_t seed, unsigned n) {
  void* args[] = {&p, &seed, &n};
  ASSERT_EQ(Launch(k_stamp, s, n, args), CUDA_SUCCESS);
}

void GpuTest::Spin(cgc_stream_t s, long long cycles) {
  void* args[] = {&cycles};
  ASSERT_EQ(cgc__drv.cuLaunchKernel(k_spin, 1, 1, 1, 1, 1, 1, 0, (CUstream)cgc_stream_native(s), args, nullptr),
            CUDA_SUCCESS);
}

}  // namespace cgc_test
