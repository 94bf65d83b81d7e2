// async_private_pool_test.cpp — the private pools of the cudaMallocAsync backend (Note [Private
// pools of the cudaMallocAsync backend]): allocations routed during a real (sim) global capture
// are blocks of the pool's own, freed during or after the capture without error and without a
// driver call, never handed to eager code while the pool lives, reused by later captures into the
// same pool (on the same stream), and given back to the device by release_pool + empty_cache.
// The sim refuses (and invalidates the capture for) any call illegal under capture, so each
// successful stream_end_capture proves nothing illegal was issued.
#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

class async_private_pool : public async_fixture {
 protected:
  void SetUp() override {
    async_fixture::SetUp();
    capturing_ = new_stream();
    eager_ = new_stream();
  }

  /// begin_allocate_to_pool(`pool`, only `capturing_`), then a global stream capture.
  void begin(mempool_id pool) {
    const stream_t capturing = capturing_;
    alloc_->begin_allocate_to_pool(pool, [capturing](stream_t s) { return s == capturing; });
    ASSERT_TRUE(sim_->stream_begin_capture(capturing_, capture_mode::global).ok());
  }

  /// Ends the stream capture (must succeed: the capture stayed valid), stops routing, and returns
  /// an instantiated executable.
  graph_exec_t end(mempool_id pool) {
    graph_t graph = nullptr;
    EXPECT_TRUE(sim_->stream_end_capture(capturing_, &graph).ok()) << "the capture was invalidated";
    alloc_->end_allocate_to_pool(pool);
    graph_exec_t exec = nullptr;
    EXPECT_TRUE(sim_->graph_instantiate(graph, &exec, instantiate_flags::none).ok());
    graphs_.push_back(graph);
    execs_.push_back(exec);
    return exec;
  }

  void destroy_graphs() {
    for (graph_exec_t exec : execs_) EXPECT_TRUE(sim_->graph_exec_destroy(exec).ok());
    for (graph_t graph : graphs_) EXPECT_TRUE(sim_->graph_destroy(graph).ok());
    execs_.clear();
    graphs_.clear();
  }

  [[nodiscard]] std::int64_t reserved() { return alloc_->stats(0).reserved_bytes[0].current; }

  stream_t capturing_ = nullptr;
  stream_t eager_ = nullptr;
  std::vector<graph_t> graphs_;
  std::vector<graph_exec_t> execs_;
};

TEST_F(async_private_pool, FreedBeforeReplayKeptFromEagerCodeReusedByTheNextCapture) {
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  void* kept = alloc_->allocate(mib, capturing_);        // outlives the capture (an output)
  void* scratch = alloc_->allocate(2 * mib, capturing_); // freed inside the capture
  alloc_->deallocate(scratch);
  void* again = alloc_->allocate(mib, capturing_);  // reuses the block freed inside the capture
  EXPECT_EQ(again, scratch);
  EXPECT_EQ(sim_->calls(driver_call::malloc), 2u);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 0u) << "no graph allocation node";
  const graph_exec_t first = end(pool);

  // Freed eagerly before any replay (what cudagraph trees do): no error, no driver call.
  const auto frees = sim_->calls(driver_call::free_async) + sim_->calls(driver_call::free);
  alloc_->deallocate(kept);
  alloc_->deallocate(again);
  EXPECT_EQ(sim_->calls(driver_call::free_async) + sim_->calls(driver_call::free), frees);
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);

  // Eager code never gets those addresses while the pool lives, on any stream.
  for (const stream_t stream : {capturing_, eager_}) {
    void* a = alloc_->allocate(mib, stream);
    void* b = alloc_->allocate(2 * mib, stream);
    EXPECT_NE(a, kept);
    EXPECT_NE(a, scratch);
    EXPECT_NE(b, kept);
    EXPECT_NE(b, scratch);
    alloc_->deallocate(a);
    alloc_->deallocate(b);
  }
  EXPECT_TRUE(sim_->graph_launch(first, capturing_).ok());

  // A second capture into the same pool reuses its idle blocks: no new memory.
  begin(pool);
  void* reused = alloc_->allocate(mib, capturing_);
  EXPECT_EQ(reused, kept) << "best fit among the pool's idle blocks";
  void* reused_big = alloc_->allocate(2 * mib, capturing_);
  EXPECT_EQ(reused_big, scratch);
  EXPECT_EQ(sim_->calls(driver_call::malloc), 2u);
  const graph_exec_t second = end(pool);
  alloc_->deallocate(reused);  // after the capture, before its replay
  alloc_->deallocate(reused_big);
  EXPECT_TRUE(sim_->graph_launch(first, capturing_).ok());
  EXPECT_TRUE(sim_->graph_launch(second, capturing_).ok());
  EXPECT_EQ(sim_->calls(driver_call::malloc), 2u) << "replays allocate nothing";
}

