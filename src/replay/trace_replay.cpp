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
//
// Note [Shared holder streams]
// A holder stream per delayed free made a trace with 200,000 frees pending on events 200,000
// streams: every allocation then polled an event queue per stream (PyTorch's process_events
// does the same per stream), so the replay took 49 s, quadratic in the pending frees. Frees
// share a holder when they complete in the order they were held: each free's event is recorded
// on the holder, its position noted (sim_driver::submitted_work), and its free_completed
// completes the holder up to that position (sim_driver::complete_to), which completes the earlier
// frees of that holder, already completed by then. A free takes the holder whose last free
// completes latest before its own (none: a new or idle holder), so frees completing in order
// share one holder, and the holders in use number the longest run of frees that complete in the
// reverse order of their requests. Each block still becomes reusable exactly at its
// free_completed line, and the allocator sees the same calls but for the holder's identity.
#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
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

constexpr std::size_t not_delayed = std::numeric_limits<std::size_t>::max();

/// For each free_requested index: the index of its free_completed when that is not the next
/// event (a delayed free), else not_delayed.
std::vector<std::size_t> find_delayed_frees(const std::vector<trace_event>& events) {
  std::vector<std::size_t> delayed(events.size(), not_delayed);
  std::unordered_map<std::uint64_t, std::size_t> pending;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace_event& e = events[i];
    if (e.action == trace_action::free_requested) {
      pending[e.address] = i;
    } else if (e.action == trace_action::free_completed) {
      const auto it = pending.find(e.address);
      if (it != pending.end()) {
        if (it->second + 1 != i) delayed[it->second] = i;
        pending.erase(it);
      }
    }
  }
  return delayed;
}

/// A delayed free held on the sim (Note [Shared holder streams]).
struct held_free {
  stream_t holder = nullptr;
  std::uint64_t work = 0;  ///< the holder's work up to the free's event
  std::size_t completes = 0;  ///< index of its free_completed
};

}  // namespace

// Note [Replay stream lifetime]
// The streams a replay creates are the streams of the allocator's cached blocks afterwards:
// empty_cache() and the allocator's destructor synchronise a segment's stream before unmapping
// its free expandable pages (PyTorch does the same: docs/pytorch-compatibility.md, "Expandable
// segments"), and PyTorch's own allocator (the torch-native peer) keeps per-stream state too.
// The first replay destroyed its streams at the end of replay_trace, before the caller released
// the allocator: on the sim the synchronisation of a destroyed stream failed as "invalid value"
// and the allocator fell back to a device synchronisation, but on an H200 it failed with
// cudaErrorDeviceUninitialized, and PyTorch's allocator crashed. Now the caller owns the streams
// (replay_streams, created before the allocator and so destroyed after it), or replay_trace
// empties the cache before destroying the streams it made itself. The sim driver now fails a call
// given a destroyed stream the way the real driver does (Note [Sim destroyed streams]), so the sim
// tests catch a regression.
replay_streams::~replay_streams() {
  for (const auto& [value, stream] : recorded_) (void)driver_.stream_destroy(device_, stream);
  for (const stream_t stream : holders_) (void)driver_.stream_destroy(device_, stream);
}

stream_t replay_streams::recorded(std::uint64_t value) {
  if (value == 0) return nullptr;
  if (const auto it = recorded_index_.find(value); it != recorded_index_.end()) return it->second;
  const stream_t stream = create();
  recorded_.emplace_back(value, stream);
  recorded_index_.emplace(value, stream);
  return stream;
}

stream_t replay_streams::take_holder() {
  if (idle_holders_.empty()) {
    holders_.push_back(create());
    return holders_.back();
  }
  const stream_t stream = idle_holders_.back();
  idle_holders_.pop_back();
  return stream;
}

stream_t replay_streams::create() {
  stream_t stream = nullptr;
  check(driver_, driver_.stream_create(device_, &stream), "replay: stream_create");
  return stream;
}

namespace {

replay_result replay_with(allocator& alloc, const std::vector<trace_event>& events, const replay_options& options,
                          replay_streams& streams);

}  // namespace

