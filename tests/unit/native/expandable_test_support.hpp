// expandable_test_support.hpp — helpers for the expandable-segment tests: an allocator with
// `expandable_segments:True` over a sim device of a given capacity, the page sizes, and checks
// that the statistics agree with the driver and the snapshot.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {

inline constexpr std::size_t small_page = 2 * MiB;   ///< kSmallBuffer on a 2 MiB-granularity device
inline constexpr std::size_t large_page = 20 * MiB;  ///< large_segment_size (default)

inline std::int64_t i64(std::size_t v) { return static_cast<std::int64_t>(v); }

inline sim_options sim_with(std::size_t capacity, bool eager = true) {
  sim_options o;
  o.capacity = capacity;
  o.eager_completion = eager;
  return o;
}

/// `expandable_segments:True` plus `extra` config keys.
struct expandable_env : native_env {
  explicit expandable_env(std::size_t capacity = 80 * GiB, const std::string& extra = "", bool eager = true)
      : native_env("expandable_segments:True" + (extra.empty() ? "" : "," + extra), sim_with(capacity, eager)) {}

  /// Trace entries of one action since history recording started.
  [[nodiscard]] std::vector<trace_entry> entries(trace_action action) const {
    std::vector<trace_entry> out;
    for (const trace_entry& e : alloc->trace()) {
      if (e.action == action) out.push_back(e);
    }
    return out;
  }
};

/// reserved_bytes == what the sim has physically in use == mapped bytes in the snapshot plus its
/// leftover pages (Note [Leftover pages]), per pool kind too; the `segment` statistic stays 0
/// (expandable mapping never changes it); inactive_split stays 0.
inline void expect_consistent(const native_env& env) {
  const memory_stats s = env.stats();
  const memory_snapshot snap = env.alloc->snapshot();
  std::size_t active = 0;
  std::size_t by_kind[3] = {0, 0, 0};  // all, small, large
  for (const segment_info& seg : snap.segments) {
    EXPECT_TRUE(seg.is_expandable);
    by_kind[all] += seg.total_size;
    by_kind[seg.is_large ? large : small] += seg.total_size;
    active += seg.active_size;
  }
  for (const leftover_page_info& page : snap.leftover_pages) {
    by_kind[all] += page.size;
    by_kind[page.is_large ? large : small] += page.size;
  }
  EXPECT_EQ(s.reserved_bytes[all].current, i64(env.sim->bytes_in_use(0)));
  for (const std::size_t k : {all, small, large}) {
    EXPECT_EQ(s.reserved_bytes[k].current, i64(by_kind[k])) << "pool kind " << k << ": segments + leftover pages";
  }
  EXPECT_EQ(snap.reserved_bytes(0), static_cast<std::size_t>(s.reserved_bytes[all].current));
  EXPECT_EQ(s.reserved_bytes[all].current, s.reserved_bytes[small].current + s.reserved_bytes[large].current);
  EXPECT_EQ(s.active_bytes[all].current, i64(active));
  EXPECT_EQ(s.segment[all].current, 0);
  EXPECT_EQ(s.inactive_split[all].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[all].current, 0);
}

}  // namespace streampool::test
