// Status codes and messages (no GPU needed).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "capi/cgc.h"

// status.c's helpers, which every failure and warning of the library goes through: no call that
// warns can be made without a GPU, so the warning rule is tested on them directly.
extern "C" {
cgc_status_t cgc__fail(cgc_status_t status, const char* func, const char* fmt, ...);
void cgc__warn(const char* func, const char* fmt, ...);
void cgc__append(const char* fmt, ...);
}

namespace {

TEST(Status, EveryCodeHasItsOwnNamedString) {
  std::set<std::string> seen;
  for (int s = CGC_SUCCESS; s <= CGC_ERROR_SAVED_MISMATCH; s++) {
    const char* text = cgc_status_string(static_cast<cgc_status_t>(s));
    ASSERT_NE(text, nullptr);
    EXPECT_EQ(std::string(text).rfind("CGC_", 0), 0u) << text;
    EXPECT_TRUE(seen.insert(text).second) << "duplicate string " << text;
  }
  EXPECT_NE(std::string(cgc_status_string(CGC_ERROR_CAPTURE_UNJOINED)).find("CGC_ERROR_CAPTURE_UNJOINED"),
            std::string::npos);
}

TEST(Status, UnknownCodeStillGetsAString) {
  const char* text = cgc_status_string(static_cast<cgc_status_t>(999));
  ASSERT_NE(text, nullptr);
  EXPECT_NE(std::string(text).find("UNKNOWN"), std::string::npos);
}

TEST(Status, VersionMatchesTheHeader) {
  EXPECT_EQ(cgc_version(), uint32_t(CGC_VERSION));
  EXPECT_EQ(cgc_version() >> 16, uint32_t(CGC_VERSION_MAJOR));
}

TEST(Status, LastErrorIsThreadLocalAndNamesTheFunction) {
  std::string mine;
  std::thread([&] {
    EXPECT_STREQ(cgc_last_error(), "");  // a fresh thread has no message
    EXPECT_EQ(cgc_stream_synchronize(nullptr), CGC_ERROR_INVALID_ARGUMENT);
    mine = cgc_last_error();
  }).join();
  EXPECT_NE(mine.find("cgc_stream_synchronize"), std::string::npos) << mine;
  EXPECT_NE(mine.find("stream is NULL"), std::string::npos) << mine;
  std::thread([&] { EXPECT_STREQ(cgc_last_error(), ""); }).join();
}

// 1.6: after a failed call cgc_last_status() is the status it returned, on each thread apart: a
// failure on one thread changes neither the message nor the status of another.
TEST(Status, LastStatusIsTheFailedCallsStatusAndThreadLocal) {
  cgc_status_t first_fresh = CGC_ERROR_INTERNAL, second_fresh = CGC_ERROR_INTERNAL;
  cgc_status_t first_status = CGC_SUCCESS, second_status = CGC_SUCCESS;
  cgc_status_t first_after = CGC_SUCCESS, second_after = CGC_SUCCESS;
  std::string first_message, second_message;
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;  // 1: the first thread failed; 2: the second thread failed
  auto wait_for = [&](int s) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return step >= s; });
  };
  auto advance = [&](int s) {
    std::lock_guard<std::mutex> lock(mu);
    step = s;
    cv.notify_all();
  };
  std::thread first([&] {
    first_fresh = cgc_last_status();  // nothing failed on this thread yet
    first_status = cgc_stream_synchronize(nullptr);
    advance(1);
    wait_for(2);  // the other thread's failure, of another status, happened meanwhile
    first_after = cgc_last_status();
    first_message = cgc_last_error();
  });
  std::thread second([&] {
    wait_for(1);
    second_fresh = cgc_last_status();  // the first thread's failure is not this thread's
    const cgc_api_t* api = nullptr;
    second_status = cgc_get_api((CGC_VERSION_MAJOR + 1) << 16, &api);
    second_after = cgc_last_status();
    second_message = cgc_last_error();
    advance(2);
  });
  first.join();
  second.join();
  EXPECT_EQ(first_fresh, CGC_SUCCESS);
  EXPECT_EQ(second_fresh, CGC_SUCCESS);
  EXPECT_EQ(first_status, CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(first_after, first_status);
  EXPECT_NE(first_message.find("cgc_stream_synchronize"), std::string::npos) << first_message;
  EXPECT_EQ(second_status, CGC_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(second_after, second_status);
  EXPECT_NE(second_message.find("cgc_get_api"), std::string::npos) << second_message;
}

// 1.6: a successful call changes neither the message nor the status; the next failure sets both.
TEST(Status, LastStatusKeepsThroughSuccessesAndFollowsTheNextFailure) {
  std::thread([] {
    EXPECT_EQ(cgc_graph_destroy(nullptr), CGC_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(cgc_last_status(), CGC_ERROR_INVALID_ARGUMENT);
    std::string message = cgc_last_error();
    const cgc_api_t* table = nullptr;
    ASSERT_EQ(cgc_get_api(CGC_VERSION, &table), CGC_SUCCESS);
    EXPECT_EQ(cgc_free(nullptr), CGC_SUCCESS);
    EXPECT_EQ(cgc_last_status(), CGC_ERROR_INVALID_ARGUMENT) << "a success leaves the status";
    EXPECT_EQ(cgc_last_error(), message) << "and the message";
    const cgc_api_t* newer = nullptr;
    EXPECT_EQ(cgc_get_api(CGC_VERSION + (1 << 8), &newer), CGC_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(cgc_last_status(), CGC_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(table->cgc_last_status, &cgc_last_status) << "the table's 1.6 entry";
  }).join();
}

// 1.6: the status always goes with the message: a warning (a call that succeeded) replaces the
// message and resets the status; detail appended to a failure's message keeps its status.
TEST(Status, LastStatusGoesWithTheMessage) {
  std::thread([] {
    EXPECT_EQ(cgc__fail(CGC_ERROR_OUT_OF_MEMORY, "cgc_test_call", "out of %s", "memory"), CGC_ERROR_OUT_OF_MEMORY);
    cgc__append("; %s", "detail");
    EXPECT_EQ(cgc_last_status(), CGC_ERROR_OUT_OF_MEMORY);
    EXPECT_STREQ(cgc_last_error(), "cgc_test_call: out of memory; detail");
    cgc__warn("cgc_test_call", "%s", "said, not failed");
    EXPECT_EQ(cgc_last_status(), CGC_SUCCESS) << cgc_last_error();
    EXPECT_STREQ(cgc_last_error(), "cgc_test_call: warning: said, not failed");
    cgc__append("; more");
    EXPECT_EQ(cgc_last_status(), CGC_SUCCESS) << cgc_last_error();
    EXPECT_EQ(cgc__fail(CGC_ERROR_CUDA, "cgc_test_call", "again"), CGC_ERROR_CUDA);
    EXPECT_EQ(cgc_last_status(), CGC_ERROR_CUDA);
    EXPECT_STREQ(cgc_last_error(), "cgc_test_call: again");
  }).join();
}

}  // namespace

// A caller built against an older minor version (1.0, 1.1) gets the table, whose prefix is what
// it knows; a newer minor version or another major version is refused, saying why.
TEST(Status, TheTableServesOlderMinorVersionsAndRefusesNewerOnes) {
  const cgc_api_t* api = nullptr;
  for (uint32_t minor = 0; minor <= CGC_VERSION_MINOR; minor++) {
    api = nullptr;
    ASSERT_EQ(cgc_get_api((CGC_VERSION_MAJOR << 16) | (minor << 8), &api), CGC_SUCCESS) << "1." << minor;
    ASSERT_NE(api, nullptr);
    EXPECT_EQ(api->struct_size, sizeof(cgc_api_t));
    EXPECT_EQ(api->cgc_version, &cgc_version) << "1.0's first entry is where 1.0 put it";
  }
  EXPECT_EQ(cgc_get_api((CGC_VERSION_MAJOR << 16) | ((CGC_VERSION_MINOR + 1) << 8), &api), CGC_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(api, nullptr);
  EXPECT_NE(std::string(cgc_last_error()).find("older"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_get_api((CGC_VERSION_MAJOR + 1) << 16, &api), CGC_ERROR_NOT_SUPPORTED);
}
