// pool_options_test.cpp — the options of a private pool (Note [Pool options] in
// src/core/allocator.cpp), as torch.cuda.MemPool(no_split=..., use_on_oom=...) sets them, on every
// backend and driver: a no_split pool hands its blocks out whole; a general allocation about to
// fail with out of memory takes a free block of a use_on_oom pool on its stream, and of no other
// pool; a pool with a segment provider (a MemPool with an allocator of its own) gets its segments
// from it and gives them back to it; the setters refuse the default pool and unknown pools.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

pool_options options(bool no_split, bool use_on_oom, std::shared_ptr<const segment_provider> provider = nullptr) {
  pool_options o;
  o.no_split = no_split;
  o.use_on_oom = use_on_oom;
  o.provider = std::move(provider);
  return o;
}

class pool_options_test : public backend_test {
 protected:
  void SetUp() override {
    backend_test::SetUp();
    if (IsSkipped()) return;
    stream_ = new_stream();
    pool_ = allocator::create_pool_id();
  }
  void TearDown() override {
    if (alloc_ != nullptr && !IsSkipped()) {
      alloc_->set_memory_fraction(1.0);
      for (void* p : live_) alloc_->deallocate(p);
      synchronize();
      for (const mempool_id pool : begun_) alloc_->release_pool(pool);
      alloc_->empty_cache();
      EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0);
    }
    backend_test::TearDown();
  }

  /// `bytes` allocated on `stream_`, routed to `pool` (which is begun here the first time).
  void* allocate_in(mempool_id pool, std::size_t bytes) {
    const stream_t stream = stream_;
    alloc_->begin_allocate_to_pool(pool, [stream](stream_t s) { return s == stream; });
    if (std::find(begun_.begin(), begun_.end(), pool) == begun_.end()) {
      begun_.push_back(pool);
    } else {
      alloc_->release_pool(pool);  // a further begin adds a use: keep one per pool
    }
    void* p = nullptr;
    try {
      p = alloc_->allocate(bytes, stream_);
    } catch (...) {
      alloc_->end_allocate_to_pool(pool);
      throw;
    }
    alloc_->end_allocate_to_pool(pool);
    return p;
  }

  /// Caps this allocator at what it holds now plus `headroom` bytes.
  void cap_at_held_plus(std::size_t headroom) {
    const auto held = static_cast<double>(alloc_->stats().reserved_bytes[0].current);
    alloc_->set_memory_fraction((held + static_cast<double>(headroom)) / static_cast<double>(device_total()));
  }

  /// The pool's segments in a snapshot.
  [[nodiscard]] std::vector<segment_info> segments_of(mempool_id pool) const {
    std::vector<segment_info> out;
    for (const segment_info& s : alloc_->snapshot().segments) {
      if (s.pool == pool) out.push_back(s);
    }
    return out;
  }

  stream_t stream_ = nullptr;
  mempool_id pool_{};
  std::vector<mempool_id> begun_;
  std::vector<void*> live_;
};

TEST_P(pool_options_test, OptionsAreKeptPerPoolAndBadPoolsAreRefused) {
  EXPECT_THROW(alloc_->set_pool_options(mempool_id{}, {}), error);
  EXPECT_THROW((void)alloc_->get_pool_options(mempool_id{}), error);
  EXPECT_THROW(alloc_->set_pool_options(pool_, {}), error) << "a pool must exist (begun) first";
  EXPECT_THROW((void)alloc_->get_pool_options(pool_), error);
  live_.push_back(allocate_in(pool_, 4096));
  EXPECT_EQ(alloc_->get_pool_options(pool_), pool_options{});
  alloc_->set_pool_options(pool_, options(true, true));
  EXPECT_EQ(alloc_->get_pool_options(pool_), options(true, true));
  alloc_->set_pool_options(pool_, options(true, false));
  EXPECT_FALSE(alloc_->get_pool_options(pool_).use_on_oom);
  EXPECT_THROW(alloc_->set_pool_options(pool_, {}, 99), error);  // no such device
}

