// cgc as PyTorch's CUDA allocator: a complete c10::cuda::CUDACachingAllocator::CUDAAllocator,
// built against the installed PyTorch's own headers (torch.utils.cpp_extension, by
// cgc.use_as_torch_allocator on first use, cached by PyTorch's extension cache) and installed as
// PyTorch's current allocator before its first CUDA allocation, as torch.cuda.memory's
// change_current_allocator installs a pluggable one.
//
// Why not the pluggable allocator: CUDAPluggableAllocator forwards only allocation and a few hooks
// and refuses statistics, snapshots and checkpoints, so torch.cuda.memory_stats, the graph tests
// that read them and torch.compile's CUDA-graph trees fail on it; and the hooks can only be
// reached through hand-written declarations of PyTorch's classes (torch_abi.h), which break when
// PyTorch changes them. Here the compiler checks every signature against the headers of the
// PyTorch that loads this library.
//
// What is cgc's and what is this file's:
// - memory, pools, captures: cgc (libcgc.so.1 through its function table; this library links
//   nothing of cgc), with the routes of routes.cc for PyTorch's pool ids;
// - PyTorch's statistics of allocations (allocation, active, allocated/active/requested bytes,
//   small and large pool as PyTorch splits them at 1 MiB) and the live blocks of each torch pool:
//   counted here, at each allocation and free, under `blocks_lock`;
// - reserved bytes, segments and device allocations: cgc's counters (cgc_memory_stats).
// docs/TORCH.md lists what still differs from PyTorch's own allocator.
//
// Locks: `blocks_lock` guards the live-block table and the statistics; it is never held across a
// cgc or CUDA call. The routes' lock is routes.cc's.
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bindings/torch_bridge/routes.h"
#include "capi/cgc.h"

// PyTorch's CUDA generators in cgc.graph's captures (the end of this file) need ATen's headers,
// which every PyTorch install has. PyTorch 2.4 to 2.13 keep the generator's state in a private
// `state_` (the explicit instantiation below names it, for these versions only); the fields read
// there are checked at compile time (GraphSafeFields). Any other PyTorch, or one whose fields
// differ, builds the allocator all the same, without that enrolment.
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#elif __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
#if defined(TORCH_VERSION_MAJOR) && defined(TORCH_VERSION_MINOR) && TORCH_VERSION_MAJOR == 2 && \
    TORCH_VERSION_MINOR >= 4 && TORCH_VERSION_MINOR <= 13 && __has_include(<ATen/cuda/CUDAGeneratorImpl.h>)
#define CGC_TORCH_RNG 1
#include <ATen/core/Generator.h>
#include <ATen/core/TensorBase.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <c10/core/InferenceMode.h>
#include <type_traits>
// Generators the user registers reach this library as the Python objects torch.Generator wraps.
#if __has_include(<torch/csrc/Generator.h>) && __has_include(<Python.h>)
#define CGC_TORCH_RNG_USER_GENERATORS 1
#include <torch/csrc/Generator.h>
#else
#define CGC_TORCH_RNG_USER_GENERATORS 0
#endif
#else
#define CGC_TORCH_RNG 0
#define CGC_TORCH_RNG_USER_GENERATORS 0
#endif

#define BACKEND_API extern "C" __attribute__((visibility("default")))

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;

constexpr int kMaxDevices = 64;
constexpr size_t kSmallSize = 1 << 20;  // PyTorch's small pool: requests of at most 1 MiB
constexpr size_t kAlignment = 512;      // cgc rounds every block to 512 bytes

void add(Stat& stat, int64_t amount) {
  stat.current += amount;
  stat.peak = std::max(stat.peak, stat.current);
  stat.allocated += amount;
}

void sub(Stat& stat, int64_t amount) {
  stat.current -= amount;
  stat.freed += amount;
}

struct LiveBlock {
  size_t size = 0;       // the request rounded to 512 bytes (cgc may hand out a larger block: docs/TORCH.md)
  size_t requested = 0;  // what PyTorch asked for
  int device = 0;
  cgc_torch::Routed pool;  // the torch pool id it came from ({0, 0}: the device's own memory)
};

// Reserved memory as PyTorch reports it, from cgc's counters, with peaks that can be reset:
// cgc's own peak only grows, so a reset keeps cgc's peak at that moment and the reserved bytes
// then; later peaks are cgc's once it passes the kept one (a peak after the reset that stays
// below it shows as the larger of the reserved bytes at the reset and now).
struct ReservedPeak {
  size_t cgc_peak_at_reset = 0;
  size_t reserved_at_reset = 0;
  bool reset = false;
};

using cgc_torch::put_error;

void delete_block(void* ptr);

// A pool's live blocks at a checkpoint, sorted by address.
struct PoolCheckpoint final : cca::AllocatorState {
  c10::DeviceIndex device = 0;
  c10::MempoolId_t id{0, 0};
  std::vector<std::pair<void*, size_t>> blocks;
};

class CgcAllocator final : public cca::CUDAAllocator {
 public:
  // ---- allocation ----

  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = c10::cuda::current_device();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    void* p = nbytes == 0 ? nullptr : allocate_block(nbytes, device, stream);
    return {p, p, &delete_block, c10::Device(c10::DeviceType::CUDA, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  void* raw_alloc(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    c10::DeviceIndex device = c10::cuda::current_device();
    return allocate_block(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream());
  }

  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    if (nbytes == 0) return nullptr;
    return allocate_block(nbytes, c10::cuda::current_device(), stream);
  }

  void raw_delete(void* ptr) override { free_block(ptr); }

  // The allocation of `nbytes` on `stream`: routed to a capture's or MemPool scope's pool where
  // PyTorch opened one; c10::OutOfMemoryError (torch.cuda.OutOfMemoryError) when cgc is out of
  // memory after giving its cache back, any other refusal as PyTorch's allocator raises errors.
  void* allocate_block(size_t nbytes, c10::DeviceIndex device, cudaStream_t stream) {
    check_fraction(device, nbytes);
    cgc_torch::Routed routed;
    void* p = cgc_torch::malloc_routed(static_cast<ssize_t>(nbytes), device, stream, true, &routed);
    if (p == nullptr) {
      bool oom = out_of_memory();
      std::string message = cgc_torch::api()->cgc_last_error();
      if (oom) p = malloc_from_oom_pools(device, nbytes, stream, &routed);
      if (p == nullptr) raise_allocation_failure(device, nbytes, oom, message);
    }
    if (routed.id0 == 0 && routed.id1 == 0 && claimed_captures_open()) attribute_to_capture(device, stream, &routed);
    LiveBlock block{round_up(nbytes), nbytes, device, routed};
    {
      std::lock_guard<std::mutex> hold(blocks_lock_);
      blocks_.emplace(p, block);
      count(block, +1);
    }
    return p;
  }

  void free_block(void* ptr) {
    if (ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> hold(blocks_lock_);
      auto it = blocks_.find(ptr);
      if (it != blocks_.end()) {
        count(it->second, -1);
        blocks_.erase(it);
      }
    }
    cgc_torch::api()->cgc_torch_free(ptr, 0, 0, nullptr);
  }

  // ---- set-up and configuration ----

  void init(int device_count) override {
    device_count_ = std::min(device_count, kMaxDevices);
    initialized_.store(true, std::memory_order_release);
  }
  bool initialized() override { return initialized_.load(std::memory_order_acquire); }

  double getMemoryFraction(c10::DeviceIndex device) override {
    check_device(device);
    return fraction_[device].load(std::memory_order_relaxed);
  }

  // Limits what cgc hands PyTorch on the device (its allocated bytes, with the new block) to
  // `fraction` of the device's total; an allocation beyond raises out of memory. (PyTorch's own
  // allocator limits its reserved bytes; cgc's cache is shared with cgc's other users.)
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    check_device(device);
    TORCH_CHECK(fraction >= 0 && fraction <= 1, "cgc: invalid fraction ", fraction, ", it must be in [0, 1]");
    fraction_[device].store(fraction, std::memory_order_relaxed);
  }

