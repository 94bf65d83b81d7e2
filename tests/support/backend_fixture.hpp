// backend_fixture.hpp — the parameter space of the contract suites: every backend on every driver.
// A test gets an allocator built from a config string on a fresh sim driver, or on the real CUDA
// driver (skipped with the driver's reason when this machine has no usable GPU).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "streampool/allocator.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::testing {

struct backend_case {
  std::string name;    ///< test-name suffix
  std::string config;  ///< config string
  bool real_device;    ///< cuda_driver instead of sim_driver
};

/// Test logs show the case name instead of the struct's bytes.
inline void PrintTo(const backend_case& c, std::ostream* os) { *os << c.name; }

inline std::vector<backend_case> all_backend_cases() {
  return {
      {"native_sim", "backend:native", false},
      {"async_sim", "backend:cudaMallocAsync", false},
      // The locks released around cudaMalloc (Note [Releasing the locks around cudaMalloc]).
      {"native_unlocked_malloc_sim", "backend:native,release_lock_on_cudamalloc:True", false},
      {"native_cuda", "backend:native", true},
      {"async_cuda", "backend:cudaMallocAsync", true},
      {"native_unlocked_malloc_cuda", "backend:native,release_lock_on_cudamalloc:True", true},
  };
}

/// The cases of all_backend_cases() on the real driver (`real_device`) or on the sim.
inline std::vector<backend_case> backend_cases(bool real_device) {
  std::vector<backend_case> out;
  for (const backend_case& c : all_backend_cases()) {
    if (c.real_device == real_device) out.push_back(c);
  }
  return out;
}

/// Why the real driver can't be used here, or "" when it can.
inline std::string real_device_unavailable_reason(driver& drv) {
  int count = 0;
  const drv_result result = drv.device_count(&count);
  if (!result.ok()) return "no CUDA device: " + drv.describe(result);
  if (count == 0) return "no CUDA device: device_count is 0";
  return "";
}

class backend_test : public ::testing::TestWithParam<backend_case> {
 protected:
  void SetUp() override {
    const backend_case& c = GetParam();
    if (c.real_device) {
      driver_ = make_cuda_driver();
      const std::string reason = real_device_unavailable_reason(*driver_);
      if (!reason.empty()) GTEST_SKIP() << reason;
    } else {
      sim_options options;
      options.capacity = 8 * gib;
      auto sim = std::make_shared<sim_driver>(options);
      sim_ = sim.get();
      driver_ = sim;
    }
    alloc_ = make_allocator(parse_config(GetParam().config), driver_);
  }
  void TearDown() override {
    for (const stream_t s : streams_) (void)driver_->stream_destroy(0, s);
    alloc_.reset();
  }

  stream_t new_stream() {
    stream_t s = nullptr;
    check(*driver_, driver_->stream_create(0, &s), "stream_create");
    streams_.push_back(s);
    return s;
  }
  void synchronize() { check(*driver_, driver_->device_synchronize(0), "device_synchronize"); }
  [[nodiscard]] bool is_native() const { return GetParam().config.find("native") != std::string::npos; }
  [[nodiscard]] std::size_t device_total() {
    device_info info;
    check(*driver_, driver_->get_device_info(0, &info), "get_device_info");
    return info.total_memory;
  }

  std::shared_ptr<driver> driver_;
  sim_driver* sim_ = nullptr;
  std::unique_ptr<allocator> alloc_;
  std::vector<stream_t> streams_;
};

inline std::string backend_case_name(const ::testing::TestParamInfo<backend_case>& info) { return info.param.name; }

}  // namespace streampool::testing
