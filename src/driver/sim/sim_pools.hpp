// sim_pools.hpp (internal) — the simulated stream-ordered pools (pool_space, the cudaMallocAsync
// emulation): pool records and their settings, each pool's address range split into blocks,
// stream-ordered reuse of freed blocks, reserved / used accounting per pool and device, settling
// and trimming (Note [Sim pool model], Note [Pool reuse rules] in sim_pool.cpp). Handles,
// attributes and capture rules are pool_calls' (sim_pool_calls.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "driver/sim/sim_common.hpp"
#include "driver/sim/sim_streams.hpp"

namespace streampool::sim {

struct pool_rec;
struct chunk_rec;

/// A range of a pool's address range, live (handed out) or free. Free blocks freed on a stream
/// whose work up to the free is not yet observed are "pending" (!settled): see Note [Pool reuse
/// rules] in sim_pool.cpp.
struct block_rec {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  chunk_rec* chunk = nullptr;
  block_rec* prev = nullptr;  ///< address neighbours inside the range
  block_rec* next = nullptr;
  std::size_t requested = 0;  ///< bytes asked for, while live (used_mem counts these)
  bool free = true;
  bool settled = true;
  std::uint32_t stream = no_stream;  ///< the freeing stream, while pending
  std::uint64_t target = 0;          ///< its item that must complete
  std::uint64_t graph_capture = 0;   ///< allocated by a begun capture: graph-owned (Note [Sim graph memory])
};

/// A pool's address range (one per pool, made at its first allocation; Note [Sim pool model]):
/// blocks cover [base, base + size) without gaps, `size` being the high-water end of what was
/// handed out; beyond it up to `span` nothing was ever allocated. Memory is mapped (reserved) per
/// pool_chunk_unit granule of the range.
struct chunk_rec {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::size_t span = 0;  ///< address space held for the range
  std::size_t live = 0;  ///< live blocks
  block_rec* first = nullptr;
  block_rec* last = nullptr;
  pool_rec* pool = nullptr;
  std::vector<bool> mapped;  ///< per granule of [base, base + span)
  ~chunk_rec();
};

/// Orders free blocks by (size, address) for best fit; probes with a (size, address) pair.
struct block_order {
  using is_transparent = void;
  using key = std::pair<std::size_t, std::uintptr_t>;
  static key of(const block_rec* b) noexcept { return {b->size, b->addr}; }
  bool operator()(const block_rec* a, const block_rec* b) const noexcept { return of(a) < of(b); }
  bool operator()(const block_rec* a, const key& b) const noexcept { return of(a) < b; }
  bool operator()(const key& a, const block_rec* b) const noexcept { return a < of(b); }
};

struct pool_rec {
  int device = 0;
  bool alive = true;
  bool is_default = false;
  std::uint64_t release_threshold = 0;
  bool follow_event_dependencies = true;
  bool allow_opportunistic = true;
  bool allow_internal_dependencies = true;
  std::uint64_t peers = 0;  ///< bitmask of devices granted access
  std::size_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::map<std::uintptr_t, std::unique_ptr<chunk_rec>> chunks;  ///< the address range, once made
  std::set<block_rec*, block_order> free_blocks;
  std::unordered_set<block_rec*> pending;
  block_rec* remainder = nullptr;  ///< free rest of the block the last request split, if any
};

class pool_space {
 public:
  /// Pools of `device_count` devices, each with its pool part of Note [Sim address spaces]; a
  /// default pool per device when `supported`.
  pool_space(int device_count, bool supported, std::size_t capacity);

  /// The live pool `pool` names, or nullptr.
  [[nodiscard]] pool_rec* find(mempool_t pool) const noexcept;
  [[nodiscard]] mempool_t default_pool(int device) const noexcept;
  [[nodiscard]] mempool_t create(int device);
  /// Kills the handle; idle memory goes now, the rest as its last allocation is freed.
  void destroy(pool_rec& pool, const stream_model& streams);

  /// Allocates `bytes` (> 0) from `pool` for `stream` into *out; `available` is the device's free
  /// capacity (out_of_memory when the granules to map exceed it).
  [[nodiscard]] drv_result allocate(pool_rec& pool, std::size_t bytes, std::uint32_t stream_index,
                                    const stream_model& streams, std::size_t available, void** out);
  /// The live block starting at `ptr`, or nullptr.
  [[nodiscard]] block_rec* find_live(const void* ptr) const noexcept;
  /// Frees live `block` on `stream`, whose free is that stream's work item `item`.
  void release(block_rec* block, std::uint32_t stream_index, std::uint64_t item, const stream_model& streams);

  /// The host observed completion on `device`: settle pending frees, trim pools above threshold.
  void sync_point(int device, const stream_model& streams);
  /// Unmaps idle granules (no live byte, no free byte whose free is still pending unless `force`),
  /// highest first, until reserved <= keep; then gives a wholly unmapped free end back to the
  /// unused part of the range. `force` (destroyed pools) ignores pending frees.
  void trim(pool_rec& pool, std::size_t keep, bool force, const stream_model& streams);

  /// Bytes reserved by all pools of `device`.
  [[nodiscard]] std::size_t bytes(int device) const noexcept { return devices_[static_cast<std::size_t>(device)].bytes; }
  /// The device whose pool range holds all of [addr, addr + bytes), or -1.
  [[nodiscard]] int device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept;

 private:
  struct device_part {
    std::size_t bytes = 0;                  ///< reserved by this device's pools
    std::uintptr_t next = 0, end = 0;       ///< address space for pool ranges (bump)
    std::uint32_t default_pool = no_stream;
  };

  [[nodiscard]] std::uint32_t add_pool(int device, bool is_default);
  /// Host observed completion: pending frees whose stream reached their target become settled.
  void settle_pending(pool_rec& pool, const stream_model& streams);

  std::size_t capacity_;
  std::vector<device_part> devices_;
  std::vector<std::unique_ptr<pool_rec>> pools_;
  std::unordered_map<std::uintptr_t, block_rec*> live_;
};

}  // namespace streampool::sim
