// bad_input_catalogue_test.cpp — every public entry point with invalid arguments, on both backends
// and through the C API: null and non-allocator pointers, interior pointers, double free, devices
// out of range, size 0 and sizes that wrap around (negative values cast to size_t), bad memory
// fractions (NaN, -0.1, 1.5, infinities), record_history(true, 0), pool misuse (default id, empty
// filter, begin twice, end without begin, release of an unknown or released pool). Each gets a
// clear streampool error whose message says what is wrong, the statistics (to_map, both devices),
// the snapshot and the fractions are identical before and after, and the allocator keeps working.
// Inputs that are legal but unusual (a destroyed stream, a stream of another device, freeing
// during a capture a pointer of another pool) must either work or fail cleanly, never crash or
// corrupt the statistics.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <tuple>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "stress/stress_test_support.hpp"

namespace streampool::stress {
namespace {

/// Everything observable about an allocator's state.
struct observed_state {
  std::map<std::string, std::int64_t> stats0, stats1;
  std::vector<std::tuple<int, std::uintptr_t, std::size_t, std::size_t, int>> blocks;  // device, address, size, requested, state
  double fraction0 = 0, fraction1 = 0;
  friend bool operator==(const observed_state&, const observed_state&) = default;
};

observed_state observe(const allocator& alloc) {
  observed_state s;
  s.stats0 = alloc.stats(0).to_map();
  s.stats1 = alloc.stats(1).to_map();
  for (const segment_info& seg : alloc.snapshot().segments) {
    for (const block_info& b : seg.blocks) {
      s.blocks.emplace_back(seg.device, b.address, b.size, b.requested_size, static_cast<int>(b.state));
    }
  }
  s.fraction0 = alloc.memory_fraction(0);
  s.fraction1 = alloc.memory_fraction(1);
  return s;
}

/// Bad inputs tried over the whole binary (for docs/reliability.md).
std::uint64_t bad_inputs_tried = 0;

class bad_input_catalogue : public ::testing::TestWithParam<stress_case> {
 protected:
  void SetUp() override {
    sim_options options;
    options.device_count = 2;
    options.capacity = 1 * gib;
    options.eager_completion = false;
    sim_ = std::make_shared<sim_driver>(options);
    alloc_ = make_allocator(parse_config(GetParam().config), sim_);
    ASSERT_TRUE(sim_->stream_create(0, &s0_).ok());
    ASSERT_TRUE(sim_->stream_create(0, &s0b_).ok());
    ASSERT_TRUE(sim_->stream_create(1, &s1_).ok());
    ASSERT_TRUE(sim_->stream_create(0, &destroyed_).ok());
    ASSERT_TRUE(sim_->stream_destroy(0, destroyed_).ok());
    live_ = alloc_->allocate(4096, s0_, 0);
    live1_ = alloc_->allocate(8192, s1_, 1);
    freed_ = alloc_->allocate(2048, s0_, 0);
    alloc_->deallocate(freed_);
  }

  void TearDown() override {
    // The allocator still works, and nothing leaks.
    for (int d = 0; d < 2; ++d) {
      void* p = nullptr;
      const outcome o = run_op([&] { p = alloc_->allocate(3 * mib, d == 0 ? s0_ : s1_, d); });
      EXPECT_TRUE(o.ok()) << "allocation after bad input failed: " << o.message;
      if (o.ok()) {
        EXPECT_TRUE(run_op([&] { alloc_->deallocate(p); }).ok());
      }
    }
    EXPECT_TRUE(run_op([&] { alloc_->deallocate(live_); }).ok());
    EXPECT_TRUE(run_op([&] { alloc_->deallocate(live1_); }).ok());
    sim_->complete_all();
    EXPECT_TRUE(run_op([&] { alloc_->empty_cache(); }).ok());
    if (unfreeable_ != nullptr) {
      EXPECT_EQ(alloc_->stats(0).allocation[0].current, 1);
      return;
    }
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(alloc_->stats(d).allocation[0].current, 0) << "device " << d;
      EXPECT_EQ(alloc_->stats(d).reserved_bytes[0].current, 0) << "device " << d;
      EXPECT_EQ(sim_->bytes_in_use(d), 0u) << "device " << d;
    }
  }

