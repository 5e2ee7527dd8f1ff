// The benchmark's own kernels: compiled by nvcc into a fatbin (bench/BUILD), embedded in
// cgc_bench and loaded through the driver API, so the benchmark needs no CUDA runtime.
#include <stdint.h>

// One step of a 32-bit linear congruential generator, `steps` times per element:
//   p[i] = p[i] * 1664525 + 1013904223 (mod 2^32), repeated.
// With steps = 1 and one warp it is the "tiny kernel" of the launch scenarios; with many steps
// it is the measurable GPU work of the multi-stream scenario. The host can check any number of
// steps exactly (the affine map composes), so results are verified, not assumed.
extern "C" __global__ void cgc_bench_lcg(uint32_t* p, unsigned n, unsigned steps) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t u = p[i];
  for (unsigned k = 0; k < steps; k++) u = u * 1664525u + 1013904223u;
  p[i] = u;
}

// One "layer" of the MLP-like chain of the memory scenario, row by row over rows x width floats:
//   out[r][c] = scale * in[r][c] + 0.25 * in[r][(7c + 1) mod width] + bias
// The second term mixes columns, so a wrong row or column offset changes the result.
extern "C" __global__ void cgc_bench_layer(float* out, const float* in, unsigned rows, unsigned width,
                                           float scale, float bias) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long total = (unsigned long long)rows * width;
  if (i >= total) return;
  unsigned r = (unsigned)(i / width), c = (unsigned)(i % width);
  const float* row = in + (unsigned long long)r * width;
  out[i] = scale * row[c] + 0.25f * row[(7u * c + 1u) % width] + bias;
}

// The loop control of the device-loop scenario: counts iterations and says whether another
// follows (the condition a WHILE node reads).
extern "C" __global__ void cgc_bench_loop_init(unsigned* counter, unsigned* more) {
  *counter = 0;
  *more = 1;
}
extern "C" __global__ void cgc_bench_loop_step(unsigned* counter, unsigned n, unsigned* more) {
  unsigned c = ++*counter;
  *more = c < n;
}

// The last kernel of a loop body that decides itself whether the loop goes on (cgc 1.3,
// CGC_CONDITIONAL_BODY_SETS_CONDITION): one LCG step like cgc_bench_lcg, and its first thread
// counts the iteration and sets the WHILE node's condition, so that an iteration runs exactly
// the body's kernels, as a decode step that folds its stop test into its last kernel would.
#include <cuda_runtime.h>
extern "C" __global__ void cgc_bench_lcg_and_continue(cudaGraphConditionalHandle handle, uint32_t* p, unsigned n,
                                                      unsigned* counter, unsigned iterations) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 1664525u + 1013904223u;
  if (i == 0) {
    unsigned c = ++*counter;
    cudaGraphSetConditional(handle, c < iterations ? 1u : 0u);
  }
}

// Busy for `ns` nanoseconds of the GPU's global timer (one thread is enough): the long kernel
// behind which driver_waits makes another thread's cuMemFree wait.
extern "C" __global__ void cgc_bench_spin_ns(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
