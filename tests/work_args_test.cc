// The 1.1 functions (copies, sets, host memory, host functions, memory operations, stream
// queries, modules and kernels), 1.2's per-node updates and conditionals, and 1.3's: NULL and foreign handles and NULL outputs give a clear status
// and a message naming the function, with or without a GPU (handles are checked first). The
// checks that need a live stream or module (bad enums, flags, alignment, sizes that overflow)
// are in work_test.cc, which runs on a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "capi/cgc.h"

namespace {

alignas(64) unsigned char not_an_object[256] = {0x5A};
template <typename T>
T Fake() {
  return reinterpret_cast<T>(not_an_object);
}

struct Case {
  const char* function;
  std::function<cgc_status_t()> call;
};

void ExpectAll(cgc_status_t expected, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    cgc_status_t st = c.call();
    EXPECT_EQ(st, expected) << c.function << ": " << cgc_last_error();
    EXPECT_NE(std::string(cgc_last_error()).find(c.function), std::string::npos)
        << "message does not name " << c.function << ": " << cgc_last_error();
  }
}

void Nothing(void*) {}
void CountRelease(void* user) { ++*static_cast<int*>(user); }

// Every 1.1 function that takes a handle, called with `h` in each handle position.
std::vector<Case> WithHandles(cgc_context_t ctx, cgc_stream_t s, cgc_module_t m, cgc_function_t f, cgc_graph_t g) {
  static float buf[16];
  static cgc_mem_op_t op = {CGC_MEM_OP_WRITE_VALUE_32, 0, buf, 1};
  static cgc_access_policy_t policy = {sizeof policy, nullptr, 0, 0.0f, CGC_ACCESS_NORMAL, CGC_ACCESS_NORMAL};
  return {
      {"cgc_stream_priority_range", [=] { int a, b; return cgc_stream_priority_range(ctx, &a, &b); }},
      {"cgc_stream_priority", [=] { int p; return cgc_stream_priority(s, &p); }},
      {"cgc_stream_id", [=] { uint64_t id; return cgc_stream_id(s, &id); }},
      {"cgc_stream_device", [=] { int d; return cgc_stream_device(s, &d, nullptr); }},
      {"cgc_stream_copy_attributes", [=] { return cgc_stream_copy_attributes(s, s); }},
      {"cgc_stream_set_access_policy", [=] { return cgc_stream_set_access_policy(s, &policy); }},
      {"cgc_stream_get_access_policy", [=] { cgc_access_policy_t p = policy; return cgc_stream_get_access_policy(s, &p); }},
      {"cgc_host_alloc", [=] { void* p; return cgc_host_alloc(ctx, 64, 0, &p); }},
      {"cgc_host_register", [=] { return cgc_host_register(ctx, buf, sizeof buf, 0); }},
      {"cgc_memcpy_htod_async", [=] { return cgc_memcpy_htod_async(buf, buf, 4, s); }},
      {"cgc_memcpy_dtoh_async", [=] { return cgc_memcpy_dtoh_async(buf, buf, 4, s); }},
      {"cgc_memcpy_dtod_async", [=] { return cgc_memcpy_dtod_async(buf, buf, 4, s); }},
      {"cgc_memset_d8_async", [=] { return cgc_memset_d8_async(buf, 1, 4, s); }},
      {"cgc_memset_d16_async", [=] { return cgc_memset_d16_async(buf, 1, 4, s); }},
      {"cgc_memset_d32_async", [=] { return cgc_memset_d32_async(buf, 1, 4, s); }},
      {"cgc_launch_host_func", [=] { return cgc_launch_host_func(s, Nothing, nullptr, nullptr); }},
      {"cgc_stream_write_value32", [=] { return cgc_stream_write_value32(s, buf, 1, 0); }},
      {"cgc_stream_write_value64", [=] { return cgc_stream_write_value64(s, buf, 1, 0); }},
      {"cgc_stream_wait_value32", [=] { return cgc_stream_wait_value32(s, buf, 1, 0); }},
      {"cgc_stream_wait_value64", [=] { return cgc_stream_wait_value64(s, buf, 1, 0); }},
      {"cgc_stream_batch_mem_op", [=] { return cgc_stream_batch_mem_op(s, &op, 1); }},
      {"cgc_module_load", [=] { cgc_module_t out; return cgc_module_load(ctx, "not an image", &out); }},
      {"cgc_module_unload", [=] { return cgc_module_unload(m); }},
      {"cgc_module_get_function", [=] { cgc_function_t out; return cgc_module_get_function(m, "k", &out); }},
      {"cgc_function_get_attribute", [=] { int v; return cgc_function_get_attribute(f, CGC_FUNC_NUM_REGS, &v); }},
      {"cgc_function_set_attribute",
       [=] { return cgc_function_set_attribute(f, CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0); }},
      {"cgc_launch_kernel", [=] { return cgc_launch_kernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr); }},
      // 1.2
      {"cgc_graph_kernel_node_set_enabled", [=] { return cgc_graph_kernel_node_set_enabled(g, 0, 0); }},
      {"cgc_graph_kernel_node_set_args", [=] { static void* none[1]; return cgc_graph_kernel_node_set_args(g, 0, none); }},
      {"cgc_capture_conditional_begin",
       [=] { static uint32_t c; cgc_stream_t b; return cgc_capture_conditional_begin(s, CGC_CONDITIONAL_IF, &c, &b); }},
      {"cgc_capture_conditional_end", [=] { return cgc_capture_conditional_end(s); }},
      // 1.3
      {"cgc_capture_conditional_begin_bodies",
       [=] {
         static uint32_t c;
         cgc_stream_t b[2];
         uint64_t h;
         return cgc_capture_conditional_begin_bodies(s, CGC_CONDITIONAL_IF, &c, 0, 2, b, &h);
       }},
  };
}

