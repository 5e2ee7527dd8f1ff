// Graph-safe random numbers on a real GPU: replays reproduce eager runs bit for bit, state
// changes between replays take effect, captures refuse seed changes, and the numbers look like
// the distributions they claim to be.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu_test_util.h"

namespace {

using cgc_test::Dev;
using cgc_test::GpuTest;

class Rng : public GpuTest {
 protected:
  float* Buffer(size_t n) { return reinterpret_cast<float*>(static_cast<uintptr_t>(Alloc(n * 4 + 64))); }
  std::vector<uint32_t> Bits(const float* p, size_t n) { return DownloadWords(Dev(p), n); }
  uint64_t Offset(cgc_rng_t g) {
    uint64_t seed = 0, off = 0;
    EXPECT_EQ(cgc_rng_get_state(g, &seed, &off), CGC_SUCCESS) << cgc_last_error();
    return off;
  }
};

// The draws one "step" of a model makes: sizes that are not multiples of 4, both kinds.
void Step(cgc_rng_t g, float* a, float* b, float* c, cgc_stream_t s) {
  ASSERT_EQ(cgc_rng_uniform(g, a, 1001, s), CGC_SUCCESS) << cgc_last_error();
  ASSERT_EQ(cgc_rng_normal(g, b, 777, 0.5f, 2.0f, s), CGC_SUCCESS) << cgc_last_error();
  ASSERT_EQ(cgc_rng_uniform(g, c, 6, s), CGC_SUCCESS) << cgc_last_error();
}

TEST_F(Rng, DrawsAdvanceTheOffsetInMultiplesOfFour) {
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 7, &g));
  float* out = Buffer(16);
  EXPECT_EQ(Offset(g), 0u);
  CGC_ASSERT_OK(cgc_rng_uniform(g, out, 5, stream));
  EXPECT_EQ(Offset(g), 8u);
  CGC_ASSERT_OK(cgc_rng_normal(g, out, 4, 0.0f, 1.0f, stream));
  EXPECT_EQ(Offset(g), 12u);
  CGC_ASSERT_OK(cgc_rng_uniform(g, out, 0, stream));
  EXPECT_EQ(Offset(g), 12u);
  EXPECT_EQ(cgc_rng_set_state(g, 1, 6), CGC_ERROR_INVALID_ARGUMENT);
  CGC_ASSERT_OK(cgc_rng_destroy(g));
  EXPECT_EQ(cgc_rng_destroy(g), CGC_ERROR_INVALID_HANDLE);
}

TEST_F(Rng, SameStateSameNumbersAndNewOffsetNewNumbers) {
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 42, &g));
  float *x = Buffer(4096), *y = Buffer(4096);
  CGC_ASSERT_OK(cgc_rng_uniform(g, x, 4096, stream));
  CGC_ASSERT_OK(cgc_rng_uniform(g, y, 4096, stream));
  EXPECT_NE(Bits(x, 4096), Bits(y, 4096));
  CGC_ASSERT_OK(cgc_rng_set_state(g, 42, 0));
  CGC_ASSERT_OK(cgc_rng_uniform(g, y, 4096, stream));
  EXPECT_EQ(Bits(x, 4096), Bits(y, 4096));
  CGC_ASSERT_OK(cgc_rng_destroy(g));
}

TEST_F(Rng, ReplaysEqualEagerRunsBitForBitForSeveralSeeds) {
  float *ea = Buffer(1001), *eb = Buffer(777), *ec = Buffer(6);
  float *ga = Buffer(1001), *gb = Buffer(777), *gc = Buffer(6);
  for (uint64_t seed : {0ull, 1ull, 123456789ull, 0xFFFFFFFFFFFFull}) {
    cgc_rng_t eager = nullptr, captured = nullptr;
    CGC_ASSERT_OK(cgc_rng_create(ctx, seed, &eager));
    CGC_ASSERT_OK(cgc_rng_create(ctx, seed, &captured));
    CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
    Step(captured, ga, gb, gc, stream);
    cgc_graph_t g = nullptr;
    CGC_ASSERT_OK(cgc_capture_end(stream, &g));
    EXPECT_EQ(Offset(captured), 0u) << "capturing consumes nothing";
    for (int replay = 0; replay < 4; replay++) {
      Step(eager, ea, eb, ec, stream);
      CGC_ASSERT_OK(cgc_graph_launch(g, stream));
      ASSERT_EQ(Bits(ga, 1001), Bits(ea, 1001)) << "seed " << seed << " replay " << replay;
      ASSERT_EQ(Bits(gb, 777), Bits(eb, 777)) << "seed " << seed << " replay " << replay;
      ASSERT_EQ(Bits(gc, 6), Bits(ec, 6)) << "seed " << seed << " replay " << replay;
      EXPECT_EQ(Offset(captured), Offset(eager));
    }
    EXPECT_EQ(Offset(eager), 4u * (1004 + 780 + 8));
    CGC_ASSERT_OK(cgc_graph_destroy(g));
    CGC_ASSERT_OK(cgc_rng_destroy(eager));
    CGC_ASSERT_OK(cgc_rng_destroy(captured));
  }
}

