// c_api_capture_test.cpp — CUDA graph captures nobody announced to streampool, through the C entry
// points PyTorch's CUDAPluggableAllocator calls (Note [Captures the C API was not told about] in
// src/c_api/c_api_capture.cpp), on both backends, on the sim and on the real driver (skipped without a
// device): the capture stays valid (on the sim, ending it successfully proves nothing illegal was
// issued), its allocations come from a private pool that eager code never gets an address of
// while the graph lives, a capture over two streams, frees during it, threads, and release of the
// memory once the graph is destroyed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "support/backend_fixture.hpp"
#include "support/warnings_scope.hpp"

namespace streampool::testing {
namespace {

class c_api_capture : public backend_test {
 protected:
  void SetUp() override {
    backend_test::SetUp();
    if (IsSkipped()) return;
    (void)c_api_impl::c_api_uninstall();
    c_api_impl::c_api_install(std::move(alloc_));
  }
  void TearDown() override {
    for (graph_exec_t exec : execs_) (void)driver_->graph_exec_destroy(exec);
    for (graph_t graph : graphs_) (void)driver_->graph_destroy(graph);
    (void)c_api_impl::c_api_uninstall();
    backend_test::TearDown();
  }

  void* alloc(std::size_t bytes, stream_t stream) {
    void* p = streampool_alloc(bytes, 0, stream);
    EXPECT_NE(p, nullptr) << streampool_last_error();
    return p;
  }
  void release(void* p, std::size_t bytes, stream_t stream) {
    streampool_free(p, bytes, 0, stream);
    EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << streampool_last_error();
  }
  void begin(stream_t s) { check(*driver_, driver_->stream_begin_capture(s, capture_mode::global), "begin capture"); }
  /// Ends the capture on `s`; the graph and an executable, destroyed at TearDown unless destroyed before.
  graph_exec_t end_and_instantiate(stream_t s) {
    graph_t graph = nullptr;
    const drv_result ended = driver_->stream_end_capture(s, &graph);
    EXPECT_TRUE(ended.ok()) << "the capture was invalidated: " << driver_->describe(ended);
    if (!ended.ok()) return nullptr;
    graphs_.push_back(graph);
    graph_exec_t exec = nullptr;
    // As PyTorch instantiates: a graph whose allocations outlive it (cudaMallocAsync) can be relaunched.
    check(*driver_, driver_->graph_instantiate(graph, &exec, instantiate_flags::auto_free_on_launch), "instantiate");
    execs_.push_back(exec);
    return exec;
  }
  void destroy_graphs() {
    for (graph_exec_t exec : execs_) check(*driver_, driver_->graph_exec_destroy(exec), "exec destroy");
    for (graph_t graph : graphs_) check(*driver_, driver_->graph_destroy(graph), "graph destroy");
    execs_.clear();
    graphs_.clear();
  }
  /// streampool_empty_cache until no capture is tracked (the real driver reports a destroyed graph
  /// on a thread of its own, a little later); true when that happened within 5 s.
  bool wait_until_untracked() {
    for (int i = 0; i < 5000; ++i) {
      EXPECT_EQ(streampool_empty_cache(), STREAMPOOL_OK) << streampool_last_error();
      if (c_api_impl::c_api_unannounced_captures() == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  /// Whether an eager allocation is expected never to get an address the graph holds: native
  /// everywhere (the pool's blocks); cudaMallocAsync on the real driver (graph memory has its own
  /// addresses for the graph's life), not on the sim, whose pool does not model graph memory.
  [[nodiscard]] bool graph_addresses_are_separate() const { return is_native() || sim_ == nullptr; }
  std::int64_t reserved() { return c_api_impl::instance()->stats(0).reserved_bytes[0].current; }
  /// The pool of the segment holding `p` (native; default id when not found).
  mempool_id pool_of(const void* p) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    for (const segment_info& segment : c_api_impl::instance()->snapshot().segments) {
      if (segment.address <= address && address < segment.address + segment.total_size) return segment.pool;
    }
    return mempool_id{};
  }

  std::vector<graph_t> graphs_;
  std::vector<graph_exec_t> execs_;
};

TEST_P(c_api_capture, AnUnannouncedCaptureGetsAPrivatePoolAndStaysValid) {
  const stream_t s = new_stream();
  const stream_t other = new_stream();
  void* cached = alloc(mib, s);
  release(cached, mib, s);  // a cache hit waiting in the general pool (native)
  void* before = alloc(4 * mib, s);
  void* warm_grad = alloc(2 * mib, other);  // warm-up state on another stream
  const std::int64_t reserved_before = reserved();

  begin(s);
  release(warm_grad, 2 * mib, other);  // zero_grad(set_to_none=True): a free on a stream outside the capture, first
  release(before, 4 * mib, s);         // allocated before the capture, freed on its stream during it
  void* activation = alloc(mib, s);
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 1u);
  if (is_native()) {
    EXPECT_NE(activation, cached) << "a cache hit of the general pool would bake a reusable address into the graph";
    EXPECT_FALSE(pool_of(activation).is_default());
  }
  release(activation, mib, s);  // freed inside the capture: the graph still writes it at replay
  void* output = alloc(mib, s);  // lives on after the capture, as a graph's static output does
  void* scratch = alloc(3 * mib, s);
  release(scratch, 3 * mib, s);
  const graph_exec_t exec = end_and_instantiate(s);
  ASSERT_NE(exec, nullptr);
  for (int i = 0; i < 3; ++i) check(*driver_, driver_->graph_launch(exec, s), "launch");
  synchronize();

  // Eager code after the capture: never an address of the graph, on the capture's stream or another.
  std::vector<void*> eager;
  for (const stream_t stream : {s, other, s}) {
    for (const std::size_t bytes : {mib, 3 * mib, std::size_t{4096}}) {
      void* p = alloc(bytes, stream);
      if (graph_addresses_are_separate()) {
        EXPECT_NE(p, activation);
        EXPECT_NE(p, output);
        EXPECT_NE(p, scratch);
      }
      if (is_native()) {
        EXPECT_TRUE(pool_of(p).is_default()) << "eager allocations come from the general pool";
      }
      eager.push_back(p);
    }
  }
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 1u) << "the routing ended, the pool is kept for the graph";
  std::size_t i = 0;
  for (const stream_t stream : {s, other, s}) {
    for (const std::size_t bytes : {mib, 3 * mib, std::size_t{4096}}) release(eager[i++], bytes, stream);
  }
  ASSERT_EQ(streampool_empty_cache(), STREAMPOOL_OK);
  if (is_native()) {
    EXPECT_GT(reserved(), 0) << "the graph's pool keeps its memory while the graph can replay";
  }

