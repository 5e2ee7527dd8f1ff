// The caching allocator outside captures, on a real GPU: reuse, stream ordering, record_stream,
// bad frees, empty_cache, the out-of-memory retry, the PyTorch entry points, and a stress test
// from 8 threads on 4 streams that checks every block's contents.
#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;
using cgc_test::MemoryTest;

using Allocator = MemoryTest;

TEST_F(Allocator, FreedBlockIsReusedOnItsStreamWithoutTheDriver) {
  void* a = Malloc(1000, stream);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 512, 0u);
  cgc_memory_stats_t s1 = Stats();
  EXPECT_EQ(s1.bytes_allocated - baseline_.bytes_allocated, 1024u);
  EXPECT_EQ(s1.num_driver_allocs - baseline_.num_driver_allocs, 1u);
  EXPECT_EQ(s1.bytes_reserved - baseline_.bytes_reserved, size_t(2) << 20);  // one small segment
  CGC_ASSERT_OK(cgc_free(a));
  void* b = Malloc(900, stream);
  EXPECT_EQ(a, b);
  EXPECT_EQ(Stats().num_driver_allocs, s1.num_driver_allocs);
  CGC_ASSERT_OK(cgc_free(b));
  EXPECT_EQ(Stats().bytes_allocated, baseline_.bytes_allocated);
}

TEST_F(Allocator, BlocksAreKeyedByStream) {
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  void* a = Malloc(64 << 10, stream);
  CGC_ASSERT_OK(cgc_free(a));
  void* b = Malloc(64 << 10, other);
  EXPECT_NE(a, b) << "a block freed on one stream is not handed to another";
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_stream_destroy(other));
}

TEST_F(Allocator, LargeRequestsGetLargeSegmentsAndShareTheirRemainders) {
  void* a = Malloc(3 << 20, stream);
  cgc_memory_stats_t s = Stats();
  EXPECT_EQ(s.bytes_reserved - baseline_.bytes_reserved, size_t(20) << 20);  // below 10 MiB: a 20 MiB segment
  void* b = Malloc(12 << 20, stream);  // fits in the 17 MiB left of it
  EXPECT_EQ(Stats().bytes_reserved, s.bytes_reserved);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b), reinterpret_cast<uintptr_t>(a) + (3 << 20));
  void* c = Malloc(17 << 20, stream);  // 10 MiB and up: a segment of the request rounded to 2 MiB
  EXPECT_EQ(Stats().bytes_reserved - s.bytes_reserved, size_t(18) << 20);
  std::vector<float> in = cgc_test::RandomFloats((3 << 20) / 4, 11);
  Upload(Dev(a), in);
  EXPECT_EQ(Download(Dev(a), in.size()), in);
  for (void* p : {a, b, c}) CGC_ASSERT_OK(cgc_free(p));
}

TEST_F(Allocator, BadFreesAreRefusedAndChangeNothing) {
  void* a = Malloc(4096, stream);
  cgc_memory_stats_t before = Stats();
  EXPECT_EQ(cgc_free(reinterpret_cast<char*>(a) + 512), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cgc_last_error()).find("not allocated by cgc_malloc"), std::string::npos) << cgc_last_error();
  int on_stack = 0;
  EXPECT_EQ(cgc_free(&on_stack), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Stats().bytes_allocated, before.bytes_allocated);
  CGC_ASSERT_OK(cgc_free(a));
  EXPECT_EQ(cgc_free(a), CGC_ERROR_INVALID_ARGUMENT) << "double free";
  CGC_EXPECT_OK(cgc_free(nullptr));
  void* z = reinterpret_cast<void*>(0x1);
  CGC_ASSERT_OK(cgc_malloc(ctx, 0, stream, &z));
  EXPECT_EQ(z, nullptr);
  EXPECT_EQ(cgc_record_stream(reinterpret_cast<void*>(0x1000), stream), CGC_ERROR_INVALID_ARGUMENT);
}

TEST_F(Allocator, RecordStreamDefersReuseUntilTheOtherStreamIsDone) {
  cgc_stream_t other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  void* a = Malloc(8192, stream);
  Spin(other, 300LL * 1000 * 1000);  // the other stream is busy "using" a for a while
  Fill(other, Dev(a), 1.0f, 2048);
  CGC_ASSERT_OK(cgc_record_stream(a, other));
  CGC_ASSERT_OK(cgc_record_stream(a, stream));  // its own stream: ignored
  CGC_ASSERT_OK(cgc_free(a));
  void* b = Malloc(8192, stream);
  EXPECT_NE(a, b) << "reused while the other stream may still be using it";
  CGC_ASSERT_OK(cgc_stream_synchronize(other));
  void* c = Malloc(8192, stream);
  EXPECT_EQ(a, c) << "reusable once the recorded work is done";
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_free(c));
  CGC_ASSERT_OK(cgc_stream_destroy(other));
}

TEST_F(Allocator, EmptyCacheGivesFreeSegmentsBack) {
  void* a = Malloc(5 << 20, stream);
  void* b = Malloc(100, stream);
  CGC_ASSERT_OK(cgc_free(a));
  cgc_memory_stats_t s = Stats();
  EXPECT_GT(s.bytes_reserved, baseline_.bytes_reserved);
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  cgc_memory_stats_t t = Stats();
  EXPECT_EQ(t.bytes_reserved - baseline_.bytes_reserved, size_t(2) << 20) << "the segment in use stays";
  EXPECT_EQ(t.num_driver_frees - s.num_driver_frees, 1u);
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats().bytes_reserved, baseline_.bytes_reserved);
  EXPECT_GE(Stats().peak_bytes_reserved, size_t(22) << 20);
}