TEST_F(Rng, TwoGraphsOnOneGeneratorInterleaveLikeEagerCalls) {
  float *e1 = Buffer(100), *e2 = Buffer(300), *g1o = Buffer(100), *g2o = Buffer(300);
  cgc_rng_t eager = nullptr, captured = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 99, &eager));
  CGC_ASSERT_OK(cgc_rng_create(ctx, 99, &captured));
  cgc_graph_t g1 = nullptr, g2 = nullptr;
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_rng_uniform(captured, g1o, 100, stream));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g1));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_rng_normal(captured, g2o, 300, 0.0f, 1.0f, stream));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g2));
  for (int i = 0; i < 3; i++) {
    CGC_ASSERT_OK(cgc_rng_uniform(eager, e1, 100, stream));
    CGC_ASSERT_OK(cgc_graph_launch(g1, stream));
    CGC_ASSERT_OK(cgc_rng_normal(eager, e2, 300, 0.0f, 1.0f, stream));
    CGC_ASSERT_OK(cgc_graph_launch(g2, stream));
    ASSERT_EQ(Bits(g1o, 100), Bits(e1, 100)) << i;
    ASSERT_EQ(Bits(g2o, 300), Bits(e2, 300)) << i;
  }
  for (cgc_graph_t g : {g1, g2}) CGC_ASSERT_OK(cgc_graph_destroy(g));
  CGC_ASSERT_OK(cgc_rng_destroy(eager));
  CGC_ASSERT_OK(cgc_rng_destroy(captured));
}

TEST_F(Rng, TwoGeneratorsInOneGraphEachAdvanceTheirOwnState) {
  float *a = Buffer(64), *b = Buffer(64), *ea = Buffer(64), *eb = Buffer(64);
  cgc_rng_t g1 = nullptr, g2 = nullptr, r1 = nullptr, r2 = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 1, &g1));
  CGC_ASSERT_OK(cgc_rng_create(ctx, 2, &g2));
  CGC_ASSERT_OK(cgc_rng_create(ctx, 1, &r1));
  CGC_ASSERT_OK(cgc_rng_create(ctx, 2, &r2));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_rng_uniform(g1, a, 64, stream));
  CGC_ASSERT_OK(cgc_rng_uniform(g2, b, 61, stream));
  CGC_ASSERT_OK(cgc_rng_uniform(g1, a, 64, stream));  // a second draw from g1 in the same graph
  cgc_graph_t g = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &g));
  for (int i = 0; i < 3; i++) {
    CGC_ASSERT_OK(cgc_rng_uniform(r1, ea, 64, stream));
    CGC_ASSERT_OK(cgc_rng_uniform(r2, eb, 61, stream));
    CGC_ASSERT_OK(cgc_rng_uniform(r1, ea, 64, stream));
    CGC_ASSERT_OK(cgc_graph_launch(g, stream));
    ASSERT_EQ(Bits(a, 64), Bits(ea, 64));
    ASSERT_EQ(Bits(b, 61), Bits(eb, 61));
  }
  EXPECT_EQ(Offset(g1), 3u * 128);
  EXPECT_EQ(Offset(g2), 3u * 64);
  CGC_ASSERT_OK(cgc_graph_destroy(g));
  for (cgc_rng_t r : {g1, g2, r1, r2}) CGC_ASSERT_OK(cgc_rng_destroy(r));
}