TEST_F(async_private_pool, ReleasePoolAndEmptyCacheGiveTheMemoryBack) {
  const std::int64_t before = reserved();
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  void* a = alloc_->allocate(3 * mib, capturing_);
  void* b = alloc_->allocate(mib, capturing_);
  (void)end(pool);
  // A block of 2 MiB or more is whole 2 MiB pages, as cudaMalloc charges: 3 MiB occupies 4.
  EXPECT_EQ(reserved(), before + static_cast<std::int64_t>(5 * mib)) << "private blocks are reserved memory";
  EXPECT_EQ(static_cast<std::int64_t>(sim_->bytes_in_use(0)), reserved()) << "reserved is what the device handed out";
  alloc_->deallocate(a);
  alloc_->empty_cache();  // the pool is still in use: its memory stays
  EXPECT_EQ(sim_->calls(driver_call::free), 0u);
  memory_snapshot snap = alloc_->snapshot();
  std::size_t idle_segments = 0;
  for (const segment_info& segment : snap.segments) {
    EXPECT_EQ(segment.pool, pool);
    if (segment.blocks[0].state == block_state::inactive) {
      ++idle_segments;
      EXPECT_EQ(segment.address, reinterpret_cast<std::uintptr_t>(a));
      EXPECT_EQ(segment.total_size, 4 * mib);
    }
  }
  EXPECT_EQ(idle_segments, 1u);
  EXPECT_EQ(alloc_->stats(0).segment[0].current, 2);

  destroy_graphs();
  alloc_->release_pool(pool);
  alloc_->empty_cache();  // the idle block goes; the live one stays with the pool
  EXPECT_EQ(sim_->calls(driver_call::free), 1u);
  EXPECT_EQ(reserved(), before + static_cast<std::int64_t>(mib));
  EXPECT_THROW(alloc_->begin_allocate_to_pool(pool, [](stream_t) { return true; }), error)
      << "a released pool with a live block is not forgotten";
  alloc_->deallocate(b);
  EXPECT_EQ(sim_->calls(driver_call::free), 1u) << "given back at the next empty_cache";
  alloc_->empty_cache();
  EXPECT_EQ(sim_->calls(driver_call::free), 2u);
  EXPECT_EQ(reserved(), before);
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.segment[0].current, 0);
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
  EXPECT_TRUE(alloc_->snapshot().segments.empty());
  // The id is forgotten: it starts a new pool.
  begin(pool);
  alloc_->deallocate(alloc_->allocate(mib, capturing_));
  (void)end(pool);
  destroy_graphs();
  alloc_->release_pool(pool);
}

