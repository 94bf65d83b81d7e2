// pool_sleep_test.cpp — sleep and wake of a pool (device_pools::sleep / wake / sleep_state,
// docs/sleep-wake.md) on every backend and driver: an offloaded pool's allocations read the same
// bytes at the same addresses after wake; its physical memory goes back to the device while it
// sleeps (the driver's free memory and reserved_bytes say so); allocating from it is refused and
// freeing is allowed; the default pool sleeps with expandable segments and refuses with cudaMalloc
// segments; misuse gets one clear error; the cudaMallocAsync backend refuses and says why.
#include <algorithm>
#include <string>
#include <vector>

#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

class pool_sleep_test : public backend_test {
 protected:
  void SetUp() override {
    backend_test::SetUp();
    if (IsSkipped()) return;
    stream_ = new_stream();
    pool_ = allocator::create_pool_id();
  }
  void TearDown() override {
    if (alloc_ != nullptr && !IsSkipped()) {
      for (void* p : live_) alloc_->deallocate(p);
      live_.clear();
      synchronize();
      if (begun_) alloc_->release_pool(pool_);
      alloc_->empty_cache();
      EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0);
    }
    backend_test::TearDown();
  }

  void make_sleepable() {
    pool_options o;
    o.sleepable = true;
    begin();
    alloc_->set_pool_options(pool_, o);
  }
  void begin() {
    if (begun_) return;
    const stream_t stream = stream_;
    alloc_->begin_allocate_to_pool(pool_, [stream](stream_t s) { return s == stream; });
    alloc_->end_allocate_to_pool(pool_);
    begun_ = true;
  }
  /// `bytes` from pool_ on stream_.
  void* allocate_in_pool(std::size_t bytes) {
    const stream_t stream = stream_;
    alloc_->begin_allocate_to_pool(pool_, [stream](stream_t s) { return s == stream; });
    void* p = nullptr;
    try {
      p = alloc_->allocate(bytes, stream_);
    } catch (...) {
      alloc_->end_allocate_to_pool(pool_);
      alloc_->release_pool(pool_);
      throw;
    }
    alloc_->end_allocate_to_pool(pool_);
    alloc_->release_pool(pool_);  // the begin in make_sleepable keeps the one use
    live_.push_back(p);
    return p;
  }
  void fill(void* p, std::size_t bytes, std::uint8_t value) {
    check(*driver_, driver_->memset_async(0, p, value, bytes, stream_), "memset_async");
  }
  /// True when every byte of [p, p + bytes) is `value`; skips the test where the driver cannot check.
  bool holds(void* p, std::size_t bytes, std::uint8_t value) {
    byte_check c;
    const drv_result r = driver_->check_bytes(0, p, bytes, value, stream_, &c);
    if (r.code == status::not_supported) {
      ADD_FAILURE() << "check_bytes is not supported by this build (kernels off)";
      return false;
    }
    check(*driver_, r, "check_bytes");
    return c.mismatches == 0;
  }
  [[nodiscard]] std::size_t device_free() {
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    check(*driver_, driver_->mem_get_info(0, &free_bytes, &total), "mem_get_info");
    return free_bytes;
  }
  [[nodiscard]] std::int64_t reserved() const { return alloc_->stats().reserved_bytes[0].current; }

  /// The async backend refuses sleep: true when the test should end there.
  bool async_refuses() {
    if (is_native()) return false;
    pool_options o;
    o.sleepable = true;
    begin();
    try {
      alloc_->set_pool_options(pool_, o);
      ADD_FAILURE() << "sleepable accepted by the cudaMallocAsync backend";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("cudaMallocAsync"), std::string::npos) << e.what();
    }
    try {
      alloc_->pools().sleep(pool_);
      ADD_FAILURE() << "sleep accepted by the cudaMallocAsync backend";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("backend:native"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(alloc_->pools().sleep_state(pool_).asleep);
    return true;
  }

  stream_t stream_ = nullptr;
  mempool_id pool_;
  bool begun_ = false;
  std::vector<void*> live_;
};

