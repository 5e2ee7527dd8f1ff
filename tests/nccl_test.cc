// NCCL entry points without a GPU. With CGC_NCCL_LIBRARY pointing at a missing file, every NCCL
// function returns CGC_ERROR_NCCL_UNAVAILABLE and says how to fix it, whatever its arguments.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "capi/cgc.h"

namespace {

class NoNcclEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { setenv("CGC_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1); }
};
::testing::Environment* const no_nccl = ::testing::AddGlobalTestEnvironment(new NoNcclEnvironment);

void ExpectUnavailable(cgc_status_t st, const char* function) {
  EXPECT_EQ(st, CGC_ERROR_NCCL_UNAVAILABLE) << function << ": " << cgc_last_error();
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find(function), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/libnccl.so.2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CGC_NCCL_LIBRARY"), std::string::npos) << msg;
}

TEST(NcclUnavailable, EveryEntryPointSaysSo) {
  int v = 0;
  cgc_comm_id_t id;
  cgc_comm_t comm = nullptr;
  int buf = 0;
  ExpectUnavailable(cgc_nccl_version(&v), "cgc_nccl_version");
  ExpectUnavailable(cgc_nccl_version(nullptr), "cgc_nccl_version");
  ExpectUnavailable(cgc_comm_unique_id(&id), "cgc_comm_unique_id");
  ExpectUnavailable(cgc_comm_create(nullptr, 2, &id, 0, &comm), "cgc_comm_create");
  EXPECT_EQ(comm, nullptr);
  ExpectUnavailable(cgc_comm_destroy(nullptr), "cgc_comm_destroy");
  ExpectUnavailable(cgc_comm_abort(nullptr), "cgc_comm_abort");
  ExpectUnavailable(cgc_all_reduce(nullptr, &buf, &buf, 1, CGC_INT32, CGC_SUM, nullptr), "cgc_all_reduce");
  ExpectUnavailable(cgc_all_gather(nullptr, &buf, &buf, 1, CGC_INT32, nullptr), "cgc_all_gather");
  ExpectUnavailable(cgc_reduce_scatter(nullptr, &buf, &buf, 1, CGC_INT32, CGC_SUM, nullptr), "cgc_reduce_scatter");
  ExpectUnavailable(cgc_broadcast(nullptr, &buf, &buf, 1, CGC_INT32, 0, nullptr), "cgc_broadcast");
  ExpectUnavailable(cgc_send(nullptr, &buf, 1, CGC_INT32, 1, nullptr), "cgc_send");
  ExpectUnavailable(cgc_recv(nullptr, &buf, 1, CGC_INT32, 1, nullptr), "cgc_recv");
  ExpectUnavailable(cgc_group_start(), "cgc_group_start");
  ExpectUnavailable(cgc_group_end(), "cgc_group_end");
}

}  // namespace
