#!/bin/bash
# Bazel's test of the Python binding: its unittests against the libcgc.so Bazel built, with
# warnings as errors. GPU and PyTorch tests skip with the reason where there is neither.
#   (bazel test //bindings/python:python_binding_test; the first argument is libcgc.so)
set -euo pipefail
export CGC_LIBRARY="$PWD/$1"
cd "$(dirname "$0")"
exec python3 -W error -m unittest -v test_cgc test_torch
