// workload_multistream.cpp — producer/consumer on several streams: each step the producer stream
// allocates `count` input buffers, hands each to a consumer stream (record_stream), and frees it at
// once; each consumer allocates its output on its own stream. Consumers finish their work in turn
// (one per step), so a freed input stays unusable for up to `streams - 1` steps: the backend must
// keep it from reuse without blocking the producer.
//
// Note [Consumer progress on the sim driver]
// With no kernels, a real device completes the streams' (empty) work at once. On the sim driver
// completion is switched to manual, and consumer i's work completes at the end of every
// (streams - 1)-th step, which is what makes record_stream matter (reserved memory grows with the
// number of consumers). Everything is completed before the leak check.
#include <random>

#include "workloads.hpp"

namespace streampool::bench {

workload_counts workload_multistream(allocator& alloc, const driver_instance& inst, const workload_params& params) {
  const std::size_t count = params.count != 0 ? params.count : 16;
  const std::size_t max_size = params.max_size != 0 ? params.max_size : std::size_t{16} << 20;
  const int steps = params.steps != 0 ? params.steps : 200;
  if (params.streams < 2) throw usage_error("workload multistream: --streams must be at least 2");
  driver& drv = *inst.drv;
  std::vector<stream_t> streams(static_cast<std::size_t>(params.streams), nullptr);
  for (stream_t& s : streams) check(drv, drv.stream_create(0, &s), "multistream: stream_create");
  const stream_t producer = streams[0];
  const std::size_t consumers = streams.size() - 1;
  if (inst.sim != nullptr) inst.sim->set_eager(false);

  std::mt19937_64 rng(params.seed);
  std::uniform_int_distribution<std::size_t> size_dist(4096, std::max<std::size_t>(4096, max_size));
  workload_counts counts;
  try {
    for (int step = 0; step < steps; ++step) {
      std::size_t live_bytes = 0;
      for (std::size_t k = 0; k < count; ++k) {
        const std::size_t size = size_dist(rng);
        const stream_t consumer = streams[1 + k % consumers];
        void* input = alloc.allocate(size, producer, 0);
        alloc.record_stream(input, consumer);                  // the consumer reads it
        void* output = alloc.allocate(size / 2 + 1, consumer, 0);  // and writes its result
        live_bytes += size + size / 2 + 1;
        counts.peak_requested = std::max(counts.peak_requested, live_bytes);
        alloc.deallocate(input);   // the producer is done with it; reuse must wait for the consumer
        alloc.deallocate(output);  // consumed in stream order on the consumer stream
        live_bytes -= size + size / 2 + 1;
        counts.ops += 4;
      }
      if (inst.sim != nullptr) {
        inst.sim->complete(producer);
        inst.sim->complete(streams[1 + static_cast<std::size_t>(step) % consumers]);
      }
    }
  } catch (...) {
    if (inst.sim != nullptr) inst.sim->set_eager(true);
    throw;
  }
  if (inst.sim != nullptr) inst.sim->set_eager(true);  // completes everything
  alloc.empty_cache();  // release blocks that reference the streams before they are destroyed
  for (const stream_t s : streams) (void)drv.stream_destroy(0, s);
  return counts;
}

}  // namespace streampool::bench
