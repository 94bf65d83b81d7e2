// sim_hazards.cpp — the simulated device's stream-ordering hazard checker (hazard_tracker). The
// test controls that drive it are sim_driver::use() (content_calls::use, a kernel touching memory
// on a stream) and wait_for() (stream_calls::wait_for, the test program ordering its own streams).
// See Note [Sim hazard checker].
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "driver/sim/sim_hazards.hpp"
#include "driver/sim/sim_streams.hpp"

namespace streampool {

// Note [Sim hazard checker]
// Memory last used by stream A may be used by stream B only when A's use is ordered before B's:
// A's work up to that use has completed (the GPU finished it: a synchronize, or complete() by the
// test playing the GPU), or B's new work item waits for it, directly or through a chain of
// stream_wait_event dependencies recorded before the item (B waits on C past the point where C
// waited on A, ...). Same-stream uses are ordered by the stream. This is the one rule an allocator
// must keep when it hands memory freed on one stream to another; the checker enforces it:
//  - sim_driver::use(stream, ptr, bytes) plays a kernel: it submits one work item to `stream` and
//    checks it against the last use of every byte of the range (a map of non-overlapping byte
//    ranges to (stream, item), for malloc'd, pool and mapped VMM memory alike). An unordered
//    earlier use is a violation; either way the new use becomes the range's last use. Every use
//    is treated as a write, so the test program itself must order its kernels on different
//    streams (event record + stream_wait_event, or sim_driver::wait_for) as a real program must.
//  - Memory that stops being memory must be idle: vmm_unmap of a range whose last uses have not
//    completed is a violation ("unmap while in use": the pages may be handed to anyone at once),
//    and so would be a cudaFree, except that cudaFree completes the device's work first. Both
//    forget the range's uses, so pages mapped again elsewhere start clean.
// Completion is the sim's model (Note [Sim completion model]): a stream's completed count, and
// its wait dependencies (a dependency is dropped only once its target completed, so the two
// together never lose an ordering). Violations are counted (sim_driver::hazard_violations) with a
// description of the first few; sim_options::abort_on_hazard prints the first one and aborts,
// which puts a debugger on the offending call. Uses on a capturing stream are refused: a
// captured kernel runs when the graph is launched, which the sim does not model.

// Note [Sim aliased mappings]
// One physical page may be mapped at two addresses at once (the native backend's page moves keep a
// page's old mapping until its last uses are done while a growth maps it elsewhere: Note [Moving
// pages still in use]). The address tracker cannot see that a use through the new mapping touches
// the bytes an unfinished use through the old one still does, so uses of mapped VMM pages are also
// tracked by physical address (vmm_space::for_each_physical: handle id x 2^40 + offset) in a
// second tracker, which reports an unordered earlier use made through a *different* mapping; one
// through the same mapping is the address tracker's (so no violation is counted twice). Handles
// are never reused, so the physical tracker needs no retiring.

namespace sim {
namespace {

std::string hex(std::uintptr_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string range_text(std::uintptr_t addr, std::size_t bytes) {
  return "[" + hex(addr) + ", +" + std::to_string(bytes) + ")";
}

std::string stream_name(const std::vector<stream_rec>& streams, std::uint32_t index) {
  const stream_rec& rec = streams[index];
  if (rec.builtin) return "the default stream #" + std::to_string(index) + " of device " + std::to_string(rec.device);
  return "stream " + hex(reinterpret_cast<std::uintptr_t>(make_handle(stream_handle_base, index)));
}

/// For each stream, the highest of its items that `stream`'s item `item` is ordered after through
/// wait dependencies (0: none); `stream` itself gets `item`.
std::vector<std::uint64_t> ordered_before(const std::vector<stream_rec>& streams, std::uint32_t stream,
                                          std::uint64_t item) {
  std::vector<std::uint64_t> bound(streams.size(), 0);
  bound[stream] = item;
  std::vector<std::uint32_t> todo{stream};
  while (!todo.empty()) {
    const std::uint32_t at = todo.back();
    todo.pop_back();
    for (const wait_dep& dep : streams[at].waits) {
      // Items of `at` numbered > dep.after wait for dep.stream up to dep.target.
      if (dep.after < bound[at] && dep.target > bound[dep.stream]) {
        bound[dep.stream] = dep.target;
        todo.push_back(dep.stream);
      }
    }
  }
  return bound;
}

}  // namespace

void hazard_tracker::split_at(std::uintptr_t at) {
  auto it = ranges_.upper_bound(at);
  if (it == ranges_.begin()) return;
  --it;
  if (it->first < at && it->second.end > at) {
    range_rec tail = it->second;
    it->second.end = at;
    ranges_.emplace_hint(std::next(it), at, tail);
  }
}

void hazard_tracker::report(std::string text) {
  ++violations_;
  if (abort_) {
    std::cerr << "sim hazard checker (sim_options::abort_on_hazard): " << text << std::endl;
    std::abort();
  }
  if (reports_.size() < kept_reports) reports_.push_back(std::move(text));
}

bool hazard_tracker::use(const std::vector<stream_rec>& streams, std::uint32_t stream, std::uint64_t item,
                         std::uintptr_t addr, std::size_t bytes, std::uintptr_t via) {
  const std::uintptr_t end = addr + bytes;
  split_at(addr);
  split_at(end);
  std::vector<std::uint64_t> bound;  // computed on the first use that is not plainly ordered
  bool ordered = true;
  auto it = ranges_.lower_bound(addr);
  for (; it != ranges_.end() && it->first < end; it = ranges_.erase(it)) {
    const range_rec& last = it->second;
    if (!ordered || last.stream == stream || streams[last.stream].completed >= last.item) continue;
    if (via != 0 && last.via == via) continue;  // the same mapping: the address tracker's case
    if (bound.empty()) bound = ordered_before(streams, stream, item);
    if (bound[last.stream] >= last.item) continue;
    ordered = false;
    report("use of " + range_text(addr, bytes) + " on " + stream_name(streams, stream) + " (its work item " +
           std::to_string(item) + ") is not ordered after the use of " +
           range_text(it->first, last.end - it->first) + " by " + stream_name(streams, last.stream) +
           " at its item " + std::to_string(last.item) + ": that stream has completed " +
           std::to_string(streams[last.stream].completed) + " items, and the new item waits for it only up to item " +
           std::to_string(bound[last.stream]) + " (no event wait orders it after that use)");
  }
  ranges_.emplace_hint(it, addr, range_rec{end, stream, item, via});
  return ordered;
}

void hazard_tracker::retire(const std::vector<stream_rec>& streams, std::uintptr_t addr, std::size_t bytes,
                            const char* what) {
  const std::uintptr_t end = addr + bytes;
  split_at(addr);
  split_at(end);
  bool reported = false;
  for (auto it = ranges_.lower_bound(addr); it != ranges_.end() && it->first < end; it = ranges_.erase(it)) {
    const range_rec& last = it->second;
    if (reported || streams[last.stream].completed >= last.item) continue;
    reported = true;
    report(std::string(what) + " of " + range_text(addr, bytes) + " while in use: " +
           stream_name(streams, last.stream) + " used " + range_text(it->first, last.end - it->first) +
           " in its work item " + std::to_string(last.item) + " and has completed only " +
           std::to_string(streams[last.stream].completed) + " (wait for that work before giving the memory back)");
  }
}

void hazard_tracker::clear_violations() noexcept {
  violations_ = 0;
  reports_.clear();
}

}  // namespace sim

}  // namespace streampool
