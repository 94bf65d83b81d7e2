// capture_router.hpp — the graph-capture bookkeeping both backends share, one per device: the
// private pools (use counts), the active recordings of begin_allocate_to_pool with their stream
// filters, newest-first routing of an allocation to a pool, the capture-underway count the hot
// paths read, and the frees parked until no capture is underway. What a pool's memory is (native:
// arenas; cudaMallocAsync: its own blocks, Note [Private pools of the cudaMallocAsync backend]) and what a parked free is (native: a block;
// cudaMallocAsync: a pointer and its record) are the backend's: the two template parameters.
// See Note [Capture router] and Note [Released pools].
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "streampool/graph.hpp"

namespace streampool::capture {

// Note [Capture router]
// A recording is one active begin_allocate_to_pool: a pool id and a stream filter. Routing asks
// the recordings newest first and takes the first whose filter accepts the allocation's stream;
// none: the default pool. Several recordings may be active at once, on one device or several.
// Threads: the recording calls (begin, end, release, route, forget_released, use_count) are
// serialised by the caller (the backend's device mutex); underway(), has_deferred() and
// slow_entry() are relaxed loads of one word for the hot paths (Note [Slow-entry word]). The
// deferred-free calls take the router's own
// lock, a leaf (Note [Lock order] in src/native/device_state.hpp): the native backend parks a
// free holding only an arena lock.
//
// Note [Deferred frees during capture]
// While any begin_allocate_to_pool is active on a device (a capture is underway,
// docs/pytorch-compatibility.md §3.3), neither backend queries or synchronises an event or gives
// memory back to the driver for that device: no cudaFree, and no cudaFreeAsync of memory allocated
// outside a capture. A free that would need one is deferred: parked in the device's router (Note
// [Parked frees]) and completed once no capture is underway. What each backend defers and how it
// completes it is its own: the native backend's in src/native/native_allocator.hpp (blocks with
// stream uses; the slow entry and the OOM ladder skip their release steps), the cudaMallocAsync
// backend's at async_device::free in src/async/async_device.cpp (frees of memory not allocated
// during a capture).
//
// Note [Parked frees]
// While any recording is underway on a device, some frees must not complete: the native backend
// cannot query the events a record_stream'ed block needs (event queries are illegal during a
// capture), and the cudaMallocAsync backend must not hand memory allocated before the capture to
// cudaFreeAsync (it would become a free node of a graph that does not own it, or let the pool
// give the memory to the capture while work the graph will replay still reads it). Which frees
// are parked is the backend's decision; the rule kept here is when they come back: take_deferred()
// hands them out only once no recording is underway on the device, in the order they were parked,
// and the backend gives back (keep_deferred) any it still cannot complete.
//
// Note [Slow-entry word]
// A hot allocation must leave its fast path while a recording is underway, while frees are
// parked, and while the backend says so for a reason of its own (the native backend's default
// pool asleep, Note [Refused while asleep] in src/native/device_sleep.cpp). It used to read three
// atomics for that (the recording count, the parked-free count, the backend's flag), twice per
// allocation. Now the three live in one 64-bit word, `state_`: bits 0-31 the number of
// recordings, bit 32 "frees parked", bits 33-63 the backend's holds (hold / release_hold), and
// slow_entry() is one relaxed load compared with zero. The writers are under different locks
// (recordings and holds: the caller's serialisation; the parked bit: the deferred-free lock), so
// each change is an atomic read-modify-write of its own field (fetch_add, fetch_sub, fetch_or,
// fetch_and) and none can lose another's; the parked bit changes only when the list turns empty or
// non-empty, so a free parked behind others adds no shared write. Relaxed order as before: what a
// hot path needs ordered is ordered by its arena lock (Note [Capture start] in
// src/native/native_allocator.hpp).

/// One private pool: its id, its use count (the captured graphs and other users holding it) and the
/// backend's record of its memory.
template <typename Memory>
struct private_pool {
  mempool_id id;
  int use_count = 1;
  pool_options options{};  ///< Note [Pool options] in src/core/allocator.cpp
  Memory memory{};
  /// Released by every user (use count 0): the backend may free its memory (Note [Released pools]).
  [[nodiscard]] bool freeable() const noexcept { return use_count == 0; }
};

// The error messages, out of line (capture_router.cpp).
[[noreturn]] void throw_already_recording(int device, mempool_id pool);
[[noreturn]] void throw_begin_released(int device, mempool_id pool);
[[noreturn]] void throw_not_recording(int device, mempool_id pool);
[[noreturn]] void throw_release_unknown(int device, mempool_id pool);
[[noreturn]] void throw_release_released(int device, mempool_id pool);
[[noreturn]] void throw_options_unknown(int device, mempool_id pool);

template <typename Memory, typename Deferred>
class capture_router {
 public:
  using pool_type = private_pool<Memory>;