replay_result replay_trace(allocator& alloc, const std::vector<trace_event>& events, const replay_options& options) {
  if (options.streams != nullptr) {
    if (&options.streams->device_driver() != &alloc.device_driver()) {
      throw error("replay_trace: options.streams belongs to another driver than the allocator");
    }
    return replay_with(alloc, events, options, *options.streams);
  }
  driver& drv = alloc.device_driver();
  int device = 0;
  check(drv, drv.get_device(&device), "replay: get_device");
  replay_streams streams(drv, device);
  replay_result result;
  try {
    result = replay_with(alloc, events, options, streams);
  } catch (...) {
    try {
      alloc.empty_cache();  // best effort: the replay's error is the one to report
    } catch (...) {
    }
    throw;
  }
  alloc.empty_cache();  // Note [Replay stream lifetime]: nothing cached may outlive `streams`
  return result;
}

namespace {

replay_result replay_with(allocator& alloc, const std::vector<trace_event>& events, const replay_options& options,
                          replay_streams& streams) {
  const int device = streams.device();
  replay_result result;
  result.events = events.size();
  for (const trace_event& e : events) {
    if (e.action == trace_action::segment_alloc) {
      result.recorded_segment_bytes += e.size;
      ++result.recorded_segment_events;
    }
  }
  const std::vector<std::size_t> delayed = find_delayed_frees(events);
  sim_driver* sim = options.defer_delayed_frees ? nullptr : options.sim;  // holder streams only without deferral
  if (sim != nullptr) sim->set_eager(false);

  std::unordered_map<std::uint64_t, live_block> live;
  std::unordered_map<std::uint64_t, held_free> held;       // sim: address -> its holder
  std::map<std::size_t, stream_t> holder_by_last;           // sim: last completion of a holder in use -> it
  std::unordered_map<std::uint64_t, void*> deferred;       // real driver: address -> pointer
  std::size_t requested = 0;
  alloc.reset_peak_stats(device);
  const memory_stats before = alloc.stats(device);
  const std::int64_t mallocs_before = before.num_device_alloc;
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
        if (delayed[i] == not_delayed) {
          alloc.deallocate(it->second.ptr);
        } else if (sim != nullptr) {
          // Note [Shared holder streams]: the holder whose last free completes latest before this one.
          stream_t holder = nullptr;
          auto last = holder_by_last.lower_bound(delayed[i]);
          if (last != holder_by_last.begin()) {
            --last;
            holder = last->second;
            holder_by_last.erase(last);
          } else {
            holder = streams.take_holder();
          }
          alloc.record_stream(it->second.ptr, holder);
          alloc.deallocate(it->second.ptr);
          held[e.address] = held_free{holder, sim->submitted_work(holder), delayed[i]};
          holder_by_last.emplace(delayed[i], holder);
        } else {
          deferred[e.address] = it->second.ptr;
        }
        live.erase(it);
        break;
      }
      case trace_action::free_completed: {
        if (const auto h = held.find(e.address); h != held.end()) {
          sim->complete_to(h->second.holder, h->second.work);
          if (const auto last = holder_by_last.find(h->second.completes);
              last != holder_by_last.end() && last->second == h->second.holder) {
            holder_by_last.erase(last);  // its last free: the holder is idle
            streams.give_back_holder(h->second.holder);
          }
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
  result.cross_stream_reuses = stats.num_cross_stream_reuses - before.num_cross_stream_reuses;
  result.cross_stream_waits = stats.num_cross_stream_waits - before.num_cross_stream_waits;
  result.moved_pages = stats.num_moved_pages - before.num_moved_pages;
  result.fence_host_waits = stats.num_fence_host_waits - before.num_fence_host_waits;

  for (const auto& [address, block] : live) alloc.deallocate(block.ptr);
  for (const auto& [address, ptr] : deferred) alloc.deallocate(ptr);
  if (sim != nullptr) {
    sim->complete_all();
    sim->set_eager(sim->options().eager_completion);
  }
  if (options.progress) options.progress(events.size(), events.size());
  return result;
}

}  // namespace

}  // namespace streampool
