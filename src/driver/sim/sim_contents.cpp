// sim_contents.cpp — the simulated device's memory contents (contents_map): runs of equal bytes,
// split and merged as memset_async / write_bytes overwrite them. See Note [Sim memory contents].
#include "driver/sim/sim_contents.hpp"

namespace streampool::sim {

// Note [Sim memory contents]
// The sim has no kernels, so contents are only what memset_async and write_bytes put there:
// `contents_map` maps the start of each run of equal bytes to its end and value, runs never
// overlap, and neighbours of one value merge, so poisoning a block leaves one run however many
// canaries it held. Bytes never written read as 0. Writes take effect at once, at submission:
// nothing but the test reads them, and the test's own writes are immediate too, so stream order
// cannot be observed (memset_async still submits a work item, so events and completion behave
// as with a real memset). Contents outlive frees, as on a GPU: memory reused by a pool or a
// cache shows the old bytes until someone writes it. cudaFree gives the pages back, so free
// resets the range to zeros: a later malloc at the same address (the sim reuses malloc
// addresses as the driver does) reads 0, as never-written memory does. vmm_unmap loses what the
// range held: it reads unmapped_byte (0xDD) once mapped again, until written, so a pool that
// slept with discard is seen to have lost its bytes and one that offloaded to have them back (the
// copies move bytes: Note [Sim copies] in sim_memory_calls.cpp). check_bytes
// waits as the real driver does: the stream's work up to the check completes.

void contents_map::write(std::uintptr_t addr, std::size_t bytes, std::uint8_t value) {
  if (bytes == 0) return;
  const std::uintptr_t end = addr + bytes;
  // A run that starts before addr and reaches into the range keeps its head (and its tail, if
  // it also reaches past the range).
  auto it = runs_.lower_bound(addr);
  if (it != runs_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > addr) {
      const byte_run old = before->second;
      before->second.end = addr;
      if (old.end > end) runs_.emplace(end, byte_run{old.end, old.value});
    }
  }
  // Runs that start inside the range go, keeping a tail that reaches past it.
  it = runs_.lower_bound(addr);
  while (it != runs_.end() && it->first < end) {
    if (it->second.end > end) runs_.emplace(end, byte_run{it->second.end, it->second.value});
    it = runs_.erase(it);
  }
  auto placed = runs_.emplace(addr, byte_run{end, value}).first;
  if (placed != runs_.begin()) {
    auto before = std::prev(placed);
    if (before->second.end == addr && before->second.value == value) {
      before->second.end = end;
      runs_.erase(placed);
      placed = before;
    }
  }
  auto after = std::next(placed);
  if (after != runs_.end() && after->first == end && after->second.value == value) {
    placed->second.end = after->second.end;
    runs_.erase(after);
  }
}

std::uint8_t contents_map::read(std::uintptr_t addr) const noexcept {
  auto it = runs_.upper_bound(addr);
  if (it == runs_.begin()) return 0;
  --it;
  return it->second.end > addr ? it->second.value : 0;
}

}  // namespace streampool::sim