  // cgc's segments are plain device allocations: none is expandable.
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override { return {}; }

  void enable(bool value) override { enabled_.store(value, std::memory_order_relaxed); }
  bool isEnabled() const override { return enabled_.load(std::memory_order_relaxed); }

  // cuDNN and others ask for the largest block they could get without a new device allocation:
  // cgc does not say which free block is largest, so this is the device's free memory, which an
  // allocation of that size can get after cgc gives its cache back.
  void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) override {
    size_t free_bytes = 0, total = 0;
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    *largestBlock = free_bytes;
  }

  void* getBaseAllocation(void* ptr, size_t* size) override {
    std::lock_guard<std::mutex> hold(blocks_lock_);
    auto it = blocks_.find(ptr);
    TORCH_CHECK(it != blocks_.end(), "cgc: getBaseAllocation: ", ptr, " is not a block cgc handed to PyTorch");
    *size = it->second.size;
    return ptr;  // each block is its own base: cgc shares no segment through IPC
  }

  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    cgc_torch::record_stream(ptr.get(), stream.stream());
  }

  void emptyCache(c10::MempoolId_t mempool_id) override {
    // A pool's memory goes back to the driver when its last user is gone (cgc_empty_cache gives
    // back every unreferenced pool's): one pool alone cannot be emptied earlier. PyTorch calls
    // this from MemPool's destructor too, where an exception would end the process: said instead.
    (void)mempool_id;
    try {
      cgc_torch::empty_cache();
    } catch (const std::exception& e) {
      TORCH_WARN("cgc: empty_cache: ", e.what());
    }
  }

  // ---- statistics ----

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    {
      std::lock_guard<std::mutex> hold(blocks_lock_);
      stats = stats_[device];
    }
    // A device cgc never allocated on for PyTorch holds nothing: asking cgc would make a context
    // there (hundreds of MiB), which PyTorch's own allocator does not.
    if (!cgc_torch::device_used(device)) return stats;
    cgc_memory_stats_t cgc_stats = memory_stats(device);
    Stat& reserved = stats.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)];
    reserved.current = static_cast<int64_t>(cgc_stats.bytes_reserved);
    reserved.peak = static_cast<int64_t>(reserved_peak(device, cgc_stats));
    Stat& segments = stats.segment[static_cast<size_t>(StatType::AGGREGATE)];
    segments.allocated = static_cast<int64_t>(cgc_stats.num_driver_allocs);
    segments.freed = static_cast<int64_t>(cgc_stats.num_driver_frees);
    segments.current = segments.allocated - segments.freed;
    segments.peak = std::max(segments.peak, segments.current);
    stats.num_device_alloc = static_cast<int64_t>(cgc_stats.num_driver_allocs);
    stats.num_device_free = static_cast<int64_t>(cgc_stats.num_driver_frees);
    add_segment_stats(device, &stats);
    return stats;
  }

  // The small and large pools' reserved bytes and segments, and the free blocks of split segments
  // (PyTorch's "inactive split"), from cgc's segments. Their peaks are the largest values seen by
  // these calls (cgc counts no peak per kind); their allocated/freed totals are not kept.
  void add_segment_stats(c10::DeviceIndex device, c10::CachingDeviceAllocator::DeviceStats* stats) {
    CgcSnapshot snap = take_snapshot(device);
    const size_t all = static_cast<size_t>(StatType::AGGREGATE);
    for (const cgc_segment_info_t& seg : snap.segments) {
      size_t kind = static_cast<size_t>(seg.small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
      stats->reserved_bytes[kind].current += static_cast<int64_t>(seg.size);
      stats->segment[kind].current += 1;
      if (seg.n_blocks < 2) continue;
      for (size_t i = seg.first_block; i < seg.first_block + seg.n_blocks; i++) {
        if (snap.blocks[i].state != CGC_BLOCK_STATE_FREE) continue;
        for (size_t k : {all, kind}) {
          stats->inactive_split[k].current += 1;
          stats->inactive_split_bytes[k].current += static_cast<int64_t>(snap.blocks[i].size);
        }
      }
    }
    std::lock_guard<std::mutex> hold(blocks_lock_);
    auto& seen = seen_peaks_[device];
    for (auto* array : {&stats->reserved_bytes, &stats->segment, &stats->inactive_split, &stats->inactive_split_bytes}) {
      for (size_t k = 0; k < array->size(); k++) {
        if (array == &stats->reserved_bytes && k == all) continue;  // cgc's own peak
        Stat& stat = (*array)[k];
        int64_t& peak = seen[array_index(stats, array)][k];
        peak = std::max(peak, stat.current);
        stat.peak = peak;
      }
    }
  }

  static size_t array_index(const c10::CachingDeviceAllocator::DeviceStats* stats,
                            const c10::CachingAllocator::StatArray* array) {
    if (array == &stats->reserved_bytes) return 0;
    if (array == &stats->segment) return 1;
    if (array == &stats->inactive_split) return 2;
    return 3;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device(device);
    std::lock_guard<std::mutex> hold(blocks_lock_);
    auto& s = stats_[device];
    for (auto* array : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                        &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
      for (Stat& stat : *array) stat.allocated = stat.freed = 0;
    s.num_alloc_retries = s.num_ooms = s.num_sync_all_streams = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device(device);
    cgc_memory_stats_t cgc_stats{};
    if (cgc_torch::device_used(device)) cgc_stats = memory_stats(device);
    std::lock_guard<std::mutex> hold(blocks_lock_);
    auto& s = stats_[device];
    for (auto* array : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                        &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
      for (Stat& stat : *array) stat.peak = stat.current;
    peaks_[device] = ReservedPeak{cgc_stats.peak_bytes_reserved, cgc_stats.bytes_reserved, true};
    for (auto& kinds : seen_peaks_[device])
      for (int64_t& peak : kinds) peak = 0;  // the next stats call sets them to the current values
  }

  // torch.cuda.memory_snapshot: cgc's segments and blocks (cgc_memory_snapshot), each segment
  // with the torch pool id of its pool; with `mempool_id`, that pool's alone. cgc keeps no trace
  // of past allocations: the traces are empty.
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override {
    (void)include_traces;
    cca::SnapshotInfo info;
    bool one_pool = mempool_id.first != 0 || mempool_id.second != 0;
    for (int device = 0; device < device_count_; device++) {
      if (!cgc_torch::device_used(device)) continue;  // cgc never allocated there for PyTorch
      CgcSnapshot snap = take_snapshot(static_cast<c10::DeviceIndex>(device));
      for (const cgc_segment_info_t& seg : snap.segments) {
        c10::MempoolId_t owner{0, 0};
        if (seg.pool != nullptr) cgc_torch::torch_pool_id_of(device, seg.pool, &owner.first, &owner.second);
        if (one_pool && owner != mempool_id) continue;
        c10::CachingDeviceAllocator::SegmentInfo out;
        out.device = static_cast<c10::DeviceIndex>(device);
        out.address = reinterpret_cast<size_t>(seg.address);
        out.total_size = seg.size;
        out.allocated_size = seg.allocated_bytes;
        out.stream = reinterpret_cast<void*>(seg.stream_id);  // the driver's stream id: which stream, not a handle
        out.is_large = seg.small == 0;
        out.is_expandable = false;
        out.owner_private_pool_id = owner;
        for (size_t i = seg.first_block; i < seg.first_block + seg.n_blocks; i++) {
          const cgc_block_info_t& b = snap.blocks[i];
          c10::CachingDeviceAllocator::BlockInfo block;
          block.size = b.size;
          block.requested_size = b.requested;
          block.allocated = b.state == CGC_BLOCK_STATE_ALLOCATED;
          block.active = b.state != CGC_BLOCK_STATE_FREE;
          out.requested_size += b.requested;
          if (block.active) out.active_size += b.size;
          out.blocks.push_back(std::move(block));
        }
        info.segments.push_back(std::move(out));
      }
    }
    info.device_traces.resize(static_cast<size_t>(std::max(device_count_, 0)));
    return info;
  }

  // ---- pools: captures and MemPool ----

  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    cgc_torch::begin_allocate_to_pool(device, id.first, id.second, std::move(filter));
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) override {
    cgc_torch::end_allocate_to_pool(device, id.first, id.second);
  }
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) override {
    cgc_torch::release_pool(device, id.first, id.second);
  }
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) override {
    return cgc_torch::pool_use_count(device, id.first, id.second);
  }
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override {
    TORCH_CHECK(allocator == nullptr || allocator.get() == this,
                "cgc: a torch.cuda.MemPool with an allocator of its own cannot be served by cgc's pools");
    cgc_torch::create_or_incref_pool(device, id.first, id.second);
  }

  // A MemPool(use_on_oom=True): an allocation that finds the device out of memory is served from
  // this pool's cached memory, if it has enough, before out of memory is raised.
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t id, bool use_on_oom) override {
    check_device(device);
    std::lock_guard<std::mutex> hold(blocks_lock_);
    auto& pools = use_on_oom_[device];
    auto it = std::find(pools.begin(), pools.end(), id);
    if (use_on_oom && it == pools.end()) pools.push_back(id);
    if (!use_on_oom && it != pools.end()) pools.erase(it);
  }

  void setNoSplit(c10::DeviceIndex, c10::MempoolId_t) override {
    TORCH_CHECK(false, "cgc: torch.cuda.MemPool(no_split=True) is not supported: cgc's pools split their segments "
                       "like its other memory");
  }

  // True when the live blocks of torch pool `id` are exactly `expected` (the CUDA-graph trees'
  // check that no tensor of a graph's pool is alive that they do not know of).
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    std::lock_guard<std::mutex> hold(blocks_lock_);
    size_t live = 0;
    for (const auto& [ptr, block] : blocks_) {
      if (block.device != device || block.pool.id0 != id.first || block.pool.id1 != id.second) continue;
      if (expected.count(ptr) == 0) return false;
      live++;
    }
    return live == expected.size();
  }

  // ---- what cgc does not offer ----

  cca::ShareableHandle shareIpcHandle(void*) override {
    TORCH_CHECK(false, "cgc: CUDA IPC of cgc's blocks is not supported (share tensors of another allocator)");
  }
  std::shared_ptr<void> getIpcDevPtr(std::string) override {
    TORCH_CHECK(false, "cgc: CUDA IPC of cgc's blocks is not supported (share tensors of another allocator)");
  }
  bool isHistoryEnabled() override { return false; }
  void recordHistory(bool enabled, cca::CreateContextFn, size_t, cca::RecordContext, bool,
                     const std::vector<std::string>&) override {
    TORCH_CHECK(!enabled, "cgc: torch.cuda.memory._record_memory_history is not supported by cgc's allocator");
  }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> hold(blocks_lock_);
    oom_observers_.push_back(std::move(observer));
  }
  // cgc records no trace of its allocations: a tracker is kept and never called (docs/TORCH.md).
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override {
    std::lock_guard<std::mutex> hold(blocks_lock_);
    trace_trackers_.push_back(std::move(tracker));
  }
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    c10::cuda::CUDAGuard guard(dev);
    cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // clear the error
      return;
    }
    C10_CUDA_CHECK(err);
  }
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override {
    // cgc's blocks come from cuMemAlloc: a plain copy works between devices when peer access is
    // on, the peer copy otherwise.
    if (p2p_enabled || dstDevice == srcDevice)
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
  }
  // A pool's checkpoint (the CUDA-graph trees take one after recording each graph): its live
  // blocks, address and size.
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device, c10::MempoolId_t id) override {
    TORCH_CHECK(cgc_torch::pool_use_count(device, id.first, id.second) > 0, "cgc: getCheckpointState: pool (",
                id.first, ", ", id.second, ") of device ", static_cast<int>(device), " is not in use");
    auto state = std::make_shared<PoolCheckpoint>();
    state->device = device;
    state->id = id;
    std::lock_guard<std::mutex> hold(blocks_lock_);
    for (const auto& [ptr, block] : blocks_)
      if (block.device == device && block.pool.id0 == id.first && block.pool.id1 == id.second)
        state->blocks.emplace_back(ptr, block.size);
    std::sort(state->blocks.begin(), state->blocks.end());
    return state;
  }

  // Puts a pool back to a checkpoint (the CUDA-graph trees, when execution leaves the recorded
  // path), as PyTorch's allocator does: every block of the pool allocated now counts as freed
  // (ptrs_freed) and every block of the checkpoint as allocated again at its address
  // (dataptrs_allocd, whose deleters PyTorch gives to the storages it rebuilds). Blocks in both
  // stay as they are; the others are freed, and the checkpoint's missing ones are claimed back
  // from the pool's free memory at their addresses (cgc_pool_claim). When one cannot be (its
  // memory is in use, or went back to the driver) the pool is put back as it was and the call
  // fails saying which.
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> pps) override {
    auto* checkpoint = dynamic_cast<PoolCheckpoint*>(pps.get());
    TORCH_CHECK(checkpoint != nullptr && checkpoint->device == device,
                "cgc: setCheckpointPoolState: not a checkpoint cgc took of device ", static_cast<int>(device));
    const c10::MempoolId_t id = checkpoint->id;
    std::vector<std::pair<void*, size_t>> now;
    {
      std::lock_guard<std::mutex> hold(blocks_lock_);
      for (const auto& [ptr, block] : blocks_)
        if (block.device == device && block.pool.id0 == id.first && block.pool.id1 == id.second)
          now.emplace_back(ptr, block.size);
    }
    std::sort(now.begin(), now.end());
    std::vector<std::pair<void*, size_t>> stale, missing;  // allocated now only; in the checkpoint only
    std::set_difference(now.begin(), now.end(), checkpoint->blocks.begin(), checkpoint->blocks.end(),
                        std::back_inserter(stale));
    std::set_difference(checkpoint->blocks.begin(), checkpoint->blocks.end(), now.begin(), now.end(),
                        std::back_inserter(missing));
    if (!missing.empty()) claim_checkpoint_blocks(device, id, stale, missing);
    else
      for (const auto& [ptr, size] : stale) free_block(ptr);
    cca::CheckpointDelta delta;
    for (const auto& [ptr, size] : now) delta.ptrs_freed.push_back(ptr);
    for (const auto& [ptr, size] : checkpoint->blocks)
      delta.dataptrs_allocd.emplace_back(ptr, ptr, &delete_block, c10::Device(c10::DeviceType::CUDA, device));
    return delta;
  }

  std::string name() override { return "cgc"; }

 private:
  static size_t round_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

  void check_device(c10::DeviceIndex device) const {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "cgc: device ", static_cast<int>(device), " is out of range");
  }

  // setCheckpointPoolState's slow path: frees `stale` (allocated now, not in the checkpoint), then
  // claims `missing` (in the checkpoint, freed since) back at their addresses in the torch pool
  // `id`. On a refusal, what was claimed is freed and `stale` claimed back, and the call throws.
  void claim_checkpoint_blocks(c10::DeviceIndex device, c10::MempoolId_t id,
                               const std::vector<std::pair<void*, size_t>>& stale,
                               const std::vector<std::pair<void*, size_t>>& missing) {
    const cgc_api_t* api = cgc_torch::api();
    char error[256] = "";
    cgc_pool_t pool = cgc_torch::pool_for(device, id.first, id.second, false, error, sizeof error);
    TORCH_CHECK(pool != nullptr, "cgc: setCheckpointPoolState: pool (", id.first, ", ", id.second, ") of device ",
                static_cast<int>(device), " is gone", error[0] ? ": " : "", error);
    for (const auto& [ptr, size] : stale) free_block(ptr);
    size_t claimed = 0;
    std::string why;
    for (; claimed < missing.size(); claimed++) {
      auto [ptr, size] = missing[claimed];
      if (api->cgc_pool_claim(pool, ptr, size) != CGC_SUCCESS) {
        why = api->cgc_last_error();
        break;
      }
      note_claimed(device, id, ptr, size);
    }
    if (claimed < missing.size()) {
      for (size_t i = 0; i < claimed; i++) free_block(missing[i].first);
      size_t restored = 0;
      for (const auto& [ptr, size] : stale)
        if (api->cgc_pool_claim(pool, ptr, size) == CGC_SUCCESS) {
          note_claimed(device, id, ptr, size);
          restored++;
        }
      api->cgc_pool_release(pool);
      TORCH_CHECK(false, "cgc: setCheckpointPoolState: block ", missing[claimed].first, " (",
                  missing[claimed].second, " bytes) of the checkpoint of pool (", id.first, ", ", id.second,
                  ") cannot be allocated at its address again: ", why, restored == stale.size() ? " (the pool is as it was)"
                  : " (the pool could not be put back as it was: some of its blocks were freed)");
    }
    api->cgc_pool_release(pool);
  }

  // A block cgc_pool_claim gave back to the torch pool `id`: live again, counted as PyTorch counts.
  void note_claimed(c10::DeviceIndex device, c10::MempoolId_t id, void* ptr, size_t size) {
    cgc_torch::Routed routed;
    routed.id0 = id.first;
    routed.id1 = id.second;
    LiveBlock block{size, size, device, routed};
    std::lock_guard<std::mutex> hold(blocks_lock_);
    blocks_.emplace(ptr, block);
    count(block, +1);
  }

  // (blocks_lock_ held) PyTorch's allocation statistics for one block coming (+1) or going (-1).
  void count(const LiveBlock& block, int sign) {
    auto& s = stats_[block.device];
    const size_t kinds[2] = {static_cast<size_t>(StatType::AGGREGATE),
                             static_cast<size_t>(block.requested <= kSmallSize ? StatType::SMALL_POOL
                                                                                : StatType::LARGE_POOL)};
    for (size_t kind : kinds) {
      auto apply = [sign](Stat& stat, int64_t amount) { sign > 0 ? add(stat, amount) : sub(stat, amount); };
      apply(s.allocation[kind], 1);
      apply(s.active[kind], 1);
      apply(s.allocated_bytes[kind], static_cast<int64_t>(block.size));
      apply(s.active_bytes[kind], static_cast<int64_t>(block.size));
      apply(s.requested_bytes[kind], static_cast<int64_t>(block.requested));
    }
  }

  struct CgcSnapshot {
    std::vector<cgc_segment_info_t> segments;
    std::vector<cgc_block_info_t> blocks;
  };

  // cgc's segments and blocks of `device`.
  CgcSnapshot take_snapshot(c10::DeviceIndex device) {
    CgcSnapshot snap;
    const cgc_api_t* a = cgc_torch::api();
    cgc_context_t ctx = context(device);
    size_t n_segments = 0, n_blocks = 0;
    // Sized from the last snapshot, so that one call usually suffices (the walk holds cgc's lock).
    size_t last_segments = snapshot_sizes_[device][0].load(std::memory_order_relaxed);
    size_t last_blocks = snapshot_sizes_[device][1].load(std::memory_order_relaxed);
    if (last_segments > 0) {
      snap.segments.resize(last_segments + last_segments / 4 + 8);
      snap.blocks.resize(last_blocks + last_blocks / 4 + 32);
    }
    for (int attempt = 0; attempt < 8; attempt++) {  // the totals may grow between two calls
      cgc_status_t st = a->cgc_memory_snapshot(ctx, snap.segments.data(), snap.segments.size(), snap.blocks.data(),
                                               snap.blocks.size(), &n_segments, &n_blocks);
      TORCH_CHECK(st == CGC_SUCCESS, "cgc: ", a->cgc_last_error());
      if (n_segments <= snap.segments.size() && n_blocks <= snap.blocks.size()) {
        snapshot_sizes_[device][0].store(n_segments, std::memory_order_relaxed);
        snapshot_sizes_[device][1].store(n_blocks, std::memory_order_relaxed);
        snap.segments.resize(n_segments);
        snap.blocks.resize(n_blocks);
        return snap;
      }
      snap.segments.resize(n_segments + n_segments / 4 + 8);
      snap.blocks.resize(n_blocks + n_blocks / 4 + 32);
    }
    TORCH_CHECK(false, "cgc: the device's segments changed faster than they could be listed");
  }

  // The device's total memory, asked once (it never changes).
  size_t total_memory(c10::DeviceIndex device) {
    size_t total = total_memory_[device].load(std::memory_order_relaxed);
    if (total != 0) return total;
    size_t free_bytes = 0;
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    total_memory_[device].store(total, std::memory_order_relaxed);
    return total;
  }

  cgc_memory_stats_t memory_stats(c10::DeviceIndex device) {
    cgc_memory_stats_t stats{};
    stats.struct_size = sizeof stats;
    cgc_context_t ctx = context(device);
    if (ctx != nullptr) cgc_torch::api()->cgc_memory_stats(ctx, nullptr, &stats);
    return stats;
  }

  // The device's cgc context, made on first need and kept for the process.
  cgc_context_t context(c10::DeviceIndex device) {
    check_device(device);
    cgc_context_t ctx = contexts_[device].load(std::memory_order_acquire);
    if (ctx != nullptr) return ctx;
    cgc_context_t made = nullptr;
    if (cgc_torch::api()->cgc_context_create(device, &made) != CGC_SUCCESS)
      TORCH_CHECK(false, "cgc: ", cgc_torch::api()->cgc_last_error());
    cgc_context_t expected = nullptr;
    if (!contexts_[device].compare_exchange_strong(expected, made)) {
      cgc_torch::api()->cgc_context_destroy(made);
      return expected;
    }
    return made;
  }

  size_t reserved_peak(c10::DeviceIndex device, const cgc_memory_stats_t& now) {
    std::lock_guard<std::mutex> hold(blocks_lock_);
    const ReservedPeak& kept = peaks_[device];
    if (!kept.reset || now.peak_bytes_reserved > kept.cgc_peak_at_reset) return now.peak_bytes_reserved;
    return std::max(kept.reserved_at_reset, now.bytes_reserved);
  }

  // The fraction's limit: the bytes this backend has handed PyTorch on the device (its own
  // count), with the new block, at most `fraction` of the device's total memory.
  void check_fraction(c10::DeviceIndex device, size_t nbytes) {
    double fraction = fraction_[device].load(std::memory_order_relaxed);
    if (fraction >= 1.0) return;
    size_t total = total_memory(device);
    size_t allowed = static_cast<size_t>(fraction * static_cast<double>(total));
    int64_t handed_out = 0;
    {
      std::lock_guard<std::mutex> hold(blocks_lock_);
      handed_out = stats_[device].allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
    }
    if (static_cast<size_t>(handed_out) + round_up(nbytes) <= allowed) return;
    raise_out_of_memory(device, nbytes, "the memory fraction set for this device (" + std::to_string(fraction) +
                                            " of " + std::to_string(total) + " bytes) would be exceeded");
  }

  bool out_of_memory() const { return cgc_torch::api()->cgc_last_status() == CGC_ERROR_OUT_OF_MEMORY; }

  // The last resort of an allocation that found the device out of memory: the MemPools that
  // allowed it (setUseOnOOM), oldest first.
  void* malloc_from_oom_pools(c10::DeviceIndex device, size_t nbytes, cudaStream_t stream,
                              cgc_torch::Routed* routed) {
    std::vector<c10::MempoolId_t> pools;
    {
      std::lock_guard<std::mutex> hold(blocks_lock_);
      pools = use_on_oom_[device];
    }
    for (const auto& id : pools) {
      void* p = cgc_torch::malloc_from_pool(device, id.first, id.second, nbytes, stream);
      if (p != nullptr) {
        *routed = cgc_torch::Routed{id.first, id.second};
        return p;
      }
    }
    return nullptr;
  }

  [[noreturn]] void raise_allocation_failure(c10::DeviceIndex device, size_t nbytes, bool oom,
                                             const std::string& message) {
    if (oom) raise_out_of_memory(device, nbytes, message);
    TORCH_CHECK(false, "cgc: ", message);
  }

  [[noreturn]] void raise_out_of_memory(c10::DeviceIndex device, size_t nbytes, const std::string& why) {
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) (void)cudaGetLastError();
    std::vector<cca::OutOfMemoryObserver> observers;
    int64_t allocated = 0;
    {
      std::lock_guard<std::mutex> hold(blocks_lock_);
      stats_[device].num_ooms++;
      allocated = stats_[device].allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
      observers = oom_observers_;
    }
    for (auto& observer : observers) observer(device, static_cast<size_t>(allocated), total, free_bytes);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (cgc). Tried to allocate ", nbytes,
                     " bytes on device ", static_cast<int>(device), ": ", why);
  }

  bool claimed_captures_open() const { return cgc_torch::any_route_open(); }

  // The torch pool of the capture `stream` takes part in, for the live-block table (asked only
  // while PyTorch's routes are open: its captures, whose allocating thread owns the stream).
  void attribute_to_capture(c10::DeviceIndex device, cudaStream_t stream, cgc_torch::Routed* routed) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (status == cudaStreamCaptureStatusActive) cgc_torch::routed_capture(device, id, routed);
  }

  std::atomic<bool> initialized_{false};
  std::atomic<bool> enabled_{true};
  int device_count_ = 0;
  std::atomic<double> fraction_[kMaxDevices] = {};
  std::atomic<cgc_context_t> contexts_[kMaxDevices] = {};
  std::atomic<size_t> total_memory_[kMaxDevices] = {};
  std::atomic<size_t> snapshot_sizes_[kMaxDevices][2] = {};  // the last snapshot's totals: its arrays' first size
  std::mutex blocks_lock_;  // guards everything below
  std::unordered_map<void*, LiveBlock> blocks_;
  c10::CachingDeviceAllocator::DeviceStats stats_[kMaxDevices];
  ReservedPeak peaks_[kMaxDevices];
  // The peaks add_segment_stats has seen: reserved bytes, segments, inactive split blocks and bytes.
  int64_t seen_peaks_[kMaxDevices][4][static_cast<size_t>(StatType::NUM_TYPES)] = {};
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
  std::vector<cca::AllocatorTraceTracker> trace_trackers_;
  std::vector<c10::MempoolId_t> use_on_oom_[kMaxDevices];  // MemPools an out-of-memory allocation may use
};


