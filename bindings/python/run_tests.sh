#!/bin/bash
# Bazel's test of the Python binding: its unittests against the libcgc.so Bazel built, with
# warnings as errors. GPU and PyTorch tests skip with the reason where there is neither.
#   (bazel test //bindings/python:python_binding_test; the arguments are libcgc.so, the ABI
#   description of capi/cgc.h that //tools:abi_description prints, then the PTX files that the GPU
#   tests load: examples/kernels/scale_add.ptx, tests/kernels/binding_tests.ptx (the bindings'
#   shared test kernels) and examples/kernels/loop_continue.ptx. One not given is looked for
#   beside this folder, as in the repository and the GPU bundle)
set -euo pipefail
export CGC_LIBRARY="$PWD/$1"
export CGC_ABI_DESCRIPTION="$PWD/$2"
for ptx in "${@:3}"; do
  case "$(basename "$ptx")" in
    scale_add.ptx) export CGC_SCALE_ADD_PTX="$PWD/$ptx" ;;
    binding_tests.ptx) export CGC_BINDING_TESTS_PTX="$PWD/$ptx" ;;
    loop_continue.ptx) export CGC_LOOP_CONTINUE_PTX="$PWD/$ptx" ;;
    *) echo "run_tests.sh: no test loads $ptx" >&2 && exit 2 ;;
  esac
done
cd "$(dirname "$0")"
exec python3 -W error -m unittest -v test_cgc test_conditional_bodies test_torch test_torch_graphs
