// driver_test_support.hpp — small helpers shared by the driver tests: gtest predicates that
// print the driver's describe() text when a call's status is not the expected one, and a
// fixture base owning a sim_driver.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "streampool/driver.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::testing {

/// EXPECT_TRUE(succeeded(drv, drv.malloc(...))) prints "sim: out_of_memory (...)" on failure.
inline ::testing::AssertionResult succeeded(const driver& drv, drv_result result) {
  if (result.ok()) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << drv.describe(result);
}

/// EXPECT_TRUE(fails_with(drv, status::invalid_value, drv.free(...))).
inline ::testing::AssertionResult fails_with(const driver& drv, status expected, drv_result result) {
  if (result.code == expected) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected " << to_string(expected) << ", got "
                                       << (result.ok() ? std::string("ok") : drv.describe(result));
}

inline std::uintptr_t address(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

/// Two devices whose work completes only when the test says so (complete(), a synchronize).
inline sim_options lazy_two_devices() {
  sim_options options;
  options.device_count = 2;
  options.eager_completion = false;
  return options;
}

/// Fixture base with a sim driver built from `options()` (override to change them).
class sim_test : public ::testing::Test {
 protected:
  void SetUp() override { sim_ = std::make_unique<sim_driver>(make_options()); }
  virtual sim_options make_options() { return {}; }

  sim_driver& sim() { return *sim_; }
  ::testing::AssertionResult ok(drv_result result) { return succeeded(*sim_, result); }
  ::testing::AssertionResult fails(status expected, drv_result result) { return fails_with(*sim_, expected, result); }

  stream_t new_stream(int device = 0) {
    stream_t stream = nullptr;
    EXPECT_TRUE(ok(sim_->stream_create(device, &stream)));
    return stream;
  }
  event_t new_event(int device = 0) {
    event_t event = nullptr;
    EXPECT_TRUE(ok(sim_->event_create(device, &event)));
    return event;
  }
  std::uint64_t attr(mempool_t pool, pool_attr which) {
    std::uint64_t value = 0;
    EXPECT_TRUE(ok(sim_->pool_get_attr(pool, which, &value)));
    return value;
  }

  std::unique_ptr<sim_driver> sim_;
};

}  // namespace streampool::testing