TEST_F(Rng, SetStateBetweenReplaysTakesEffect) {
  float *out = Buffer(512), *ref = Buffer(512);
  cgc_rng_t g = nullptr, e = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 5, &g));
  CGC_ASSERT_OK(cgc_rng_create(ctx, 5, &e));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_rng_normal(g, out, 510, 1.0f, 3.0f, stream));
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  CGC_ASSERT_OK(cgc_graph_launch(graph, stream));
  std::vector<uint32_t> first = Bits(out, 510);
  for (uint64_t seed : {6ull, 314ull, 271ull}) {
    CGC_ASSERT_OK(cgc_rng_set_state(g, seed, 0));
    CGC_ASSERT_OK(cgc_rng_set_state(e, seed, 0));
    CGC_ASSERT_OK(cgc_graph_launch(graph, stream));
    CGC_ASSERT_OK(cgc_rng_normal(e, ref, 510, 1.0f, 3.0f, stream));
    std::vector<uint32_t> got = Bits(out, 510);
    EXPECT_EQ(got, Bits(ref, 510)) << "seed " << seed;
    EXPECT_NE(got, first);
  }
  CGC_ASSERT_OK(cgc_graph_destroy(graph));
  CGC_ASSERT_OK(cgc_rng_destroy(g));
  CGC_ASSERT_OK(cgc_rng_destroy(e));
}

TEST_F(Rng, ChangingTheStateDuringACaptureIsRefused) {
  float* out = Buffer(16);
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 11, &g));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_rng_uniform(g, out, 16, stream));
  EXPECT_EQ(cgc_rng_set_state(g, 12, 0), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("cgc_capture_end"), std::string::npos) << cgc_last_error();
  CGC_EXPECT_OK(cgc_rng_set_state(g, 11, 0));  // the same state: a no-op, like manual_seed
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  CGC_ASSERT_OK(cgc_rng_set_state(g, 12, 0));  // allowed again
  CGC_ASSERT_OK(cgc_graph_destroy(graph));
  CGC_ASSERT_OK(cgc_rng_destroy(g));
}

TEST_F(Rng, AGeneratorServesOneCaptureAtATime) {
  cgc_stream_t s2 = nullptr;
  CGC_ASSERT_OK(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &s2));
  float *a = Buffer(8), *b = Buffer(8);
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 3, &g));
  cgc_capture_options_t tl = {sizeof tl, CGC_CAPTURE_MODE_THREAD_LOCAL, nullptr, 0};
  CGC_ASSERT_OK(cgc_capture_begin(stream, &tl));
  CGC_ASSERT_OK(cgc_capture_begin(s2, &tl));
  CGC_ASSERT_OK(cgc_rng_uniform(g, a, 8, stream));
  EXPECT_EQ(cgc_rng_uniform(g, b, 8, s2), CGC_ERROR_INVALID_STATE);
  cgc_graph_t g1 = nullptr, g2 = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(s2, &g2));
  CGC_ASSERT_OK(cgc_capture_end(stream, &g1));
  for (cgc_graph_t x : {g1, g2}) CGC_ASSERT_OK(cgc_graph_destroy(x));
  CGC_ASSERT_OK(cgc_rng_destroy(g));
  CGC_ASSERT_OK(cgc_stream_destroy(s2));
}

TEST_F(Rng, GraphsKeepADestroyedGeneratorsState) {
  float* out = Buffer(100);
  cgc_rng_t g = nullptr, e = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 8, &g));
  CGC_ASSERT_OK(cgc_rng_create(ctx, 8, &e));
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  CGC_ASSERT_OK(cgc_rng_uniform(g, out, 100, stream));
  cgc_graph_t graph = nullptr;
  CGC_ASSERT_OK(cgc_capture_end(stream, &graph));
  CGC_ASSERT_OK(cgc_rng_destroy(g));
  EXPECT_EQ(cgc_rng_uniform(g, out, 100, stream), CGC_ERROR_INVALID_HANDLE);
  float* ref = Buffer(100);
  for (int i = 0; i < 2; i++) {
    CGC_ASSERT_OK(cgc_graph_launch(graph, stream));
    CGC_ASSERT_OK(cgc_rng_uniform(e, ref, 100, stream));
    EXPECT_EQ(Bits(out, 100), Bits(ref, 100));
  }
  CGC_ASSERT_OK(cgc_graph_destroy(graph));
  CGC_ASSERT_OK(cgc_rng_destroy(e));
}

