// sim_state.hpp (internal) — the simulated device's state, `sim_driver::state`, shared by the
// sim_*.cpp files: devices and their fake address spaces, streams and events with submitted /
// completed counters, stream-ordered pools (an address range split into blocks), VMM reservations and
// physical handles, and fault injection. One mutex guards all of it; see sim_driver.cpp.
#pragma once

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

#include "driver/sim_hazards.hpp"
#include "driver/sim_malloc_space.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace sim {

inline constexpr std::size_t malloc_alignment = 512;         ///< cudaMalloc's small alignment
inline constexpr std::size_t large_malloc_threshold = 2 * mib;  ///< from here on, 2 MiB aligned
inline constexpr std::size_t pool_block_unit = 512;          ///< pool allocations round to this
inline constexpr std::size_t pool_chunk_unit = 32 * mib;     ///< pools reserve in these (H200)
/// Requests below this take the rest of the block the previous request split, when it fits
/// (Note [Sim pool model] in sim_pool.cpp).
inline constexpr std::size_t pool_small_request = 1 * mib;
inline constexpr int max_devices = 64;
inline constexpr std::uint32_t no_stream = UINT32_MAX;  ///< also "no such handle"

// Note [Sim address spaces]
// Device d owns [(d + 1) << 52, (d + 2) << 52): 1 PiB for cudaMalloc, 1 PiB for pool chunks,
// 2 PiB for VMM reservations, so the three kinds never overlap. Pool chunks and VMM
// reservations are bump ranges whose addresses are never reused, so a stale pointer can never
// alias a newer allocation and free_async or vmm_free of it fails. cudaMalloc addresses follow
// the real driver (Note [Sim address assignment], sim_malloc_space.cpp): freed ranges are
// reused, so a stale malloc pointer may name a newer allocation, as on a GPU, unless
// sim_options::malloc_addresses is bump. Real addresses are below 2^47; these are not, on
// purpose, but stay below 2^59 (top bits clear). A churning benchmark would need a million
// 1 GiB mallocs (bump) or pool chunks to exhaust a part; then the call fails with
// status::other ("simulated address space exhausted").
inline constexpr int device_space_shift = 52;
inline constexpr std::uintptr_t part_size = std::uintptr_t{1} << 50;

// Note [Sim native codes]
// The sim's drv_result::native is int(status) plus a reason in bits 8..15 and, for a genuine
// out_of_memory, (device + 1) << 16, so describe() can name the device with no shared state.
inline constexpr int reason_injected = 1 << 8;
inline constexpr int reason_address_space = 2 << 8;
inline constexpr int reason_host_exception = 3 << 8;
inline constexpr int reason_host_capacity = 4 << 8;  ///< pinned host memory beyond host_capacity
inline constexpr int reason_destroyed_stream = 5 << 8;  ///< Note [Sim destroyed streams]
inline constexpr int reason_mask = 0xff00;

/// Fake handles: base + (index + 1) * 16, indices never reused (a stale handle stays invalid).
inline constexpr std::uintptr_t stream_handle_base = 0x5700000000;
inline constexpr std::uintptr_t event_handle_base = 0xe700000000;
inline constexpr std::uintptr_t pool_handle_base = 0x9000000000;
inline constexpr std::uintptr_t graph_handle_base = 0x6700000000;
inline constexpr std::uintptr_t exec_handle_base = 0x6800000000;
/// Ids of captures begun with stream_begin_capture start here, far from the small ids tests
/// script with set_capture.
inline constexpr std::uint64_t first_capture_id = std::uint64_t{1} << 32;
[[nodiscard]] inline void* make_handle(std::uintptr_t base, std::uint32_t index) noexcept {
  return reinterpret_cast<void*>(base + (std::uintptr_t{index} + 1) * 16);
}
/// The index `handle` encodes, or no_stream when it is not one of `base`'s handles below `count`.
[[nodiscard]] inline std::uint32_t handle_index(const void* handle, std::uintptr_t base, std::size_t count) noexcept {
  const auto value = reinterpret_cast<std::uintptr_t>(handle);
  if (value <= base || (value - base) % 16 != 0 || (value - base) / 16 > count) {
    return UINT32_MAX;
  }
  return static_cast<std::uint32_t>((value - base) / 16 - 1);
}

[[nodiscard]] inline drv_result fail(status code, int reason = 0) noexcept {
  return {code, static_cast<int>(code) | reason};
}
[[nodiscard]] constexpr std::size_t round_up(std::size_t value, std::size_t unit) noexcept {
  return (value + unit - 1) / unit * unit;
}

struct wait_dep {
  std::uint64_t after;   ///< the waiting stream's items numbered > after wait for the dependency
  std::uint32_t stream;  ///< dependency: `stream` must complete up to `target`
  std::uint64_t target;
};

