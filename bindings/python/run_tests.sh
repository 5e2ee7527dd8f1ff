#!/bin/bash
# Bazel's test of the Python binding: its unittests against the libcgc.so Bazel built, with
# warnings as errors. GPU and PyTorch tests skip with the reason where there is neither.
#   (bazel test //bindings/python:python_binding_test; the arguments are libcgc.so, the ABI
#   description of capi/cgc.h that //tools:abi_description prints, and the examples' kernel
#   examples/kernels/scale_add.ptx that the GPU tests load)
set -euo pipefail
export CGC_LIBRARY="$PWD/$1"
export CGC_ABI_DESCRIPTION="$PWD/$2"
export CGC_SCALE_ADD_PTX="$PWD/$3"
cd "$(dirname "$0")"
exec python3 -W error -m unittest -v test_cgc test_torch
