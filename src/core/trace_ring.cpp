// trace_ring.cpp — the out-of-line part of trace_ring (trace_ring.hpp): reporting a segment
// listener that threw.
#include "core/trace_ring.hpp"

#include <string>

#include "core/warnings.hpp"

namespace streampool::core {

// Note [Segment listener]
// allocator::set_segment_listener() gives a program (the PyTorch extension's
// attachAllocatorTraceTracker, whose main user is ProcessGroupNCCL's buffer registration) the
// segment events of the trace as they happen, whether history is on or not. Each device's
// trace_ring holds the listener: record() calls it for segment_* entries on the thread that made
// the change, which holds the device's lock, so events of one device arrive in the order of the
// changes and before any later allocation can reuse the memory; this is where and how PyTorch's
// allocator calls its trace trackers (also under its lock). Where an event is recorded is where
// the backend traces it: segment_alloc and segment_map after the memory is usable,
// segment_unmap after the unmap, and the native backend's segment_free just before the
// cudaFree (as PyTorch's, so that a registration can be dropped while the memory still exists).
// A listener that throws cannot undo the change it hears about: the exception is reported by
// warn() and dropped. Off (no listener, no history), record() costs the same one relaxed load.
void trace_ring::report_listener_failure(const char* what) noexcept {
  try {
    warn(std::string("streampool: the segment listener failed (the event is dropped): ") + what);
  } catch (...) {
    // Nothing more can be reported; the allocator's change stands.
  }
}

}  // namespace streampool::core
