// workload_graphloop.cpp — a CUDA-graph-captured loop: per shape bucket (--graphs, like the
// sequence-length buckets of a captured training loop) one eager warm-up step, then the same step
// captured into a graph; the graphs share one private pool and are replayed --steps times in
// turn. A step allocates --count buffers of varying sizes on the capture stream, frees every other
// one at once (temporaries) and the rest in reverse at the end (activations), so the pool both
// reuses and grows within a step. Reports the time per replay (launches + synchronize) besides the
// usual peaks and device mallocs.
//
// Note [Capturing each backend]
// streampool's backends capture through capture_scope (private pool shared by the graphs:
// docs/graph-capture.md). `async-raw` is captured with plain stream capture: its
// cudaMallocAsync/cudaFreeAsync become graph memory nodes on a GPU (the graph's memory, outside the
// default pool's reserved figure); the sim driver models no graph memory, so there they are served
// by its pool at capture time. The other peers cannot be captured (workload_unsupported_reason).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <utility>

#include "streampool/graph.hpp"
#include "workloads.hpp"

namespace streampool::bench {
namespace {

/// `count` sizes log-uniform in [64 KiB, max_size], scaled by the bucket: bucket g of `graphs` is
/// (g + 1) / graphs of the longest shape, as sequence buckets are.
std::vector<std::size_t> bucket_sizes(std::mt19937_64& rng, std::size_t count, std::size_t max_size, int bucket, int graphs) {
  const double lo = std::log(65536.0);
  const double hi = std::log(static_cast<double>(std::max<std::size_t>(max_size, 65536)));
  std::uniform_real_distribution<double> dist(lo, hi);
  const double scale = static_cast<double>(bucket + 1) / static_cast<double>(graphs);
  std::vector<std::size_t> sizes;
  for (std::size_t k = 0; k < count; ++k) {
    sizes.push_back(std::max<std::size_t>(512, static_cast<std::size_t>(std::exp(dist(rng)) * scale)));
  }
  return sizes;
}

/// One step on `stream` (see the file comment). Frees whatever it holds if an allocation throws.
void run_step(allocator& alloc, stream_t stream, const std::vector<std::size_t>& sizes, workload_counts& counts) {
  std::vector<std::pair<void*, std::size_t>> kept;
  std::size_t live = 0;
  try {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      void* ptr = alloc.allocate(sizes[k], stream, 0);
      ++counts.ops;
      live += sizes[k];
      counts.peak_requested = std::max(counts.peak_requested, live);
      if (k % 2 == 1) {  // a temporary: freed at once
        alloc.deallocate(ptr);
        ++counts.ops;
        live -= sizes[k];
      } else {
        kept.emplace_back(ptr, sizes[k]);
      }
    }
  } catch (...) {
    for (const auto& [ptr, size] : kept) alloc.deallocate(ptr);
    throw;
  }
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    alloc.deallocate(it->first);
    ++counts.ops;
  }
}

/// A graph captured with plain stream capture (async-raw), destroyed with its executable.
struct raw_graph {
  driver* drv = nullptr;
  graph_t graph = nullptr;
  graph_exec_t exec = nullptr;
  raw_graph() = default;
  raw_graph(raw_graph&& o) noexcept : drv(o.drv), graph(std::exchange(o.graph, nullptr)), exec(std::exchange(o.exec, nullptr)) {}
  raw_graph& operator=(raw_graph&&) = delete;
  raw_graph(const raw_graph&) = delete;
  raw_graph& operator=(const raw_graph&) = delete;
  ~raw_graph() {
    if (exec != nullptr) (void)drv->graph_exec_destroy(exec);
    if (graph != nullptr) (void)drv->graph_destroy(graph);
  }
};

raw_graph capture_raw(allocator& alloc, driver& drv, stream_t stream, const std::vector<std::size_t>& sizes,
                      workload_counts& counts) {
  raw_graph out;
  out.drv = &drv;
  check(drv, drv.stream_begin_capture(stream, capture_mode::global), "graphloop: stream_begin_capture");
  try {
    run_step(alloc, stream, sizes, counts);
  } catch (...) {
    (void)drv.stream_end_capture(stream, &out.graph);
    throw;
  }
  check(drv, drv.stream_end_capture(stream, &out.graph), "graphloop: stream_end_capture");
  check(drv, drv.graph_instantiate(out.graph, &out.exec, instantiate_flags::none), "graphloop: graph_instantiate");
  return out;
}

captured_graph capture_pooled(allocator& alloc, stream_t stream, mempool_id pool, const std::vector<std::size_t>& sizes,
                              workload_counts& counts) {
  std::optional<capture_scope> scope;
  if (pool.is_default()) {
    scope.emplace(alloc, stream);
  } else {
    scope.emplace(alloc, stream, pool);  // share the first graph's pool
  }
  run_step(alloc, stream, sizes, counts);
  return scope->end();
}

}  // namespace

std::string graphloop_unsupported_reason(const std::string& backend) {
  if (backend == "native" || backend == "cudaMallocAsync" || backend == "async-raw") return {};
  if (backend == "cuda") return "cudaMalloc/cudaFree may not be called while a stream is capturing";
  if (backend == "cub") {
    return "CUB's CachingDeviceAllocator has no graph-capture support (cudaMalloc and cudaEventQuery are "
           "illegal during capture)";
  }
  if (backend == "torch-native" || backend == "torch-async") {
    return "the plugin exposes raw_alloc/raw_delete only, not c10's private-pool capture API";
  }
  return "no capture path for this backend";
}

workload_counts workload_graphloop(allocator& alloc, const driver_instance& inst, const workload_params& params) {
  const std::size_t count = params.count != 0 ? params.count : 8;
  const std::size_t max_size = params.max_size != 0 ? params.max_size : std::size_t{64} << 20;
  const int replays = params.steps != 0 ? params.steps : 100;
  const int graphs = params.graphs;
  if (graphs < 1) throw usage_error("workload graphloop: --graphs must be at least 1");
  driver& drv = *inst.drv;
  stream_t stream = nullptr;
  check(drv, drv.stream_create(0, &stream), "graphloop: stream_create");
  std::mt19937_64 rng(params.seed);
  workload_counts counts;
  try {
    std::vector<std::vector<std::size_t>> shapes;
    for (int g = 0; g < graphs; ++g) shapes.push_back(bucket_sizes(rng, count, max_size, g, graphs));
    for (const auto& sizes : shapes) run_step(alloc, stream, sizes, counts);  // eager warm-up
    std::vector<captured_graph> pooled;
    std::vector<raw_graph> raw;
    const bool plain = params.backend == "async-raw";
    for (const auto& sizes : shapes) {
      if (plain) {
        raw.push_back(capture_raw(alloc, drv, stream, sizes, counts));
      } else {
        pooled.push_back(capture_pooled(alloc, stream, pooled.empty() ? mempool_id{} : pooled.front().pool(), sizes, counts));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < replays; ++r) {
      const auto g = static_cast<std::size_t>(r % graphs);  // capture order, one at a time
      if (plain) {
        check(drv, drv.graph_launch(raw[g].exec, stream), "graphloop: graph_launch");
      } else {
        pooled[g].launch(stream);
      }
    }
    check(drv, drv.stream_synchronize(0, stream), "graphloop: stream_synchronize");
    counts.replays = replays;
    counts.replay_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } catch (...) {
    alloc.empty_cache();
    (void)drv.stream_destroy(0, stream);
    throw;
  }
  alloc.empty_cache();  // the graphs are gone: their pool's memory goes back
  (void)drv.stream_destroy(0, stream);
  return counts;
}

}  // namespace streampool::bench
