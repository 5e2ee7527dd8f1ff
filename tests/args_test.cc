// Every entry point's NULL and invalid-argument paths: a clear status and a message naming the
// function, never a crash. Runs with or without a GPU (arguments are checked first).
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "capi/cgc.h"

namespace {

// Memory that is not a cgc object: its first word is no magic.
alignas(64) unsigned char not_an_object[256] = {0x5A};
template <typename T>
T Fake() {
  return reinterpret_cast<T>(not_an_object);
}

struct Case {
  const char* function;
  std::function<cgc_status_t()> call;
  cgc_status_t expected;
};

void ExpectAll(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    cgc_status_t st = c.call();
    EXPECT_EQ(st, c.expected) << c.function << ": " << cgc_last_error();
    EXPECT_NE(std::string(cgc_last_error()).find(c.function), std::string::npos)
        << "message does not name " << c.function << ": " << cgc_last_error();
  }
}

TEST(Args, NullHandlesAreInvalidArguments) {
  const cgc_status_t A = CGC_ERROR_INVALID_ARGUMENT;
  int i = 0;
  float f = 0;
  cgc_graph_t g = nullptr;
  cgc_stream_t s = nullptr;
  cgc_event_t e = nullptr;
  cgc_pool_t p = nullptr;
  cgc_capture_status_t cs;
  cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
  ExpectAll({
      {"cgc_context_destroy", [] { return cgc_context_destroy(nullptr); }, A},
      {"cgc_context_synchronize", [] { return cgc_context_synchronize(nullptr); }, A},
      {"cgc_stream_create", [&] { return cgc_stream_create(nullptr, 0, 0, &s); }, A},
      {"cgc_stream_wrap", [&] { return cgc_stream_wrap(nullptr, nullptr, &s); }, A},
      {"cgc_stream_destroy", [] { return cgc_stream_destroy(nullptr); }, A},
      {"cgc_stream_synchronize", [] { return cgc_stream_synchronize(nullptr); }, A},
      {"cgc_stream_query", [&] { return cgc_stream_query(nullptr, &i); }, A},
      {"cgc_stream_wait_event", [] { return cgc_stream_wait_event(nullptr, nullptr); }, A},
      {"cgc_event_create", [&] { return cgc_event_create(nullptr, 0, &e); }, A},
      {"cgc_event_destroy", [] { return cgc_event_destroy(nullptr); }, A},
      {"cgc_event_record", [] { return cgc_event_record(nullptr, nullptr); }, A},
      {"cgc_event_synchronize", [] { return cgc_event_synchronize(nullptr); }, A},
      {"cgc_event_query", [&] { return cgc_event_query(nullptr, &i); }, A},
      {"cgc_event_elapsed_ms", [&] { return cgc_event_elapsed_ms(nullptr, nullptr, &f); }, A},
      {"cgc_capture_begin", [] { return cgc_capture_begin(nullptr, nullptr); }, A},
      {"cgc_capture_end", [&] { return cgc_capture_end(nullptr, &g); }, A},
      {"cgc_capture", [&] { return cgc_capture(nullptr, nullptr, nullptr, nullptr, &g); }, A},
      {"cgc_stream_capture_status", [&] { return cgc_stream_capture_status(nullptr, &cs, nullptr); }, A},
      {"cgc_graph_launch", [] { return cgc_graph_launch(nullptr, nullptr); }, A},
      {"cgc_graph_upload", [] { return cgc_graph_upload(nullptr, nullptr); }, A},
      {"cgc_graph_info", [&] { return cgc_graph_info(nullptr, &info); }, A},
      {"cgc_graph_pool", [&] { return cgc_graph_pool(nullptr, &p); }, A},
      {"cgc_graph_debug_dump", [] { return cgc_graph_debug_dump(nullptr, "/tmp/x.dot"); }, A},
      {"cgc_graph_reset", [] { return cgc_graph_reset(nullptr); }, A},
      {"cgc_graph_destroy", [] { return cgc_graph_destroy(nullptr); }, A},
      {"cgc_pool_create", [&] { return cgc_pool_create(nullptr, &p); }, A},
      {"cgc_pool_retain", [] { return cgc_pool_retain(nullptr); }, A},
      {"cgc_pool_release", [] { return cgc_pool_release(nullptr); }, A},
      {"cgc_malloc", [&] { void* m; return cgc_malloc(nullptr, 16, nullptr, &m); }, A},
      {"cgc_record_stream", [] { return cgc_record_stream(nullptr, nullptr); }, A},
      {"cgc_empty_cache", [] { return cgc_empty_cache(nullptr); }, A},
      {"cgc_memory_stats", [&] { cgc_memory_stats_t ms = {sizeof ms, 0, 0, 0, 0, 0, 0}; return cgc_memory_stats(nullptr, nullptr, &ms); }, A},
      {"cgc_memory_snapshot", [] { size_t ns, nb; return cgc_memory_snapshot(nullptr, nullptr, 0, nullptr, 0, &ns, &nb); }, A},
      {"cgc_rng_create", [] { cgc_rng_t r; return cgc_rng_create(nullptr, 1, &r); }, A},
      {"cgc_rng_destroy", [] { return cgc_rng_destroy(nullptr); }, A},
      {"cgc_rng_uniform", [&] { float x; return cgc_rng_uniform(nullptr, &x, 1, nullptr); }, A},
      {"cgc_rng_normal", [&] { float x; return cgc_rng_normal(nullptr, &x, 1, 0.0f, 1.0f, nullptr); }, A},
      {"cgc_rng_get_state", [] { uint64_t a, b; return cgc_rng_get_state(nullptr, &a, &b); }, A},
      {"cgc_rng_set_state", [] { return cgc_rng_set_state(nullptr, 1, 0); }, A},
      {"cgc_get_api", [] { return cgc_get_api(CGC_VERSION, nullptr); }, A},
  });
  EXPECT_EQ(cgc_stream_native(nullptr), nullptr);
  EXPECT_EQ(cgc_graph_native(nullptr), nullptr);
  EXPECT_EQ(cgc_graph_native_exec(nullptr), nullptr);
}

