// sim_hazards_test.cpp — the sim's stream-ordering hazard checker (Note [Sim hazard checker]):
// a use of memory on one stream after a use on another is a violation unless the first completed
// or the second waits for it (event waits, transitively; wait_for); unmapping memory still in use
// is a violation; event queries see incomplete work as not ready; bad input is refused.
#include <gtest/gtest.h>

#include <string>

#include "driver_test_support.hpp"
#include "streampool/errors.hpp"

namespace streampool::testing {
namespace {

class sim_hazards : public sim_test {
 protected:
  sim_options make_options() override { return lazy_two_devices(); }
  void SetUp() override {
    sim_test::SetUp();
    ASSERT_TRUE(ok(sim().malloc(0, 1 * mib, &block_)));
    a_ = new_stream();
    b_ = new_stream();
    c_ = new_stream();
  }
  /// Records a fresh event on `on` and makes `waiter` wait on it.
  void order(stream_t waiter, stream_t on) {
    const event_t event = new_event();
    ASSERT_TRUE(ok(sim().event_record(event, on)));
    ASSERT_TRUE(ok(sim().stream_wait_event(waiter, event)));
  }
  std::string reports() {
    std::string text;
    for (const std::string& line : sim().hazard_reports()) text += line + "\n";
    return text;
  }
  void* at(std::size_t offset) { return static_cast<char*>(block_) + offset; }

