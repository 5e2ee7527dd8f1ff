// The work a graph is made of (1.1): copies, sets, page-locked host memory, host functions,
// stream memory operations, stream queries, modules and kernel launches, each eagerly and inside
// a capture, the node counts of cgc_graph_info, and what is legal while another thread captures
// in Global mode.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Page-locked host memory of n T's, freed at the end of the scope.
template <typename T>
struct HostBuffer {
  HostBuffer(cgc_context_t ctx, size_t n) : n(n) {
    EXPECT_EQ(cgc_host_alloc(ctx, n * sizeof(T), 0, reinterpret_cast<void**>(&p)), CGC_SUCCESS) << cgc_last_error();
  }
  ~HostBuffer() { EXPECT_EQ(cgc_host_free(p), CGC_SUCCESS) << cgc_last_error(); }
  T& operator[](size_t i) { return p[i]; }
  size_t bytes() const { return n * sizeof(T); }
  T* p = nullptr;
  size_t n;
};

class WorkTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    CGC_ASSERT_OK(cgc_module_load(ctx, cgc_test_kernels_fatbin, &module));
    CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_fill", &fill));
    CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_scale_add", &scale_add));
    CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_spin", &spin));
  }
  void TearDown() override {
    if (module != nullptr) {
      EXPECT_EQ(cgc_module_unload(module), CGC_SUCCESS) << cgc_last_error();
    }
    GpuTest::TearDown();
  }
  cgc_status_t LaunchFill(cgc_stream_t s, void* p, float v, unsigned n) {
    void* args[] = {&p, &v, &n};
    return cgc_launch_kernel(fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args);
  }
  cgc_status_t LaunchScaleAdd(cgc_stream_t s, void* out, void* in, void* params, unsigned n) {
    void* args[] = {&out, &in, &params, &n};
    return cgc_launch_kernel(scale_add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args);
  }
  cgc_status_t LaunchSpin(cgc_stream_t s, long long cycles) {
    void* args[] = {&cycles};
    return cgc_launch_kernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args);
  }
  cgc_module_t module = nullptr;
  cgc_function_t fill = nullptr, scale_add = nullptr, spin = nullptr;
};

// ---- copies and sets ----

