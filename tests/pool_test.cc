// Private pools on a real GPU, the scenarios PyTorch's own test suite checks, ported to the C
// API with the tests' own kernels.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;
using cgc_test::MemoryTest;
using cgc_test::RandomFloats;

class Pool : public MemoryTest {
 protected:
  cgc_capture_options_t Opts(cgc_pool_t pool) {
    cgc_capture_options_t o = {sizeof o, CGC_CAPTURE_MODE_GLOBAL, pool, 0};
    return o;
  }
  cgc_pool_t PoolOf(cgc_graph_t g) {
    cgc_pool_t p = nullptr;
    EXPECT_EQ(cgc_graph_pool(g, &p), CGC_SUCCESS) << cgc_last_error();
    return p;
  }
};

TEST_F(Pool, GlobalCaptureAllocationsSucceedAndLandInThePool) {
  constexpr unsigned n = 1 << 16;
  CUdeviceptr in = Alloc(n * 4);
  std::vector<float> x = RandomFloats(n, 21);
  Upload(in, x);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));  // Global mode, new pool
  void* t = Malloc(n * 4, stream);
  void* out = Malloc(n * 4, stream);
  Add(stream, Dev(t), in, 1.0f, n);
  Add(stream, Dev(out), Dev(t), 2.0f, n);
  CGC_ASSERT_OK(cgc_free(t));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));  // valid: the allocations did not break it
  cgc_pool_t pool = PoolOf(g);
  ASSERT_NE(pool, nullptr);
  cgc_memory_stats_t ps = Stats(pool);
  EXPECT_EQ(ps.bytes_allocated, size_t(n) * 4) << "out is live in the pool";
  EXPECT_EQ(ps.bytes_reserved, size_t(2) << 20);
  EXPECT_EQ(ps.num_driver_allocs, 1u);
  cgc_graph_info_t info = {sizeof info, 0, 0, 0, 0};
  CGC_ASSERT_OK(cgc_graph_info(g, &info));
  EXPECT_EQ(info.pool_bytes_reserved, size_t(2) << 20);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  std::vector<float> y = Download(Dev(out), n);
  for (unsigned i = 0; i < n; i += 131) ASSERT_FLOAT_EQ(y[i], x[i] + 3.0f);
  // A pool block never serves allocations outside captures into that pool.
  void* eager = Malloc(n * 4, stream);
  EXPECT_NE(eager, t);
  CGC_ASSERT_OK(cgc_free(eager));
  CGC_ASSERT_OK(cgc_free(out));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Pool, SideStreamAllocationsLandInThePool) {
  cgc_stream_t side = nullptr;
  cgc_event_t fork = nullptr, join = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &fork));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &join));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* a = Malloc(4096, stream);
  CGC_ASSERT_OK(cgc_event_record(fork, stream));
  CGC_ASSERT_OK(cgc_stream_wait_event(side, fork));
  void* b = Malloc(3 << 20, side);  // a large block, on the side stream
  Fill(side, Dev(b), 1.0f, 1024);
  CGC_ASSERT_OK(cgc_event_record(join, side));
  CGC_ASSERT_OK(cgc_stream_wait_event(stream, join));
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  cgc_memory_stats_t ps = Stats(PoolOf(g));
  EXPECT_EQ(ps.num_driver_allocs, 2u) << "one small and one large segment, both in the pool";
  EXPECT_EQ(ps.bytes_allocated, 4096u + (3u << 20));
  EXPECT_EQ(Stats().bytes_allocated - baseline_.bytes_allocated, 4096u + (3u << 20));
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(side));
  CGC_ASSERT_OK(cgc_event_destroy(fork));
  CGC_ASSERT_OK(cgc_event_destroy(join));
}

TEST_F(Pool, BlockFreedInACaptureServesLaterAllocationsOfThatCapture) {
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* a = Malloc(64 << 10, stream);
  Fill(stream, Dev(a), 1.0f, 16 << 10);
  CGC_ASSERT_OK(cgc_free(a));
  void* b = Malloc(64 << 10, stream);
  EXPECT_EQ(a, b);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  EXPECT_EQ(Stats(PoolOf(g)).peak_bytes_allocated, size_t(64) << 10);
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Pool, SharedPoolReusesWhatAnEarlierCaptureFreedAndASeparatePoolDoesNot) {
  constexpr size_t kBytes = 256 << 10;
  // g0 allocates and frees a temporary inside its capture.
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* tmp = Malloc(kBytes, stream);
  Fill(stream, Dev(tmp), 1.0f, kBytes / 4);
  CGC_ASSERT_OK(cgc_free(tmp));
  cgc_graph_t g0 = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g0));
  cgc_pool_t shared = PoolOf(g0);
  cgc_memory_stats_t after_g0 = Stats(shared);
  // g1 shares g0's pool: gets the same address, no new segment.
  cgc_capture_options_t o = Opts(shared);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  void* reuse = Malloc(kBytes, stream);
  Fill(stream, Dev(reuse), 2.0f, kBytes / 4);
  cgc_graph_t g1 = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g1));
  EXPECT_EQ(reuse, tmp);
  EXPECT_EQ(PoolOf(g1), shared);
  cgc_memory_stats_t after_g1 = Stats(shared);
  EXPECT_EQ(after_g1.bytes_reserved, after_g0.bytes_reserved);
  EXPECT_EQ(after_g1.num_driver_allocs, after_g0.num_driver_allocs);
  // g2 with its own pool: a new segment and another address.
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* fresh = Malloc(kBytes, stream);
  cgc_graph_t g2 = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g2));
  EXPECT_NE(fresh, tmp);
  EXPECT_NE(PoolOf(g2), shared);
  EXPECT_EQ(Stats(PoolOf(g2)).num_driver_allocs, 1u);
  for (void* p : {reuse, fresh}) CGC_ASSERT_OK(cgc_free(p));
  for (cgc_graph_t g : {g0, g1, g2}) CGC_ASSERT_OK(cgc_graph_destroy(g));
}

