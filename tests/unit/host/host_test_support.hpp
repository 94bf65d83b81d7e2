// host_test_support.hpp — what the host allocator tests share: a simulated device (non-eager on
// request, so a test decides when copies complete) with a host allocator built from a config
// string, and small helpers.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "streampool/host_allocator.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::test {

struct host_env {
  explicit host_env(const std::string& config_text = "", sim_options options = {}) {
    sim = std::make_shared<sim_driver>(options);
    alloc = make_host_allocator(parse_config(config_text), sim);
  }
  ~host_env() {
    alloc.reset();
    // Nothing pinned is left behind once the allocator is gone.
    EXPECT_EQ(sim->host_bytes_pinned(), 0u);
    EXPECT_EQ(sim->live_host_allocs(), 0u);
    EXPECT_EQ(sim->live_host_registrations(), 0u);
  }
  host_env(const host_env&) = delete;
  host_env& operator=(const host_env&) = delete;

  [[nodiscard]] stream_t make_stream() {
    stream_t stream = nullptr;
    check(*sim, sim->stream_create(0, &stream), "stream_create");
    return stream;
  }
  /// Submits one copy reading `ptr` on `stream` and records the stream on the block.
  void copy_from(void* ptr, std::size_t bytes, stream_t stream, void* device_buffer) {
    check(*sim, sim->memcpy_async(device_buffer, ptr, bytes, stream), "memcpy_async");
    alloc->record_stream(ptr, stream);
  }
  [[nodiscard]] void* device_buffer(std::size_t bytes) {
    void* ptr = nullptr;
    check(*sim, sim->malloc(0, bytes, &ptr), "malloc");
    return ptr;
  }

  std::shared_ptr<sim_driver> sim;
  std::unique_ptr<host_allocator> alloc;
};

[[nodiscard]] inline sim_options lazy_streams() {
  sim_options options;
  options.eager_completion = false;
  return options;
}

}  // namespace streampool::test
