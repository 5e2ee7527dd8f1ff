#!/bin/bash
# Adds the ThreadSanitizer builds of the stress test and of family_test (the library and the tests
# instrumented) and gcc's libtsan.so.2 to a GPU bundle, as bundle/tsan/: run_tests.sh --sanitize
# runs them.
#   tools/bundle_tsan.sh BUNDLE_DIR      (called by `bazel run //tests:gpu_bundle -- DIR`)
set -euo pipefail
out=$1
cd "$(dirname "$0")/.."
bazel build --config=tsan //tests/stress:stress_short_test //tests:family_test 2>&1 | tail -1
mkdir -p "$out/tsan"
cp -L "$(bazel info --config=tsan bazel-bin 2>/dev/null)/tests/stress/stress_short_test" "$out/tsan/stress_test"
cp -L "$(bazel info --config=tsan bazel-bin 2>/dev/null)/tests/family_test" "$out/tsan/family_test"
cp -L "$(gcc -print-file-name=libtsan.so.2)" "$out/tsan/"
cp tests/stress/tsan_suppressions.txt "$out/tsan/"
chmod -R u+w "$out/tsan"