TEST_P(pool_options_test, ANoSplitPoolHandsOutWholeBlocks) {
  live_.push_back(allocate_in(pool_, 4096));  // creates the pool
  alloc_->deallocate(live_.back());
  live_.clear();
  alloc_->set_pool_options(pool_, options(true, false));
  void* a = allocate_in(pool_, 1000);
  void* b = allocate_in(pool_, 1000);
  live_ = {a, b};
  // Each allocation owns a whole segment: a and b lie in different segments, and (native) no
  // segment of the pool holds a second block. (The cudaMallocAsync backend's snapshot shows the
  // part of a private block beyond the request as an inactive block of its segment.)
  const std::vector<segment_info> segments = segments_of(pool_);
  auto segment_of = [&](const void* p) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    for (std::size_t i = 0; i < segments.size(); ++i) {
      if (address >= segments[i].address && address < segments[i].address + segments[i].total_size) return i;
    }
    return segments.size();
  };
  ASSERT_LT(segment_of(a), segments.size());
  ASSERT_LT(segment_of(b), segments.size());
  EXPECT_NE(segment_of(a), segment_of(b));
  if (is_native()) {
    for (const segment_info& s : segments) {
      EXPECT_EQ(s.blocks.size(), 1u) << "a block of a no_split pool was split";
    }
    // The first 1000-byte request found the 2 MiB block the 4096-byte one left and took it whole.
    EXPECT_EQ(alloc_->stats().allocated_bytes[0].current, static_cast<std::int64_t>(4 * mib));
  }
}

TEST_P(pool_options_test, WithoutNoSplitSmallAllocationsShareASegment) {
  if (!is_native()) GTEST_SKIP() << "the cudaMallocAsync backend's private blocks are never split";
  void* a = allocate_in(pool_, 1000);
  void* b = allocate_in(pool_, 1000);
  live_ = {a, b};
  const std::vector<segment_info> segments = segments_of(pool_);
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].blocks.size(), 3u);  // a, b and the free rest
}

TEST_P(pool_options_test, AGeneralAllocationAboutToFailTakesAFreeBlockOfAUseOnOomPool) {
  void* pooled = allocate_in(pool_, 64 * mib);
  alloc_->deallocate(pooled);  // free memory of the pool now
  synchronize();
  alloc_->set_pool_options(pool_, options(false, true));
  cap_at_held_plus(16 * mib);
  void* p = alloc_->allocate(48 * mib, stream_);  // needs 48 MiB of new memory: the cap refuses it
  live_.push_back(p);
  EXPECT_EQ(p, pooled) << "the pool's free block serves it";
  EXPECT_EQ(alloc_->stats().num_ooms, 0);
  // The block stays the pool's: freed, it is the pool's free memory again, and serves a second
  // general allocation the same way.
  alloc_->deallocate(p);
  live_.clear();
  void* again = alloc_->allocate(40 * mib, stream_);
  live_.push_back(again);
  EXPECT_EQ(again, pooled);
  const std::vector<segment_info> segments = segments_of(pool_);
  ASSERT_FALSE(segments.empty());
  EXPECT_EQ(segments[0].address, reinterpret_cast<std::uintptr_t>(pooled));
}

TEST_P(pool_options_test, OnlyUseOnOomPoolsOnTheSameStreamAndNotBeingRecordedToServe) {
  void* pooled = allocate_in(pool_, 64 * mib);
  alloc_->deallocate(pooled);
  synchronize();
  cap_at_held_plus(16 * mib);
  // Not use_on_oom: out of memory.
  EXPECT_THROW((void)alloc_->allocate(48 * mib, stream_), out_of_memory);
  alloc_->set_pool_options(pool_, options(false, true));
  // Another stream: the pool's free block was freed on stream_, so it is not handed over.
  const stream_t other = new_stream();
  EXPECT_THROW((void)alloc_->allocate(48 * mib, other), out_of_memory);
  // Being recorded to (its free blocks may be the recording's): not asked.
  const stream_t stream = stream_;
  alloc_->begin_allocate_to_pool(pool_, [other](stream_t s) { return s == other; });
  alloc_->release_pool(pool_);  // one use, as before
  EXPECT_THROW((void)alloc_->allocate(48 * mib, stream), out_of_memory);
  alloc_->end_allocate_to_pool(pool_);
  // An allocation routed to a pool fails with its own pool, even if another pool could serve it.
  const mempool_id second = allocator::create_pool_id();
  live_.push_back(allocate_in(second, 4096));
  const stream_t routed = stream_;
  alloc_->begin_allocate_to_pool(second, [routed](stream_t s) { return s == routed; });
  alloc_->release_pool(second);
  EXPECT_THROW((void)alloc_->allocate(48 * mib, stream_), out_of_memory);
  alloc_->end_allocate_to_pool(second);
  // And now it serves.
  void* p = alloc_->allocate(48 * mib, stream_);
  live_.push_back(p);
  EXPECT_EQ(p, pooled);
}

