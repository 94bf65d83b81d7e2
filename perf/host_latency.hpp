// host_latency.hpp — the `latency` measurements of the pinned host allocators (host_peers.hpp):
// cache-hit alloc+free pairs (T threads, a live set of `depth` blocks each), the cold first
// allocation (what pinning new memory costs: cudaHostAlloc, or malloc + page touching +
// cudaHostRegister), and the copy loop: each iteration takes a buffer, submits a host-to-device
// cudaMemcpyAsync from it on the thread's stream, records the stream and frees the buffer while
// the copy is still in flight. See Note [Host latency runs] in host_latency.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "backend_registry.hpp"
#include "cli_common.hpp"
#include "latency.hpp"

namespace streampool::bench {

struct host_latency_result {
  latency_result pairs;           ///< pairs; timed_device_mallocs = pinned ranges obtained while timed
  double cold_alloc_us = 0.0;     ///< median over repeats of a fresh allocator's first allocate()
  double copy_ns_per_iter = 0.0;  ///< median host time per copy-loop iteration (alloc + submit + free)
  double copy_gb_per_s = 0.0;     ///< median bytes copied per second, the wait for the copies included
  std::int64_t copy_driver_allocations = 0;  ///< pinned ranges obtained during the timed copy loops
  std::string copy_error;
};

/// Runs the three measurements of one host backend. Never throws for a backend failure.
[[nodiscard]] host_latency_result measure_host_latency(const backend_spec& spec, const driver_choice& choice,
                                                       const latency_params& params, bool copy_loop);

}  // namespace streampool::bench