TEST_P(pool_sleep_test, OffloadKeepsTheBytesAtTheSameAddresses) {
  if (async_refuses()) return;
  make_sleepable();
  void* big = allocate_in_pool(6 * mib + 4096);
  void* small = allocate_in_pool(1000);
  fill(big, 6 * mib + 4096, 0x5A);
  fill(small, 1000, 0x3C);
  // A first cycle makes the sleeper's copy streams, which take device memory of their own on a
  // GPU, and pins the backup it keeps: measured after it, with the backup kept (so the measured
  // sleep allocates nothing), the free memory shows only the pool's pages.
  sleep_options kept;
  kept.keep_backup = true;
  alloc_->pools().sleep(pool_, kept);
  alloc_->pools().wake(pool_);
  const std::int64_t reserved_awake = reserved();
  const std::int64_t allocated = alloc_->stats().allocated_bytes[0].current;
  // Asleep, the pool's memory is the device's again (>= 99% of what it reserved). On a GPU, test
  // processes running beside this one move the device's free memory between the two reads (seen
  // under ctest -j8 on the H200), so the best of up to three cycles counts.
  std::size_t gained = 0;
  std::string seen;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::size_t free_awake = device_free();
    alloc_->pools().sleep(pool_, kept);
    const std::size_t free_asleep = device_free();
    alloc_->pools().wake(pool_);
    const std::size_t got = free_asleep > free_awake ? free_asleep - free_awake : 0;
    seen += " " + std::to_string(got);
    gained = std::max(gained, got);
    if (gained >= static_cast<std::size_t>(reserved_awake) * 99 / 100) break;
  }
  EXPECT_GE(gained, static_cast<std::size_t>(reserved_awake) * 99 / 100) << "bytes back per cycle:" << seen;
  alloc_->pools().sleep(pool_);  // without keep_backup: the backup goes at wake
  const pool_sleep_state asleep = alloc_->pools().sleep_state(pool_);
  EXPECT_TRUE(asleep.asleep);
  EXPECT_EQ(asleep.mode, sleep_mode::offload);
  EXPECT_GE(asleep.offloaded_bytes, 6 * mib + 4096 + 1000);
  EXPECT_EQ(asleep.released_bytes + asleep.held_bytes, static_cast<std::size_t>(reserved_awake));
  EXPECT_EQ(reserved(), reserved_awake - static_cast<std::int64_t>(asleep.released_bytes));
  EXPECT_EQ(alloc_->stats().allocated_bytes[0].current, allocated) << "the allocations live on";
  bool listed_asleep = false;
  for (const segment_info& s : alloc_->snapshot().segments) listed_asleep |= s.pool == pool_ && s.is_asleep;
  EXPECT_TRUE(listed_asleep);

  alloc_->pools().wake(pool_);
  EXPECT_FALSE(alloc_->pools().sleep_state(pool_).asleep);
  EXPECT_EQ(alloc_->pools().sleep_state(pool_).backup_bytes, 0u) << "no keep_backup: the backup is freed";
  EXPECT_EQ(reserved(), reserved_awake);
  EXPECT_TRUE(holds(big, 6 * mib + 4096, 0x5A));
  EXPECT_TRUE(holds(small, 1000, 0x3C));
}

TEST_P(pool_sleep_test, AKeptBackupServesTheNextSleep) {
  if (async_refuses()) return;
  make_sleepable();
  void* p = allocate_in_pool(3 * mib);
  fill(p, 3 * mib, 0x11);
  sleep_options keep;
  keep.keep_backup = true;
  alloc_->pools().sleep(pool_, keep);
  alloc_->pools().wake(pool_);
  const std::size_t kept = alloc_->pools().sleep_state(pool_).backup_bytes;
  EXPECT_GE(kept, 3 * mib);
  fill(p, 3 * mib, 0x22);
  alloc_->pools().sleep(pool_, keep);
  EXPECT_EQ(alloc_->pools().sleep_state(pool_).backup_bytes, kept) << "the same buffer, not a new one";
  alloc_->pools().wake(pool_);
  EXPECT_TRUE(holds(p, 3 * mib, 0x22));
}

TEST_P(pool_sleep_test, DiscardGivesTheMemoryBackWithoutCopies) {
  if (async_refuses()) return;
  make_sleepable();
  void* p = allocate_in_pool(4 * mib);
  fill(p, 4 * mib, 0x77);
  sleep_options discard;
  discard.mode = sleep_mode::discard;
  alloc_->pools().sleep(pool_, discard);
  const pool_sleep_state s = alloc_->pools().sleep_state(pool_);
  EXPECT_EQ(s.offloaded_bytes, 0u);
  EXPECT_EQ(s.backup_bytes, 0u);
  EXPECT_GT(s.released_bytes, 0u);
  alloc_->pools().wake(pool_);
  fill(p, 4 * mib, 0x78);  // usable again at the same address
  EXPECT_TRUE(holds(p, 4 * mib, 0x78));
  if (sim_ != nullptr) {
    fill(p, 4 * mib, 0x77);
    alloc_->pools().sleep(pool_, discard);
    alloc_->pools().wake(pool_);
    EXPECT_FALSE(holds(p, 4 * mib, 0x77)) << "the sim poisons what discard dropped";
  }
}

