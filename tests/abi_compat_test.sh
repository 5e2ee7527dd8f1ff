#!/bin/bash
# Bazel's test of ABI compatibility: abi_compat_test.py with the system python3 (this offline
# Bazel 4's py_test wants a `python` that Debian does not have).
exec python3 "$@"
