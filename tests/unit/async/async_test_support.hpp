// async_test_support.hpp — shared set-up of the cudaMallocAsync backend's unit tests: a sim_driver, an
// allocator built with async::make_async_allocator from a config string, and small helpers
// (streams, the device's pool handle, pool attributes, stats as a flat map, the text of an expected
// out_of_memory).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "async/async_allocator.hpp"
#include "core/backends.hpp"
#include "streampool/allocator.hpp"
#include "streampool/config.hpp"
#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::testing {

class async_fixture : public ::testing::Test {
 protected:
  void make(sim_options options = {}, const std::string& extra_config = "") {
    alloc_.reset();
    sim_ = std::make_shared<sim_driver>(options);
    std::string text = "backend:cudaMallocAsync";
    if (!extra_config.empty()) text += "," + extra_config;
    alloc_ = async::make_async_allocator(parse_config(text), sim_);
  }

  void SetUp() override { make(); }

  /// The message of the out_of_memory `f` throws (a test failure if it throws none).
  static std::string message_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const out_of_memory& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected out_of_memory";
    return {};
  }

  static bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  }

  [[nodiscard]] stream_t new_stream(int device = 0) {
    stream_t stream = nullptr;
    EXPECT_TRUE(sim_->stream_create(device, &stream).ok());
    return stream;
  }

  [[nodiscard]] async::async_allocator& backend() { return dynamic_cast<async::async_allocator&>(*alloc_); }

  /// The pool of `device` (the device must have been used).
  [[nodiscard]] mempool_t pool_of(int device = 0) {
    const async::async_device* state = backend().initialized_device(device);
    EXPECT_NE(state, nullptr);
    return state == nullptr ? nullptr : state->pool();
  }

  [[nodiscard]] std::uint64_t pool_attr_value(mempool_t pool, pool_attr attr) {
    std::uint64_t value = 0;
    EXPECT_TRUE(sim_->pool_get_attr(pool, attr, &value).ok());
    return value;
  }

  [[nodiscard]] std::map<std::string, std::int64_t> stats_map(int device = 0) {
    return alloc_->stats(device).to_map();
  }

  std::shared_ptr<sim_driver> sim_;
  std::unique_ptr<allocator> alloc_;
};

}  // namespace streampool::testing
