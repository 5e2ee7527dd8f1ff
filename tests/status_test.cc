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
