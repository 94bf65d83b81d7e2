// host_latency.cpp — measure_host_latency(): cold allocation, alloc+free pairs and the copy loop
// of one pinned host allocator.
//
// Note [Host latency runs]
// Pairs are timed as in latency.cpp (Note [Timing alloc+free pairs]): each thread first takes its
// live set and runs warm-up pairs, then all threads start each of `repeat` batches together
// (a spin on a "go" counter) and time `iterations` pairs; the median over batches is reported,
// per-pair ns as the mean over threads and pairs/s from the first start to the last end. The
// cold figure is the first allocate() of a fresh allocator (one per repeat, freed and destroyed
// after): for `pinned` with pinned_use_cuda_host_register it is malloc + page touching by
// pinned_num_register_threads threads + cudaHostRegister, which is how the register path is
// measured on a 1 GiB request. The copy loop runs on one device buffer per thread of `size`
// bytes: alloc, memcpy_async host-to-device on the thread's stream, record_stream, free, with no
// wait in the loop; a batch ends with a stream synchronisation, which GB/s includes and ns per
// iteration does not. A caching allocator keeps pinning new buffers while earlier copies are in
// flight (its driver allocations show it) and reuses them once they are done; cudaHostAlloc's
// cudaFreeHost waits for the device at every free.
#include "host_latency.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "host_peers.hpp"

namespace streampool::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2.0;
}

double seconds(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Iterations of `one` that fit the batch budget (at least min(16, iterations)).
template <class F>
int calibrate(const latency_params& params, F&& one) {
  constexpr int probe = 8;
  for (int i = 0; i < 2; ++i) one();
  const auto start = clock_type::now();
  for (int i = 0; i < probe; ++i) one();
  const double per = seconds(start, clock_type::now()) / probe;
  const double fit = per > 0.0 ? params.batch_budget / per : params.iterations;
  return static_cast<int>(std::clamp<double>(fit, std::min(16, params.iterations), params.iterations));
}

/// Runs `repeats` batches of `body(thread, iterations)` on `threads` threads started together;
/// returns per-batch {mean per-thread seconds per iteration, wall seconds}.
/// `prepared()` runs on the calling thread once every thread has prepared, before the first batch.
template <class Prepare, class Prepared, class Body, class Finish>
void run_batches(std::size_t threads, std::size_t repeats, Prepare&& prepare, Prepared&& prepared, Body&& body,
                 Finish&& finish, std::vector<double>& per_iter, std::vector<double>& walls,
                 std::string& error_text) {
  std::vector<std::vector<clock_type::time_point>> starts(repeats, std::vector<clock_type::time_point>(threads));
  auto ends = starts;
  std::vector<std::vector<double>> each(repeats, std::vector<double>(threads, 0.0));
  std::atomic<std::size_t> ready{0};
  std::atomic<std::size_t> go{0};
  std::atomic<std::size_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  auto fail = [&](const std::exception& e) {
    const std::lock_guard lock(error_mutex);
    if (error_text.empty()) error_text = e.what();
    failed = true;
  };
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        prepare(t);
      } catch (const std::exception& e) {
        fail(e);
      }
      for (std::size_t r = 0; r < repeats; ++r) {
        ready.fetch_add(1);
        while (go.load(std::memory_order_acquire) <= r) std::this_thread::yield();
        if (!failed) {
          try {
            starts[r][t] = clock_type::now();
            each[r][t] = body(t);
            ends[r][t] = clock_type::now();
          } catch (const std::exception& e) {
            fail(e);
          }
        }
        done.fetch_add(1);
      }
      try {
        finish(t);
      } catch (const std::exception& e) {
        fail(e);
      }
    });
  }
  for (std::size_t r = 0; r < repeats; ++r) {
    while (ready.load() < threads * (r + 1)) std::this_thread::yield();
    if (r == 0) prepared();
    go.store(r + 1, std::memory_order_release);
    while (done.load() < threads * (r + 1)) std::this_thread::yield();
  }
  for (std::thread& w : workers) w.join();
  if (failed) return;
  for (std::size_t r = 0; r < repeats; ++r) {
    double sum = 0.0;
    for (const double v : each[r]) sum += v;
    per_iter.push_back(sum / static_cast<double>(threads));
    walls.push_back(seconds(*std::min_element(starts[r].begin(), starts[r].end()),
                            *std::max_element(ends[r].begin(), ends[r].end())));
  }
}

}  // namespace

