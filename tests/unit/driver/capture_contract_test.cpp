// capture_contract_test.cpp — the stream-capture and graph calls of the driver contract, run on
// the sim and on make_cuda_driver() (skipped without a device, must pass on the GPU machine):
// begin/end capture with unique ids, side streams joining through events, instantiate / launch /
// destroy, graph memory nodes and auto_free_on_launch, callbacks tied to a graph's lifetime, and
// the capture-legality rules the allocators rely on (non-relaxed cudaMalloc is refused and
// invalidates a global capture; a relaxed one is fine). Sim-only rules (Note [Sim capture sequences]) are at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "driver_contract_test_support.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::testing {
namespace {

class capture_contract : public driver_contract {
 protected:
  void TearDown() override {
    for (const stream_t stream : streams_) (void)drv_->stream_destroy(0, stream);
    for (const event_t event : events_) (void)drv_->event_destroy(0, event);
  }
  stream_t stream() { return streams_.emplace_back(new_stream()); }
  event_t event() { return events_.emplace_back(new_event()); }
  capture_info info_of(stream_t stream) {
    capture_info info;
    EXPECT_TRUE(ok(drv_->stream_capture_info(stream, &info)));
    return info;
  }
  bool pools() const { return info_.memory_pools_supported; }
  mempool_t default_pool() {
    mempool_t pool = nullptr;
    EXPECT_TRUE(ok(drv_->pool_get_default(0, &pool)));
    return pool;
  }
  /// Instantiates and destroys `graph`; true when both succeeded.
  ::testing::AssertionResult instantiate_and_destroy(graph_t graph) {
    graph_exec_t exec = nullptr;
    const drv_result made = drv_->graph_instantiate(graph, &exec, instantiate_flags::none);
    (void)drv_->graph_destroy(graph);
    if (!made.ok()) return ::testing::AssertionFailure() << drv_->describe(made);
    return ok(drv_->graph_exec_destroy(exec));
  }

  std::vector<stream_t> streams_;
  std::vector<event_t> events_;
};

TEST_P(capture_contract, BeginReportsAnActiveCaptureWithAUniqueId) {
  const stream_t a = stream();
  const stream_t b = stream();
  ASSERT_TRUE(ok(drv_->stream_begin_capture(a, capture_mode::global)));
  ASSERT_TRUE(ok(drv_->stream_begin_capture(b, capture_mode::global)));
  const capture_info in_a = info_of(a);
  const capture_info in_b = info_of(b);
  EXPECT_EQ(in_a.status, capture_status::active);
  EXPECT_EQ(in_b.status, capture_status::active);
  EXPECT_NE(in_a.id, 0u);
  EXPECT_NE(in_a.id, in_b.id) << "each capture sequence has its own id";
  EXPECT_EQ(info_of(a).id, in_a.id) << "the id is stable during the capture";
  graph_t graph_a = nullptr;
  graph_t graph_b = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(a, &graph_a)));
  ASSERT_TRUE(ok(drv_->stream_end_capture(b, &graph_b)));
  EXPECT_NE(graph_a, nullptr);
  EXPECT_NE(graph_b, nullptr);
  EXPECT_EQ(info_of(a).status, capture_status::none);
  EXPECT_EQ(info_of(a).id, 0u);
  ASSERT_TRUE(ok(drv_->stream_begin_capture(a, capture_mode::thread_local_)));
  EXPECT_NE(info_of(a).id, in_a.id) << "a new capture on the same stream gets a new id";
  graph_t again = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(a, &again)));
  for (const graph_t graph : {graph_a, graph_b, again}) EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
}

