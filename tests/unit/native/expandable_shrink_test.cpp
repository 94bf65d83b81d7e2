// Expandable segments, shrinking (docs/pytorch-compatibility.md §2.13): empty_cache unmaps the pages lying entirely inside
// free blocks (partial pages stay mapped), after synchronising the segment's stream; a reservation
// with nothing mapped is freed; unmapped holes are reused; blocks waiting on record_stream events
// are neither reused nor unmapped before their events complete.
#include <gtest/gtest.h>

#include "unit/native/expandable_test_support.hpp"

namespace streampool::test {
namespace {

TEST(expandable_shrink, EmptyCacheUnmapsEveryFreePageAndFreesTheReservation) {
  expandable_env env;
  void* a = env.alloc->allocate(50 * MiB);  // 3 pages
  void* b = env.alloc->allocate(4096);      // 1 small page
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
  EXPECT_EQ(env.sim->bytes_in_use(0), 3 * large_page + small_page) << "freeing alone returns nothing";
  env.sim->reset_counters();
  env.alloc->record_history(true);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 4u) << "page by page";
  EXPECT_EQ(env.calls(driver_call::vmm_release), 4u);
  EXPECT_EQ(env.calls(driver_call::vmm_free), 2u) << "both reservations are wholly unmapped";
  EXPECT_EQ(env.calls(driver_call::free), 0u);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.reserved_bytes[all].current, 0);
  EXPECT_EQ(s.reserved_bytes[all].peak, i64(3 * large_page + small_page));
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 2) << "one unmap operation per free block";
  EXPECT_EQ(s.segment[all].allocated, 0) << "the segment statistic is not changed by map/unmap";
  const auto unmaps = env.entries(trace_action::segment_unmap);
  ASSERT_EQ(unmaps.size(), 2u);
  std::size_t unmapped = 0;
  for (const trace_entry& e : unmaps) unmapped += e.size;
  EXPECT_EQ(unmapped, 3 * large_page + small_page);
  EXPECT_TRUE(env.segments().empty());

  void* c = env.alloc->allocate(50 * MiB);  // works again, in a new reservation
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u);
  expect_consistent(env);
  env.alloc->deallocate(c);
}

TEST(expandable_shrink, PartiallyUsedPagesStayMapped) {
  expandable_env env;
  void* a = env.alloc->allocate(30 * MiB);  // pages 0-1: [a 30][free 10]
  void* b = env.alloc->allocate(5 * MiB);   // [a 30][b 5][free 5]
  env.alloc->deallocate(a);                 // free [0, 30): page 0 whole, page 1 partly
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), large_page) << "page 1 holds b";
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].address, addr(a) + large_page);
  ASSERT_EQ(segs[0].blocks.size(), 3u);
  EXPECT_EQ(segs[0].blocks[0].size, 10 * MiB);  // the part of a's block in page 1 stays free
  EXPECT_EQ(segs[0].blocks[0].state, block_state::inactive);
  EXPECT_EQ(segs[0].blocks[1].address, addr(b));
  EXPECT_EQ(segs[0].blocks[2].size, 5 * MiB);
  expect_consistent(env);

  void* c = env.alloc->allocate(25 * MiB);  // page 0 again + the 10 MiB free after it
  EXPECT_EQ(c, a) << "the unmapped hole is reused, merged with the free block after it";
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u);
  expect_consistent(env);
  env.alloc->deallocate(b);
  env.alloc->deallocate(c);
}

TEST(expandable_shrink, HoleBetweenLiveBlocksIsReusedAfterUnmap) {
  expandable_env env;
  void* a = env.alloc->allocate(large_page);
  void* b = env.alloc->allocate(2 * large_page);
  void* c = env.alloc->allocate(large_page);
  env.alloc->deallocate(b);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  EXPECT_EQ(env.calls(driver_call::vmm_free), 0u) << "the reservation still has mapped pages";
  void* d = env.alloc->allocate(2 * large_page);
  EXPECT_EQ(d, b);
  EXPECT_EQ(env.sim->bytes_in_use(0), 4 * large_page);
  for (void* p : {a, c, d}) env.alloc->deallocate(p);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_free), 1u);
  expect_consistent(env);
}

TEST(expandable_shrink, DestroyingTheAllocatorReturnsEverything) {
  expandable_env env;
  const stream_t s = env.new_stream();
  (void)env.alloc->allocate(30 * MiB, s);  // live at destruction
  (void)env.alloc->allocate(4096);
  env.alloc->deallocate(env.alloc->allocate(large_page, s));
  ASSERT_GT(env.sim->bytes_in_use(0), 0u);
  env.sim->reset_counters();
  env.alloc.reset();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), env.calls(driver_call::vmm_release));
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 4u) << "3 large pages, 1 small page";
  EXPECT_EQ(env.calls(driver_call::vmm_free), 2u);
}