TEST(Args, NullOutputsAreInvalidArgumentsAndOutputsAreCleared) {
  const cgc_status_t A = CGC_ERROR_INVALID_ARGUMENT;
  ExpectAll({
      {"cgc_device_count", [] { return cgc_device_count(nullptr); }, A},
      {"cgc_context_create", [] { return cgc_context_create(0, nullptr); }, A},
      {"cgc_stream_create", [] { return cgc_stream_create(nullptr, 0, 0, nullptr); }, A},
      {"cgc_stream_wrap", [] { return cgc_stream_wrap(nullptr, nullptr, nullptr); }, A},
      {"cgc_stream_query", [] { return cgc_stream_query(nullptr, nullptr); }, A},
      {"cgc_event_create", [] { return cgc_event_create(nullptr, 0, nullptr); }, A},
      {"cgc_event_query", [] { return cgc_event_query(nullptr, nullptr); }, A},
      {"cgc_event_elapsed_ms", [] { return cgc_event_elapsed_ms(nullptr, nullptr, nullptr); }, A},
      {"cgc_capture_end", [] { return cgc_capture_end(nullptr, nullptr); }, A},
      {"cgc_capture", [] { return cgc_capture(nullptr, nullptr, nullptr, nullptr, nullptr); }, A},
      {"cgc_stream_capture_status", [] { return cgc_stream_capture_status(nullptr, nullptr, nullptr); }, A},
      {"cgc_capture_mode_exchange", [] { return cgc_capture_mode_exchange(nullptr); }, A},
      {"cgc_graph_info", [] { return cgc_graph_info(nullptr, nullptr); }, A},
      {"cgc_graph_pool", [] { return cgc_graph_pool(nullptr, nullptr); }, A},
      {"cgc_pool_create", [] { return cgc_pool_create(nullptr, nullptr); }, A},
      {"cgc_malloc", [] { return cgc_malloc(nullptr, 16, nullptr, nullptr); }, A},
      {"cgc_memory_stats", [] { return cgc_memory_stats(nullptr, nullptr, nullptr); }, A},
      {"cgc_memory_snapshot", [] { size_t nb; return cgc_memory_snapshot(nullptr, nullptr, 0, nullptr, 0, nullptr, &nb); }, A},
      {"cgc_memory_snapshot", [] { size_t ns; return cgc_memory_snapshot(nullptr, nullptr, 0, nullptr, 0, &ns, nullptr); }, A},
  });
  cgc_context_t c = Fake<cgc_context_t>();
  EXPECT_EQ(cgc_stream_create(nullptr, 0, 0, reinterpret_cast<cgc_stream_t*>(&c)), A);
  EXPECT_EQ(c, nullptr) << "an output handle is NULL after a failure";
  cgc_graph_t g = Fake<cgc_graph_t>();
  EXPECT_EQ(cgc_capture_end(nullptr, &g), A);
  EXPECT_EQ(g, nullptr);
}

