// The PyTorch bridge (libcgc_torch.so.1) as the Python binding drives it, without PyTorch: what
// it says when something it needs is missing, and its pool bookkeeping. With PyTorch on a GPU
// machine, bindings/python/test_torch_graphs.py drives it through real torch.cuda.graph
// captures.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "capi/cgc.h"
#include "tests/test_data.h"

namespace {

class TorchBridge : public ::testing::Test {
 protected:
  void SetUp() override {
    bridge_ = dlopen(cgc_test::DataPath("bindings/torch_bridge/libcgc_torch.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (bridge_ == nullptr)  // the GPU bundle keeps it beside libcgc.so
      bridge_ = dlopen(cgc_test::DataPath("libcgc_torch.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(bridge_, nullptr) << dlerror();
    load_ = reinterpret_cast<int (*)(const char*, char*, size_t)>(dlsym(bridge_, "cgc_torch_bridge_load"));
    attach_ = reinterpret_cast<int (*)(char*, size_t)>(dlsym(bridge_, "cgc_torch_bridge_attach"));
    pool_ = reinterpret_cast<cgc_pool_t (*)(int, unsigned long long, unsigned long long, int, char*, size_t)>(
        dlsym(bridge_, "cgc_torch_bridge_pool"));
    pool_ids_ = reinterpret_cast<size_t (*)(int, unsigned long long*, size_t)>(dlsym(bridge_, "cgc_torch_bridge_pool_ids"));
    open_routes_ = reinterpret_cast<int (*)()>(dlsym(bridge_, "cgc_torch_bridge_open_routes"));
    ASSERT_TRUE(load_ && attach_ && pool_ && pool_ids_ && open_routes_) << "an entry point is missing";
  }
  // The bridge is never unloaded: its state lives for the process (PyTorch may call it during
  // interpreter shutdown), so the tests share one copy, as a process shares it with PyTorch.
  std::string Libcgc() { return cgc_test::DataPath("libcgc.so"); }

  void* bridge_ = nullptr;
  int (*load_)(const char*, char*, size_t) = nullptr;
  int (*attach_)(char*, size_t) = nullptr;
  cgc_pool_t (*pool_)(int, unsigned long long, unsigned long long, int, char*, size_t) = nullptr;
  size_t (*pool_ids_)(int, unsigned long long*, size_t) = nullptr;
  int (*open_routes_)() = nullptr;
  char error_[512] = {};
};

TEST_F(TorchBridge, ExportsOnlyItsEntryPoints) {
  // Nothing of the C++ runtime it instantiates may interpose on PyTorch's copies.
  EXPECT_EQ(dlsym(bridge_, "_ZNSt14_Function_baseD2Ev"), nullptr);
  EXPECT_NE(dlsym(bridge_, "cgc_torch_bridge_malloc"), nullptr);
  EXPECT_NE(dlsym(bridge_, "cgc_torch_bridge_free"), nullptr);
  EXPECT_NE(dlsym(bridge_, "cgc_torch_bridge_pool_release"), nullptr);
}

TEST_F(TorchBridge, LoadNamesAMissingLibrary) {
  EXPECT_NE(load_("/nonexistent/libcgc.so.1", error_, sizeof error_), 0);
  EXPECT_NE(std::string(error_).find("/nonexistent/libcgc.so.1"), std::string::npos) << error_;
}

TEST_F(TorchBridge, AttachSaysPyTorchIsNotLoaded) {
  ASSERT_EQ(load_(Libcgc().c_str(), error_, sizeof error_), 0) << error_;
  EXPECT_NE(attach_(error_, sizeof error_), 0);
  EXPECT_NE(std::string(error_).find("import torch first"), std::string::npos) << error_;
}

TEST_F(TorchBridge, KnowsNoPoolsOrRoutesUntilPyTorchBegins) {
  ASSERT_EQ(load_(Libcgc().c_str(), error_, sizeof error_), 0) << error_;
  EXPECT_EQ(pool_(0, 0, 1, /*create=*/0, error_, sizeof error_), nullptr);
  unsigned long long ids[4];
  EXPECT_EQ(pool_ids_(0, ids, 2), 0u);
  EXPECT_EQ(open_routes_(), 0);
}

TEST_F(TorchBridge, CreatingAPoolWithoutADeviceSaysWhy) {
  ASSERT_EQ(load_(Libcgc().c_str(), error_, sizeof error_), 0) << error_;
  cgc_pool_t pool = pool_(/*device=*/63, 0, 7, /*create=*/1, error_, sizeof error_);
  if (pool != nullptr) GTEST_SKIP() << "skipped: this machine has a device 63";
  EXPECT_NE(std::string(error_).find("cgc_context_create"), std::string::npos) << error_;
  unsigned long long ids[2];
  EXPECT_EQ(pool_ids_(63, ids, 1), 0u) << "a failed creation leaves no entry";
}

}  // namespace
