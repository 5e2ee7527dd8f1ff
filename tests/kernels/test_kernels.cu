// Kernels the tests capture and replay. Compiled by nvcc into a fatbin (tests/BUILD), embedded
// in the test binaries and loaded through the driver API: the tests need no CUDA runtime.
#include <stdint.h>

// out[i] = in[i] + v
extern "C" __global__ void cgc_test_add(float* out, const float* in, float v, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + v;
}

// p[i] = p[i] * a + b
extern "C" __global__ void cgc_test_axpb(float* p, float a, float b, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * a + b;
}

// p[i] = v
extern "C" __global__ void cgc_test_fill(float* p, float v, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

// p[i] = seed-derived pattern for block-integrity checks: p[i] = seed * 2654435761u + i
extern "C" __global__ void cgc_test_stamp(uint32_t* p, uint32_t seed, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = seed * 2654435761u + i;
}

// Writes the device's nanosecond timer: a kernel whose every replay writes something else.
extern "C" __global__ void cgc_test_clock(unsigned long long* p) {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  *p = now;
}

// Spins for about `cycles` clock cycles: makes work that is still running when the host looks.
extern "C" __global__ void cgc_test_spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// out[i] = in[i] * params[0] + params[1]: the per-replay values come from device memory that a
// captured copy fills at every replay.
extern "C" __global__ void cgc_test_scale_add(float* out, const float* in, const float* params, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * params[0] + params[1];
}

// Loops on the device (conditional nodes): a counter that counts to *n, and the condition
// "another iteration" written for cgc's condition kernel.
extern "C" __global__ void cgc_test_loop_init(unsigned* counter, const unsigned* n, unsigned* more) {
  *counter = 0;
  *more = *n > 0;
}
extern "C" __global__ void cgc_test_loop_step(unsigned* counter, const unsigned* n, unsigned* more) {
  unsigned c = ++*counter;
  *more = c < *n;
}
// *odd = whether *counter is odd; *hits counts the times it ran.
extern "C" __global__ void cgc_test_parity(const unsigned* counter, unsigned* odd) { *odd = *counter & 1u; }
extern "C" __global__ void cgc_test_count(unsigned* hits) { atomicAdd(hits, 1u); }

// A loop whose body decides itself whether another iteration follows (1.3,
// CGC_CONDITIONAL_BODY_SETS_CONDITION): counts, and sets the node's condition through its handle.
#include <cuda_runtime.h>
extern "C" __global__ void cgc_test_count_and_continue(cudaGraphConditionalHandle handle, unsigned* counter,
                                                       const unsigned* n) {
  unsigned c = ++*counter;
  cudaGraphSetConditional(handle, c < *n ? 1u : 0u);
}
// out[*counter * n + i] = in[i]: a loop's iterations each keep their own row.
extern "C" __global__ void cgc_test_append(float* out, const float* in, const unsigned* counter, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[(unsigned long long)*counter * n + i] = in[i];
}