TEST(Args, ForeignPointersAreInvalidHandles) {
  const cgc_status_t H = CGC_ERROR_INVALID_HANDLE;
  int i = 0;
  float f = 0;
  cgc_stream_t s = nullptr;
  cgc_event_t e = nullptr;
  cgc_graph_t g = nullptr;
  cgc_capture_status_t cs;
  cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
  ExpectAll({
      {"cgc_context_destroy", [] { return cgc_context_destroy(Fake<cgc_context_t>()); }, H},
      {"cgc_context_synchronize", [] { return cgc_context_synchronize(Fake<cgc_context_t>()); }, H},
      {"cgc_stream_create", [&] { return cgc_stream_create(Fake<cgc_context_t>(), 0, 0, &s); }, H},
      {"cgc_stream_wrap", [&] { return cgc_stream_wrap(Fake<cgc_context_t>(), nullptr, &s); }, H},
      {"cgc_stream_destroy", [] { return cgc_stream_destroy(Fake<cgc_stream_t>()); }, H},
      {"cgc_stream_synchronize", [] { return cgc_stream_synchronize(Fake<cgc_stream_t>()); }, H},
      {"cgc_stream_query", [&] { return cgc_stream_query(Fake<cgc_stream_t>(), &i); }, H},
      {"cgc_stream_wait_event", [] { return cgc_stream_wait_event(Fake<cgc_stream_t>(), Fake<cgc_event_t>()); }, H},
      {"cgc_event_create", [&] { return cgc_event_create(Fake<cgc_context_t>(), 0, &e); }, H},
      {"cgc_event_destroy", [] { return cgc_event_destroy(Fake<cgc_event_t>()); }, H},
      {"cgc_event_record", [] { return cgc_event_record(Fake<cgc_event_t>(), Fake<cgc_stream_t>()); }, H},
      {"cgc_event_synchronize", [] { return cgc_event_synchronize(Fake<cgc_event_t>()); }, H},
      {"cgc_event_query", [&] { return cgc_event_query(Fake<cgc_event_t>(), &i); }, H},
      {"cgc_event_elapsed_ms", [&] { return cgc_event_elapsed_ms(Fake<cgc_event_t>(), Fake<cgc_event_t>(), &f); }, H},
      {"cgc_capture_begin", [] { return cgc_capture_begin(Fake<cgc_stream_t>(), nullptr); }, H},
      {"cgc_capture_end", [&] { return cgc_capture_end(Fake<cgc_stream_t>(), &g); }, H},
      {"cgc_stream_capture_status", [&] { return cgc_stream_capture_status(Fake<cgc_stream_t>(), &cs, nullptr); }, H},
      {"cgc_graph_launch", [] { return cgc_graph_launch(Fake<cgc_graph_t>(), Fake<cgc_stream_t>()); }, H},
      {"cgc_graph_upload", [] { return cgc_graph_upload(Fake<cgc_graph_t>(), Fake<cgc_stream_t>()); }, H},
      {"cgc_graph_info", [&] { return cgc_graph_info(Fake<cgc_graph_t>(), &info); }, H},
      {"cgc_graph_debug_dump", [] { return cgc_graph_debug_dump(Fake<cgc_graph_t>(), "/tmp/x.dot"); }, H},
      {"cgc_graph_reset", [] { return cgc_graph_reset(Fake<cgc_graph_t>()); }, H},
      {"cgc_graph_destroy", [] { return cgc_graph_destroy(Fake<cgc_graph_t>()); }, H},
      {"cgc_pool_create", [] { cgc_pool_t p; return cgc_pool_create(Fake<cgc_context_t>(), &p); }, H},
      {"cgc_pool_retain", [] { return cgc_pool_retain(Fake<cgc_pool_t>()); }, H},
      {"cgc_pool_release", [] { return cgc_pool_release(Fake<cgc_pool_t>()); }, H},
      {"cgc_malloc", [] { void* m; return cgc_malloc(Fake<cgc_context_t>(), 16, Fake<cgc_stream_t>(), &m); }, H},
      {"cgc_record_stream", [] { return cgc_record_stream(not_an_object, Fake<cgc_stream_t>()); }, H},
      {"cgc_empty_cache", [] { return cgc_empty_cache(Fake<cgc_context_t>()); }, H},
      {"cgc_memory_stats", [] { cgc_memory_stats_t ms = {sizeof ms, 0, 0, 0, 0, 0, 0}; return cgc_memory_stats(Fake<cgc_context_t>(), nullptr, &ms); }, H},
      {"cgc_memory_snapshot", [] { size_t ns, nb; return cgc_memory_snapshot(Fake<cgc_context_t>(), nullptr, 0, nullptr, 0, &ns, &nb); }, H},
      {"cgc_rng_create", [] { cgc_rng_t r; return cgc_rng_create(Fake<cgc_context_t>(), 1, &r); }, H},
      {"cgc_rng_destroy", [] { return cgc_rng_destroy(Fake<cgc_rng_t>()); }, H},
      {"cgc_rng_uniform", [] { float x; return cgc_rng_uniform(Fake<cgc_rng_t>(), &x, 1, Fake<cgc_stream_t>()); }, H},
      {"cgc_rng_get_state", [] { uint64_t a, b; return cgc_rng_get_state(Fake<cgc_rng_t>(), &a, &b); }, H},
      {"cgc_rng_set_state", [] { return cgc_rng_set_state(Fake<cgc_rng_t>(), 1, 0); }, H},
  });
  EXPECT_EQ(cgc_stream_native(Fake<cgc_stream_t>()), nullptr);
  EXPECT_EQ(cgc_graph_native(Fake<cgc_graph_t>()), nullptr);
  EXPECT_EQ(cgc_graph_native_exec(Fake<cgc_graph_t>()), nullptr);
}