// test_graph_three_successive: g0: b=a+0, c=b+1, d=b+2; g1: e=c+3; free c; g2: f=d+4.
// Replay g0,g1,g2: e=5, f=7. Replay g0,g2,g1: with a shared pool f took c's memory, so e=10;
// with separate pools e=5.
class ThreeSuccessive : public Pool {
 protected:
  void Run(bool share, bool out_of_order, float* e_val, float* f_val) {
    constexpr unsigned n = 1000;
    CUdeviceptr a = Alloc(n * 4);
    Fill(stream, a, 1.0f, n);
    cgc_pool_t pool = nullptr;
    if (share) CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
    cgc_capture_options_t o = Opts(pool);
    cgc_graph_t g0, g1, g2;
    CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
    void* b = Malloc(n * 4, stream);
    void* c = Malloc(n * 4, stream);
    void* d = Malloc(n * 4, stream);
    Add(stream, Dev(b), a, 0.0f, n);
    Add(stream, Dev(c), Dev(b), 1.0f, n);
    Add(stream, Dev(d), Dev(b), 2.0f, n);
    CGC_ASSERT_OK(cgc_capture_end(stream, &g0));
    CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
    void* e = Malloc(n * 4, stream);
    Add(stream, Dev(e), Dev(c), 3.0f, n);
    CGC_ASSERT_OK(cgc_capture_end(stream, &g1));
    CGC_ASSERT_OK(cgc_free(c));
    CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
    void* f = Malloc(n * 4, stream);
    Add(stream, Dev(f), Dev(d), 4.0f, n);
    CGC_ASSERT_OK(cgc_capture_end(stream, &g2));
    EXPECT_EQ(f == c, share) << "f reuses c's block exactly when the pool is shared";
    CGC_ASSERT_OK(cgc_graph_launch(g0, stream));
    CGC_ASSERT_OK(cgc_graph_launch(out_of_order ? g2 : g1, stream));
    CGC_ASSERT_OK(cgc_graph_launch(out_of_order ? g1 : g2, stream));
    std::vector<float> ev = Download(Dev(e), n), fv = Download(Dev(f), n);
    float esum = 0, fsum = 0;
    for (unsigned i = 0; i < n; i++) esum += ev[i], fsum += fv[i];
    *e_val = esum / n;
    *f_val = fsum / n;
    for (void* p : {b, d, e, f}) CGC_ASSERT_OK(cgc_free(p));
    for (cgc_graph_t g : {g0, g1, g2}) CGC_ASSERT_OK(cgc_graph_destroy(g));
    if (pool) CGC_ASSERT_OK(cgc_pool_release(pool));
  }
};

TEST_F(ThreeSuccessive, InCaptureOrderEveryPoolModeGivesFiveAndSeven) {
  for (bool share : {false, true}) {
    float e = 0, f = 0;
    Run(share, false, &e, &f);
    EXPECT_EQ(e, 5.0f) << "share=" << share;
    EXPECT_EQ(f, 7.0f) << "share=" << share;
  }
}

TEST_F(ThreeSuccessive, OutOfOrderReplayCorruptsOnlyASharedPool) {
  float e = 0, f = 0;
  Run(true, true, &e, &f);
  EXPECT_EQ(e, 10.0f) << "g2 overwrote c's memory before g1 read it (PyTorch documents this)";
  EXPECT_EQ(f, 7.0f);
  Run(false, true, &e, &f);
  EXPECT_EQ(e, 5.0f);
  EXPECT_EQ(f, 7.0f);
}

