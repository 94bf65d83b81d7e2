// tracker_ranges (python/csrc/tracker_ranges.cpp, Note [Mapped ranges as segments]): the events
// attachAllocatorTraceTracker's trackers get. Ordinary segments give c10's one ALLOC and one FREE;
// an expandable segment's mapped ranges become ALLOC / FREE pairs at matching addresses; seeding
// from a snapshot tells nothing twice and loses nothing; and, on the native backend over the sim
// with expandable segments, after every step of a random run the ranges told are the snapshot's
// segments exactly and every FREE ends an ALLOC told before.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "../../../python/csrc/tracker_ranges.hpp"
#include "streampool/allocator.hpp"
#include "streampool/sim_driver.hpp"
#include "support/test_seed.hpp"

namespace streampool::torch_ext {
namespace {

constexpr std::uintptr_t base = 0x7f0000000000;

trace_entry entry(trace_action action, std::uintptr_t address, std::size_t size, int device = 0) {
  trace_entry e;
  e.action = action;
  e.device = device;
  e.address = address;
  e.size = size;
  e.pool = {0, 0};
  return e;
}

tracker_event alloc_event(std::uintptr_t address, std::size_t size) { return {true, 0, address, size, nullptr, {0, 0}}; }
tracker_event free_event(std::uintptr_t address, std::size_t size) { return {false, 0, address, size, nullptr, {0, 0}}; }

std::vector<tracker_event> seeded_translate(tracker_ranges& r, const std::vector<trace_entry>& entries) {
  if (!r.seeded()) {
    EXPECT_TRUE(r.seed({}).empty());
  }
  std::vector<tracker_event> out;
  for (const trace_entry& e : entries) r.translate(e, out);
  return out;
}

TEST(tracker_ranges, AnOrdinarySegmentIsOneAllocAndOneFree) {
  tracker_ranges r;
  const auto out = seeded_translate(r, {entry(trace_action::segment_alloc, base, 2 << 20),
                                        entry(trace_action::segment_free, base, 2 << 20)});
  EXPECT_EQ(out, (std::vector<tracker_event>{alloc_event(base, 2 << 20), free_event(base, 2 << 20)}));
  EXPECT_TRUE(r.ranges().empty());
}

TEST(tracker_ranges, KeepsTheEventsDeviceStreamAndPool) {
  tracker_ranges r;
  trace_entry e = entry(trace_action::segment_map, base, 4096, 3);
  e.stream = reinterpret_cast<stream_t>(0x55);
  e.pool = {0, 7};
  const auto out = seeded_translate(r, {e});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (tracker_event{true, 3, base, 4096, reinterpret_cast<stream_t>(0x55), {0, 7}}));
}

TEST(tracker_ranges, MappedRangesJoinIntoRunsAndAnUnmapRegistersWhatIsLeft) {
  tracker_ranges r;
  const std::size_t page = 20 << 20;
  const auto out = seeded_translate(r, {entry(trace_action::segment_map, base, 2 * page),
                                        entry(trace_action::segment_map, base + 2 * page, 2 * page),
                                        entry(trace_action::segment_unmap, base + page, 2 * page)});
  EXPECT_EQ(out, (std::vector<tracker_event>{
                     alloc_event(base, 2 * page),
                     free_event(base, 2 * page), alloc_event(base, 4 * page),  // grown: one run, as the snapshot
                     free_event(base, 4 * page), alloc_event(base, page), alloc_event(base + 3 * page, page)  // cut
                 }));
  EXPECT_EQ(r.ranges(), (std::vector<tracker_event>{alloc_event(base, page), alloc_event(base + 3 * page, page)}));
}

TEST(tracker_ranges, AMapFillingAGapJoinsBothNeighbours) {
  tracker_ranges r;
  const auto out = seeded_translate(r, {entry(trace_action::segment_map, base, 2 << 20),
                                        entry(trace_action::segment_map, base + (4 << 20), 2 << 20),
                                        entry(trace_action::segment_map, base + (2 << 20), 2 << 20)});
  EXPECT_EQ(out, (std::vector<tracker_event>{alloc_event(base, 2 << 20), alloc_event(base + (4 << 20), 2 << 20),
                                             free_event(base, 2 << 20), free_event(base + (4 << 20), 2 << 20),
                                             alloc_event(base, 6 << 20)}));
}

TEST(tracker_ranges, WholeSegmentsAndOtherStreamsNeverJoin) {
  tracker_ranges r;
  trace_entry other_stream = entry(trace_action::segment_map, base + (4 << 20), 2 << 20);
  other_stream.stream = reinterpret_cast<stream_t>(0x9);
  const auto out = seeded_translate(r, {entry(trace_action::segment_alloc, base, 2 << 20),
                                        entry(trace_action::segment_alloc, base + (2 << 20), 2 << 20), other_stream,
                                        entry(trace_action::segment_map, base + (6 << 20), 2 << 20)});
  ASSERT_EQ(out.size(), 4u) << "adjacent cudaMalloc segments stay apart, as in the snapshot";
  for (const tracker_event& t : out) EXPECT_TRUE(t.registered);
  EXPECT_EQ(r.ranges().size(), 4u);
}

TEST(tracker_ranges, AnUnmapInsideOneRangeSplitsIt) {
  tracker_ranges r;
  const auto out = seeded_translate(r, {entry(trace_action::segment_map, base, 8 << 20),
                                        entry(trace_action::segment_unmap, base + (2 << 20), 2 << 20)});
  EXPECT_EQ(out, (std::vector<tracker_event>{alloc_event(base, 8 << 20), free_event(base, 8 << 20),
                                             alloc_event(base, 2 << 20), alloc_event(base + (4 << 20), 4 << 20)}));
}

TEST(tracker_ranges, OtherActionsAndEmptyRangesAreIgnored) {
  tracker_ranges r;
  const auto out = seeded_translate(r, {entry(trace_action::alloc, base, 512), entry(trace_action::free_completed, base, 512),
                                        entry(trace_action::oom, base, 512), entry(trace_action::segment_map, base, 0),
                                        entry(trace_action::segment_unmap, base, 4096)});
  EXPECT_TRUE(out.empty()) << "an unmap of memory never told of touches nothing";
}

TEST(tracker_ranges, BeforeTheSeedEventsAreKeptThenToldOnceAgainstTheSnapshot) {
  tracker_ranges r;
  std::vector<tracker_event> out;
  // Before the snapshot: a map it shows (merged with its neighbour there) and a segment it shows
  // the end of; after it: one more map.
  r.translate(entry(trace_action::segment_map, base + (2 << 20), 2 << 20), out);
  r.translate(entry(trace_action::segment_alloc, base + (64 << 20), 2 << 20), out);
  r.translate(entry(trace_action::segment_free, base + (64 << 20), 2 << 20), out);
  r.translate(entry(trace_action::segment_map, base + (4 << 20), 2 << 20), out);
  EXPECT_TRUE(out.empty()) << "nothing is told before seed()";
  segment_info shown;
  shown.address = base;
  shown.total_size = 4 << 20;
  shown.is_expandable = true;
  const auto told = r.seed({shown});
  EXPECT_EQ(told, (std::vector<tracker_event>{alloc_event(base + (64 << 20), 2 << 20), free_event(base + (64 << 20), 2 << 20),
                                              free_event(base, 4 << 20), alloc_event(base, 6 << 20)}))
      << "the map after the snapshot joins the run the snapshot showed";
  EXPECT_EQ(r.ranges(), (std::vector<tracker_event>{alloc_event(base, 6 << 20)}));
  EXPECT_TRUE(r.seed({}).empty()) << "a second seed is ignored";
  EXPECT_EQ(r.ranges().size(), 1u);
}

TEST(tracker_ranges, AFreeOfASeededRangeEndsItAtItsAddress) {
  tracker_ranges r;
  segment_info shown;
  shown.address = base;
  shown.total_size = 6 << 20;
  EXPECT_TRUE(r.seed({shown}).empty()) << "what exists is not told";
  std::vector<tracker_event> out;
  r.translate(entry(trace_action::segment_unmap, base + (4 << 20), 2 << 20), out);
  EXPECT_EQ(out, (std::vector<tracker_event>{free_event(base, 6 << 20), alloc_event(base, 4 << 20)}));
}

// --- against the native backend on the sim --------------------------------------------------------------

struct told_log {
  tracker_ranges ranges;
  std::map<std::uintptr_t, std::size_t> open;  ///< ALLOCs told and not yet FREEd
  int unmatched_frees = 0;
  int double_allocs = 0;
  int frees = 0;
  void take(const std::vector<tracker_event>& events) {
    for (const tracker_event& t : events) {
      if (t.registered) {
        if (!open.emplace(t.address, t.size).second) ++double_allocs;
      } else {
        ++frees;
        auto it = open.find(t.address);
        if (it == open.end() || it->second != t.size) {
          ++unmatched_frees;
        } else {
          open.erase(it);
        }
      }
    }
  }
};

void run_random(const char* conf, bool attach_midway) {
  const std::uint64_t seed = testing::test_seed();
  std::mt19937_64 rng(seed);
  auto sim = std::make_shared<sim_driver>();
  std::unique_ptr<allocator> a = make_allocator(parse_config(conf), sim);
  told_log log;
  auto attach = [&] {
    a->set_segment_listener([&log](const trace_entry& e) {
      std::vector<tracker_event> out;
      log.ranges.translate(e, out);
      log.take(out);
    });
    const std::vector<segment_info> existing = a->snapshot().segments;
    // What exists is registered from the snapshot by the tracker's owner (as ProcessGroupNCCL
    // does), not told.
    for (const segment_info& s : existing) log.open.emplace(s.address, s.total_size);
    log.take(log.ranges.seed(existing));
  };
  std::vector<void*> live;
  auto step = [&] {
    const auto pick = rng() % 10;
    if (pick < 5 || live.empty()) {
      const std::size_t sizes[] = {512, 100 << 10, 3 << 20, 21 << 20, 70 << 20};
      live.push_back(a->allocate(sizes[rng() % 5] + (rng() % 4096)));
    } else if (pick < 9) {
      const std::size_t i = rng() % live.size();
      a->deallocate(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      a->empty_cache();
    }
  };
  if (!attach_midway) attach();
  for (int i = 0; i < 400; ++i) {
    if (attach_midway && i == 150) attach();
    step();
    if (!log.ranges.seeded()) continue;
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> shown;
    for (const segment_info& s : a->snapshot().segments) shown.emplace_back(s.address, s.address + s.total_size);
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> told;
    for (const auto& [address, size] : log.open) told.emplace_back(address, address + size);
    std::sort(shown.begin(), shown.end());
    std::sort(told.begin(), told.end());
    ASSERT_EQ(told, shown) << "the ranges told are the snapshot's segments, step " << i << ", seed " << seed;
  }
  EXPECT_EQ(log.unmatched_frees, 0) << "seed " << seed;
  EXPECT_EQ(log.double_allocs, 0) << "seed " << seed;
  EXPECT_GT(log.frees, 0) << "the run gave memory back while attached, seed " << seed;
  for (void* p : live) a->deallocate(p);
  a->empty_cache();
  EXPECT_TRUE(log.open.empty()) << "everything told was ended, seed " << seed;
  a->set_segment_listener(nullptr);
}

TEST(tracker_ranges_native, ExpandableRangesToldMatchTheMappedMemory) { run_random("expandable_segments:True", false); }
TEST(tracker_ranges_native, AttachedMidwayToldMatchesTheMappedMemory) { run_random("expandable_segments:True", true); }
TEST(tracker_ranges_native, OrdinarySegmentsToldMatchTheSegments) { run_random("", true); }

// Four threads on streams of their own grow and shrink expandable segments while the listener
// translates (under one mutex, as the extension's hub does): the same invariants at the end.
TEST(tracker_ranges_native, ThreadsOnTheirOwnStreamsKeepTheRangesRight) {
  const std::uint64_t seed = testing::test_seed();
  auto sim = std::make_shared<sim_driver>();
  std::unique_ptr<allocator> a = make_allocator(parse_config("expandable_segments:True"), sim);
  std::mutex mutex;
  told_log log;
  log.take(log.ranges.seed({}));
  a->set_segment_listener([&](const trace_entry& e) {
    std::lock_guard lock(mutex);
    std::vector<tracker_event> out;
    log.ranges.translate(e, out);
    log.take(out);
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      stream_t stream = nullptr;
      ASSERT_TRUE(sim->stream_create(0, &stream).ok());
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
      std::vector<void*> live;
      for (int i = 0; i < 200; ++i) {
        if (live.empty() || rng() % 3 != 0) {
          live.push_back(a->allocate((1 + rng() % 40) << 20, stream));
        } else {
          a->deallocate(live.back());
          live.pop_back();
        }
        if (i % 50 == 49) a->empty_cache();
      }
      for (void* p : live) a->deallocate(p);
    });
  }
  for (std::thread& th : threads) th.join();
  a->empty_cache();
  a->set_segment_listener(nullptr);
  EXPECT_EQ(log.unmatched_frees, 0) << "seed " << seed;
  EXPECT_EQ(log.double_allocs, 0) << "seed " << seed;
  EXPECT_GT(log.frees, 0) << "seed " << seed;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> shown;
  for (const segment_info& s : a->snapshot().segments) shown.emplace_back(s.address, s.address + s.total_size);
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> told;
  for (const auto& [address, size] : log.open) told.emplace_back(address, address + size);
  std::sort(shown.begin(), shown.end());
  std::sort(told.begin(), told.end());
  EXPECT_EQ(told, shown) << "seed " << seed;
}

}  // namespace
}  // namespace streampool::torch_ext
