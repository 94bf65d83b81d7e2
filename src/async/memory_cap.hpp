// memory_cap.hpp — the per_process_memory_fraction cap of one device of the cudaMallocAsync
// backend: the fraction, the device's total memory read at set-up, and the limit a request is
// checked against before the driver is asked (Note [Memory fraction] in memory_cap.cpp). Not
// thread-safe: the device mutex guards it.
#pragma once

#include <cstddef>

namespace streampool::async {

class memory_cap {
 public:
  memory_cap(std::size_t total_memory, double fraction) noexcept : total_memory_(total_memory), fraction_(fraction) {}

  [[nodiscard]] std::size_t total_memory() const noexcept { return total_memory_; }
  [[nodiscard]] double fraction() const noexcept { return fraction_; }
  /// From now on; allocations already made stay.
  void set_fraction(double fraction) noexcept { fraction_ = fraction; }
  /// True while the fraction caps anything (below 1.0).
  [[nodiscard]] bool capping() const noexcept { return fraction_ < 1.0; }
  /// fraction x total memory, rounded down; SIZE_MAX when not capping (the driver decides).
  [[nodiscard]] std::size_t limit() const noexcept;
  /// True when `more` bytes on top of the `held` bytes would pass the limit.
  [[nodiscard]] bool refuses(std::size_t held, std::size_t more) const noexcept { return held + more > limit(); }

 private:
  std::size_t total_memory_;
  double fraction_;
};

}  // namespace streampool::async