TEST_F(Pool, OutputsStayReadableAfterTheGraphIsDestroyedAndMemoryReturnsToBaseline) {
  for (size_t numel : {size_t(128), size_t(262144), size_t(2621568)}) {
    CUdeviceptr a = Alloc(numel * 4);
    Fill(stream, a, 1.0f, unsigned(numel));
    CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
    void* b = Malloc(numel * 4, stream);
    Add(stream, Dev(b), a, 0.0f, unsigned(numel));
    for (int i = 0; i < 5; i++) {
      void* next = Malloc(numel * 4, stream);
      Add(stream, Dev(next), Dev(b), 1.0f, unsigned(numel));
      CGC_ASSERT_OK(cgc_free(b));
      b = next;
    }
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    CGC_ASSERT_OK(cgc_graph_destroy(g));
    std::vector<float> out = Download(Dev(b), numel);
    EXPECT_EQ(out[0], 6.0f) << numel;
    EXPECT_EQ(out[numel - 1], 6.0f) << numel;
    CGC_ASSERT_OK(cgc_empty_cache(ctx));
    EXPECT_GT(Stats().bytes_reserved, baseline_.bytes_reserved) << "the output's segment is still held";
    CGC_ASSERT_OK(cgc_free(b));
    CGC_ASSERT_OK(cgc_empty_cache(ctx));
    cgc_memory_stats_t s = Stats();
    EXPECT_EQ(s.bytes_reserved, baseline_.bytes_reserved) << numel;
    EXPECT_EQ(s.bytes_allocated, baseline_.bytes_allocated) << numel;
  }
}

// A pool that nothing holds but a destroyed graph's output: cgc_empty_cache gives its wholly free
// segments back to the driver, and keeps the one the output lives in (PyTorch's empty_cache does
// the same for a released graph pool; before, the pool kept them until the output was freed).
TEST_F(Pool, EmptyCacheGivesBackAnOrphanedPoolsFreeSegmentsWhileItsOutputLives) {
  constexpr size_t mib = 1 << 20;  // small requests: two to a 2 MiB segment
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* x = Malloc(mib, stream);
  void* y = Malloc(mib, stream);
  void* z = Malloc(mib, stream);  // a second segment
  Fill(stream, Dev(x), 1.0f, unsigned(mib / 4));
  Fill(stream, Dev(y), 2.0f, unsigned(mib / 4));
  Add(stream, Dev(z), Dev(x), 0.0f, unsigned(mib / 4));
  Add(stream, Dev(z), Dev(y), 0.0f, unsigned(mib / 4));  // z = y = 2
  CGC_ASSERT_OK(cgc_free(x));
  CGC_ASSERT_OK(cgc_free(y));  // the first segment is wholly free again
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  cgc_pool_t pool = PoolOf(g);
  EXPECT_EQ(Stats(pool).bytes_reserved, 2 * 2 * mib);
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats(pool).bytes_reserved, 2 * 2 * mib) << "a pool a graph holds keeps its memory for replays";
  CGC_ASSERT_OK(cgc_graph_destroy(g));  // the pool is orphaned: only z holds it
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats().bytes_reserved, baseline_.bytes_reserved + 2 * mib) << "only the output's segment is held";
  std::vector<float> out = Download(Dev(z), mib / 4);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[mib / 4 - 1], 2.0f);
  CGC_ASSERT_OK(cgc_free(z));
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats().bytes_reserved, baseline_.bytes_reserved);
  EXPECT_EQ(Stats().bytes_allocated, baseline_.bytes_allocated);
}

// cgc_pool_claim (1.6): a block at a given address of a pool's free memory, as PyTorch's
// setCheckpointPoolState needs to put a pool back to a checkpoint; the range must be wholly free.
TEST_F(Pool, ClaimAllocatesAtTheAddressAskedOnlyFromFreeMemoryOfThePool) {
  constexpr size_t kib = 1 << 10;
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  void* a = nullptr;
  void* b = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 64 * kib, stream, &a));
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 64 * kib, stream, &b));
  CGC_ASSERT_OK(cgc_free(a));
  EXPECT_EQ(Stats(pool).bytes_allocated, 64 * kib);
  CGC_ASSERT_OK(cgc_pool_claim(pool, a, 64 * kib));
  EXPECT_EQ(Stats(pool).bytes_allocated, 128 * kib);
  Fill(stream, Dev(a), 5.0f, unsigned(64 * kib / 4));  // usable memory
  EXPECT_EQ(Download(Dev(a), 16 * kib)[16 * kib - 1], 5.0f);
  EXPECT_EQ(cgc_pool_claim(pool, a, 512), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("overlaps its allocated block"), std::string::npos) << cgc_last_error();
  // A range inside free memory: the block is cut out of it, the rest stays free around it.
  CGC_ASSERT_OK(cgc_free(a));
  char* inside = static_cast<char*>(a) + 8 * kib;
  CGC_ASSERT_OK(cgc_pool_claim(pool, inside, 1000));  // rounded to 1024
  EXPECT_EQ(Stats(pool).bytes_allocated, 64 * kib + kib);
  CGC_ASSERT_OK(cgc_pool_claim(pool, a, 8 * kib));  // the free piece in front of it
  EXPECT_EQ(cgc_pool_claim(pool, inside + 512, 512), CGC_ERROR_INVALID_STATE);
  // Refusals: memory the pool does not hold, bad arguments.
  void* eager = Malloc(64 * kib, stream);
  EXPECT_EQ(cgc_pool_claim(pool, static_cast<char*>(eager) + 4 * kib, 512), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("is not free memory of pool"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_pool_claim(pool, nullptr, 512), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_pool_claim(pool, inside + 100, 512), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_pool_claim(pool, inside, 0), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_pool_claim(nullptr, inside, 512), CGC_ERROR_INVALID_ARGUMENT);
  CGC_ASSERT_OK(cgc_free(eager));
  CGC_ASSERT_OK(cgc_free(inside));
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_free(b));
  EXPECT_EQ(Stats(pool).bytes_allocated, 0u);
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

