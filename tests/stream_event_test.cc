// Streams and events on a real GPU: owned and borrowed streams, queries, timing, waits,
// context handles.
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::GpuTest;

class StreamEvent : public GpuTest {};

TEST_F(StreamEvent, BorrowedStreamCapturesAndSurvivesItsHandle) {
  CUstream raw = nullptr;
  CU_ASSERT_OK(cuStreamCreateWithPriority(&raw, CU_STREAM_NON_BLOCKING, 0));
  cgc_stream_t s = nullptr;
  CGC_ASSERT_OK(cgc_stream_wrap(ctx, raw, &s));
  EXPECT_EQ(cgc_stream_native(s), raw);
  CUdeviceptr p = Alloc(1024 * 4);
  CGC_ASSERT_OK(cgc_capture_begin(s, nullptr));
  Fill(s, p, 8.0f, 1024);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(s, &g));
  CGC_ASSERT_OK(cgc_graph_launch(g, s));
  CGC_ASSERT_OK(cgc_stream_synchronize(s));
  EXPECT_EQ(Download(p, 1024)[100], 8.0f);
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(s));
  // The stream is still the caller's: it works, and destroying it is the caller's job.
  EXPECT_EQ(cgc__drv.cuStreamQuery(raw), CUDA_SUCCESS);
  CU_ASSERT_OK(cuStreamDestroy(raw));
}

TEST_F(StreamEvent, WrappingTheLegacyStreamSpelledAsCudaStreamLegacyWorks) {
  cgc_stream_t s = nullptr;
  CGC_ASSERT_OK(cgc_stream_wrap(ctx, reinterpret_cast<void*>(0x1), &s));
  EXPECT_EQ(cgc_stream_native(s), nullptr);
  CGC_ASSERT_OK(cgc_stream_synchronize(s));
  CGC_ASSERT_OK(cgc_stream_destroy(s));
}

// Issue 11, item 4: the per-thread stream is resolved through the current context, which a
// thread that never touched CUDA does not have.
TEST_F(StreamEvent, PerThreadStreamWorksFromAThreadWithNoCurrentContext) {
  cgc_stream_t s = nullptr;
  CGC_ASSERT_OK(cgc_stream_wrap(ctx, reinterpret_cast<void*>(0x2) /* cudaStreamPerThread */, &s));
  EXPECT_EQ(cgc_stream_native(s), reinterpret_cast<void*>(0x2));
  cgc_status_t st[4];
  std::string why;
  std::thread t([&] {
    CUcontext current = reinterpret_cast<CUcontext>(0x1);
    cgc__drv.cuCtxGetCurrent(&current);
    st[0] = current == nullptr ? CGC_SUCCESS : CGC_ERROR_INTERNAL;  // the premise
    st[1] = cgc_stream_synchronize(s);
    int done = 0;
    st[2] = cgc_stream_query(s, &done);
    void* p = nullptr;
    st[3] = cgc_malloc(ctx, 1024, s, &p);
    why = cgc_last_error();
    if (p != nullptr) cgc_free(p);
  });
  t.join();
  for (int i = 0; i < 4; i++) EXPECT_EQ(st[i], CGC_SUCCESS) << i << ": " << why;
  CGC_ASSERT_OK(cgc_stream_destroy(s));
}

TEST_F(StreamEvent, QueryReportsRunningThenComplete) {
  cgc_event_t ev = nullptr;
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &ev));
  Spin(stream, 200LL * 1000 * 1000);  // ~0.1 s at GPU clocks
  CGC_ASSERT_OK(cgc_event_record(ev, stream));
  int done = -1;
  CGC_ASSERT_OK(cgc_stream_query(stream, &done));
  EXPECT_EQ(done, 0);
  CGC_ASSERT_OK(cgc_event_query(ev, &done));
  EXPECT_EQ(done, 0);
  CGC_ASSERT_OK(cgc_event_synchronize(ev));
  CGC_ASSERT_OK(cgc_event_query(ev, &done));
  EXPECT_EQ(done, 1);
  CGC_ASSERT_OK(cgc_stream_query(stream, &done));
  EXPECT_EQ(done, 1);
  CGC_ASSERT_OK(cgc_event_destroy(ev));
}

TEST_F(StreamEvent, TimingEventsMeasureElapsedTime) {
  cgc_event_t a = nullptr, b = nullptr;
  CGC_ASSERT_OK(cgc_event_create(ctx, CGC_EVENT_TIMING, &a));
  CGC_ASSERT_OK(cgc_event_create(ctx, CGC_EVENT_TIMING, &b));
  CGC_ASSERT_OK(cgc_event_record(a, stream));
  Spin(stream, 20LL * 1000 * 1000);
  CGC_ASSERT_OK(cgc_event_record(b, stream));
  CGC_ASSERT_OK(cgc_event_synchronize(b));
  float ms = -1;
  CGC_ASSERT_OK(cgc_event_elapsed_ms(a, b, &ms));
  EXPECT_GT(ms, 0.0f);
  // Events without CGC_EVENT_TIMING cannot be timed; the driver's error is passed on.
  cgc_event_t plain = nullptr;
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &plain));
  CGC_ASSERT_OK(cgc_event_record(plain, stream));
  CGC_ASSERT_OK(cgc_event_synchronize(plain));
  EXPECT_EQ(cgc_event_elapsed_ms(a, plain, &ms), CGC_ERROR_CUDA);
  EXPECT_NE(std::string(cgc_last_error()).find("cuEventElapsedTime"), std::string::npos) << cgc_last_error();
  for (cgc_event_t e : {a, b, plain}) CGC_ASSERT_OK(cgc_event_destroy(e));
}

