// The few PyTorch C++ declarations the bridge relies on, written out here so that the bridge
// builds without PyTorch's headers (which pull in the whole of ATen). They mirror
// torch/csrc/cuda/CUDAPluggableAllocator.h and c10/cuda/CUDACachingAllocator.h of PyTorch 2.3 to
// 2.11 (docs/TORCH.md lists what was checked): the hook setters of CUDAPluggableAllocator and
// the current-allocator pointer of c10. The bridge never calls them through these declarations:
// it looks their symbols up in the loaded PyTorch libraries (kSymbols below) and calls them
// through function pointers of the same types, so that a PyTorch without them is reported, not
// a failed load. tests/torch_bridge_symbols_test.sh checks that kSymbols are what a C++ compiler
// makes of these declarations (whether a PyTorch has them shows at attach, on its machine).
#ifndef CGC_TORCH_BRIDGE_TORCH_ABI_H_
#define CGC_TORCH_BRIDGE_TORCH_ABI_H_

#include <functional>
#include <utility>

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace c10 {
namespace cuda {
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;  // {0,0}: no pool
}  // namespace cuda
}  // namespace c10

namespace torch {
namespace cuda {
namespace CUDAPluggableAllocator {
using StreamFilter = std::function<bool(CUstream_st*)>;
using BeginAllocateToPoolFn = std::function<void(int, c10::cuda::MempoolId_t, StreamFilter)>;
using PoolFn = std::function<void(int, c10::cuda::MempoolId_t)>;
using RecordStreamFn = std::function<void(void*, CUstream_st*)>;
using ResetFn = std::function<void()>;

struct CUDAPluggableAllocator {
  // beginAllocateToPool(device, pool, filter): from now on, allocations on streams the filter
  // accepts come from `pool` (torch calls it before cudaStreamBeginCapture).
  void set_begin_allocate_to_pool(BeginAllocateToPoolFn fn);
  // endAllocateToPool(device, pool): that routing ends (after cudaStreamEndCapture).
  void set_end_allocate_to_pool_fn(PoolFn fn);
  // releasePool(device, pool): one user of the pool is gone (a graph reset or destroyed).
  void set_release_pool(PoolFn fn);
  // Tensor.record_stream.
  void set_record_stream_fn(RecordStreamFn fn);
  // torch.cuda.empty_cache().
  void set_reset_fn(ResetFn fn);
};
}  // namespace CUDAPluggableAllocator
}  // namespace cuda
}  // namespace torch

namespace cgc_torch {
// The mangled names of the declarations above (Itanium C++ ABI), in this order.
enum Symbol { kSetBegin, kSetEnd, kSetRelease, kSetRecordStream, kSetReset, kCurrentAllocator, kSymbolCount };
inline constexpr const char* kSymbols[kSymbolCount] = {
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator26set_begin_allocate_to_poolESt8functionIFviSt4"
    "pairIyyES3_IFbP11CUstream_stEEEE",
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator27set_end_allocate_to_pool_fnESt8functionIFviSt4"
    "pairIyyEEE",
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator16set_release_poolESt8functionIFviSt4pairIyyEEE",
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator20set_record_stream_fnESt8functionIFvPvP11CUstream_"
    "stEE",
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator12set_reset_fnESt8functionIFvvEE",
    // c10::cuda::CUDACachingAllocator::allocator, a std::atomic<CUDAAllocator*>: the allocator
    // torch.cuda.memory.change_current_allocator installed.
    "_ZN3c104cuda20CUDACachingAllocator9allocatorE",
};
// The dynamic type the current allocator must have (its std::type_info::name()).
inline constexpr const char* kPluggableTypeName = "N5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocatorE";
}  // namespace cgc_torch

#endif  // CGC_TORCH_BRIDGE_TORCH_ABI_H_
