#!/bin/bash
# What building, testing and running cgc needs, installed from Debian's packages where missing:
# Bazel 4 (bazel-bootstrap), a C/C++ compiler, googletest's sources, Go, Rust's cargo, Python 3,
# and what the install check uses (cmake, pkg-config). The CUDA toolkit is the one thing it does
# not install: it is looked for at $CUDA_PATH or /usr/local/cuda and named when missing.
# README's two commands (tools/test_all.sh, tools/bench.sh) run it first; run it alone to set up.
set -euo pipefail

cuda=${CUDA_PATH:-/usr/local/cuda}
if [ ! -f "$cuda/include/cuda.h" ] || [ ! -x "$cuda/bin/nvcc" ]; then
  echo "setup: no CUDA toolkit at $cuda (cuda.h and nvcc are needed to build; no GPU is)." >&2
  echo "setup: install NVIDIA's CUDA toolkit there, or set CUDA_PATH to where it is." >&2
  exit 1
fi

need=()
want() { command -v "$1" >/dev/null 2>&1 || need+=("$2"); }
want bazel bazel-bootstrap
want gcc gcc
want g++ g++
want go golang-go
want cargo cargo
want python3 python3
want cmake cmake
want pkg-config pkgconf
[ -f /usr/src/googletest/googletest/src/gtest-all.cc ] || need+=(googletest)
# pip and venv for the Python binding's package check (Debian splits them out of python3).
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} (Debian packages)"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${need[@]}"
fi
