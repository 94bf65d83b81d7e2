// checking_allocator.hpp (internal) — checking mode (config key debug_checks): an allocator that
// wraps either backend and catches the program's own memory bugs. Each allocation gets a canary
// after its requested end, verified by a kernel when it is freed (an overrun is reported through
// the warning handler, naming the allocation), and each freed block is filled with poison on its
// stream, so a read after free sees the poison instead of stale data. docs/reliability.md
// (section "Checking mode") describes it; Note [Checking-mode layout] gives the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/address_table.hpp"
#include "streampool/allocator.hpp"

namespace streampool::check_impl {

/// What checking mode remembers about a live allocation.
struct checked_allocation {
  std::size_t requested = 0;     ///< bytes the program asked for
  std::size_t padded = 0;        ///< bytes asked of the wrapped backend (canary included)
  int device = 0;
  stream_t stream = nullptr;     ///< the allocation's stream
  std::uint64_t serial = 0;      ///< 1 for this allocator's first allocation, then 2, 3, ...
  std::uint64_t time_us = 0;     ///< when it was allocated (the clock of trace entries)
  bool guarded = false;          ///< the canary was written (not when allocated during a capture)
  std::vector<stream_t> used_by; ///< streams given to record_stream
};

/// The overrun report: which allocation, what was found, and that the block was freed anyway.
[[nodiscard]] std::string overrun_message(const void* ptr, const checked_allocation& allocation,
                                          const byte_check& found);
/// Why a block could not be checked or poisoned (a driver failure), for the warning handler.
[[nodiscard]] std::string check_failure_message(const void* ptr, const checked_allocation& allocation,
                                                std::string_view what, const std::string& reason);

class checking_allocator final : public allocator {
 public:
  checking_allocator(std::unique_ptr<allocator> inner, allocator_config config, std::shared_ptr<driver> drv);
  ~checking_allocator() override;

 private:
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
  void do_set_memory_fraction(int device, double fraction) override;
  void do_set_settings(std::string_view text, const allocator_config& next) override;
  void do_set_segment_listener(std::shared_ptr<const segment_listener> listener) override;
  [[nodiscard]] double do_memory_fraction(int device) const override;
  [[nodiscard]] device_pools* do_pools(int device) const override;

  /// The wrapped backend's pools of one device, as checking mode passes them on (Note [Pool seam]):
  /// everything but allocations at an address, which would bypass the canaries (checking_passthrough.cpp).
  class pool_seam final : public device_pools {
   public:
    explicit pool_seam(device_pools& inner) noexcept : device_pools(inner.device()), inner_(&inner) {}

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

    device_pools* inner_;
  };

  /// True when `stream` is not capturing (and the query succeeded): stream work is then neither
  /// captured into a graph nor refused.
  [[nodiscard]] bool not_capturing(stream_t stream) const noexcept;
  /// Orders the allocation's stream after the work submitted so far to the streams it was
  /// record_stream'ed to (an event each), so the check and the poison come after every use.
  [[nodiscard]] drv_result order_after_uses(const checked_allocation& allocation) const noexcept;
  /// Verifies the canary and poisons the block, on the allocation's stream; reports findings and
  /// failures to the warning handler. Never throws for the program's bug: the block is freed.
  void check_and_poison(void* ptr, const checked_allocation& allocation);

  std::unique_ptr<allocator> inner_;
  std::vector<std::unique_ptr<pool_seam>> pools_;  ///< one per device of inner_
  mutable std::mutex mutex_;
  core::address_table<checked_allocation> live_;  ///< by address, under mutex_ (Note [Address table])
  std::uint64_t serial_ = 0;  ///< under mutex_
};

/// Wraps `inner` (built from `config` on `drv`) in checking mode.
[[nodiscard]] std::unique_ptr<allocator> make_checking_allocator(std::unique_ptr<allocator> inner,
                                                                 allocator_config config,
                                                                 std::shared_ptr<driver> drv);

}  // namespace streampool::check_impl
