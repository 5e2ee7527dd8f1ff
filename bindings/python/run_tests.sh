#!/bin/bash
# Bazel's test of the Python binding: its unittests against the libcgc.so Bazel built, with
# warnings as errors. GPU and PyTorch tests skip with the reason where there is neither.
#   (bazel test //bindings/python:python_binding_test; the arguments are libcgc.so, the ABI
#   description of capi/cgc.h that //tools:abi_description prints, the examples' kernel
#   examples/kernels/scale_add.ptx that the GPU tests load and, where given,
#   examples/kernels/loop_continue.ptx: without it the GPU test that loads it looks for it beside
#   this folder, as in the repository and the GPU bundle)
set -euo pipefail
export CGC_LIBRARY="$PWD/$1"
export CGC_ABI_DESCRIPTION="$PWD/$2"
export CGC_SCALE_ADD_PTX="$PWD/$3"
if [ $# -ge 4 ]; then
  export CGC_LOOP_CONTINUE_PTX="$PWD/$4"
fi
cd "$(dirname "$0")"
exec python3 -W error -m unittest -v test_cgc test_conditional_bodies test_torch test_torch_graphs
