// NCCL entry points with the real libnccl.so.2 where it can be found (CI's CUDA toolkit ships
// one), still without a GPU: the version gate and argument checks.
#include <gtest/gtest.h>

#include <string>

#include "capi/cgc.h"

// Under CI's AddressSanitizer run: NCCL 2.28 keeps the job record of an empty
// ncclGroupStart/ncclGroupEnd pair (160 bytes, in ncclGroupEndInternal) until exit. It is NCCL's
// allocation, not cgc's, so LeakSanitizer is told to skip allocations made inside libnccl.
extern "C" const char* __lsan_default_suppressions() { return "leak:libnccl.so\n"; }

namespace {

alignas(64) unsigned char not_an_object[256] = {0x5A};

class NcclArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    int v = 0;
    if (cgc_nccl_version(&v) != CGC_SUCCESS) GTEST_SKIP() << "skipped: no NCCL here: " << cgc_last_error();
    version_ = v;
  }
  int version_ = 0;
};

TEST_F(NcclArgs, VersionIsNewEnoughForCapture) { EXPECT_GE(version_, 20906); }

TEST_F(NcclArgs, NullAndForeignArgumentsAreRefused) {
  int buf = 0;
  cgc_comm_t comm = reinterpret_cast<cgc_comm_t>(not_an_object);
  cgc_comm_id_t id = {};
  cgc_comm_t out = comm;
  EXPECT_EQ(cgc_nccl_version(nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_comm_unique_id(nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_comm_create(nullptr, 2, &id, 0, &out), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(cgc_comm_create(reinterpret_cast<cgc_context_t>(not_an_object), 2, &id, 0, &out),
            CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_comm_destroy(nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_comm_destroy(comm), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_comm_abort(comm), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_all_reduce(nullptr, &buf, &buf, 1, CGC_INT32, CGC_SUM, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_all_reduce(comm, &buf, &buf, 1, CGC_INT32, CGC_SUM, nullptr), CGC_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_all_reduce"), std::string::npos);
  EXPECT_EQ(cgc_all_gather(comm, &buf, &buf, 1, CGC_INT32, nullptr), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_reduce_scatter(comm, &buf, &buf, 1, CGC_INT32, CGC_SUM, nullptr), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_broadcast(comm, &buf, &buf, 1, CGC_INT32, 0, nullptr), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_send(comm, &buf, 1, CGC_INT32, 1, nullptr), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cgc_recv(comm, &buf, 1, CGC_INT32, 1, nullptr), CGC_ERROR_INVALID_HANDLE);
}

TEST_F(NcclArgs, NcclPoolCreationRefusesBadArgumentsAndChangesNothing) {
  cgc_comm_t comm = reinterpret_cast<cgc_comm_t>(not_an_object);
  cgc_pool_t pool = reinterpret_cast<cgc_pool_t>(not_an_object);
  cgc_nccl_memory_t got = CGC_NCCL_MEMORY_SYMMETRIC;
  EXPECT_EQ(cgc_nccl_pool_create(comm, 1 << 20, CGC_NCCL_MEMORY_SYMMETRIC, nullptr, &got), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_nccl_pool_create"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_nccl_pool_create(nullptr, 1 << 20, CGC_NCCL_MEMORY_SYMMETRIC, &pool, &got), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(pool, nullptr) << "out is cleared on failure";
  pool = reinterpret_cast<cgc_pool_t>(not_an_object);
  EXPECT_EQ(cgc_nccl_pool_create(comm, 1 << 20, CGC_NCCL_MEMORY_REGISTERED, &pool, &got), CGC_ERROR_INVALID_HANDLE);
  EXPECT_EQ(pool, nullptr);
  EXPECT_EQ(got, CGC_NCCL_MEMORY_SYMMETRIC) << "got is written only on success";
}

TEST_F(NcclArgs, PoolMallocRefusesBadHandles) {
  void* out = &out;
  cgc_pool_t pool = reinterpret_cast<cgc_pool_t>(not_an_object);
  cgc_stream_t stream = reinterpret_cast<cgc_stream_t>(not_an_object);
  EXPECT_EQ(cgc_pool_malloc(pool, 512, stream, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_pool_malloc(nullptr, 512, stream, &out), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(cgc_pool_malloc(pool, 512, stream, &out), CGC_ERROR_INVALID_HANDLE);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_pool_malloc"), std::string::npos) << cgc_last_error();
}

TEST_F(NcclArgs, GroupCallsPassThrough) {
  EXPECT_EQ(cgc_group_start(), CGC_SUCCESS) << cgc_last_error();
  EXPECT_EQ(cgc_group_end(), CGC_SUCCESS) << cgc_last_error();
}

}  // namespace