// Made once, never freed: PyTorch frees tensors during interpreter shutdown, after static
// destructors could have run (PyTorch's own reference to it is such a static), so one reference
// is kept in memory nothing ever frees.
CgcAllocator* the_allocator = nullptr;

void delete_block(void* ptr) { the_allocator->free_block(ptr); }

}  // namespace

// Installs cgc as PyTorch's current CUDA allocator: cgc's function table from the libcgc.so.1 at
// `libcgc_path` (the copy the Python binding loaded), then the allocator, which PyTorch accepts
// only before its first CUDA allocation. Returns 0, or -1 with the reason in `error` (nothing
// was installed then). A second call is a no-op.
BACKEND_API int cgc_torch_backend_install(const char* libcgc_path, char* error, size_t error_size) {
  static std::mutex install_lock;
  std::lock_guard<std::mutex> hold(install_lock);
  if (the_allocator != nullptr) return 0;
  if (cgc_torch::load_api(libcgc_path, error, error_size) != 0) return -1;
  try {
    auto allocator = std::make_shared<CgcAllocator>();
    allocator->init(c10::cuda::device_count());
    for (int i = 0; i < kMaxDevices; i++) allocator->setMemoryFraction(1.0, static_cast<c10::DeviceIndex>(i));
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    new std::shared_ptr<CgcAllocator>(allocator);  // never released: see the_allocator
    the_allocator = allocator.get();
  } catch (const std::exception& e) {
    put_error(error, error_size, "cgc_torch_backend_install: %s", e.what());
    return -1;
  }
  return 0;
}

