// tracker_ranges.cpp — the ranges the trace trackers are told of (tracker_ranges.hpp): adding a
// mapped range, ending the ranges an unmap or free touches, and the seeding from a snapshot.
#include "tracker_ranges.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace streampool::torch_ext {

// Note [Mapped ranges as segments]
// c10's trace trackers (attachAllocatorTraceTracker) get TraceEntry objects; PyTorch's allocator
// emits SEGMENT_ALLOC / SEGMENT_FREE for a cudaMalloc'd segment and SEGMENT_MAP / SEGMENT_UNMAP
// for a range of an expandable segment. The one tracker PyTorch itself attaches,
// ProcessGroupNCCL's with TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1, acts on SEGMENT_ALLOC
// (ncclCommRegister of addr/size) and SEGMENT_FREE (ncclCommDeregister of addr) only, so
// PyTorch's expandable memory is never registered through it (ProcessGroupNCCL turns the hook off
// when PyTorch's own config has expandable segments). streampool tells its trackers of mapped
// memory instead, range by range as the snapshot shows it (one segment per contiguous mapped run
// of an expandable segment): a newly mapped range is a SEGMENT_ALLOC; one that touches mapped
// ranges of the same device, stream and pool joins them (their SEGMENT_FREEs, then the ALLOC of
// the run); and when part of a run stops being mapped the tracker gets the SEGMENT_FREE of the
// whole run (the address it registered) followed by a SEGMENT_ALLOC of each part still mapped. So
// every ALLOC is matched by one FREE at the same address and size, a tracker that registers
// segments registers exactly the memory that is mapped, the ranges it knows are the snapshot's
// segments (what ProcessGroupNCCL registers when it creates a communicator, so a later FREE names
// an address it registered, either way), and for ordinary segments the events are c10's own (one
// ALLOC, one FREE; adjacent cudaMalloc segments never join). The cost is a re-registration of a
// run when it grows or shrinks; growth maps several pages at a time and is rare in a steady
// training loop. (Two reservations whose mapped ends touch in address space would join here while
// the snapshot shows them apart; streampool's reservations are far larger than what it maps.)
//
// The trackers are attached while the allocator runs. The listener is set first and its events
// kept; then a snapshot is taken (its expandable segments are one per contiguous mapped range, so
// its segments are exactly the mapped memory) and seed() starts from it. Kept events are then
// translated against that start: a map the snapshot already shows adds nothing, an unmap or free
// it already shows the end of touches nothing, so an event from just before the snapshot is not
// told twice and one from just after is not lost.

std::vector<tracker_event> tracker_ranges::seed(const std::vector<segment_info>& segments) {
  std::vector<tracker_event> out;
  if (seeded_) return out;
  seeded_ = true;
  std::vector<tracker_event> silent;
  for (const segment_info& s : segments) {
    if (s.total_size == 0) continue;
    add(s.device, s.address, s.address + s.total_size, s.stream, s.pool, s.is_expandable, /*merge=*/false, silent);
  }
  std::vector<trace_entry> kept;
  kept.swap(kept_);
  for (const trace_entry& e : kept) translate(e, out);
  return out;
}

void tracker_ranges::translate(const trace_entry& e, std::vector<tracker_event>& out) {
  if (e.size == 0) return;
  switch (e.action) {
    case trace_action::segment_alloc:
    case trace_action::segment_map:
    case trace_action::segment_free:
    case trace_action::segment_unmap: break;
    default: return;
  }
  if (!seeded_) {
    kept_.push_back(e);
    return;
  }
  if (e.action == trace_action::segment_alloc || e.action == trace_action::segment_map) {
    const bool mapped = e.action == trace_action::segment_map;
    add(e.device, e.address, e.address + e.size, e.stream, e.pool, mapped, /*merge=*/mapped, out);
  } else {
    remove(e.address, e.address + e.size, out);
  }
}

std::vector<tracker_event> tracker_ranges::ranges() const {
  std::vector<tracker_event> out;
  out.reserve(ranges_.size());
  for (const auto& [start, r] : ranges_) out.push_back({true, r.device, start, r.size, r.stream, r.pool});
  return out;
}

void tracker_ranges::add(int device, std::uintptr_t lo, std::uintptr_t hi, stream_t stream, mempool_id pool,
                         bool mapped, bool merge, std::vector<tracker_event>& out) {
  // The parts of [lo, hi) no known range covers.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> gaps;
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin()) --it;
  std::uintptr_t cursor = lo;
  for (; it != ranges_.end() && it->first < hi; ++it) {
    const std::uintptr_t start = it->first;
    const std::uintptr_t end = start + it->second.size;
    if (end <= cursor) continue;
    if (start > cursor) gaps.emplace_back(cursor, start);
    cursor = std::max(cursor, end);
  }
  if (cursor < hi) gaps.emplace_back(cursor, hi);
  for (const auto& [a, b] : gaps) {
    std::uintptr_t start = a;
    std::uintptr_t end = b;
    if (merge) {
      auto right = ranges_.find(b);
      auto after = ranges_.lower_bound(a);
      if (after != ranges_.begin()) {
        auto left = std::prev(after);
        if (left->first + left->second.size == a && left->second.joins(device, stream, pool)) {
          out.push_back({false, device, left->first, left->second.size, stream, pool});
          start = left->first;
          ranges_.erase(left);
        }
      }
      if (right != ranges_.end() && right->second.joins(device, stream, pool)) {
        out.push_back({false, device, right->first, right->second.size, stream, pool});
        end = b + right->second.size;
        ranges_.erase(right);
      }
    }
    ranges_.emplace(start, range{end - start, device, stream, pool, mapped});
    out.push_back({true, device, start, end - start, stream, pool});
  }
}

void tracker_ranges::remove(std::uintptr_t lo, std::uintptr_t hi, std::vector<tracker_event>& out) {
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin() && std::prev(it)->first + std::prev(it)->second.size > lo) --it;
  std::vector<std::pair<std::uintptr_t, range>> touched;
  while (it != ranges_.end() && it->first < hi) {
    if (it->first + it->second.size > lo) {
      touched.emplace_back(*it);
      it = ranges_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [start, r] : touched) {
    const std::uintptr_t end = start + r.size;
    out.push_back({false, r.device, start, r.size, r.stream, r.pool});
    if (start < lo) {
      ranges_.emplace(start, range{lo - start, r.device, r.stream, r.pool, r.mapped});
      out.push_back({true, r.device, start, lo - start, r.stream, r.pool});
    }
    if (end > hi) {
      ranges_.emplace(hi, range{end - hi, r.device, r.stream, r.pool, r.mapped});
      out.push_back({true, r.device, hi, end - hi, r.stream, r.pool});
    }
  }
}

}  // namespace streampool::torch_ext
