// The examples' own kernel: out[i] = in[i] * params[0] + params[1]. params lives in device
// memory that the examples' graphs fill from page-locked host memory at every replay, so each
// replay can scale by new values without recapturing.
//
// scale_add.ptx beside this file is its PTX, which the C, Rust, Go and Python examples load
// with cgc_module_load (the driver compiles PTX for whatever GPU it runs on). Regenerate it with
//   nvcc -ptx -arch=compute_75 -o examples/kernels/scale_add.ptx examples/kernels/scale_add.cu
// and then set its `.version` line to 8.0 (what CUDA 12.0, cgc's oldest driver, reads; nvcc 13
// writes 9.0, which older drivers refuse, and this kernel uses nothing newer).
extern "C" __global__ void scale_add(float* out, const float* in, const float* params, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * params[0] + params[1];
}
