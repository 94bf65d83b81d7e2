// device_trace.hpp — what the cudaMallocAsync backend's parts of one device write to the trace
// ring: the device index filled in, one inline test while history is off (the default; the hot
// path traces five times per alloc+free pair), and a failed record (host memory) dropped rather
// than failing, or half-undoing, an allocate or free that completed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/trace_ring.hpp"
#include "streampool/driver.hpp"
#include "streampool/graph.hpp"
#include "streampool/stats.hpp"

namespace streampool::async {

class device_trace {
 public:
  device_trace(core::trace_ring& ring, int device) noexcept : ring_(&ring), device_(device) {}

  /// Appends an entry when history is on (segment events also when a listener is set:
  /// Note [Segment listener]); a failure drops it.
  void record(trace_action action, std::uintptr_t address, std::size_t size, stream_t stream,
              mempool_id pool) const noexcept {
    if (ring_->wanted()) record_enabled(action, address, size, stream, pool);
  }

 private:
  void record_enabled(trace_action action, std::uintptr_t address, std::size_t size, stream_t stream,
                      mempool_id pool) const noexcept;

  core::trace_ring* ring_;
  int device_;
};

}  // namespace streampool::async