struct stream_rec {
  int device = 0;
  bool alive = true;
  bool builtin = false;  ///< a default stream (legacy or per-thread): no handle, never destroyed
  capture_status capture = capture_status::none;
  std::uint64_t capture_id = 0;
  // Capture sequences (Note [Sim capture sequences] in sim_graph.cpp):
  bool strict = true;    ///< while active, counts in active_captures_ (not a relaxed-mode capture)
  bool begun = false;    ///< part of a capture from stream_begin_capture (not scripted)
  bool origin = false;   ///< the stream that began it
  std::uint64_t joined_through = 0;  ///< items up to this one are joined back into the capture
  std::uint64_t submitted = 0;  ///< work items submitted so far
  std::uint64_t completed = 0;  ///< work items completed so far (<= submitted)
  std::vector<wait_dep> waits;
};

struct event_rec {
  int device = 0;
  bool alive = true;
  std::uint32_t stream = no_stream;  ///< no_stream: never recorded (complete)
  std::uint64_t target = 0;
  std::uint64_t capture_id = 0;  ///< recorded on a stream in an active capture sequence
};

struct graph_rec {
  int device = 0;
  bool alive = true;
};

struct exec_rec {
  int device = 0;
  bool alive = true;
  instantiate_flags flags = instantiate_flags::none;
};

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

struct mapping_rec {
  std::size_t size = 0;
  vmm_handle_t handle = 0;
  std::uint64_t access = 0;  ///< bitmask of devices with read-write access
};

struct reservation_rec {
  int device = 0;
  std::size_t size = 0;
  std::map<std::uintptr_t, mapping_rec> mappings;
};

struct physical_rec {
  int device = 0;
  std::size_t size = 0;
  bool released = false;
  int maps = 0;
};

struct device_rec {
  std::size_t malloc_bytes = 0;  ///< cudaMalloc'd (rounded to the malloc alignment)
  std::size_t pool_bytes = 0;    ///< reserved by pools (all of this device's pools)
  std::size_t vmm_bytes = 0;     ///< VMM physical memory
  std::unique_ptr<malloc_space> mallocs;  ///< where malloc puts allocations
  std::uintptr_t pool_next = 0, pool_end = 0;
  std::uintptr_t vmm_next = 0, vmm_end = 0;
  std::uint32_t legacy_stream = no_stream;
  std::uint32_t default_pool = 0;
  [[nodiscard]] std::size_t in_use() const noexcept { return malloc_bytes + pool_bytes + vmm_bytes; }
};

struct malloc_rec {
  int device = 0;
  std::size_t size = 0;  ///< accounted bytes
};

/// A run of bytes that all hold `value`: [start, end), start being the key in state::contents_.
struct byte_run {
  std::uintptr_t end = 0;
  std::uint8_t value = 0;
};

struct fault_rec {
  int skip = 0;
  int count = 0;
  status code = status::out_of_memory;
};

/// The sim's pinned host memory (sim_host.cpp, Note [Sim pinned host memory]): host_alloc'd
/// ranges (real memory, given back with the sim) and host_register'ed ranges, by start address.
struct host_book {
  std::map<std::uintptr_t, std::size_t> allocs;
  std::map<std::uintptr_t, std::size_t> registered;
  std::size_t pinned = 0;  ///< bytes of both, held against sim_options::host_capacity
  host_book() = default;
  host_book(const host_book&) = delete;
  host_book& operator=(const host_book&) = delete;
  ~host_book();
};

}  // namespace sim

struct sim_driver::state {
  explicit state(const sim_options& options);

  const sim_options& options_;
  const std::uint64_t serial_;  ///< identifies this instance in the per-thread current devices
  mutable std::mutex mutex_;
  bool eager_;
  int active_captures_ = 0;
  bool faults_armed_ = false;
  std::array<sim::fault_rec, driver_call_count> faults_{};
  std::vector<sim::device_rec> devices_;
  std::vector<sim::stream_rec> streams_;
  std::vector<sim::event_rec> events_;
  std::vector<std::unique_ptr<sim::pool_rec>> pools_;
  std::unordered_map<std::uintptr_t, sim::malloc_rec> mallocs_;
  std::unordered_map<std::uintptr_t, sim::block_rec*> async_live_;
  std::map<std::uintptr_t, sim::reservation_rec> reservations_;
  std::unordered_map<vmm_handle_t, sim::physical_rec> physicals_;
  vmm_handle_t next_physical_ = 0x1000;
  std::uint64_t next_capture_id_ = sim::first_capture_id;
  std::uint64_t destroyed_stream_uses_ = 0;  ///< calls given a destroyed stream (Note [Sim destroyed streams])
  std::vector<sim::graph_rec> graphs_;
  std::vector<sim::exec_rec> execs_;
  /// Memory contents written by memset_async / write_bytes: non-overlapping runs by start address
  /// (Note [Sim memory contents], sim_check_ops.cpp).
  std::map<std::uintptr_t, sim::byte_run> contents_;
  /// Pinned host memory (sim_host.cpp).
  sim::host_book host_;
  /// Last uses of device memory by streams (Note [Sim hazard checker], sim_hazards.cpp).
  sim::hazard_tracker hazards_;

