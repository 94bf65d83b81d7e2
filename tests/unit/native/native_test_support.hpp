// native_test_support.hpp — helpers for the native backend's unit tests: an allocator over a fresh
// sim_driver built from a config string, and short accessors for stats and snapshots.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "core/backends.hpp"
#include "native/native_allocator.hpp"
#include "streampool/allocator.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::test {

inline constexpr std::size_t KiB = kib;
inline constexpr std::size_t MiB = mib;
inline constexpr std::size_t GiB = gib;

struct native_env {
  std::shared_ptr<sim_driver> sim;
  std::unique_ptr<allocator> alloc;

  explicit native_env(std::string_view conf = "", sim_options options = {})
      : sim(std::make_shared<sim_driver>(options)),
        alloc(native::make_native_allocator(parse_config(conf), sim)) {}

  [[nodiscard]] native::native_allocator& native() const { return dynamic_cast<native::native_allocator&>(*alloc); }
  [[nodiscard]] memory_stats stats(int device = 0) const { return alloc->stats(device); }
  [[nodiscard]] stream_t new_stream(int device = 0) const {
    stream_t s = nullptr;
    EXPECT_TRUE(sim->stream_create(device, &s).ok());
    return s;
  }
  [[nodiscard]] std::uint64_t calls(driver_call call) const { return sim->calls(call); }
  [[nodiscard]] std::vector<segment_info> segments() const { return alloc->snapshot().segments; }
};

/// Sizes of the segments of a snapshot, in address order.
inline std::vector<std::size_t> segment_sizes(const std::vector<segment_info>& segments) {
  std::vector<std::size_t> out;
  for (const segment_info& s : segments) out.push_back(s.total_size);
  return out;
}

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

inline constexpr std::size_t all = 0;
inline constexpr std::size_t small = 1;
inline constexpr std::size_t large = 2;

}  // namespace streampool::test