TEST_F(StreamEvent, WaitEventOrdersWorkAcrossStreams) {
  cgc_stream_t other = nullptr;
  cgc_event_t ev = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, -1, &other));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &ev));
  CUdeviceptr p = Alloc(4096 * 4);
  Spin(stream, 50LL * 1000 * 1000);
  Fill(stream, p, 1.0f, 4096);
  CGC_ASSERT_OK(cgc_event_record(ev, stream));
  CGC_ASSERT_OK(cgc_stream_wait_event(other, ev));
  Axpb(other, p, 3.0f, 0.0f, 4096);  // must see the fill
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  EXPECT_EQ(Download(p, 4096)[4095], 3.0f);
  CGC_ASSERT_OK(cgc_event_destroy(ev));
  CGC_ASSERT_OK(cgc_stream_destroy(other));
}

TEST_F(StreamEvent, ObjectsOutliveTheirContextHandle) {
  cgc_context_t c2 = nullptr;
  cgc_stream_t s = nullptr;
  CGC_ASSERT_OK(cgc_context_create(0, &c2));
  CGC_ASSERT_OK(cgc_stream_create(c2, 0, 0, &s));
  CGC_ASSERT_OK(cgc_context_destroy(c2));
  EXPECT_EQ(cgc_context_destroy(c2), CGC_ERROR_INVALID_HANDLE);
  CGC_ASSERT_OK(cgc_stream_synchronize(s));
  CGC_ASSERT_OK(cgc_stream_destroy(s));
  EXPECT_EQ(cgc_stream_destroy(s), CGC_ERROR_INVALID_HANDLE);
}

TEST_F(StreamEvent, ContextCallsLeaveTheCallersCurrentContextAlone) {
  CUcontext before = nullptr, after = nullptr;
  CUcontext popped = nullptr;
  CU_ASSERT_OK(cuCtxPopCurrent(&popped));  // nothing current now (the fixture pushed one)
  CU_ASSERT_OK(cuCtxGetCurrent(&before));
  cgc_stream_t s = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, 0, 0, &s));
  CGC_ASSERT_OK(cgc_context_synchronize(ctx));
  CU_ASSERT_OK(cuCtxGetCurrent(&after));
  EXPECT_EQ(before, after);
  CGC_ASSERT_OK(cgc_stream_destroy(s));
  CU_ASSERT_OK(cuCtxPushCurrent(popped));
}

TEST_F(StreamEvent, DeviceOutOfRangeIsInvalidArgument) {
  int count = 0;
  CGC_ASSERT_OK(cgc_device_count(&count));
  EXPECT_GE(count, 1);
  cgc_context_t c = reinterpret_cast<cgc_context_t>(0x1);
  EXPECT_EQ(cgc_context_create(count, &c), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(cgc_last_error()).find("does not exist"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_context_create(-1, &c), CGC_ERROR_INVALID_ARGUMENT);
}

TEST_F(StreamEvent, UnknownFlagsAreInvalidArguments) {
  cgc_stream_t s = nullptr;
  EXPECT_EQ(cgc_stream_create(ctx, 0x80, 0, &s), CGC_ERROR_INVALID_ARGUMENT);
  cgc_event_t e = nullptr;
  EXPECT_EQ(cgc_event_create(ctx, 0x80, &e), CGC_ERROR_INVALID_ARGUMENT);
  cgc_capture_options_t o = {sizeof o, static_cast<cgc_capture_mode_t>(7), nullptr, 0};
  EXPECT_EQ(cgc_capture_begin(stream, &o), CGC_ERROR_INVALID_ARGUMENT);
  o = {sizeof o, CGC_CAPTURE_MODE_GLOBAL, nullptr, 0x100};
  EXPECT_EQ(cgc_capture_begin(stream, &o), CGC_ERROR_INVALID_ARGUMENT);
  o = {0, CGC_CAPTURE_MODE_GLOBAL, nullptr, 0};
  EXPECT_EQ(cgc_capture_begin(stream, &o), CGC_ERROR_INVALID_ARGUMENT);
  cgc_capture_status_t st;
  CGC_ASSERT_OK(cgc_stream_capture_status(stream, &st, nullptr));
  EXPECT_EQ(st, CGC_CAPTURE_NONE);
}

}  // namespace