// 1.6: a pool at fixed addresses. Its range is reserved at the base asked for and backed as it
// grows; the same requests in the same order get the same addresses, also after the pool is gone
// and made again (what a process restoring saved graphs does).
// Bases far apart: a small pool's reservation may reach 256 MiB past its base (SEMANTICS 37).
constexpr uintptr_t kFixedBase = 0x600000000000ull;
constexpr uintptr_t kGrowBase = 0x610000000000ull, kAheadBase = 0x620000000000ull, kRefuseBase = 0x630000000000ull;

std::vector<void*> AllocateTheSameWay(cgc_stream_t stream, cgc_pool_t pool, std::vector<void*>* freed_later) {
  std::vector<void*> got;
  for (size_t bytes : {size_t(1) << 20, size_t(3) << 20, size_t(512), size_t(10) << 20, size_t(40) << 10}) {
    void* p = nullptr;
    EXPECT_EQ(cgc_pool_malloc(pool, bytes, stream, &p), CGC_SUCCESS) << cgc_last_error();
    got.push_back(p);
  }
  freed_later->assign(got.begin(), got.end());
  return got;
}

TEST_F(Pool, APoolAtFixedAddressesGivesTheSameAddressesEveryTime) {
  constexpr size_t mib = 1 << 20;
  std::vector<void*> first, second, blocks;
  for (int round = 0; round < 2; round++) {
    cgc_pool_t pool = nullptr;
    CGC_ASSERT_OK(cgc_pool_create_at(ctx, reinterpret_cast<void*>(kFixedBase), 256 * mib, &pool));
    EXPECT_EQ(Stats(pool).bytes_reserved, 0u) << "nothing backed before the first allocation";
    std::vector<void*> got = AllocateTheSameWay(stream, pool, &blocks);
    EXPECT_EQ(got[0], reinterpret_cast<void*>(kFixedBase));
    for (void* p : got) {
      EXPECT_GE(reinterpret_cast<uintptr_t>(p), kFixedBase);
      EXPECT_LT(reinterpret_cast<uintptr_t>(p), kFixedBase + 256 * mib);
    }
    EXPECT_LE(Stats(pool).bytes_reserved, 24 * mib) << "backed as it grows, not all 256 MiB";
    // A capture into it: its memory is the pool's too, and the graph works there.
    cgc_capture_options_t o = Opts(pool);
    CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
    void* x = Malloc(mib, stream);
    Fill(stream, Dev(x), 7.0f, unsigned(mib / 4));
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    got.push_back(x);
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    EXPECT_EQ(Download(Dev(x), mib / 4)[mib / 4 - 1], 7.0f);
    EXPECT_EQ(cgc_pool_release(pool), CGC_ERROR_INVALID_STATE) << "blocks and a graph still hold it";
    CGC_ASSERT_OK(cgc_graph_destroy(g));
    CGC_ASSERT_OK(cgc_free(x));
    for (void* p : blocks) CGC_ASSERT_OK(cgc_free(p));
    CGC_ASSERT_OK(cgc_pool_release(pool));  // the range goes back: the next round reserves it again
    (round == 0 ? first : second) = got;
  }
  EXPECT_EQ(first, second) << "the same requests in the same order, other addresses";
}