TEST_F(WorkTest, CopiesAndSetsRoundTripEagerly) {
  const size_t n = 1000;
  HostBuffer<float> in(ctx, n), out(ctx, n);
  for (size_t i = 0; i < n; i++) in[i] = static_cast<float>(i) * 0.5f;
  void* a = Malloc(n * sizeof(float), stream);
  void* b = Malloc(n * sizeof(float), stream);
  CGC_ASSERT_OK(cgc_memcpy_htod_async(a, in.p, in.bytes(), stream));
  CGC_ASSERT_OK(cgc_memcpy_dtod_async(b, a, in.bytes(), stream));
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(out.p, b, out.bytes(), stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  EXPECT_EQ(std::memcmp(in.p, out.p, in.bytes()), 0);

  // Sets of each width, read back through pageable memory (fine outside captures).
  CGC_ASSERT_OK(cgc_memset_d8_async(a, 0xAB, 7, stream));
  CGC_ASSERT_OK(cgc_memset_d16_async(static_cast<char*>(a) + 8, 0x1234, 4, stream));
  CGC_ASSERT_OK(cgc_memset_d32_async(static_cast<char*>(a) + 16, 0xDEADBEEFu, 4, stream));
  std::vector<unsigned char> bytes(32);
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(bytes.data(), a, bytes.size(), stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  for (int i = 0; i < 7; i++) EXPECT_EQ(bytes[i], 0xAB) << i;
  uint16_t h[4];
  uint32_t w[4];
  std::memcpy(h, &bytes[8], sizeof h);
  std::memcpy(w, &bytes[16], sizeof w);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(h[i], 0x1234);
    EXPECT_EQ(w[i], 0xDEADBEEFu);
  }
  EXPECT_EQ(cgc_memcpy_htod_async(a, in.p, 0, stream), CGC_SUCCESS) << "0 bytes is a no-op";
  CGC_EXPECT_OK(cgc_free(a));
  CGC_EXPECT_OK(cgc_free(b));
}

// Checks one refused call: its status, and that its message names the function and says why.
#define EXPECT_REFUSED(call, want, function, part)                                             \
  do {                                                                                         \
    cgc_status_t st_ = (call);                                                                 \
    std::string message_ = cgc_last_error();                                                   \
    EXPECT_EQ(st_, want) << #call << ": " << message_;                                         \
    EXPECT_TRUE(Contains(message_, function)) << #call << ": " << message_;                    \
    EXPECT_TRUE(Contains(message_, part)) << #call << ": " << message_;                        \
  } while (0)

TEST_F(WorkTest, BadArgumentsOfLiveHandlesAreRefusedWithTheirName) {
  void* d = Malloc(256, stream);
  std::vector<char> host(64);
  int v = 0;
  cgc_mem_op_t bad_kind = {static_cast<cgc_mem_op_kind_t>(9), 0, d, 1};
  cgc_mem_op_t wide_value = {CGC_MEM_OP_WRITE_VALUE_32, 0, d, 1ull << 40};
  cgc_access_policy_t policy = {sizeof policy, d, 256, 2.0f, CGC_ACCESS_PERSISTING, CGC_ACCESS_STREAMING};
  cgc_access_policy_t bad_prop = {sizeof policy, d, 256, 0.5f, static_cast<cgc_access_property_t>(7), CGC_ACCESS_NORMAL};
  cgc_access_policy_t small = {0, d, 256, 0.5f, CGC_ACCESS_PERSISTING, CGC_ACCESS_STREAMING};
  void* out = nullptr;
  cgc_function_t none = nullptr;
  const cgc_status_t A = CGC_ERROR_INVALID_ARGUMENT;
  EXPECT_REFUSED(cgc_host_alloc(ctx, 64, 0x80, &out), A, "cgc_host_alloc", "flag");
  EXPECT_REFUSED(cgc_host_register(ctx, host.data(), 0, 0), A, "cgc_host_register", "bytes is 0");
  EXPECT_REFUSED(cgc_host_register(ctx, host.data(), SIZE_MAX, 0), A, "cgc_host_register", "address space");
  EXPECT_REFUSED(cgc_host_register(ctx, host.data(), host.size(), 0x10), A, "cgc_host_register", "flag");
  EXPECT_REFUSED(cgc_host_free(host.data()), A, "cgc_host_free", "not page-locked");
  EXPECT_REFUSED(cgc_memcpy_htod_async(nullptr, host.data(), 8, stream), A, "cgc_memcpy_htod_async", "dst is NULL");
  EXPECT_REFUSED(cgc_memcpy_dtoh_async(host.data(), nullptr, 8, stream), A, "cgc_memcpy_dtoh_async", "src is NULL");
  EXPECT_REFUSED(cgc_memcpy_dtod_async(d, d, SIZE_MAX, stream), A, "cgc_memcpy_dtod_async", "address space");
  EXPECT_REFUSED(cgc_memset_d16_async(static_cast<char*>(d) + 1, 1, 2, stream), A, "cgc_memset_d16_async", "aligned");
  EXPECT_REFUSED(cgc_memset_d32_async(static_cast<char*>(d) + 2, 1, 2, stream), A, "cgc_memset_d32_async", "aligned");
  EXPECT_REFUSED(cgc_memset_d32_async(d, 1, SIZE_MAX / 2, stream), A, "cgc_memset_d32_async", "address space");
  EXPECT_REFUSED(cgc_launch_host_func(stream, nullptr, nullptr, nullptr), A, "cgc_launch_host_func", "fn is NULL");
  EXPECT_REFUSED(cgc_stream_write_value64(stream, static_cast<char*>(d) + 4, 1, 0), A, "cgc_stream_write_value64",
                 "aligned");
  EXPECT_REFUSED(cgc_stream_write_value32(stream, nullptr, 1, 0), A, "cgc_stream_write_value32", "address is NULL");
  EXPECT_REFUSED(cgc_stream_write_value32(stream, d, 1, 0x1), A, "cgc_stream_write_value32", "writes take 0");
  cgc_mem_op_t lone_barrier = {CGC_MEM_OP_BARRIER, CGC_BARRIER_GPU, nullptr, 0};
  cgc_mem_op_t bad_barrier = {CGC_MEM_OP_BARRIER, 7, nullptr, 0};
  EXPECT_REFUSED(cgc_stream_batch_mem_op(stream, &bad_barrier, 1), A, "cgc_stream_batch_mem_op", "barrier's flags");
  CGC_EXPECT_OK(cgc_stream_batch_mem_op(stream, &lone_barrier, 1));
  EXPECT_REFUSED(cgc_stream_wait_value32(stream, d, 1, 0x7), A, "cgc_stream_wait_value32", "wait flags");
  EXPECT_REFUSED(cgc_stream_batch_mem_op(stream, &bad_kind, 0), A, "cgc_stream_batch_mem_op", "count is 0");
  EXPECT_REFUSED(cgc_stream_batch_mem_op(stream, &bad_kind, 256), A, "cgc_stream_batch_mem_op", "count is 256");
  EXPECT_REFUSED(cgc_stream_batch_mem_op(stream, nullptr, 1), A, "cgc_stream_batch_mem_op", "ops is NULL");
  CGC_EXPECT_OK(cgc_memcpy_dtod_async(nullptr, nullptr, 0, stream));  // 0 bytes: nothing is looked at
  EXPECT_REFUSED(cgc_stream_batch_mem_op(stream, &bad_kind, 1), A, "cgc_stream_batch_mem_op", "ops[0]: kind 9");
  EXPECT_REFUSED(cgc_stream_batch_mem_op(stream, &wide_value, 1), A, "cgc_stream_batch_mem_op", "32-bit");
  EXPECT_REFUSED(cgc_stream_set_access_policy(stream, &policy), A, "cgc_stream_set_access_policy", "hit_ratio");
  EXPECT_REFUSED(cgc_stream_set_access_policy(stream, &bad_prop), A, "cgc_stream_set_access_policy", "hit_property");
  EXPECT_REFUSED(cgc_stream_set_access_policy(stream, &small), A, "cgc_stream_set_access_policy", "struct_size");
  EXPECT_REFUSED(cgc_function_get_attribute(fill, static_cast<cgc_function_attribute_t>(42), &v), A,
                 "cgc_function_get_attribute", "attribute 42");
  EXPECT_REFUSED(cgc_function_set_attribute(fill, CGC_FUNC_NUM_REGS, 1), A, "cgc_function_set_attribute",
                 "cannot be set");
  EXPECT_REFUSED(cgc_launch_kernel(fill, 0, 1, 1, 1, 1, 1, 0, stream, nullptr), A, "cgc_launch_kernel", "zero dimension");
  EXPECT_REFUSED(cgc_launch_kernel(fill, 1, 1, 1, 1, 0, 1, 0, stream, nullptr), A, "cgc_launch_kernel", "zero dimension");
  EXPECT_REFUSED(cgc_module_get_function(module, "no_such_kernel", &none), A, "cgc_module_get_function",
                 "no_such_kernel");
  EXPECT_REFUSED(cgc_module_get_function(module, "", &none), A, "cgc_module_get_function", "empty");
  // An image that is no image: the driver's error, named.
  cgc_module_t m = nullptr;
  EXPECT_REFUSED(cgc_module_load(ctx, "this is not a module image", &m), CGC_ERROR_CUDA, "cgc_module_load",
                 "cuModuleLoadDataEx");
  EXPECT_EQ(m, nullptr);
  // PTX that does not compile: the compiler's log is in the message.
  const char* broken_ptx = ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry k() { bogus; }\n";
  EXPECT_NE(cgc_module_load(ctx, broken_ptx, &m), CGC_SUCCESS);
  EXPECT_TRUE(Contains(cgc_last_error(), "compiler said")) << cgc_last_error();
  CGC_EXPECT_OK(cgc_free(d));
}

// ---- copies inside captures ----

TEST_F(WorkTest, APageableCopyInACaptureIsRefusedAndTheCaptureGoesOn) {
  const size_t n = 256;
  std::vector<float> pageable(n, 1.0f);
  HostBuffer<float> pinned(ctx, n);
  void* d = Malloc(n * sizeof(float), stream);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  EXPECT_EQ(cgc_memcpy_htod_async(d, pageable.data(), n * sizeof(float), stream), CGC_ERROR_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(Contains(cgc_last_error(), "pageable")) << cgc_last_error();
  EXPECT_TRUE(Contains(cgc_last_error(), "cgc_host_alloc")) << cgc_last_error();
  EXPECT_EQ(cgc_memcpy_dtoh_async(pageable.data(), d, n * sizeof(float), stream), CGC_ERROR_CAPTURE_UNSUPPORTED);
  // The refusal came before the driver: the capture is intact and a page-locked copy works.
  CGC_EXPECT_OK(cgc_memcpy_htod_async(d, pinned.p, pinned.bytes(), stream));
  // A registered buffer of the caller's is page-locked too.
  CGC_ASSERT_OK(cgc_host_register(ctx, pageable.data(), n * sizeof(float), 0));
  CGC_EXPECT_OK(cgc_memcpy_dtoh_async(pageable.data(), d, n * sizeof(float), stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (size_t i = 0; i < n; i++) pinned[i] = static_cast<float>(i);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  for (size_t i = 0; i < n; i++) ASSERT_EQ(pageable[i], static_cast<float>(i)) << i;
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_host_unregister(pageable.data()));
  EXPECT_EQ(cgc_host_unregister(pageable.data()), CGC_ERROR_INVALID_ARGUMENT) << "no longer registered";
  // Unregistered, the buffer is pageable again: cgc must not remember its pages as page-locked.
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  EXPECT_EQ(cgc_memcpy_dtoh_async(pageable.data(), d, n * sizeof(float), stream), CGC_ERROR_CAPTURE_UNSUPPORTED);
  g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_free(d));
}

// The per-replay parameter pattern: the host writes page-locked memory between replays and the
// graph copies it in at every replay: each replay sees its own values, with no recapture.
TEST_F(WorkTest, EachReplaySeesTheValuesWrittenIntoPageLockedMemoryBeforeIt) {
  const unsigned n = 4096;
  HostBuffer<float> params(ctx, 2), in(ctx, n), out(ctx, n);
  for (unsigned i = 0; i < n; i++) in[i] = static_cast<float>(i % 13) - 6.0f;
  void* d_in = Malloc(n * sizeof(float), stream);
  void* d_out = Malloc(n * sizeof(float), stream);
  void* d_params = Malloc(2 * sizeof(float), stream);
  CGC_ASSERT_OK(cgc_memcpy_htod_async(d_in, in.p, in.bytes(), stream));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_memcpy_htod_async(d_params, params.p, params.bytes(), stream));
  CGC_ASSERT_OK(LaunchScaleAdd(stream, d_out, d_in, d_params, n));
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(out.p, d_out, out.bytes(), stream));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (int r = 1; r <= 4; r++) {
    params[0] = static_cast<float>(r);
    params[1] = -3.0f * static_cast<float>(r);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
    for (unsigned i = 0; i < n; i++) ASSERT_EQ(out[i], in[i] * params[0] + params[1]) << "replay " << r << " i " << i;
  }
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_free(d_in));
  CGC_EXPECT_OK(cgc_free(d_out));
  CGC_EXPECT_OK(cgc_free(d_params));
}

