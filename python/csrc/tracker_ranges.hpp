// tracker_ranges.hpp — what attachAllocatorTraceTracker's trackers are told about streampool's
// segments: the segment events of the allocator (set_segment_listener) turned into c10's
// SEGMENT_ALLOC / SEGMENT_FREE pairs over the memory that is mapped, one pair per range, so that a
// tracker that registers segments (ProcessGroupNCCL's NCCL buffer registration) registers every
// mapped range of an expandable segment too (Note [Mapped ranges as segments]). No torch here:
// torch_allocator_tracker.cpp delivers the events; tests/unit/torch_ext tests this part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include <streampool/graph.hpp>
#include <streampool/stats.hpp>

namespace streampool::torch_ext {

/// One event for the trackers: a range that became mapped (registered = true: SEGMENT_ALLOC) or
/// stopped being mapped (false: SEGMENT_FREE, with the address and size of its SEGMENT_ALLOC).
struct tracker_event {
  bool registered = true;
  int device = 0;
  std::uintptr_t address = 0;
  std::size_t size = 0;
  stream_t stream = nullptr;
  mempool_id pool;

  friend bool operator==(const tracker_event&, const tracker_event&) = default;
};

class tracker_ranges {
 public:
  /// Until seed(), events are kept (not translated): the trackers are attached while the allocator
  /// runs, and the listener is set before the snapshot that seed() reads is taken.
  /// seed(): the mapped ranges that exist now (the snapshot's segments: for an expandable segment,
  /// one per contiguous mapped range), which the trackers are not told of (c10 tells a tracker only
  /// of what happens after it is attached; ProcessGroupNCCL registers what exists from the
  /// snapshot itself). Returns the events of what was kept, translated so that what the snapshot
  /// already shows is not told twice. A second seed() is ignored (returns nothing).
  std::vector<tracker_event> seed(const std::vector<segment_info>& segments);

  /// Translates one segment event of the allocator (other actions are ignored) into the events
  /// for the trackers, appended to `out`: segment_alloc / segment_map add the part of their range
  /// not already known; segment_free / segment_unmap end every known range they touch (FREE, at
  /// that range's address and size) and start again the parts of those ranges left mapped (ALLOC).
  void translate(const trace_entry& e, std::vector<tracker_event>& out);

  [[nodiscard]] bool seeded() const noexcept { return seeded_; }
  /// The ranges the trackers were told of (and not told the end of), by address.
  [[nodiscard]] std::vector<tracker_event> ranges() const;

 private:
  struct range {
    std::size_t size;
    int device;
    stream_t stream;
    mempool_id pool;
    bool mapped;  ///< a range of an expandable segment (merges with its neighbours), not a whole segment
    [[nodiscard]] bool joins(int d, stream_t s, mempool_id p) const noexcept {
      return mapped && device == d && stream == s && pool == p;
    }
  };
  /// Adds the parts of [lo, hi) not known; `merge`: a mapped part joins the mapped ranges of the
  /// same device, stream and pool it touches (Note [Mapped ranges as segments]).
  void add(int device, std::uintptr_t lo, std::uintptr_t hi, stream_t stream, mempool_id pool, bool mapped,
           bool merge, std::vector<tracker_event>& out);
  void remove(std::uintptr_t lo, std::uintptr_t hi, std::vector<tracker_event>& out);

  bool seeded_ = false;
  std::vector<trace_entry> kept_;
  std::map<std::uintptr_t, range> ranges_;  ///< by start; never overlapping
};

}  // namespace streampool::torch_ext
