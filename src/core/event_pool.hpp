// event_pool.hpp — a per-device free list of driver events (timing disabled), so that no event is
// created per free (docs/pytorch-compatibility.md §2.9: events come from a per-device pool). Thread-safe; events are destroyed with the
// pool.
#pragma once

#include <mutex>
#include <vector>

#include "streampool/driver.hpp"

namespace streampool::core {

class event_pool {
 public:
  event_pool(driver& drv, int device) : driver_(&drv), device_(device) {}
  ~event_pool();
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;

  /// A ready-to-record event. @throws cuda_error when the driver cannot create one.
  [[nodiscard]] event_t acquire();
  /// Gives an event back for reuse (its last record must have completed or been abandoned).
  void release(event_t event) noexcept;
  /// Events created and not destroyed (in use + idle), for tests.
  [[nodiscard]] std::size_t created() const noexcept;

 private:
  driver* driver_;
  int device_;
  mutable std::mutex mutex_;
  std::vector<event_t> idle_;
  std::size_t created_ = 0;
};

}  // namespace streampool::core