// Free memory merges across growths (a growth adds only what the free end lacks), and a claim
// reaches memory the pool has not backed yet, as a restoring process needs; memory no stream used
// before is claimed for none, so that once freed no other stream's allocation gets it early.
TEST_F(Pool, APoolAtFixedAddressesGrowsByWhatItLacksAndClaimsAhead) {
  constexpr size_t mib = 1 << 20;
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create_at(ctx, reinterpret_cast<void*>(kGrowBase), 4 * mib, &pool));
  void* a = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 1 * mib, stream, &a));  // backs 2 MiB
  EXPECT_EQ(Stats(pool).bytes_reserved, 2 * mib);
  void* b = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 3 * mib, stream, &b));  // its free 1 MiB + 2 MiB more
  EXPECT_EQ(b, reinterpret_cast<void*>(kGrowBase + mib));
  EXPECT_EQ(Stats(pool).bytes_reserved, 4 * mib);
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_free(b));
  CGC_ASSERT_OK(cgc_pool_release(pool));

  CGC_ASSERT_OK(cgc_pool_create_at(ctx, reinterpret_cast<void*>(kAheadBase), 8 * mib, &pool));
  void* ahead = reinterpret_cast<void*>(kAheadBase + 5 * mib);
  CGC_ASSERT_OK(cgc_pool_claim(pool, ahead, mib));  // nothing backed yet: backed up to it
  EXPECT_EQ(Stats(pool).bytes_reserved, 6 * mib);
  Fill(stream, Dev(ahead), 3.0f, unsigned(mib / 4));
  EXPECT_EQ(Download(Dev(ahead), mib / 4)[0], 3.0f);
  EXPECT_EQ(cgc_pool_claim(pool, reinterpret_cast<void*>(kAheadBase + 8 * mib), mib), CGC_ERROR_INVALID_STATE)
      << "beyond the capacity";
  CGC_ASSERT_OK(cgc_free(ahead));
  void* next = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 4 * mib, stream, &next));  // from the free memory in front
  EXPECT_NE(next, ahead) << "claimed memory went to a stream's allocation";
  CGC_ASSERT_OK(cgc_free(next));
  CGC_ASSERT_OK(cgc_pool_claim(pool, ahead, mib));  // a claim takes it again
  CGC_ASSERT_OK(cgc_free(ahead));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(Pool, APoolAtFixedAddressesRefusesWhatItCannotDo) {
  constexpr size_t mib = 1 << 20;
  cgc_pool_t pool = nullptr, other = nullptr;
  void* base = reinterpret_cast<void*>(kRefuseBase);
  EXPECT_EQ(cgc_pool_create_at(ctx, reinterpret_cast<void*>(kRefuseBase + 4096), 4 * mib, &pool),
            CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cgc_last_error()).find("multiples of"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(cgc_pool_create_at(ctx, base, 3 * mib, &pool), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_pool_create_at(ctx, nullptr, 4 * mib, &pool), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_pool_create_at(ctx, base, 0, &pool), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_pool_create_at(nullptr, base, 4 * mib, &pool), CGC_ERROR_INVALID_ARGUMENT);
  CGC_ASSERT_OK(cgc_pool_create_at(ctx, base, 4 * mib, &pool));
  // The range is this pool's: a second pool cannot have any of it.
  EXPECT_EQ(cgc_pool_create_at(ctx, reinterpret_cast<void*>(kRefuseBase + 2 * mib), 4 * mib, &other),
            CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("cannot reserve"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(other, nullptr);
  // It never grows beyond its capacity.
  void* a = nullptr;
  void* b = nullptr;
  CGC_ASSERT_OK(cgc_pool_malloc(pool, 3 * mib, stream, &a));
  EXPECT_EQ(cgc_pool_malloc(pool, 3 * mib, stream, &b), CGC_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(cgc_last_error()).find("create the pool larger"), std::string::npos) << cgc_last_error();
  EXPECT_EQ(b, nullptr);
  // cgc_pool_claim works in it: a freed block is claimed back at its address.
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_pool_claim(pool, a, 3 * mib));
  EXPECT_EQ(cgc_pool_release(pool), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("pool at fixed addresses"), std::string::npos) << cgc_last_error();
  CGC_ASSERT_OK(cgc_free(a));
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats(pool).bytes_reserved, 4 * mib) << "empty_cache leaves a pool at fixed addresses alone";
  CGC_ASSERT_OK(cgc_pool_release(pool));
  CGC_ASSERT_OK(cgc_pool_create_at(ctx, base, 4 * mib, &pool));  // given back: available again
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

// Issue 11, item 1: a pool whose last graph is destroyed while a replay still runs must not hand
// its memory to eager work before that replay is done.
TEST_F(Pool, ALastGraphDestroyedWhileReplayingKeepsItsMemoryFromEagerWork) {
  constexpr unsigned n = (4 << 20) / 4;  // 4 MiB: a large block of its own segment
  cgc_stream_t replay = nullptr, other = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &replay));
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &other));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* t = Malloc(n * 4, stream);
  Spin(stream, 400LL * 1000 * 1000);  // the replay writes t only after a while
  Fill(stream, Dev(t), 1.0f, n);
  CGC_ASSERT_OK(cgc_free(t));  // the pool keeps t's block; the graph still writes it
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_launch(g, replay));
  CGC_ASSERT_OK(cgc_graph_destroy(g));  // the pool's last reference: it dissolves
  // Eager work on the capture's stream, while the replay has not written t yet.
  void* eager = Malloc(n * 4, stream);
  EXPECT_NE(eager, t) << "the dissolved pool's block went to eager work while its replay still runs";
  Fill(stream, Dev(eager), 2.0f, n);
  std::vector<float> seen = Download(Dev(eager), n);  // waits for the replay too
  EXPECT_EQ(seen[0], 2.0f);
  EXPECT_EQ(seen[n - 1], 2.0f) << "the replay overwrote eager data";
  // Once the replay is over, the memory serves any stream.
  void* later = Malloc(n * 4, other);
  EXPECT_EQ(later, t) << "after its last replay the pool's memory is reused";
  for (void* p : {eager, later}) CGC_ASSERT_OK(cgc_free(p));
  for (cgc_stream_t s : {replay, other}) CGC_ASSERT_OK(cgc_stream_destroy(s));
}

