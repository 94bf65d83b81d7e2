// cross_stream_test_support.hpp — helpers for the cross_stream_reuse tests on the sim (Note
// [Cross-stream reuse] in src/native/stream_order.hpp): the configs, a sim whose work completes
// only when the test says so, and two shared-arena fixtures with expandable segments.
#pragma once

#include "unit/native/native_test_support.hpp"

namespace streampool::test {

/// A sim whose work completes only when the test says so (or at a synchronize).
inline sim_options lazy() {
  sim_options o;
  o.eager_completion = false;
  return o;
}

inline constexpr const char* policy = "cross_stream_reuse:True";
inline constexpr const char* policy_expandable = "cross_stream_reuse:True,expandable_segments:True";

/// Two streams sharing one arena with expandable segments, work completing only when told.
struct two_streams {
  native_env env{policy_expandable, lazy()};
  stream_t a = env.new_stream();
  stream_t b = env.new_stream();
};

/// Stream a holds x, y, z (10 MiB each) with y freed after a kernel of a used it (not complete),
/// and a peak of 40 MiB of which 10 MiB were given back by empty_cache: the next growth (b's)
/// needs no page move, the one after it needs y's pages.
struct freed_middle : two_streams {
  void* x = env.alloc->allocate(10 * MiB, a);
  void* y = env.alloc->allocate(10 * MiB, a);
  void* z = env.alloc->allocate(10 * MiB, a);
  freed_middle() {
    env.alloc->deallocate(env.alloc->allocate(10 * MiB, a));
    env.alloc->empty_cache();
    EXPECT_TRUE(env.sim->use(a, y, 10 * MiB));
    env.alloc->deallocate(y);
  }
};

}  // namespace streampool::test
