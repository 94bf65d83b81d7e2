// trace_replay.cpp — replay_trace(): drives an allocator with a recorded allocation sequence.
//
// Note [Replaying delayed frees]
// A trace's free_completed that does not follow its free_requested directly means the block was
// in use on another stream (record_stream) until then. On the sim driver we replay that
// faithfully: before the free, the block is record_stream'ed to a "holder" stream whose work only
// completes (sim_driver::complete) at the free_completed line, so the allocator keeps the block
// unusable exactly as long as PyTorch did. On a real device we cannot hold a stream's work at will,
// so the free itself is deferred to the free_completed line: reserved memory is the same, and
// allocated_bytes counts the block a little longer. For stream-ordered pools it is not the same:
// after record_stream the free is ordered on the allocation stream, which may reuse the block at
// once; so replay_options::defer_delayed_frees makes the sim defer too, and sim and device replays
// of those backends drive the pool with the same sequence.
#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "streampool/replay.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

struct live_block {
  void* ptr = nullptr;
  std::size_t size = 0;
  std::size_t line = 0;
};

/// For each free_requested index: true when its free_completed is not the next event.
std::vector<bool> find_delayed_frees(const std::vector<trace_event>& events) {
  std::vector<bool> delayed(events.size(), false);
  std::unordered_map<std::uint64_t, std::size_t> pending;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace_event& e = events[i];
    if (e.action == trace_action::free_requested) {
      pending[e.address] = i;
    } else if (e.action == trace_action::free_completed) {
      const auto it = pending.find(e.address);
      if (it != pending.end()) {
        delayed[it->second] = it->second + 1 != i;
        pending.erase(it);
      }
    }
  }
  return delayed;
}

class stream_table {
 public:
  stream_table(driver& drv, int device) : driver_(drv), device_(device) {}
  ~stream_table() {
    for (const auto& [value, stream] : streams_) (void)driver_.stream_destroy(device_, stream);
    for (const stream_t stream : holders_) (void)driver_.stream_destroy(device_, stream);
  }
  stream_t recorded(std::uint64_t value) {
    if (value == 0) return nullptr;
    const auto it = streams_.find(value);
    if (it != streams_.end()) return it->second;
    return streams_[value] = create();
  }
  stream_t take_holder() {
    if (idle_holders_.empty()) {
      holders_.push_back(create());
      return holders_.back();
    }
    const stream_t stream = idle_holders_.back();
    idle_holders_.pop_back();
    return stream;
  }
  void give_back_holder(stream_t stream) { idle_holders_.push_back(stream); }

 private:
  stream_t create() {
    stream_t stream = nullptr;
    check(driver_, driver_.stream_create(device_, &stream), "replay: stream_create");
    return stream;
  }
  driver& driver_;
  int device_;
  std::unordered_map<std::uint64_t, stream_t> streams_;
  std::vector<stream_t> holders_;
  std::vector<stream_t> idle_holders_;
};

}  // namespace

replay_result replay_trace(allocator& alloc, const std::vector<trace_event>& events, const replay_options& options) {
  driver& drv = alloc.device_driver();
  int device = 0;
  check(drv, drv.get_device(&device), "replay: get_device");
  replay_result result;
  result.events = events.size();
  for (const trace_event& e : events) {
    if (e.action == trace_action::segment_alloc) {
      result.recorded_segment_bytes += e.size;
      ++result.recorded_segment_events;
    }
  }
  const std::vector<bool> delayed = find_delayed_frees(events);
  sim_driver* sim = options.defer_delayed_frees ? nullptr : options.sim;  // holder streams only without deferral
  if (sim != nullptr) sim->set_eager(false);

  stream_table streams(drv, device);
  std::unordered_map<std::uint64_t, live_block> live;
  std::unordered_map<std::uint64_t, stream_t> held;        // sim: address -> holder stream
  std::unordered_map<std::uint64_t, void*> deferred;       // real driver: address -> pointer
  std::size_t requested = 0;
  alloc.reset_peak_stats(device);
  const std::int64_t mallocs_before = alloc.stats(device).num_device_alloc;
  const auto start = std::chrono::steady_clock::now();

  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace_event& e = events[i];
    if (options.progress && i % options.progress_every == 0) options.progress(i, events.size());
    switch (e.action) {
      case trace_action::alloc: {
        const auto it = live.find(e.address);
        if (it != live.end()) {
          throw error("trace line " + std::to_string(e.line) + ": alloc of address " + std::to_string(e.address) +
                      " which is still live (allocated at line " + std::to_string(it->second.line) + ")");
        }
        if (e.size == 0) break;  // PyTorch records zero-size allocations as no-ops
        void* ptr = alloc.allocate(e.size, streams.recorded(e.stream), device);
        live.emplace(e.address, live_block{ptr, e.size, e.line});
        requested += e.size;
        result.peak_requested = std::max(result.peak_requested, requested);
        ++result.replayed;
        break;
      }
      case trace_action::free_requested: {
        const auto it = live.find(e.address);
        if (it == live.end()) {
          ++result.skipped_frees;  // allocated before recording started
          break;
        }
        requested -= it->second.size;
        ++result.replayed;
        if (!delayed[i]) {
          alloc.deallocate(it->second.ptr);
        } else if (sim != nullptr) {
          const stream_t holder = streams.take_holder();
          alloc.record_stream(it->second.ptr, holder);
          alloc.deallocate(it->second.ptr);
          held[e.address] = holder;
        } else {
          deferred[e.address] = it->second.ptr;
        }
        live.erase(it);
        break;
      }
      case trace_action::free_completed: {
        if (const auto h = held.find(e.address); h != held.end()) {
          sim->complete(h->second);
          streams.give_back_holder(h->second);
          held.erase(h);
        } else if (const auto d = deferred.find(e.address); d != deferred.end()) {
          alloc.deallocate(d->second);
          deferred.erase(d);
        }
        break;
      }
      default:
        break;  // segment_* / oom / snapshot describe the recorded allocator, not the program
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const memory_stats stats = alloc.stats(device);
  result.peak_allocated = static_cast<std::size_t>(stats.allocated_bytes[0].peak);
  result.peak_reserved = static_cast<std::size_t>(stats.reserved_bytes[0].peak);
  result.device_mallocs = stats.num_device_alloc - mallocs_before;

  for (const auto& [address, block] : live) alloc.deallocate(block.ptr);
  for (const auto& [address, ptr] : deferred) alloc.deallocate(ptr);
  if (sim != nullptr) {
    sim->complete_all();
    sim->set_eager(sim->options().eager_completion);
  }
  if (options.progress) options.progress(events.size(), events.size());
  return result;
}

}  // namespace streampool