// ---- host functions ----

struct HostCalls {
  std::atomic<int> calls{0};
  std::atomic<int> released{0};
  std::atomic<int> calls_when_released{-1};
};
void CountCall(void* user) { static_cast<HostCalls*>(user)->calls++; }
void SlowCall(void* user) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  static_cast<HostCalls*>(user)->calls++;
}
void Release(void* user) {
  auto* h = static_cast<HostCalls*>(user);
  h->calls_when_released = h->calls.load();
  h->released++;
}

TEST_F(WorkTest, AnEagerHostFunctionRunsOnceThenItsDataIsReleased) {
  HostCalls h;
  CGC_ASSERT_OK(cgc_launch_host_func(stream, CountCall, &h, Release));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  EXPECT_EQ(h.calls, 1);
  EXPECT_EQ(h.released, 1);
  EXPECT_EQ(h.calls_when_released, 1);
}

TEST_F(WorkTest, ACapturedHostFunctionRunsAtEveryReplayAndIsReleasedWithTheGraph) {
  HostCalls h;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_launch_host_func(stream, CountCall, &h, Release));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  EXPECT_EQ(h.calls, 0) << "capturing does not run it";
  for (int r = 0; r < 3; r++) CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  EXPECT_EQ(h.calls, 3);
  EXPECT_EQ(h.released, 0) << "the graph can still call it";
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  EXPECT_EQ(h.released, 1);
}