TEST_P(capture_contract, CapturedGraphInstantiatesLaunchesAndReplays) {
  const stream_t s = stream();
  const bool with_memory = pools();
  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
  if (with_memory) {  // a graph allocation node and its free node
    void* ptr = nullptr;
    ASSERT_TRUE(ok(drv_->malloc_async(default_pool(), mib, s, &ptr)));
    EXPECT_NE(ptr, nullptr);
    ASSERT_TRUE(ok(drv_->free_async(ptr, s)));
  }
  graph_t graph = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(s, &graph)));
  ASSERT_NE(graph, nullptr);
  graph_exec_t exec = nullptr;
  ASSERT_TRUE(ok(drv_->graph_instantiate(graph, &exec, instantiate_flags::none)));
  ASSERT_NE(exec, nullptr);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_TRUE(ok(drv_->graph_launch(exec, s))) << "replay " << replay << ": allocation and free both in the graph";
  }
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, s)));
  EXPECT_TRUE(ok(drv_->graph_exec_destroy(exec)));
  EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
  EXPECT_TRUE(ok(drv_->graph_mem_trim(0)));
}

// docs/graph-capture.md: a graph whose allocation outlives a launch can be relaunched only when
// instantiated with auto_free_on_launch; the allocation may be freed outside the graph after a
// launch. (The sim has no graph memory: the refused relaunch is asserted on CUDA only.)
TEST_P(capture_contract, AutoFreeOnLaunchAllowsRelaunchWithUnfreedAllocations) {
  if (!pools()) GTEST_SKIP() << "device 0 has no memory pools";
  const stream_t s = stream();
  for (const bool auto_free : {false, true}) {
    SCOPED_TRACE(auto_free ? "auto_free_on_launch" : "no flags");
    void* outlives = nullptr;
    ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
    ASSERT_TRUE(ok(drv_->malloc_async(default_pool(), 2 * mib, s, &outlives)));
    graph_t graph = nullptr;
    ASSERT_TRUE(ok(drv_->stream_end_capture(s, &graph)));
    graph_exec_t exec = nullptr;
    const instantiate_flags flags = auto_free ? instantiate_flags::auto_free_on_launch : instantiate_flags::none;
    ASSERT_TRUE(ok(drv_->graph_instantiate(graph, &exec, flags)));
    ASSERT_TRUE(ok(drv_->graph_launch(exec, s)));
    const drv_result relaunch = drv_->graph_launch(exec, s);
    if (auto_free) {
      EXPECT_TRUE(ok(relaunch)) << "the previous launch's allocation is freed by the relaunch";
    } else if (drv_->name() == "cuda") {
      EXPECT_FALSE(relaunch.ok()) << "a relaunch while the previous launch's allocation is live is refused";
    }
    ASSERT_TRUE(ok(drv_->stream_synchronize(0, s)));
    EXPECT_TRUE(ok(drv_->free_async(outlives, s))) << "freed outside the graph, after a launch";
    ASSERT_TRUE(ok(drv_->stream_synchronize(0, s)));
    EXPECT_TRUE(ok(drv_->graph_exec_destroy(exec)));
    EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
  }
  EXPECT_TRUE(ok(drv_->graph_mem_trim(0)));
}

// Note [Sim graph memory] (src/driver/sim/sim_pool_calls.cpp): memory a capture allocated with
// cudaMallocAsync belongs to the graph; freeing it from outside the capture before any launch is
// refused (seen on the H200 with PyTorch's cudagraph trees), and the capture stays usable. After
// a launch the same free succeeds. This is why the cudaMallocAsync backend gives private pools
// memory of their own (Note [Private pools of the cudaMallocAsync backend]).
TEST_P(capture_contract, GraphOwnedMemoryCannotBeFreedOutsideTheGraphBeforeALaunch) {
  if (!pools()) GTEST_SKIP() << "device 0 has no memory pools";
  const stream_t s = stream();
  const stream_t other = stream();
  void* owned = nullptr;
  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
  ASSERT_TRUE(ok(drv_->malloc_async(default_pool(), 2 * mib, s, &owned)));
  graph_t graph = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(s, &graph)));
  graph_exec_t exec = nullptr;
  ASSERT_TRUE(ok(drv_->graph_instantiate(graph, &exec, instantiate_flags::auto_free_on_launch)));
  EXPECT_FALSE(drv_->free_async(owned, s).ok()) << "graph memory freed before any launch";
  EXPECT_FALSE(drv_->free_async(owned, other).ok()) << "on any stream";
  ASSERT_TRUE(ok(drv_->graph_launch(exec, s)));
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, s)));
  EXPECT_TRUE(ok(drv_->free_async(owned, s))) << "after a launch it may be freed outside the graph";
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, s)));
  EXPECT_TRUE(ok(drv_->graph_exec_destroy(exec)));
  EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
}

