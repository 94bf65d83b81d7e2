// torch_allocator.hpp — streampool as PyTorch's CUDA allocator: a subclass of c10's
// CUDACachingAllocator::CUDAAllocator (the interface of PyTorch 2.11) that serves every hook from
// one streampool::allocator (native or cudaMallocAsync backend, picked by the config as everywhere).
// Part of the `streampool._C10` extension module; module.cpp installs it.
#pragma once

#if __cplusplus < 202002L
#error "streampool's headers need C++20: compile the extension with -std=c++20 (torch_extension_build.py does)"
#endif

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <streampool/streampool.hpp>

#include "env_watch.hpp"
#include "stack_contexts.hpp"

namespace streampool::torch_ext {

namespace c10a = c10::cuda::CUDACachingAllocator;

/// streampool's mempool_id for PyTorch's MempoolId_t (the same pair of numbers).
[[nodiscard]] inline mempool_id to_pool(c10::MempoolId_t id) noexcept { return {id.first, id.second}; }

/// Who hears the allocator's segment events: the trace trackers of attachAllocatorTraceTracker
/// and the descriptors of pages sent to other processes (torch_allocator_tracker.cpp).
struct segment_hub;
namespace ipc {
class page_exports;
}

class torch_allocator final : public c10a::CUDAAllocator {
 public:
  /// Takes the (validated) config and the environment values it was read from (env_watch); the
  /// allocator itself is built at first use (Note [Built at first use]).
  torch_allocator(allocator_config config, env_snapshot env);
  ~torch_allocator() override = default;

  /// The streampool allocator underneath, built on the first call (Note [Built at first use]).
  /// @throws what building it throws (a driver that cannot start)
  [[nodiscard]] allocator& impl() const {
    allocator* built = built_.load(std::memory_order_acquire);
    return built != nullptr ? *built : build();
  }
  [[nodiscard]] const env_snapshot& env() const noexcept { return env_; }

  // --- c10::Allocator / DeviceAllocator ---------------------------------------------------------
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool initialized() override { return initialized_.load(); }
  void emptyCache(c10::MempoolId_t mempool_id) override;
  c10a::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // --- CUDAAllocator: allocation ----------------------------------------------------------------
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  void enable(bool value) override { enabled_.store(value); }
  bool isEnabled() const override { return enabled_.load(); }
  using c10a::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;

  // --- CUDAAllocator: what the cache holds (torch_allocator_state.cpp) --------------------------
  std::vector<c10a::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override;
  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override;
  void* getBaseAllocation(void* ptr, size_t* size) override;
  c10a::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override;
  bool isHistoryEnabled() override { return history_enabled_.load(); }
  void recordHistory(bool enabled, c10a::CreateContextFn context_recorder, size_t alloc_trace_max_entries,
                     c10a::RecordContext when, bool clear_history,
                     const std::vector<std::string>& skip_actions) override;
  void attachOutOfMemoryObserver(c10a::OutOfMemoryObserver observer) override;
  /// _set_memory_metadata / _get_memory_metadata (Note [User metadata] in stack_contexts.cpp).
  void setUserMetadata(const std::string& metadata) override { contexts_.set_metadata(metadata); }
  std::string getUserMetadata() override { return contexts_.metadata(); }
  void pushCompileContext(std::string& md) override { contexts_.push_compile_context(md); }
  void popCompileContext() override { contexts_.pop_compile_context(); }
  /// Note [Mapped ranges as segments] (tracker_ranges.cpp); torch_allocator_tracker.cpp.
  void attachAllocatorTraceTracker(c10a::AllocatorTraceTracker tracker) override;
  /// The trackers attached, and the (device, address, size) ranges they were told of and not told
  /// the end of (streampool._C10.tracker_ranges(), for checks).
  [[nodiscard]] std::size_t tracker_count();
  [[nodiscard]] std::vector<std::tuple<int, std::uintptr_t, std::size_t>> tracker_ranges_told();

  // --- CUDAAllocator: private pools (torch_allocator_pools.cpp) ---------------------------------
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<c10a::CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) override;
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) override;
  std::shared_ptr<c10a::AllocatorState> getCheckpointState(c10::DeviceIndex device, c10::MempoolId_t id) override;
  c10a::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                               std::shared_ptr<c10a::AllocatorState> pps) override;

  // --- CUDAAllocator: peers and IPC (torch_allocator_ipc.cpp) -----------------------------------
  c10a::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override;

  std::string name() override;

 private:
  /// Allocates through streampool; OOM becomes c10::OutOfMemoryError (observers first).
  void* malloc_on(size_t nbytes, c10::DeviceIndex device, cudaStream_t stream);
  [[noreturn]] void raise_oom(const out_of_memory& oom, size_t nbytes, c10::DeviceIndex device);
  /// Reads the options of a pool, changes them with `change` and sets them, under options_mutex_;
  /// a failure is a c10::Error naming `what`.
  void change_pool_options(c10::DeviceIndex device, c10::MempoolId_t mempool_id, const char* what,
                           const std::function<void(pool_options&)>& change);
  /// Segments of the snapshot, on `device`, in `pool` (default id: every pool).
  [[nodiscard]] std::vector<segment_info> segments_of(c10::DeviceIndex device, c10::MempoolId_t pool) const;

  /// Builds the allocator once (impl()).
  allocator& build() const;

  allocator_config config_;
  mutable std::once_flag built_once_;
  mutable std::unique_ptr<allocator> alloc_;
  mutable std::atomic<allocator*> built_{nullptr};
  env_snapshot env_;
  std::atomic<bool> initialized_{false};
  std::atomic<bool> enabled_{true};
  std::atomic<bool> history_enabled_{false};

  std::mutex observers_mutex_;
  std::vector<c10a::OutOfMemoryObserver> oom_observers_;

  std::mutex history_mutex_;
  std::set<trace_action> skipped_actions_;  ///< recordHistory's skip_actions
  std::size_t history_max_entries_ = 0;
  /// recordHistory's stack traces (Note [Stack contexts]).
  stack_contexts contexts_;

  /// Note [Caching disabled]: enable(false) makes allocations plain cudaMalloc/cudaFree, as in
  /// PyTorch's own allocator; those pointers are kept here so raw_delete knows them.
  std::mutex uncached_mutex_;
  std::unordered_set<void*> uncached_;
  std::atomic<std::size_t> uncached_count_{0};

  /// PyTorch-side use counts of private pools (getPoolUseCount); streampool keeps its own.
  std::mutex pools_mutex_;
  std::map<std::pair<int, mempool_id>, int> pool_uses_;
  /// Serialises change_pool_options' read-modify-write of a pool's options.
  std::mutex options_mutex_;

  /// Note [One segment listener] (torch_allocator_tracker.cpp): the trackers and the page exports,
  /// shared with the allocator's segment listener; set up on first use under hub_mutex_.
  [[nodiscard]] segment_hub& hub();
  /// The exported pages of expandable segments (Note [Exporting expandable pages]), listening.
  [[nodiscard]] ipc::page_exports& page_exports();
  std::shared_ptr<segment_hub> hub_;
  std::mutex hub_mutex_;

  /// Note [IPC handle formats] (ipc_handles.cpp): handles opened in this process, shared while any
  /// user holds one.
  std::mutex ipc_mutex_;
  std::unordered_map<std::string, std::weak_ptr<void>> ipc_opened_;
};

/// The installed instance (nullptr before install); the DataPtr deleter goes through it.
torch_allocator* installed() noexcept;
void set_installed(torch_allocator* instance) noexcept;

}  // namespace streampool::torch_ext
