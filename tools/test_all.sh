#!/bin/bash
# Every test of the project, as CI runs them (README's test command), after tools/setup.sh has
# installed what they need:
#   1. bazel test //...      the library's C/C++ tests and the Python binding's unittests, then
#      the C/C++ tests again under ASan and UBSan
#   2. the Rust and Go bindings with their own tools (cargo, go), which this offline Bazel 4
#      cannot drive, against the libcgc.so that Bazel built and the header's ABI description;
#      warnings are errors;
#   3. the bindings as packages (tools/check_packages.sh) and the install: tools/install.sh into a
#      temporary prefix, and a small consumer built against it with pkg-config and with CMake,
#      run on its no-GPU path (tools/check_install.sh).
# GPU tests skip with the reason on machines without a GPU (run the bundle there instead).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh  # what the tests need, from Debian's packages where missing (the CUDA toolkit aside)
bazel --version
bazel test //...
# The C/C++ tests again under AddressSanitizer and UndefinedBehaviorSanitizer (GPU tests skip
# here as above; they run under compute-sanitizer on a GPU: run_tests.sh --sanitize).
bazel test --config=asan //tests/...

bazel build //:libcgc.so //tools:abi_description
export CGC_LIBRARY="$PWD/bazel-bin/libcgc.so"
# The header's functions, structs and status codes, which the bindings' CI tests compare with.
export CGC_ABI_DESCRIPTION="$PWD/bazel-bin/tools/abi.txt"
export RUSTFLAGS="-D warnings"
export GOFLAGS=-buildvcs=false GOPROXY=off

echo "== Rust binding ($(cargo --version))"
(cd bindings/rust && cargo test --offline && cargo build --offline --examples)

echo "== Go binding ($(go version))"
(cd bindings/go && ! gofmt -l . | grep . && go vet ./... && go test -v ./...)
(cd examples/go && ! gofmt -l . | grep . && go vet ./... && go build -o /dev/null .)
(cd examples/go_graph_work && ! gofmt -l . | grep . && go vet ./... && go build -o /dev/null .)
echo "== Packages (tools/check_packages.sh: pip install of the Python binding offline, cargo package, Go from outside)"
tools/check_packages.sh
echo "== Install (tools/check_install.sh: a temporary prefix, a consumer built with pkg-config and CMake)"
tools/check_install.sh
echo "all tests passed"
