// async_oom_advice_test.cpp — the cause sentence of the cudaMallocAsync backend's OOM message
// (Note [OOM advice for a stream-ordered pool]): when the pool's cache (reserved minus used bytes)
// could hold the request the message says so and what releases it — fragmentation of the pool
// after a trim, empty_cache() outside a capture, empty_cache() when the trim was not possible —
// otherwise the device is full, naming memory held outside the pool. Never native-only keys.
// The sim pool maps 32 MiB granules of one address range (Note [Sim pool model]), which makes the
// pieces exact.
#include <functional>
#include <string>

#include "async_test_support.hpp"
#include "core/oom_message.hpp"

namespace streampool::testing {
namespace {

class async_oom_advice : public async_fixture {
 protected:
  void SetUp() override {
    make_with_capacity(96 * mib);  // three sim pool chunks
  }

  void make_with_capacity(std::size_t capacity) {
    sim_options options;
    options.capacity = capacity;
    make(options);
  }

  static void expect_no_native_keys(const std::string& message) {
    EXPECT_FALSE(contains(message, "expandable_segments:True to avoid")) << message;
    EXPECT_FALSE(contains(message, "max_split_size_mb")) << message;
    EXPECT_FALSE(contains(message, "Fragmentation is the cause")) << message;
  }
};

TEST_F(async_oom_advice, CacheInPiecesAfterATrimIsFragmentationOfThePool) {
  make_with_capacity(64 * mib);
  // 10 MiB live, 12 free, 10 live, 12 free, 10 live, 10 free: both granules (the whole device)
  // are mapped, 34 MiB are cached in pieces of 12, 12 and 10 MiB, and no granule is idle.
  void* live[3];
  void* freed[3];
  for (int i = 0; i < 3; ++i) {
    live[i] = alloc_->allocate(10 * mib);
    freed[i] = alloc_->allocate(i < 2 ? 12 * mib : 10 * mib);
  }
  for (void* ptr : freed) alloc_->deallocate(ptr);
  const std::string message = message_of([&] { (void)alloc_->allocate(16 * mib); });
  EXPECT_EQ(alloc_->stats(0).num_alloc_retries, 1);  // trimmed (nothing idle to release) and retried
  EXPECT_TRUE(contains(message, "still caches 34.00 MiB (reserved but unused) after it was trimmed")) << message;
  EXPECT_TRUE(contains(message, "fragmentation of the pool")) << message;
  EXPECT_TRUE(contains(message, "free long-lived allocations")) << message;
  EXPECT_TRUE(contains(message, "The device was synchronised and the pool trimmed")) << message;
  expect_no_native_keys(message);
  alloc_->deallocate(live[2]);
  alloc_->deallocate(alloc_->allocate(16 * mib));  // fits once the last granule's pieces merge
  alloc_->deallocate(live[0]);
  alloc_->deallocate(live[1]);
}

/// 32 MiB live, an idle 32 MiB granule, 8 MiB live after it: 96 MiB reserved of 112, 56 cached;
/// a 48 MiB request must map a fourth granule, which only fits once the idle one is released.
class async_oom_advice_idle_granule : public async_oom_advice {
 protected:
  void SetUp() override {
    make_with_capacity(112 * mib);
    first_ = alloc_->allocate(32 * mib);
    void* middle = alloc_->allocate(32 * mib);
    last_ = alloc_->allocate(8 * mib);
    alloc_->deallocate(middle);
  }
  void TearDown() override {
    alloc_->deallocate(first_);
    alloc_->deallocate(last_);
  }
  void* first_ = nullptr;
  void* last_ = nullptr;
};

TEST_F(async_oom_advice_idle_granule, CacheHeldDuringACapturePointsToEmptyCacheOutsideIt) {
  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, [](stream_t) { return false; });
  const std::string message = message_of([&] { (void)alloc_->allocate(48 * mib); });
  EXPECT_EQ(sim_->calls(driver_call::pool_trim_to), 0u);  // illegal during a capture
  EXPECT_TRUE(contains(message, "caches 56.00 MiB (reserved but unused), enough for this request")) << message;
  EXPECT_TRUE(contains(message, "call empty_cache() before beginning the capture")) << message;
  expect_no_native_keys(message);
  alloc_->end_allocate_to_pool(pool);
  alloc_->empty_cache();  // what the message advises: the idle granule goes back to the device
  alloc_->deallocate(alloc_->allocate(48 * mib));
}

TEST_F(async_oom_advice_idle_granule, CacheNotTrimmedPointsToEmptyCache) {
  sim_->fail_next(driver_call::device_synchronize, 1, status::other);  // so the OOM path cannot trim
  const std::string message = message_of([&] { (void)alloc_->allocate(48 * mib); });
  EXPECT_EQ(sim_->calls(driver_call::pool_trim_to), 0u);
  EXPECT_TRUE(contains(message, "caches 56.00 MiB (reserved but unused), enough for this request: call "
                                "empty_cache() to trim the pool")) << message;
  expect_no_native_keys(message);
  alloc_->empty_cache();
  alloc_->deallocate(alloc_->allocate(48 * mib));
}

TEST_F(async_oom_advice, FullDeviceNamesMemoryHeldOutsideThePool) {
  void* outside = nullptr;
  ASSERT_TRUE(sim_->malloc(0, 80 * mib, &outside).ok());  // another allocator's memory
  const std::string message = message_of([&] { (void)alloc_->allocate(20 * mib); });
  EXPECT_TRUE(contains(message, "The device is full")) << message;
  EXPECT_TRUE(contains(message, "80.00 MiB of the device's memory is held outside this allocator's pool")) << message;
  EXPECT_FALSE(contains(message, "(reserved but unused)")) << message;
  expect_no_native_keys(message);
  ASSERT_TRUE(sim_->free(0, outside).ok());
  alloc_->deallocate(alloc_->allocate(20 * mib));
}

TEST_F(async_oom_advice, ACapRefusalIgnoresThePoolsCache) {
  alloc_->deallocate(alloc_->allocate(20 * mib));  // 32 MiB cached, enough for the request below
  alloc_->set_memory_fraction(0.25, 0);            // 24 MiB cap
  const std::string message = message_of([&] { (void)alloc_->allocate(30 * mib); });
  EXPECT_TRUE(contains(message, "would exceed allowed memory")) << message;
  EXPECT_TRUE(contains(message, "raise per_process_memory_fraction")) << message;
  EXPECT_FALSE(contains(message, "(reserved but unused)")) << message;
  EXPECT_FALSE(contains(message, "held outside this allocator's pool")) << message;
  expect_no_native_keys(message);
}

// Issue 31: a cap of 0 bytes (per_process_memory_fraction:0) is a cap, not "no cap".
TEST_F(async_oom_advice, ZeroCapSaysTheCapAllowsNothing) {
  alloc_->set_memory_fraction(0.0, 0);
  const std::string message = message_of([&] { (void)alloc_->allocate(1 * mib); });
  EXPECT_TRUE(contains(message, "The per-process cap is 0 bytes")) << message;
  EXPECT_TRUE(contains(message, "raise per_process_memory_fraction")) << message;
  EXPECT_FALSE(contains(message, "is full")) << message;
  expect_no_native_keys(message);
}

// The shared builder keeps native's diagnosis for native's figures: the pool fields change only
// the output of figures marked as a stream-ordered pool's.
TEST(async_oom_message, NativeFiguresKeepTheFragmentationDiagnosis) {
  core::oom_figures f;
  f.requested = f.alloc_size = 8 * mib;
  f.device_total = 64 * mib;
  f.device_free = 0;
  f.allocated = 40 * mib;
  f.reserved = 64 * mib;
  f.largest_free_block = 4 * mib;
  const std::string native = core::build_oom_message(f);
  EXPECT_TRUE(native.find("Fragmentation is the cause") != std::string::npos) << native;
  EXPECT_TRUE(native.find("expandable_segments:True") != std::string::npos) << native;

  core::oom_figures pool = f;
  pool.backend = "cudaMallocAsync";
  pool.stream_ordered_pool = true;
  pool.pool_unused = 24 * mib;
  pool.pool_trim_state = core::pool_trim::trimmed;
  const std::string async = core::build_oom_message(pool);
  EXPECT_TRUE(async.find("fragmentation of the pool") != std::string::npos) << async;
  EXPECT_TRUE(async.find("Fragmentation is the cause") == std::string::npos) << async;
  // The figures are the same text (apart from the backend's name), up to the largest free block,
  // which a pool does not report.
  EXPECT_TRUE(native.find("largest free block: 4.00 MiB") != std::string::npos) << native;
  EXPECT_TRUE(async.find("largest free block") == std::string::npos) << async;
  const std::size_t figures_end = native.find("; largest free block");
  ASSERT_NE(figures_end, std::string::npos);
  std::string expected = native.substr(0, figures_end);
  expected.replace(expected.find("native backend"), 14, "cudaMallocAsync backend");
  EXPECT_EQ(async.substr(0, expected.size()), expected);
}

}  // namespace
}  // namespace streampool::testing
