// memory_cap.hpp — the per_process_memory_fraction cap of one device, for both backends: the
// fraction, the device's total memory, and the limit the bytes a device holds are checked against
// before the driver is asked for more (Note [Memory fraction] in memory_cap.cpp). The fraction is
// read lock-free (stats, OOM reports); set_total_memory and the checks run under the backend's
// device mutex.
#pragma once

#include <atomic>
#include <cstddef>

namespace streampool::core {

class memory_cap {
 public:
  /// `total_memory` 0: not known yet (set_total_memory before the first check while capping).
  memory_cap(std::size_t total_memory, double fraction) noexcept : total_memory_(total_memory), fraction_(fraction) {}

  [[nodiscard]] std::size_t total_memory() const noexcept { return total_memory_; }
  void set_total_memory(std::size_t bytes) noexcept { total_memory_ = bytes; }
  [[nodiscard]] double fraction() const noexcept { return fraction_.load(std::memory_order_relaxed); }
  /// From now on; allocations already made stay.
  void set_fraction(double fraction) noexcept { fraction_.store(fraction, std::memory_order_relaxed); }
  /// True while the fraction caps anything (below 1.0).
  [[nodiscard]] bool capping() const noexcept { return fraction() < 1.0; }
  /// fraction x total memory, rounded down; SIZE_MAX when not capping (the driver decides).
  [[nodiscard]] std::size_t limit() const noexcept;
  /// limit() while capping, else 0: the figure of OOM reports and of the GC threshold.
  [[nodiscard]] std::size_t allowed() const noexcept { return capping() ? limit() : 0; }
  /// True when `more` bytes on top of the `held` bytes would pass the limit.
  [[nodiscard]] bool refuses(std::size_t held, std::size_t more) const noexcept { return held + more > limit(); }

 private:
  std::size_t total_memory_;
  std::atomic<double> fraction_;
};

}  // namespace streampool::core
