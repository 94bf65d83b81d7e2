// main.cpp — streampool-pair-timer: the native backend's same-stream cache-hit allocate +
// deallocate pair, timed with std::chrono (what perf/microbench measures with Google Benchmark,
// for machines without it). For each size and thread count: one allocator, one stream per thread
// (thread t on stream t), every (stream, size) pair run once before timing, then each thread runs
// PAIRS pairs; prints nanoseconds per pair (one thread) and aggregate pairs per second.
//   usage: streampool-pair-timer [sim|cuda] [PAIRS] [THREADS...]   (defaults: cuda 2000000 1 8)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "streampool/streampool.hpp"

int main(int argc, char** argv) {
  using namespace streampool;
  const std::string which = argc > 1 ? argv[1] : "cuda";
  const long pairs = argc > 2 ? std::atol(argv[2]) : 2000000;
  std::vector<int> thread_counts;
  for (int i = 3; i < argc; ++i) thread_counts.push_back(std::atoi(argv[i]));
  if (thread_counts.empty()) thread_counts = {1, 8};
  if ((which != "sim" && which != "cuda") || pairs <= 0) {
    std::fprintf(stderr, "usage: streampool-pair-timer [sim|cuda] [PAIRS > 0] [THREADS...]\n");
    return 2;
  }
  for (const int threads : thread_counts) {
    if (threads < 1 || threads > 64) {
      std::fprintf(stderr, "streampool-pair-timer: THREADS must be 1..64, not %d\n", threads);
      return 2;
    }
  }
  std::shared_ptr<driver> drv = which == "sim" ? std::shared_ptr<driver>(std::make_shared<sim_driver>()) : make_cuda_driver();
  const std::size_t sizes[] = {512, 1 * mib, 64 * mib};
  try {
    for (const std::size_t size : sizes) {
      for (const int threads : thread_counts) {
        std::unique_ptr<allocator> alloc = make_allocator(parse_config("backend:native"), drv);
        std::vector<stream_t> streams(static_cast<std::size_t>(threads));
        for (stream_t& s : streams) check(*drv, drv->stream_create(0, &s), "pair-timer: stream_create");
        for (const stream_t s : streams) alloc->deallocate(alloc->allocate(size, s, 0));
        const std::int64_t mallocs = alloc->stats(0).num_device_alloc;
        std::vector<std::thread> workers;
        const auto start = std::chrono::steady_clock::now();
        for (int t = 0; t < threads; ++t) {
          workers.emplace_back([&, t] {
            const stream_t s = streams[static_cast<std::size_t>(t)];
            for (long i = 0; i < pairs; ++i) {
              void* p = alloc->allocate(size, s, 0);
              asm volatile("" : : "r"(p) : "memory");
              alloc->deallocate(p);
            }
          });
        }
        for (std::thread& w : workers) w.join();
        const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
        const double total = static_cast<double>(pairs) * threads;
        std::printf("size %zu threads %d ns_per_pair %.2f mpairs_per_s %.2f device_mallocs %lld\n", size, threads,
                    elapsed.count() / static_cast<double>(pairs), total / elapsed.count() * 1e3,
                    static_cast<long long>(alloc->stats(0).num_device_alloc - mallocs));
        alloc->empty_cache();
        alloc.reset();
        for (const stream_t s : streams) (void)drv->stream_destroy(0, s);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool-pair-timer: %s\n", e.what());
    return 1;
  }
  return 0;
}