  /// Counts the call, applies fault injection, runs `body` under the mutex. See Note [Sim calls].
  template <class Body>
  drv_result run(std::array<std::atomic<std::uint64_t>, driver_call_count>& counters, driver_call call,
                 Body&& body) noexcept {
    counters[static_cast<std::size_t>(call)].fetch_add(1, std::memory_order_relaxed);
    try {
      const std::lock_guard lock(mutex_);
      if (faults_armed_) {
        sim::fault_rec& fault = faults_[static_cast<std::size_t>(call)];
        if (fault.count > 0 && fault.skip == 0) {
          --fault.count;
          return sim::fail(fault.code, sim::reason_injected);
        }
        const drv_result result = body();
        if (result.ok() && fault.skip > 0) {
          --fault.skip;
        }
        return result;
      }
      return body();
    } catch (...) {
      return sim::fail(status::other, sim::reason_host_exception);
    }
  }

  // --- devices (sim_driver.cpp) ---
  [[nodiscard]] drv_result check_device(int device) const noexcept;
  [[nodiscard]] int current_device() const noexcept;
  void set_current_device(int device);
  /// This thread's per-thread default stream on `device` (created on first use).
  [[nodiscard]] std::uint32_t per_thread_stream(int device);
  [[nodiscard]] drv_result out_of_memory(int device) const noexcept;
  /// Takes `bytes` aligned to `alignment` from [next, end); 0 when the range is exhausted.
  static std::uintptr_t bump(std::uintptr_t& next, std::uintptr_t end, std::size_t bytes,
                             std::size_t alignment) noexcept;

  // --- streams and events (sim_streams.cpp) ---
  /// Index of a live stream, or no_stream. nullptr and cudaStreamLegacy (1) are the legacy stream
  /// of `device` (the current device if < 0), cudaStreamPerThread (2) this thread's own one.
  [[nodiscard]] std::uint32_t find_stream(stream_t stream, int device = -1);
  [[nodiscard]] std::uint32_t find_event(event_t event) const noexcept;
  /// The failure of a call given `stream` when find_stream found no live stream: a stream that was
  /// destroyed is status::other (and counted), anything else status::invalid_value.
  /// See Note [Sim destroyed streams].
  [[nodiscard]] drv_result stream_failure(stream_t stream) noexcept;
  [[nodiscard]] std::uint32_t add_stream(int device, bool builtin);
  /// Submits one work item to `stream`; returns its number.
  std::uint64_t submit(std::uint32_t stream) noexcept;
  /// Completes `stream` up to item `target` (and, first, the work it waits on).
  void complete_to(std::uint32_t stream, std::uint64_t target);
  void complete_stream(std::uint32_t stream) { complete_to(stream, streams_[stream].submitted); }
  void complete_all();
  [[nodiscard]] bool stream_done(std::uint32_t stream, std::uint64_t target) const noexcept {
    return streams_[stream].completed >= target;
  }
  /// The host observed completion on `device`: settle pending frees, trim pools above threshold.
  void sync_point(int device);

  // --- capture sequences and graphs (sim_graph.cpp) ---
  /// Puts `stream` into capture `id` (status active).
  void enter_capture(std::uint32_t stream, std::uint64_t id, bool strict, bool begun, bool origin) noexcept;
  /// Takes `stream` out of its capture (status none).
  void leave_capture(std::uint32_t stream) noexcept;
  /// Result of a call that is illegal while a strict capture is active: invalidates every capture
  /// begun with stream_begin_capture, as CUDA does, and returns status::illegal_in_capture.
  [[nodiscard]] drv_result refuse_in_capture() noexcept;
  /// True when a call that is unsafe in capture (cudaMalloc) must be refused: a strict capture is
  /// active and the calling thread is not in relaxed capture mode (sim_graph.cpp).
  [[nodiscard]] bool refuses_unsafe() const noexcept;
  /// True when a stream-ordered allocation call on `stream` must be refused: a strict capture is
  /// active, `stream` is not capturing, and the calling thread is not in relaxed capture mode
  /// (Note [Relaxed uncaptured calls] in sim_graph.cpp).
  [[nodiscard]] bool refuses_uncaptured(std::uint32_t stream) const noexcept;
  /// stream_wait_event(waiter, event) inside a capture: joins `waiter` to the event's capture and
  /// marks the recording stream joined up to the event.
  void join_on_wait(std::uint32_t waiter, const sim::event_rec& event) noexcept;

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
  /// Sets [addr, addr + bytes) to `value` in contents_.
  void write_run(std::uintptr_t addr, std::size_t bytes, std::uint8_t value);
  /// The byte at `addr` (0 if never written).
  [[nodiscard]] std::uint8_t read_byte(std::uintptr_t addr) const noexcept;
};

}  // namespace streampool