TEST_F(Pool, RecordStreamInsideACaptureWaitsForTheJoin) {
  cgc_stream_t side = nullptr;
  cgc_event_t fork = nullptr, join = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &side));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &fork));
  CGC_ASSERT_OK(cgc_event_create(ctx, 0, &join));
  constexpr size_t kBytes = 32 << 10;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* data = Malloc(kBytes, stream);
  Fill(stream, Dev(data), 1.0f, kBytes / 4);
  CGC_ASSERT_OK(cgc_event_record(fork, stream));
  CGC_ASSERT_OK(cgc_stream_wait_event(side, fork));
  Axpb(side, Dev(data), 2.0f, 0.0f, kBytes / 4);  // read/written on the side stream
  CGC_ASSERT_OK(cgc_record_stream(data, side));
  CGC_ASSERT_OK(cgc_free(data));
  void* before_join = Malloc(kBytes, stream);
  EXPECT_NE(before_join, data) << "reused before the side stream joined";
  CGC_ASSERT_OK(cgc_event_record(join, side));
  CGC_ASSERT_OK(cgc_stream_wait_event(stream, join));
  void* after_join = Malloc(kBytes, stream);
  EXPECT_EQ(after_join, data) << "reusable once the side stream joined the origin";
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (void* p : {before_join, after_join}) CGC_ASSERT_OK(cgc_free(p));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(side));
  CGC_ASSERT_OK(cgc_event_destroy(fork));
  CGC_ASSERT_OK(cgc_event_destroy(join));
}

TEST_F(Pool, PendingEventsFromBeforeTheCaptureAreNotQueriedDuringIt) {
  // test_graph_record_stream: a block freed with an outstanding use before the capture; the
  // capture allocates, which must not query that event (it would break a Global capture).
  cgc_stream_t busy = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &busy));
  void* old = Malloc(4096, stream);
  Spin(busy, 100LL * 1000 * 1000);
  CGC_ASSERT_OK(cgc_record_stream(old, busy));
  CGC_ASSERT_OK(cgc_free(old));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* in_capture = Malloc(4096, stream);
  Fill(stream, Dev(in_capture), 1.0f, 1024);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_stream_synchronize(busy));
  void* later = Malloc(4096, stream);  // processes the deferred event now
  EXPECT_EQ(later, old);
  for (void* p : {in_capture, later}) CGC_ASSERT_OK(cgc_free(p));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(busy));
}

TEST_F(Pool, OutOfMemoryInsideACaptureFailsCleanlyAndTheCaptureEnds) {
  CUdeviceptr a = Alloc(4096);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  Fill(stream, a, 3.0f, 1024);
  void* huge = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cgc_malloc(ctx, size_t(1) << 50, stream, &huge), CGC_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(huge, nullptr);
  std::string msg = cgc_last_error();
  EXPECT_NE(msg.find("tried to allocate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("given back first"), std::string::npos) << msg;
  cgc_capture_status_t cs;
  CGC_ASSERT_OK(cgc_stream_capture_status(stream, &cs, nullptr));
  EXPECT_EQ(cs, CGC_CAPTURE_ACTIVE) << "the failed allocation did not break the capture";
  void* small = Malloc(4096, stream);
  EXPECT_NE(small, nullptr);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_graph_launch(g, stream));
  EXPECT_EQ(Download(a, 1024)[0], 3.0f);
  CGC_ASSERT_OK(cgc_free(small));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

TEST_F(Pool, APoolRecordsOneCaptureAtATimeButTwoPoolsCanRecordAtOnce) {
  cgc_stream_t s2 = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s2));
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  cgc_capture_options_t o = Opts(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  EXPECT_EQ(cgc_capture_begin(s2, &o), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("being recorded into"), std::string::npos) << cgc_last_error();
  cgc_capture_status_t cs;
  CGC_ASSERT_OK(cgc_stream_capture_status(s2, &cs, nullptr));
  EXPECT_EQ(cs, CGC_CAPTURE_NONE);
  // A second capture into another pool at the same time, on the same thread: ending one must
  // not break the other (instantiation runs in Relaxed mode).
  CGC_ASSERT_OK(cgc_capture_begin(s2, nullptr));
  void* p1 = Malloc(4096, stream);
  void* p2 = Malloc(4096, s2);
  cgc_graph_t g1 = nullptr, g2 = nullptr;
  cgc_status_t end2 = cgc_capture_end(s2, &g2);
  std::string end2_msg = cgc_last_error();
  cgc_status_t end1 = cgc_capture_end(stream, &g1);
  ASSERT_EQ(end2, CGC_SUCCESS) << end2_msg;
  ASSERT_EQ(end1, CGC_SUCCESS) << cgc_last_error();
  EXPECT_EQ(Stats(pool).bytes_allocated, 4096u);
  EXPECT_EQ(Stats(PoolOf(g2)).bytes_allocated, 4096u);
  for (void* p : {p1, p2}) CGC_ASSERT_OK(cgc_free(p));
  for (cgc_graph_t g : {g1, g2}) CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_pool_release(pool));
  CGC_ASSERT_OK(cgc_stream_destroy(s2));
}