TEST_P(capture_contract, SideStreamJoinsThroughAnEventAndMustBeJoinedBack) {
  const stream_t origin = stream();
  const stream_t side = stream();
  const event_t fork = event();
  const event_t join = event();
  ASSERT_TRUE(ok(drv_->stream_begin_capture(origin, capture_mode::global)));
  const std::uint64_t id = info_of(origin).id;
  ASSERT_TRUE(ok(drv_->event_record(fork, origin)));
  ASSERT_TRUE(ok(drv_->stream_wait_event(side, fork)));
  const capture_info joined = info_of(side);
  EXPECT_EQ(joined.status, capture_status::active) << "waiting on a captured event joins the capture";
  EXPECT_EQ(joined.id, id);
  if (pools()) {  // work on the side stream: memory nodes
    void* ptr = nullptr;
    ASSERT_TRUE(ok(drv_->malloc_async(default_pool(), 4096, side, &ptr)));
    ASSERT_TRUE(ok(drv_->free_async(ptr, side)));
  }
  ASSERT_TRUE(ok(drv_->event_record(join, side)));
  ASSERT_TRUE(ok(drv_->stream_wait_event(origin, join)));
  graph_t graph = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(origin, &graph))) << "the side stream was joined back";
  EXPECT_EQ(info_of(side).status, capture_status::none) << "ending the capture ends it on joined streams";
  EXPECT_TRUE(instantiate_and_destroy(graph));
}

TEST_P(capture_contract, UnjoinedSideStreamFailsTheEndOfCapture) {
  if (!pools()) GTEST_SKIP() << "device 0 has no memory pools (no work to leave unjoined)";
  const stream_t origin = stream();
  const stream_t side = stream();
  const event_t fork = event();
  ASSERT_TRUE(ok(drv_->stream_begin_capture(origin, capture_mode::global)));
  ASSERT_TRUE(ok(drv_->event_record(fork, origin)));
  ASSERT_TRUE(ok(drv_->stream_wait_event(side, fork)));
  void* ptr = nullptr;
  ASSERT_TRUE(ok(drv_->malloc_async(default_pool(), 4096, side, &ptr)));
  ASSERT_TRUE(ok(drv_->free_async(ptr, side)));  // a free node nobody waits for
  graph_t graph = reinterpret_cast<graph_t>(0x1);
  EXPECT_TRUE(fails_with(*drv_, status::illegal_in_capture, drv_->stream_end_capture(origin, &graph)));
  EXPECT_EQ(graph, nullptr);
  for (const stream_t s : {origin, side}) {  // whatever the driver left capturing, end it
    if (info_of(s).status != capture_status::none) {
      (void)drv_->stream_end_capture(s, &graph);
      if (graph != nullptr) (void)drv_->graph_destroy(graph);
    }
  }
}