// The pool calls the Python binding makes (cgc_torch_bridge_pool and the rest) are routes.cc's.

// ---- PyTorch's CUDA generators in cgc.graph's captures ----
//
// PyTorch enrols its CUDA generators only in captures of its own CUDAGraph (Note [CUDA Graph-safe
// RNG states] in ATen/cuda/CUDAGeneratorImpl.h): while a generator state is in capture mode, each
// random op draws from an offset within the graph (offset_intragraph_) relative to two one-element
// device tensors (seed_extragraph_, offset_extragraph_) that the op's kernel reads at run time; at
// the end the graph keeps the whole-graph increment; before each replay the two tensors receive the
// generator's seed and offset on the replay stream, and the offset advances by the increment. A
// draw in any other capture raises "Attempt to increase offset for a CUDA generator not in capture
// mode". These calls do the same for cgc.graph's captures, on the public fields of
// CUDAGeneratorState (its methods carry no export macro, so libtorch_cuda.so, built with hidden
// visibility, does not export them), with the generator's mutex held:
//   begin    before cgc's capture begins: for the device's default generator and those the user
//            registered, installs two tensors of this capture in the state, sets it capturing with
//            the intra-graph offset at 0 (PyTorch's capture_prologue);
//   end      after the body: the increment of each state, capture mode off, the state's own tensors
//            back (PyTorch's capture_epilogue);
//   replay   before each launch: fills this capture's tensors with the seed and offset on the
//            launch stream, then advances the offset (PyTorch's replay_prologue);
//   release  the graph is reset, destroyed or recaptured (or its capture failed: end first).
// The state itself is reached through CUDAGeneratorImpl's private `state_` by the standard's
// explicit-instantiation rule ([temp.explicit]: access is not checked in the template arguments of
// an explicit instantiation), a member pointer, so no layout is assumed beyond the header's.
//
// Each capture has tensors of its own, which its token keeps: PyTorch's graphs keep sharing the
// state's, which it replaces when its last graph goes, and replays of two cgc graphs on two streams
// never write one another's. Captures that overlap in time (threads) share one set: the window
// stays open until the last of them ends, and each takes the intra-graph offset at its end as its
// increment. As in PyTorch, captures that draw from one generator must not overlap, and a capture
// under way refuses other draws from it.
//
// Locks: `rng_lock` guards the sessions; a generator's mutex is taken after it, never before.

