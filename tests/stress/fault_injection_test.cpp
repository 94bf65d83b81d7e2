// fault_injection_test.cpp — every driver call the allocator makes is failed at every point of a
// fixed scenario (sim fail_next with skip = 0, 1, 2, ... until the scenario completes without
// reaching the fault), once (a transient fault) and from then on (a persistent one), with two
// codes (out_of_memory and a generic failure); sanitized builds run two of these four kinds.
// After each operation:
//  - an operation that failed threw out_of_memory or cuda_error (never a crash, never another
//    type) and, when it surfaced the injected fault, its message names the operation that failed;
//  - a deallocate that threw left the allocation live (allocator.hpp: state unchanged);
//  - statistics equal the model (allocation count per device; native reserved_bytes = the
//    device's bytes in use = the snapshot's segments + leftover pages, per pool kind too).
// After the scenario the fault is cleared: what is still live is freed, new requests are served
// on every stream, work completed and the cache emptied: nothing leaks (sim bytes_in_use 0), also
// after the allocator is destroyed.
// The scenario is a multi-stream program under the sim's hazard checker (Note [Sim hazard
// checker]): each allocation gets a kernel on its stream (sim_driver::use), and a stream given a
// block by record_stream waits for the block's last user and runs one too. Whatever the fault,
// no kernel may touch memory another stream's unfinished work still uses, and no page may be
// unmapped under one: zero violations per run (the cross-stream policies are among the cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stress/stress_test_support.hpp"

namespace streampool::stress {
namespace {

constexpr std::size_t capacity = 256 * mib;
constexpr int max_skip = 400;

/// Calls the allocator may make, with words one of which a message about its failure must hold.
struct call_case {
  driver_call call;
  std::vector<std::string> names;
};

std::vector<call_case> injected_calls() {
  return {
      {driver_call::malloc, {"cudaMalloc"}},
      {driver_call::free, {"cudaFree"}},
      {driver_call::mem_get_info, {"cudaMemGetInfo"}},
      {driver_call::event_create, {"event"}},
      {driver_call::event_destroy, {"event"}},
      {driver_call::event_record, {"cudaEventRecord", "record"}},
      {driver_call::event_query, {"cudaEventQuery"}},
      {driver_call::event_synchronize, {"cudaEventSynchronize"}},
      {driver_call::stream_wait_event, {"record_stream", "ordering", "wait"}},
      {driver_call::stream_synchronize, {"synchroni"}},
      {driver_call::stream_capture_info, {"capture"}},
      {driver_call::device_synchronize, {"synchroni"}},
      {driver_call::pool_get_default, {"default memory pool"}},
      {driver_call::pool_create, {"pool"}},
      {driver_call::pool_destroy, {"pool"}},
      {driver_call::pool_set_attr, {"pool"}},
      {driver_call::pool_get_attr, {"pool"}},
      {driver_call::malloc_async, {"cudaMallocAsync"}},
      {driver_call::free_async, {"cudaFreeAsync"}},
      {driver_call::pool_trim_to, {"trim"}},
      {driver_call::vmm_reserve, {"cuMemAddressReserve", "reserve"}},
      {driver_call::vmm_create, {"cuMemCreate"}},
      {driver_call::vmm_map, {"cuMemMap"}},
      {driver_call::vmm_set_access, {"cuMemSetAccess"}},
      {driver_call::vmm_unmap, {"cuMemUnmap"}},
      {driver_call::vmm_release, {"cuMemRelease"}},
      {driver_call::vmm_free, {"cuMemAddressFree"}},
  };
}

/// STREAMPOOL_FAULT_VERBOSE=1 prints every operation of every run (debugging a failing point).
bool verbose() {
  static const bool on = env_u64_or("STREAMPOOL_FAULT_VERBOSE", 0) != 0;
  return on;
}

bool names_operation(const std::string& message, const std::vector<std::string>& names) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string text = lower(message);
  return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return contains(text, lower(n)); });
}

struct fault_figures {
  std::uint64_t runs = 0, faults_fired = 0, operations = 0, failed_operations = 0, calls_covered = 0;
  std::uint64_t runs_with_leftovers = 0, leftover_pages_seen = 0;  ///< (page, check) pairs
};

