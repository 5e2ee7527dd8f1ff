// The kernel cgc puts before a conditional node (and at the end of a WHILE body): it sets the
// node's condition from the caller's device integer (IF and WHILE: nonzero means "run the body
// (again)"; SWITCH: the index of the body to run). Before a WHILE node whose body draws random
// numbers it also zeroes the loop's generator states (src/rng.c), so that every run of the loop
// starts at its first iteration. Compiled to its own fatbin, embedded in libcgc.so and loaded
// per device by src/conditional.c.
#include <cuda_runtime.h>

extern "C" __global__ void cgc_set_condition(cudaGraphConditionalHandle handle, const unsigned* condition,
                                             unsigned as_index, unsigned long long* zero, unsigned n_zero) {
  unsigned value = *condition;
  cudaGraphSetConditional(handle, as_index ? value : (value != 0u ? 1u : 0u));
  for (unsigned i = 0; i < n_zero; i++) zero[i] = 0;
}
