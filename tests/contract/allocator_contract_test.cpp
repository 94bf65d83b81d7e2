// allocator_contract_test.cpp — the allocator contract, written once and run for every backend on
// every driver (sim everywhere; the real CUDA driver where a GPU is present, skipped otherwise).
#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

using contract = backend_test;

TEST_P(contract, AllocationIsAlignedAndAccounted) {
  void* p = alloc_->allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  memory_stats s = alloc_->stats();
  EXPECT_GE(s.allocated_bytes[0].current, 1000);
  EXPECT_EQ(s.requested_bytes[0].current, 1000);
  EXPECT_EQ(s.allocation[0].current, 1);
  EXPECT_GE(s.reserved_bytes[0].current, s.allocated_bytes[0].current);
  alloc_->deallocate(p);
  s = alloc_->stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.requested_bytes[0].current, 0);
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_GE(s.allocated_bytes[0].peak, 1000);
}

TEST_P(contract, LiveAllocationsNeverOverlap) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size(1, 3 * mib);
  std::map<std::uintptr_t, std::size_t> live;
  std::vector<void*> order;
  for (int i = 0; i < 300; ++i) {
    if (!order.empty() && rng() % 3 == 0) {
      const std::size_t k = rng() % order.size();
      live.erase(reinterpret_cast<std::uintptr_t>(order[k]));
      alloc_->deallocate(order[k]);
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    const std::size_t n = size(rng);
    void* p = alloc_->allocate(n);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto next = live.lower_bound(a);
    if (next != live.end()) {
      ASSERT_LE(a + n, next->first) << "overlaps the next live block";
    }
    if (next != live.begin()) {
      --next;
      ASSERT_LE(next->first + next->second, a) << "overlaps the previous live block";
    }
    live[a] = n;
    order.push_back(p);
  }
  for (void* p : order) alloc_->deallocate(p);
  EXPECT_EQ(alloc_->stats().allocated_bytes[0].current, 0);
}

TEST_P(contract, BadInputIsAnErrorAndChangesNothing) {
  void* p = alloc_->allocate(4096);
  const auto before = alloc_->stats().to_map();
  EXPECT_THROW((void)alloc_->allocate(0), error);
  EXPECT_THROW(alloc_->deallocate(static_cast<char*>(p) + 512), error);  // interior pointer
  int host_object = 0;
  EXPECT_THROW(alloc_->deallocate(&host_object), error);                 // not ours
  EXPECT_THROW(alloc_->record_stream(&host_object, nullptr), error);
  EXPECT_THROW((void)alloc_->allocate(64, nullptr, 99), error);           // no such device
  EXPECT_THROW(alloc_->set_memory_fraction(1.5), error);
  EXPECT_EQ(alloc_->stats().to_map(), before);
  alloc_->deallocate(p);
  const auto after_free = alloc_->stats().to_map();
  EXPECT_THROW(alloc_->deallocate(p), error);                              // double free
  EXPECT_EQ(alloc_->stats().to_map(), after_free);
}

TEST_P(contract, ImpossibleRequestsAreOutOfMemoryAndTheAllocatorKeepsWorking) {
  EXPECT_THROW((void)alloc_->allocate(std::size_t{1} << 60), out_of_memory);
  try {
    (void)alloc_->allocate(device_total() * 2);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("Tried to allocate"), std::string::npos) << e.what();
    EXPECT_EQ(e.device(), 0);
  }
  EXPECT_GE(alloc_->stats().num_ooms, 1);
  void* p = alloc_->allocate(mib);
  EXPECT_NE(p, nullptr);
  alloc_->deallocate(p);
}

TEST_P(contract, MemoryFractionCapsNewMemory) {
  alloc_->empty_cache();
  alloc_->set_memory_fraction(0.0);
  EXPECT_DOUBLE_EQ(alloc_->memory_fraction(), 0.0);
  EXPECT_THROW((void)alloc_->allocate(64 * mib), out_of_memory);
  alloc_->set_memory_fraction(1.0);
  void* p = alloc_->allocate(64 * mib);
  alloc_->deallocate(p);
}