TEST_F(Pool, ReferencesKeepThePoolAndReleasingALentPoolIsRefused) {
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  void* out = Malloc(4096, stream);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  cgc_pool_t lent = PoolOf(g);
  EXPECT_EQ(cgc_pool_release(lent), CGC_ERROR_INVALID_STATE) << "lent, not retained";
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_pool_retain"), std::string::npos);
  CGC_ASSERT_OK(cgc_pool_retain(lent));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  // Still ours: a new capture can share it and reuse nothing that is live.
  cgc_capture_options_t o = Opts(lent);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  void* more = Malloc(4096, stream);
  EXPECT_NE(more, out);
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  CGC_ASSERT_OK(cgc_pool_release(lent));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  // No user, no graph: the handle is dead even though blocks are still out.
  EXPECT_EQ(cgc_pool_retain(lent), CGC_ERROR_INVALID_HANDLE);
  cgc_capture_options_t dead = Opts(lent);
  EXPECT_EQ(cgc_capture_begin(stream, &dead), CGC_ERROR_INVALID_HANDLE);
  CGC_ASSERT_OK(cgc_free(out));
  CGC_ASSERT_OK(cgc_free(more));
  CGC_ASSERT_OK(cgc_empty_cache(ctx));
  EXPECT_EQ(Stats().bytes_reserved, baseline_.bytes_reserved);
}

TEST_F(Pool, SmallRequestsInAPoolUseItsFreeLargeBlocksBeforeGrowingIt) {
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  cgc_capture_options_t o = Opts(pool);
  cgc_graph_t g1 = nullptr, g2 = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  void* big = Malloc(12 << 20, stream);  // a 12 MiB large segment, freed inside the capture
  Fill(stream, Dev(big), 1.0f, 1024);
  CGC_ASSERT_OK(cgc_free(big));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g1));
  cgc_memory_stats_t before = Stats(pool);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
  void* small = Malloc(64 << 10, stream);
  Fill(stream, Dev(small), 2.0f, 1024);
  CGC_ASSERT_OK(cgc_capture_end(stream, &g2));
  cgc_memory_stats_t after = Stats(pool);
  EXPECT_EQ(after.num_driver_allocs, before.num_driver_allocs) << "no 2 MiB small segment was added";
  EXPECT_EQ(after.bytes_reserved, before.bytes_reserved);
  EXPECT_EQ(small, big);
  // Outside pools the classes stay apart, as in PyTorch: the device cache grows a small segment.
  void* eager = Malloc(64 << 10, stream);
  EXPECT_NE(eager, small);
  for (void* p : {small, eager}) CGC_ASSERT_OK(cgc_free(p));
  for (cgc_graph_t g : {g1, g2}) CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

TEST_F(Pool, GraphsCapturedLargestFirstIntoOnePoolReserveAboutTheLargestAlone) {
  constexpr int kGraphs = 32;
  constexpr size_t kUnit = 1 << 20;  // the largest graph's intermediates are 33 MiB each
  CUdeviceptr in = Alloc((kGraphs + 1) * kUnit);
  Fill(stream, in, 0.5f, unsigned((kGraphs + 1) * kUnit / 4));
  cgc_pool_t pool = nullptr;
  CGC_ASSERT_OK(cgc_pool_create(ctx, &pool));
  cgc_capture_options_t o = Opts(pool);
  std::vector<cgc_graph_t> graphs;
  std::vector<void*> outputs;
  size_t largest_alone = 0;
  for (int k = 0; k < kGraphs; k++) {
    size_t bytes = (kGraphs - k + 1) * kUnit;  // 33 MiB down to 2 MiB: all in the large class
    unsigned n = unsigned(bytes / 4);
    CGC_ASSERT_OK(cgc_capture_begin(stream, &o));
    void* h1 = Malloc(bytes, stream);
    void* h2 = Malloc(bytes, stream);
    void* out = Malloc((kGraphs - k) * 1024, stream);
    Add(stream, Dev(h1), in, 1.0f, n);
    Add(stream, Dev(h2), Dev(h1), 1.0f, n);
    Add(stream, Dev(out), Dev(h2), 1.0f, unsigned((kGraphs - k) * 256));
    CGC_ASSERT_OK(cgc_free(h1));
    CGC_ASSERT_OK(cgc_free(h2));
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    graphs.push_back(g);
    outputs.push_back(out);
    if (k == 0) largest_alone = Stats(pool).bytes_reserved;
  }
  size_t all = Stats(pool).bytes_reserved;
  std::printf("32 graphs largest-first in one pool: %.1f MiB reserved; the largest alone: %.1f MiB\n",
              all / 1048576.0, largest_alone / 1048576.0);
  EXPECT_LE(all, largest_alone);
  for (size_t k = 0; k < graphs.size(); k++) CGC_ASSERT_OK(cgc_graph_launch(graphs[k], stream));
  EXPECT_EQ(Download(Dev(outputs.back()), 256)[0], 3.5f);
  for (void* p : outputs) CGC_ASSERT_OK(cgc_free(p));
  for (cgc_graph_t g : graphs) CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_pool_release(pool));
}