  destroy_graphs();
  EXPECT_TRUE(wait_until_untracked()) << "the pool is released once the graph is destroyed";
  release(output, mib, s);
  ASSERT_EQ(streampool_empty_cache(), STREAMPOOL_OK);
  if (is_native()) {
    EXPECT_EQ(reserved(), 0) << "reserved before the capture: " << reserved_before;
  }
}

TEST_P(c_api_capture, ACaptureWhoseTensorsAllDieInsideKeepsItsPoolUntilTheGraphGoes) {
  const stream_t s = new_stream();
  begin(s);
  void* a = alloc(2 * mib, s);
  void* b = alloc(mib, s);
  release(a, 2 * mib, s);
  release(b, mib, s);
  const graph_exec_t exec = end_and_instantiate(s);
  ASSERT_NE(exec, nullptr);
  ASSERT_EQ(streampool_empty_cache(), STREAMPOOL_OK);  // the capture is over: its routing ends here
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 1u) << "every block is free, yet the graph replays into them";
  if (is_native()) {
    EXPECT_GT(reserved(), 0);
  }
  for (int round = 0; round < 2; ++round) {
    void* eager = alloc(2 * mib, s);
    check(*driver_, driver_->graph_launch(exec, s), "launch");
    if (graph_addresses_are_separate()) {
      EXPECT_NE(eager, a);
      EXPECT_NE(eager, b);
    }
    release(eager, 2 * mib, s);
  }
  synchronize();
  destroy_graphs();
  EXPECT_TRUE(wait_until_untracked());
  if (is_native()) {
    EXPECT_EQ(reserved(), 0);
  }
}

TEST_P(c_api_capture, ACaptureForkedOntoASideStreamAndJoinedBackUsesOnePool) {
  const stream_t s = new_stream();
  const stream_t side = new_stream();
  event_t fork = nullptr;
  event_t join = nullptr;
  check(*driver_, driver_->event_create(0, &fork), "event_create");
  check(*driver_, driver_->event_create(0, &join), "event_create");
  begin(s);
  void* on_origin = alloc(mib, s);
  check(*driver_, driver_->event_record(fork, s), "record fork");
  check(*driver_, driver_->stream_wait_event(side, fork), "side joins the capture");
  void* on_side = alloc(2 * mib, side);  // first allocation seen on the side stream: same capture
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 1u) << "one capture, one pool, whatever the stream";
  if (is_native()) {
    EXPECT_FALSE(pool_of(on_side).is_default());
    EXPECT_EQ(pool_of(on_side), pool_of(on_origin));
  }
  release(on_side, 2 * mib, side);
  check(*driver_, driver_->event_record(join, side), "record join");
  check(*driver_, driver_->stream_wait_event(s, join), "join back");
  const graph_exec_t exec = end_and_instantiate(s);
  ASSERT_NE(exec, nullptr);
  check(*driver_, driver_->graph_launch(exec, s), "launch");
  synchronize();
  void* eager = alloc(2 * mib, side);
  if (graph_addresses_are_separate()) {
    EXPECT_NE(eager, on_side) << "the side stream's captured block stays the graph's";
  }
  if (is_native()) {
    EXPECT_TRUE(pool_of(eager).is_default());
  }
  release(eager, 2 * mib, side);
  destroy_graphs();
  release(on_origin, mib, s);
  EXPECT_TRUE(wait_until_untracked());
  if (is_native()) {
    EXPECT_EQ(reserved(), 0);
  }
  (void)driver_->event_destroy(0, fork);
  (void)driver_->event_destroy(0, join);
}

