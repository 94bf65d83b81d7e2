// concurrency_stress_test.cpp — threads hammering one allocator: each worker allocates and frees on
// its own streams of two simulated devices, record_streams blocks to other workers' streams, reads
// statistics and snapshots, empties the cache now and then; a "GPU" thread completes the streams'
// work (the sim is non-eager, so events really are pending), and a capture thread keeps beginning
// and ending allocate-to-pool routing on a stream of its own. Checks: no two live blocks of a
// device overlap at any time (a shared interval registry), only out_of_memory may be thrown, and
// at the end, after freeing everything: statistics zero, nothing reserved, the device's bytes in
// use 0. The C API is hammered the same way from several threads on one stream. scripts/test runs
// these under ThreadSanitizer (the work is scaled down there).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <iterator>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "stress/stress_test_support.hpp"

namespace streampool::stress {
namespace {

constexpr int device_count = 2;
constexpr int worker_count = 4;
constexpr int streams_per_worker = 2;  // per device

std::uint64_t ops_per_worker() {
  return env_u64_or("STREAMPOOL_STRESS_THREAD_OPS", sanitized ? 1500 : 20000);
}

/// Live blocks of every thread, per device, to catch a block handed to two threads at once.
class interval_registry {
 public:
  /// Adds [address, address + size); returns an empty string or a description of the overlap.
  std::string add(int device, std::uintptr_t address, std::size_t size) {
    std::lock_guard lock(mutex_);
    auto& live = live_[device];
    const auto next = live.lower_bound(address);
    if (next != live.end() && next->first < address + size) {
      return "block [" + std::to_string(address) + ", +" + std::to_string(size) + ") overlaps live block at " +
             std::to_string(next->first);
    }
    if (next != live.begin()) {
      const auto prev = std::prev(next);
      if (prev->first + prev->second > address) {
        return "block at " + std::to_string(address) + " overlaps live block [" + std::to_string(prev->first) +
               ", +" + std::to_string(prev->second) + ")";
      }
    }
    live.emplace(address, size);
    return {};
  }
  void remove(int device, std::uintptr_t address) {
    std::lock_guard lock(mutex_);
    live_[device].erase(address);
  }

