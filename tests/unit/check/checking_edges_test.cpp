// checking_edges_test.cpp — checking mode around the edges, on the sim for both backends: off by
// default it costs nothing (the same driver calls as the bare backend), record_stream'ed blocks
// are checked and poisoned only after the other streams' work, captures are left alone, and
// driver failures of the checks never lose a block.
#include <algorithm>

#include "check/check_layout.hpp"
#include "check_test_support.hpp"
#include "core/backends.hpp"

namespace streampool::testing {
namespace {

using check_impl::padded_size;
using check_impl::poison_byte;

using checking_edges = checking_test;

/// The same program on `alloc` over `sim`: a few allocations on two streams, record_stream, frees.
void run_program(allocator& alloc, sim_driver& sim) {
  stream_t a = nullptr;
  stream_t b = nullptr;
  check(sim, sim.stream_create(0, &a), "stream_create");
  check(sim, sim.stream_create(0, &b), "stream_create");
  std::vector<void*> blocks;
  for (std::size_t size : {1ul, 512ul, 4000ul, 3ul * mib, 30ul * mib}) {
    blocks.push_back(alloc.allocate(size, a));
    blocks.push_back(alloc.allocate(size, b));
  }
  alloc.record_stream(blocks[0], b);
  for (void* p : blocks) alloc.deallocate(p);
  sim.complete_all();
  alloc.empty_cache();
}

TEST_P(checking_edges, OffByDefaultMakesExactlyTheBackendsDriverCalls) {
  const allocator_config config = parse_config("backend:" + GetParam().backend);
  ASSERT_FALSE(config.debug_checks);
  sim_options options;
  options.eager_completion = false;
  auto through_factory = std::make_shared<sim_driver>(options);
  auto bare = std::make_shared<sim_driver>(options);
  {
    const std::unique_ptr<allocator> alloc = make_allocator(config, through_factory);
    run_program(*alloc, *through_factory);
  }
  {
    const std::unique_ptr<allocator> alloc = GetParam().backend == "native"
                                                 ? native::make_native_allocator(config, bare)
                                                 : async::make_async_allocator(config, bare);
    run_program(*alloc, *bare);
  }
  for (std::size_t c = 0; c < driver_call_count; ++c) {
    const auto call = static_cast<driver_call>(c);
    EXPECT_EQ(through_factory->calls(call), bare->calls(call)) << to_string(call);
  }
  EXPECT_EQ(through_factory->calls(driver_call::memset_async), 0u);
  EXPECT_EQ(through_factory->calls(driver_call::check_bytes), 0u);
}

TEST_P(checking_edges, OnCostsOneMemsetPerAllocationAndACheckAndAMemsetPerFree) {
  sim_->reset_counters();
  const stream_t s = new_stream();
  void* p = alloc_->allocate(100, s);
  EXPECT_EQ(sim_->calls(driver_call::memset_async), 1u);
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::memset_async), 2u);
  EXPECT_EQ(sim_->calls(driver_call::check_bytes), 1u);
  EXPECT_EQ(sim_->calls(driver_call::event_create), 0u);  // no record_stream: no ordering events
}

TEST_P(checking_edges, RecordStreamedBlockIsCheckedAfterTheOtherStreamsWork) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  void* p = alloc_->allocate(1000, a);
  alloc_->record_stream(p, b);
  // Stream b has work in flight that may still use the block: a marker event recorded on it.
  event_t marker = nullptr;
  check(*sim_, sim_->event_create(0, &marker), "event_create");
  check(*sim_, sim_->event_record(marker, b), "event_record");
  ASSERT_EQ(sim_->event_query(marker).code, status::not_ready);
  sim_->reset_counters();
  alloc_->deallocate(p);
  EXPECT_GE(sim_->calls(driver_call::stream_wait_event), 1u);
  // The check waited for stream a, which waited for b: b's work is done before the poison.
  EXPECT_EQ(sim_->event_query(marker).code, status::ok);
  const std::vector<std::uint8_t> after = read(p, padded_size(1000));
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](std::uint8_t v) { return v == poison_byte; }));
  check(*sim_, sim_->event_destroy(0, marker), "event_destroy");
  EXPECT_TRUE(warnings_.messages().empty());
  expect_nothing_left();
}

