#!/bin/bash
# README's first command: sets up what the build needs (tools/setup.sh), builds cgc and runs its
# benchmark and demo, cgc_bench, against the raw CUDA driver. On a machine without a GPU it says
# so (the driver or device it could not find) and exits with status 1. Arguments go to cgc_bench
# (--full, --json FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel run //bench:cgc_bench -- "$@"
