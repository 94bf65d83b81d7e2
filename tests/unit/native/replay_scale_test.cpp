// replay_scale_test.cpp — issue 31: the replay's cost grows with the events, not with the frees
// pending on events squared (Note [Shared holder streams] in src/replay/trace_replay.cpp). A
// generated trace of 200,000 frees pending at once (600,000 events) took 49 s with a holder stream
// per pending free, every allocation polling one event queue per holder: now the frees, which
// complete in order, share one holder, and the driver calls grow linearly. Also 20,000 distinct
// streams (Note [Device totals] in src/native/arena_stats.hpp). Counted, not timed.
#include <gtest/gtest.h>

#include <vector>

#include "streampool/replay.hpp"
#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

constexpr std::uint64_t base = 0x100000000ull;

/// `pending` blocks allocated and freed on stream 1, their frees completing only after all of
/// them, in request order (`reverse`: in the opposite order).
std::vector<trace_event> pending_frees(std::size_t pending, bool reverse) {
  std::vector<trace_event> events;
  std::uint64_t t = 0;
  for (std::size_t i = 0; i < pending; ++i) {
    events.push_back({trace_action::alloc, base + i * 0x1000ull, 4096, 1, ++t, 0});
    events.push_back({trace_action::free_requested, base + i * 0x1000ull, 4096, 1, ++t, 0});
  }
  for (std::size_t n = 0; n < pending; ++n) {
    const std::size_t i = reverse ? pending - 1 - n : n;
    events.push_back({trace_action::free_completed, base + i * 0x1000ull, 4096, 1, ++t, 0});
  }
  return events;
}

struct scale_run {
  replay_result result;
  std::size_t streams = 0;
  std::uint64_t event_queries = 0;
  std::uint64_t peak_arena_reads = 0;  ///< arenas read by device-peak rises (Note [Device totals])
};

scale_run run(const std::vector<trace_event>& events) {
  sim_options o;
  o.capacity = 141 * GiB;
  scale_run out;
  const auto sim = std::make_shared<sim_driver>(o);
  replay_streams streams(*sim, 0);  // before the allocator: outlives it (Note [Replay stream lifetime])
  auto alloc = native::make_native_allocator(parse_config(""), sim);
  replay_options options;
  options.sim = sim.get();
  options.streams = &streams;
  sim->reset_counters();
  out.result = replay_trace(*alloc, events, options);
  out.streams = streams.created();
  out.event_queries = sim->calls(driver_call::event_query);
  out.peak_arena_reads = dynamic_cast<native::native_allocator&>(*alloc).peak_arena_reads(0);
  alloc->empty_cache();
  return out;
}

TEST(replay_scale, TwoHundredThousandPendingFreesShareOneHolderStream) {
  constexpr std::size_t pending = 200000;
  const std::vector<trace_event> events = pending_frees(pending, false);
  const scale_run r = run(events);
  EXPECT_EQ(r.result.events, events.size());
  EXPECT_EQ(r.streams, 2u) << "the recorded stream and one holder";
  EXPECT_LE(r.event_queries, 2 * events.size()) << "event queries grow with the events";
  // Every block was pending at once: none reused, 512 blocks of 4 KiB per 2 MiB small segment
  // (a pending block is freed, so allocated bytes peak at one block).
  EXPECT_EQ(r.result.peak_reserved, (pending + 511) / 512 * 2 * MiB);
  EXPECT_EQ(r.result.peak_allocated, 4096u);
}

// Frees completing in the reverse order of their requests cannot share a holder (completing one
// would complete those held before it): a holder each, and the same figures.
TEST(replay_scale, FreesCompletingOutOfOrderKeepTheirOwnHolders) {
  constexpr std::size_t pending = 600;
  const scale_run in_order = run(pending_frees(pending, false));
  const scale_run reversed = run(pending_frees(pending, true));
  EXPECT_EQ(in_order.streams, 2u);
  // A holder per delayed free; the last one requested completes right after its request, so
  // it is not delayed: pending - 1 holders and the recorded stream.
  EXPECT_EQ(reversed.streams, pending);
  EXPECT_EQ(reversed.result.peak_reserved, in_order.result.peak_reserved);
  EXPECT_EQ(reversed.result.peak_allocated, in_order.result.peak_allocated);
}

// A stream per block: `streams` blocks, one on each stream, all live at once, then freed in
// order (3 events per stream). Every new stream's arena raises its own peaks at its first
// allocation, so each such rise used to sum every arena's counters (Note [Device peaks]).
std::vector<trace_event> distinct_streams(std::size_t streams) {
  std::vector<trace_event> events;
  std::uint64_t t = 0;
  for (std::size_t i = 0; i < streams; ++i) {
    events.push_back({trace_action::alloc, base + i * 0x1000ull, 4096, 1 + i, ++t, 0});
  }
  for (std::size_t i = 0; i < streams; ++i) {
    events.push_back({trace_action::free_requested, base + i * 0x1000ull, 4096, 1 + i, ++t, 0});
    events.push_back({trace_action::free_completed, base + i * 0x1000ull, 4096, 1 + i, ++t, 0});
  }
  return events;
}

// 20,000 distinct streams (60,000 events) did not finish in 600 s: each rise of an arena's own
// peak summed the counters of every arena (quadratic), and the replay looked streams up in a list.
// Now a rise reads only the arenas changed since the last one (Note [Device totals]); the figures
// are exact as before: every block is live at once, on its own stream, so the device peaks are
// sums over all 20,000 arenas.
TEST(replay_scale, TwentyThousandStreamsCostWhatTheirEventsCost) {
  const std::size_t count = 20000;
  const std::vector<trace_event> events = distinct_streams(count);
  const scale_run r = run(events);
  EXPECT_EQ(r.result.events, 3 * count);
  EXPECT_EQ(r.streams, count);
  EXPECT_EQ(r.result.peak_allocated, count * 4096) << "the device peak is the sum over every stream";
  EXPECT_EQ(r.result.peak_reserved, count * 2 * MiB) << "a 2 MiB small segment per stream";
  // Arenas read by device-peak rises: a few per event (the changed ones), not one per stream.
  EXPECT_LE(r.peak_arena_reads, 8 * events.size()) << "14 per stream here; every arena per rise before";
  EXPECT_GT(r.peak_arena_reads, 0u) << "the rises were counted";
  EXPECT_LT(r.result.seconds, 120.0) << "a generous bound: about 0.1 s in a RelWithDebInfo build";
}

}  // namespace
}  // namespace streampool::test
