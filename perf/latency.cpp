// latency.cpp — measure_latency(): warm-up, timed batches of alloc+free pairs, medians.
//
// Note [Timing alloc+free pairs]
// Each thread times a whole batch of `iterations` pairs with steady_clock (two clock reads per
// batch, so the clock's own cost is amortised away) and divides: per-pair ns. All threads start a
// batch together (a barrier, Note [A barrier of our own], then a spin on a "go" flag the main
// thread sets, so a sleeping thread's wake-up latency is not inside the batch); the wall time of a
// batch is last end - first start over the threads' own clock reads, which gives aggregate pairs/s
// (threads x iterations / wall). Each
// of `repeat` batches gives one figure; the median is reported, so one batch disturbed by the OS
// does not move the result. Before timing, each thread allocates its live set (`depth` blocks)
// and runs warm-up pairs, so the timed pairs are cache hits for caching backends; the device
// mallocs counted during the timed batches are reported to show it (0 for native; for
// cudaMallocAsync and async-raw every malloc_async call counts, PyTorch's definition). A backend
// that is slow per pair (`cuda` at 64 MiB: ~150 us on an H200) would make a batch take seconds: a
// calibration of a few pairs shrinks `iterations` so one batch fits `batch_budget`.
#include "latency.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace streampool::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Note [A barrier of our own]
// With std::barrier (libstdc++ 12) the main thread's arrive_and_wait() sometimes returned before
// the workers had arrived, giving aggregate rates of 10^10 pairs/s; a standalone test of the same
// pattern was fine, so the likely cause is libstdc++ 12's shared atomic-wait table, which the
// allocator's own atomic waits (native's hybrid_mutex) also use. This textbook mutex + condition
// variable + generation barrier has no such coupling; it is used only at batch boundaries.
class phase_barrier {
 public:
  explicit phase_barrier(std::size_t parties) : parties_(parties) {}
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const std::size_t generation = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::size_t parties_;
  std::size_t arrived_ = 0;
  std::size_t generation_ = 0;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2.0;
}

/// Iterations that fit the budget, from a few timed pairs on `stream`.
int calibrate(allocator& alloc, std::size_t size, stream_t stream, const latency_params& params) {
  constexpr int probe = 16;
  for (int i = 0; i < 4; ++i) alloc.deallocate(alloc.allocate(size, stream, 0));
  const auto start = clock_type::now();
  for (int i = 0; i < probe; ++i) alloc.deallocate(alloc.allocate(size, stream, 0));
  const double per_pair = seconds_since(start) / probe;
  const double fit = per_pair > 0.0 ? params.batch_budget / per_pair : params.iterations;
  return static_cast<int>(std::clamp<double>(fit, std::min(16, params.iterations), params.iterations));
}

}  // namespace

latency_result measure_latency(const backend_spec& spec, const driver_choice& choice, const latency_params& params) {
  latency_result result;
  try {
    const driver_instance inst = make_driver(choice);
    driver& drv = *inst.drv;
    const auto per_thread = static_cast<std::size_t>(params.streams_per_thread);
    std::vector<stream_t> streams(static_cast<std::size_t>(params.threads) * per_thread, nullptr);
    for (stream_t& s : streams) check(drv, drv.stream_create(0, &s), "latency: stream_create");
    {
      std::unique_ptr<allocator> alloc = make_backend(spec, inst.drv);
      result.iterations = calibrate(*alloc, params.size, streams[0], params);
      const int iterations = result.iterations;
      const auto threads = static_cast<std::size_t>(params.threads);
      const auto repeats = static_cast<std::size_t>(params.repeat);
      std::vector<std::vector<double>> per_thread_ns(repeats, std::vector<double>(threads, 0.0));
      std::vector<std::vector<clock_type::time_point>> starts(repeats, std::vector<clock_type::time_point>(threads));
      std::vector<std::vector<clock_type::time_point>> ends = starts;
      std::atomic<std::size_t> go{0};
      std::atomic<bool> failed{false};
      std::mutex error_mutex;
      phase_barrier sync(threads + 1);
      auto fail = [&](const std::exception& e) {
        const std::lock_guard lock(error_mutex);
        if (result.error.empty()) result.error = e.what();
        failed = true;
      };

      std::vector<std::thread> workers;
      for (std::size_t t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
          (void)drv.set_device(0);
          const stream_t stream = streams[t * per_thread];
          const stream_t* own = &streams[t * per_thread];
          std::vector<void*> live;
          try {
            for (int i = 0; i < params.depth; ++i) live.push_back(alloc->allocate(params.size, stream, 0));
            for (int i = 0; i < std::min(iterations, 1000); ++i) alloc->deallocate(alloc->allocate(params.size, stream, 0));
          } catch (const std::exception& e) {
            fail(e);
          }
          sync.arrive_and_wait();  // warm
          for (std::size_t r = 0; r < repeats; ++r) {
            sync.arrive_and_wait();  // ready
            while (go.load(std::memory_order_acquire) <= r) std::this_thread::yield();
            if (!failed) {
              try {
                const auto start = clock_type::now();
                if (per_thread == 1) {
                  for (int i = 0; i < iterations; ++i) alloc->deallocate(alloc->allocate(params.size, stream, 0));
                } else {
                  std::size_t k = 0;
                  for (int i = 0; i < iterations; ++i) {
                    alloc->deallocate(alloc->allocate(params.size, own[k], 0));
                    k = k + 1 == per_thread ? 0 : k + 1;
                  }
                }
                const auto end = clock_type::now();
                starts[r][t] = start;
                ends[r][t] = end;
                per_thread_ns[r][t] = std::chrono::duration<double>(end - start).count() * 1e9 / iterations;
              } catch (const std::exception& e) {
                fail(e);
              }
            }
            sync.arrive_and_wait();  // end
          }
          try {
            for (void* p : live) alloc->deallocate(p);
          } catch (const std::exception& e) {
            fail(e);
          }
        });
      }
      sync.arrive_and_wait();  // warm
      const std::int64_t mallocs_before = alloc->stats(0).num_device_alloc;
      for (std::size_t r = 0; r < repeats; ++r) {
        sync.arrive_and_wait();  // ready
        go.store(r + 1, std::memory_order_release);
        sync.arrive_and_wait();  // end
      }
      for (std::thread& w : workers) w.join();
      result.timed_device_mallocs = alloc->stats(0).num_device_alloc - mallocs_before;

      std::vector<double> ns, rate;
      for (std::size_t r = 0; r < repeats; ++r) {
        double sum = 0.0;
        for (const double v : per_thread_ns[r]) sum += v;
        ns.push_back(sum / static_cast<double>(threads));
        const auto first = *std::min_element(starts[r].begin(), starts[r].end());
        const auto last = *std::max_element(ends[r].begin(), ends[r].end());
        const double wall = std::chrono::duration<double>(last - first).count();
        rate.push_back(static_cast<double>(threads) * iterations / std::max(wall, 1e-12));
      }
      result.ns_per_pair = median(ns);
      result.pairs_per_second = median(rate);
      result.leak = leak_check(*alloc, 0);
      alloc->empty_cache();
    }
    for (const stream_t s : streams) (void)drv.stream_destroy(0, s);
  } catch (const std::exception& e) {
    if (result.error.empty()) result.error = e.what();
  }
  return result;
}

}  // namespace streampool::bench
