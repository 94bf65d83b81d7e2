// capture_filter.hpp — the one rule by which a stream filter routes a capture's allocations to its
// private pool: the allocating stream takes part in that capture sequence (its driver capture id),
// side streams joined through events included. capture_scope's filter (src/graph) and the C API's
// filter of the captures nobody announced (src/c_api) both ask this (Note [Capture filter] in
// src/graph/capture_scope.cpp).
#pragma once

#include <cstdint>

#include "streampool/driver.hpp"

namespace streampool::capture {

/// True when `stream` is in the active capture sequence `id`. An invalidated capture has no id
/// (CUDA returns one only while the capture is active), so its later allocations go to the
/// general pool, as in PyTorch: nothing captured after the invalidation runs, and no graph comes
/// of it. False for id 0 (not known yet: matches nothing) and when the driver cannot say. One
/// driver call; any thread.
[[nodiscard]] inline bool in_capture_sequence(driver& drv, stream_t stream, std::uint64_t id) noexcept {
  if (id == 0) return false;
  capture_info info;
  return drv.stream_capture_info(stream, &info).ok() && info.status == capture_status::active && info.id == id;
}

}  // namespace streampool::capture
