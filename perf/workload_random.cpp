// workload_random.cpp — the shape of RMM's random_allocations benchmark: `count`
// allocations of sizes uniform in [1 B, max], each step an allocation with probability 0.73 else a
// free of a random live block, live bytes capped; seeded, on the default stream.
#include <random>

#include "size_parse.hpp"
#include "workloads.hpp"

namespace streampool::bench {
namespace {

std::size_t max_size_of(const workload_params& params) {
  return params.max_size != 0 ? params.max_size : std::size_t{64} << 20;
}

}  // namespace

void validate_random(const workload_params& params) {
  const std::size_t max_size = max_size_of(params);
  if (max_size > params.live_cap) {
    throw usage_error("--live-cap " + size_label(params.live_cap) + " is below the largest request (--max-size " +
                      size_label(max_size) + (params.max_size == 0 ? ", the default" : "") +
                      "): raise --live-cap or lower --max-size");
  }
}

workload_counts workload_random(allocator& alloc, const driver_instance&, const workload_params& params) {
  const std::size_t count = params.count != 0 ? params.count : 10000;
  const std::size_t max_size = max_size_of(params);
  validate_random(params);
  std::mt19937_64 rng(params.seed);
  std::uniform_int_distribution<std::size_t> size_dist(1, max_size);
  std::bernoulli_distribution alloc_coin(0.73);

  struct block {
    void* ptr;
    std::size_t size;
  };
  std::vector<block> live;
  live.reserve(count);
  workload_counts counts;
  std::size_t live_bytes = 0;
  std::size_t allocations = 0;
  auto free_random = [&] {
    std::uniform_int_distribution<std::size_t> pick(0, live.size() - 1);
    const std::size_t index = pick(rng);
    alloc.deallocate(live[index].ptr);
    live_bytes -= live[index].size;
    live[index] = live.back();
    live.pop_back();
    ++counts.ops;
  };
  while (allocations < count) {
    if (!live.empty() && !alloc_coin(rng)) {
      free_random();
      continue;
    }
    const std::size_t size = size_dist(rng);
    while (live_bytes + size > params.live_cap) free_random();
    live.push_back({alloc.allocate(size, nullptr, 0), size});
    live_bytes += size;
    counts.peak_requested = std::max(counts.peak_requested, live_bytes);
    ++allocations;
    ++counts.ops;
  }
  while (!live.empty()) free_random();
  return counts;
}

}  // namespace streampool::bench