TEST_P(capture_contract, UnsafeCallsAreRefusedInGlobalCaptureAndRelaxedMallocIsNot) {
  const stream_t s = stream();
  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
  void* relaxed = nullptr;
  {
    const relaxed_thread_scope scope(*drv_, true);  // Note [Relaxed capture mode]
    EXPECT_TRUE(ok(scope.refusal()));
    EXPECT_TRUE(ok(drv_->malloc(0, mib, &relaxed)));
  }
  graph_t graph = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(s, &graph))) << "a relaxed cudaMalloc leaves the capture valid";
  EXPECT_NE(graph, nullptr);
  EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
  EXPECT_TRUE(ok(drv_->free(0, relaxed)));

  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
  void* unsafe = reinterpret_cast<void*>(0x1);
  EXPECT_TRUE(fails_with(*drv_, status::illegal_in_capture, drv_->malloc(0, mib, &unsafe)));
  EXPECT_EQ(unsafe, nullptr);
  capture_info invalid;
  ASSERT_TRUE(ok(drv_->stream_capture_info(s, &invalid)));
  EXPECT_EQ(invalid.status, capture_status::invalidated);
  EXPECT_EQ(invalid.id, 0u) << "a capture id only while the capture is active";
  graph = reinterpret_cast<graph_t>(0x1);
  EXPECT_TRUE(fails_with(*drv_, status::illegal_in_capture, drv_->stream_end_capture(s, &graph)))
      << "the refused call invalidated the capture";
  EXPECT_EQ(graph, nullptr);
  void* after = nullptr;
  ASSERT_TRUE(ok(drv_->malloc(0, mib, &after))) << "legal again once the capture ended";
  EXPECT_TRUE(ok(drv_->free(0, after)));
}

// Note [Relaxed queries]: statistics read pool attributes and free memory while a program captures.
TEST_P(capture_contract, PoolAttributesAndFreeMemoryCanBeReadDuringAGlobalCapture) {
  const stream_t s = stream();
  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  EXPECT_TRUE(ok(drv_->mem_get_info(0, &free_bytes, &total_bytes)));
  EXPECT_GT(total_bytes, 0u);
  if (pools()) {
    const mempool_t pool = default_pool();
    std::uint64_t reserved = 0;
    EXPECT_TRUE(ok(drv_->pool_get_attr(pool, pool_attr::reserved_mem_current, &reserved)));
    EXPECT_TRUE(ok(drv_->pool_set_attr(pool, pool_attr::used_mem_high, 0)));
  }
  graph_t graph = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(s, &graph))) << "the queries left the capture valid";
  EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
}

// Note [Relaxed queries]: a graph ended while another capture is still open is instantiated and
// destroyed at once (capture_scope::end), and a backend's first allocation may set up its device
// (properties, pools) inside a capture; none of that may break the capture still open.
TEST_P(capture_contract, SetupAndGraphCallsLeaveAnotherOpenCaptureValid) {
  const stream_t a = stream();
  const stream_t b = stream();
  ASSERT_TRUE(ok(drv_->stream_begin_capture(a, capture_mode::global)));
  ASSERT_TRUE(ok(drv_->stream_begin_capture(b, capture_mode::global)));
  device_info info;
  EXPECT_TRUE(ok(drv_->get_device_info(0, &info)));
  if (pools()) {
    mempool_t own = nullptr;
    EXPECT_TRUE(ok(drv_->pool_create(0, &own)));
    EXPECT_TRUE(ok(drv_->pool_destroy(own)));
    (void)default_pool();
  }
  EXPECT_EQ(info_of(a).status, capture_status::active) << "after device and pool setup";
  graph_t graph_b = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(b, &graph_b)));
  EXPECT_TRUE(instantiate_and_destroy(graph_b));
  EXPECT_EQ(info_of(a).status, capture_status::active) << "after instantiating b's graph";
  graph_t graph_a = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(a, &graph_a))) << "a's capture survived";
  EXPECT_TRUE(instantiate_and_destroy(graph_a));
}

