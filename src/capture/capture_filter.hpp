// capture_filter.hpp — the one rule by which a stream filter routes a capture's allocations to its
// private pool: the allocating stream takes part in that capture sequence (its driver capture id),
// side streams joined through events included. capture_scope's filter (src/graph) and the C API's
// filter of the captures nobody announced (src/c_api) both ask this (Note [Capture filter] in
// src/graph/capture_scope.cpp).
#pragma once

#include <cstdint>

#include "streampool/driver.hpp"

namespace streampool::capture {

/// True when `stream` is in the capture sequence `id`: active, or invalidated since (an
/// allocation of an invalidated capture still belongs to its pool, which no graph will replay and
/// which is released when the capture ends). False for id 0 (not known yet: matches nothing) and
/// when the driver cannot say. One driver call; any thread.
[[nodiscard]] inline bool in_capture_sequence(driver& drv, stream_t stream, std::uint64_t id) noexcept {
  if (id == 0) return false;
  capture_info info;
  return drv.stream_capture_info(stream, &info).ok() && info.status != capture_status::none && info.id == id;
}

}  // namespace streampool::capture
