// sim_check_ops.cpp — the simulated device's memory contents, for checking mode (src/check):
// memset_async and check_bytes, the test controls write_bytes / read_bytes (the test playing a
// kernel that writes past an allocation or reads a freed block), and the range lookup they
// share. See Note [Sim memory contents].
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>

#include "driver/sim_state.hpp"
#include "streampool/errors.hpp"

namespace streampool {

// Note [Sim memory contents]
// The sim has no kernels, so contents are only what memset_async and write_bytes put there:
// `contents_` maps the start of each run of equal bytes to its end and value, runs never
// overlap, and neighbours of one value merge, so poisoning a block leaves one run however many
// canaries it held. Bytes never written read as 0. Writes take effect at once, at submission:
// nothing but the test reads them, and the test's own writes are immediate too, so stream order
// cannot be observed (memset_async still submits a work item, so events and completion behave
// as with a real memset). Contents outlive frees, as on a GPU: memory reused by a pool or a
// cache shows the old bytes until someone writes it. cudaFree gives the pages back, so free
// resets the range to zeros: a later malloc at the same address (the sim reuses malloc
// addresses as the driver does) reads 0, as never-written memory does. check_bytes
// waits as the real driver does: the stream's work up to the check completes.

int sim_driver::state::device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept {
  const std::uintptr_t end = addr + bytes;
  if (bytes == 0 || end < addr) return -1;
  for (const auto& [base, rec] : mallocs_) {
    if (addr >= base && end <= base + rec.size) return rec.device;
  }
  for (const auto& pool : pools_) {
    auto chunk = pool->chunks.upper_bound(addr);
    if (chunk == pool->chunks.begin()) continue;
    --chunk;
    if (end <= chunk->first + chunk->second->size) return pool->device;
  }
  auto reservation = reservations_.upper_bound(addr);
  if (reservation == reservations_.begin()) return -1;
  --reservation;
  const auto& mappings = reservation->second.mappings;
  auto mapping = mappings.upper_bound(addr);
  if (mapping == mappings.begin()) return -1;
  --mapping;
  // The mappings from here on must cover [addr, end) without a gap.
  std::uintptr_t covered = mapping->first;
  for (; mapping != mappings.end() && mapping->first == covered && covered < end; ++mapping) {
    covered += mapping->second.size;
  }
  return covered >= end && covered > addr ? reservation->second.device : -1;
}

void sim_driver::state::write_run(std::uintptr_t addr, std::size_t bytes, std::uint8_t value) {
  if (bytes == 0) return;
  const std::uintptr_t end = addr + bytes;
  // A run that starts before addr and reaches into the range keeps its head (and its tail, if
  // it also reaches past the range).
  auto it = contents_.lower_bound(addr);
  if (it != contents_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > addr) {
      const sim::byte_run old = before->second;
      before->second.end = addr;
      if (old.end > end) contents_.emplace(end, sim::byte_run{old.end, old.value});
    }
  }
  // Runs that start inside the range go, keeping a tail that reaches past it.
  it = contents_.lower_bound(addr);
  while (it != contents_.end() && it->first < end) {
    if (it->second.end > end) contents_.emplace(end, sim::byte_run{it->second.end, it->second.value});
    it = contents_.erase(it);
  }
  auto placed = contents_.emplace(addr, sim::byte_run{end, value}).first;
  if (placed != contents_.begin()) {
    auto before = std::prev(placed);
    if (before->second.end == addr && before->second.value == value) {
      before->second.end = end;
      contents_.erase(placed);
      placed = before;
    }
  }
  auto after = std::next(placed);
  if (after != contents_.end() && after->first == end && after->second.value == value) {
    placed->second.end = after->second.end;
    contents_.erase(after);
  }
}

std::uint8_t sim_driver::state::read_byte(std::uintptr_t addr) const noexcept {
  auto it = contents_.upper_bound(addr);
  if (it == contents_.begin()) return 0;
  --it;
  return it->second.end > addr ? it->second.value : 0;
}