TEST_P(checking_edges, FreeDuringACaptureIsNeitherCheckedNorPoisoned) {
  const stream_t s = new_stream();
  const stream_t other = new_stream();
  void* p = alloc_->allocate(1000, s);
  write(p, 0, 1001, 0x33);  // an overrun that cannot be checked now
  // A capture on the block's stream: checking and poisoning would be captured into the graph.
  // Private-pool routing is irrelevant here; the capture only has to be visible to the driver.
  sim_->set_capture(s, capture_status::active, 7);
  sim_->reset_counters();
  try {
    alloc_->deallocate(p);
  } catch (const error&) {
    // A backend may refuse work during the capture; whatever it does, checking mode adds nothing.
  }
  EXPECT_EQ(sim_->calls(driver_call::check_bytes), 0u);
  EXPECT_EQ(sim_->calls(driver_call::memset_async), 0u);
  sim_->set_capture(s, capture_status::none, 0);
  EXPECT_TRUE(warnings_.containing("buffer overrun").empty());
  // Allocations made during a capture get no canary, and so no check at free time.
  sim_->set_capture(other, capture_status::active, 8);
  void* q = nullptr;
  try {
    q = alloc_->allocate(100, other);
  } catch (const error&) {  // a backend may refuse it; checking mode must still add nothing
  }
  sim_->set_capture(other, capture_status::none, 0);
  if (q != nullptr) {
    EXPECT_EQ(sim_->calls(driver_call::memset_async), 0u);
    alloc_->deallocate(q);
    EXPECT_EQ(sim_->calls(driver_call::check_bytes), 0u);
    EXPECT_EQ(sim_->calls(driver_call::memset_async), 1u);  // still poisoned when freed outside
  }
}

TEST_P(checking_edges, CanaryThatCannotBeWrittenFailsTheAllocationAndLosesNothing) {
  const stream_t s = new_stream();
  sim_->fail_next(driver_call::memset_async, 1, status::other);
  EXPECT_THROW((void)alloc_->allocate(1000, s), cuda_error);
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);
  void* p = alloc_->allocate(1000, s);  // the next one works
  alloc_->deallocate(p);
  expect_nothing_left();
}

TEST_P(checking_edges, FailedCheckOrPoisonWarnsAndStillFrees) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(1000, s);
  void* q = alloc_->allocate(1000, s);
  sim_->fail_next(driver_call::check_bytes, 1, status::other);
  alloc_->deallocate(p);
  EXPECT_EQ(warnings_.containing("verifying the canary of allocation #1").size(), 1u)
      << ::testing::PrintToString(warnings_.messages());
  sim_->fail_next(driver_call::memset_async, 1, status::other);
  alloc_->deallocate(q);
  EXPECT_EQ(warnings_.containing("poisoning the freed block of allocation #2").size(), 1u)
      << ::testing::PrintToString(warnings_.messages());
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);
  expect_nothing_left();
}

TEST_P(checking_edges, BackendStatisticsCountThePaddedSize) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(1000, s);
  const memory_stats stats = alloc_->stats(0);
  EXPECT_EQ(stats.requested_bytes[0].current, static_cast<std::int64_t>(padded_size(1000)));
  EXPECT_EQ(alloc_->config().debug_checks, true);
  EXPECT_EQ(alloc_->backend_name(), GetParam().backend);
  alloc_->deallocate(p);
  expect_nothing_left();
}

TEST_P(checking_edges, SecondDeviceIsCheckedOnItsOwnStreams) {
  alloc_.reset();
  sim_options options;
  options.device_count = 2;
  options.capacity = 2 * gib;
  sim_ = std::make_shared<sim_driver>(options);
  alloc_ = make_allocator(parse_config("backend:" + GetParam().backend + ",debug_checks:True"), sim_);
  stream_t s1 = nullptr;
  check(*sim_, sim_->stream_create(1, &s1), "stream_create");
  void* p = alloc_->allocate(700, s1, 1);
  write(p, 700, 2, 0x00);
  alloc_->deallocate(p);
  const std::vector<std::string> reports = warnings_.containing("buffer overrun");
  ASSERT_EQ(reports.size(), 1u) << ::testing::PrintToString(warnings_.messages());
  EXPECT_NE(reports.front().find("device 1"), std::string::npos) << reports.front();
  void* q = alloc_->allocate(700, nullptr, 1);  // device 1's legacy stream, from a thread on device 0
  alloc_->deallocate(q);
  EXPECT_EQ(warnings_.containing("buffer overrun").size(), 1u) << ::testing::PrintToString(warnings_.messages());
}

INSTANTIATE_TEST_SUITE_P(backends, checking_edges, ::testing::ValuesIn(check_cases()), check_case_name);

}  // namespace
}  // namespace streampool::testing
