// driver_contract_test_support.hpp — the fixture of the driver contract suite (driver_contract_test.cpp):
// one driver per test from a factory, skipped with the driver's own reason when it reports no
// device, plus helpers that report failures through describe().
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "driver_test_support.hpp"
#include "streampool/driver.hpp"

namespace streampool::testing {

struct driver_case {
  std::string name;
  std::function<std::shared_ptr<driver>()> make;
};

class driver_contract : public ::testing::TestWithParam<driver_case> {
 protected:
  void SetUp() override {
    drv_ = GetParam().make();
    ASSERT_NE(drv_, nullptr);
    const drv_result counted = drv_->device_count(&count_);
    if (counted.code == status::no_device) {
      EXPECT_EQ(count_, 0);
      GTEST_SKIP() << "no CUDA device: " << drv_->describe(counted);
    }
    ASSERT_TRUE(ok(counted));
    ASSERT_GT(count_, 0);
    ASSERT_TRUE(ok(drv_->set_device(0)));
    ASSERT_TRUE(ok(drv_->get_device_info(0, &info_)));
  }

  ::testing::AssertionResult ok(drv_result result) const { return succeeded(*drv_, result); }

  stream_t new_stream() {
    stream_t stream = nullptr;
    EXPECT_TRUE(ok(drv_->stream_create(0, &stream)));
    return stream;
  }
  event_t new_event() {
    event_t event = nullptr;
    EXPECT_TRUE(ok(drv_->event_create(0, &event)));
    return event;
  }
  std::uint64_t attr(mempool_t pool, pool_attr which) {
    std::uint64_t value = 0;
    EXPECT_TRUE(ok(drv_->pool_get_attr(pool, which, &value)));
    return value;
  }
  std::size_t free_memory() {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    EXPECT_TRUE(ok(drv_->mem_get_info(0, &free_bytes, &total_bytes)));
    return free_bytes;
  }

  std::shared_ptr<driver> drv_;
  int count_ = 0;
  device_info info_;
};

}  // namespace streampool::testing
