// hazard_stress_test.cpp — multi-stream programs through the sim's stream-ordering hazard checker
// (Note [Sim hazard checker] in src/driver/sim/sim_hazards.cpp), for every configuration of
// hazard_cases(): seeded random sequences on one device with four streams, non-eager (the test
// plays the GPU). The program allocates on a stream and runs a kernel on the block there
// (sim_driver::use), hands blocks to other streams the way a correct program does (record_stream,
// then the new stream waits for the block's last user before its kernel), frees, completes
// streams at random, empties the cache and trims. Whatever the allocator does with the memory in
// between (cache it, hand it to another stream after an event wait, unmap and remap pages), no
// kernel may touch bytes whose previous user's work is not ordered before it, and no page may be
// unmapped under a running kernel: the sim counts zero violations. A deliberately broken
// allocator (a cache that hands any freed block to any stream at once) runs the same program
// and must be caught, so the check cannot pass vacuously; a cache that orders each such handover
// with event waits (what cross_stream_reuse does) must pass, so the check has no false alarms.
// Replay one sequence: STREAMPOOL_TEST_SEED=<seed>; more: STREAMPOOL_STRESS_SEQUENCES / _STEPS.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "stress/stress_test_support.hpp"

namespace streampool::stress {
namespace {

constexpr std::size_t device_capacity = 1 * gib;
constexpr std::size_t max_live = 48;

/// The allocator calls the program makes: the real allocator, or the broken one below.
class subject {
 public:
  virtual ~subject() = default;
  virtual void* allocate(std::size_t bytes, stream_t stream) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void record_stream(void* ptr, stream_t stream) = 0;
  virtual void empty_cache() = 0;
};

class real_subject final : public subject {
 public:
  real_subject(const std::string& config, std::shared_ptr<sim_driver> sim)
      : alloc_(make_allocator(parse_config(config), std::move(sim))) {}
  void* allocate(std::size_t bytes, stream_t stream) override { return alloc_->allocate(bytes, stream, 0); }
  void deallocate(void* ptr) override { alloc_->deallocate(ptr); }
  void record_stream(void* ptr, stream_t stream) override { alloc_->record_stream(ptr, stream); }
  void empty_cache() override { alloc_->empty_cache(); }

 private:
  std::unique_ptr<allocator> alloc_;
};

/// Deliberately broken: caches freed cudaMalloc blocks by size and hands one to the next request
/// of that size on any stream, ignoring the stream that last used it and record_stream.
class unordered_cache final : public subject {
 public:
  explicit unordered_cache(std::shared_ptr<sim_driver> sim) : sim_(std::move(sim)) {}
  ~unordered_cache() override { empty_cache(); }
  void* allocate(std::size_t bytes, stream_t) override {
    const auto cached = free_.find(bytes);
    if (cached != free_.end()) {
      void* ptr = cached->second;
      free_.erase(cached);
      sizes_[ptr] = bytes;
      return ptr;
    }
    void* ptr = nullptr;
    if (!sim_->malloc(0, bytes, &ptr).ok()) throw out_of_memory("unordered_cache: cudaMalloc failed", bytes, 0);
    sizes_[ptr] = bytes;
    return ptr;
  }
  void deallocate(void* ptr) override {
    free_.emplace(sizes_.at(ptr), ptr);
    sizes_.erase(ptr);
  }
  void record_stream(void*, stream_t) override {}
  void empty_cache() override {
    for (const auto& [size, ptr] : free_) (void)sim_->free(0, ptr);
    free_.clear();
  }

