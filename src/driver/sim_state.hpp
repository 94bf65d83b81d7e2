// sim_state.hpp (internal) — the simulated device's state, `sim_driver::state`, shared by the
// sim_*.cpp files: devices and their fake address spaces, streams and events with submitted /
// completed counters, stream-ordered pools (an address range split into blocks), VMM reservations and
// physical handles, and fault injection. One mutex guards all of it; see sim_driver.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "driver/sim_capture.hpp"
#include "driver/sim_common.hpp"
#include "driver/sim_contents.hpp"
#include "driver/sim_faults.hpp"
#include "driver/sim_graphs.hpp"
#include "driver/sim_host.hpp"
#include "driver/sim_hazards.hpp"
#include "driver/sim_mallocs.hpp"
#include "driver/sim_streams.hpp"
#include "driver/sim_vmm.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace sim {

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

struct device_rec {
  std::size_t pool_bytes = 0;    ///< reserved by pools (all of this device's pools)
  std::uintptr_t pool_next = 0, pool_end = 0;
  std::uint32_t default_pool = 0;
};

}  // namespace sim

struct sim_driver::state {
  explicit state(const sim_options& options);

  const sim_options& options_;
  const std::uint64_t serial_;  ///< identifies this instance in the per-thread current devices
  mutable std::mutex mutex_;
  sim::fault_injector faults_;
  std::vector<sim::device_rec> devices_;
  sim::stream_model streams_;
  sim::capture_model captures_{streams_};
  std::vector<std::unique_ptr<sim::pool_rec>> pools_;
  sim::malloc_heap mallocs_;
  std::unordered_map<std::uintptr_t, sim::block_rec*> async_live_;
  sim::vmm_space vmm_;
  sim::graph_book graphs_;
  /// Memory contents written by memset_async / write_bytes (Note [Sim memory contents]).
  sim::contents_map contents_;
  /// Pinned host memory (sim_host.cpp).
  sim::host_memory host_;
  /// Last uses of device memory by streams (Note [Sim hazard checker], sim_hazards.cpp).
  sim::hazard_tracker hazards_;

  /// Counts the call, applies fault injection, runs `body` under the mutex. See Note [Sim calls].
  template <class Body>
  drv_result run(std::array<std::atomic<std::uint64_t>, driver_call_count>& counters, driver_call call,
                 Body&& body) noexcept {
    counters[static_cast<std::size_t>(call)].fetch_add(1, std::memory_order_relaxed);
    try {
      const std::lock_guard lock(mutex_);
      return faults_.apply(call, body);
    } catch (...) {
      return sim::fail(status::other, sim::reason_host_exception);
    }
  }

  // --- devices (sim_driver.cpp) ---
  [[nodiscard]] drv_result check_device(int device) const noexcept;
  /// Device memory in use on `device`: malloc'd + pool-reserved + VMM physical bytes.
  [[nodiscard]] std::size_t in_use(int device) const noexcept {
    return mallocs_.bytes(device) + devices_[static_cast<std::size_t>(device)].pool_bytes + vmm_.bytes(device);
  }
  /// Capacity of `device` not in use.
  [[nodiscard]] std::size_t available(int device) const noexcept {
    return options_.capacity - std::min(in_use(device), options_.capacity);
  }

  // --- synchronisation (sim_streams.cpp) ---
  /// The host observed completion on `device`: settle pending frees, trim pools above threshold.
  void sync_point(int device);

  // --- pools (sim_pool.cpp) ---
  [[nodiscard]] sim::pool_rec* find_pool(mempool_t pool) const noexcept;
  [[nodiscard]] std::uint32_t add_pool(int device, bool is_default);
  /// Host observed completion: pending frees whose stream reached their target become settled.
  void settle_pending(sim::pool_rec& pool);
  /// Unmaps idle granules (no live byte, no free byte whose free is still pending unless `force`),
  /// highest first, until reserved <= keep; then gives a wholly unmapped free end back to the
  /// unused part of the range. `force` (destroyed pools) ignores pending frees.
  void trim(sim::pool_rec& pool, std::size_t keep, bool force);

  // --- memory contents (sim_check_ops.cpp) ---
  /// The device whose memory holds all of [addr, addr + bytes) (malloc'd, a pool chunk or mapped
  /// VMM pages), or -1.
  [[nodiscard]] int device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept;
};

}  // namespace streampool
