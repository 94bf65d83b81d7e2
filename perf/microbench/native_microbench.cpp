// native_microbench.cpp — Google Benchmark microbenchmarks of the cache-hit allocate + deallocate
// pair (issue 3, "Speed"): the native backend at 512 B, 1 MiB and 64 MiB, one thread and 1/2/4/8
// threads each on its own stream (aggregate pairs/s), and the same pair on the cudaMallocAsync
// backend. Every benchmark runs on the sim driver; when a CUDA device is present the same set runs
// on the real driver too. Depends only on the public streampool API (no Boost, no perf/ objects),
// so it builds wherever the library does. Usage: docs/native-backend.md ("Measuring the hot path");
// `--smoke` runs every benchmark for 10 ms only (the CTest smoke test).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "streampool/allocator.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/sim_driver.hpp"

namespace {

using namespace streampool;

constexpr int max_threads = 8;
constexpr std::size_t sizes[] = {512, 1 * mib, 64 * mib};

std::string size_name(std::size_t bytes) {
  if (bytes % mib == 0) return std::to_string(bytes / mib) + "MiB";
  if (bytes % kib == 0) return std::to_string(bytes / kib) + "KiB";
  return std::to_string(bytes) + "B";
}

// Note [Microbench targets]
// A target is one backend on one driver with `max_threads` streams of its own, built once before
// any benchmark runs and shared by the benchmarks (and threads) that use it, so a benchmark's
// timed loop never sees construction. Thread t of a multi-threaded run uses stream t: threads on
// different streams is the case the native backend's per-stream arenas are built for. Before
// timing, every (stream, size) pair is run once, so the timed pairs are cache hits for the native
// backend; `device_mallocs` reports the device mallocs made during the timed loop (0 for a cache
// hit on native; every cudaMallocAsync call counts on the cudaMallocAsync backend). Allocations
// name device 0 explicitly: `current_device` would add a cudaGetDevice to every pair.
struct target {
  std::string name;  // "native/sim"
  std::shared_ptr<driver> drv;
  std::unique_ptr<allocator> alloc;
  std::vector<stream_t> streams;

  target(std::string backend, std::string driver_name, std::shared_ptr<driver> d)
      : name(backend + "/" + driver_name), drv(std::move(d)) {
    alloc = make_allocator(parse_config("backend:" + backend), drv);
    for (int t = 0; t < max_threads; ++t) {
      stream_t s = nullptr;
      check(*drv, drv->stream_create(0, &s), "microbench: stream_create");
      streams.push_back(s);
    }
    for (const stream_t s : streams) {
      for (const std::size_t size : sizes) alloc->deallocate(alloc->allocate(size, s, 0));
    }
  }
  ~target() {
    alloc->empty_cache();
    alloc.reset();
    for (const stream_t s : streams) (void)drv->stream_destroy(0, s);
  }
  target(const target&) = delete;
  target& operator=(const target&) = delete;
};

/// The timed loop: one allocate + deallocate of `size` per iteration on this thread's stream.
void pair(benchmark::State& state, target* t, std::size_t size) {
  const stream_t stream = t->streams[static_cast<std::size_t>(state.thread_index())];
  allocator& alloc = *t->alloc;
  alloc.deallocate(alloc.allocate(size, stream, 0));  // this thread's block is cached
  const std::int64_t mallocs_before = alloc.stats(0).num_device_alloc;
  for (auto _ : state) {
    void* p = alloc.allocate(size, stream, 0);
    benchmark::DoNotOptimize(p);
    alloc.deallocate(p);
  }
  const std::int64_t mallocs = alloc.stats(0).num_device_alloc - mallocs_before;
  // Rates are summed over threads and divided by the (real) time: aggregate pairs per second.
  state.counters["pairs/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  if (state.thread_index() == 0) {
    state.counters["device_mallocs"] = benchmark::Counter(static_cast<double>(mallocs));
  }
}

/// `min_time` > 0: each benchmark runs at least that long (seconds) instead of the default.
void register_target(target* t, bool threaded_sizes_all, double min_time) {
  const auto limit = [&](auto* b) {
    if (min_time > 0.0) b->MinTime(min_time);
    return b;
  };
  for (const std::size_t size : sizes) {
    limit(benchmark::RegisterBenchmark((t->name + "/pair/" + size_name(size)).c_str(), pair, t, size));
  }
  for (const std::size_t size : sizes) {
    if (!threaded_sizes_all && size != sizes[0]) continue;
    limit(benchmark::RegisterBenchmark((t->name + "/pair_threads/" + size_name(size)).c_str(), pair, t, size))
        ->Threads(1)->Threads(2)->Threads(4)->Threads(8)->UseRealTime();
  }
}

/// Removes our own `--smoke` flag from argv (Google Benchmark rejects unknown flags) and says
/// whether it was there. Note [Smoke runs]: --smoke sets a 10 ms minimum time per benchmark in
/// code, because the spelling of --benchmark_min_time changed in Google Benchmark 1.8 ("0.01s";
/// 1.7, installed here, takes a plain number) and the CTest smoke run must work with both.
bool take_smoke_flag(int& argc, char** argv) {
  bool smoke = false;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--smoke") {
      smoke = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  return smoke;
}

/// The real driver when it reports at least one device, else nullptr (and why, on stderr).
std::shared_ptr<driver> cuda_if_present() {
  std::shared_ptr<driver> cuda = make_cuda_driver();
  int count = 0;
  const drv_result result = cuda->device_count(&count);
  if (result.ok() && count > 0) return cuda;
  std::fprintf(stderr, "streampool-microbench: no CUDA device (%s); sim driver only\n",
               result.ok() ? "0 devices" : cuda->describe(result).c_str());
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const bool smoke = take_smoke_flag(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::vector<std::unique_ptr<target>> targets;
  try {
    auto sim = std::make_shared<sim_driver>();
    targets.push_back(std::make_unique<target>("native", "sim", sim));
    targets.push_back(std::make_unique<target>("cudaMallocAsync", "sim", sim));
    if (std::shared_ptr<driver> cuda = cuda_if_present()) {
      targets.push_back(std::make_unique<target>("native", "cuda", cuda));
      targets.push_back(std::make_unique<target>("cudaMallocAsync", "cuda", cuda));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool-microbench: setup failed: %s\n", e.what());
    return 1;
  }
  for (const auto& t : targets) register_target(t.get(), t->name.starts_with("native/"), smoke ? 0.01 : 0.0);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
