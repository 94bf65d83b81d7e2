// stream_queues.hpp — one FIFO per stream of entries that wait for work queued on that stream
// (events recorded at a free), drained from the front: the native backend's record_stream events
// (native/event_queues.hpp, docs/pytorch-compatibility.md §2.9) and the pinned host allocator's
// copy events (host/stream_events.hpp) are both this. A stream's entries complete in order, so
// draining a queue stops at its first entry that is not ready. Not thread-safe: the owner's lock.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/ring_buffer.hpp"

namespace streampool::core {

/// FIFOs of `Entry` keyed by `Key` (a stream, or a stream and a device); few streams: linear search.
template <typename Key, typename Entry>
class stream_queues {
 public:
  /// The queue of `key`, created empty on first use. @throws bad_alloc (nothing changed)
  ring_buffer<Entry>& queue_for(const Key& key) {
    for (auto& q : queues_) {
      if (q.first == key) return q.second;
    }
    return queues_.emplace_back(key, ring_buffer<Entry>{}).second;
  }
  /// For each queue, from the front: while `ready(entry)` is true the entry is popped and then
  /// handed to `done(entry)`; the first entry not ready ends that queue's turn. What `ready`
  /// throws leaves its entry queued.
  template <typename Ready, typename Done>
  void drain(Ready&& ready, Done&& done) {
    for (auto& q : queues_) {
      ring_buffer<Entry>& items = q.second;
      while (!items.empty() && ready(items.front())) {
        const Entry entry = items.front();
        items.pop_front();
        done(entry);
      }
    }
  }
  /// Hands every entry to `f`, oldest first per queue, and empties every queue.
  template <typename F>
  void take_all(F&& f) {
    for (auto& q : queues_) {
      ring_buffer<Entry>& items = q.second;
      while (!items.empty()) {
        const Entry entry = items.front();
        items.pop_front();
        f(entry);
      }
    }
  }
  /// True when no queue holds an entry.
  [[nodiscard]] bool empty() const noexcept {
    for (const auto& q : queues_) {
      if (!q.second.empty()) return false;
    }
    return true;
  }

 private:
  std::vector<std::pair<Key, ring_buffer<Entry>>> queues_;
};

}  // namespace streampool::core