/// One run of the scenario with one armed fault.
class fault_run {
 public:
  fault_run(const stress_case& c, const call_case& call, status code, int count, int skip) : case_(c), call_(call) {
    sim_options options;
    options.device_count = 2;
    options.capacity = capacity;
    options.eager_completion = false;
    sim_ = std::make_shared<sim_driver>(options);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(sim_->stream_create(0, &s_[i]).ok());
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(sim_->stream_create(1, &t_[i]).ok());
    alloc_ = make_allocator(parse_config(c.config), sim_);
    sim_->fail_next(call.call, count, code, skip);
    sim_->reset_counters();
  }

  /// Runs the scenario; returns true when the armed fault fired.
  bool run_scenario(int skip, fault_figures& fig) {
    scenario();
    const bool fired = sim_->calls(call_.call) > static_cast<std::uint64_t>(skip);
    sim_->clear_faults();
    after_fault();
    fig.operations += operations_;
    fig.failed_operations += failed_;
    fig.leftover_pages_seen += leftover_pages_seen_;
    fig.runs_with_leftovers += leftover_pages_seen_ != 0;
    if (!fired) {
      // The fault-free run: only the request over the fraction cap fails.
      EXPECT_EQ(failed_, 1u) << "the scenario without a fault should fail exactly once (the capped request):\n"
                             << ::testing::PrintToString(failures_);
    }
    return fired;
  }

 private:
  struct slot {
    void* ptr = nullptr;
    int device = 0;
    stream_t stream = nullptr;
    std::size_t bytes = 0;
    stream_t last_user = nullptr;  ///< the stream of the block's last kernel
  };

  // --- the scenario: every path that reaches the driver ------------------------------------------
  void scenario() {
    allocate(0, 1000, s_[0], 0);
    allocate(1, 3 * mib, s_[0], 0);
    allocate(2, 30 * mib, s_[1], 0);
    record_stream(0, s_[1]);
    record_stream(1, s_[1]);
    record_stream(1, s_[2]);
    deallocate(0);  // events recorded (native) / stream waits (async)
    deallocate(1);
    allocate(3, 1000, s_[0], 0);  // events polled: not ready
    complete(s_[1]);
    allocate(4, 2000, s_[0], 0);  // events polled: s_[1] done, s_[2] not
    deallocate(2);
    allocate(5, 5 * mib, t_[0], 1);  // device 1 (async: pool set up on first use)
    record_stream(5, t_[1]);
    deallocate(5);
    empty_cache();  // event synchronisation, cudaFree / device synchronise + trim
    fraction(0.5, 0);
    allocate(6, 100 * mib, s_[0], 0);
    allocate(7, 100 * mib, s_[0], 0);  // over the cap: OOM after the ladder
    fraction(1.0, 0);
    // A capture on device 0: routing to a private pool, relaxed mallocs, deferred frees.
    capture_begin(s_[2]);
    allocate(8, 4 * mib, s_[2], 0);
    allocate(9, 600, s_[2], 0);
    record_stream(4, s_[2]);
    deallocate(4);  // deferred (uses during capture)
    deallocate(3);  // allocated before the capture, freed during it
    deallocate(9);
    capture_end();
    deallocate(8);
    allocate(10, 1000, s_[0], 0);  // deferred frees processed
    release_pool();
    complete_all();
    deallocate(6);
    empty_cache();
    // The OOM ladder releasing another stream's cache: 150 MiB cached on s_[0], then 150 MiB on s_[1].
    allocate(11, 150 * mib, s_[0], 0);
    deallocate(11);
    allocate(12, 150 * mib, s_[1], 0);
    record_stream(12, s_[0]);
    deallocate(12);
    allocate(13, 150 * mib, s_[0], 0);  // needs the events of 12 synchronised and its segment freed
    deallocate(13);
    deallocate(10);
    empty_cache();
  }