// Note [Relaxed uncaptured calls]: stream-ordered allocation on a stream outside an open global
// capture breaks the capture unless the thread is in relaxed mode.
TEST_P(capture_contract, UncapturedStreamOrderedAllocationNeedsRelaxedMode) {
  if (!pools()) GTEST_SKIP() << "no memory pools on this device";
  const mempool_t pool = default_pool();
  const stream_t s = stream();
  const stream_t outside = stream();
  {
    ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
    void* ptr = nullptr;
    {
      const relaxed_thread_scope relaxed(*drv_, true);
      ASSERT_TRUE(ok(drv_->malloc_async(pool, 4096, outside, &ptr)));
      EXPECT_TRUE(ok(drv_->free_async(ptr, outside)));
    }
    EXPECT_EQ(info_of(s).status, capture_status::active) << "relaxed: the capture is untouched";
    graph_t graph = nullptr;
    ASSERT_TRUE(ok(drv_->stream_end_capture(s, &graph)));
    EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
  }
  {
    ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
    void* ptr = nullptr;
    const drv_result refused = drv_->malloc_async(pool, 4096, outside, &ptr);
    EXPECT_FALSE(refused.ok()) << "global mode refuses an uncaptured stream-ordered allocation";
    graph_t graph = nullptr;
    EXPECT_FALSE(drv_->stream_end_capture(s, &graph).ok()) << "and the capture is invalidated";
    EXPECT_EQ(graph, nullptr);
    if (ptr != nullptr) (void)drv_->free_async(ptr, outside);
  }
  capture_mode mode = capture_mode::relaxed;
  ASSERT_TRUE(ok(drv_->thread_exchange_capture_mode(&mode)));
  EXPECT_EQ(mode, capture_mode::global) << "a thread starts in global mode";
  ASSERT_TRUE(ok(drv_->thread_exchange_capture_mode(&mode)));
  EXPECT_EQ(mode, capture_mode::relaxed) << "the exchange hands back the mode it replaced";
}

TEST_P(capture_contract, BadCaptureCallsFailCleanly) {
  EXPECT_FALSE(drv_->stream_begin_capture(nullptr, capture_mode::global).ok()) << "the legacy stream";
  const stream_t s = stream();
  graph_t graph = reinterpret_cast<graph_t>(0x1);
  EXPECT_FALSE(drv_->stream_end_capture(s, &graph).ok()) << "not capturing";
  EXPECT_EQ(graph, nullptr);
  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::relaxed)));
  EXPECT_FALSE(drv_->stream_begin_capture(s, capture_mode::relaxed).ok()) << "already capturing";
  (void)drv_->stream_end_capture(s, &graph);  // the refused begin may have invalidated the capture
  if (graph != nullptr) {
    EXPECT_TRUE(ok(drv_->graph_destroy(graph)));
  }
  EXPECT_EQ(info_of(s).status, capture_status::none);
}

