// sim_contents.cpp — the simulated device's memory contents (contents_map): runs of equal bytes
// and literal runs, split and merged as memset_async, write_bytes and copies overwrite them.
// See Note [Sim memory contents].
#include "driver/sim/sim_contents.hpp"

#include <cstring>

namespace streampool::sim {

// Note [Sim memory contents]
// The sim has no kernels, so contents are only what memset_async, write_bytes and copies put
// there: `contents_map` maps the start of each run to its end and value, runs never overlap,
// and neighbours of one value merge, so poisoning a block leaves one run however many canaries
// it held. Bytes never written read as 0. Writes take effect at once, at submission: nothing
// but the test reads them, and the test's own writes are immediate too, so stream order cannot
// be observed (memset_async still submits a work item, so events and completion behave as with
// a real memset). Contents outlive frees, as on a GPU: memory reused by a pool or a cache shows
// the old bytes until someone writes it. cudaFree gives the pages back, so free resets the range
// to zeros: a later malloc at the same address (the sim reuses malloc addresses as the driver
// does) reads 0, as never-written memory does. vmm_unmap loses what the range held: it reads
// unmapped_byte (0xDD) once mapped again, until written, so a pool that slept with discard is
// seen to have lost its bytes and one that offloaded to have them back (the copies move bytes:
// Note [Sim copies] in sim_memory_calls.cpp). check_bytes waits as the real driver does: the
// stream's work up to the check completes.
//
// Note [Sim literal runs]
// Bytes written from a buffer (write_bytes, a host-to-device copy) that are not all equal are
// kept as one literal run: a shared copy of the buffer and an offset into it. Splitting them
// into runs of equal bytes, as this map once did, made a 1 MiB copy of varied host bytes a
// million map nodes: the pinned copy loop in the harness's sim tests ran 300 ms per iteration
// and CI's perf.latency_pinned timed out. A literal run splits like any other (a trimmed tail
// keeps the buffer and moves its offset); it never merges, as its bytes are not one value.

void contents_map::clear(std::uintptr_t addr, std::uintptr_t end) {
  // A run that starts before addr and reaches into the range keeps its head (and its tail, if
  // it also reaches past the range).
  auto it = runs_.lower_bound(addr);
  if (it != runs_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > addr) {
      const byte_run old = before->second;
      before->second.end = addr;
      if (old.end > end) runs_.emplace(end, old.tail_from(before->first, end));
    }
  }
  // Runs that start inside the range go, keeping a tail that reaches past it.
  it = runs_.lower_bound(addr);
  while (it != runs_.end() && it->first < end) {
    if (it->second.end > end) runs_.emplace(end, it->second.tail_from(it->first, end));
    it = runs_.erase(it);
  }
}

void contents_map::place(std::uintptr_t addr, byte_run run) {
  const std::uintptr_t end = run.end;
  const bool mergeable = !run.data;
  auto placed = runs_.emplace(addr, std::move(run)).first;
  if (!mergeable) return;
  const std::uint8_t value = placed->second.value;
  if (placed != runs_.begin()) {
    auto before = std::prev(placed);
    if (before->second.end == addr && !before->second.data && before->second.value == value) {
      before->second.end = end;
      runs_.erase(placed);
      placed = before;
    }
  }
  auto after = std::next(placed);
  if (after != runs_.end() && after->first == end && !after->second.data && after->second.value == value) {
    placed->second.end = after->second.end;
    runs_.erase(after);
  }
}

void contents_map::write(std::uintptr_t addr, std::size_t bytes, std::uint8_t value) {
  if (bytes == 0) return;
  clear(addr, addr + bytes);
  place(addr, byte_run{addr + bytes, value, nullptr, 0});
}

void contents_map::write(std::uintptr_t addr, const std::uint8_t* data, std::size_t bytes) {
  if (bytes == 0) return;
  if (bytes == 1 || std::memcmp(data, data + 1, bytes - 1) == 0) {  // all equal (libc's speed, under sanitizers too)
    write(addr, bytes, data[0]);
    return;
  }
  clear(addr, addr + bytes);
  place(addr, byte_run{addr + bytes, 0, std::make_shared<const std::vector<std::uint8_t>>(data, data + bytes), 0});
}

std::uint8_t contents_map::read(std::uintptr_t addr) const noexcept {
  auto it = runs_.upper_bound(addr);
  if (it == runs_.begin()) return 0;
  --it;
  if (it->second.end <= addr) return 0;
  const std::uint8_t* literal = it->second.literal_at(it->first, addr);
  return literal ? *literal : it->second.value;
}

}  // namespace streampool::sim