// Destroying a graph while a replay runs: the release waits for the replay, so it never frees
// what a host node is about to use.
TEST_F(WorkTest, DestroyingAGraphWhileItRunsReleasesAfterTheLastCall) {
  HostCalls h;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(LaunchSpin(stream, 100LL * 1000 * 1000));
  CGC_ASSERT_OK(cgc_launch_host_func(stream, SlowCall, &h, Release));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  EXPECT_EQ(h.released, 1);
  EXPECT_EQ(h.calls_when_released, 1) << "released before the running replay's call";
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
}

TEST_F(WorkTest, AFailedCaptureReleasesItsHostFunctions) {
  HostCalls h;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_launch_host_func(stream, CountCall, &h, Release));
  // Invalidate the capture: a synchronisation through the driver on the capturing stream.
  cgc__drv.cuStreamQuery(static_cast<CUstream>(cgc_stream_native(stream)));
  cgc_graph_t g = nullptr;
  EXPECT_EQ(cgc_capture_end(stream, &g), CGC_ERROR_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(h.released, 1);
  EXPECT_EQ(h.calls, 0);
}

struct InsideHostFunction {
  cgc_stream_t stream;
  cgc_status_t status = CGC_SUCCESS;
  std::string message;
};
void CallCgcInside(void* user) {
  auto* in = static_cast<InsideHostFunction*>(user);
  int complete = 0;
  in->status = cgc_stream_query(in->stream, &complete);
  in->message = cgc_last_error();
}

TEST_F(WorkTest, CgcCallsFromInsideAHostFunctionAreRefused) {
  InsideHostFunction in{stream};
  CGC_ASSERT_OK(cgc_launch_host_func(stream, CallCgcInside, &in, nullptr));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  EXPECT_EQ(in.status, CGC_ERROR_INVALID_STATE);
  EXPECT_TRUE(Contains(in.message, "host function")) << in.message;
}

// A host node needs a capture cgc began: in a raw driver capture nothing would release `user`.
TEST_F(WorkTest, AHostNodeInACaptureCgcDidNotBeginIsRefused) {
  // A cgc capture elsewhere makes cgc ask streams whether they capture.
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  CGC_ASSERT_OK(cgc_capture_begin(other, nullptr));
  CUstream raw = static_cast<CUstream>(cgc_stream_native(stream));
  CU_ASSERT_OK(cuStreamBeginCapture(raw, CU_STREAM_CAPTURE_MODE_RELAXED));
  HostCalls h;
  EXPECT_EQ(cgc_launch_host_func(stream, CountCall, &h, Release), CGC_ERROR_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(Contains(cgc_last_error(), "did not begin")) << cgc_last_error();
  EXPECT_EQ(h.released, 1);
  CUgraph raw_graph = nullptr;
  CU_ASSERT_OK(cuStreamEndCapture(raw, &raw_graph));
  if (raw_graph) cgc__drv.cuGraphDestroy(raw_graph);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(other, &g));
  if (g) {
    CGC_EXPECT_OK(cgc_graph_destroy(g));
  }
  CGC_EXPECT_OK(cgc_stream_destroy(other));
}

// Issue 13 review: with no cgc capture under way cgc did not ask, and the eager record went into
// the driver's graph, to be freed at its first replay and read again at the next.
TEST_F(WorkTest, AHostFunctionInADriverCaptureIsRefusedAlsoWithNoCgcCapture) {
  CUstream raw = static_cast<CUstream>(cgc_stream_native(stream));
  CU_ASSERT_OK(cuStreamBeginCapture(raw, CU_STREAM_CAPTURE_MODE_RELAXED));
  HostCalls h;
  EXPECT_EQ(cgc_launch_host_func(stream, CountCall, &h, Release), CGC_ERROR_CAPTURE_UNSUPPORTED) << cgc_last_error();
  EXPECT_EQ(h.released, 1);
  CUgraph raw_graph = nullptr;
  CU_ASSERT_OK(cuStreamEndCapture(raw, &raw_graph));
  ASSERT_NE(raw_graph, nullptr) << "the driver's capture was not broken";
  size_t nodes = 99;
  CU_ASSERT_OK(cuGraphGetNodes(raw_graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 0u);
  cgc__drv.cuGraphDestroy(raw_graph);
}

// Threads that never made a context current: page-locked memory is still known as such (a copy
// into a capture is not refused as pageable) and can be freed.
TEST_F(WorkTest, PageLockedMemoryIsRecognisedOnThreadsWithoutAContext) {
  HostBuffer<float> pinned(ctx, 64);
  void* d = Malloc(256, stream);
  void* loose = nullptr;
  CGC_ASSERT_OK(cgc_host_alloc(ctx, 4096, 0, &loose));
  cgc_capture_options_t relaxed = {sizeof relaxed, CGC_CAPTURE_MODE_RELAXED, nullptr, 0};
  CGC_ASSERT_OK(cgc_capture_begin(stream, &relaxed));
  cgc_status_t copy = CGC_ERROR_INTERNAL, freed = CGC_ERROR_INTERNAL;
  std::string message;
  std::thread bare([&] {
    CUcontext none = nullptr;
    cgc__drv.cuCtxGetCurrent(&none);
    if (none != nullptr) return;  // the thread must start without one
    copy = cgc_memcpy_htod_async(d, pinned.p, 256, stream);
    message = cgc_last_error();
    freed = cgc_host_free(loose);
  });
  bare.join();
  EXPECT_EQ(copy, CGC_SUCCESS) << message;
  EXPECT_EQ(freed, CGC_SUCCESS);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_free(d));
}