TEST_P(pool_sleep_test, AllocationIsRefusedWhileAsleepAndFreeingIsAllowed) {
  if (async_refuses()) return;
  make_sleepable();
  void* a = allocate_in_pool(2 * mib);
  void* b = allocate_in_pool(2 * mib);
  alloc_->pools().sleep(pool_);
  try {
    (void)allocate_in_pool(1 * mib);
    ADD_FAILURE() << "allocated from a sleeping pool";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("asleep"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)alloc_->pools().allocate_at(a, 512, pool_), error);
  alloc_->deallocate(b);  // freeing touches no device memory
  live_.erase(live_.begin() + 1);
  alloc_->empty_cache();  // leaves the sleeping pool alone
  EXPECT_TRUE(alloc_->pools().sleep_state(pool_).asleep);
  void* general = alloc_->allocate(1 * mib, stream_);  // other pools are unaffected
  alloc_->deallocate(general);
  alloc_->pools().wake(pool_);
  void* again = allocate_in_pool(2 * mib);  // b's free block serves it
  EXPECT_EQ(again, b);
  (void)a;
}

TEST_P(pool_sleep_test, MisuseGetsOneClearError) {
  if (async_refuses()) return;
  make_sleepable();
  (void)allocate_in_pool(1 * mib);
  EXPECT_THROW(alloc_->pools().wake(pool_), error) << "not asleep";
  EXPECT_THROW(alloc_->pools().sleep(allocator::create_pool_id()), error) << "unknown pool";
  EXPECT_THROW((void)alloc_->pools().sleep_state(allocator::create_pool_id()), error);
  sleep_options bad;
  bad.mode = static_cast<sleep_mode>(7);
  EXPECT_THROW(alloc_->pools().sleep(pool_, bad), error);
  const stream_t stream = stream_;
  alloc_->begin_allocate_to_pool(pool_, [stream](stream_t s) { return s == stream; });
  EXPECT_THROW(alloc_->pools().sleep(pool_), error) << "not while being captured into";
  alloc_->end_allocate_to_pool(pool_);
  alloc_->release_pool(pool_);
  alloc_->pools().sleep(pool_);
  EXPECT_THROW(alloc_->pools().sleep(pool_), error) << "already asleep";
  alloc_->pools().wake(pool_);
}

TEST_P(pool_sleep_test, CudaMallocSegmentsCannotSleep) {
  if (async_refuses()) return;
  void* p = alloc_->allocate(1 * mib, stream_);  // default pool, expandable_segments off
  live_.push_back(p);
  try {
    alloc_->pools().sleep(mempool_id{});
    ADD_FAILURE() << "a cudaMalloc segment slept";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("expandable_segments:True"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(alloc_->pools().sleep_state(mempool_id{}).asleep);
  alloc_->deallocate(alloc_->allocate(1 * mib, stream_));  // still allocating
}

TEST_P(pool_sleep_test, TheDefaultPoolSleepsWithExpandableSegments) {
  if (async_refuses()) return;
  auto alloc = make_allocator(parse_config(GetParam().config + ",expandable_segments:True"), driver_);
  void* p = alloc->allocate(5 * mib, stream_);
  check(*driver_, driver_->memset_async(0, p, 0x42, 5 * mib, stream_), "memset_async");
  const std::size_t free_awake = device_free();
  alloc->pools().sleep(mempool_id{});
  EXPECT_GE(device_free() - free_awake, 5 * mib);
  EXPECT_THROW((void)alloc->allocate(512, stream_), error) << "the default pool sleeps";
  EXPECT_THROW((void)alloc->allocate(512, new_stream()), error) << "on every stream";
  alloc->pools().wake(mempool_id{});
  byte_check c;
  check(*driver_, driver_->check_bytes(0, p, 5 * mib, 0x42, stream_, &c), "check_bytes");
  EXPECT_EQ(c.mismatches, 0u);
  alloc->deallocate(alloc->allocate(512, stream_));
  alloc->deallocate(p);
}

INSTANTIATE_TEST_SUITE_P(every_backend, pool_sleep_test, ::testing::ValuesIn(all_backend_cases()), backend_case_name);

}  // namespace
}  // namespace streampool::testing
