#!/bin/bash
# Adds the bindings' GPU-ready test binaries and examples to a GPU bundle (tests/make_bundle.sh
# calls it; the GPU machine has no Rust, Go or Bazel, so everything is built here):
#   bin/rust_*_test, bin/go_binding_test      test binaries (they find libcgc via CGC_LIBRARY)
#   python/                                   cgc.py and its unittest files
#   tools/{rust,go}_{fork_join,graph_work}, tools/*.py   the examples
# A toolchain that is missing here is reported and its part left out.
#   tools/bundle_bindings.sh BUNDLE_DIR
set -euo pipefail
out="$1"
ws="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out/bin" "$out/tools" "$out/python"

if command -v cargo >/dev/null 2>&1; then
  # Test binaries are named after their test file plus a hash; cargo's JSON messages say which.
  (cd "$ws/bindings/rust" && cargo test --release --no-run --message-format=json) |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    # the integration tests (tests/*.rs): the unit tests of the lib target need no GPU and run in CI
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])' |
    while read -r name exe; do cp "$exe" "$out/bin/rust_${name}_test"; done
  (cd "$ws/bindings/rust" && cargo build --release --quiet --example fork_join)
  cp "$ws/bindings/rust/target/release/examples/fork_join" "$out/tools/rust_fork_join"
  (cd "$ws/bindings/rust" && cargo build --release --quiet --example graph_work)
  cp "$ws/bindings/rust/target/release/examples/graph_work" "$out/tools/rust_graph_work"
else
  echo "bundle_bindings: no cargo here, the Rust binding's tests are left out" >&2
fi

if command -v go >/dev/null 2>&1; then
  export GOFLAGS=-buildvcs=false GOPROXY=off
  (cd "$ws/bindings/go" && go test -c -o "$out/bin/go_binding_test" .)
  (cd "$ws/examples/go" && go build -o "$out/tools/go_fork_join" .)
  (cd "$ws/examples/go_graph_work" && go build -o "$out/tools/go_graph_work" .)
else
  echo "bundle_bindings: no go here, the Go binding's tests are left out" >&2
fi

cp "$ws"/bindings/python/*.py "$out/python/"
# cgc's PyTorch allocator is built on the GPU machine from its sources, in the layout cgc.py
# looks for beside itself (python/torch_backend/).
mkdir -p "$out/python/torch_backend/bindings/torch_bridge" "$out/python/torch_backend/capi"
cp "$ws"/bindings/torch_bridge/{backend.cc,routes.cc,routes.h} "$out/python/torch_backend/bindings/torch_bridge/"
cp "$ws"/capi/{cgc.h,cgc_api.h} "$out/python/torch_backend/capi/"
cp "$ws"/examples/python/*.py "$out/tools/"
echo "bindings bundled: $(ls "$out/bin" | grep -cE '^(rust|go)_') Rust/Go test binaries, $(ls "$out/python" | wc -l) Python files"