 private:
  std::mutex mutex_;
  std::array<std::map<std::uintptr_t, std::size_t>, device_count> live_;
};

/// The first failure seen by any thread (gtest assertions are not used off the main thread).
class failure_box {
 public:
  void set(std::string message) {
    std::lock_guard lock(mutex_);
    if (message_.empty()) message_ = std::move(message);
    failed_.store(true, std::memory_order_relaxed);
  }
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::string message() {
    std::lock_guard lock(mutex_);
    return message_;
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::string message_;
};

struct live_rec {
  void* ptr;
  std::size_t size;
  int device;
};

class concurrency : public ::testing::TestWithParam<stress_case> {};

TEST_P(concurrency, WorkersCaptureAndGpuThreadsKeepStateConsistent) {
  sim_options options;
  options.device_count = device_count;
  options.capacity = 8 * gib;
  options.eager_completion = false;
  auto sim = std::make_shared<sim_driver>(options);
  auto alloc = make_allocator(parse_config(GetParam().config), sim);
  alloc->record_history(true, 4096);  // the trace ring is written by every thread

  // streams[worker][device][i]; the capture thread has one stream on device 0.
  std::vector<std::array<std::vector<stream_t>, device_count>> streams(worker_count);
  for (auto& per_device : streams) {
    for (int d = 0; d < device_count; ++d) {
      for (int i = 0; i < streams_per_worker; ++i) {
        stream_t s = nullptr;
        ASSERT_TRUE(sim->stream_create(d, &s).ok());
        per_device[d].push_back(s);
      }
    }
  }
  stream_t capture_stream = nullptr;
  ASSERT_TRUE(sim->stream_create(0, &capture_stream).ok());

  interval_registry registry;
  failure_box failure;
  std::atomic<int> running{worker_count};
  std::atomic<std::uint64_t> total_ops{0}, total_ooms{0}, gpu_rounds{0}, capture_rounds{0};
  const std::uint64_t ops = ops_per_worker();
  const std::uint64_t seed = env_u64_or("STREAMPOOL_TEST_SEED", 1);

  auto worker = [&](int id) {
    std::mt19937_64 rng(seed * 1000 + static_cast<std::uint64_t>(id));
    auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
    std::vector<live_rec> live;
    auto free_one = [&](std::size_t index) {
      const live_rec rec = live[index];
      live[index] = live.back();
      live.pop_back();
      if (pick(4) == 0) {  // used by another worker's stream of the same device
        const stream_t other = streams[pick(worker_count)][rec.device][pick(streams_per_worker)];
        const outcome o = run_op([&] { alloc->record_stream(rec.ptr, other); });
        if (!o.ok()) failure.set("record_stream threw " + std::string(to_string(o.kind)) + ": " + o.message);
      }
      registry.remove(rec.device, addr(rec.ptr));
      const outcome o = run_op([&] { alloc->deallocate(rec.ptr); });
      if (!o.ok()) failure.set("deallocate threw " + std::string(to_string(o.kind)) + ": " + o.message);
    };
    for (std::uint64_t i = 0; i < ops && !failure.failed(); ++i) {
      const std::size_t r = pick(1000);
      if (r < 560 || live.empty()) {
        const int d = pick(4) == 0 ? 1 - id % 2 : id % 2;
        const stream_t s = streams[static_cast<std::size_t>(id)][d][pick(streams_per_worker)];
        const std::size_t size = pick(10) == 0 ? 1 + pick(24 * mib) : 1 + pick(256 * kib);
        void* p = nullptr;
        const outcome o = run_op([&] { p = alloc->allocate(size, s, d); });
        if (o.kind == thrown::out_of_memory) {
          total_ooms.fetch_add(1, std::memory_order_relaxed);
        } else if (!o.ok()) {
          failure.set("allocate threw " + std::string(to_string(o.kind)) + ": " + o.message);
        } else {
          if (std::string overlap = registry.add(d, addr(p), size); !overlap.empty()) failure.set(overlap);
          live.push_back({p, size, d});
        }
        if (live.size() > 48) free_one(pick(live.size()));
      } else if (r < 960) {
        free_one(pick(live.size()));
      } else if (r < 990) {
        const memory_stats st = alloc->stats(static_cast<int>(pick(device_count)));
        if (st.allocation[0].current < 0 || st.reserved_bytes[0].current < st.allocated_bytes[0].current) {
          failure.set("inconsistent statistics read concurrently");
        }
      } else if (r < 996) {
        (void)alloc->snapshot();
      } else {
        const outcome o = run_op([&] { alloc->empty_cache(); });
        if (!o.ok()) failure.set("empty_cache threw " + std::string(to_string(o.kind)) + ": " + o.message);
      }
      total_ops.fetch_add(1, std::memory_order_relaxed);
    }
    while (!live.empty()) free_one(live.size() - 1);
    running.fetch_sub(1, std::memory_order_release);
  };

  auto gpu = [&] {
    while (running.load(std::memory_order_acquire) > 0) {
      sim->complete_all();
      gpu_rounds.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::yield();
    }
  };

  auto capturer = [&] {
    // Routing only (no sim capture): an active sim capture would make the other threads' event
    // queries illegal, as CUDA's global capture mode does.
    while (running.load(std::memory_order_acquire) > 0 && !failure.failed()) {
      const mempool_id pool = allocator::create_pool_id();
      outcome o = run_op([&] {
        alloc->begin_allocate_to_pool(pool, [capture_stream](stream_t s) { return s == capture_stream; }, 0);
      });
      if (!o.ok()) failure.set("begin_allocate_to_pool: " + std::string(to_string(o.kind)) + ": " + o.message);
      std::vector<void*> blocks;
      for (int i = 0; i < 8; ++i) {
        void* p = nullptr;
        o = run_op([&] { p = alloc->allocate(4096u << (i % 6), capture_stream, 0); });
        if (o.ok()) {
          blocks.push_back(p);
        } else if (o.kind != thrown::out_of_memory) {
          failure.set("capture thread allocate: " + std::string(to_string(o.kind)) + ": " + o.message);
        }
      }
      for (void* p : blocks) {
        o = run_op([&] { alloc->deallocate(p); });
        if (!o.ok()) failure.set("capture thread deallocate: " + o.message);
      }
      o = run_op([&] {
        alloc->end_allocate_to_pool(pool, 0);
        alloc->release_pool(pool, 0);
      });
      if (!o.ok()) failure.set("end/release: " + std::string(to_string(o.kind)) + ": " + o.message);
      capture_rounds.fetch_add(1, std::memory_order_relaxed);
    }
  };

  std::vector<std::thread> threads;
  for (int id = 0; id < worker_count; ++id) threads.emplace_back(worker, id);
  threads.emplace_back(gpu);
  threads.emplace_back(capturer);
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(failure.failed()) << failure.message();

  sim->complete_all();
  alloc->empty_cache();
  for (int d = 0; d < device_count; ++d) {
    const memory_stats st = alloc->stats(d);
    EXPECT_EQ(st.allocation[0].current, 0) << "device " << d;
    EXPECT_EQ(st.active[0].current, 0) << "device " << d;
    EXPECT_EQ(st.allocated_bytes[0].current, 0) << "device " << d;
    EXPECT_EQ(st.requested_bytes[0].current, 0) << "device " << d;
    EXPECT_EQ(st.reserved_bytes[0].current, 0) << "device " << d;
    EXPECT_EQ(sim->bytes_in_use(d), 0u) << "device " << d << ": leak";
  }
  EXPECT_TRUE(alloc->snapshot().segments.empty());
  alloc.reset();
  for (int d = 0; d < device_count; ++d) EXPECT_EQ(sim->bytes_in_use(d), 0u);
  std::cout << "[ figures  ] " << GetParam().name << ": " << worker_count << " workers x " << ops << " operations ("
            << total_ops.load() << " done, " << total_ooms.load() << " OOMs), " << gpu_rounds.load()
            << " GPU completion rounds, " << capture_rounds.load() << " capture rounds\n";
  EXPECT_EQ(total_ops.load(), ops * worker_count);
}

INSTANTIATE_TEST_SUITE_P(all, concurrency, ::testing::ValuesIn(stress_cases()), stress_case_name);

// --- the C API from several threads ----------------------------------------------------------------

class c_api_concurrency : public ::testing::TestWithParam<stress_case> {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_uninstall();
    sim_options options;
    options.capacity = 8 * gib;
    sim_ = std::make_shared<sim_driver>(options);
    c_api_impl::c_api_install(make_allocator(parse_config(GetParam().config), sim_));
  }
  void TearDown() override { (void)c_api_impl::c_api_uninstall(); }
  std::shared_ptr<sim_driver> sim_;
};

TEST_P(c_api_concurrency, ThreadsOnOneStreamAllocAndFree) {
  const std::uint64_t ops = ops_per_worker();
  failure_box failure;
  auto worker = [&](int id) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(id) + 7);
    std::vector<std::pair<void*, std::size_t>> live;
    for (std::uint64_t i = 0; i < ops && !failure.failed(); ++i) {
      if (live.empty() || (live.size() < 16 && rng() % 2 == 0)) {
        const std::size_t size = 1 + rng() % (64 * kib);
        void* p = streampool_alloc(size, 0, nullptr);
        if (p == nullptr) {
          failure.set(std::string("streampool_alloc failed: ") + streampool_last_error());
          break;
        }
        live.emplace_back(p, size);
      } else {
        const auto [p, size] = live.back();
        live.pop_back();
        streampool_free(p, size, 0, nullptr);
        if (streampool_last_status() != STREAMPOOL_OK) {
          failure.set(std::string("streampool_free of a live pointer failed: ") + streampool_last_error());
          break;
        }
      }
    }
    for (const auto& [p, size] : live) streampool_free(p, size, 0, nullptr);
  };
  std::vector<std::thread> threads;
  for (int id = 0; id < worker_count; ++id) threads.emplace_back(worker, id);
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(failure.failed()) << failure.message();
  EXPECT_EQ(streampool_empty_cache(), STREAMPOOL_OK);
  const char* stats = streampool_stats_json(0);
  ASSERT_NE(stats, nullptr);
  EXPECT_TRUE(contains(stats, "\"allocation.all.current\":0")) << stats;
  EXPECT_TRUE(contains(stats, "\"reserved_bytes.all.current\":0")) << stats;
  EXPECT_EQ(sim_->bytes_in_use(0), 0u) << "leak";
}

INSTANTIATE_TEST_SUITE_P(both, c_api_concurrency,
                         ::testing::Values(stress_cases().front(), stress_cases().back()), stress_case_name);

}  // namespace
}  // namespace streampool::stress