  /// `device`: the device index, for error messages.
  explicit capture_router(int device) noexcept : device_(device) {}
  capture_router(const capture_router&) = delete;
  capture_router& operator=(const capture_router&) = delete;

  // --- recordings (the caller serialises these) ---------------------------------------------------
  /// Starts routing allocations whose stream passes `filter` to `pool`: a new id makes a pool with
  /// use count 1, a pool in use gets one use more. Nothing changes on an exception.
  /// @throws error if `pool` is being recorded to, or was released and not yet freed
  /// (Note [Released pools]); bad_alloc
  pool_type& begin(mempool_id pool, stream_filter filter) {
    if (recording(pool)) throw_already_recording(device_, pool);
    const auto found = pools_.find(pool);
    if (found != pools_.end() && found->second->freeable()) throw_begin_released(device_, pool);
    recordings_.reserve(recordings_.size() + 1);
    pool_type* target = nullptr;
    if (found == pools_.end()) {
      auto created = std::make_unique<pool_type>();
      created->id = pool;
      target = created.get();
      pools_.emplace(pool, std::move(created));
    } else {
      target = found->second.get();
      ++target->use_count;
    }
    recordings_.push_back({std::move(filter), target});  // no throw: capacity reserved above
    state_.fetch_add(underway_unit, std::memory_order_relaxed);
    return *target;
  }

  /// Stops routing to `pool` (its use count stays). @throws error if it is not being recorded to
  void end(mempool_id pool) {
    for (auto it = recordings_.begin(); it != recordings_.end(); ++it) {
      if (it->pool->id != pool) continue;
      recordings_.erase(it);
      state_.fetch_sub(underway_unit, std::memory_order_relaxed);
      return;
    }
    throw_not_recording(device_, pool);
  }

  /// Drops one use of `pool`; at 0 it becomes freeable. @throws error if `pool` is unknown or
  /// already at use count 0
  void release(mempool_id pool) {
    const auto found = pools_.find(pool);
    if (found == pools_.end()) throw_release_unknown(device_, pool);
    if (found->second->freeable()) throw_release_released(device_, pool);
    --found->second->use_count;
  }

  /// The options of `pool`, set. @throws error if `pool` is unknown (never begun, or forgotten)
  void set_options(mempool_id pool, const pool_options& options) {
    const auto found = pools_.find(pool);
    if (found == pools_.end()) throw_options_unknown(device_, pool);
    found->second->options = options;
  }
  /// The options of `pool`. @throws error if `pool` is unknown
  [[nodiscard]] pool_options options(mempool_id pool) const {
    const auto found = pools_.find(pool);
    if (found == pools_.end()) throw_options_unknown(device_, pool);
    return found->second->options;
  }