  void* block_ = nullptr;
  stream_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

TEST_F(sim_hazards, AUseOnAnotherStreamWithoutOrderingIsAViolation) {
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  EXPECT_FALSE(sim().use(b_, block_, 4096));
  EXPECT_EQ(sim().hazard_violations(), 1u);
  ASSERT_EQ(sim().hazard_reports().size(), 1u);
  const std::string text = reports();
  EXPECT_NE(text.find("not ordered after"), std::string::npos) << text;
  EXPECT_NE(text.find("stream 0x"), std::string::npos) << text;
  EXPECT_NE(text.find("+4096"), std::string::npos) << text;
  // use() submits one work item per call.
  EXPECT_EQ(sim().submitted_work(a_), 1u);
  EXPECT_EQ(sim().submitted_work(b_), 1u);
  sim().clear_hazard_violations();
  EXPECT_EQ(sim().hazard_violations(), 0u);
  EXPECT_TRUE(sim().hazard_reports().empty());
}

TEST_F(sim_hazards, TheSameStreamIsAlwaysOrdered) {
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(sim().use(a_, block_, 1 * mib));
  EXPECT_EQ(sim().hazard_violations(), 0u);
}

TEST_F(sim_hazards, AnEventWaitOrdersTheNewUser) {
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  order(b_, a_);
  EXPECT_TRUE(sim().use(b_, block_, 4096));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
}

TEST_F(sim_hazards, AnEventRecordedBeforeTheUseDoesNotOrderIt) {
  const event_t early = new_event();
  ASSERT_TRUE(ok(sim().event_record(early, a_)));
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  ASSERT_TRUE(ok(sim().stream_wait_event(b_, early)));
  EXPECT_FALSE(sim().use(b_, block_, 4096));
  EXPECT_EQ(sim().hazard_violations(), 1u);
}

TEST_F(sim_hazards, AWaitMadeAfterTheNewUseDoesNotOrderIt) {
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  EXPECT_TRUE(sim().use(b_, at(1 * kib * 8), 4096));  // elsewhere: fine
  EXPECT_FALSE(sim().use(b_, block_, 4096));
  order(b_, a_);  // too late for the use above
  EXPECT_EQ(sim().hazard_violations(), 1u);
}

TEST_F(sim_hazards, HostSynchronisationAndCompletionOrderEverything) {
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  ASSERT_TRUE(ok(sim().stream_synchronize(0, a_)));
  EXPECT_TRUE(sim().use(b_, block_, 4096));
  sim().complete(b_);  // the test playing the GPU
  EXPECT_TRUE(sim().use(c_, block_, 4096));
  const event_t event = new_event();
  ASSERT_TRUE(ok(sim().event_record(event, c_)));
  ASSERT_TRUE(ok(sim().event_synchronize(event)));
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  ASSERT_TRUE(ok(sim().device_synchronize(0)));
  EXPECT_TRUE(sim().use(b_, block_, 4096));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
}

TEST_F(sim_hazards, EventQueriesSeeIncompleteWorkAsNotReady) {
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  const event_t event = new_event();
  ASSERT_TRUE(ok(sim().event_record(event, a_)));
  EXPECT_TRUE(fails(status::not_ready, sim().event_query(event)));
  EXPECT_FALSE(sim().use(b_, block_, 4096)) << "a query that said not ready orders nothing";
  sim().complete(a_);
  EXPECT_TRUE(ok(sim().event_query(event)));
  EXPECT_FALSE(sim().use(c_, block_, 4096)) << "a_ completed, but b_'s use has not";
  sim().complete_all();
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  EXPECT_EQ(sim().hazard_violations(), 2u) << reports();
}

TEST_F(sim_hazards, TransitiveChainsOrderAndBrokenChainsDoNot) {
  // A -> C -> B: B waits on C after C waited on A's use.
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  order(c_, a_);
  order(b_, c_);
  EXPECT_TRUE(sim().use(b_, block_, 4096));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
  // B -> C -> A with C's wait on B *before* B's use: the chain does not reach it.
  const event_t early = new_event();
  ASSERT_TRUE(ok(sim().event_record(early, b_)));
  ASSERT_TRUE(ok(sim().stream_wait_event(c_, early)));
  EXPECT_TRUE(sim().use(b_, at(8192), 4096));
  order(a_, c_);
  EXPECT_FALSE(sim().use(a_, at(8192), 4096));
  EXPECT_EQ(sim().hazard_violations(), 1u);
}

TEST_F(sim_hazards, CompletionOfAChainKeepsTheOrdering) {
  // B waited on A; completing B drops the dependency but completes A, so C ordered after B is
  // still ordered after A (Note [Sim completion model]).
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  order(b_, a_);
  EXPECT_TRUE(sim().use(b_, block_, 4096));
  sim().complete(b_);
  EXPECT_EQ(sim().completed_work(a_), sim().submitted_work(a_));
  EXPECT_TRUE(sim().use(c_, block_, 4096));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
}

TEST_F(sim_hazards, WaitForOrdersLikeAnEvent) {
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  sim().wait_for(b_, a_);
  EXPECT_TRUE(sim().use(b_, block_, 4096));
  sim().wait_for(a_, a_);  // a stream waiting for itself: nothing
  EXPECT_TRUE(sim().use(c_, at(4096), 4096));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
  EXPECT_THROW(sim().wait_for(b_, reinterpret_cast<stream_t>(0x1234)), error);
}

TEST_F(sim_hazards, OnlyOverlappingBytesConflict) {
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  EXPECT_TRUE(sim().use(b_, at(4096), 4096)) << "adjacent, not overlapping";
  EXPECT_FALSE(sim().use(c_, at(4000), 200)) << "overlaps both";
  EXPECT_EQ(sim().hazard_violations(), 1u) << "one violation per use";
  // The use above became the last use of [4000, 4200): a_ may use [0, 4000) without a wait.
  EXPECT_TRUE(sim().use(a_, block_, 4000));
  EXPECT_FALSE(sim().use(a_, at(4100), 8));
  EXPECT_EQ(sim().hazard_violations(), 2u);
}

TEST_F(sim_hazards, PoolMemoryIsCheckedToo) {
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(sim().pool_get_default(0, &pool)));
  void* p = nullptr;
  ASSERT_TRUE(ok(sim().malloc_async(pool, 1000, a_, &p)));
  EXPECT_TRUE(sim().use(a_, p, 1000));
  EXPECT_FALSE(sim().use(b_, p, 1000));
}

class sim_hazards_vmm : public sim_hazards {
 protected:
  void map(void* va, vmm_handle_t* handle) {
    ASSERT_TRUE(ok(sim().vmm_create(0, granule, handle)));
    ASSERT_TRUE(ok(sim().vmm_map(va, granule, *handle)));
    ASSERT_TRUE(ok(sim().vmm_set_access(va, granule, 0)));
  }
  /// One page mapped at `va` and again at `va` + 2 pages (Note [Sim aliased mappings]).
  void map_twice(void** va, void** alias, vmm_handle_t* handle) {
    ASSERT_TRUE(ok(sim().vmm_reserve(0, 4 * granule, 0, va)));
    *alias = static_cast<char*>(*va) + 2 * granule;
    map(*va, handle);
    ASSERT_TRUE(ok(sim().vmm_map(*alias, granule, *handle)));
    ASSERT_TRUE(ok(sim().vmm_set_access(*alias, granule, 0)));
  }
  static constexpr std::size_t granule = 2 * mib;
};

TEST_F(sim_hazards_vmm, UnmappingMemoryInUseIsAViolation) {
  void* va = nullptr;
  ASSERT_TRUE(ok(sim().vmm_reserve(0, 4 * granule, 0, &va)));
  vmm_handle_t handle = 0;
  map(va, &handle);
  EXPECT_TRUE(sim().use(a_, va, granule));
  ASSERT_TRUE(ok(sim().vmm_unmap(va, granule)));
  EXPECT_EQ(sim().hazard_violations(), 1u);
  const std::string text = reports();
  EXPECT_NE(text.find("vmm_unmap"), std::string::npos) << text;
  EXPECT_NE(text.find("while in use"), std::string::npos) << text;
  EXPECT_THROW((void)sim().use(a_, va, granule), error) << "unmapped pages are not device memory";
  ASSERT_TRUE(ok(sim().vmm_release(handle)));
}

TEST_F(sim_hazards_vmm, IdlePagesMoveToAnotherAddressAndStartClean) {
  void* va = nullptr;
  ASSERT_TRUE(ok(sim().vmm_reserve(0, 4 * granule, 0, &va)));
  void* other = static_cast<char*>(va) + 2 * granule;
  vmm_handle_t handle = 0;
  map(va, &handle);
  EXPECT_TRUE(sim().use(a_, va, granule));
  sim().complete(a_);
  ASSERT_TRUE(ok(sim().vmm_unmap(va, granule)));  // idle: fine
  ASSERT_TRUE(ok(sim().vmm_map(other, granule, handle)));
  ASSERT_TRUE(ok(sim().vmm_set_access(other, granule, 0)));
  EXPECT_TRUE(sim().use(b_, other, granule));
  // Mapped again at the first address, the pages have no history there either.
  vmm_handle_t second = 0;
  map(va, &second);
  EXPECT_TRUE(sim().use(c_, va, granule));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
  sim().complete_all();
  ASSERT_TRUE(ok(sim().vmm_unmap(va, granule)));
  ASSERT_TRUE(ok(sim().vmm_unmap(other, granule)));
  ASSERT_TRUE(ok(sim().vmm_release(handle)));
  ASSERT_TRUE(ok(sim().vmm_release(second)));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
}

TEST_F(sim_hazards_vmm, AUseThroughASecondMappingOfAPageIsCheckedAgainstTheFirst) {
  // Note [Sim aliased mappings]: one handle mapped at two addresses; a's use through the first is
  // not finished when b uses the second.
  void* va = nullptr;
  void* alias = nullptr;
  vmm_handle_t handle = 0;
  map_twice(&va, &alias, &handle);
  EXPECT_TRUE(sim().use(a_, va, granule));
  EXPECT_FALSE(sim().use(b_, alias, granule)) << "the same bytes, unordered";
  EXPECT_EQ(sim().hazard_violations(), 1u) << reports();
  sim().clear_hazard_violations();
  order(c_, a_);
  order(c_, b_);
  EXPECT_TRUE(sim().use(c_, va, granule)) << "c waits for a, and for b's use through the other mapping";
  EXPECT_FALSE(sim().use(a_, va, granule)) << "a conflicts with c (same mapping): counted once";
  EXPECT_EQ(sim().hazard_violations(), 1u) << reports();
  sim().complete_all();
  ASSERT_TRUE(ok(sim().vmm_unmap(va, granule)));
  ASSERT_TRUE(ok(sim().vmm_unmap(alias, granule)));
  ASSERT_TRUE(ok(sim().vmm_release(handle)));
}

TEST_F(sim_hazards_vmm, AnOrderedUseThroughASecondMappingIsFine) {
  void* va = nullptr;
  void* alias = nullptr;
  vmm_handle_t handle = 0;
  map_twice(&va, &alias, &handle);
  EXPECT_TRUE(sim().use(a_, va, granule));
  order(b_, a_);
  EXPECT_TRUE(sim().use(b_, alias, granule));
  sim().complete(a_);
  ASSERT_TRUE(ok(sim().vmm_unmap(va, granule))) << "a's use is done; b's, through the other mapping, goes on";
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
  sim().complete_all();
  ASSERT_TRUE(ok(sim().vmm_unmap(alias, granule)));
  ASSERT_TRUE(ok(sim().vmm_release(handle)));
}

TEST_F(sim_hazards, CudaFreeWaitsSoItIsNeverAViolation) {
  EXPECT_TRUE(sim().use(a_, block_, 1 * mib));
  ASSERT_TRUE(ok(sim().free(0, block_)));  // synchronises the device
  void* again = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 1 * mib, &again)));
  EXPECT_TRUE(sim().use(b_, again, 1 * mib));
  EXPECT_EQ(sim().hazard_violations(), 0u) << reports();
  block_ = again;
}

