// moved_pages_test.cpp — page moves of cross_stream_reuse:True with expandable segments while the
// pages' last uses may still run (Note [Moving pages still in use] in src/native/page_moves.cpp):
// no host wait and no unmap at the move, the next user ordered after those uses by an event wait
// (the sim's hazard checker, which sees both mappings of a page, agrees), the old mapping unmapped
// once the uses are done, taken back in place when the growth lands there, waited for only when a
// growth must map over it, and nothing left behind by empty_cache or teardown.
#include <gtest/gtest.h>

#include "unit/native/cross_stream_test_support.hpp"

namespace streampool::test {
namespace {

constexpr std::int64_t mib(std::size_t n) { return static_cast<std::int64_t>(n * MiB); }

/// freed_middle after b's 4 KiB (a small-pool page: 32 of 40 MiB) and b's 14 MiB growth, which
/// takes y's three highest pages while a's kernel on y may still run.
struct moved_in_use : freed_middle {
  void* s = env.alloc->allocate(4 * KiB, b);
  void* w = nullptr;
  moved_in_use() {
    env.sim->reset_counters();
    w = env.alloc->allocate(14 * MiB, b);
  }
};

TEST(moved_pages, PagesStillInUseMoveWithoutAHostWaitOrAnUnmap) {
  moved_in_use f;
  native_env& env = f.env;
  const memory_stats st = env.stats();
  EXPECT_EQ(st.num_moved_pages, 3);
  EXPECT_EQ(st.reserved_bytes[all].peak, mib(40)) << "the peak did not rise";
  EXPECT_EQ(env.calls(driver_call::event_synchronize) + env.calls(driver_call::stream_synchronize) +
                env.calls(driver_call::device_synchronize),
            0u)
      << "the host never waits";
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 0u) << "y's pages stay mapped where a's kernel may still use them";
  EXPECT_EQ(env.calls(driver_call::vmm_create), 4u) << "3 moved pages + 4 new for 7";
  EXPECT_EQ(env.calls(driver_call::stream_wait_event), 1u) << "b waits for a's fence instead";
  EXPECT_TRUE(env.sim->use(f.b, f.w, 14 * MiB)) << "b's kernel on w is ordered after a's on y's pages";
  EXPECT_EQ(env.sim->hazard_violations(), 0u);
  for (void* p : {f.s, f.w, f.x, f.z}) env.alloc->deallocate(p);
}

TEST(moved_pages, TheOldMappingGoesOnceItsUsesAreDoneAndAGrowthLandingThereTakesItBack) {
  moved_in_use f;
  native_env& env = f.env;
  env.sim->complete(f.a);
  env.sim->reset_counters();
  // 5 MiB fits no free block (y's rest is 4 MiB): a growth, which first unmaps the three old
  // mappings (a is done: no wait), moves y's two remaining pages and lands on them, in place,
  // with one new page after them.
  void* v = env.alloc->allocate(5 * MiB, f.b);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 3u);
  EXPECT_EQ(env.calls(driver_call::event_synchronize), 0u);
  EXPECT_EQ(addr(v), addr(f.y));
  EXPECT_EQ(env.calls(driver_call::vmm_create), 1u);
  EXPECT_EQ(env.calls(driver_call::vmm_map), 1u) << "y's two pages are taken back where they are mapped";
  EXPECT_EQ(env.stats().reserved_bytes[all].peak, mib(42)) << "live memory grew by 2 MiB pages' worth";
  EXPECT_TRUE(env.sim->use(f.b, v, 5 * MiB));
  EXPECT_EQ(env.sim->hazard_violations(), 0u);
  for (void* p : {f.s, f.w, v, f.x, f.z}) env.alloc->deallocate(p);
}

TEST(moved_pages, AGrowthThatMustMapOverAnOldMappingStillInUseWaitsForIt) {
  moved_in_use f;
  native_env& env = f.env;
  env.sim->reset_counters();
  const std::int64_t waits_before = env.stats().num_fence_host_waits;
  // 8 MiB from y's place: its two remaining pages come back in place, and the next two lie under
  // old mappings whose handles now back w, with a's kernel possibly still on them.
  void* v = env.alloc->allocate(8 * MiB, f.b);
  EXPECT_EQ(addr(v), addr(f.y));
  EXPECT_EQ(env.stats().num_fence_host_waits - waits_before, 1) << "a's fence, on the host";
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 2u) << "the two old mappings, once a is done";
  EXPECT_EQ(env.calls(driver_call::vmm_map), 2u);
  EXPECT_TRUE(env.sim->use(f.b, v, 8 * MiB));
  EXPECT_EQ(env.sim->hazard_violations(), 0u);
  for (void* p : {f.s, f.w, v, f.x, f.z}) env.alloc->deallocate(p);
}

TEST(moved_pages, EmptyCacheAndTeardownLeaveNoOldMappingBehind) {
  {
    moved_in_use f;
    for (void* p : {f.s, f.w, f.x, f.z}) f.env.alloc->deallocate(p);
    f.env.alloc->empty_cache();
    EXPECT_EQ(f.env.stats().reserved_bytes[all].current, 0);
    EXPECT_EQ(f.env.sim->bytes_in_use(0), 0u) << "every page, old mappings included, went back";
    EXPECT_EQ(f.env.sim->hazard_violations(), 0u);
  }
  {
    moved_in_use f;  // the allocator goes away with the old mappings still there and w live
    std::shared_ptr<sim_driver> sim = f.env.sim;
    f.env.alloc.reset();
    EXPECT_EQ(sim->bytes_in_use(0), 0u);
    EXPECT_EQ(sim->hazard_violations(), 0u);
  }
}

TEST(moved_pages, DuringACaptureASharedGrowthLeavesOldMappingsAlone) {
  moved_in_use f;
  native_env& env = f.env;
  const stream_t c = env.new_stream();
  env.alloc->begin_allocate_to_pool(mempool_id{1, 0}, [c](stream_t s) { return s == c; }, 0);
  env.sim->reset_counters();
  void* v = env.alloc->allocate(8 * MiB, f.b);  // b is not captured: the shared arena
  EXPECT_EQ(env.calls(driver_call::vmm_unmap) + env.calls(driver_call::event_synchronize) +
                env.calls(driver_call::event_record) + env.calls(driver_call::stream_wait_event),
            0u)
      << "nothing that is illegal during a capture";
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u) << "a fresh reservation";
  env.alloc->end_allocate_to_pool(mempool_id{1, 0}, 0);
  env.alloc->release_pool(mempool_id{1, 0}, 0);
  for (void* p : {f.s, f.w, v, f.x, f.z}) env.alloc->deallocate(p);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

}  // namespace
}  // namespace streampool::test