TEST(WorkArgs, NullHandlesAreInvalidArguments) {
  ExpectAll(CGC_ERROR_INVALID_ARGUMENT, WithHandles(nullptr, nullptr, nullptr, nullptr, nullptr));
}

TEST(WorkArgs, ForeignPointersAreInvalidHandles) {
  ExpectAll(CGC_ERROR_INVALID_HANDLE, WithHandles(Fake<cgc_context_t>(), Fake<cgc_stream_t>(), Fake<cgc_module_t>(),
                                                  Fake<cgc_function_t>(), Fake<cgc_graph_t>()));
}

TEST(WorkArgs, NullOutputsAreInvalidArgumentsAndOutputsAreCleared) {
  int i = 7;
  ExpectAll(CGC_ERROR_INVALID_ARGUMENT,
            {
                {"cgc_stream_priority_range", [&] { return cgc_stream_priority_range(Fake<cgc_context_t>(), &i, nullptr); }},
                {"cgc_stream_priority", [] { return cgc_stream_priority(Fake<cgc_stream_t>(), nullptr); }},
                {"cgc_stream_id", [] { return cgc_stream_id(Fake<cgc_stream_t>(), nullptr); }},
                {"cgc_stream_set_access_policy", [] { return cgc_stream_set_access_policy(Fake<cgc_stream_t>(), nullptr); }},
                {"cgc_stream_get_access_policy", [] { return cgc_stream_get_access_policy(Fake<cgc_stream_t>(), nullptr); }},
                {"cgc_host_alloc", [] { return cgc_host_alloc(Fake<cgc_context_t>(), 64, 0, nullptr); }},
                {"cgc_host_unregister", [] { return cgc_host_unregister(nullptr); }},
                {"cgc_module_load", [] { return cgc_module_load(Fake<cgc_context_t>(), "x", nullptr); }},
                {"cgc_module_get_function", [] { return cgc_module_get_function(Fake<cgc_module_t>(), "k", nullptr); }},
                {"cgc_function_get_attribute",
                 [] { return cgc_function_get_attribute(Fake<cgc_function_t>(), CGC_FUNC_NUM_REGS, nullptr); }},
            });
  EXPECT_EQ(i, 0) << "outputs are cleared on failure";
  cgc_module_t m = Fake<cgc_module_t>();
  EXPECT_EQ(cgc_module_load(nullptr, "x", &m), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  cgc_function_t f = Fake<cgc_function_t>();
  EXPECT_EQ(cgc_module_get_function(nullptr, "k", &f), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(f, nullptr);
  void* p = not_an_object;
  EXPECT_EQ(cgc_host_alloc(nullptr, 64, 0, &p), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cgc_host_free(nullptr), CGC_SUCCESS) << "like free(NULL)";
  int device = 5;
  void* native = not_an_object;
  EXPECT_EQ(cgc_stream_device(nullptr, &device, &native), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(device, -1);
  EXPECT_EQ(native, nullptr);
}

// Conditional begins clear their outputs on every failure, including the ones found before the
// stream is looked at (found by review: SWITCH through the 1.2 call, a NULL body array).
TEST(WorkArgs, ConditionalBeginsClearTheirOutputsWhenTheyFail) {
  static uint32_t c;
  cgc_stream_t body = Fake<cgc_stream_t>();
  EXPECT_EQ(cgc_capture_conditional_begin(Fake<cgc_stream_t>(), CGC_CONDITIONAL_SWITCH, &c, &body),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(body, nullptr);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_capture_conditional_begin_bodies"), std::string::npos)
      << cgc_last_error();
  uint64_t handle = 9;
  EXPECT_EQ(cgc_capture_conditional_begin_bodies(Fake<cgc_stream_t>(), CGC_CONDITIONAL_IF, &c, 0, 2, nullptr, &handle),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(handle, 0u);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_capture_conditional_begin_bodies: bodies is NULL"),
            std::string::npos)
      << cgc_last_error();
  cgc_stream_t bodies[2] = {Fake<cgc_stream_t>(), Fake<cgc_stream_t>()};
  EXPECT_EQ(cgc_capture_conditional_begin_bodies(nullptr, CGC_CONDITIONAL_IF, &c, 0, 2, bodies, &handle),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bodies[0], nullptr);
  EXPECT_EQ(bodies[1], nullptr);
}

// The release callback runs exactly once, also when the call fails before anything was queued:
// a binding frees its closure there and must never leak it or free it twice.
TEST(WorkArgs, AHostFunctionsReleaseRunsOnceWhenTheCallFails) {
  int released = 0;
  EXPECT_EQ(cgc_launch_host_func(nullptr, Nothing, &released, CountRelease), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(released, 1);
  EXPECT_EQ(cgc_launch_host_func(Fake<cgc_stream_t>(), Nothing, &released, CountRelease), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(released, 2);
  // A NULL function is refused (with the stream checked first, a fake stream answers first).
  EXPECT_EQ(cgc_launch_host_func(Fake<cgc_stream_t>(), nullptr, &released, CountRelease), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(released, 3);
}

}  // namespace

namespace {

// 1.2: a capture that updates a graph checks the graph given before anything reaches the driver.
TEST(WorkArgs, AnUpdateOfAForeignGraphIsRefusedBeforeTheDriver) {
  cgc_capture_options_t o = {};
  o.struct_size = sizeof o;
  o.update = Fake<cgc_graph_t>();
  // A fake stream answers first; the graph is checked after the stream is known to be one.
  EXPECT_EQ(cgc_capture_begin(Fake<cgc_stream_t>(), &o), CGC_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_capture_begin"), std::string::npos) << cgc_last_error();
}

}  // namespace