  /// Offers `take(pool_type&)` each pool that may serve a general allocation about to fail with
  /// out of memory (Note [Pool options] in src/core/allocator.cpp: use_on_oom, not released, not
  /// being recorded to), in id order, and returns the first non-null result (or null).
  template <typename F>
  [[nodiscard]] auto first_use_on_oom(F&& take) const -> decltype(take(std::declval<pool_type&>())) {
    for (const auto& entry : pools_) {
      pool_type& pool = *entry.second;
      if (!pool.options.use_on_oom || pool.freeable() || recording(pool.id)) continue;
      if (auto found = take(pool)) return found;
    }
    return nullptr;
  }

  /// The pool of the newest recording whose filter accepts `stream`; nullptr: the default pool.
  /// Runs the filters (user code) under the caller's lock.
  [[nodiscard]] pool_type* route(stream_t stream) const {
    for (auto it = recordings_.rbegin(); it != recordings_.rend(); ++it) {
      if (it->filter(stream)) return it->pool;
    }
    return nullptr;
  }

  /// The pool `pool` names (in use, or released and not yet forgotten), or nullptr.
  [[nodiscard]] pool_type* find(mempool_id pool) const noexcept {
    const auto found = pools_.find(pool);
    return found == pools_.end() ? nullptr : found->second.get();
  }

  /// Calls `f(pool_type&)` for every pool the router knows (in use, or released and not yet
  /// forgotten), in id order.
  template <typename F>
  void for_each_pool(F&& f) const {
    for (const auto& entry : pools_) f(*entry.second);
  }

  [[nodiscard]] bool recording(mempool_id pool) const noexcept {
    for (const recording_entry& r : recordings_) {
      if (r.pool->id == pool) return true;
    }
    return false;
  }

  /// Uses of `pool` (0 when unknown, or released).
  [[nodiscard]] int use_count(mempool_id pool) const noexcept {
    const auto found = pools_.find(pool);
    return found == pools_.end() ? 0 : found->second->use_count;
  }

  /// True while some pool is released and not yet forgotten.
  [[nodiscard]] bool has_freeable() const noexcept {
    for (const auto& entry : pools_) {
      if (entry.second->freeable()) return true;
    }
    return false;
  }