namespace {

// The status and message of a failed call, written for the Python binding.
int rng_failure(char* error, size_t error_size, int status, const char* message) {
  put_error(error, error_size, "%s", message);
  return status;
}

#if CGC_TORCH_RNG

using GeneratorState = at::CUDAGeneratorState;

// CUDAGeneratorImpl::state_, read through a member pointer named in an explicit instantiation.
template <typename Tag, typename Tag::type Member>
struct PrivateMember {
  friend typename Tag::type private_member(Tag) { return Member; }
};
struct GeneratorStateOf {
  using type = c10::intrusive_ptr<GeneratorState> at::CUDAGeneratorImpl::*;
  friend type private_member(GeneratorStateOf);
};
template struct PrivateMember<GeneratorStateOf, &at::CUDAGeneratorImpl::state_>;

// Whether CUDAGeneratorState has the fields, with the types, that PyTorch 2.4 to 2.11 give it (a
// later PyTorch that keeps the capture tensors in a state per capture builds without the enrolment).
template <typename S, typename = void>
struct GraphSafeFields : std::false_type {};
template <typename S>
struct GraphSafeFields<S, std::void_t<decltype(S::seed_), decltype(S::philox_offset_per_thread_),
                                      decltype(S::offset_intragraph_), decltype(S::capturing_),
                                      decltype(S::seed_extragraph_), decltype(S::offset_extragraph_)>>
    : std::bool_constant<std::is_same_v<decltype(S::seed_), uint64_t> &&
                         std::is_same_v<decltype(S::philox_offset_per_thread_), uint64_t> &&
                         (std::is_same_v<decltype(S::offset_intragraph_), uint32_t> ||
                          std::is_same_v<decltype(S::offset_intragraph_), uint64_t>) &&
                         std::is_same_v<decltype(S::capturing_), bool> &&
                         std::is_same_v<decltype(S::seed_extragraph_), at::TensorBase> &&
                         std::is_same_v<decltype(S::offset_extragraph_), at::TensorBase>> {};

// One generator state's capture window, open while captures enrolled in it are under way.
struct RngSession {
  int open = 0;                             // the captures under way in it
  at::TensorBase seed, offset;              // the tensors they read, installed in the state
  cudaStream_t alloc_stream = nullptr;      // where they were allocated (and are freed)
  at::TensorBase saved_seed, saved_offset;  // the state's own, put back at the end
};

// The field work, as PyTorch's CUDAGeneratorState methods do it (the generator's mutex held).
// Instantiated only where the fields are the ones above.
template <typename S, bool = GraphSafeFields<S>::value>
struct StateFields {
  static constexpr bool known = false;
  static uint64_t open(S&, RngSession&) { return 0; }
  static uint64_t close(S&, const RngSession&, bool, bool* ours) {
    *ours = true;
    return 0;
  }
  static void replay(S&, const at::TensorBase&, const at::TensorBase&, uint64_t) {}
};

template <typename S>
struct StateFields<S, true> {
  static constexpr bool known = true;