  // --- operations ----------------------------------------------------------------------------------
  /// Checks an operation's outcome; returns true when it succeeded.
  bool judge(const char* what, const outcome& o) {
    ++operations_;
    if (verbose()) {
      std::cerr << "  " << what << " -> " << to_string(o.kind) << " " << o.message.substr(0, 120)
                << " | device 0 reserved " << alloc_->stats(0).reserved_bytes[0].current << ", in use "
                << sim_->bytes_in_use(0) << "\n";
    }
    if (o.ok()) return true;
    ++failed_;
    failures_.push_back(std::string(what) + ": " + to_string(o.kind) + ": " + o.message.substr(0, 300));
    const bool injected = contains(o.message, "injected fault");
    switch (o.kind) {
      case thrown::out_of_memory:
        EXPECT_TRUE(contains(o.message, "out of memory")) << what << ": " << o.message;
        break;
      case thrown::cuda_error:
        if (injected) {
          EXPECT_TRUE(names_operation(o.message, call_.names))
              << what << ": the message does not name the failed " << to_string(call_.call) << ": " << o.message;
        }
        break;
      default:
        ADD_FAILURE() << what << " threw " << to_string(o.kind) << " for an injected " << to_string(call_.call)
                      << " fault: " << o.message;
    }
    return false;
  }

  void allocate(int index, std::size_t bytes, stream_t stream, int device) {
    void* p = nullptr;
    const outcome o = run_op([&] { p = alloc_->allocate(bytes, stream, device); });
    if (judge("allocate", o)) {
      slots_[index] = {p, device, stream, bytes, stream};
      kernel(slots_[index], stream);
    }
    check_stats("allocate");
  }

  void deallocate(int index) {
    slot& s = slots_[index];
    if (s.ptr == nullptr) return;
    const outcome o = run_op([&] { alloc_->deallocate(s.ptr); });
    if (judge("deallocate", o)) {
      s = {};
    } else if (!is_live(s)) {
      // allocator.hpp: a deallocate that throws leaves the state unchanged (native: Note [Failed
      // frees]; once tolerated here as a known bug, fixed with tests/unit/native/failed_free_test.cpp).
      ADD_FAILURE() << "deallocate threw (" << o.message << ") but the allocation was freed anyway";
      s = {};
    }
    check_stats("deallocate");
  }

  void record_stream(int index, stream_t stream) {
    slot& s = slots_[index];
    if (s.ptr == nullptr) return;
    if (judge("record_stream", run_op([&] { alloc_->record_stream(s.ptr, stream); }))) kernel(s, stream);
    check_stats("record_stream");
  }

  /// A kernel on `stream` touching the block, after `stream` waited for the block's last user
  /// (a correct program's ordering); none on a capturing stream (the sim runs no captured work).
  void kernel(slot& s, stream_t stream) {
    if (stream == capture_stream_) return;
    if (stream != s.last_user) sim_->wait_for(stream, s.last_user);
    sim_->use(stream, s.ptr, s.bytes);
    s.last_user = stream;
  }

  void empty_cache() {
    judge("empty_cache", run_op([&] { alloc_->empty_cache(); }));
    check_stats("empty_cache");
  }

  void fraction(double f, int device) {
    judge("set_memory_fraction", run_op([&] { alloc_->set_memory_fraction(f, device); }));
  }

  void capture_begin(stream_t stream) {
    pool_ = allocator::create_pool_id();
    if (!judge("begin_allocate_to_pool", run_op([&] {
          alloc_->begin_allocate_to_pool(pool_, [stream](stream_t s) { return s == stream; }, 0);
        }))) {
      return;
    }
    capture_stream_ = stream;
    sim_->set_capture(stream, capture_status::active, pool_.second);
  }

  void capture_end() {
    if (capture_stream_ == nullptr) return;
    sim_->set_capture(capture_stream_, capture_status::none, 0);
    capture_stream_ = nullptr;
    if (judge("end_allocate_to_pool", run_op([&] { alloc_->end_allocate_to_pool(pool_, 0); }))) {
      pool_ended_ = true;
    } else {
      // Still recording: end it once the fault is gone (after_fault).
      pending_end_ = true;
    }
  }

  void release_pool() {
    if (!pool_ended_) return;
    if (judge("release_pool", run_op([&] { alloc_->release_pool(pool_, 0); }))) pool_ended_ = false;
  }

  void complete(stream_t stream) { sim_->complete(stream); }
  void complete_all() { sim_->complete_all(); }

  /// Whether `s` is still a live allocation: record_stream on its own stream is a no-op for a
  /// live pointer and an error otherwise; it makes no driver call.
  bool is_live(const slot& s) {
    return run_op([&] { alloc_->record_stream(s.ptr, s.stream); }).ok();
  }