TEST_F(Allocator, OutOfMemoryFreesTheCacheAndRetries) {
  size_t free_bytes = 0, total = 0;
  CU_ASSERT_OK(cuMemGetInfo(&free_bytes, &total));
  size_t first = free_bytes / 100 * 55, second = free_bytes / 100 * 60;
  void* a = Malloc(first, stream);
  ASSERT_NE(a, nullptr);
  CGC_ASSERT_OK(cgc_free(a));  // cached, still reserved: too small for the next request
  cgc_memory_stats_t s = Stats();
  void* b = Malloc(second, stream);
  ASSERT_NE(b, nullptr) << "the retry after freeing the cache should fit";
  cgc_memory_stats_t t = Stats();
  EXPECT_EQ(t.num_driver_frees - s.num_driver_frees, 1u);
  CGC_ASSERT_OK(cgc_free(b));
  // A request no device can hold fails cleanly, with the sizes in the message.
  void* c = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cgc_malloc(ctx, size_t(1) << 50, stream, &c), CGC_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(c, nullptr);
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tried to allocate 1125899906842624 bytes"), std::string::npos) << msg;
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
}

TEST_F(Allocator, TorchEntryPointsAllocateOnTheDeviceState) {
  void* p = cgc_torch_malloc(4096, 0, cgc_stream_native(stream));
  ASSERT_NE(p, nullptr) << cgc_last_error();
  cgc_memory_stats_t s = Stats();
  EXPECT_EQ(s.bytes_allocated - baseline_.bytes_allocated, 4096u);
  Fill(stream, Dev(p), 2.5f, 1024);
  EXPECT_EQ(Download(Dev(p), 1024)[1023], 2.5f);
  cgc_torch_free(p, 4096, 0, cgc_stream_native(stream));
  EXPECT_EQ(Stats().bytes_allocated, baseline_.bytes_allocated);
  void* q = cgc_torch_malloc(512, 0, nullptr);  // PyTorch's default (legacy) stream
  ASSERT_NE(q, nullptr);
  cgc_torch_free(q, 512, 0, nullptr);
  EXPECT_EQ(cgc_torch_malloc(-1, 0, nullptr), nullptr);
  EXPECT_EQ(cgc_torch_malloc(16, 999, nullptr), nullptr);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_torch_malloc"), std::string::npos);
}

TEST_F(Allocator, ConcurrentMallocFreeFromEightThreadsOnFourStreamsKeepsEveryBlockIntact) {
  constexpr int kThreads = 8, kStreams = 4, kIters = 300, kLive = 6;
  cgc_stream_t streams[kStreams];
  for (auto& s : streams) CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s));
  std::atomic<int> bad_contents{0}, failed_calls{0};
  std::atomic<long> checked{0};
  auto worker = [&](int t) {
    if (cgc__drv.cuCtxPushCurrent(primary) != CUDA_SUCCESS) {
      failed_calls++;
      return;
    }
    std::mt19937 rng(1234 + t);
    cgc_stream_t s = streams[t % kStreams];
    CUstream cs = static_cast<CUstream>(cgc_stream_native(s));
    struct Live {
      void* p;
      unsigned words;
      uint32_t seed;
    };
    std::vector<Live> live;
    std::vector<uint32_t> host;
    auto check_and_free = [&](const Live& l) {
      host.assign(l.words, 0);
      if (cgc__drv.cuMemcpyDtoHAsync(host.data(), Dev(l.p), l.words * 4ull, cs) != CUDA_SUCCESS ||
          cgc__drv.cuStreamSynchronize(cs) != CUDA_SUCCESS)
        failed_calls++;
      for (unsigned i = 0; i < l.words; i++)
        if (host[i] != l.seed * 2654435761u + i) {
          bad_contents++;
          break;
        }
      checked++;
      if (cgc_free(l.p) != CGC_SUCCESS) failed_calls++;
    };
    for (int i = 0; i < kIters; i++) {
      // Sizes across both classes: mostly small, some large.
      size_t bytes = (rng() % 8 == 0) ? (1 << 20) + rng() % (6 << 20) : 256 + rng() % (256 << 10);
      unsigned words = static_cast<unsigned>(bytes / 4);
      void* p = nullptr;
      if (cgc_malloc(ctx, bytes, s, &p) != CGC_SUCCESS) {
        failed_calls++;
        continue;
      }
      uint32_t seed = static_cast<uint32_t>(t * 100000 + i);
      CUdeviceptr dp = Dev(p);
      void* args[] = {&dp, &seed, &words};
      if (cgc__drv.cuLaunchKernel(k_stamp, (words + 255) / 256, 1, 1, 256, 1, 1, 0, cs, args, nullptr) !=
          CUDA_SUCCESS)
        failed_calls++;
      live.push_back({p, words, seed});
      if (live.size() > kLive) {
        size_t victim = rng() % live.size();
        check_and_free(live[victim]);
        live.erase(live.begin() + victim);
      }
    }
    for (const Live& l : live) check_and_free(l);
    CUcontext popped;
    cgc__drv.cuCtxPopCurrent(&popped);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed_calls.load(), 0);
  EXPECT_EQ(bad_contents.load(), 0) << "a block's contents were overwritten: two live blocks overlapped";
  EXPECT_EQ(checked.load(), long(kThreads) * kIters);
  EXPECT_EQ(Stats().bytes_allocated, baseline_.bytes_allocated);
  std::printf("stress: %ld blocks checked, %zu bytes reserved at peak\n", checked.load(), Stats().peak_bytes_reserved);
  for (auto& s : streams) CGC_ASSERT_OK(cgc_stream_destroy(s));
}

}  // namespace
