// A dlopen user's view: only dlsym(h, "cgc_get_api"), then everything through the table, as a
// Rust or Go binding would. Captures a graph that draws random numbers and replays it.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capi/cgc.h"
#include "tests/test_data.h"

namespace {

class Dlopen : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = dlopen(cgc_test::DataPath("libcgc.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    auto get_api = reinterpret_cast<cgc_status_t (*)(uint32_t, const cgc_api_t**)>(dlsym(lib_, "cgc_get_api"));
    ASSERT_NE(get_api, nullptr);
    ASSERT_EQ(get_api(CGC_VERSION, &api_), CGC_SUCCESS);
    int n = 0;
    cgc_status_t st = api_->cgc_device_count(&n);
    if (st != CGC_SUCCESS || n == 0)
      GTEST_SKIP() << "skipped: no usable GPU (" << api_->cgc_status_string(st) << " -- " << api_->cgc_last_error()
                   << ")";
    // The test reads results back with the driver itself: it links nothing of CUDA either.
    cuda_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(cuda_, nullptr);
    copy_ = reinterpret_cast<int (*)(void*, unsigned long long, size_t)>(dlsym(cuda_, "cuMemcpyDtoH_v2"));
    ASSERT_NE(copy_, nullptr);
  }
  void TearDown() override {
    if (cuda_) dlclose(cuda_);
    if (lib_) dlclose(lib_);
  }
  std::vector<float> Read(cgc_context_t ctx, cgc_stream_t s, void* p, size_t n) {
    std::vector<float> v(n, -1.0f);
    EXPECT_EQ(api_->cgc_stream_synchronize(s), CGC_SUCCESS);
    (void)ctx;  // the copy runs in the primary context the test made current itself
    EXPECT_EQ(copy_(v.data(), reinterpret_cast<uintptr_t>(p), n * sizeof(float)), 0);
    return v;
  }
  void* lib_ = nullptr;
  void* cuda_ = nullptr;
  const cgc_api_t* api_ = nullptr;
  int (*copy_)(void*, unsigned long long, size_t) = nullptr;
};

#define API_OK(call) ASSERT_EQ(api_->call, CGC_SUCCESS) << #call << ": " << api_->cgc_last_error()

TEST_F(Dlopen, CapturesAndReplaysThroughTheTableAlone) {
  // Make device 0's primary context current for the test's own reads.
  auto retain = reinterpret_cast<int (*)(void**, int)>(dlsym(cuda_, "cuDevicePrimaryCtxRetain"));
  auto push = reinterpret_cast<int (*)(void*)>(dlsym(cuda_, "cuCtxPushCurrent_v2"));
  ASSERT_TRUE(retain && push);
  void* primary = nullptr;
  ASSERT_EQ(retain(&primary, 0), 0);
  ASSERT_EQ(push(primary), 0);

  cgc_context_t ctx;
  cgc_stream_t s;
  cgc_rng_t gen, ref;
  API_OK(cgc_context_create(0, &ctx));
  API_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s));
  API_OK(cgc_rng_create(ctx, 1234, &gen));
  API_OK(cgc_rng_create(ctx, 1234, &ref));
  void *out, *expect;
  API_OK(cgc_malloc(ctx, 1000 * sizeof(float), s, &expect));
  API_OK(cgc_capture_begin(s, nullptr));
  API_OK(cgc_malloc(ctx, 1000 * sizeof(float), s, &out));  // from the graph's private pool
  API_OK(cgc_rng_uniform(gen, static_cast<float*>(out), 1000, s));
  cgc_graph_t g;
  API_OK(cgc_capture_end(s, &g));
  cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
  API_OK(cgc_graph_info(g, &info));
  EXPECT_EQ(info.node_count, 1u);
  std::vector<float> previous;
  for (int i = 0; i < 3; i++) {
    API_OK(cgc_graph_launch(g, s));
    API_OK(cgc_rng_uniform(ref, static_cast<float*>(expect), 1000, s));
    std::vector<float> got = Read(ctx, s, out, 1000), want = Read(ctx, s, expect, 1000);
    EXPECT_EQ(got, want) << "replay " << i;
    EXPECT_NE(got, previous) << "each replay draws fresh numbers";
    previous = got;
  }
  API_OK(cgc_graph_info(g, &info));
  EXPECT_EQ(info.replay_count, 3u);
  API_OK(cgc_graph_destroy(g));
  API_OK(cgc_free(out));
  API_OK(cgc_free(expect));
  API_OK(cgc_rng_destroy(gen));
  API_OK(cgc_rng_destroy(ref));
  API_OK(cgc_stream_destroy(s));
  API_OK(cgc_context_destroy(ctx));
  void* popped;
  reinterpret_cast<int (*)(void**)>(dlsym(cuda_, "cuCtxPopCurrent_v2"))(&popped);
}

}  // namespace
