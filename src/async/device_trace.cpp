// device_trace.cpp — the out-of-line part of device_trace (device_trace.hpp): recording an entry
// once history is on.
#include "async/device_trace.hpp"

namespace streampool::async {

void device_trace::record_enabled(trace_action action, std::uintptr_t address, std::size_t size, stream_t stream,
                                  mempool_id pool) const noexcept {
  try {
    ring_->record(action, device_, address, size, stream, pool);
  } catch (...) {
    // Dropping one trace entry is better than failing (or half-undoing) a completed operation.
  }
}

}  // namespace streampool::async
