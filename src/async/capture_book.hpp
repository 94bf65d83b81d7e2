// capture_book.hpp — per-device capture bookkeeping of the cudaMallocAsync backend: which private
// pools are being recorded to (with their stream filters), the use count of each pool id, and the
// frees deferred until every capture on the device has ended. Not thread-safe: the device mutex
// guards it. See Note [Captures in the cudaMallocAsync backend].
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <vector>

#include "async/pointer_map.hpp"
#include "streampool/graph.hpp"

namespace streampool::detail {

/// A deallocate() of an allocation made outside any capture, requested while a capture was
/// underway on its device: it is handed to free_async only once no capture is underway.
struct deferred_free {
  void* ptr = nullptr;
  allocation_record record;
};

class capture_book {
 public:
  /// Starts routing allocations whose stream passes `filter` to `pool` (use count +1).
  /// @throws error if `pool` is already being recorded to on this device
  void begin(int device, mempool_id pool, stream_filter filter);
  /// Stops routing to `pool`. @throws error if it is not being recorded to on this device
  void end(int device, mempool_id pool);
  /// Drops one use of `pool`; the id is forgotten at zero.
  /// @throws error if `pool` has no use left on this device
  void release(int device, mempool_id pool);

  /// True while any begin_allocate_to_pool of this device has not been ended.
  [[nodiscard]] bool underway() const noexcept { return !recordings_.empty(); }
  /// The pool of the most recent recording whose filter accepts `stream`, if any.
  [[nodiscard]] std::optional<mempool_id> route(stream_t stream) const;
  /// Uses of `pool` on this device (0 when unknown).
  [[nodiscard]] std::size_t use_count(mempool_id pool) const noexcept;

  void defer(void* ptr, allocation_record record) { deferred_.push_back({ptr, std::move(record)}); }
  [[nodiscard]] std::vector<deferred_free>& deferred() noexcept { return deferred_; }
  [[nodiscard]] const std::vector<deferred_free>& deferred() const noexcept { return deferred_; }

 private:
  struct recording {
    mempool_id pool;
    stream_filter filter;
  };

  std::vector<recording> recordings_;        ///< in begin order; routing looks from the back
  std::map<mempool_id, std::size_t> use_counts_;
  std::vector<deferred_free> deferred_;
};

}  // namespace streampool::detail
