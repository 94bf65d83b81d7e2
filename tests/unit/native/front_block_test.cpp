// The front block and the newest live block (Note [Front block] in src/native/front_block.hpp,
// Note [Newest live block] in src/native/live_blocks.hpp): a hot free parks its block and the next
// same-size allocation takes it back, and none of it may show. Random sequences of allocations,
// frees, record_stream, stats resets, settings changes and empty_cache run on two allocators over
// identical sim devices, one with every front block off; each step must return the same pointer,
// and the statistics, snapshots and traces must stay equal. Seed: STREAMPOOL_TEST_SEED.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

std::uint64_t test_seed() {
  const char* text = std::getenv("STREAMPOOL_TEST_SEED");
  const std::uint64_t seed = text != nullptr ? std::strtoull(text, nullptr, 10) : 30;
  std::printf("front_block: STREAMPOOL_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

/// What a trace shows, without the time of each entry.
std::string trace_text(const std::vector<trace_entry>& entries) {
  std::string out;
  for (const trace_entry& e : entries) {
    out += std::to_string(static_cast<int>(e.action)) + " " + std::to_string(e.address) + " " +
           std::to_string(e.size) + "\n";
  }
  return out;
}

/// A snapshot's JSON with its trace apart, without times (two allocators' clocks differ).
std::string snapshot_text(const allocator& a) {
  memory_snapshot s = a.snapshot();
  const std::string trace = trace_text(s.trace);
  s.trace.clear();
  return s.to_json() + "\n" + trace;
}

/// Two allocators on identical sim devices; `plain` has its front blocks off once each stream's
/// arena exists.
struct twin {
  native_env fast;
  native_env plain;
  std::vector<stream_t> fast_streams;
  std::vector<stream_t> plain_streams;

  explicit twin(const std::string& conf) : fast(conf), plain(conf) {
    for (int i = 0; i < 3; ++i) {
      fast_streams.push_back(fast.new_stream());
      plain_streams.push_back(plain.new_stream());
    }
    fast.alloc->record_history(true, 100000);
    plain.alloc->record_history(true, 100000);
    for (std::size_t i = 0; i < fast_streams.size(); ++i) {  // creates each stream's arena
      fast.alloc->deallocate(fast.alloc->allocate(512, fast_streams[i], 0));
      plain.alloc->deallocate(plain.alloc->allocate(512, plain_streams[i], 0));
    }
    plain.native().set_front_blocks(0, false);
  }

  void expect_same(const std::string& where) const {
    ASSERT_EQ(fast.stats().to_json(), plain.stats().to_json()) << where;
  }
  void expect_same_snapshot(const std::string& where) const {
    ASSERT_EQ(snapshot_text(*fast.alloc), snapshot_text(*plain.alloc)) << where;
    ASSERT_EQ(trace_text(fast.alloc->trace(0)), trace_text(plain.alloc->trace(0))) << where;
  }
};

void run_random(const std::string& conf, std::uint64_t seed, int steps) {
  twin t(conf);
  std::mt19937_64 rng(seed);
  const std::size_t sizes[] = {1, 512, 700, 4096, 100 * KiB, 1 * MiB, 1 * MiB + 512, 3 * MiB, 7 * MiB, 20 * MiB, 64 * MiB};
  struct live {
    void* fast;
    void* plain;
    std::size_t stream;
  };
  std::vector<live> blocks;
  for (int step = 0; step < steps; ++step) {
    const std::string where = conf + " seed " + std::to_string(seed) + " step " + std::to_string(step);
    const auto op = rng() % 100;
    if (op < 45 || blocks.empty()) {
      const std::size_t size = rng() % 4 == 0 ? 1 + rng() % (8 * MiB) : sizes[rng() % std::size(sizes)];
      const std::size_t s = rng() % t.fast_streams.size();
      void* p = t.fast.alloc->allocate(size, t.fast_streams[s], 0);
      void* q = t.plain.alloc->allocate(size, t.plain_streams[s], 0);
      ASSERT_EQ(addr(p), addr(q)) << where;
      blocks.push_back({p, q, s});
    } else if (op < 90) {
      // Mostly the newest (the pattern the front block serves), sometimes any.
      const std::size_t i = rng() % 3 != 0 ? blocks.size() - 1 : rng() % blocks.size();
      t.fast.alloc->deallocate(blocks[i].fast);
      t.plain.alloc->deallocate(blocks[i].plain);
      blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op < 94) {
      const std::size_t i = rng() % blocks.size();
      const std::size_t other = (blocks[i].stream + 1) % t.fast_streams.size();
      t.fast.alloc->record_stream(blocks[i].fast, t.fast_streams[other]);
      t.plain.alloc->record_stream(blocks[i].plain, t.plain_streams[other]);
    } else if (op < 96) {
      t.fast.alloc->reset_peak_stats(0);
      t.plain.alloc->reset_peak_stats(0);
    } else if (op < 97) {
      t.fast.alloc->reset_accumulated_stats(0);
      t.plain.alloc->reset_accumulated_stats(0);
    } else if (op < 98) {
      const std::string settings = rng() % 2 == 0 ? "max_split_size_mb:30" : "max_split_size_mb:1000";
      t.fast.alloc->set_settings(settings);
      t.plain.alloc->set_settings(settings);
    } else {
      t.fast.alloc->empty_cache();
      t.plain.alloc->empty_cache();
    }
    t.expect_same(where);
    if (step % 100 == 0) t.expect_same_snapshot(where);
  }
  t.expect_same_snapshot(conf + " at the end");
  for (const live& b : blocks) {
    t.fast.alloc->deallocate(b.fast);
    t.plain.alloc->deallocate(b.plain);
  }
  t.expect_same(conf + " all freed");
  t.expect_same_snapshot(conf + " all freed");
}

TEST(front_block, RandomSequencesMatchThePlainPath) {
  const std::uint64_t seed = test_seed();
  for (const char* conf : {"", "max_split_size_mb:40", "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9",
                           "roundup_power2_divisions:4", "expandable_segments:True", "cross_stream_reuse:True"}) {
    for (std::uint64_t k = 0; k < 3; ++k) {
      run_random(conf, seed * 16 + k, 1000);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(front_block, SameSizePairParksAndTakesBack) {
  native_env env;
  const stream_t s = env.new_stream();
  void* p = env.alloc->allocate(4096, s, 0);
  env.alloc->deallocate(p);
  const std::string snapshot_after_free = env.alloc->snapshot().to_json();  // no trace recorded here
  // The pair again: the same address, and the statistics of a plain pair.
  void* q = env.alloc->allocate(4096, s, 0);
  EXPECT_EQ(q, p);
  const memory_stats s1 = env.stats();
  EXPECT_EQ(s1.allocation[all].current, 1);
  EXPECT_EQ(s1.allocation[all].allocated, 2);
  EXPECT_EQ(s1.allocation[all].freed, 1);
  EXPECT_EQ(s1.inactive_split[small].current, 1);
  EXPECT_EQ(s1.inactive_split_bytes[small].current, static_cast<std::int64_t>(2 * MiB - 4096));
  env.alloc->deallocate(q);
  const memory_stats s2 = env.stats();
  EXPECT_EQ(s2.allocation[all].current, 0);
  EXPECT_EQ(s2.allocation[all].freed, 2);
  EXPECT_EQ(s2.inactive_split[small].current, 0);
  EXPECT_EQ(s2.inactive_split_bytes[small].current, 0);
  EXPECT_EQ(s2.inactive_split_bytes[small].freed, static_cast<std::int64_t>(2 * (2 * MiB - 4096)));
  // A snapshot settles the front block: one free block of the whole segment, as after a plain free.
  EXPECT_EQ(env.alloc->snapshot().to_json(), snapshot_after_free);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 1u);
  EXPECT_EQ(segs[0].blocks[0].state, block_state::inactive);
}

TEST(front_block, FrontBlocksOffSettleAndStayOff) {
  native_env env;
  const stream_t s = env.new_stream();
  void* p = env.alloc->allocate(1 * MiB, s, 0);
  env.alloc->deallocate(p);
  env.native().set_front_blocks(0, false);
  void* q = env.alloc->allocate(1 * MiB, s, 0);  // the plain path: best fit of the settled free block
  EXPECT_EQ(q, p);
  env.alloc->deallocate(q);
  env.native().set_front_blocks(0, true);
  void* r = env.alloc->allocate(1 * MiB, s, 0);
  EXPECT_EQ(r, p);
  env.alloc->deallocate(r);
  EXPECT_EQ(env.stats().allocation[all].allocated, 3);
  EXPECT_EQ(env.stats().allocation[all].current, 0);
  EXPECT_THROW(env.native().set_front_blocks(1, false), std::out_of_range);  // one device on the sim
}

TEST(front_block, AnotherFreeSettlesTheFrontBlockFirst) {
  // Two neighbours freed in turn: the second free merges with the first, which must be in the
  // free list by then (settled), leaving one whole free segment.
  native_env env;
  const stream_t s = env.new_stream();
  void* a = env.alloc->allocate(512, s, 0);
  void* b = env.alloc->allocate(512, s, 0);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 1u);
  EXPECT_EQ(segs[0].blocks[0].size, 2 * MiB);
  EXPECT_EQ(env.stats().inactive_split[small].current, 0);
  // A differently sized request misses the front block and takes the plain best fit.
  void* c = env.alloc->allocate(512, s, 0);
  env.alloc->deallocate(c);
  void* d = env.alloc->allocate(1024, s, 0);
  EXPECT_EQ(d, c);
  env.alloc->deallocate(d);
}

TEST(front_block, BadPointerAfterParkingIsRefused) {
  native_env env;
  const stream_t s = env.new_stream();
  void* p = env.alloc->allocate(4096, s, 0);
  env.alloc->deallocate(p);
  EXPECT_THROW(env.alloc->deallocate(p), error);  // parked, not live: a double free
  void* q = env.alloc->allocate(4096, s, 0);
  EXPECT_EQ(q, p);
  EXPECT_THROW(env.alloc->record_stream(static_cast<char*>(q) + 512, s), error);
  env.alloc->deallocate(q);
  EXPECT_EQ(env.stats().allocation[all].current, 0);
}

}  // namespace
}  // namespace streampool::test
