#!/bin/bash
# Packs the test binaries, libcgc.so, the header and a runner into one folder that runs on a
# GPU machine without Bazel:   bazel run //tests:gpu_bundle -- DIR
# (Bazel passes the files first; the folder is the last argument.)
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bazel run //tests:gpu_bundle -- DIR" >&2
  exit 2
fi
out="${!#}"
case "$out" in
  /*) ;;
  *) out="${BUILD_WORKSPACE_DIRECTORY:-$PWD}/$out" ;;
esac
rm -rf "$out"
mkdir -p "$out/bin" "$out/data/capi" "$out/tools"
for f in "${@:1:$#-1}"; do
  case "$f" in
    *libcgc.so) cp -L "$f" "$out/data/libcgc.so" && cp -L "$f" "$out/data/libcgc.so.1" ;;
    *libcgc_torch.so) cp -L "$f" "$out/data/libcgc_torch.so" && cp -L "$f" "$out/data/libcgc_torch.so.1" ;;
    *capi/cgc.h) cp -L "$f" "$out/data/capi/cgc.h" ;;
    *capi/cgc_api.h) cp -L "$f" "$out/data/capi/cgc_api.h" ;;
    *tools/abi.txt) cp -L "$f" "$out/data/abi.txt" ;;
    *run_bundle.sh) cp -L "$f" "$out/run_tests.sh" && chmod +x "$out/run_tests.sh" ;;
    examples/* | bench/* | tests/kernels/*) cp -L "$f" "$out/tools/" ;;
    *) cp -L "$f" "$out/bin/" ;;
  esac
done
chmod -R u+w "$out"
# The bindings' tests and examples, built with their own tools (cargo, go) from the workspace,
# and the ThreadSanitizer build of the stress test (another Bazel configuration).
if [ -n "${BUILD_WORKSPACE_DIRECTORY:-}" ]; then
  "$BUILD_WORKSPACE_DIRECTORY/tools/bundle_bindings.sh" "$out"
  "$BUILD_WORKSPACE_DIRECTORY/tools/bundle_tsan.sh" "$out"
fi
echo "bundle written to $out ($(ls "$out/bin" | wc -l) binaries); run $out/run_tests.sh on a GPU machine"
