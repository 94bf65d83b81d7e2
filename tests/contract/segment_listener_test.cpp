// The segment listener (allocator::set_segment_listener, Note [Segment listener]) on every backend
// and driver: it hears exactly the segment events the trace records, with history off too, in
// order; it can be replaced and removed; a listener that throws is reported by warn() and the
// allocator carries on; a free is heard before the memory goes back to the driver (native).
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <vector>

#include "support/backend_fixture.hpp"
#include "support/warnings_scope.hpp"

namespace streampool::testing {
namespace {

bool is_segment(trace_action a) {
  return a == trace_action::segment_alloc || a == trace_action::segment_free || a == trace_action::segment_map ||
         a == trace_action::segment_unmap;
}

struct heard {
  std::mutex mutex;
  std::vector<trace_entry> entries;
  segment_listener listener() {
    return [this](const trace_entry& e) {
      std::lock_guard lock(mutex);
      entries.push_back(e);
    };
  }
};

class segment_listener_test : public backend_test {
 protected:
  /// A few allocations big enough for segments of their own, then every one freed and the cache emptied.
  void churn() {
    std::vector<void*> ptrs;
    for (const std::size_t bytes : {std::size_t{512}, 3 * mib, 25 * mib, 64 * mib}) ptrs.push_back(alloc_->allocate(bytes));
    for (void* p : ptrs) alloc_->deallocate(p);
    synchronize();
    alloc_->empty_cache();
  }
};

TEST_P(segment_listener_test, HearsTheTracesSegmentEventsInOrder) {
  heard h;
  alloc_->set_segment_listener(h.listener());
  alloc_->record_history(true);
  churn();
  std::vector<trace_entry> traced;
  for (const trace_entry& e : alloc_->trace(0)) {
    if (is_segment(e.action)) traced.push_back(e);
  }
  ASSERT_FALSE(traced.empty());
  ASSERT_EQ(h.entries.size(), traced.size());
  for (std::size_t i = 0; i < traced.size(); ++i) {
    EXPECT_EQ(h.entries[i].action, traced[i].action) << i;
    EXPECT_EQ(h.entries[i].address, traced[i].address) << i;
    EXPECT_EQ(h.entries[i].size, traced[i].size) << i;
    EXPECT_EQ(h.entries[i].device, 0) << i;
  }
  for (const trace_entry& e : h.entries) EXPECT_TRUE(is_segment(e.action)) << to_string(e.action);
}

TEST_P(segment_listener_test, HearsWithHistoryOffAndEveryAllocIsFreed) {
  heard h;
  alloc_->set_segment_listener(h.listener());
  churn();
  ASSERT_FALSE(h.entries.empty());
  EXPECT_TRUE(alloc_->trace(0).empty()) << "the ring stays off";
  std::int64_t live = 0;
  for (const trace_entry& e : h.entries) {
    if (e.action == trace_action::segment_alloc || e.action == trace_action::segment_map) live += static_cast<std::int64_t>(e.size);
    if (e.action == trace_action::segment_free || e.action == trace_action::segment_unmap) live -= static_cast<std::int64_t>(e.size);
  }
  EXPECT_EQ(live, alloc_->stats(0).reserved_bytes[0].current) << "what was heard adds up to what is reserved";
}

TEST_P(segment_listener_test, ReplacedAndRemoved) {
  heard first;
  heard second;
  alloc_->set_segment_listener(first.listener());
  alloc_->set_segment_listener(second.listener());
  churn();
  EXPECT_TRUE(first.entries.empty()) << "a replaced listener hears nothing more";
  EXPECT_FALSE(second.entries.empty());
  const std::size_t before = second.entries.size();
  alloc_->set_segment_listener(nullptr);
  churn();
  EXPECT_EQ(second.entries.size(), before) << "removed";
}

TEST_P(segment_listener_test, AThrowingListenerIsReportedAndTheAllocatorCarriesOn) {
  warnings_scope warnings;
  int calls = 0;
  alloc_->set_segment_listener([&calls](const trace_entry&) {
    ++calls;
    throw std::runtime_error("registration refused");
  });
  churn();
  EXPECT_GT(calls, 0);
  EXPECT_FALSE(warnings_scope::containing("segment listener failed (the event is dropped): registration refused").empty());
  EXPECT_EQ(alloc_->stats(0).reserved_bytes[0].current, 0) << "every segment still went back";
  void* p = alloc_->allocate(mib);
  alloc_->deallocate(p);
}

TEST_P(segment_listener_test, NativeHearsAFreeBeforeTheMemoryGoes) {
  if (!is_native() || sim_ == nullptr) GTEST_SKIP() << "the order against the driver is asserted on the sim, native backend";
  std::vector<std::uint64_t> frees_when_heard;
  alloc_->set_segment_listener([&](const trace_entry& e) {
    if (e.action == trace_action::segment_free) frees_when_heard.push_back(sim_->calls(driver_call::free));
  });
  void* p = alloc_->allocate(64 * mib);
  alloc_->deallocate(p);
  const std::uint64_t frees_before = sim_->calls(driver_call::free);
  alloc_->empty_cache();
  ASSERT_EQ(frees_when_heard.size(), 1u);
  EXPECT_EQ(frees_when_heard[0], frees_before) << "heard before cudaFree";
  EXPECT_EQ(sim_->calls(driver_call::free), frees_before + 1);
}

INSTANTIATE_TEST_SUITE_P(every_backend, segment_listener_test, ::testing::ValuesIn(all_backend_cases()),
                         backend_case_name);

}  // namespace
}  // namespace streampool::testing