/// What a counting provider handed out and got back; shared with the provider's functions, which
/// the allocator may call after the test body (teardown).
struct provider_log {
  std::shared_ptr<driver> drv;
  std::map<void*, std::size_t> live;
  int allocations = 0;
  int deallocations = 0;
  bool refuse = false;           ///< allocate returns null
  bool throw_on_allocate = false;
  bool throw_on_deallocate = false;
  std::uintptr_t misalign = 0;   ///< added to what allocate returns
};

/// A provider over the test's own driver, counting into `log`.
std::shared_ptr<const segment_provider> counting_provider(const std::shared_ptr<provider_log>& log) {
  auto p = std::make_shared<segment_provider>();
  p->name = "counting";
  p->allocate = [log](std::size_t bytes, int device, stream_t) -> void* {
    if (log->throw_on_allocate) throw std::runtime_error("provider: allocate failed");
    void* ptr = nullptr;
    if (log->refuse || !log->drv->malloc(device, bytes, &ptr).ok()) return nullptr;
    ptr = static_cast<char*>(ptr) + log->misalign;
    log->live[ptr] = bytes;
    ++log->allocations;
    return ptr;
  };
  p->deallocate = [log](void* ptr, std::size_t bytes, int device, stream_t) {
    if (log->throw_on_deallocate) throw std::runtime_error("provider: deallocate failed");
    EXPECT_EQ(log->live.count(ptr), 1u) << "deallocate of a pointer the provider did not hand out";
    EXPECT_EQ(log->live[ptr], bytes);
    log->live.erase(ptr);
    ++log->deallocations;
    (void)log->drv->free(device, static_cast<char*>(ptr) - log->misalign);
  };
  return p;
}

TEST_P(pool_options_test, AProviderPoolsSegmentsComeFromItAndGoBackToIt) {
  auto provider = std::make_shared<provider_log>();
  provider->drv = driver_;
  live_.push_back(allocate_in(pool_, 4096));  // creates the pool: one segment from the device
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(provider)));
  void* p = allocate_in(pool_, 3 * mib);
  void* q = alloc_->allocate(3 * mib, stream_);  // general: from the device
  EXPECT_EQ(provider->allocations, 1);
  ASSERT_EQ(provider->live.size(), 1u);
  const auto [base, bytes] = *provider->live.begin();
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  EXPECT_TRUE(address >= reinterpret_cast<std::uintptr_t>(base) &&
              address + 3 * mib <= reinterpret_cast<std::uintptr_t>(base) + bytes)
      << "the pool's new allocation is not in the provider's memory";
  for (const segment_info& s : segments_of(pool_)) EXPECT_FALSE(s.is_expandable);
  alloc_->deallocate(p);
  alloc_->deallocate(q);
  synchronize();
  alloc_->empty_cache();  // the pool is in use: its cache stays
  EXPECT_EQ(provider->deallocations, 0);
  for (void* l : live_) alloc_->deallocate(l);
  live_.clear();
  alloc_->release_pool(pool_);
  begun_.clear();
  alloc_->empty_cache();
  EXPECT_EQ(provider->deallocations, 1);
  EXPECT_TRUE(provider->live.empty());
  EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0);
}

