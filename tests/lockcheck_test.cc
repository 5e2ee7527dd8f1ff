// The lock rule's check (src/lockcheck.h), without a GPU: what it lets through and what aborts.
#include <gtest/gtest.h>

#include "src/driver.h"
#include "src/lockcheck.h"

namespace {

class LockCheck : public ::testing::Test {
 protected:
  void SetUp() override { cgc__lock_check_on = true; }
};

TEST_F(LockCheck, LocksInOrderAndCallsThatNeverWaitPass) {
  cgc__lock_acquired(CGC__LOCK_RNG);
  cgc__lock_acquired(CGC__LOCK_REGISTRY);
  cgc__lock_check_call("cuStreamWaitEvent(stream, event, 0)");  // measured never to wait
  cgc__lock_check_call("cuStreamGetCaptureInfo");
  cgc__lock_released(CGC__LOCK_REGISTRY);
  cgc__lock_released(CGC__LOCK_RNG);
  cgc__lock_check_call("cuEventRecord(ev, stream)");  // no lock held: anything goes
  cgc__lock_acquired(CGC__LOCK_KERNELS);              // a cold lock: slow paths may wait under it
  cgc__lock_check_call("cuModuleLoadData(&module, image)");
  cgc__lock_released(CGC__LOCK_KERNELS);
}

TEST_F(LockCheck, ALockTakenOutOfOrderAborts) {
  EXPECT_DEATH(
      {
        cgc__lock_acquired(CGC__LOCK_REGISTRY);
        cgc__lock_acquired(CGC__LOCK_ALLOC);
      },
      "out of order");
}

TEST_F(LockCheck, ACallThatCanWaitUnderAHotLockAborts) {
  EXPECT_DEATH(
      {
        cgc__lock_acquired(CGC__LOCK_ALLOC);
        cgc__lock_check_call("cuEventRecord(ev, stream)");
      },
      "cuEventRecord, which can wait for the GPU, called while holding a device allocator's lock");
}

TEST_F(LockCheck, ADriverCallInsideAHostFunctionAborts) {
  EXPECT_DEATH(
      {
        cgc__host_function_depth = 1;
        cgc__lock_check_call("cuEventQuery(ev)");
      },
      "cuEventQuery called inside a host function");
}

}  // namespace