  /// Runs `body`, which must throw `expected` (or a type derived from it) with every one of
  /// `words` in its message, and must leave the observable state unchanged.
  template <class F>
  void rejects(const std::string& what, thrown expected, std::initializer_list<const char*> words, F&& body) {
    SCOPED_TRACE(what);
    ++bad_inputs_tried;
    const observed_state before = observe(*alloc_);
    const outcome o = run_op(body);
    const bool kind_ok = o.kind == expected || (expected == thrown::error && o.kind == thrown::cuda_error);
    EXPECT_TRUE(kind_ok) << what << ": threw " << to_string(o.kind) << " instead of " << to_string(expected) << ": "
                         << o.message;
    EXPECT_TRUE(contains(o.message, "streampool") || contains(o.message, "CUDA out of memory"))
        << what << ": message does not say where it comes from: " << o.message;
    for (const char* w : words) EXPECT_TRUE(contains(o.message, w)) << what << ": message lacks '" << w << "': " << o.message;
    EXPECT_TRUE(observe(*alloc_) == before) << what << ": the allocator's state changed";
  }

  [[nodiscard]] bool live(void* p, stream_t own) {
    return run_op([&] { alloc_->record_stream(p, own); }).ok();
  }

  std::shared_ptr<sim_driver> sim_;
  std::unique_ptr<allocator> alloc_;
  stream_t s0_ = nullptr, s0b_ = nullptr, s1_ = nullptr, destroyed_ = nullptr;
  void* live_ = nullptr;
  void* live1_ = nullptr;
  void* freed_ = nullptr;
  void* unfreeable_ = nullptr;  ///< an allocation whose free the driver refuses for good
};

TEST_P(bad_input_catalogue, AllocateRejectsBadSizesAndDevices) {
  rejects("allocate(0)", thrown::error, {"size 0"}, [&] { (void)alloc_->allocate(0, s0_, 0); });
  for (const std::size_t size : {std::numeric_limits<std::size_t>::max(), static_cast<std::size_t>(-1) - 511,
                                 static_cast<std::size_t>(-4096), std::numeric_limits<std::size_t>::max() / 2,
                                 max_request_bytes}) {
    rejects("allocate(" + std::to_string(size) + ")", thrown::out_of_memory, {"out of memory", "1EB"},
            [&] { (void)alloc_->allocate(size, s0_, 0); });
  }
  for (const int device : {2, -2, INT_MAX, INT_MIN}) {
    rejects("allocate on device " + std::to_string(device), thrown::error, {"out of range"},
            [&] { (void)alloc_->allocate(64, s0_, device); });
  }
}

TEST_P(bad_input_catalogue, AllocateMoreThanTheDeviceIsAnOutOfMemoryWithFigures) {
  // Not a bad argument: a real OOM. The retry ladder may release cache, so only the live set,
  // the message and the counters are checked.
  ++bad_inputs_tried;
  const std::int64_t live0 = alloc_->stats(0).allocation[0].current;
  const outcome o = run_op([&] { (void)alloc_->allocate(2 * gib, s0_, 0); });
  ASSERT_EQ(o.kind, thrown::out_of_memory) << o.message;
  EXPECT_TRUE(contains(o.message, "2.00 GiB")) << o.message;
  EXPECT_TRUE(contains(o.message, "total capacity of 1024.00 MiB")) << o.message;
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, live0);
  EXPECT_EQ(alloc_->stats(0).num_ooms, 1);
  EXPECT_TRUE(live(live_, s0_));
}