TEST_P(pool_options_test, AProviderWithNoMemoryIsAnOutOfMemoryOfThePool) {
  auto provider = std::make_shared<provider_log>();
  provider->drv = driver_;
  live_.push_back(allocate_in(pool_, 4096));
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(provider)));
  provider->refuse = true;
  const auto before = alloc_->stats().reserved_bytes[0].current;
  try {
    live_.push_back(allocate_in(pool_, 64 * mib));
    ADD_FAILURE() << "the provider had no memory, yet the allocation succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("segment provider 'counting'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, before);
  provider->refuse = false;
  live_.push_back(allocate_in(pool_, 64 * mib));
  EXPECT_EQ(provider->allocations, 1);
}

TEST_P(pool_options_test, TeardownGivesAProvidersSegmentsBack) {
  auto provider = std::make_shared<provider_log>();
  provider->drv = driver_;
  live_.push_back(allocate_in(pool_, 4096));
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(provider)));
  void* p = allocate_in(pool_, 8 * mib);
  alloc_->deallocate(p);
  synchronize();
  alloc_.reset();  // the pool's cache still holds the provider's segment
  EXPECT_EQ(provider->allocations, 1);
  EXPECT_EQ(provider->deallocations, 1);
  EXPECT_TRUE(provider->live.empty());
}

TEST_P(pool_options_test, AProviderThatThrowsOrMisalignsChangesNothing) {
  auto provider = std::make_shared<provider_log>();
  provider->drv = driver_;
  live_.push_back(allocate_in(pool_, 4096));
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(provider)));
  const auto before = alloc_->stats().to_map();
  provider->throw_on_allocate = true;
  EXPECT_THROW((void)allocate_in(pool_, 64 * mib), std::runtime_error);
  EXPECT_EQ(alloc_->stats().to_map(), before);
  provider->throw_on_allocate = false;
  provider->misalign = 128;
  try {
    (void)allocate_in(pool_, 64 * mib);
    ADD_FAILURE() << "a misaligned segment was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("not aligned to 256 bytes"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(provider->live.empty()) << "the misaligned memory was not given back";
  EXPECT_EQ(alloc_->stats().to_map(), before);
  provider->misalign = 0;
  live_.push_back(allocate_in(pool_, 64 * mib));  // and it keeps working
  EXPECT_EQ(provider->live.size(), 1u);
}

TEST_P(pool_options_test, AProviderThatCannotTakeASegmentBackKeepsItCached) {
  auto provider = std::make_shared<provider_log>();
  provider->drv = driver_;
  live_.push_back(allocate_in(pool_, 4096));
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(provider)));
  alloc_->deallocate(allocate_in(pool_, 8 * mib));
  for (void* l : live_) alloc_->deallocate(l);
  live_.clear();
  synchronize();
  alloc_->release_pool(pool_);
  begun_.clear();
  provider->throw_on_deallocate = true;
  const auto reserved = alloc_->stats().reserved_bytes[0].current;
  if (is_native()) {
    try {
      alloc_->empty_cache();
      ADD_FAILURE() << "a failed give-back was not reported";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("segment provider 'counting'"), std::string::npos) << e.what();
    }
  } else {
    alloc_->empty_cache();  // the cudaMallocAsync backend keeps the block quietly
  }
  EXPECT_EQ(provider->live.size(), 1u);
  EXPECT_GE(alloc_->stats().reserved_bytes[0].current, static_cast<std::int64_t>(8 * mib));
  EXPECT_LE(alloc_->stats().reserved_bytes[0].current, reserved);
  provider->throw_on_deallocate = false;
  alloc_->empty_cache();
  EXPECT_TRUE(provider->live.empty());
}

TEST_P(pool_options_test, SegmentsGoBackToTheProviderTheyCameFrom) {
  auto first = std::make_shared<provider_log>();
  first->drv = driver_;
  auto second = std::make_shared<provider_log>();
  second->drv = driver_;
  live_.push_back(allocate_in(pool_, 4096));
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(first)));
  live_.push_back(allocate_in(pool_, 8 * mib));
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(second)));
  live_.push_back(allocate_in(pool_, 32 * mib));
  EXPECT_EQ(first->allocations, 1);
  EXPECT_EQ(second->allocations, 1);
  for (void* l : live_) alloc_->deallocate(l);
  live_.clear();
  synchronize();
  alloc_->release_pool(pool_);
  begun_.clear();
  alloc_->empty_cache();
  EXPECT_EQ(first->deallocations, 1);
  EXPECT_EQ(second->deallocations, 1);
  EXPECT_TRUE(first->live.empty() && second->live.empty());
}