TEST_P(c_api_capture, TwoCapturesAtOnceGetTwoPools) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  begin(a);
  begin(b);
  void* in_a = alloc(mib, a);
  void* in_b = alloc(mib, b);
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 2u);
  if (is_native()) {
    EXPECT_FALSE(pool_of(in_a).is_default());
    EXPECT_FALSE(pool_of(in_b).is_default());
    EXPECT_NE(pool_of(in_a), pool_of(in_b));
  }
  release(in_a, mib, a);
  release(in_b, mib, b);
  ASSERT_NE(end_and_instantiate(a), nullptr);
  ASSERT_NE(end_and_instantiate(b), nullptr);
  destroy_graphs();
  EXPECT_TRUE(wait_until_untracked());
  if (is_native()) {
    EXPECT_EQ(reserved(), 0);
  }
}

TEST_P(c_api_capture, ACaptureThatFailsReleasesItsPoolWithoutAGraph) {
  const stream_t s = new_stream();
  begin(s);
  void* p = alloc(mib, s);
  void* illegal = nullptr;
  EXPECT_FALSE(driver_->malloc(0, 4096, &illegal).ok()) << "the user's own cudaMalloc invalidates the capture";
  release(p, mib, s);  // a framework frees its tensors as the failed step unwinds
  if (is_native()) {     // (cudaMallocAsync: the driver refuses allocations on an invalidated capture)
    // Still routed: CUDA gives an invalidated capture no id, but its sequence saw this stream.
    void* late = alloc(mib, s);
    EXPECT_FALSE(pool_of(late).is_default());
    release(late, mib, s);
  }
  graph_t graph = nullptr;
  EXPECT_FALSE(driver_->stream_end_capture(s, &graph).ok());
  EXPECT_EQ(graph, nullptr);
  EXPECT_TRUE(wait_until_untracked()) << "no graph will ever replay the pool";
  if (is_native()) {
    EXPECT_EQ(reserved(), 0);
  }
  void* after = alloc(mib, s);
  if (is_native()) {
    EXPECT_TRUE(pool_of(after).is_default());
  }
  release(after, mib, s);
}

TEST_P(c_api_capture, ACaptureFirstSeenInvalidatedGetsAPoolReleasedWhenItEnds) {
  if (!is_native()) GTEST_SKIP() << "the driver refuses cudaMallocAsync on an invalidated capture's stream";
  const stream_t s = new_stream();
  begin(s);
  void* illegal = nullptr;
  EXPECT_FALSE(driver_->malloc(0, 4096, &illegal).ok()) << "invalidates the capture";
  void* p = alloc(mib, s);  // the first call of this capture: it is invalidated already (no id)
  EXPECT_FALSE(pool_of(p).is_default()) << "still kept out of the general pool, by its stream";
  release(p, mib, s);
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 1u);
  graph_t graph = nullptr;
  EXPECT_FALSE(driver_->stream_end_capture(s, &graph).ok());
  EXPECT_TRUE(wait_until_untracked()) << "an invalidated capture never yields a graph";
  EXPECT_EQ(reserved(), 0);
}

TEST_P(c_api_capture, OutsideCapturesNothingIsTrackedAndTheLegacyStreamIsNotAsked) {
  const stream_t s = new_stream();
  if (sim_ != nullptr) sim_->reset_counters();
  void* on_legacy = alloc(mib, nullptr);
  release(on_legacy, mib, nullptr);
  if (sim_ != nullptr) {
    EXPECT_EQ(sim_->calls(driver_call::stream_capture_info), 0u);
  }
  void* on_stream = alloc(mib, s);
  release(on_stream, mib, s);
  if (sim_ != nullptr) {
    // One query per allocation on a created stream, and per free where a free is a driver call.
    EXPECT_EQ(sim_->calls(driver_call::stream_capture_info), is_native() ? 1u : 2u);
  }
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 0u);
}

