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

// Memory contents live in contents_map (Note [Sim memory contents], sim_contents.cpp).

int sim_driver::state::device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept {
  const std::uintptr_t end = addr + bytes;
  if (bytes == 0 || end < addr) return -1;
  if (const int device = mallocs_.device_of_range(addr, bytes); device >= 0) return device;
  if (const int device = pools_.device_of_range(addr, bytes); device >= 0) return device;
  return vmm_.device_of_range(addr, bytes);
}

namespace {

std::string range_text(std::uintptr_t addr, std::size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "[0x%llx, +%llu)", static_cast<unsigned long long>(addr),
                static_cast<unsigned long long>(bytes));
  return text;
}

}  // namespace

drv_result sim_driver::memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes,
                                    stream_t stream) noexcept {
  return state_->run(counters_, driver_call::memset_async, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) return bad;
    const std::uint32_t index = state_->streams_.find_stream(stream, device);
    if (index == sim::no_stream) {
      return state_->streams_.failure(stream);
    }
    if (state_->streams_[index].device != device) {
      return sim::fail(status::invalid_value);
    }
    if (bytes == 0) return drv_result{};
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    if (state_->device_of_range(addr, bytes) != device) return sim::fail(status::invalid_value);
    state_->contents_.write(addr, bytes, value);
    state_->streams_.submit(index);
    return drv_result{};
  });
}

drv_result sim_driver::check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected,
                                   stream_t stream, byte_check* out) noexcept {
  return state_->run(counters_, driver_call::check_bytes, [&] {
    *out = byte_check{};
    if (const drv_result bad = state_->check_device(device); !bad.ok()) return bad;
    const std::uint32_t index = state_->streams_.find_stream(stream, device);
    if (index == sim::no_stream) {
      return state_->streams_.failure(stream);
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
    state_->streams_.complete_to(index, state_->streams_.submit(index));
    state_->contents_.for_each_run(addr, bytes, [&](std::size_t offset, std::size_t length, std::uint8_t value) {
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
  for (std::size_t i = 0; i < bytes; ++i) state_->contents_.write(addr + i, 1, source[i]);
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
  state_->contents_.for_each_run(addr, bytes, [&](std::size_t, std::size_t length, std::uint8_t value) {
    out.insert(out.end(), length, value);
  });
  return out;
}

}  // namespace streampool
