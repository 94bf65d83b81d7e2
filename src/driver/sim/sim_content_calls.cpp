// sim_content_calls.cpp — the simulated device's memory contents and kernel uses (content_calls):
// memset_async and check_bytes, the test controls write_bytes / read_bytes (the test playing a
// kernel that writes past an allocation or reads a freed block) and use (a kernel touching memory
// on a stream). See Note [Sim memory contents] and Note [Sim hazard checker].
#include <cstdio>
#include <string>

#include "driver/sim/sim_content_calls.hpp"
#include "streampool/errors.hpp"

namespace streampool::sim {

namespace {

std::string range_text(std::uintptr_t addr, std::size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "[0x%llx, +%llu)", static_cast<unsigned long long>(addr),
                static_cast<unsigned long long>(bytes));
  return text;
}

}  // namespace

drv_result content_calls::stream_of(int device, stream_t stream, std::uint32_t& index) const {
  if (const drv_result bad = device_.check_device(device); !bad.ok()) return bad;
  index = device_.streams_.find_stream(stream, device);
  if (index == no_stream) return device_.streams_.failure(stream);
  if (device_.streams_[index].device != device) return fail(status::invalid_value);
  return drv_result{};
}

drv_result content_calls::memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes,
                                       stream_t stream) {
  std::uint32_t index = no_stream;
  if (const drv_result bad = stream_of(device, stream, index); !bad.ok()) return bad;
  if (bytes == 0) return drv_result{};
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (device_.device_of_range(addr, bytes) != device) return fail(status::invalid_value);
  device_.contents_.write(addr, bytes, value);
  device_.streams_.submit(index);
  return drv_result{};
}

drv_result content_calls::check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected,
                                      stream_t stream, byte_check* out) {
  *out = byte_check{};
  std::uint32_t index = no_stream;
  if (const drv_result bad = stream_of(device, stream, index); !bad.ok()) return bad;
  if (device_.streams_[index].capture == capture_status::active) {
    return fail(status::illegal_in_capture);
  }
  if (bytes == 0) return drv_result{};
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (device_.device_of_range(addr, bytes) != device) return fail(status::invalid_value);
  // The check runs after the stream's prior work, and the host waits for it.
  device_.streams_.complete_to(index, device_.streams_.submit(index));
  device_.contents_.for_each_run(addr, bytes, [&](std::size_t offset, std::size_t length, std::uint8_t value,
                                                   const std::uint8_t* literal) {
    for (std::size_t i = 0; i < (literal ? length : 1); ++i) {  // a literal run byte by byte, else once
      const std::uint8_t got = literal ? literal[i] : value;
      if (got == expected) continue;
      if (out->mismatches == 0) {
        out->first_offset = offset + i;
        out->first_value = got;
      }
      out->mismatches += literal ? 1 : length;
    }
  });
  return drv_result{};
}

void content_calls::write_bytes(void* ptr, const void* data, std::size_t bytes) {
  if (bytes == 0) return;
  const std::lock_guard lock(device_.mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (device_.device_of_range(addr, bytes) < 0) {
    throw error("sim_driver::write_bytes: " + range_text(addr, bytes) + " is not device memory of this sim");
  }
  device_.contents_.write(addr, static_cast<const std::uint8_t*>(data), bytes);  // Note [Sim literal runs]
}

std::vector<std::uint8_t> content_calls::read_bytes(const void* ptr, std::size_t bytes) const {
  if (bytes == 0) return {};
  const std::lock_guard lock(device_.mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (device_.device_of_range(addr, bytes) < 0) {
    throw error("sim_driver::read_bytes: " + range_text(addr, bytes) + " is not device memory of this sim");
  }
  std::vector<std::uint8_t> out;
  out.reserve(bytes);
  device_.contents_.for_each_run(addr, bytes, [&](std::size_t, std::size_t length, std::uint8_t value,
                                                   const std::uint8_t* literal) {
    if (literal != nullptr) {
      out.insert(out.end(), literal, literal + length);
    } else {
      out.insert(out.end(), length, value);
    }
  });
  return out;
}

bool content_calls::use(stream_t stream, const void* ptr, std::size_t bytes) {
  const std::lock_guard lock(device_.mutex_);
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) throw error("sim_driver::use: unknown or destroyed stream");
  if (device_.streams_[index].capture != capture_status::none) {
    throw error("sim_driver::use: the stream is capturing; the sim does not model captured kernels (Note [Sim hazard "
                "checker])");
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (bytes == 0 || device_.device_of_range(addr, bytes) < 0) {
    throw error("sim_driver::use: " + range_text(addr, bytes) +
                " is not device memory of this sim (malloc'd, a pool's, or mapped VMM pages), or is empty");
  }
  const std::uint64_t item = device_.streams_.submit(index);
  bool ordered = device_.hazards_.use(device_.streams_.records(), index, item, addr, bytes);
  device_.vmm_.for_each_physical(addr, bytes, [&](std::uintptr_t physical, std::size_t length, std::uintptr_t via) {
    ordered &= device_.physical_hazards_.use(device_.streams_.records(), index, item, physical, length, via);
  });  // Note [Sim aliased mappings]
  return ordered;
}

}  // namespace streampool::sim
