// driver_common_test.cpp — the driver-independent parts of driver.hpp: names of calls and
// statuses, drv_result, and check(), the throwing wrapper (message format, native code, and that
// out_of_memory is reported as a cuda_error rather than streampool::out_of_memory).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "streampool/driver.hpp"
#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

TEST(driver_names, EveryCallHasADistinctName) {
  std::set<std::string> names;
  for (std::size_t index = 0; index < driver_call_count; ++index) {
    const std::string name(to_string(static_cast<driver_call>(index)));
    EXPECT_NE(name, "unknown_call") << "call #" << index;
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(names.size(), driver_call_count);
  EXPECT_EQ(to_string(driver_call::malloc_async), "malloc_async");
  EXPECT_EQ(to_string(driver_call::count_), "unknown_call");
}

TEST(driver_names, EveryStatusHasADistinctName) {
  std::set<std::string> names;
  for (int code = 0; code <= static_cast<int>(status::other); ++code) {
    const std::string name(to_string(static_cast<status>(code)));
    EXPECT_NE(name, "unknown_status");
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(to_string(status::out_of_memory), "out_of_memory");
  EXPECT_EQ(to_string(status::illegal_in_capture), "illegal_in_capture");
}

TEST(drv_result, IsOkOnlyForStatusOk) {
  constexpr drv_result good{};
  constexpr drv_result bad{status::not_ready, 600};
  static_assert(good.ok() && static_cast<bool>(good));
  static_assert(!bad.ok() && !static_cast<bool>(bad));
  EXPECT_EQ(bad.native, 600);
}

TEST(check, PassesOkResultsThrough) {
  const sim_driver sim;
  EXPECT_NO_THROW(check(sim, drv_result{}, "anything"));
}

TEST(check, ThrowsCudaErrorWithOperationDescriptionAndNativeCode) {
  sim_driver sim;
  const drv_result failed = sim.free(0, reinterpret_cast<void*>(0x1234));
  ASSERT_EQ(failed.code, status::invalid_value);
  try {
    check(sim, failed, "cudaFree of 0x1234");
    FAIL() << "check() did not throw";
  } catch (const cuda_error& thrown) {
    EXPECT_EQ(std::string(thrown.what()), "cudaFree of 0x1234 failed: sim: invalid_value");
    EXPECT_EQ(thrown.native_status(), failed.native);
  }
}

TEST(check, ReportsOutOfMemoryAsACudaErrorToo) {
  sim_options options;
  options.capacity = 64 * mib;
  sim_driver sim(options);
  void* ptr = nullptr;
  const drv_result failed = sim.malloc(0, 128 * mib, &ptr);
  ASSERT_EQ(failed.code, status::out_of_memory);
  EXPECT_THROW(check(sim, failed, "cudaMalloc of 128.00 MiB"), cuda_error);
  try {
    check(sim, failed, "cudaMalloc of 128.00 MiB");
  } catch (const error& thrown) {  // cuda_error is a streampool::error, not a std::bad_alloc
    EXPECT_NE(std::string(thrown.what()).find("cudaMalloc of 128.00 MiB failed: sim: out_of_memory (device 0:"),
              std::string::npos)
        << thrown.what();
  }
}

}  // namespace
}  // namespace streampool
