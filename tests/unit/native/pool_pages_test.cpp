// pool_pages_test.cpp — the page size of a private pool's large VMM segments (pool_options::page_bytes,
// Note [Pages of a private pool] in src/native/expandable.hpp): a sleepable pool's default page is
// 64 MiB (or large_segment_size_mb when larger), other pools keep large_segment_size_mb; an explicit
// page is rounded up to the mapping unit; more than 16 TiB is refused and changes nothing; a discard
// wake creates one physical page per page, so bigger pages take fewer driver calls.
#include <gtest/gtest.h>

#include <string>

#include "native_test_support.hpp"
#include "streampool/errors.hpp"

namespace streampool::test {
namespace {

struct pool_env {
  native_env env;
  stream_t stream = nullptr;
  mempool_id pool = allocator::create_pool_id();

  explicit pool_env(std::string_view conf = "") : env(conf) {
    stream = env.new_stream();
    const stream_t s = stream;
    env.alloc->begin_allocate_to_pool(pool, [s](stream_t x) { return x == s; });
  }
  ~pool_env() { end(); }
  /// Ends the routing to the pool (a sleep needs it ended: no begin_allocate_to_pool underway).
  void end() {
    if (routing) env.alloc->end_allocate_to_pool(pool);
    routing = false;
  }
  bool routing = true;
  void set(bool sleepable, std::size_t page_bytes) {
    pool_options o;
    o.sleepable = sleepable;
    o.page_bytes = page_bytes;
    env.alloc->set_pool_options(pool, o);
  }
  /// The page size of the pool's segment that holds `p` (0 when none does).
  [[nodiscard]] std::size_t page_of(void* p) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    for (const segment_info& s : env.segments()) {
      if (s.pool == pool && a >= s.address && a < s.address + s.total_size) return s.page_size;
    }
    return 0;
  }
};

TEST(pool_pages, ASleepablePoolHas64MiBPagesByDefault) {
  pool_env t;
  t.set(/*sleepable=*/true, 0);
  void* p = t.env.alloc->allocate(4 * MiB, t.stream);
  EXPECT_EQ(t.page_of(p), 64 * MiB);
  EXPECT_EQ(t.env.sim->bytes_in_use(0), 64 * MiB) << "one page mapped for the 4 MiB block";
  void* small = t.env.alloc->allocate(4096, t.stream);
  EXPECT_EQ(t.page_of(small), 2 * MiB) << "small-pool pages stay 2 MiB";
  t.env.alloc->deallocate(p);
  t.env.alloc->deallocate(small);
}

TEST(pool_pages, APoolThatCannotSleepKeepsTheLargeSegmentPage) {
  pool_env t("expandable_segments:True");
  void* p = t.env.alloc->allocate(4 * MiB, t.stream);
  EXPECT_EQ(t.page_of(p), 20 * MiB) << "large_segment_size_mb's default";
  t.env.alloc->deallocate(p);
}

TEST(pool_pages, ALargerSegmentSizeWinsOverTheSleepableDefault) {
  pool_env t("large_segment_size_mb:128");
  t.set(/*sleepable=*/true, 0);
  void* p = t.env.alloc->allocate(4 * MiB, t.stream);
  EXPECT_EQ(t.page_of(p), 128 * MiB);
  t.env.alloc->deallocate(p);
}

TEST(pool_pages, AnExplicitPageIsRoundedUpToTheMappingUnit) {
  pool_env t("expandable_segments:True");
  t.set(/*sleepable=*/false, 3 * MiB);
  void* p = t.env.alloc->allocate(5 * MiB, t.stream);
  EXPECT_EQ(t.page_of(p), 4 * MiB);
  EXPECT_EQ(t.env.sim->bytes_in_use(0), 8 * MiB) << "two 4 MiB pages for 5 MiB";
  EXPECT_EQ(t.env.alloc->get_pool_options(t.pool).page_bytes, 3 * MiB) << "the options keep what was set";
  t.env.alloc->deallocate(p);
}

TEST(pool_pages, ANewPageAppliesToSegmentsReservedAfterIt) {
  pool_env t("expandable_segments:True,expandable_segments_reserve:1G");
  void* before = t.env.alloc->allocate(4 * MiB, t.stream);
  t.set(/*sleepable=*/false, 8 * MiB);
  void* huge = t.env.alloc->allocate(2 * GiB, t.stream);  // more than the first 1 GiB reservation holds
  EXPECT_EQ(t.page_of(before), 20 * MiB);
  EXPECT_EQ(t.page_of(huge), 8 * MiB);
  t.env.alloc->deallocate(huge);
  t.env.alloc->deallocate(before);
}

TEST(pool_pages, MoreThanSixteenTiBIsRefusedAndChangesNothing) {
  pool_env t;
  t.set(/*sleepable=*/true, 32 * MiB);
  pool_options o;
  o.sleepable = true;
  o.page_bytes = (std::size_t{16} << 40) + 1;
  try {
    t.env.alloc->set_pool_options(t.pool, o);
    ADD_FAILURE() << "a page of more than 16 TiB was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("16 TiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.env.alloc->get_pool_options(t.pool).page_bytes, 32 * MiB);
  o.page_bytes = std::size_t{16} << 40;  // the limit itself is allowed
  EXPECT_NO_THROW(t.env.alloc->set_pool_options(t.pool, o));
}

/// vmm_create calls of one discard wake of a 128 MiB block in a sleepable pool with these pages.
std::uint64_t creates_per_wake(std::size_t page_bytes) {
  pool_env t;
  t.set(/*sleepable=*/true, page_bytes);
  void* p = t.env.alloc->allocate(128 * MiB, t.stream);
  t.end();
  sleep_options discard;
  discard.mode = sleep_mode::discard;
  t.env.alloc->pools().sleep(t.pool, discard);
  const std::uint64_t before = t.env.calls(driver_call::vmm_create);
  t.env.alloc->pools().wake(t.pool);
  const std::uint64_t made = t.env.calls(driver_call::vmm_create) - before;
  t.env.alloc->deallocate(p);
  return made;
}

TEST(pool_pages, ADiscardWakeCreatesOnePhysicalPagePerPage) {
  EXPECT_EQ(creates_per_wake(0), 2u) << "128 MiB in 64 MiB pages";
  EXPECT_EQ(creates_per_wake(20 * MiB), 7u) << "128 MiB in 20 MiB pages";
}

}  // namespace
}  // namespace streampool::test
