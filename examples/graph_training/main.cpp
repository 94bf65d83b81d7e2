// main.cpp — streampool_graph_training: trains a small MLP (kernels/streampool_mlp.hpp) for N eager
// steps, then from the same initial weights captures one step into a CUDA graph with
// streampool::capture_scope and replays it N times, printing both loss curves, whether they are
// bit-identical, what the allocator did during the replays (nothing) and the cost of a replay.
// The backend comes from STREAMPOOL_ALLOC_CONF, e.g. backend:cudaMallocAsync.
//   usage: streampool_graph_training [steps]     (exit status 0 when the losses match)
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "streampool/allocator.hpp"
#include "streampool/graph.hpp"
#include "streampool_mlp.hpp"

namespace {

using namespace streampool;

/// The eager run, the capture and the replays; the trainer is gone before the streams are.
bool train(allocator& alloc, driver& drv, stream_t stream, stream_t side, int steps) {
  kernels::mlp_trainer trainer(alloc, {}, 42, stream);
  std::vector<float> eager;
  for (int i = 0; i < steps; ++i) {
    trainer.step(stream);
    eager.push_back(trainer.loss(stream));
  }

  // Warm up on a side stream, go back to the initial weights, then capture one step.
  for (int i = 0; i < 3; ++i) trainer.step(side);
  check(drv, drv.device_synchronize(0), "cudaDeviceSynchronize");
  trainer.reset_parameters(stream);
  alloc.empty_cache();
  const std::int64_t before_capture = alloc.stats().reserved_bytes[0].current;
  captured_graph graph;
  {
    capture_scope scope(alloc, stream);
    trainer.step(stream);
    graph = scope.end();
  }
  const memory_stats captured = alloc.stats();

  bool identical = true;
  std::printf("step  eager loss   graph replay loss\n");
  for (int i = 0; i < steps; ++i) {
    graph.launch(stream);
    const float replayed = trainer.loss(stream);
    identical = identical && std::bit_cast<std::uint32_t>(replayed) == std::bit_cast<std::uint32_t>(eager[i]);
    std::printf("%4d  %.7f   %.7f\n", i, double(eager[i]), double(replayed));
  }
  const memory_stats replayed = alloc.stats();

  constexpr int timed = 1000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < timed; ++i) graph.launch(stream);
  check(drv, drv.stream_synchronize(0, stream), "cudaStreamSynchronize");
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;

  std::printf("losses bit-identical: %s\n", identical ? "yes" : "NO");
  std::printf("allocations during %d replays: %lld; reserved: %lld -> %lld bytes\n", steps,
              static_cast<long long>(replayed.allocation[0].allocated - captured.allocation[0].allocated),
              static_cast<long long>(captured.reserved_bytes[0].current),
              static_cast<long long>(replayed.reserved_bytes[0].current));
  std::printf("replay: %.2f us per training step (%d replays)\n", elapsed.count() / timed, timed);

  graph.reset();        // the graph's use of its pool ends ...
  alloc.empty_cache();  // ... and the pool's memory goes back to the device
  const std::int64_t after_release = alloc.stats().reserved_bytes[0].current;
  std::printf("reserved after releasing the graph and empty_cache: %lld bytes (before the capture: %lld)\n",
              static_cast<long long>(after_release), static_cast<long long>(before_capture));
  return identical && after_release <= before_capture;
}

int run(int steps) {
  const std::shared_ptr<driver> drv = make_cuda_driver();
  int devices = 0;
  if (const drv_result found = drv->device_count(&devices); !found.ok()) {
    std::printf("no CUDA device: %s\n", drv->describe(found).c_str());
    return 2;
  }
  const std::unique_ptr<allocator> alloc = make_allocator(config_from_env(), drv);
  std::printf("backend: %s\n", std::string(alloc->backend_name()).c_str());
  stream_t stream = nullptr;
  stream_t side = nullptr;
  check(*drv, drv->stream_create(0, &stream), "cudaStreamCreate");
  check(*drv, drv->stream_create(0, &side), "cudaStreamCreate");
  const bool identical = train(*alloc, *drv, stream, side, steps);
  (void)drv->stream_destroy(0, side);
  (void)drv->stream_destroy(0, stream);
  return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  if (steps <= 0) {
    std::fprintf(stderr, "usage: %s [steps > 0]\n", argv[0]);
    return 2;
  }
  try {
    return run(steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool_graph_training: %s\n", e.what());
    return 1;
  }
}
