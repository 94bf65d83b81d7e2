// event_pool.cpp — see event_pool.hpp.
#include "core/event_pool.hpp"

#include <string>

#include "streampool/errors.hpp"

namespace streampool::core {

event_pool::~event_pool() {
  for (const event_t event : idle_) {
    // Status form: a destructor must not throw; a failure here only leaks a host-side handle.
    (void)driver_->event_destroy(device_, event);
  }
}

event_t event_pool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      const event_t event = idle_.back();
      idle_.pop_back();
      return event;
    }
  }
  event_t event = nullptr;
  const drv_result result = driver_->event_create(device_, &event);
  if (!result.ok()) {
    throw cuda_error("streampool: cannot create an event on device " + std::to_string(device_) + ": " +
                         driver_->describe(result),
                     result.native);
  }
  std::lock_guard lock(mutex_);
  ++created_;
  return event;
}

void event_pool::release(event_t event) noexcept {
  std::lock_guard lock(mutex_);
  try {
    idle_.push_back(event);
  } catch (...) {
    (void)driver_->event_destroy(device_, event);
    --created_;
  }
}

std::size_t event_pool::created() const noexcept {
  std::lock_guard lock(mutex_);
  return created_;
}

}  // namespace streampool::core