TEST_P(c_api_capture, ARoutingThatCannotOpenFailsTheCallAndNamesTheRouteThatWorks) {
  const stream_t s = new_stream();
  begin(s);
  EXPECT_EQ(streampool_alloc(mib, 7, s), nullptr) << "no device 7: the private pool cannot be opened";
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  const std::string message = streampool_last_error();
  EXPECT_NE(message.find("was not told about"), std::string::npos) << message;
  EXPECT_NE(message.find("streampool.install()"), std::string::npos) << message;
  EXPECT_NE(message.find("begin_allocate_to_pool"), std::string::npos) << message;
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 0u) << "nothing half-opened";
  void* p = alloc(mib, s);  // the right device still works, inside the same capture
  release(p, mib, s);
  ASSERT_NE(end_and_instantiate(s), nullptr) << "the refused call did not invalidate the capture";
  destroy_graphs();
  EXPECT_TRUE(wait_until_untracked());
}

TEST_P(c_api_capture, ThreadsAllocatingInOneCaptureAndEagerlyBesideItNeverShareAnAddress) {
  constexpr int capture_threads = 4;
  constexpr int rounds = 100;
  const stream_t s = new_stream();
  const stream_t eager_stream = new_stream();
  std::vector<stream_t> sides;
  for (int i = 0; i < capture_threads; ++i) sides.push_back(new_stream());
  event_t fork = nullptr;
  check(*driver_, driver_->event_create(0, &fork), "event_create");
  release(alloc(mib, eager_stream), mib, eager_stream);  // the eager thread's sizes are cached
  begin(s);
  void* first = alloc(mib, s);  // the capture's routing is open before the threads start
  check(*driver_, driver_->event_record(fork, s), "record fork");
  for (const stream_t side : sides) check(*driver_, driver_->stream_wait_event(side, fork), "join");

  std::vector<std::set<void*>> captured(capture_threads);
  std::set<void*> eager;
  std::vector<std::thread> threads;
  for (int t = 0; t < capture_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        const std::size_t bytes = (std::size_t{1} + std::size_t(i % 5)) * 256 * kib;
        void* p = streampool_alloc(bytes, 0, sides[std::size_t(t)]);
        if (p == nullptr) return;
        captured[std::size_t(t)].insert(p);
        streampool_free(p, bytes, 0, sides[std::size_t(t)]);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < rounds; ++i) {
      void* p = streampool_alloc(mib, 0, eager_stream);
      if (p == nullptr) return;
      eager.insert(p);
      streampool_free(p, mib, 0, eager_stream);
    }
  });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 1u) << "one capture, whatever the thread or stream";
  event_t join = nullptr;
  check(*driver_, driver_->event_create(0, &join), "event_create");
  for (const stream_t side : sides) {
    check(*driver_, driver_->event_record(join, side), "record join");
    check(*driver_, driver_->stream_wait_event(s, join), "join back");
  }
  release(first, mib, s);
  ASSERT_NE(end_and_instantiate(s), nullptr);
  EXPECT_FALSE(eager.empty());
  for (const std::set<void*>& addresses : captured) {
    EXPECT_FALSE(addresses.empty());
    if (!graph_addresses_are_separate()) continue;
    for (void* p : addresses) EXPECT_EQ(eager.count(p), 0u) << p << " went to the capture and to eager code";
  }
  destroy_graphs();
  EXPECT_TRUE(wait_until_untracked());
  if (is_native()) {
    EXPECT_EQ(reserved(), 0);
  }
  (void)driver_->event_destroy(0, fork);
  (void)driver_->event_destroy(0, join);
}

INSTANTIATE_TEST_SUITE_P(every_backend, c_api_capture, ::testing::ValuesIn(all_backend_cases()), backend_case_name);

// --- sim only: a driver that cannot report a graph's destruction ----------------------------------

class c_api_capture_sim : public c_api_capture {};

TEST_P(c_api_capture_sim, WithoutGraphReleaseReportsThePoolIsKeptAndThatIsWarned) {
  const stream_t s = new_stream();
  warnings_scope warnings;
  sim_->fail_next(driver_call::capture_on_graph_release, 1, status::not_supported);
  begin(s);
  void* p = alloc(mib, s);
  release(p, mib, s);
  ASSERT_NE(end_and_instantiate(s), nullptr);
  EXPECT_EQ(warnings.containing("cannot tie a callback to a CUDA graph's destruction").size(), 1u);
  destroy_graphs();
  ASSERT_EQ(streampool_empty_cache(), STREAMPOOL_OK);
  EXPECT_EQ(c_api_impl::c_api_unannounced_captures(), 1u) << "kept: nobody can say the graph is gone";
  if (is_native()) {
    EXPECT_GT(reserved(), 0);
  }
  void* eager = alloc(mib, s);
  if (graph_addresses_are_separate()) {
    EXPECT_NE(eager, p);
  }
  release(eager, mib, s);
}

INSTANTIATE_TEST_SUITE_P(sim, c_api_capture_sim, ::testing::ValuesIn(backend_cases(false)), backend_case_name);

}  // namespace
}  // namespace streampool::testing
