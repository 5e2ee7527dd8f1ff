#!/bin/bash
# The PyTorch symbols the bridge looks up (bindings/torch_bridge/torch_abi.h, kSymbols) are what a
# C++ compiler makes of the declarations in that header: a typo there would only show on a GPU
# machine with PyTorch, as a bridge that refuses to attach.
#   tests/torch_bridge_symbols_test.sh TORCH_ABI_H
set -euo pipefail
header=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cxx=${CXX:-g++}
cat >"$work/uses.cc" <<CC
#include "$header"
#include <atomic>
namespace c10 { namespace cuda { namespace CUDACachingAllocator {
struct CUDAAllocator;
extern std::atomic<CUDAAllocator*> allocator;
} } }
void use_everything(torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator* a) {
  a->set_begin_allocate_to_pool({});
  a->set_end_allocate_to_pool_fn({});
  a->set_release_pool({});
  a->set_record_stream_fn({});
  a->set_reset_fn({});
  (void)c10::cuda::CUDACachingAllocator::allocator.load();
}
CC
cat >"$work/names.cc" <<CC
#include "$header"
#include <cstdio>
int main() { for (const char* s : cgc_torch::kSymbols) std::puts(s); }
CC
"$cxx" -std=c++17 -c "$work/uses.cc" -o "$work/uses.o"
"$cxx" -std=c++17 "$work/names.cc" -o "$work/names"
nm -u "$work/uses.o" | awk '{print $2}' | grep -E '^_ZN(5torch|3c10)' | sort >"$work/compiled"
"$work/names" | sort >"$work/listed"
if ! diff -u "$work/compiled" "$work/listed"; then
  echo "FAIL: torch_abi.h's kSymbols differ from the compiler's mangling of its declarations (diff above)"
  exit 1
fi
echo "1 passed, 0 failed: $(wc -l <"$work/listed") symbols match"
