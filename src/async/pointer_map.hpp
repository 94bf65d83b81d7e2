// pointer_map.hpp — the live allocations of the cudaMallocAsync backend: pointer -> record, in
// shards with one mutex each, so that threads freeing different pointers do not contend on one
// lock (see Note [Sharded pointer map]); each shard is a core address_table (no host allocation
// per entry, Note [Address table]).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "core/address_table.hpp"
#include "core/hybrid_mutex.hpp"
#include "streampool/driver.hpp"
#include "streampool/graph.hpp"

namespace streampool::async {

/// What the backend remembers about one live allocation.
struct allocation_record {
  int device = 0;
  std::size_t size = 0;            ///< bytes asked of cudaMallocAsync (= the request; no rounding)
  stream_t stream = nullptr;       ///< allocation stream: the free is ordered on it
  mempool_id pool;                 ///< private pool when allocated under begin_allocate_to_pool
  bool captured = false;           ///< a private pool's block: routed by a begin_allocate_to_pool filter
  std::vector<stream_t> stream_uses;  ///< streams given to record_stream (never the allocation stream)
};

/// Outcome of pointer_map::add_stream_use.
enum class stream_use_result : std::uint8_t { added, already_recorded, allocation_stream, unknown_pointer };

class pointer_map {
 public:
  static constexpr std::size_t shard_count = 64;

  /// Adds a live allocation. @throws std::bad_alloc (host memory) — nothing inserted then.
  void insert(void* ptr, allocation_record&& record);
  /// Removes `ptr` and returns its record; nullopt when `ptr` is not live.
  [[nodiscard]] std::optional<allocation_record> take(void* ptr);
  /// Puts a record back after take() when the free could not be completed.
  void restore(void* ptr, allocation_record record) { insert(ptr, std::move(record)); }
  /// Remembers that `stream` uses `ptr` (record_stream).
  [[nodiscard]] stream_use_result add_stream_use(void* ptr, stream_t stream);
  /// True when `ptr` is live.
  [[nodiscard]] bool contains(void* ptr) const;
  /// Device and allocation stream of live `ptr`; nullopt when it is not live.
  [[nodiscard]] std::optional<std::pair<int, stream_t>> owner_of(void* ptr) const;

  /// The live allocation whose range [ptr, ptr + size) holds `address`, if any (slow: scans every
  /// shard; used for diagnostics only).
  [[nodiscard]] std::optional<std::pair<std::uintptr_t, allocation_record>> find_containing(
      std::uintptr_t address) const;
  /// Copies of the live allocations of `device`, unordered.
  [[nodiscard]] std::vector<std::pair<std::uintptr_t, allocation_record>> live_on(int device) const;
  /// Number of live allocations (all devices).
  [[nodiscard]] std::size_t size() const;

 private:
  struct alignas(64) shard {
    mutable core::hybrid_mutex mutex;
    core::address_table<allocation_record> records;
  };

  [[nodiscard]] static std::size_t shard_of(std::uintptr_t address) noexcept;

  std::array<shard, shard_count> shards_;
};

}  // namespace streampool::async