// Two threads asking one graph for its node counts at once: the driver allows no two threads in
// one graph, so cgc counts once, under a lock.
TEST_F(WorkTest, GraphInfoFromManyThreadsAtOnce) {
  void* d = Malloc(1024, stream);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  for (int i = 0; i < 50; i++) CGC_ASSERT_OK(LaunchFill(stream, d, 1.0f, 256));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++)
    threads.emplace_back([&] {
      for (int k = 0; k < 50; k++) {
        cgc_graph_info_t info = {};
        info.struct_size = sizeof info;
        if (cgc_graph_info(g, &info) != CGC_SUCCESS || info.kernel_nodes != 50u) wrong++;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  CGC_EXPECT_OK(cgc_free(d));
}

// ---- stream memory operations ----

TEST_F(WorkTest, TwoStreamsHandOverWorkThroughAFlag) {
  const unsigned n = 1 << 16;
  cgc_stream_t consumer = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &consumer));
  void* flag = Malloc(8, stream);
  void* data = Malloc(n * sizeof(float), stream);
  CGC_ASSERT_OK(cgc_record_stream(flag, consumer));
  CGC_ASSERT_OK(cgc_record_stream(data, consumer));
  CGC_ASSERT_OK(cgc_memset_d32_async(flag, 0, 2, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  // The consumer waits for the flag, then doubles what the producer wrote (scale_add with
  // params in device memory: [2, 0]).
  HostBuffer<float> two(ctx, 2);
  two[0] = 2.0f;
  two[1] = 0.0f;
  void* params = Malloc(2 * sizeof(float), stream);
  CGC_ASSERT_OK(cgc_memcpy_htod_async(params, two.p, two.bytes(), stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_record_stream(params, consumer));
  CGC_ASSERT_OK(cgc_stream_wait_value32(consumer, flag, 1, CGC_WAIT_EQ));
  CGC_ASSERT_OK(LaunchScaleAdd(consumer, data, data, params, n));
  // The producer is slow, then fills and raises the flag.
  CGC_ASSERT_OK(LaunchSpin(stream, 50LL * 1000 * 1000));
  CGC_ASSERT_OK(LaunchFill(stream, data, 21.0f, n));
  CGC_ASSERT_OK(cgc_stream_write_value32(stream, flag, 1, 0));
  CGC_ASSERT_OK(cgc_stream_synchronize(consumer));
  std::vector<float> got(n);
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(got.data(), data, n * sizeof(float), consumer));
  CGC_ASSERT_OK(cgc_stream_synchronize(consumer));
  for (unsigned i = 0; i < n; i += 997) ASSERT_EQ(got[i], 42.0f) << i;
  // A batch: a 32-bit and a 64-bit write in one call (64-bit where the device has them).
  cgc_mem_op_t ops[2] = {{CGC_MEM_OP_WRITE_VALUE_32, 0, flag, 7}, {CGC_MEM_OP_WRITE_VALUE_64, 0, flag, 0}};
  cgc_mem_op_t fenced[3] = {{CGC_MEM_OP_WRITE_VALUE_32, 0, flag, 3}, {CGC_MEM_OP_BARRIER, CGC_BARRIER_SYSTEM, nullptr, 0},
                            {CGC_MEM_OP_WAIT_VALUE_32, CGC_WAIT_EQ, flag, 3}};
  CGC_ASSERT_OK(cgc_stream_batch_mem_op(stream, fenced, 3));
  std::vector<cgc_mem_op_t> most(255, cgc_mem_op_t{CGC_MEM_OP_WRITE_VALUE_32, 0, flag, 4});
  CGC_ASSERT_OK(cgc_stream_batch_mem_op(stream, most.data(), most.size()));  // the driver's largest batch
  cgc_status_t st = cgc_stream_batch_mem_op(stream, ops, 1);
  CGC_ASSERT_OK(st);
  ops[1].value = 0x1122334455667788ull;
  st = cgc_stream_batch_mem_op(stream, &ops[1], 1);
  if (st == CGC_ERROR_NOT_SUPPORTED) {
    EXPECT_TRUE(Contains(cgc_last_error(), "64-bit")) << cgc_last_error();
  } else {
    CGC_ASSERT_OK(st);
    uint64_t word = 0;
    CGC_ASSERT_OK(cgc_memcpy_dtoh_async(&word, flag, 8, stream));
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
    EXPECT_EQ(word, 0x1122334455667788ull);
    CGC_ASSERT_OK(cgc_stream_wait_value64(stream, flag, 0x1122334455667788ull, CGC_WAIT_EQ));
    CGC_ASSERT_OK(cgc_stream_write_value64(stream, flag, 5, 0));
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  }
  CGC_EXPECT_OK(cgc_free(flag));
  CGC_EXPECT_OK(cgc_free(data));
  CGC_EXPECT_OK(cgc_free(params));
  CGC_EXPECT_OK(cgc_stream_destroy(consumer));
}

TEST_F(WorkTest, TwoGraphsHandOverWorkThroughAFlag) {
  const unsigned n = 1 << 14;
  cgc_stream_t consumer = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &consumer));
  void* flag = Malloc(4, stream);
  void* data = Malloc(n * sizeof(float), stream);
  void* params = Malloc(2 * sizeof(float), stream);
  HostBuffer<float> p(ctx, 2), out(ctx, n);
  p[0] = 1.0f;
  p[1] = 1.0f;
  CGC_ASSERT_OK(cgc_memcpy_htod_async(params, p.p, p.bytes(), stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  for (void* ptr : {flag, data, params}) CGC_ASSERT_OK(cgc_record_stream(ptr, consumer));
  // The consumer graph: wait for flag == 1, data + 1, flag = 2, copy out.
  cgc_graph_t consume = nullptr, produce = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(consumer, nullptr));
  CGC_ASSERT_OK(cgc_stream_wait_value32(consumer, flag, 1, CGC_WAIT_EQ));
  CGC_ASSERT_OK(LaunchScaleAdd(consumer, data, data, params, n));
  CGC_ASSERT_OK(cgc_stream_write_value32(consumer, flag, 2, 0));
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(out.p, data, out.bytes(), consumer));
  CGC_ASSERT_OK(cgc_capture_end(consumer, &consume));
  // The producer graph: slow, fill, flag = 1.
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(LaunchSpin(stream, 20LL * 1000 * 1000));
  CGC_ASSERT_OK(LaunchFill(stream, data, 5.0f, n));
  CGC_ASSERT_OK(cgc_stream_write_value32(stream, flag, 1, 0));
  CGC_ASSERT_OK(cgc_capture_end(stream, &produce));
  for (int round = 0; round < 3; round++) {
    CGC_ASSERT_OK(cgc_memset_d32_async(flag, 0, 1, stream));
    CGC_ASSERT_OK(cgc_stream_synchronize(stream));
    CGC_ASSERT_OK(cgc_graph_launch(consume, consumer));  // launched first: it waits on the device
    CGC_ASSERT_OK(cgc_graph_launch(produce, stream));
    CGC_ASSERT_OK(cgc_stream_synchronize(consumer));
    for (unsigned i = 0; i < n; i += 101) ASSERT_EQ(out[i], 6.0f) << "round " << round << " i " << i;
  }
  cgc_graph_info_t info = {};
  info.struct_size = sizeof info;
  CGC_ASSERT_OK(cgc_graph_info(consume, &info));
  EXPECT_EQ(info.mem_op_nodes, 2u);
  EXPECT_EQ(info.kernel_nodes, 1u);
  EXPECT_EQ(info.memcpy_nodes, 1u);
  CGC_EXPECT_OK(cgc_graph_destroy(consume));
  CGC_EXPECT_OK(cgc_graph_destroy(produce));
  CGC_EXPECT_OK(cgc_free(flag));
  CGC_EXPECT_OK(cgc_free(data));
  CGC_EXPECT_OK(cgc_free(params));
  CGC_EXPECT_OK(cgc_stream_destroy(consumer));
}