TEST_P(bad_input_catalogue, DeallocateRejectsPointersItDidNotHandOut) {
  int host = 0;
  rejects("deallocate(host pointer)", thrown::error, {"deallocate"}, [&] { alloc_->deallocate(&host); });
  rejects("double free", thrown::error, {"double free"}, [&] { alloc_->deallocate(freed_); });
  rejects("deallocate(interior +16)", thrown::error, {"16 bytes"},
          [&] { alloc_->deallocate(static_cast<char*>(live_) + 16); });
  rejects("deallocate(interior +4095)", thrown::error, {"4095 bytes"},
          [&] { alloc_->deallocate(static_cast<char*>(live_) + 4095); });
  rejects("deallocate((void*)1)", thrown::error, {"deallocate"}, [&] { alloc_->deallocate(reinterpret_cast<void*>(1)); });
  rejects("deallocate(UINTPTR_MAX)", thrown::error, {"deallocate"},
          [&] { alloc_->deallocate(reinterpret_cast<void*>(std::numeric_limits<std::uintptr_t>::max())); });
  // A pointer of another allocator instance: its device 2 has addresses this one never hands out
  // (sim instances share address layouts, so the same device would give the same addresses).
  sim_options options;
  options.device_count = 3;
  auto other_sim = std::make_shared<sim_driver>(options);
  auto other = make_allocator(parse_config(GetParam().config), other_sim);
  void* foreign = other->allocate(4096, nullptr, 2);
  rejects("deallocate(pointer of another allocator)", thrown::error, {"deallocate"},
          [&] { alloc_->deallocate(foreign); });
  other->deallocate(foreign);
  // nullptr is a no-op, not an error.
  const observed_state before = observe(*alloc_);
  EXPECT_TRUE(run_op([&] { alloc_->deallocate(nullptr); }).ok());
  EXPECT_TRUE(observe(*alloc_) == before);
}

TEST_P(bad_input_catalogue, RecordStreamRejectsPointersItDidNotHandOut) {
  int host = 0;
  rejects("record_stream(nullptr)", thrown::error, {"record_stream"}, [&] { alloc_->record_stream(nullptr, s0b_); });
  rejects("record_stream(host)", thrown::error, {"record_stream"}, [&] { alloc_->record_stream(&host, s0b_); });
  rejects("record_stream(freed)", thrown::error, {"record_stream"}, [&] { alloc_->record_stream(freed_, s0b_); });
  rejects("record_stream(interior)", thrown::error, {"record_stream"},
          [&] { alloc_->record_stream(static_cast<char*>(live_) + 512, s0b_); });
}

TEST_P(bad_input_catalogue, FractionsHistoryAndDeviceQueriesRejectBadArguments) {
  for (const double f : {std::nan(""), -0.1, 1.5, std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity(), 1.0000001, -1e-300}) {
    rejects("set_memory_fraction(" + std::to_string(f) + ")", thrown::error, {"set_memory_fraction", "[0.0, 1.0]"},
            [&] { alloc_->set_memory_fraction(f, 0); });
  }
  rejects("set_memory_fraction on device 5", thrown::error, {"out of range"}, [&] { alloc_->set_memory_fraction(0.5, 5); });
  rejects("memory_fraction(5)", thrown::error, {"out of range"}, [&] { (void)alloc_->memory_fraction(5); });
  rejects("stats(5)", thrown::error, {"out of range"}, [&] { (void)alloc_->stats(5); });
  rejects("stats(-7)", thrown::error, {"out of range"}, [&] { (void)alloc_->stats(-7); });
  rejects("reset_peak_stats(9)", thrown::error, {"out of range"}, [&] { alloc_->reset_peak_stats(9); });
  rejects("reset_accumulated_stats(9)", thrown::error, {"out of range"}, [&] { alloc_->reset_accumulated_stats(9); });
  rejects("trace(9)", thrown::error, {"out of range"}, [&] { (void)alloc_->trace(9); });
  rejects("record_history(true, 0)", thrown::error, {"max_entries"}, [&] { alloc_->record_history(true, 0); });
}

