// peer_base.hpp — what every peer allocator shares: the pointer table and counters behind
// deallocate(ptr) and stats(), the hooks a peer does not support (private pools, history, memory
// fraction), and stream_joiner, which orders a free after the streams given to record_stream.
// Used by the driver-level peers (peer_allocators.cpp), `cub` (peer_cub.cpp) and the PyTorch
// peers (peer_torch.cpp).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "peer_table.hpp"
#include "streampool/allocator.hpp"
#include "streampool/errors.hpp"

namespace streampool::bench {

/// The table, the counters and the hooks a peer does not support.
class peer_base : public allocator {
 protected:
  peer_base(std::string name, std::shared_ptr<driver> drv)
      : allocator(allocator_config{}, std::move(drv)), name_(std::move(name)) {}

  [[noreturn]] void unsupported(const char* what) const {
    throw error(name_ + " peer: " + what + " is not supported by this peer");
  }
  peer_block take(void* ptr) {
    std::optional<peer_block> block = table_.take(ptr);
    if (!block) throw error(name_ + " peer: deallocate of a pointer it did not hand out (or already freed)");
    bytes_.sub(static_cast<std::int64_t>(block->bytes));
    return std::move(*block);
  }
  void add(void* ptr, std::size_t bytes, stream_t stream, int device) {
    table_.insert(ptr, peer_block{bytes, stream, device, {}});
    bytes_.add(static_cast<std::int64_t>(bytes));
  }
  [[noreturn]] void fail(const char* call, drv_result result, std::size_t bytes, int device) const {
    const std::string what = name_ + " peer: " + call + " of " + std::to_string(bytes) + " bytes failed: " +
                             device_driver().describe(result);
    if (result.code == status::out_of_memory) throw out_of_memory(what, bytes, device);
    throw cuda_error(what, result.native);
  }
  /// Statistics of pool `all` (the peers do not split small/large) from the table: allocated =
  /// requested bytes of live blocks; num_device_alloc = allocations (a peer with its own cache
  /// overwrites it). allocation.peak is not tracked (only byte peaks are); cumulative figures
  /// count since construction.
  memory_stats base_stats() const {
    const peer_counts counts = table_.counts();
    memory_stats s;
    stat bytes;
    bytes.current = bytes_.current.load(std::memory_order_relaxed);
    bytes.peak = bytes_.peak.load(std::memory_order_relaxed);
    bytes.allocated = counts.bytes_allocated;
    bytes.freed = counts.bytes_freed;
    stat blocks;
    blocks.current = counts.live;
    blocks.allocated = counts.allocations;
    blocks.freed = counts.frees;
    s.allocated_bytes[0] = s.requested_bytes[0] = s.active_bytes[0] = bytes;
    s.allocation[0] = s.active[0] = blocks;
    s.num_device_alloc = counts.allocations;
    s.num_device_free = counts.frees;
    return s;
  }

  void do_record_stream(void* ptr, stream_t stream) override {
    if (!table_.record(ptr, stream)) throw error(name_ + " peer: record_stream of a pointer it did not hand out");
  }
  void do_reset_peak_stats(int) override { bytes_.reset_peak(); }
  void do_reset_accumulated_stats(int) override { unsupported("reset_accumulated_stats"); }
  memory_snapshot do_snapshot() const override { return {}; }
  void do_record_history(bool enabled, std::size_t) override {
    if (enabled) unsupported("record_history");
  }
  std::vector<trace_entry> do_trace(int) const override { return {}; }
  void do_set_memory_fraction(int, double) override { unsupported("set_memory_fraction"); }
  double do_memory_fraction(int) const override { return 1.0; }
  device_pools* do_pools(int) const override { unsupported("private pools"); }

  std::string name_;
  mutable peer_table table_;
  byte_gauge bytes_;
};

/// record_stream for peers whose free has no notion of it: before the free, an event is recorded
/// on each recorded stream and the allocation stream waits for it, so whatever the peer does with
/// the block next on the allocation stream (or after an event on it completes) comes after those
/// uses. Events are reused: a stream wait captures the event's state when it is enqueued.
class stream_joiner {
 public:
  stream_joiner(driver& drv, std::string name) : drv_(drv), name_(std::move(name)) {}
  ~stream_joiner() {
    for (const auto& [device, event] : events_) (void)drv_.event_destroy(device, event);
  }
  stream_joiner(const stream_joiner&) = delete;
  stream_joiner& operator=(const stream_joiner&) = delete;

  /// Makes `block.stream` wait for the work queued so far on each of `block.recorded`.
  void join(const peer_block& block) {
    for (const stream_t used : block.recorded) {
      const event_t event = take_event(block.device);
      check(drv_, drv_.event_record(event, used), name_ + " peer: event_record");
      check(drv_, drv_.stream_wait_event(block.stream, event), name_ + " peer: stream_wait_event");
      give_back(event);
    }
  }

 private:
  event_t take_event(int device) {
    {
      const std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        const event_t event = idle_.back();
        idle_.pop_back();
        return event;
      }
    }
    event_t event = nullptr;
    check(drv_, drv_.event_create(device, &event), name_ + " peer: event_create");
    const std::lock_guard lock(mutex_);
    events_.emplace_back(device, event);
    return event;
  }
  void give_back(event_t event) {
    const std::lock_guard lock(mutex_);
    idle_.push_back(event);
  }

  driver& drv_;
  std::string name_;
  std::mutex mutex_;
  std::vector<std::pair<int, event_t>> events_;  // every event created, with its device
  std::vector<event_t> idle_;  // single-device runs: events are not matched to devices
};

}  // namespace streampool::bench
