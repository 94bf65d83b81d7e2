// async_allocator.hpp — the cudaMallocAsync backend (`backend:cudaMallocAsync`): streampool's
// allocator interface over CUDA stream-ordered memory pools, one async_device per device, set up on
// first use. Built through async::make_async_allocator (src/core/backends.hpp); docs/async-backend.md
// describes the behaviour and how it differs from the native backend.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "async/async_device.hpp"
#include "async/pointer_map.hpp"
#include "core/trace_ring.hpp"
#include "streampool/allocator.hpp"

namespace streampool::async {

class async_allocator final : public allocator {
 public:
  async_allocator(allocator_config config, std::shared_ptr<driver> drv);
  ~async_allocator() override;

  /// The device's state if it was used already, else nullptr (for tests and diagnostics).
  [[nodiscard]] const async_device* initialized_device(int device) const noexcept;

 private:
  struct device_slot {
    std::mutex init_mutex;
    std::atomic<async_device*> ready{nullptr};
    std::unique_ptr<async_device> owner;
    core::trace_ring trace;
  };

  /// The device's state, set up on first use (Note [Pool setup]). @throws as async_device()
  [[nodiscard]] async_device& device(int device);
  [[nodiscard]] async_device* find_device(int device) const noexcept;
  /// The error for a pointer that is not a live allocation, naming the allocation it points into.
  [[nodiscard]] error bad_pointer(const char* operation, void* ptr) const;
  /// Note [record_stream of a bad stream on cudaMallocAsync]. @throws error, nothing recorded
  void check_stream_handle(const void* ptr, int owner, stream_t stream) const;

  void* do_allocate(int device, std::size_t bytes, stream_t stream) override;
  void do_deallocate(void* ptr) override;
  void do_record_stream(void* ptr, stream_t stream) override;
  void do_empty_cache() override;
  [[nodiscard]] memory_stats do_stats(int device) const override;
  void do_reset_peak_stats(int device) override;
  void do_reset_accumulated_stats(int device) override;
  [[nodiscard]] memory_snapshot do_snapshot() const override;
  void do_record_history(bool enabled, std::size_t max_entries) override;
  [[nodiscard]] std::vector<trace_entry> do_trace(int device) const override;
  void do_set_segment_listener(std::shared_ptr<const segment_listener> listener) override;
  void do_set_memory_fraction(int device, double fraction) override;
  void do_set_settings(std::string_view text, const allocator_config& next) override;
  [[nodiscard]] double do_memory_fraction(int device) const override;
  [[nodiscard]] device_pools* do_pools(int device) const override;

  /// The private pools of one device (Note [Pool seam] in src/core/device_pools.cpp), over the
  /// device's async_device, which routing sets up on first use (async_pools.cpp).
  class pool_seam final : public device_pools {
   public:
    pool_seam(async_allocator& owner, int device) noexcept : device_pools(device), owner_(&owner) {}

   private:
    void do_begin_allocate_to_pool(mempool_id pool, stream_filter filter) override;
    void do_end_allocate_to_pool(mempool_id pool) override;
    void do_release_pool(mempool_id pool) override;
    void do_set_options(mempool_id pool, const pool_options& options) override;
    [[nodiscard]] pool_options do_options(mempool_id pool) const override;
    [[nodiscard]] void* do_allocate_at(void* ptr, std::size_t bytes, mempool_id pool) override;
    void do_sleep(mempool_id pool, const sleep_options& options) override;
    void do_wake(mempool_id pool) override;
    [[nodiscard]] pool_sleep_state do_sleep_state(mempool_id pool) const override;
    [[noreturn]] static void throw_cannot_sleep(const char* what);

    async_allocator* owner_;
  };

  pointer_map pointers_;  // declared before slots_: it outlives the devices that refer to it
  std::unique_ptr<device_slot[]> slots_;
  int slot_count_ = 0;
  std::vector<std::unique_ptr<pool_seam>> pools_;  // one per device
};

}  // namespace streampool::async