TEST_P(bad_input_catalogue, PoolCallsRejectMisuse) {
  const auto filter = [this](stream_t s) { return s == s0b_; };
  rejects("begin_allocate_to_pool({0,0})", thrown::error, {"default pool"},
          [&] { alloc_->begin_allocate_to_pool(mempool_id{}, filter, 0); });
  rejects("begin_allocate_to_pool with an empty filter", thrown::error, {"filter"},
          [&] { alloc_->begin_allocate_to_pool(allocator::create_pool_id(), stream_filter{}, 0); });
  rejects("begin_allocate_to_pool on device 5", thrown::error, {"out of range"},
          [&] { alloc_->begin_allocate_to_pool(allocator::create_pool_id(), filter, 5); });
  rejects("end_allocate_to_pool without begin", thrown::error, {"end_allocate_to_pool"},
          [&] { alloc_->end_allocate_to_pool(allocator::create_pool_id(), 0); });
  rejects("release_pool of an unknown pool", thrown::error, {"release_pool"},
          [&] { alloc_->release_pool(allocator::create_pool_id(), 0); });
  rejects("release_pool({0,0})", thrown::error, {"release_pool"}, [&] { alloc_->release_pool(mempool_id{}, 0); });

  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, filter, 0);
  void* in_pool = alloc_->allocate(1000, s0b_, 0);
  rejects("begin_allocate_to_pool twice on the same id", thrown::error, {"already recording"},
          [&] { alloc_->begin_allocate_to_pool(pool, filter, 0); });
  alloc_->end_allocate_to_pool(pool, 0);
  rejects("end_allocate_to_pool twice", thrown::error, {"end_allocate_to_pool"},
          [&] { alloc_->end_allocate_to_pool(pool, 0); });
  rejects("end_allocate_to_pool on the other device", thrown::error, {"end_allocate_to_pool"},
          [&] { alloc_->end_allocate_to_pool(pool, 1); });
  alloc_->release_pool(pool, 0);
  rejects("release_pool twice", thrown::error, {"release_pool"}, [&] { alloc_->release_pool(pool, 0); });
  alloc_->deallocate(in_pool);
}

// --- legal but unusual: works or fails cleanly ----------------------------------------------------

TEST_P(bad_input_catalogue, DestroyedStreamIsAClearErrorOrHarmless) {
  ++bad_inputs_tried;
  const observed_state before = observe(*alloc_);
  void* p = nullptr;
  const outcome o = run_op([&] { p = alloc_->allocate(1000, destroyed_, 0); });
  if (o.ok()) {
    // The native backend never hands the stream to the driver when allocating.
    EXPECT_TRUE(run_op([&] { alloc_->deallocate(p); }).ok());
  } else {
    EXPECT_EQ(o.kind, thrown::cuda_error) << o.message;
    // The sim fails a destroyed stream as the real driver does (Note [Sim destroyed streams]).
    EXPECT_TRUE(contains(o.message, "destroyed stream")) << o.message;
    EXPECT_TRUE(observe(*alloc_) == before) << "a failed allocation on a destroyed stream changed the state";
  }
  // record_stream to a stream that is then destroyed, and free: ordering on it fails in the driver.
  ++bad_inputs_tried;
  stream_t doomed = nullptr;
  ASSERT_TRUE(sim_->stream_create(0, &doomed).ok());
  void* q = alloc_->allocate(1000, s0_, 0);
  EXPECT_TRUE(run_op([&] { alloc_->record_stream(q, doomed); }).ok());
  ASSERT_TRUE(sim_->stream_destroy(0, doomed).ok());
  const outcome freed = run_op([&] { alloc_->deallocate(q); });
  if (freed.ok()) return;
  EXPECT_EQ(freed.kind, thrown::cuda_error) << freed.message;
  if (live(q, s0_)) {
    EXPECT_EQ(alloc_->stats(0).allocation[0].current, 2);  // live_ and q, consistently
    unfreeable_ = q;  // the driver refuses the destroyed stream for good
  } else {
    ADD_FAILURE() << "deallocate threw but freed: " << freed.message;
  }
}