TEST_F(Rng, DrawsIntoARawCaptureAreRefused) {
  float* out = Buffer(8);
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 1, &g));
  CUstream raw = static_cast<CUstream>(cgc_stream_native(stream));
  CU_ASSERT_OK(cuStreamBeginCapture(raw, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  EXPECT_EQ(cgc_rng_uniform(g, out, 8, stream), CGC_ERROR_INVALID_STATE);
  EXPECT_NE(std::string(cgc_last_error()).find("not begun with cgc_capture_begin"), std::string::npos);
  CUgraph graph = nullptr;
  CU_ASSERT_OK(cuStreamEndCapture(raw, &graph));
  if (graph) cgc__drv.cuGraphDestroy(graph);
  CGC_ASSERT_OK(cgc_rng_destroy(g));
}

TEST_F(Rng, UniformNumbersPassMomentsAndAChiSquareTest) {
  constexpr size_t n = 1 << 22;
  float* out = Buffer(n);
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 2024, &g));
  CGC_ASSERT_OK(cgc_rng_uniform(g, out, n, stream));
  std::vector<float> v = Download(Dev(out), n);
  double sum = 0, sq = 0;
  std::vector<double> bins(100, 0);
  for (float x : v) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
    sq += double(x) * x;
    bins[size_t(x * 100)] += 1;
  }
  double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.002);
  EXPECT_NEAR(var, 1.0 / 12, 0.001);
  double chi2 = 0, expected = double(n) / 100;
  for (double b : bins) chi2 += (b - expected) * (b - expected) / expected;
  EXPECT_LT(chi2, 148.2) << "chi-square with 99 degrees of freedom beyond its 99.9% quantile";
  CGC_ASSERT_OK(cgc_rng_destroy(g));
}

TEST_F(Rng, NormalNumbersHaveTheRequestedMeanAndDeviation) {
  constexpr size_t n = 1 << 22;
  float* out = Buffer(n);
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 77, &g));
  CGC_ASSERT_OK(cgc_rng_normal(g, out, n, 3.0f, 0.5f, stream));
  std::vector<float> v = Download(Dev(out), n);
  double sum = 0, sq = 0;
  size_t within1 = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += double(x) * x;
    within1 += std::fabs(x - 3.0f) < 0.5f;
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 3.0, 0.002);
  EXPECT_NEAR(sd, 0.5, 0.002);
  EXPECT_NEAR(double(within1) / n, 0.6827, 0.002);
  CGC_ASSERT_OK(cgc_rng_destroy(g));
}

TEST_F(Rng, BadArgumentsAreRefused) {
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 1, &g));
  EXPECT_EQ(cgc_rng_uniform(g, nullptr, 4, stream), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_rng_uniform(g, Buffer(4), 4, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cgc_rng_get_state(g, nullptr, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  CGC_ASSERT_OK(cgc_rng_destroy(g));
}

// A draw into a capture that an earlier call invalidated says so (it said "not begun with cgc").
TEST_F(Rng, ADrawIntoAnInvalidatedCaptureSaysTheCaptureWasInvalidated) {
  cgc_rng_t g = nullptr;
  CGC_ASSERT_OK(cgc_rng_create(ctx, 3, &g));
  void* out = Malloc(64 * sizeof(float), stream);
  CGC_ASSERT_OK(cgc_capture_begin(stream, nullptr));
  cgc__drv.cuStreamQuery(static_cast<CUstream>(cgc_stream_native(stream)));  // invalidates it
  EXPECT_EQ(cgc_rng_uniform(g, static_cast<float*>(out), 64, stream), CGC_ERROR_CAPTURE_INVALIDATED);
  EXPECT_NE(std::string(cgc_last_error()).find("invalidated"), std::string::npos) << cgc_last_error();
  cgc_graph_t none = nullptr;
  EXPECT_EQ(cgc_capture_end(stream, &none), CGC_ERROR_CAPTURE_INVALIDATED);
  CGC_EXPECT_OK(cgc_free(out));
  CGC_EXPECT_OK(cgc_rng_destroy(g));
}

}  // namespace
