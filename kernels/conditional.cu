// The kernel cgc puts before a conditional node (and at the end of a WHILE body): it sets the
// node's condition from the caller's device integer, nonzero meaning "run the body (again)".
// Compiled to its own fatbin, embedded in libcgc.so and loaded per device by src/conditional.c.
#include <cuda_runtime.h>

extern "C" __global__ void cgc_set_condition(cudaGraphConditionalHandle handle, const unsigned* condition) {
  cudaGraphSetConditional(handle, *condition != 0u ? 1u : 0u);
}