TEST_P(bad_input_catalogue, RecordStreamOfAnotherDevicesStreamIsOrderedOrAClearError) {
  ++bad_inputs_tried;
  void* p = alloc_->allocate(1000, s0_, 0);
  const outcome r = run_op([&] { alloc_->record_stream(p, s1_); });
  if (!r.ok()) {
    // Refused up front (native: Note [record_stream across devices]): a clear error, nothing
    // recorded, so the free needs no event and succeeds.
    EXPECT_EQ(r.kind, thrown::error) << r.message;
    EXPECT_TRUE(contains(r.message, "belongs to device 1")) << r.message;
    EXPECT_TRUE(run_op([&] { alloc_->deallocate(p); }).ok());
    return;
  }
  const outcome o = run_op([&] { alloc_->deallocate(p); });
  if (o.ok()) {
    EXPECT_EQ(alloc_->stats(0).allocation[0].current, 1);
  } else {
    EXPECT_EQ(o.kind, thrown::cuda_error) << o.message;
    const bool still_live = live(p, s0_);
    EXPECT_TRUE(still_live) << "deallocate threw but freed: " << o.message;
    if (still_live) {
      sim_->complete_all();
      EXPECT_TRUE(run_op([&] { alloc_->deallocate(p); }).ok());
    }
  }
}

TEST_P(bad_input_catalogue, FreeDuringACaptureOfAPointerOfAnotherPool) {
  ++bad_inputs_tried;
  const mempool_id first = allocator::create_pool_id();
  const mempool_id second = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(first, [this](stream_t s) { return s == s0b_; }, 0);
  sim_->set_capture(s0b_, capture_status::active, first.second);
  void* p = alloc_->allocate(5000, s0b_, 0);
  sim_->set_capture(s0b_, capture_status::none, 0);
  alloc_->end_allocate_to_pool(first, 0);
  stream_t other = nullptr;
  ASSERT_TRUE(sim_->stream_create(0, &other).ok());
  alloc_->begin_allocate_to_pool(second, [other](stream_t s) { return s == other; }, 0);
  sim_->set_capture(other, capture_status::active, second.second);
  const outcome o = run_op([&] { alloc_->deallocate(p); });
  EXPECT_TRUE(o.ok()) << o.message;
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 1);  // live_ only
  sim_->set_capture(other, capture_status::none, 0);
  alloc_->end_allocate_to_pool(second, 0);
  alloc_->release_pool(first, 0);
  alloc_->release_pool(second, 0);
}

INSTANTIATE_TEST_SUITE_P(both, bad_input_catalogue,
                         ::testing::Values(stress_cases().front(), stress_cases().back()), stress_case_name);

// --- the C API ---------------------------------------------------------------------------------------

class c_api_bad_input : public ::testing::TestWithParam<stress_case> {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_uninstall();
    sim_ = std::make_shared<sim_driver>();
    c_api_impl::c_api_install(make_allocator(parse_config(GetParam().config), sim_));
  }
  void TearDown() override { (void)c_api_impl::c_api_uninstall(); }

  /// `call` must set status `expected` with a message, and leave the statistics unchanged.
  template <class F>
  void rejects(const std::string& what, int expected, F&& call) {
    SCOPED_TRACE(what);
    ++bad_inputs_tried;
    const std::string before = streampool_stats_json(0);
    call();
    EXPECT_EQ(streampool_last_status(), expected) << what << ": " << streampool_last_error();
    EXPECT_NE(std::string(streampool_last_error()), "") << what;
    EXPECT_EQ(std::string(streampool_stats_json(0)), before) << what << ": statistics changed";
  }

  std::shared_ptr<sim_driver> sim_;
};