TEST_F(async_private_pool, BlocksAreReusedOnlyOnTheirStreamAndOnlyByTheirPool) {
  const mempool_id pool = allocator::create_pool_id();
  const mempool_id other_pool = allocator::create_pool_id();
  begin(pool);
  void* p = alloc_->allocate(mib, capturing_);
  alloc_->deallocate(p);
  (void)end(pool);
  // Another pool, same stream: not reused.
  begin(other_pool);
  void* q = alloc_->allocate(mib, capturing_);
  EXPECT_NE(q, p);
  alloc_->deallocate(q);
  (void)end(other_pool);
  // Same pool, another stream: not reused (a block is ordered on the stream it was made on).
  const stream_t side = new_stream();
  alloc_->begin_allocate_to_pool(pool, [side](stream_t s) { return s == side; });
  void* r = alloc_->allocate(mib, side);
  EXPECT_NE(r, p);
  alloc_->deallocate(r);
  alloc_->end_allocate_to_pool(pool);
  // Far too large a block is not used for a small request (no split, bounded waste).
  begin(pool);
  void* small = alloc_->allocate(4096, capturing_);
  EXPECT_NE(small, p);
  alloc_->deallocate(small);
  (void)end(pool);
  EXPECT_EQ(sim_->calls(driver_call::malloc), 4u);
}

TEST_F(async_private_pool, AFailedPrivateAllocationChangesNothingAndTheCaptureStaysValid) {
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  sim_->fail_next(driver_call::malloc, 1, status::other);
  try {
    (void)alloc_->allocate(mib, capturing_);
    ADD_FAILURE() << "expected cuda_error";
  } catch (const cuda_error& e) {
    EXPECT_TRUE(contains(e.what(), "cudaMalloc of 1024.00 KiB for private pool {")) << e.what();
  }
  EXPECT_EQ(alloc_->stats(0).segment[0].current, 0);
  void* p = alloc_->allocate(mib, capturing_);
  alloc_->deallocate(p);
  (void)end(pool);
  destroy_graphs();
  alloc_->release_pool(pool);
  alloc_->empty_cache();
  EXPECT_EQ(sim_->calls(driver_call::free), 1u);
  EXPECT_EQ(reserved(), 0);
}

TEST_F(async_private_pool, IdlePrivateBlocksCountAgainstTheMemoryFraction) {
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  alloc_->deallocate(alloc_->allocate(64 * mib, capturing_));
  (void)end(pool);
  device_info info;
  ASSERT_TRUE(sim_->get_device_info(0, &info).ok());
  // Allow a little more than the idle block: an eager 64 MiB no longer fits under the cap.
  alloc_->set_memory_fraction(static_cast<double>(100 * mib) / static_cast<double>(info.total_memory), 0);
  EXPECT_THROW((void)alloc_->allocate(64 * mib, eager_), out_of_memory);
  void* fits = alloc_->allocate(16 * mib, eager_);
  alloc_->deallocate(fits);
  destroy_graphs();
  alloc_->release_pool(pool);
}

TEST_F(async_private_pool, AReusedLargerBlockShowsItsSlackAsInactiveAndStatsAgree) {
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  alloc_->deallocate(alloc_->allocate(mib, capturing_));
  void* p = alloc_->allocate(mib - 4096, capturing_);  // reuses the 1 MiB block
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<std::int64_t>(mib - 4096));
  const memory_snapshot snap = alloc_->snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  const segment_info& segment = snap.segments[0];
  EXPECT_EQ(segment.total_size, mib);
  EXPECT_EQ(segment.allocated_size, mib - 4096);
  ASSERT_EQ(segment.blocks.size(), 2u);
  EXPECT_EQ(segment.blocks[0].state, block_state::active_allocated);
  EXPECT_EQ(segment.blocks[1].state, block_state::inactive);
  EXPECT_EQ(segment.blocks[1].address, reinterpret_cast<std::uintptr_t>(p) + mib - 4096);
  EXPECT_EQ(segment.blocks[1].size, 4096u);
  alloc_->deallocate(p);
  (void)end(pool);
  destroy_graphs();
  alloc_->release_pool(pool);
}

