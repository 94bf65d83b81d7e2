// record_stream_order.cpp — ordering a free of the cudaMallocAsync backend after its record_stream
// streams (record_stream_order.hpp).
//
// Note [record_stream by stream wait]
// A free must not let the pool reuse the memory before the work of every record_stream'ed stream,
// submitted before the free, is done. For each such stream S: record a pooled event on S and make
// the allocation stream A wait on it (cudaStreamWaitEvent binds to the event's record at call time,
// so the event goes back to the pool at once and may be re-recorded; checked on an H200), then
// cudaFreeAsync on A. The free is ordered after S's work on the device, and every reuse path of the
// pool respects that order: a later allocation on A is after the free in A's order; another stream
// reuses it only through event dependencies, opportunistically once the free has executed, or
// with an internal wait on A — all after S's work. No host synchronisation, no event query (legal
// under capture), no event alive past the call.
// PyTorch instead frees on one per-device "unifying" stream that waits on A and on each S. That
// costs an extra stream, an extra event per stream per free (created and destroyed each time), and
// turns every such free into a cross-stream free, so even a reuse on A must go through the pool's
// cross-stream reuse rules, and the unifying stream accumulates waits on every stream that ever
// freed through it. Trade-off of ours: A's later work is ordered after S's work recorded at the
// free — a dependency PyTorch does not add. In record_stream's common uses (a side stream consumes a
// tensor of A and A later joins it) that order exists anyway; docs/async-backend.md says so.
#include "async/record_stream_order.hpp"

#include <string>

#include "core/format.hpp"
#include "streampool/errors.hpp"

namespace streampool::async {

bool record_stream_order::order_free(void* ptr, const allocation_record& record) {
  drv_result failed_wait;
  for (const stream_t use : record.stream_uses) {
    const event_t event = events_.acquire();
    drv_result result = driver_->event_record(event, use);
    if (result.ok()) result = driver_->stream_wait_event(record.stream, event);
    events_.release(event);
    if (!result.ok()) failed_wait = result;
  }
  // Note [Ordering fallback]: a stream the device's events cannot be recorded on (a stream of
  // another device: record_stream does not say which) is waited for by the host instead —
  // every device is synchronised, which also completes that stream's work. Illegal under capture:
  // then the free fails and the allocation stays live, to be freed after the capture.
  const bool host_synchronised = !failed_wait.ok();
  if (host_synchronised) {
    int count = 0;
    if (!driver_->device_count(&count).ok()) count = 0;
    for (int device = 0; device < count; ++device) {
      const drv_result result = driver_->device_synchronize(device);
      if (!result.ok()) {
        throw cuda_error("streampool: ordering the free of " + core::format_pointer(ptr) +
                             " after its record_stream streams failed (" + driver_->describe(failed_wait) +
                             "), and so did synchronising device " + std::to_string(device) + " instead: " +
                             driver_->describe(result),
                         result.native);
      }
    }
  }
  return host_synchronised;
}

}  // namespace streampool::async