TEST_F(sim_hazards, EagerCompletionOrdersEverything) {
  sim().set_eager(true);
  EXPECT_TRUE(sim().use(a_, block_, 4096));
  EXPECT_TRUE(sim().use(b_, block_, 4096)) << "a_'s use completed at submission";
  EXPECT_EQ(sim().hazard_violations(), 0u);
}

TEST_F(sim_hazards, BadInputIsRefused) {
  EXPECT_THROW((void)sim().use(reinterpret_cast<stream_t>(0x1234), block_, 8), error);
  EXPECT_THROW((void)sim().use(a_, block_, 0), error);
  EXPECT_THROW((void)sim().use(a_, reinterpret_cast<void*>(0x1000), 8), error);
  EXPECT_THROW((void)sim().use(a_, block_, 2 * mib), error) << "past the end of the allocation";
  sim().set_capture(a_, capture_status::active, 7);
  EXPECT_THROW((void)sim().use(a_, block_, 8), error);
  sim().set_capture(a_, capture_status::none, 0);
  EXPECT_TRUE(sim().use(a_, block_, 8));
  const stream_t gone = new_stream();
  ASSERT_TRUE(ok(sim().stream_destroy(0, gone)));
  EXPECT_THROW((void)sim().use(gone, block_, 8), error);
  EXPECT_EQ(sim().hazard_violations(), 0u);
}

TEST_F(sim_hazards, TheDefaultStreamsAreNamedInReports) {
  EXPECT_TRUE(sim().use(nullptr, block_, 64));
  EXPECT_FALSE(sim().use(a_, block_, 64));
  const std::string text = reports();
  EXPECT_NE(text.find("default stream"), std::string::npos) << text;
}

/// Two unordered uses on a sim that aborts at the first violation.
void unordered_uses_on_a_strict_sim() {
  sim_options options;
  options.eager_completion = false;
  options.abort_on_hazard = true;
  sim_driver strict(options);
  stream_t s = nullptr;
  stream_t t = nullptr;
  void* p = nullptr;
  (void)strict.stream_create(0, &s);
  (void)strict.stream_create(0, &t);
  (void)strict.malloc(0, 4096, &p);
  (void)strict.use(s, p, 4096);
  (void)strict.use(t, p, 4096);
}

TEST(sim_hazards_death, AbortOnHazardStopsAtTheViolation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(unordered_uses_on_a_strict_sim(), "abort_on_hazard.*not ordered after");
}

}  // namespace
}  // namespace streampool::testing