 private:
  std::shared_ptr<sim_driver> sim_;
  std::multimap<std::size_t, void*> free_;
  std::map<void*, std::size_t> sizes_;
};

/// Correct, and the policy cross_stream_reuse is after: the same cache, but a free records an
/// event on every stream that used the block (its allocation stream and record_stream's), and the
/// stream that takes the block over waits on them (no host synchronisation). The checker must
/// accept every such handover.
class event_ordered_cache final : public subject {
 public:
  explicit event_ordered_cache(std::shared_ptr<sim_driver> sim) : sim_(std::move(sim)) {}
  ~event_ordered_cache() override { empty_cache(); }
  void* allocate(std::size_t bytes, stream_t stream) override {
    const auto cached = free_.find(bytes);
    if (cached == free_.end()) {
      void* ptr = nullptr;
      if (!sim_->malloc(0, bytes, &ptr).ok()) throw out_of_memory("event_ordered_cache: cudaMalloc failed", bytes, 0);
      live_[ptr] = {bytes, {stream}};
      return ptr;
    }
    auto [size, block] = *cached;
    free_.erase(cached);
    bool other_stream = false;
    for (const auto& [used_on, event] : block.events) {
      other_stream = other_stream || used_on != stream;
      if (!sim_->stream_wait_event(stream, event).ok()) throw cuda_error("event_ordered_cache: wait failed", 0);
      (void)sim_->event_destroy(0, event);
    }
    cross_stream_reuses_ += other_stream;
    live_[block.ptr] = {bytes, {stream}};
    return block.ptr;
  }
  void deallocate(void* ptr) override {
    const auto found = live_.find(ptr);
    cached_block block{ptr, {}};
    for (const stream_t used_on : found->second.streams) {
      event_t event = nullptr;
      if (!sim_->event_create(0, &event).ok() || !sim_->event_record(event, used_on).ok()) {
        throw cuda_error("event_ordered_cache: event failed", 0);
      }
      block.events.emplace_back(used_on, event);
    }
    free_.emplace(found->second.size, std::move(block));
    live_.erase(found);
  }
  void record_stream(void* ptr, stream_t stream) override {
    std::vector<stream_t>& streams = live_.at(ptr).streams;
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
  }
  void empty_cache() override {
    for (auto& [size, block] : free_) {
      for (const auto& [used_on, event] : block.events) (void)sim_->event_destroy(0, event);
      (void)sim_->free(0, block.ptr);
    }
    free_.clear();
  }
  [[nodiscard]] std::uint64_t cross_stream_reuses() const noexcept { return cross_stream_reuses_; }

 private:
  struct live_rec {
    std::size_t size = 0;
    std::vector<stream_t> streams;
  };
  struct cached_block {
    void* ptr = nullptr;
    std::vector<std::pair<stream_t, event_t>> events;  ///< recorded at the free, per stream that used it
  };
  std::shared_ptr<sim_driver> sim_;
  std::map<void*, live_rec> live_;
  std::multimap<std::size_t, cached_block> free_;
  std::uint64_t cross_stream_reuses_ = 0;
};

struct live_block {
  std::size_t size = 0;
  stream_t last_user = nullptr;
};

struct figures {
  std::uint64_t sequences = 0, steps = 0, allocations = 0, uses = 0, handovers = 0, frees = 0, completions = 0,
                empty_caches = 0, ooms = 0, unmaps = 0;
};

class program {
 public:
  program(std::uint64_t seed, figures& fig, const std::function<std::unique_ptr<subject>(std::shared_ptr<sim_driver>)>& make)
      : rng_(seed), fig_(fig) {
    sim_options options;
    options.capacity = device_capacity;
    options.eager_completion = false;
    sim_ = std::make_shared<sim_driver>(options);
    streams_.push_back(nullptr);  // the legacy stream
    for (int i = 0; i < 3; ++i) {
      stream_t s = nullptr;
      EXPECT_TRUE(sim_->stream_create(0, &s).ok());
      streams_.push_back(s);
    }
    subject_ = make(sim_);
  }

  /// Runs `steps` operations; stops at the first violation when `stop_at_violation`.
  void run(std::uint64_t steps, bool stop_at_violation) {
    for (step_ = 0; step_ < steps && !::testing::Test::HasFatalFailure(); ++step_) {
      one_step();
      ++fig_.steps;
      if (stop_at_violation && sim_->hazard_violations() > 0) return;
    }
  }

  /// Frees everything, completes the work, empties the cache: nothing may leak.
  void teardown() {
    for (const auto& [p, b] : live_) subject_->deallocate(reinterpret_cast<void*>(p));
    live_.clear();
    sim_->complete_all();
    subject_->empty_cache();
    EXPECT_EQ(sim_->bytes_in_use(0), 0u) << "leak after freeing everything and emptying the cache";
    fig_.unmaps += sim_->calls(driver_call::vmm_unmap);
  }

  [[nodiscard]] std::uint64_t violations() const { return sim_->hazard_violations(); }
  [[nodiscard]] std::string report() const {
    std::ostringstream out;
    for (const std::string& line : sim_->hazard_reports()) out << "  " << line << "\n";
    out << "last operations:\n";
    for (const std::string& line : log_) out << "  " << line << "\n";
    return out.str();
  }

