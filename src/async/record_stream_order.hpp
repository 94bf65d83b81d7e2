// record_stream_order.hpp — how one device of the cudaMallocAsync backend orders the free of an
// allocation after the work of the streams given to record_stream: the allocation's stream waits
// for a pooled event recorded on each of them (Note [record_stream by stream wait] in
// record_stream_order.cpp), or the host synchronises when that cannot be done (Note [Ordering
// fallback]). Thread-safe as its event pool is; the device calls it under its mutex.
#pragma once

#include "async/pointer_map.hpp"
#include "core/event_pool.hpp"
#include "streampool/driver.hpp"

namespace streampool::async {

class record_stream_order {
 public:
  record_stream_order(driver& drv, int device) : driver_(&drv), events_(drv, device) {}

  /// Makes `record.stream` wait for the work submitted so far to each of `record.stream_uses`, so
  /// that a free issued next on `record.stream` (or a private block reused) comes after it.
  /// Returns true when the host had to synchronise every device instead (Note [Ordering
  /// fallback]). Legal under capture unless it falls back. @throws cuda_error (the fallback failed)
  bool order_free(void* ptr, const allocation_record& record);

 private:
  driver* driver_;
  core::event_pool events_;
};

}  // namespace streampool::async