  /// Offers every freeable pool that no recording uses to `let_go(pool_type&) -> bool`, which
  /// returns true when the pool holds no memory any more (and the backend has dropped its own
  /// references to it); such a pool is forgotten, and its id starts a new pool at the next begin.
  template <typename F>
  void forget_released(F&& let_go) {
    for (auto it = pools_.begin(); it != pools_.end();) {
      pool_type& pool = *it->second;
      if (pool.freeable() && !recording(pool.id) && let_go(pool)) {
        it = pools_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // --- lock-free reads (hot paths) --------------------------------------------------------------
  /// True while a begin_allocate_to_pool of this device has not been ended (relaxed load).
  [[nodiscard]] bool underway() const noexcept { return (state_.load(std::memory_order_relaxed) & underway_mask) != 0; }
  /// True while frees are parked (relaxed load).
  [[nodiscard]] bool has_deferred() const noexcept { return (state_.load(std::memory_order_relaxed) & deferred_bit) != 0; }
  /// underway() || has_deferred() || a hold: one relaxed load (Note [Slow-entry word]).
  [[nodiscard]] bool slow_entry() const noexcept { return state_.load(std::memory_order_relaxed) != 0; }
  /// Makes slow_entry() true until the matching release_hold(), for a reason of the backend's
  /// (the caller's serialisation, as for begin; holds nest).
  void hold() noexcept { state_.fetch_add(hold_unit, std::memory_order_relaxed); }
  void release_hold() noexcept { state_.fetch_sub(hold_unit, std::memory_order_relaxed); }
  /// True while some hold() is not released (relaxed load).
  [[nodiscard]] bool held() const noexcept { return state_.load(std::memory_order_relaxed) >= hold_unit; }

  // --- deferred frees (thread-safe; Note [Parked frees]) --------------------------
  /// Parks a free made of `args` (Deferred's constructor arguments; they are not moved from when
  /// this throws). @throws bad_alloc (nothing parked)
  template <typename... Args>
  void defer(Args&&... args) {
    const std::lock_guard lock(deferred_mutex_);
    deferred_.emplace_back(std::forward<Args>(args)...);
    note_deferred_locked();
  }
  /// The parked frees, oldest first, when no recording is underway; nothing otherwise.
  [[nodiscard]] std::vector<Deferred> take_deferred() {
    std::vector<Deferred> out;
    if (underway()) return out;
    const std::lock_guard lock(deferred_mutex_);
    out.swap(deferred_);
    note_deferred_locked();
    return out;
  }
  /// Takes out and returns the parked frees for which `ready(const Deferred&)` is true, in the order
  /// they were parked, whether or not a recording is underway (graph_capture_record_stream_reuse:
  /// the backend decided that the capture's graph orders them). @throws bad_alloc (nothing taken)
  template <typename Pred>
  [[nodiscard]] std::vector<Deferred> take_deferred_if(Pred ready) {
    std::vector<Deferred> out;
    const std::lock_guard lock(deferred_mutex_);
    std::vector<Deferred> kept;
    out.reserve(deferred_.size());  // no allocation below: nothing moved until both have room
    kept.reserve(deferred_.size());
    for (Deferred& d : deferred_) {
      if (ready(static_cast<const Deferred&>(d))) out.push_back(std::move(d));
      else kept.push_back(std::move(d));
    }
    deferred_.swap(kept);
    note_deferred_locked();
    return out;
  }
  /// Parks again, ahead of anything parked since, the frees of `items` the backend could not
  /// complete. A caller that holds the lock serialising begin() from take_deferred() to here lets
  /// nothing be parked meanwhile (frees are parked only while a recording is underway), and then
  /// this allocates nothing and cannot throw. @throws bad_alloc otherwise (nothing changed)
  void keep_deferred(std::vector<Deferred>&& items) {
    if (items.empty()) return;
    const std::lock_guard lock(deferred_mutex_);
    if (!deferred_.empty()) {
      items.insert(items.end(), std::make_move_iterator(deferred_.begin()), std::make_move_iterator(deferred_.end()));
    }
    deferred_.swap(items);
    note_deferred_locked();
  }
  /// Calls `f(const Deferred&)` for every parked free, under the deferred-free lock.
  template <typename F>
  void for_each_deferred(F&& f) const {
    const std::lock_guard lock(deferred_mutex_);
    for (const Deferred& item : deferred_) f(item);
  }

 private:
  struct recording_entry {
    stream_filter filter;
    pool_type* pool;  ///< in pools_; a pool being recorded to is never forgotten
  };

  /// Sets the parked bit of state_ to !deferred_.empty() where it differs (deferred-free lock held).
  void note_deferred_locked() noexcept {
    const bool parked = !deferred_.empty();
    if (parked == deferred_flag_) return;
    deferred_flag_ = parked;
    if (parked) state_.fetch_or(deferred_bit, std::memory_order_relaxed);
    else state_.fetch_and(~deferred_bit, std::memory_order_relaxed);
  }

  // state_ (Note [Slow-entry word]): recordings in bits 0-31, "frees parked" bit 32, holds above.
  static constexpr std::uint64_t underway_unit = 1;
  static constexpr std::uint64_t underway_mask = 0xffff'ffffULL;
  static constexpr std::uint64_t deferred_bit = 1ULL << 32;
  static constexpr std::uint64_t hold_unit = 1ULL << 33;

  int device_;
  std::atomic<std::uint64_t> state_{0};  ///< recordings_.size(), !deferred_.empty(), holds
  bool deferred_flag_ = false;           ///< !deferred_.empty() as state_ shows it (deferred-free lock)
  std::vector<recording_entry> recordings_;       ///< in begin order; routing looks from the back
  std::map<mempool_id, std::unique_ptr<pool_type>> pools_;
  mutable std::mutex deferred_mutex_;
  std::vector<Deferred> deferred_;
};

}  // namespace streampool::capture
