// Where tests find the files they read (libcgc.so, capi/cgc.h): Bazel's runfiles tree, or the
// bundle's data folder (CGC_TEST_DATA, set by the bundle's runner on machines without Bazel).
#ifndef CGC_TESTS_TEST_DATA_H_
#define CGC_TESTS_TEST_DATA_H_

#include <cstdlib>
#include <string>

namespace cgc_test {

inline std::string DataPath(const std::string& relative) {
  if (const char* dir = std::getenv("CGC_TEST_DATA")) return std::string(dir) + "/" + relative;
  if (const char* dir = std::getenv("TEST_SRCDIR")) return std::string(dir) + "/cgc/" + relative;
  return relative;
}

}  // namespace cgc_test

#endif  // CGC_TESTS_TEST_DATA_H_