  void check_stats(const char* after) {
    const memory_snapshot snapshot = alloc_->snapshot();
    for (int d = 0; d < 2; ++d) {
      std::int64_t live = 0;
      for (const slot& s : slots_) live += s.ptr != nullptr && s.device == d;
      const memory_stats st = alloc_->stats(d);
      EXPECT_EQ(st.allocation[0].current, live) << "after " << after << ", device " << d;
      std::int64_t allocated_blocks = 0;
      std::array<std::int64_t, stat_pool_count> reserved{};  // segments + leftover pages, all/small/large
      for (const segment_info& seg : snapshot.segments) {
        if (seg.device != d) continue;
        reserved[0] += static_cast<std::int64_t>(seg.total_size);
        reserved[seg.is_large ? 2 : 1] += static_cast<std::int64_t>(seg.total_size);
        for (const block_info& b : seg.blocks) allocated_blocks += b.state == block_state::active_allocated;
      }
      for (const leftover_page_info& page : snapshot.leftover_pages) {
        if (page.device != d) continue;
        EXPECT_FALSE(case_.async) << "a cudaMallocAsync snapshot lists a leftover page";
        reserved[0] += static_cast<std::int64_t>(page.size);
        reserved[page.is_large ? 2 : 1] += static_cast<std::int64_t>(page.size);
        ++leftover_pages_seen_;
      }
      EXPECT_EQ(allocated_blocks, live) << "after " << after << ", device " << d << ": snapshot vs live";
      if (!case_.async) {
        EXPECT_EQ(static_cast<std::size_t>(st.reserved_bytes[0].current), sim_->bytes_in_use(d))
            << "after " << after << ", device " << d << ": reserved_bytes != device bytes in use";
        // Every reserved byte is in a segment or a leftover page (Note [Leftover pages]).
        for (std::size_t k = 0; k < stat_pool_count; ++k) {
          EXPECT_EQ(reserved[k], st.reserved_bytes[k].current)
              << "after " << after << ", device " << d << ", pool kind " << k
              << ": snapshot segments + leftover pages != reserved_bytes";
        }
        EXPECT_EQ(snapshot.reserved_bytes(d), static_cast<std::size_t>(st.reserved_bytes[0].current))
            << "after " << after << ", device " << d << ": memory_snapshot::reserved_bytes";
      }
    }
  }

  // --- after the fault: service continues, then nothing leaks -----------------------------------
  void after_fault() {
    if (capture_stream_ != nullptr) capture_end();
    if (pending_end_) {
      EXPECT_TRUE(run_op([&] { alloc_->end_allocate_to_pool(pool_, 0); }).ok());
      pending_end_ = false;
      pool_ended_ = true;
    }
    release_pool();
    EXPECT_FALSE(pool_ended_) << "release_pool still fails after the fault was cleared";
    for (slot& s : slots_) {
      if (s.ptr == nullptr) continue;
      const outcome o = run_op([&] { alloc_->deallocate(s.ptr); });
      EXPECT_TRUE(o.ok()) << "freeing a live allocation after the fault was cleared: " << o.message;
      s = {};
    }
    // Later requests are served, on every stream of both devices (after the allocations the
    // scenario left live: with frees failing persistently they can fill the device).
    for (int d = 0; d < 2; ++d) {
      for (const stream_t s : d == 0 ? std::vector<stream_t>{s_[0], s_[1], s_[2]} : std::vector<stream_t>{t_[0], t_[1]}) {
        void* p = nullptr;
        const outcome o = run_op([&] { p = alloc_->allocate(2 * mib, s, d); });
        EXPECT_TRUE(o.ok()) << "allocation after the fault was cleared failed: " << o.message;
        if (o.ok()) {
          sim_->use(s, p, 2 * mib);
          EXPECT_TRUE(run_op([&] { alloc_->deallocate(p); }).ok());
        }
      }
    }
    sim_->complete_all();
    const outcome o = run_op([&] { alloc_->empty_cache(); });
    EXPECT_TRUE(o.ok()) << "empty_cache after the fault was cleared: " << o.message;
    for (int d = 0; d < 2; ++d) {
      const memory_stats st = alloc_->stats(d);
      EXPECT_EQ(st.allocation[0].current, 0) << "device " << d;
      EXPECT_EQ(st.active[0].current, 0) << "device " << d;
      EXPECT_EQ(st.requested_bytes[0].current, 0) << "device " << d;
      EXPECT_EQ(st.reserved_bytes[0].current, 0) << "device " << d;
      EXPECT_EQ(sim_->bytes_in_use(d), 0u) << "device " << d << ": leak";
    }
    alloc_.reset();
    for (int d = 0; d < 2; ++d) EXPECT_EQ(sim_->bytes_in_use(d), 0u) << "device " << d << ": leak after destruction";
    std::string hazards;
    for (const std::string& line : sim_->hazard_reports()) hazards += "  " + line + "\n";
    EXPECT_EQ(sim_->hazard_violations(), 0u) << "stream-ordering hazards:\n" << hazards;
  }

