// Graph-safe Philox4x32-10 random numbers for cgc (src/rng.c).
//
// Number i of a draw is word i % 4 of Philox4x32-10(key = seed, counter = (offset / 4 + i / 4,
// lap)), so a value depends only on (seed, offset, lap, i): any grid computes the same numbers,
// and a draw of n numbers consumes n rounded up to a multiple of 4 of the offset. The seed and
// base offset come either from kernel parameters (eager calls) or from 64-bit slots in device
// memory that each replay of a graph rewrites before it runs (captured calls), the offset
// parameter then being the draw's position inside the graph. A draw inside WHILE loops adds
// each enclosing loop's state: how far its iterations so far moved the offset, and its lap
// (nonzero once a loop ran past the iterations each replay reserves: a fresh counter space).
#include <stdint.h>

namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // Philox round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
constexpr float kTwoPow24Inv = 1.0f / 16777216.0f;

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
#pragma unroll
  for (int round = 0; round < 10; round++) {
    uint32_t lo0 = kMul0 * c.x, hi0 = __umulhi(kMul0, c.x);
    uint32_t lo1 = kMul1 * c.z, hi1 = __umulhi(kMul1, c.z);
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += kWeyl0;
    k.y += kWeyl1;
  }
  return c;
}

// [0, 1) from the top 24 bits: every value is exactly representable.
__device__ __forceinline__ float to_uniform(uint32_t x) { return float(x >> 8) * kTwoPow24Inv; }
// (0, 1], for the logarithm of Box-Muller.
__device__ __forceinline__ float to_open_uniform(uint32_t x) { return float((x >> 8) + 1) * kTwoPow24Inv; }

struct Source {
  uint2 key;
  unsigned long long base;  // offset / 4: the counter of the draw's first group
  unsigned lap;
};

// The enclosing WHILE loops' states (rel, lap, iteration, unused), innermost first, NULL after
// the last: src/rng.c's loop_chain_t.
constexpr int kLoopDepth = 4;
struct LoopChain {
  const unsigned long long* state[kLoopDepth];
};

__device__ __forceinline__ Source source(const unsigned long long* slots, LoopChain chain, unsigned long long seed,
                                         unsigned long long offset) {
  unsigned lap = 0;
  if (slots != nullptr) {  // captured: the replay wrote the generator's state here
    seed = slots[0];
    offset += slots[1];
    for (int d = 0; d < kLoopDepth && chain.state[d] != nullptr; d++) {
      offset += chain.state[d][0];
      lap = max(lap, unsigned(chain.state[d][1]));
    }
  }
  Source s;
  s.key = make_uint2(uint32_t(seed), uint32_t(seed >> 32));
  s.base = offset / 4;
  s.lap = lap;
  return s;
}

__device__ __forceinline__ uint4 draw(const Source& s, unsigned long long group) {
  unsigned long long ctr = s.base + group;
  return philox4x32_10(make_uint4(uint32_t(ctr), uint32_t(ctr >> 32), s.lap, 0u), s.key);
}

__device__ __forceinline__ void store4(float* out, unsigned long long n, unsigned long long i, float4 v, bool vector) {
  if (vector && i + 3 < n) {
    *reinterpret_cast<float4*>(out + i) = v;  // one 16-byte store
    return;
  }
  if (i < n) out[i] = v.x;
  if (i + 1 < n) out[i + 1] = v.y;
  if (i + 2 < n) out[i + 2] = v.z;
  if (i + 3 < n) out[i + 3] = v.w;
}

}  // namespace

extern "C" __global__ void cgc_philox_uniform(float* out, unsigned long long n, const unsigned long long* slots,
                                              LoopChain chain, unsigned long long seed, unsigned long long offset) {
  Source s = source(slots, chain, seed, offset);
  bool vector = (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  unsigned long long groups = (n + 3) / 4;
  for (unsigned long long g = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; g < groups;
       g += (unsigned long long)gridDim.x * blockDim.x) {
    uint4 r = draw(s, g);
    store4(out, n, 4 * g, make_float4(to_uniform(r.x), to_uniform(r.y), to_uniform(r.z), to_uniform(r.w)), vector);
  }
}

extern "C" __global__ void cgc_philox_normal(float* out, unsigned long long n, float mean, float stddev,
                                             const unsigned long long* slots, LoopChain chain,
                                             unsigned long long seed, unsigned long long offset) {
  Source s = source(slots, chain, seed, offset);
  bool vector = (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  unsigned long long groups = (n + 3) / 4;
  for (unsigned long long g = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; g < groups;
       g += (unsigned long long)gridDim.x * blockDim.x) {
    uint4 r = draw(s, g);
    // Box-Muller on two pairs: (x, y) -> two normals, (z, w) -> two more.
    float r0 = sqrtf(-2.0f * logf(to_open_uniform(r.x))), a0 = 6.2831853071795865f * to_uniform(r.y);
    float r1 = sqrtf(-2.0f * logf(to_open_uniform(r.z))), a1 = 6.2831853071795865f * to_uniform(r.w);
    float s0, c0, s1, c1;
    sincosf(a0, &s0, &c0);
    sincosf(a1, &s1, &c1);
    store4(out, n, 4 * g,
           make_float4(mean + stddev * r0 * c0, mean + stddev * r0 * s0, mean + stddev * r1 * c1,
                       mean + stddev * r1 * s1),
           vector);
  }
}

// Writes a generator's state into its slots: the step each replay runs before the graph. Slot 2
// counts the laps loops started in this replay (see cgc_philox_loop_advance).
extern "C" __global__ void cgc_philox_set_state(unsigned long long* slots, unsigned long long seed,
                                                unsigned long long offset) {
  slots[0] = seed;
  slots[1] = offset;
  slots[2] = 0;
}

// The last work of each iteration of a WHILE loop that draws (src/rng.c's loop_advance_t): for
// each generator j the loop drew from, its state moves on by what one iteration consumes, so the
// next iteration's draws are those an eager run's next iteration makes. Every `cap` iterations
// (the iterations one replay reserves) the state starts over in a new lap, numbered uniquely
// within the replay by the generator's lap counter, so later iterations stay fresh.
constexpr int kLoopGenerators = 8;
struct LoopAdvance {
  unsigned long long amount[kLoopGenerators];
  unsigned long long* laps[kLoopGenerators];
  unsigned long long cap;
  unsigned n;
};

extern "C" __global__ void cgc_philox_loop_advance(unsigned long long* states, LoopAdvance a) {
  unsigned j = threadIdx.x;
  if (j >= a.n) return;
  unsigned long long* s = states + 4 * j;  // rel, lap, iteration, unused
  unsigned long long iteration = s[2] + 1;
  s[2] = iteration;
  if (iteration % a.cap == 0) {
    s[0] = 0;
    s[1] = atomicAdd(a.laps[j], 1ull) + 1;
  } else {
    s[0] += a.amount[j];
  }
}