  // capture_prologue: this window's tensors in place of the state's; returns the seed.
  static uint64_t open(S& state, RngSession& session) {
    session.saved_seed = state.seed_extragraph_;
    session.saved_offset = state.offset_extragraph_;
    state.seed_extragraph_ = session.seed;
    state.offset_extragraph_ = session.offset;
    state.capturing_ = true;
    state.offset_intragraph_ = 0;
    return state.seed_;
  }

  // capture_epilogue for one capture: the intra-graph offset so far; the last capture of the
  // window ends capture mode and puts the state's tensors back, unless a capture of PyTorch's
  // begun meanwhile replaced them (*ours false: draws may have used those).
  static uint64_t close(S& state, const RngSession& session, bool last, bool* ours) {
    *ours = state.seed_extragraph_.is_same(session.seed) && state.offset_extragraph_.is_same(session.offset);
    uint64_t increment = state.offset_intragraph_;
    if (last) {
      state.capturing_ = false;
      if (*ours) {
        state.seed_extragraph_ = session.saved_seed;
        state.offset_extragraph_ = session.saved_offset;
      }
    }
    return increment;
  }

  // replay_prologue: the seed and the offset into the capture's tensors on the current stream,
  // then the offset advances past the graph's draws.
  static void replay(S& state, const at::TensorBase& seed, const at::TensorBase& offset, uint64_t increment) {
    seed.fill_(static_cast<int64_t>(state.seed_));
    offset.fill_(static_cast<int64_t>(state.philox_offset_per_thread_));
    state.philox_offset_per_thread_ += increment;
  }
};

using Fields = StateFields<GeneratorState>;

struct RngEntry {
  at::Generator generator;  // its mutex_ guards the state, as at PyTorch's draws
  c10::intrusive_ptr<GeneratorState> state;
  at::TensorBase seed, offset;  // what the capture's kernels read
  cudaStream_t alloc_stream;    // the stream they were allocated on
  uint64_t increment = 0;       // the whole-graph increment, a multiple of 4
};

// One capture's enrolment (the Python binding's token).
struct RngToken {
  c10::DeviceIndex device = 0;
  bool ended = false;
  std::vector<RngEntry> entries;
  std::mutex streams_lock;
  std::vector<cudaStream_t> recorded;  // replay streams whose use of the tensors cgc knows
};

std::mutex rng_lock;

// Never freed: tokens may be released during interpreter shutdown.
std::unordered_map<GeneratorState*, RngSession>& rng_sessions() {
  static auto* sessions = new std::unordered_map<GeneratorState*, RngSession>();
  return *sessions;
}

// (rng_lock held) Ends the token's window in each state; false when a state's tensors were
// replaced under a capture that drew (its graph would read tensors no replay fills).
bool close_entries(RngToken* token, std::string* why) {
  bool fine = true;
  auto& sessions = rng_sessions();
  for (RngEntry& entry : token->entries) {
    auto it = sessions.find(entry.state.get());
    if (it == sessions.end()) continue;
    RngSession& session = it->second;
    bool ours = true;
    uint64_t increment = 0;
    {
      std::lock_guard<std::mutex> hold(entry.generator.mutex());
      increment = Fields::close(*entry.state, session, session.open == 1, &ours);
    }
    entry.increment = (static_cast<uint64_t>(increment) + 3) / 4 * 4;
    if (!ours && increment > 0 && fine) {
      fine = false;
      *why = "a capture of PyTorch's drawing from the same generator began while this one was under way and "
             "replaced the generator's graph tensors: captures that draw from one generator must not overlap";
    }
    if (--session.open == 0) sessions.erase(it);
  }
  token->ended = true;
  return fine;
}

at::Generator cuda_generator(const at::Generator& generator) {
  TORCH_CHECK(generator.defined() && dynamic_cast<at::CUDAGeneratorImpl*>(generator.unsafeGetGeneratorImpl()),
              "cgc: a generator registered with a cgc graph must be a CUDA torch.Generator");
  return generator;
}

// Opens the window of `generators` (the default generator of `device` first) for a capture on
// `stream`, which is not capturing yet.
RngToken* begin_rng(c10::DeviceIndex device, cudaStream_t stream, std::vector<at::Generator> generators) {
  auto token = std::make_unique<RngToken>();
  token->device = device;
  c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromExternal(stream, device));
  generators.insert(generators.begin(), at::cuda::detail::getDefaultCUDAGenerator(device));
  std::lock_guard<std::mutex> hold(rng_lock);
  auto& sessions = rng_sessions();
  try {
    for (const at::Generator& given : generators) {
      at::Generator generator = cuda_generator(given);
      c10::intrusive_ptr<GeneratorState> state;
      {
        std::lock_guard<std::mutex> hold_generator(generator.mutex());
        state = generator.get<at::CUDAGeneratorImpl>()->*private_member(GeneratorStateOf{});
      }
      TORCH_CHECK(state, "cgc: the CUDA generator has no state");
      bool enrolled = false;  // two generators sharing one state (graphsafe_set_state) count once
      for (const RngEntry& entry : token->entries) enrolled = enrolled || entry.state == state;
      if (enrolled) continue;
      RngSession& session = sessions[state.get()];
      uint64_t seed = 0;
      bool fresh = session.open == 0;
      if (fresh) {
        try {
          // Normal tensors even under torch.inference_mode(): each replay fills them in place,
          // which PyTorch refuses for inference tensors outside that mode.
          c10::InferenceMode normal_tensors(false);
          auto options = at::TensorOptions().device(at::Device(at::kCUDA, device)).dtype(at::kLong);
          session.seed = at::empty({1}, options);
          session.offset = at::empty({1}, options);
          session.alloc_stream = stream;
        } catch (...) {
          sessions.erase(state.get());
          throw;
        }
        std::lock_guard<std::mutex> hold_generator(generator.mutex());
        seed = Fields::open(*state, session);
      }
      session.open++;
      token->entries.push_back(RngEntry{generator, state, session.seed, session.offset, session.alloc_stream, 0});
      if (fresh) {  // as PyTorch's capture_prologue leaves them
        session.seed.fill_(static_cast<int64_t>(seed));
        session.offset.fill_(static_cast<int64_t>(0));
      }
    }
  } catch (...) {
    std::string ignored;
    close_entries(token.get(), &ignored);
    throw;
  }
  return token.release();
}

