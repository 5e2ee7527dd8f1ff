// A loop step whose kernel decides itself whether the loop goes on (cgc 1.3,
// CGC_CONDITIONAL_BODY_SETS_CONDITION): counts one iteration, then sets the WHILE node's
// condition through its handle, so no other kernel runs per iteration. The bindings' examples and
// GPU tests load its PTX (loop_continue.ptx), made by:
//   nvcc -ptx -arch=compute_80 -o loop_continue.ptx loop_continue.cu
// then setting its `.version` line to 8.4 (what CUDA 12.4, the first driver with conditional
// nodes, reads; nvcc 13 writes 9.0). cudaGraphSetConditional stays an extern call in the PTX:
// the driver's PTX compiler provides it, as ptxas does.
#include <cuda_runtime.h>

extern "C" __global__ void loop_continue(cudaGraphConditionalHandle handle, unsigned* counter, const unsigned* n) {
  unsigned c = ++*counter;
  cudaGraphSetConditional(handle, c < *n ? 1u : 0u);
}
