// check_test_support.hpp — shared by the checking-mode tests: a fixture that builds an allocator
// from a config string on a fresh non-eager sim (both backends), and collects the warnings that
// checking mode reports through the warning handler.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "streampool/allocator.hpp"
#include "streampool/sim_driver.hpp"
#include "support/warnings_scope.hpp"

namespace streampool::testing {

struct check_case {
  std::string name;
  std::string backend;  ///< "native" or "cudaMallocAsync"
};
inline void PrintTo(const check_case& c, std::ostream* os) { *os << c.name; }
inline std::string check_case_name(const ::testing::TestParamInfo<check_case>& info) { return info.param.name; }
inline std::vector<check_case> check_cases() { return {{"native", "native"}, {"async", "cudaMallocAsync"}}; }

class checking_test : public ::testing::TestWithParam<check_case> {
 protected:
  void SetUp() override { build("debug_checks:True"); }

  /// (Re)builds the allocator on a fresh sim with `extra` appended to the backend key.
  void build(const std::string& extra) {
    alloc_.reset();
    sim_options options;
    options.capacity = 4 * gib;
    options.eager_completion = false;
    sim_ = std::make_shared<sim_driver>(options);
    const std::string text = "backend:" + GetParam().backend + (extra.empty() ? "" : "," + extra);
    alloc_ = make_allocator(parse_config(text), sim_);
  }
  stream_t new_stream() {
    stream_t s = nullptr;
    check(*sim_, sim_->stream_create(0, &s), "stream_create");
    return s;
  }
  /// The test plays a kernel that writes `count` bytes of `value` at ptr + offset.
  void write(void* ptr, std::size_t offset, std::size_t count, std::uint8_t value) {
    const std::vector<std::uint8_t> bytes(count, value);
    sim_->write_bytes(static_cast<std::uint8_t*>(ptr) + offset, bytes.data(), count);
  }
  std::vector<std::uint8_t> read(const void* ptr, std::size_t count) { return sim_->read_bytes(ptr, count); }
  /// Everything freed and returned: nothing allocated, nothing reserved on the sim.
  void expect_nothing_left() {
    sim_->complete_all();
    alloc_->empty_cache();
    EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);
    EXPECT_EQ(sim_->bytes_in_use(0), 0u);
  }

  warnings_scope warnings_;
  std::shared_ptr<sim_driver> sim_;
  std::unique_ptr<allocator> alloc_;
};

}  // namespace streampool::testing