  const stress_case& case_;
  const call_case& call_;
  std::shared_ptr<sim_driver> sim_;
  std::unique_ptr<allocator> alloc_;
  std::array<stream_t, 3> s_{};
  std::array<stream_t, 2> t_{};
  std::array<slot, 16> slots_{};
  mempool_id pool_;
  stream_t capture_stream_ = nullptr;
  bool pool_ended_ = false;
  bool pending_end_ = false;
  std::uint64_t operations_ = 0;
  std::uint64_t failed_ = 0;
  std::uint64_t leftover_pages_seen_ = 0;
  std::vector<std::string> failures_;
};

std::vector<stress_case> fault_cases() {
  std::vector<stress_case> cases = stress_cases();
  cases.push_back({"async_dedicated", "backend:cudaMallocAsync,async_pool:dedicated", true});
  return with_hazard_cases(std::move(cases));  // the reuse policies under the hazard checker
}

/// (code, count) pairs: out_of_memory and a generic failure, once and from then on. Sanitized
/// builds run two of the four (each code once, each persistence once) to stay within CI time.
std::vector<std::pair<status, int>> fault_kinds() {
  constexpr int persistent = 1 << 20;
  if (sanitized) return {{status::out_of_memory, 1}, {status::other, persistent}};
  return {{status::out_of_memory, 1}, {status::out_of_memory, persistent}, {status::other, 1}, {status::other, persistent}};
}

class fault_injection : public ::testing::TestWithParam<stress_case> {};

TEST_P(fault_injection, EveryDriverCallFailsAtEveryPoint) {
  fault_figures fig;
  // STREAMPOOL_FAULT_KEEP_GOING=1 lists every failing fault point instead of stopping at the first.
  const bool keep_going = env_u64_or("STREAMPOOL_FAULT_KEEP_GOING", 0) != 0;
  std::string reached;
  for (const call_case& call : injected_calls()) {
    bool covered = false;
    for (const auto& [code, count] : fault_kinds()) {
      {
        for (int skip = 0; skip <= max_skip; ++skip) {
          SCOPED_TRACE(std::string(to_string(call.call)) + " fails (" + std::string(to_string(code)) + ", " +
                       (count == 1 ? "once" : "persistently") + ") after " + std::to_string(skip) +
                       " successful calls");
          fault_run run(GetParam(), call, code, count, skip);
          const bool fired = run.run_scenario(skip, fig);
          ++fig.runs;
          if (HasFailure() && !keep_going) return;
          if (!fired) break;
          ++fig.faults_fired;
          covered = true;
          ASSERT_LT(skip, max_skip) << "scenario makes too many calls of " << to_string(call.call);
        }
      }
    }
    fig.calls_covered += covered;
    if (covered) reached += std::string(reached.empty() ? "" : ",") + std::string(to_string(call.call));
  }
  std::cout << "[ figures  ] " << GetParam().name << ": " << fig.runs << " scenario runs, " << fig.faults_fired
            << " faults injected, " << fig.calls_covered << " kinds of driver call reached (" << reached << "), " << fig.operations
            << " operations, " << fig.failed_operations << " of them failed cleanly; " << fig.runs_with_leftovers
            << " runs held leftover pages (" << fig.leftover_pages_seen << " page checks, all accounted)\n";
  EXPECT_GT(fig.faults_fired, 0u);
}

INSTANTIATE_TEST_SUITE_P(all, fault_injection, ::testing::ValuesIn(fault_cases()), stress_case_name);

}  // namespace
}  // namespace streampool::stress