// ---- streams ----

TEST_F(WorkTest, StreamPrioritiesIdsDevicesAndAttributes) {
  int least = 0, greatest = 0;
  CGC_ASSERT_OK(cgc_stream_priority_range(ctx, &least, &greatest));
  EXPECT_LE(greatest, least);
  cgc_stream_t high = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, 0, greatest - 100, &high));  // clamped
  int priority = 1;
  CGC_ASSERT_OK(cgc_stream_priority(high, &priority));
  EXPECT_EQ(priority, greatest);
  uint64_t id1 = 0, id2 = 0;
  CGC_ASSERT_OK(cgc_stream_id(stream, &id1));
  CGC_ASSERT_OK(cgc_stream_id(high, &id2));
  EXPECT_NE(id1, 0u);
  EXPECT_NE(id1, id2);
  int device = -1;
  void* native_ctx = nullptr;
  CGC_ASSERT_OK(cgc_stream_device(high, &device, &native_ctx));
  EXPECT_EQ(device, cgc_test::TestDevice());
  EXPECT_EQ(native_ctx, static_cast<void*>(primary));
  // The id of a capturing stream is the one learnt before: asking does not break the capture.
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  uint64_t during = 0;
  CGC_EXPECT_OK(cgc_stream_id(stream, &during));
  EXPECT_EQ(during, id1);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  // The L2 access-policy window, set, read back and copied to another stream.
  int max_window = 0;
  CU_ASSERT_OK(cuDeviceGetAttribute(&max_window, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE,
                                    static_cast<CUdevice>(cgc_test::TestDevice())));
  void* d = Malloc(1 << 20, stream);
  cgc_access_policy_t set = {sizeof set, d, std::min<size_t>(1 << 20, static_cast<size_t>(max_window)), 0.5f,
                             CGC_ACCESS_PERSISTING, CGC_ACCESS_STREAMING};
  if (max_window == 0) {
    EXPECT_EQ(cgc_stream_set_access_policy(stream, &set), CGC_ERROR_NOT_SUPPORTED);
  } else {
    CGC_ASSERT_OK(cgc_stream_set_access_policy(stream, &set));
    cgc_access_policy_t got = {sizeof got, nullptr, 0, 0.0f, CGC_ACCESS_NORMAL, CGC_ACCESS_NORMAL};
    CGC_ASSERT_OK(cgc_stream_get_access_policy(stream, &got));
    EXPECT_EQ(got.base, d);
    EXPECT_EQ(got.bytes, set.bytes);
    EXPECT_FLOAT_EQ(got.hit_ratio, 0.5f);
    EXPECT_EQ(got.hit_property, CGC_ACCESS_PERSISTING);
    EXPECT_EQ(got.miss_property, CGC_ACCESS_STREAMING);
    CGC_ASSERT_OK(cgc_stream_copy_attributes(high, stream));
    cgc_access_policy_t copied = {sizeof copied, nullptr, 0, 0.0f, CGC_ACCESS_NORMAL, CGC_ACCESS_NORMAL};
    CGC_ASSERT_OK(cgc_stream_get_access_policy(high, &copied));
    EXPECT_EQ(copied.base, d);
    EXPECT_EQ(copied.bytes, set.bytes);
    set.bytes = static_cast<size_t>(max_window) + 1;
    EXPECT_EQ(cgc_stream_set_access_policy(stream, &set), CGC_ERROR_INVALID_ARGUMENT);
    set.bytes = 0;  // off again
    CGC_ASSERT_OK(cgc_stream_set_access_policy(stream, &set));
  }
  CGC_EXPECT_OK(cgc_free(d));
  CGC_EXPECT_OK(cgc_stream_destroy(high));
}