TEST_P(c_api_bad_input, EveryEntryPointReturnsAStatus) {
  void* p = streampool_alloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  void* freed = streampool_alloc(100, 0, nullptr);
  streampool_free(freed, 100, 0, nullptr);
  int host = 0;
  rejects("free(host)", STREAMPOOL_ERROR_INVALID_ARGUMENT, [&] { streampool_free(&host, 4, 0, nullptr); });
  rejects("double free", STREAMPOOL_ERROR_INVALID_ARGUMENT, [&] { streampool_free(freed, 100, 0, nullptr); });
  rejects("free(interior)", STREAMPOOL_ERROR_INVALID_ARGUMENT,
          [&] { streampool_free(static_cast<char*>(p) + 8, 4088, 0, nullptr); });
  rejects("record_stream(NULL)", STREAMPOOL_ERROR_INVALID_ARGUMENT, [&] { (void)streampool_record_stream(nullptr, nullptr); });
  rejects("record_stream(host)", STREAMPOOL_ERROR_INVALID_ARGUMENT, [&] { (void)streampool_record_stream(&host, nullptr); });
  for (const double f : {std::nan(""), -0.1, 1.5}) {
    rejects("set_memory_fraction(" + std::to_string(f) + ")", STREAMPOOL_ERROR_INVALID_ARGUMENT,
            [&] { (void)streampool_set_memory_fraction(f, 0); });
  }
  rejects("set_memory_fraction on device 9", STREAMPOOL_ERROR_INVALID_ARGUMENT,
          [&] { (void)streampool_set_memory_fraction(0.5, 9); });
  rejects("alloc(SIZE_MAX)", STREAMPOOL_ERROR_OUT_OF_MEMORY, [&] {
    EXPECT_EQ(streampool_alloc(std::numeric_limits<std::size_t>::max(), 0, nullptr), nullptr);
  });
  rejects("alloc on device 9", STREAMPOOL_ERROR_INVALID_ARGUMENT, [&] { EXPECT_EQ(streampool_alloc(64, 9, nullptr), nullptr); });
  rejects("alloc on device -5", STREAMPOOL_ERROR_INVALID_ARGUMENT, [&] { EXPECT_EQ(streampool_alloc(64, -5, nullptr), nullptr); });
  rejects("stats_json(9)", STREAMPOOL_ERROR_INVALID_ARGUMENT, [&] { EXPECT_EQ(streampool_stats_json(9), nullptr); });
  rejects("init while installed", STREAMPOOL_ERROR_STATE, [&] { (void)streampool_init("backend:native"); });
  ++bad_inputs_tried;  // shutdown empties the cache first, so only the status is checked
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_ERROR_STATE) << "shutdown with a live allocation";
  EXPECT_TRUE(contains(streampool_last_error(), "still live")) << streampool_last_error();
  // Still works. A free with the wrong size and device frees the block anyway (Note [Mismatched
  // free]: refusing it would leak), reported once through the warning handler.
  streampool_free(p, 4095, 1, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_EQ(sim_->bytes_in_use(0), 0u);
}

INSTANTIATE_TEST_SUITE_P(both, c_api_bad_input, ::testing::Values(stress_cases().front(), stress_cases().back()),
                         stress_case_name);

/// Prints how many bad inputs the run tried, once all tests are done.
class bad_input_figures : public ::testing::Environment {
 public:
  void TearDown() override {
    if (bad_inputs_tried != 0) std::cout << "[ figures  ] bad inputs tried: " << bad_inputs_tried << "\n";
  }
};
[[maybe_unused]] ::testing::Environment* const figures_environment =
    ::testing::AddGlobalTestEnvironment(new bad_input_figures);

}  // namespace
}  // namespace streampool::stress