// cgc_memory_snapshot lists every segment with its blocks: the device cache's and a pool's, in
// address order, their sizes adding up to the reserved bytes, each allocation an allocated block
// of the size asked (rounded) and a freed one free; arrays too small get the totals alone.
TEST_F(Pool, SnapshotListsEverySegmentAndBlock) {
  void* small_a = Malloc(1000, stream);
  void* small_b = Malloc(4096, stream);
  void* large = Malloc(3 << 20, stream);
  CGC_ASSERT_OK(cgc_free(small_b));
  CGC_ASSERT_OK(cgc_stream_synchronize(stream));
  cgc_capture_options_t opts = Opts(nullptr);
  CGC_ASSERT_OK(cgc_capture_begin(stream, &opts));
  void* graph_block = Malloc(8192, stream);
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  cgc_pool_t pool = PoolOf(g);

  size_t n_segments = 0, n_blocks = 0;
  CGC_ASSERT_OK(cgc_memory_snapshot(ctx, nullptr, 0, nullptr, 0, &n_segments, &n_blocks));
  ASSERT_GE(n_segments, 3u);  // a small and a large segment of the cache, the pool's
  ASSERT_GE(n_blocks, n_segments);
  std::vector<cgc_segment_info_t> segments(n_segments + 8);
  std::vector<cgc_block_info_t> blocks(n_blocks + 32);
  // Too small for the blocks: nothing written but the totals.
  segments[0].size = 12345;
  size_t ns = 0, nb = 0;
  CGC_ASSERT_OK(cgc_memory_snapshot(ctx, segments.data(), segments.size(), blocks.data(), 1, &ns, &nb));
  EXPECT_EQ(segments[0].size, 12345u);
  EXPECT_GE(nb, n_blocks);
  CGC_ASSERT_OK(cgc_memory_snapshot(ctx, segments.data(), segments.size(), blocks.data(), blocks.size(), &ns, &nb));
  ASSERT_LE(ns, segments.size());
  size_t reserved = 0;
  auto find_block = [&](void* p) -> const cgc_block_info_t* {
    for (size_t i = 0; i < nb; i++) {
      if (blocks[i].address == p) return &blocks[i];
    }
    return nullptr;
  };
  auto segment_of = [&](void* p) -> const cgc_segment_info_t* {
    for (size_t i = 0; i < ns; i++) {
      for (size_t j = segments[i].first_block; j < segments[i].first_block + segments[i].n_blocks; j++) {
        if (blocks[j].address == p) return &segments[i];
      }
    }
    return nullptr;
  };
  for (size_t i = 0; i < ns; i++) {
    const cgc_segment_info_t& s = segments[i];
    if (i > 0) {
      EXPECT_LT(segments[i - 1].address, s.address) << "sorted by address";
    }
    EXPECT_EQ(blocks[s.first_block].address, s.address) << "a segment starts with its first block";
    size_t spanned = 0, allocated = 0;
    for (size_t j = s.first_block; j < s.first_block + s.n_blocks; j++) {
      spanned += blocks[j].size;
      if (blocks[j].state == CGC_BLOCK_STATE_ALLOCATED) allocated += blocks[j].size;
    }
    EXPECT_EQ(spanned, s.size);
    EXPECT_EQ(allocated, s.allocated_bytes);
    reserved += s.size;
  }
  EXPECT_EQ(reserved, Stats().bytes_reserved) << "every segment of the device is listed";
  const cgc_block_info_t* a = find_block(small_a);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->state, CGC_BLOCK_STATE_ALLOCATED);
  EXPECT_EQ(a->size, 1024u);
  EXPECT_EQ(a->requested, 1000u);
  EXPECT_EQ(segment_of(small_a)->small, 1);
  EXPECT_EQ(segment_of(small_a)->pool, nullptr);
  EXPECT_EQ(segment_of(small_a)->size, size_t(2) << 20);
  const cgc_block_info_t* b = find_block(small_b);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->state, CGC_BLOCK_STATE_FREE);
  EXPECT_EQ(b->requested, 0u);
  EXPECT_EQ(segment_of(large)->small, 0);
  EXPECT_EQ(segment_of(large)->size, size_t(20) << 20) << "PyTorch's large segment for a request below 10 MiB";
  const cgc_segment_info_t* in_pool = segment_of(graph_block);
  ASSERT_NE(in_pool, nullptr);
  EXPECT_EQ(in_pool->pool, pool);
  EXPECT_EQ(find_block(graph_block)->state, CGC_BLOCK_STATE_ALLOCATED);

  EXPECT_EQ(cgc_memory_snapshot(ctx, nullptr, 1, nullptr, 0, &ns, &nb), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_memory_snapshot(ctx, nullptr, 0, nullptr, 0, nullptr, &nb), CGC_ERROR_INVALID_ARGUMENT);
  CGC_ASSERT_OK(cgc_free(small_a));
  CGC_ASSERT_OK(cgc_free(large));
  CGC_ASSERT_OK(cgc_free(graph_block));
  CGC_ASSERT_OK(cgc_graph_destroy(g));
}

}  // namespace