// ---- modules and kernels ----

TEST_F(WorkTest, KernelsLaunchEagerlyAndCapturedAndTheGraphKeepsTheirModule) {
  cgc_function_t again = nullptr;
  CGC_ASSERT_OK(cgc_module_get_function(module, "cgc_test_fill", &again));
  EXPECT_EQ(again, fill) << "the same handle for the same name";
  int max_threads = 0, regs = -1;
  CGC_ASSERT_OK(cgc_function_get_attribute(fill, CGC_FUNC_MAX_THREADS_PER_BLOCK, &max_threads));
  CGC_ASSERT_OK(cgc_function_get_attribute(fill, CGC_FUNC_NUM_REGS, &regs));
  EXPECT_GE(max_threads, 256);
  EXPECT_GE(regs, 0);
  CGC_ASSERT_OK(cgc_function_set_attribute(fill, CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024));
  int dynamic = 0;
  CGC_ASSERT_OK(cgc_function_get_attribute(fill, CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, &dynamic));
  EXPECT_EQ(dynamic, 64 * 1024);

  const unsigned n = 3000;
  void* d = Malloc(n * sizeof(float), stream);
  CGC_ASSERT_OK(LaunchFill(stream, d, 3.0f, n));
  std::vector<float> got(n);
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(got.data(), d, n * sizeof(float), stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  for (unsigned i = 0; i < n; i++) ASSERT_EQ(got[i], 3.0f);

  // A second module, captured, then unloaded by its owner while the graph lives.
  cgc_module_t own = nullptr;
  cgc_function_t own_fill = nullptr;
  CGC_ASSERT_OK(cgc_module_load(ctx, cgc_test_kernels_fatbin, &own));
  CGC_ASSERT_OK(cgc_module_get_function(own, "cgc_test_fill", &own_fill));
  float v = 9.0f;
  unsigned count = n;
  void* args[] = {&d, &v, &count};
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_launch_kernel(own_fill, (n + 127) / 128, 1, 1, 128, 1, 1, 0, stream, args));
  v = 1.0f;  // the values were copied at the launch
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_module_unload(own));
  EXPECT_EQ(cgc_module_get_function(own, "cgc_test_fill", &again), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_launch_kernel(own_fill, 1, 1, 1, 1, 1, 1, 0, stream, args), CGC_ERROR_INVALID_HANDLE)
      << "function handles die with their module handle";
  CGC_ASSERT_OK(LaunchFill(stream, d, 0.0f, n));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(got.data(), d, n * sizeof(float), stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  for (unsigned i = 0; i < n; i++) ASSERT_EQ(got[i], 9.0f) << "the graph's kernel still runs after unload";
  CGC_EXPECT_OK(cgc_graph_destroy(g));  // the code goes now
  CGC_EXPECT_OK(cgc_free(d));
}

TEST_F(WorkTest, PtxLoadsAndRuns) {
  const char* ptx =
      ".version 7.0\n.target sm_75\n.address_size 64\n"
      ".visible .entry seven(.param .u64 p) {\n"
      "  .reg .b64 %a; .reg .b32 %v;\n"
      "  ld.param.u64 %a, [p]; cvta.to.global.u64 %a, %a; mov.b32 %v, 7; st.global.u32 [%a], %v; ret; }\n";
  cgc_module_t m = nullptr;
  CGC_ASSERT_OK(cgc_module_load(ctx, ptx, &m));
  cgc_function_t seven = nullptr;
  CGC_ASSERT_OK(cgc_module_get_function(m, "seven", &seven));
  void* d = Malloc(4, stream);
  void* args[] = {&d};
  CGC_ASSERT_OK(cgc_launch_kernel(seven, 1, 1, 1, 1, 1, 1, 0, stream, args));
  uint32_t word = 0;
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(&word, d, 4, stream));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  EXPECT_EQ(word, 7u);
  CGC_EXPECT_OK(cgc_free(d));
  CGC_EXPECT_OK(cgc_module_unload(m));
}

// ---- what a graph is made of ----