// Before a launch of the token's graph on `stream`.
void replay_rng(RngToken* token, cudaStream_t stream) {
  bool first_use = false;
  {
    std::lock_guard<std::mutex> hold(token->streams_lock);
    first_use = std::find(token->recorded.begin(), token->recorded.end(), stream) == token->recorded.end();
  }
  c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromExternal(stream, token->device));
  for (RngEntry& entry : token->entries) {
    if (entry.increment == 0) continue;
    std::lock_guard<std::mutex> hold(entry.generator.mutex());
    Fields::replay(*entry.state, entry.seed, entry.offset, entry.increment);
  }
  if (first_use) {
    // The tensors are freed (the graph reset) on the stream they were allocated on: cgc keeps
    // them until the work of the other streams that used them is done, as Tensor.record_stream
    // asks. Recorded once per stream (cgc waits for the stream's work up to the free).
    for (const RngEntry& entry : token->entries) {
      if (entry.increment == 0 || stream == entry.alloc_stream) continue;
      cgc_torch::record_stream(entry.seed.storage().data_ptr().get(), stream);
      cgc_torch::record_stream(entry.offset.storage().data_ptr().get(), stream);
    }
    std::lock_guard<std::mutex> hold(token->streams_lock);
    token->recorded.push_back(stream);
  }
}

int rng_exception(char* error, size_t error_size) {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    return rng_failure(error, error_size, CGC_ERROR_OUT_OF_MEMORY, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return rng_failure(error, error_size, CGC_ERROR_INTERNAL, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return rng_failure(error, error_size, CGC_ERROR_INTERNAL, e.what());
  } catch (...) {
    return rng_failure(error, error_size, CGC_ERROR_INTERNAL, "unknown exception");
  }
}

int stream_capturing(cudaStream_t stream, bool* capturing, char* error, size_t error_size) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    put_error(error, error_size, "cudaStreamIsCapturing: %s", cudaGetErrorString(err));
    return CGC_ERROR_CUDA;
  }
  *capturing = status != cudaStreamCaptureStatusNone;
  return 0;
}