TEST_P(pool_options_test, AProviderServesACaptureWithoutBreakingIt) {
  // The provider runs with the thread in relaxed capture mode, as cudaMalloc would: its own
  // cudaMalloc during a global-mode capture must not invalidate the capture.
  auto provider = std::make_shared<provider_log>();
  provider->drv = driver_;
  live_.push_back(allocate_in(pool_, 4096));
  alloc_->set_pool_options(pool_, options(false, false, counting_provider(provider)));
  const stream_t stream = stream_;
  alloc_->begin_allocate_to_pool(pool_, [stream](stream_t s) { return s == stream; });
  alloc_->release_pool(pool_);  // one use, as before
  ASSERT_TRUE(driver_->stream_begin_capture(stream_, capture_mode::global).ok());
  void* p = nullptr;
  try {
    p = alloc_->allocate(8 * mib, stream_);
  } catch (...) {
    graph_t broken = nullptr;
    (void)driver_->stream_end_capture(stream_, &broken);
    if (broken != nullptr) (void)driver_->graph_destroy(broken);
    alloc_->end_allocate_to_pool(pool_);
    throw;
  }
  graph_t graph = nullptr;
  EXPECT_TRUE(driver_->stream_end_capture(stream_, &graph).ok()) << "the provider's call invalidated the capture";
  alloc_->end_allocate_to_pool(pool_);
  if (graph != nullptr) {
    EXPECT_TRUE(driver_->graph_destroy(graph).ok());
  }
  live_.push_back(p);
  EXPECT_EQ(provider->allocations, 1);
}

TEST_P(pool_options_test, AReleasedPoolNeverServes) {
  if (!is_native()) {
    GTEST_SKIP() << "the cudaMallocAsync backend gives a released pool's idle blocks back in its OOM retry, "
                    "so no idle block is left to take";
  }
  // A 64 MiB segment of the pool: a free 40 MiB block and a live 8 MiB one that keeps the segment.
  alloc_->deallocate(allocate_in(pool_, 64 * mib));
  void* head = allocate_in(pool_, 40 * mib);  // split off the 64 MiB block
  void* tail = allocate_in(pool_, 8 * mib);   // from its rest
  live_.push_back(tail);
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(tail), reinterpret_cast<std::uintptr_t>(head) + 40 * mib);
  alloc_->deallocate(head);
  synchronize();
  alloc_->set_pool_options(pool_, options(false, true));
  alloc_->release_pool(pool_);  // a deleted MemPool (its tensors may outlive it)
  begun_.clear();
  cap_at_held_plus(16 * mib);
  EXPECT_THROW(live_.push_back(alloc_->allocate(32 * mib, stream_)), out_of_memory);
}

TEST_P(pool_options_test, ABorrowedBlockIsThePoolsInTheTrace) {
  void* pooled = allocate_in(pool_, 64 * mib);
  alloc_->deallocate(pooled);
  synchronize();
  alloc_->set_pool_options(pool_, options(false, true));
  cap_at_held_plus(16 * mib);
  alloc_->record_history(true);
  void* p = alloc_->allocate(48 * mib, stream_);
  live_.push_back(p);
  ASSERT_EQ(p, pooled);
  bool found = false;
  for (const trace_entry& e : alloc_->trace()) {
    if (e.action != trace_action::alloc || e.address != reinterpret_cast<std::uintptr_t>(p)) continue;
    found = true;
    EXPECT_EQ(e.pool, pool_) << "the borrowed allocation is traced outside its pool";
  }
  EXPECT_TRUE(found) << "no alloc entry for the borrowed block";
  alloc_->record_history(false);
}

INSTANTIATE_TEST_SUITE_P(every_backend, pool_options_test, ::testing::ValuesIn(all_backend_cases()),
                         backend_case_name);

}  // namespace
}  // namespace streampool::testing