TEST_F(WorkTest, GraphInfoCountsTheNodesByKind) {
  HostCalls h;
  HostBuffer<float> host(ctx, 64);
  void* a = Malloc(256, stream);
  void* b = Malloc(256, stream);
  cgc_stream_t side = nullptr;
  cgc_event_t fork = nullptr, join = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &fork));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &join));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_memcpy_htod_async(a, host.p, 256, stream));
  CGC_ASSERT_OK(cgc_event_record(fork, stream));
  CGC_ASSERT_OK(cgc_stream_wait_event(side, fork));
  CGC_ASSERT_OK(LaunchFill(side, b, 1.0f, 64));
  CGC_ASSERT_OK(LaunchFill(side, b, 2.0f, 64));
  CGC_ASSERT_OK(cgc_stream_write_value32(side, a, 1, 0));
  CGC_ASSERT_OK(cgc_event_record(join, side));
  CGC_ASSERT_OK(cgc_stream_wait_event(stream, join));
  CGC_ASSERT_OK(LaunchFill(stream, a, 3.0f, 64));
  CGC_ASSERT_OK(cgc_memset_d32_async(b, 0, 64, stream));
  CGC_ASSERT_OK(cgc_memcpy_dtoh_async(host.p, a, 256, stream));
  CGC_ASSERT_OK(cgc_launch_host_func(stream, CountCall, &h, Release));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  cgc_graph_info_t info = {};
  info.struct_size = sizeof info;
  CGC_ASSERT_OK(cgc_graph_info(g, &info));
  EXPECT_EQ(info.kernel_nodes, 3u);
  EXPECT_EQ(info.memcpy_nodes, 2u);
  EXPECT_EQ(info.memset_nodes, 1u);
  EXPECT_EQ(info.host_nodes, 1u);
  EXPECT_EQ(info.mem_op_nodes, 1u);
  EXPECT_EQ(info.event_record_nodes, 0u) << "cgc's completion record is not counted";
  size_t sum = info.kernel_nodes + info.memcpy_nodes + info.memset_nodes + info.host_nodes + info.child_graph_nodes +
               info.empty_nodes + info.event_wait_nodes + info.event_record_nodes + info.mem_alloc_nodes +
               info.mem_free_nodes + info.mem_op_nodes + info.conditional_nodes + info.other_nodes;
  EXPECT_EQ(sum, info.node_count);
  // A caller built against 1.0 (a shorter struct) gets 1.0's fields and nothing written past them.
  unsigned char old[sizeof(cgc_graph_info_t)];
  std::memset(old, 0xEE, sizeof old);
  reinterpret_cast<cgc_graph_info_t*>(old)->struct_size = offsetof(cgc_graph_info_t, kernel_nodes);
  CGC_ASSERT_OK(cgc_graph_info(g, reinterpret_cast<cgc_graph_info_t*>(old)));
  for (size_t i = offsetof(cgc_graph_info_t, kernel_nodes); i < sizeof old; i++) ASSERT_EQ(old[i], 0xEE) << i;
  CGC_EXPECT_OK(cgc_graph_destroy(g));
  EXPECT_EQ(h.released, 1);
  CGC_EXPECT_OK(cgc_event_destroy(fork));
  CGC_EXPECT_OK(cgc_event_destroy(join));
  CGC_EXPECT_OK(cgc_free(a));
  CGC_EXPECT_OK(cgc_free(b));
  CGC_EXPECT_OK(cgc_stream_destroy(side));
}

// ---- Global mode ----

// While another thread captures in Global mode, this thread (Global too) may copy with
// page-locked memory, set, launch kernels, write values and run host functions on its own
// stream: none is an unsafe call. A copy with pageable memory may synchronise: refused, with the
// capture it would break named. The other thread's capture survives all of it.
TEST_F(WorkTest, WhatIsLegalWhileAnotherThreadCapturesInGlobalMode) {
  cgc_stream_t mine = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &mine));
  void* d = Malloc(1024, mine);
  void* captured = Malloc(1024, stream);
  HostBuffer<float> pinned(ctx, 256);
  std::vector<float> pageable(256, 0.0f);
  std::atomic<int> phase{0};
  cgc_graph_t g = nullptr;
  cgc_status_t end_status = CGC_ERROR_INTERNAL;
  std::thread capturer([&] {
    CUcontext c = primary;
    cgc__drv.cuCtxPushCurrent(c);
    cgc_capture_options_t options = {sizeof options, CGC_CAPTURE_MODE_GLOBAL, nullptr, 0};
    if (cgc_capture_begin(stream, &options) != CGC_SUCCESS) {
      phase = -1;
      return;
    }
    LaunchFill(stream, captured, 1.0f, 256);
    phase = 1;
    while (phase != 2) std::this_thread::yield();
    end_status = cgc_capture_end(stream, &g);
    cgc__drv.cuCtxPopCurrent(&c);
  });
  while (phase == 0) std::this_thread::yield();
  ASSERT_EQ(phase, 1) << "the capture did not begin";
  HostCalls h;
  CGC_EXPECT_OK(cgc_memcpy_htod_async(d, pinned.p, pinned.bytes(), mine));
  CGC_EXPECT_OK(cgc_memcpy_dtod_async(static_cast<char*>(d) + 512, d, 512, mine));
  CGC_EXPECT_OK(cgc_memset_d8_async(d, 0, 16, mine));
  CGC_EXPECT_OK(LaunchFill(mine, d, 2.0f, 256));
  CGC_EXPECT_OK(cgc_stream_write_value32(mine, d, 1, 0));
  CGC_EXPECT_OK(cgc_launch_host_func(mine, CountCall, &h, Release));
  CGC_EXPECT_OK(cgc_memcpy_dtoh_async(pinned.p, d, pinned.bytes(), mine));
  EXPECT_EQ(cgc_memcpy_htod_async(d, pageable.data(), 1024, mine), CGC_ERROR_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(Contains(cgc_last_error(), "Global")) << cgc_last_error();
  phase = 2;
  capturer.join();
  EXPECT_EQ(end_status, CGC_SUCCESS) << "the Global capture survived";
  if (g) {
    CGC_EXPECT_OK(cgc_graph_destroy(g));
  }
  CGC_ASSERT_OK(cgc_stream_synchronize(mine));
  EXPECT_EQ(h.calls, 1);
  EXPECT_EQ(h.released, 1);
  // After the capture the pageable copy is fine again.
  CGC_EXPECT_OK(cgc_memcpy_htod_async(d, pageable.data(), 1024, mine));
  CGC_ASSERT_OK(cgc_stream_synchronize(mine));
  CGC_EXPECT_OK(cgc_free(d));
  CGC_EXPECT_OK(cgc_free(captured));
  CGC_EXPECT_OK(cgc_stream_destroy(mine));
}

}  // namespace