TEST_P(contract, EmptyCacheReturnsEverythingWhenNothingIsLive) {
  std::vector<void*> blocks;
  for (const std::size_t n : {std::size_t{512}, std::size_t{3 * mib}, std::size_t{40 * mib}}) {
    blocks.push_back(alloc_->allocate(n));
  }
  for (void* p : blocks) alloc_->deallocate(p);
  alloc_->empty_cache();
  const memory_stats s = alloc_->stats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  if (sim_ != nullptr) {
    EXPECT_EQ(sim_->bytes_in_use(0), 0u);
  }
}

TEST_P(contract, PeaksResetToCurrent) {
  void* a = alloc_->allocate(8 * mib);
  void* b = alloc_->allocate(8 * mib);
  alloc_->deallocate(b);
  memory_stats s = alloc_->stats();
  EXPECT_GT(s.allocated_bytes[0].peak, s.allocated_bytes[0].current);
  alloc_->reset_peak_stats();
  s = alloc_->stats();
  EXPECT_EQ(s.allocated_bytes[0].peak, s.allocated_bytes[0].current);
  alloc_->deallocate(a);
}

TEST_P(contract, SnapshotShowsLiveAllocations) {
  void* p = alloc_->allocate(3000);
  const memory_snapshot snap = alloc_->snapshot();
  bool found = false;
  for (const segment_info& seg : snap.segments) {
    for (const block_info& b : seg.blocks) {
      if (b.address == reinterpret_cast<std::uintptr_t>(p)) {
        found = true;
        EXPECT_EQ(b.state, block_state::active_allocated);
        EXPECT_EQ(b.requested_size, 3000u);
      }
    }
  }
  EXPECT_TRUE(found);
  EXPECT_NE(snap.to_json().find("\"segments\""), std::string::npos);
  alloc_->deallocate(p);
}

TEST_P(contract, TraceRecordsAllocAndFree) {
  alloc_->record_history(true, 100);
  void* p = alloc_->allocate(700);
  alloc_->deallocate(p);
  const auto entries = alloc_->trace();
  const auto has = [&](trace_action action) {
    return std::any_of(entries.begin(), entries.end(), [&](const trace_entry& e) {
      return e.action == action && e.address == reinterpret_cast<std::uintptr_t>(p);
    });
  };
  EXPECT_TRUE(has(trace_action::alloc));
  EXPECT_TRUE(has(trace_action::free_requested));
  alloc_->record_history(false);
  EXPECT_TRUE(alloc_->trace().empty());
}

TEST_P(contract, RecordStreamKeepsTheBlockUntilTheStreamIsDone) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  void* p = alloc_->allocate(mib, a);
  alloc_->record_stream(p, b);
  alloc_->record_stream(p, a);  // the allocation stream itself: no effect
  alloc_->deallocate(p);
  synchronize();
  void* q = alloc_->allocate(mib, a);
  alloc_->deallocate(q);
  synchronize();
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().active_bytes[0].current, 0);
}

TEST_P(contract, ThreadsOnTheirOwnStreamsLoseNothing) {
  constexpr int threads = 4;
  std::vector<stream_t> streams;
  for (int t = 0; t < threads; ++t) streams.push_back(new_stream());
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<void*> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.size() > 8 || (!mine.empty() && rng() % 2)) {
          alloc_->deallocate(mine.back());
          mine.pop_back();
        } else {
          mine.push_back(alloc_->allocate(512 + rng() % (2 * mib), streams[static_cast<std::size_t>(t)]));
        }
      }
      for (void* p : mine) alloc_->deallocate(p);
    });
  }
  for (auto& w : workers) w.join();
  const memory_stats s = alloc_->stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.allocation[0].current, 0);
  synchronize();
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0);
}

INSTANTIATE_TEST_SUITE_P(every_backend, contract, ::testing::ValuesIn(all_backend_cases()), backend_case_name);

}  // namespace
}  // namespace streampool::testing