 private:
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  stream_t any_stream() { return streams_[pick(streams_.size())]; }
  void log(std::string line) {
    log_.push_back("step " + std::to_string(step_) + ": " + std::move(line));
    if (log_.size() > 30) log_.pop_front();
  }
  static std::string name(stream_t s) { return std::to_string(addr(s)); }

  std::size_t random_size() {
    // Few distinct sizes, so freed blocks are often the best fit for the next request.
    static constexpr std::size_t sizes[] = {512, 4096, 100 * kib, 1 * mib, 3 * mib, 12 * mib, 40 * mib};
    return sizes[pick(std::size(sizes))] + (pick(4) == 0 ? pick(4096) : 0);
  }

  void one_step() {
    const std::size_t r = pick(100);
    if (r < 34) return op_allocate();
    if (r < 50) return op_handover();
    if (r < 72) return op_free();
    if (r < 92) return op_complete();
    if (r < 95) {
      log("complete_all");
      sim_->complete_all();
      return;
    }
    op_empty_cache();
  }

  void op_allocate() {
    if (live_.size() >= max_live) return op_free();
    const stream_t s = any_stream();
    const std::size_t size = random_size();
    void* p = nullptr;
    const outcome o = run_op([&] { p = subject_->allocate(size, s); });
    log("allocate(" + std::to_string(size) + ", stream " + name(s) + ") -> " +
        (o.ok() ? std::to_string(addr(p)) : o.message.substr(0, 120)));
    if (o.kind == thrown::out_of_memory) {
      ++fig_.ooms;
      return;
    }
    ASSERT_TRUE(o.ok()) << o.message;
    ++fig_.allocations;
    ++fig_.uses;
    sim_->use(s, p, size);  // the kernel that fills it
    live_[addr(p)] = {size, s};
  }

  /// Another stream takes a kernel on a live block: record_stream, then it waits for the block's
  /// last user (what a correct program does) and runs.
  void op_handover() {
    if (live_.empty()) return op_allocate();
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(pick(live_.size())));
    const stream_t s = any_stream();
    live_block& b = it->second;
    if (s != b.last_user) {
      ASSERT_TRUE(run_op([&] { subject_->record_stream(reinterpret_cast<void*>(it->first), s); }).ok());
      sim_->wait_for(s, b.last_user);
      ++fig_.handovers;
    }
    log("use of " + std::to_string(it->first) + " on stream " + name(s) + " (last user " + name(b.last_user) + ")");
    sim_->use(s, reinterpret_cast<void*>(it->first), b.size);
    ++fig_.uses;
    b.last_user = s;
  }

  void op_free() {
    if (live_.empty()) return op_allocate();
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(pick(live_.size())));
    log("deallocate(" + std::to_string(it->first) + ")");
    ASSERT_TRUE(run_op([&] { subject_->deallocate(reinterpret_cast<void*>(it->first)); }).ok());
    live_.erase(it);
    ++fig_.frees;
  }

  void op_complete() {
    const stream_t s = any_stream();
    log("complete(stream " + name(s) + ")");
    sim_->complete(s);
    ++fig_.completions;
  }

  void op_empty_cache() {
    log("empty_cache");
    ASSERT_TRUE(run_op([&] { subject_->empty_cache(); }).ok());
    ++fig_.empty_caches;
  }

  std::mt19937_64 rng_;
  figures& fig_;
  std::shared_ptr<sim_driver> sim_;
  std::unique_ptr<subject> subject_;
  std::vector<stream_t> streams_;
  std::map<std::uintptr_t, live_block> live_;
  std::deque<std::string> log_;
  std::uint64_t step_ = 0;
};

class hazard_stress : public ::testing::TestWithParam<stress_case> {};

TEST_P(hazard_stress, NoKernelTouchesMemoryAnotherStreamStillUses) {
  const std::uint64_t steps = env_u64_or("STREAMPOOL_STRESS_STEPS", 400);
  figures fig;
  const std::string config = GetParam().config;
  for (const std::uint64_t seed : sequence_seeds(60)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: STREAMPOOL_TEST_SEED=" + std::to_string(seed) +
                 " --gtest_filter=*hazard_stress*" + GetParam().name + "*)");
    program prog(seed, fig, [&](std::shared_ptr<sim_driver> sim) {
      return std::make_unique<real_subject>(config, std::move(sim));
    });
    prog.run(steps, /*stop_at_violation=*/true);
    ASSERT_EQ(prog.violations(), 0u) << "stream-ordering hazards:\n" << prog.report();
    prog.teardown();
    ASSERT_EQ(prog.violations(), 0u) << "stream-ordering hazards at teardown:\n" << prog.report();
    ++fig.sequences;
  }
  std::cout << "[ figures  ] " << GetParam().name << ": " << fig.sequences << " sequences, " << fig.steps
            << " steps, " << fig.allocations << " allocations, " << fig.uses << " kernel uses (" << fig.handovers
            << " on another stream after record_stream), " << fig.frees << " frees, " << fig.completions
            << " completions, " << fig.empty_caches << " empty_caches, " << fig.ooms << " OOMs, " << fig.unmaps
            << " page unmaps checked, 0 hazards\n";
  EXPECT_GT(fig.uses, 0u);
}

