// Status codes and messages (no GPU needed).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>

#include "capi/cgc.h"

namespace {

TEST(Status, EveryCodeHasItsOwnNamedString) {
  std::set<std::string> seen;
  for (int s = CGC_SUCCESS; s <= CGC_ERROR_INTERNAL; s++) {
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

}  // namespace