TEST(expandable_shrink, StreamIsSynchronisedBeforeUnmapping) {
  expandable_env env(80 * GiB, "", /*eager=*/false);
  const stream_t s = env.new_stream();
  void* a = env.alloc->allocate(large_page, s);
  void* keep = env.alloc->allocate(large_page, s);
  env.sim->reset_counters();
  env.alloc->empty_cache();  // nothing wholly free: no synchronisation needed
  EXPECT_EQ(env.calls(driver_call::stream_synchronize), 0u);
  env.alloc->deallocate(a);
  env.alloc->empty_cache();
  EXPECT_EQ(env.calls(driver_call::stream_synchronize), 1u);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 1u);
  env.alloc->deallocate(keep);
}

TEST(expandable_shrink, DestroyedStreamFallsBackToADeviceSynchronisation) {
  expandable_env env(80 * GiB, "", /*eager=*/false);
  stream_t s = env.new_stream();
  env.alloc->deallocate(env.alloc->allocate(large_page, s));
  ASSERT_TRUE(env.sim->stream_destroy(0, s).ok());
  env.sim->reset_counters();
  EXPECT_NO_THROW(env.alloc->empty_cache());
  EXPECT_EQ(env.calls(driver_call::stream_synchronize), 1u);
  EXPECT_EQ(env.calls(driver_call::device_synchronize), 1u);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

TEST(expandable_shrink, RecordStreamDelaysReuseAndUnmap) {
  expandable_env env(80 * GiB, "", /*eager=*/false);
  const stream_t side = env.new_stream();
  const stream_t main = env.new_stream();
  void* p = env.alloc->allocate(large_page, side);
  env.alloc->record_stream(p, main);
  env.alloc->deallocate(p);
  EXPECT_EQ(env.native().pending_events(0), 1u);
  void* q = env.alloc->allocate(large_page, side);
  EXPECT_NE(q, p) << "main has not passed the event: a new page is mapped instead";
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].blocks[0].state, block_state::active_pending_free);

  env.sim->complete(main);
  void* r = env.alloc->allocate(large_page, side);
  EXPECT_EQ(r, p) << "reused once main passed the event";
  env.alloc->record_stream(r, main);
  env.alloc->deallocate(r);
  env.alloc->deallocate(q);
  env.alloc->empty_cache();  // waits for the event, then unmaps both pages
  EXPECT_EQ(env.native().pending_events(0), 0u);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  expect_consistent(env);
}

TEST(expandable_shrink, GarbageCollectionSkipsExpandableBlocks) {
  // Allowed 100 MiB, GC above 50 MiB reserved: with normal segments the free 20 MiB segment is
  // collected; expandable blocks are not (docs/pytorch-compatibility.md §2.11, newest), growth just maps a page.
  expandable_env env(200 * MiB, "garbage_collection_threshold:0.5,per_process_memory_fraction:0.5");
  void* a = env.alloc->allocate(2 * large_page);
  void* b = env.alloc->allocate(large_page);
  env.alloc->deallocate(b);
  void* c = env.alloc->allocate(30 * MiB);  // the free 20 MiB block + one new page
  EXPECT_EQ(c, b);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 0u);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.num_device_free, 0);
  EXPECT_EQ(s.reserved_bytes[all].current, i64(4 * large_page));
  env.alloc->deallocate(a);
  env.alloc->deallocate(c);
}

TEST(expandable_shrink, MaxSplitSizeReleaseSkipsExpandableBlocks) {
  // release_available_cached_blocks never unmaps; release-all does, and the retry then succeeds.
  expandable_env env(100 * MiB, "max_split_size_mb:20");
  void* big = env.alloc->allocate(60 * MiB);
  void* keep = env.alloc->allocate(large_page);
  env.alloc->deallocate(big);
  // 40 MiB may not reuse the free 60 MiB block (60 >= 40 + 20) and the device has 20 MiB left.
  void* p = env.alloc->allocate(40 * MiB);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.num_alloc_retries, 1) << "only release-all frees expandable pages";
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(env.sim->bytes_in_use(0), 3 * large_page);
  expect_consistent(env);
  env.alloc->deallocate(p);
  env.alloc->deallocate(keep);
}

}  // namespace
}  // namespace streampool::test
