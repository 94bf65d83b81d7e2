// segment_counters.hpp — the device-wide statistics of what one device holds from the driver
// (docs/pytorch-compatibility.md §2.14: segment, reserved_bytes, oversize_segments, num_device_alloc/free), exact, changed
// only by the segment source (and its expandable segments) under the device mutex.
#pragma once

#include <cstddef>
#include <cstdint>

#include "streampool/stats.hpp"

namespace streampool::native {

struct segment_counters {
  stat_array segment{};
  stat_array reserved_bytes{};
  stat oversize_segments{};
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;

  /// Reserved bytes of "all" and of the pool kind go up (`bytes` > 0) or down.
  void change_reserved(bool small, std::int64_t bytes) noexcept {
    for (const std::size_t i : {std::size_t{0}, std::size_t{small ? 1u : 2u}}) {
      if (bytes >= 0) reserved_bytes[i].increase(bytes);
      else reserved_bytes[i].decrease(-bytes);
    }
  }
  [[nodiscard]] std::size_t reserved() const noexcept {
    return static_cast<std::size_t>(reserved_bytes[0].current);
  }
  void copy_to(memory_stats& s) const noexcept {
    s.segment = segment;
    s.reserved_bytes = reserved_bytes;
    s.oversize_segments = oversize_segments;
    s.num_device_alloc = num_device_alloc;
    s.num_device_free = num_device_free;
  }
  void reset_peaks() noexcept {
    for (stat* s : {&segment[0], &segment[1], &segment[2], &reserved_bytes[0], &reserved_bytes[1],
                    &reserved_bytes[2], &oversize_segments}) {
      s->reset_peak();
    }
  }
  void reset_accumulated() noexcept {
    for (stat* s : {&segment[0], &segment[1], &segment[2], &reserved_bytes[0], &reserved_bytes[1],
                    &reserved_bytes[2], &oversize_segments}) {
      s->reset_accumulated();
    }
    num_device_alloc = num_device_free = 0;
  }
};

}  // namespace streampool::native