INSTANTIATE_TEST_SUITE_P(all, hazard_stress, ::testing::ValuesIn(hazard_cases()), stress_case_name);

/// Directed handovers, all while the first stream's kernels are still running (nothing completes):
/// a block freed on A requested on B; a block used on A and B (record_stream) requested on C;
/// expandable pages emptied while their kernels run. Whatever the allocator does with the memory,
/// the kernels on the new streams must be ordered after the old ones.
TEST_P(hazard_stress, DirectedHandoversWhileTheOldWorkRuns) {
  sim_options options;
  options.capacity = device_capacity;
  options.eager_completion = false;
  auto sim = std::make_shared<sim_driver>(options);
  std::array<stream_t, 3> s{};
  for (stream_t& x : s) ASSERT_TRUE(sim->stream_create(0, &x).ok());
  auto alloc = make_allocator(parse_config(GetParam().config), sim);
  for (const std::size_t size : {std::size_t{4096}, 3 * mib, 40 * mib}) {
    SCOPED_TRACE("size " + std::to_string(size));
    void* a = alloc->allocate(size, s[0], 0);
    sim->use(s[0], a, size);
    alloc->deallocate(a);
    void* b = alloc->allocate(size, s[1], 0);  // may be `a`'s memory, if B is made to wait
    sim->use(s[1], b, size);
    alloc->record_stream(b, s[2]);
    sim->wait_for(s[2], s[1]);
    sim->use(s[2], b, size);
    alloc->deallocate(b);
    void* c = alloc->allocate(size, s[0], 0);  // `b`'s memory only after s[1] and s[2]
    sim->use(s[0], c, size);
    alloc->deallocate(c);
    alloc->empty_cache();  // expandable pages may go: only once their kernels completed
    void* d = alloc->allocate(size, s[1], 0);
    sim->use(s[1], d, size);
    alloc->deallocate(d);
  }
  std::string reports;
  for (const std::string& line : sim->hazard_reports()) reports += "  " + line + "\n";
  EXPECT_EQ(sim->hazard_violations(), 0u) << reports;
  sim->complete_all();
  alloc->empty_cache();
  EXPECT_EQ(sim->bytes_in_use(0), 0u);
}

TEST(hazard_stress_harness, AcceptsAnAllocatorThatOrdersCrossStreamReuseWithEventWaits) {
  figures fig;
  std::uint64_t reuses = 0;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    event_ordered_cache* cache = nullptr;
    program prog(seed, fig, [&](std::shared_ptr<sim_driver> sim) {
      auto made = std::make_unique<event_ordered_cache>(std::move(sim));
      cache = made.get();
      return made;
    });
    prog.run(400, /*stop_at_violation=*/true);
    ASSERT_EQ(prog.violations(), 0u) << "an event-ordered handover was reported:\n" << prog.report();
    reuses += cache->cross_stream_reuses();
    prog.teardown();
    ASSERT_EQ(prog.violations(), 0u) << prog.report();
  }
  EXPECT_GT(reuses, 50u) << "the programs should hand many freed blocks to other streams";
}

TEST(hazard_stress_harness, CatchesAnAllocatorThatReusesAcrossStreamsWithoutWaiting) {
  figures fig;
  std::uint64_t caught = 0;
  std::string first_report;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    program prog(seed, fig, [](std::shared_ptr<sim_driver> sim) { return std::make_unique<unordered_cache>(sim); });
    prog.run(2000, /*stop_at_violation=*/true);
    caught += prog.violations() > 0;
    if (first_report.empty() && prog.violations() > 0) first_report = prog.report();
  }
  EXPECT_EQ(caught, 5u) << "the hazard checker missed a broken allocator in " << (5 - caught) << " of 5 sequences";
  EXPECT_NE(first_report.find("not ordered after"), std::string::npos) << first_report;
}

}  // namespace
}  // namespace streampool::stress