// driver::capture_on_graph_release: the callback fires once the graph and every executable made
// from it are gone (CUDA: later, on its own thread, hence the wait), at once for a capture that
// ends without a graph, and never for a failed call.
void count_graph_release(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

bool released_within_seconds(const std::atomic<int>& count, int expected) {
  for (int i = 0; i < 5000 && count.load() < expected; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return count.load() == expected;
}

TEST_P(capture_contract, GraphReleaseCallbackFiresWhenTheGraphAndItsExecutablesAreGone) {
  const stream_t s = stream();
  std::atomic<int> released{0};
  EXPECT_EQ(drv_->capture_on_graph_release(s, &count_graph_release, &released).code, status::invalid_value)
      << "not capturing";
  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
  EXPECT_EQ(drv_->capture_on_graph_release(s, nullptr, &released).code, status::invalid_value);
  ASSERT_TRUE(ok(drv_->capture_on_graph_release(s, &count_graph_release, &released)));
  EXPECT_EQ(info_of(s).status, capture_status::active) << "legal during a global capture";
  graph_t graph = nullptr;
  ASSERT_TRUE(ok(drv_->stream_end_capture(s, &graph)));
  graph_exec_t first = nullptr;
  graph_exec_t second = nullptr;
  ASSERT_TRUE(ok(drv_->graph_instantiate(graph, &first, instantiate_flags::none)));
  ASSERT_TRUE(ok(drv_->graph_instantiate(graph, &second, instantiate_flags::none)));
  ASSERT_TRUE(ok(drv_->graph_destroy(graph)));
  ASSERT_TRUE(ok(drv_->graph_exec_destroy(first)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(released.load(), 0) << "an executable made from the graph is still alive";
  ASSERT_TRUE(ok(drv_->graph_exec_destroy(second)));
  EXPECT_TRUE(released_within_seconds(released, 1)) << "fired " << released.load() << " times";

  std::atomic<int> abandoned{0};
  ASSERT_TRUE(ok(drv_->stream_begin_capture(s, capture_mode::global)));
  ASSERT_TRUE(ok(drv_->capture_on_graph_release(s, &count_graph_release, &abandoned)));
  void* illegal = nullptr;
  EXPECT_FALSE(ok(drv_->malloc(0, 4096, &illegal))) << "cudaMalloc invalidates a global capture";
  graph_t none = nullptr;
  EXPECT_FALSE(ok(drv_->stream_end_capture(s, &none)));
  EXPECT_EQ(none, nullptr);
  EXPECT_TRUE(released_within_seconds(abandoned, 1)) << "a capture that ends without a graph releases at once";
  EXPECT_EQ(released.load(), 1) << "fired exactly once";
}

std::string case_name(const ::testing::TestParamInfo<driver_case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(drivers, capture_contract,
                         ::testing::Values(driver_case{"sim", [] { return std::make_shared<sim_driver>(); }},
                                           driver_case{"cuda", [] { return make_cuda_driver(); }}),
                         case_name);

// --- sim only: Note [Sim capture sequences] ---------------------------------------------------

class sim_capture_sequence : public sim_test {};

TEST_F(sim_capture_sequence, EndingOnAJoinedStreamIsRefusedAndLaunchSubmitsWork) {
  sim().set_eager(false);
  const stream_t origin = new_stream();
  const stream_t side = new_stream();
  const event_t fork = new_event();
  ASSERT_TRUE(ok(sim().stream_begin_capture(origin, capture_mode::global)));
  ASSERT_TRUE(ok(sim().event_record(fork, origin)));
  ASSERT_TRUE(ok(sim().stream_wait_event(side, fork)));
  graph_t graph = nullptr;
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().stream_end_capture(side, &graph))) << "not the origin";
  ASSERT_TRUE(ok(sim().stream_end_capture(origin, &graph)));
  EXPECT_EQ(sim().live_graphs(), 1u);
  graph_exec_t exec = nullptr;
  ASSERT_TRUE(ok(sim().graph_instantiate(graph, &exec, instantiate_flags::auto_free_on_launch)));
  EXPECT_EQ(sim().live_graph_execs(), 1u);
  const event_t after = new_event();
  ASSERT_TRUE(ok(sim().graph_launch(exec, origin)));
  ASSERT_TRUE(ok(sim().event_record(after, origin)));
  EXPECT_TRUE(fails(status::not_ready, sim().event_query(after))) << "the launch is pending work";
  sim().complete(origin);
  EXPECT_TRUE(ok(sim().event_query(after)));
  EXPECT_EQ(sim().calls(driver_call::graph_launch), 1u);
  EXPECT_TRUE(ok(sim().graph_exec_destroy(exec)));
  EXPECT_TRUE(ok(sim().graph_destroy(graph)));
  EXPECT_TRUE(fails(status::invalid_value, sim().graph_launch(exec, origin))) << "destroyed executable";
  EXPECT_TRUE(fails(status::invalid_value, sim().graph_destroy(graph))) << "destroyed graph";
  EXPECT_EQ(sim().live_graphs(), 0u);
  EXPECT_EQ(sim().live_graph_execs(), 0u);
}

TEST_F(sim_capture_sequence, DestroyingTheOriginStreamEndsTheWholeSequence) {
  const stream_t origin = new_stream();
  const stream_t side = new_stream();
  const event_t fork = new_event();
  ASSERT_TRUE(ok(sim().stream_begin_capture(origin, capture_mode::global)));
  ASSERT_TRUE(ok(sim().event_record(fork, origin)));
  ASSERT_TRUE(ok(sim().stream_wait_event(side, fork)));
  ASSERT_TRUE(ok(sim().stream_destroy(0, origin)));
  capture_info info;
  ASSERT_TRUE(ok(sim().stream_capture_info(side, &info)));
  EXPECT_EQ(info.status, capture_status::none) << "the joined side stream left the capture too";
  EXPECT_TRUE(ok(sim().device_synchronize(0))) << "no capture is left to forbid it";
}

TEST_F(sim_capture_sequence, RelaxedCaptureForbidsNothingAndScriptedCapturesAreUnchanged) {
  const stream_t s = new_stream();
  ASSERT_TRUE(ok(sim().stream_begin_capture(s, capture_mode::relaxed)));
  void* ptr = nullptr;
  EXPECT_TRUE(ok(sim().malloc(0, 4096, &ptr)));
  EXPECT_TRUE(ok(sim().device_synchronize(0)));
  graph_t graph = nullptr;
  ASSERT_TRUE(ok(sim().stream_end_capture(s, &graph)));
  EXPECT_TRUE(ok(sim().free(0, ptr)));
  // A scripted capture refuses unsafe calls but cannot be invalidated or ended by the driver.
  const stream_t scripted = new_stream();
  sim().set_capture(scripted, capture_status::active, 5);
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().device_synchronize(0)));
  capture_info info;
  ASSERT_TRUE(ok(sim().stream_capture_info(scripted, &info)));
  EXPECT_EQ(info.status, capture_status::active);
  EXPECT_EQ(info.id, 5u);
  graph_t none = nullptr;
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().stream_end_capture(scripted, &none)));
  sim().set_capture(scripted, capture_status::none, 0);
  EXPECT_TRUE(ok(sim().device_synchronize(0)));
  EXPECT_TRUE(ok(sim().graph_destroy(graph)));
}

