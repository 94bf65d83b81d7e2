// event_pool_test.cpp — events are recycled, not created per use; creation failures surface as
// cuda_error.
#include <gtest/gtest.h>

#include "core/event_pool.hpp"
#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

TEST(event_pool, RecyclesEvents) {
  sim_driver sim;
  {
    core::event_pool pool(sim, 0);
    const event_t a = pool.acquire();
    pool.release(a);
    const event_t b = pool.acquire();
    EXPECT_EQ(a, b);
    EXPECT_EQ(pool.created(), 1u);
    EXPECT_EQ(sim.calls(driver_call::event_create), 1u);
    pool.release(b);
  }
  EXPECT_EQ(sim.calls(driver_call::event_destroy), 1u);
}

TEST(event_pool, CreationFailureThrowsCudaError) {
  sim_driver sim;
  core::event_pool pool(sim, 0);
  sim.fail_next(driver_call::event_create, 1, status::other);
  EXPECT_THROW((void)pool.acquire(), cuda_error);
  EXPECT_EQ(pool.created(), 0u);
  const event_t event = pool.acquire();
  EXPECT_NE(event, nullptr);
  pool.release(event);
}

}  // namespace
}  // namespace streampool