namespace {

std::string range_text(std::uintptr_t addr, std::size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "[0x%llx, +%llu)", static_cast<unsigned long long>(addr),
                static_cast<unsigned long long>(bytes));
  return text;
}

/// Calls fn(offset, length, value) for the runs and unwritten gaps (value 0) covering
/// [addr, addr + bytes), in address order.
template <class Fn>
void for_each_run(const std::map<std::uintptr_t, sim::byte_run>& contents, std::uintptr_t addr, std::size_t bytes,
                  Fn&& fn) {
  const std::uintptr_t end = addr + bytes;
  std::uintptr_t at = addr;
  auto it = contents.upper_bound(addr);
  if (it != contents.begin() && std::prev(it)->second.end > addr) --it;
  for (; it != contents.end() && it->first < end; ++it) {
    if (it->first > at) fn(at - addr, it->first - at, std::uint8_t{0});
    const std::uintptr_t from = std::max(at, it->first);
    const std::uintptr_t to = std::min(end, it->second.end);
    fn(from - addr, to - from, it->second.value);
    at = to;
  }
  if (at < end) fn(at - addr, end - at, std::uint8_t{0});
}

}  // namespace

drv_result sim_driver::memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes,
                                    stream_t stream) noexcept {
  return state_->run(counters_, driver_call::memset_async, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) return bad;
    const std::uint32_t index = state_->find_stream(stream, device);
    if (index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    if (state_->streams_[index].device != device) {
      return sim::fail(status::invalid_value);
    }
    if (bytes == 0) return drv_result{};
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    if (state_->device_of_range(addr, bytes) != device) return sim::fail(status::invalid_value);
    state_->write_run(addr, bytes, value);
    state_->submit(index);
    return drv_result{};
  });
}

drv_result sim_driver::check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected,
                                   stream_t stream, byte_check* out) noexcept {
  return state_->run(counters_, driver_call::check_bytes, [&] {
    *out = byte_check{};
    if (const drv_result bad = state_->check_device(device); !bad.ok()) return bad;
    const std::uint32_t index = state_->find_stream(stream, device);
    if (index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    if (state_->streams_[index].device != device) {
      return sim::fail(status::invalid_value);
    }
    if (state_->streams_[index].capture == capture_status::active) {
      return sim::fail(status::illegal_in_capture);
    }
    if (bytes == 0) return drv_result{};
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    if (state_->device_of_range(addr, bytes) != device) return sim::fail(status::invalid_value);
    // The check runs after the stream's prior work, and the host waits for it.
    state_->complete_to(index, state_->submit(index));
    for_each_run(state_->contents_, addr, bytes, [&](std::size_t offset, std::size_t length, std::uint8_t value) {
      if (value == expected) return;
      if (out->mismatches == 0) {
        out->first_offset = offset;
        out->first_value = value;
      }
      out->mismatches += length;
    });
    return drv_result{};
  });
}

void sim_driver::write_bytes(void* ptr, const void* data, std::size_t bytes) {
  if (bytes == 0) return;
  const std::lock_guard lock(state_->mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (state_->device_of_range(addr, bytes) < 0) {
    throw error("sim_driver::write_bytes: " + range_text(addr, bytes) + " is not device memory of this sim");
  }
  const auto* source = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) state_->write_run(addr + i, 1, source[i]);
}

std::vector<std::uint8_t> sim_driver::read_bytes(const void* ptr, std::size_t bytes) const {
  if (bytes == 0) return {};
  const std::lock_guard lock(state_->mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (state_->device_of_range(addr, bytes) < 0) {
    throw error("sim_driver::read_bytes: " + range_text(addr, bytes) + " is not device memory of this sim");
  }
  std::vector<std::uint8_t> out;
  out.reserve(bytes);
  for_each_run(state_->contents_, addr, bytes, [&](std::size_t, std::size_t length, std::uint8_t value) {
    out.insert(out.end(), length, value);
  });
  return out;
}

}  // namespace streampool