TEST_F(sim_capture_sequence, AnInvalidatedCaptureEndsWithoutAGraphAndFaultsInject) {
  const stream_t s = new_stream();
  ASSERT_TRUE(ok(sim().stream_begin_capture(s, capture_mode::global)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().stream_synchronize(0, s)));
  capture_info info;
  ASSERT_TRUE(ok(sim().stream_capture_info(s, &info)));
  EXPECT_EQ(info.status, capture_status::invalidated);
  EXPECT_TRUE(ok(sim().stream_synchronize(0, s))) << "an invalidated capture forbids nothing";
  graph_t graph = nullptr;
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().stream_end_capture(s, &graph)));
  EXPECT_EQ(sim().live_graphs(), 0u);
  sim().fail_next(driver_call::stream_begin_capture, 1, status::other);
  EXPECT_TRUE(fails(status::other, sim().stream_begin_capture(s, capture_mode::global)));
  ASSERT_TRUE(ok(sim().stream_capture_info(s, &info)));
  EXPECT_EQ(info.status, capture_status::none) << "an injected fault does nothing";
  sim().fail_next(driver_call::graph_instantiate, 1, status::out_of_memory);
  ASSERT_TRUE(ok(sim().stream_begin_capture(s, capture_mode::global)));
  ASSERT_TRUE(ok(sim().stream_end_capture(s, &graph)));
  graph_exec_t exec = nullptr;
  EXPECT_TRUE(fails(status::out_of_memory, sim().graph_instantiate(graph, &exec, instantiate_flags::none)));
  EXPECT_EQ(exec, nullptr);
  EXPECT_EQ(sim().calls(driver_call::graph_instantiate), 1u);
  EXPECT_TRUE(ok(sim().graph_destroy(graph)));
}

}  // namespace
}  // namespace streampool::testing