TEST(Args, FreeingWhatCgcDidNotAllocateIsRefused) {
  EXPECT_EQ(cgc_free(not_an_object), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_free"), std::string::npos);
  EXPECT_NE(std::string(cgc_last_error()).find("not allocated by cgc_malloc"), std::string::npos);
  EXPECT_EQ(cgc_free(nullptr), CGC_SUCCESS);
  cgc_torch_free(not_an_object, 16, 0, nullptr);  // no status to return: must simply not crash
}

TEST(Args, OutOfRangeValuesAreInvalidArguments) {
  cgc_capture_mode_t bad = static_cast<cgc_capture_mode_t>(3);
  EXPECT_EQ(cgc_capture_mode_exchange(&bad), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cgc_last_error()).find("*mode is 3"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(bad, 3) << "the mode is untouched on failure";
}

// Issue 11, item 6: a handle is read before any lock is taken. A runtime that recovers from
// faults (Go, the JVM, a crash handler) and goes on must find cgc usable, not a lock left held
// by the call that faulted.
sigjmp_buf fault_jump;
void JumpBack(int) { siglongjmp(fault_jump, 1); }

TEST(Args, AnUnreadableHandleFaultsBeforeAnyLockIsTaken) {
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  struct sigaction jump = {}, previous = {};
  jump.sa_handler = JumpBack;
  sigemptyset(&jump.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &jump, &previous), 0);
  int recovered = 0;
  for (int call = 0; call < 2; call++) {
    auto finished = std::make_shared<std::atomic<bool>>(false);
    std::thread t([&recovered, finished, page] {
      if (sigsetjmp(fault_jump, 1) == 0)
        cgc_pool_retain(static_cast<cgc_pool_t>(page));
      else
        recovered++;
      *finished = true;
    });
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!*finished && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!*finished) {
      t.detach();  // it spins on the lock the first call left held: let the process end it
      ADD_FAILURE() << "call " << call << " hung: the faulting call had left a lock held";
      break;
    }
    t.join();
  }
  sigaction(SIGSEGV, &previous, nullptr);
  EXPECT_EQ(recovered, 2);
}

}  // namespace