host_latency_result measure_host_latency(const backend_spec& spec, const driver_choice& choice,
                                         const latency_params& params, bool copy_loop) {
  host_latency_result result;
  latency_result& pairs = result.pairs;
  const auto threads = static_cast<std::size_t>(params.threads);
  const auto repeats = static_cast<std::size_t>(params.repeat);
  try {
    const driver_instance inst = make_driver(choice);
    driver& drv = *inst.drv;
    // Cold: a fresh allocator's first allocation, `repeat` times.
    std::vector<double> cold;
    for (std::size_t r = 0; r < repeats; ++r) {
      std::unique_ptr<host_peer> peer = make_host_peer(spec, inst.drv);
      const auto start = clock_type::now();
      void* p = peer->allocate(params.size);
      cold.push_back(seconds(start, clock_type::now()) * 1e6);
      peer->deallocate(p);
    }
    result.cold_alloc_us = median(cold);

    std::vector<stream_t> streams(threads, nullptr);
    for (stream_t& s : streams) check(drv, drv.stream_create(0, &s), "latency: stream_create");
    {
      std::unique_ptr<host_peer> peer = make_host_peer(spec, inst.drv);
      pairs.iterations = calibrate(params, [&] { peer->deallocate(peer->allocate(params.size)); });
      const int iterations = pairs.iterations;
      std::vector<std::vector<void*>> live(threads);
      std::vector<double> per_pair, walls;
      std::int64_t before = 0;
      run_batches(
          threads, repeats,
          [&](std::size_t t) {
            for (int i = 0; i < params.depth; ++i) live[t].push_back(peer->allocate(params.size));
            for (int i = 0; i < std::min(iterations, 1000); ++i) peer->deallocate(peer->allocate(params.size));
          },
          [&] {
            // The threads share one cache: the timed pairs of `threads` threads can hold `threads`
            // blocks at once, which the per-thread warm-ups (run one after another, at worst) need
            // not have left free. Hold that many at once here, so the timed pairs are cache hits.
            std::vector<void*> spare;
            for (std::size_t t = 0; t < threads; ++t) spare.push_back(peer->allocate(params.size));
            for (void* p : spare) peer->deallocate(p);
            before = peer->driver_allocations();
          },
          [&](std::size_t) {
            const auto start = clock_type::now();
            for (int i = 0; i < iterations; ++i) peer->deallocate(peer->allocate(params.size));
            return seconds(start, clock_type::now()) / iterations;
          },
          [&](std::size_t t) {
            for (void* p : live[t]) peer->deallocate(p);
          },
          per_pair, walls, pairs.error);
      const std::int64_t after = peer->driver_allocations();
      pairs.timed_device_mallocs = before < 0 || after < 0 ? -1 : after - before;
      if (pairs.error.empty()) {
        pairs.ns_per_pair = median(per_pair) * 1e9;
        std::vector<double> rates;
        for (const double w : walls) rates.push_back(static_cast<double>(threads) * iterations / std::max(w, 1e-12));
        pairs.pairs_per_second = median(rates);
      }
      pairs.leak = peer->leak_check();
    }
    if (copy_loop) {
      std::unique_ptr<host_peer> peer = make_host_peer(spec, inst.drv);
      std::vector<void*> device(threads, nullptr);
      for (void*& d : device) check(drv, drv.malloc(0, params.size, &d), "latency: device buffer");
      auto one = [&](std::size_t t) {
        void* p = peer->allocate(params.size);
        check(drv, drv.memcpy_async(device[t], p, params.size, streams[t]), "latency: memcpy_async");
        peer->record_stream(p, streams[t]);
        peer->deallocate(p);
      };
      const int iterations = calibrate(params, [&] { one(0); });
      check(drv, drv.stream_synchronize(0, streams[0]), "latency: stream_synchronize");
      std::vector<double> per_iter, walls;
      std::int64_t before = 0;
      run_batches(
          threads, repeats, [&](std::size_t) {}, [&] { before = peer->driver_allocations(); },
          [&](std::size_t t) {
            const auto start = clock_type::now();
            for (int i = 0; i < iterations; ++i) one(t);
            const double host = seconds(start, clock_type::now()) / iterations;
            check(drv, drv.stream_synchronize(0, streams[t]), "latency: stream_synchronize");
            return host;
          },
          [&](std::size_t) {}, per_iter, walls, result.copy_error);
      const std::int64_t after = peer->driver_allocations();
      result.copy_driver_allocations = before < 0 || after < 0 ? -1 : after - before;
      if (result.copy_error.empty()) {
        result.copy_ns_per_iter = median(per_iter) * 1e9;
        std::vector<double> rates;
        for (const double w : walls) {
          rates.push_back(static_cast<double>(threads) * iterations * static_cast<double>(params.size) /
                          std::max(w, 1e-12) / 1e9);
        }
        result.copy_gb_per_s = median(rates);
      }
      for (void* d : device) (void)drv.free(0, d);
    }
    for (const stream_t s : streams) (void)drv.stream_destroy(0, s);
  } catch (const std::exception& e) {
    if (pairs.error.empty()) pairs.error = e.what();
  }
  return result;
}

}  // namespace streampool::bench