#endif  // CGC_TORCH_RNG

}  // namespace

// 1 when this build enrols PyTorch's CUDA generators in cgc.graph's captures (bit 2 set too when
// it takes generators the user registers); 0 when it cannot, with the reason in `error`.
BACKEND_API int cgc_torch_rng_supported(char* error, size_t error_size) {
#if CGC_TORCH_RNG
  if (Fields::known) {
    if (CGC_TORCH_RNG_USER_GENERATORS) return 3;
    put_error(error, error_size,
              "cgc's backend was built without Python's headers (Python.h, torch/csrc/Generator.h): it enrols "
              "the default generators only, not registered ones");
    return 1;
  }
  put_error(error, error_size,
            "this PyTorch's CUDAGeneratorState lacks the fields cgc's backend enrols (seed_extragraph_, "
            "offset_extragraph_, offset_intragraph_, capturing_, as in PyTorch 2.4 to 2.11)");
#else
  put_error(error, error_size,
            "cgc's backend was built without PyTorch's generator headers (ATen/cuda/CUDAGeneratorImpl.h) or for "
            "a PyTorch other than 2.4 to 2.13");
#endif
  return 0;
}

// Enrols the default CUDA generator of `device` and the `n_generators` torch.Generator objects at
// `py_generators` (PyObject*, CUDA generators, checked by the caller) in the capture about to
// begin on `stream` (a cudaStream_t of `device`, not capturing). 0 with the token in *out, or a
// cgc status with the reason in `error`, nothing enrolled.
BACKEND_API int cgc_torch_rng_capture_begin(int device, void* stream, void* const* py_generators, size_t n_generators,
                                            void** out, char* error, size_t error_size) {
  if (out == nullptr) return rng_failure(error, error_size, CGC_ERROR_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
#if CGC_TORCH_RNG
  if (!Fields::known) {
    cgc_torch_rng_supported(error, error_size);
    return CGC_ERROR_NOT_SUPPORTED;
  }
  if (device < 0 || device >= kMaxDevices)
    return rng_failure(error, error_size, CGC_ERROR_INVALID_ARGUMENT, "device out of range");
  auto raw = static_cast<cudaStream_t>(stream);
  bool capturing = false;
  if (int st = stream_capturing(raw, &capturing, error, error_size)) return st;
  if (capturing)
    return rng_failure(error, error_size, CGC_ERROR_INVALID_STATE,
                       "the capture stream is capturing already: PyTorch's generators are enrolled before the "
                       "capture begins");
  try {
    std::vector<at::Generator> generators;
#if CGC_TORCH_RNG_USER_GENERATORS
    for (size_t i = 0; i < n_generators; i++)
      generators.push_back(reinterpret_cast<const THPGenerator*>(py_generators[i])->cdata);
#else
    (void)py_generators;
    if (n_generators > 0)
      return rng_failure(error, error_size, CGC_ERROR_NOT_SUPPORTED,
                         "cgc's backend was built without Python's headers: it cannot take registered generators");
#endif
    *out = begin_rng(static_cast<c10::DeviceIndex>(device), raw, std::move(generators));
    return 0;
  } catch (...) {
    return rng_exception(error, error_size);
  }
#else
  (void)device, (void)stream, (void)py_generators, (void)n_generators;
  cgc_torch_rng_supported(error, error_size);
  return CGC_ERROR_NOT_SUPPORTED;
#endif
}

// Ends the capture window of `token` (after the body, before or after cgc's capture end). 0 with
// the largest whole-graph increment in *increment (0: the capture drew nothing, and the token may
// be released at once), or a cgc status: the window is ended all the same.
BACKEND_API int cgc_torch_rng_capture_end(void* token, unsigned long long* increment, char* error, size_t error_size) {
  if (increment != nullptr) *increment = 0;
#if CGC_TORCH_RNG
  auto* t = static_cast<RngToken*>(token);
  if (t == nullptr || t->ended)
    return rng_failure(error, error_size, CGC_ERROR_INVALID_STATE, "no capture window open");
  try {
    std::string why;
    bool fine;
    {
      std::lock_guard<std::mutex> hold(rng_lock);
      fine = close_entries(t, &why);
    }
    uint64_t largest = 0;
    for (const RngEntry& entry : t->entries) largest = std::max(largest, entry.increment);
    if (increment != nullptr) *increment = largest;
    return fine ? 0 : rng_failure(error, error_size, CGC_ERROR_INVALID_STATE, why.c_str());
  } catch (...) {
    return rng_exception(error, error_size);
  }
#else
  (void)token;
  return rng_failure(error, error_size, CGC_ERROR_NOT_SUPPORTED, "no generator enrolment in this build");
#endif
}

// Before each launch of the token's graph on `stream` (a cudaStream_t of its device, not
// capturing): fills the capture's tensors there and advances each generator's offset.
BACKEND_API int cgc_torch_rng_replay_prologue(void* token, void* stream, char* error, size_t error_size) {
#if CGC_TORCH_RNG
  auto* t = static_cast<RngToken*>(token);
  if (t == nullptr) return rng_failure(error, error_size, CGC_ERROR_INVALID_ARGUMENT, "token is NULL");
  if (!t->ended) return rng_failure(error, error_size, CGC_ERROR_INVALID_STATE, "the graph's capture has not ended");
  auto raw = static_cast<cudaStream_t>(stream);
  bool capturing = false;
  if (int st = stream_capturing(raw, &capturing, error, error_size)) return st;
  if (capturing)
    return rng_failure(error, error_size, CGC_ERROR_CAPTURE_UNSUPPORTED,
                       "a graph that draws PyTorch's random numbers cannot be launched into a capture (each "
                       "launch sets the generator's offset from the host first, as CUDAGraph.replay does)");
  try {
    replay_rng(t, raw);
    return 0;
  } catch (...) {
    return rng_exception(error, error_size);
  }
#else
  (void)token, (void)stream;
  return rng_failure(error, error_size, CGC_ERROR_NOT_SUPPORTED, "no generator enrolment in this build");
#endif
}

// Frees a token (ending its window first if its capture failed before the end). NULL is a no-op.
BACKEND_API void cgc_torch_rng_release(void* token) {
#if CGC_TORCH_RNG
  auto* t = static_cast<RngToken*>(token);
  if (t == nullptr) return;
  try {
    if (!t->ended) {
      std::string ignored;
      std::lock_guard<std::mutex> hold(rng_lock);
      close_entries(t, &ignored);
    }
    delete t;  // outside the lock: the tensors go back to cgc
  } catch (const std::exception& e) {
    TORCH_WARN("cgc: releasing a capture's generator enrolment: ", e.what());
  }
#else
  (void)token;
#endif
}