TEST_F(async_private_pool, AnAllocationThatRunsOutOfMemoryFirstFreesReleasedPrivatePools) {
  sim_options options;
  options.capacity = 256 * mib;
  make(options);
  capturing_ = new_stream();
  eager_ = new_stream();
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  alloc_->deallocate(alloc_->allocate(160 * mib, capturing_));
  (void)end(pool);
  destroy_graphs();
  alloc_->release_pool(pool);  // released, its idle block not yet given back
  EXPECT_EQ(sim_->calls(driver_call::free), 0u);
  void* big = alloc_->allocate(160 * mib, eager_);  // fits only once the private block is gone
  EXPECT_EQ(sim_->calls(driver_call::free), 1u);
  EXPECT_EQ(alloc_->stats(0).num_alloc_retries, 1);
  alloc_->deallocate(big);
}

// Note [Cap refusals give back released pools first]: the fraction cap counts idle private
// blocks as held; those of a released pool are cache and go back before the cap refuses. A pool
// still in use keeps them, and the cap refuses as before.
TEST_F(async_private_pool, TheFractionCapFirstGivesBackReleasedPrivatePools) {
  sim_options options;
  options.capacity = 1024 * mib;
  make(options, "per_process_memory_fraction:0.25");  // 256 MiB allowed
  capturing_ = new_stream();
  eager_ = new_stream();
  const mempool_id kept = allocator::create_pool_id();
  const mempool_id released = allocator::create_pool_id();
  for (const mempool_id pool : {kept, released}) {
    begin(pool);
    void* block = alloc_->allocate(96 * mib, capturing_);
    (void)end(pool);
    alloc_->deallocate(block);  // idle in its pool, still held: 192 MiB
  }
  destroy_graphs();
  EXPECT_THROW((void)alloc_->allocate(96 * mib, eager_), out_of_memory) << "both pools are in use";
  EXPECT_EQ(sim_->calls(driver_call::free), 0u);
  EXPECT_EQ(alloc_->stats(0).num_alloc_retries, 0) << "nothing released, nothing retried";

  alloc_->release_pool(released);
  void* p = alloc_->allocate(96 * mib, eager_);  // fits under the cap once the released block is gone
  EXPECT_EQ(sim_->calls(driver_call::free), 1u);
  EXPECT_EQ(alloc_->stats(0).num_alloc_retries, 1);
  EXPECT_EQ(alloc_->stats(0).reserved_bytes[0].current, static_cast<std::int64_t>(96 * mib) +
                                                            alloc_->stats(0).allocated_bytes[0].current);
  EXPECT_THROW((void)alloc_->allocate(96 * mib, eager_), out_of_memory) << "the kept pool still holds 96 MiB";
  alloc_->deallocate(p);
  alloc_->release_pool(kept);
}

// allocate_at (restoring a CUDA graph trees checkpoint) is the native backend's: refused here.
TEST_F(async_private_pool, AllocateAtIsRefused) {
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  void* p = alloc_->allocate(mib, capturing_);
  (void)end(pool);
  try {
    (void)alloc_->allocate_at(p, mib, pool);
    ADD_FAILURE() << "allocate_at succeeded on the cudaMallocAsync backend";
  } catch (const error& e) {
    EXPECT_TRUE(contains(e.what(), "only the native backend")) << e.what();
  }
  alloc_->deallocate(p);
  destroy_graphs();
  alloc_->release_pool(pool);
}

TEST_F(async_private_pool, TeardownGivesPrivateBlocksBack) {
  const mempool_id pool = allocator::create_pool_id();
  begin(pool);
  (void)alloc_->allocate(mib, capturing_);             // still live at teardown
  alloc_->deallocate(alloc_->allocate(2 * mib, capturing_));
  (void)end(pool);
  destroy_graphs();
  alloc_.reset();
  EXPECT_EQ(sim_->calls(driver_call::free), 2u);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  ASSERT_TRUE(sim_->mem_get_info(0, &free_bytes, &total).ok());
  EXPECT_EQ(free_bytes, total);
}

}  // namespace
}  // namespace streampool::testing
