// sim_pool_estimate.cpp — marking of the sim pool's figures as estimates (sim_pool_estimate.hpp).
#include "sim_pool_estimate.hpp"

#include "peer_allocators.hpp"
#include "size_parse.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::bench {

bool uses_stream_ordered_pool(const allocator& alloc) {
  return alloc.backend_name() == "cudaMallocAsync" || is_raw_async_peer(alloc);
}

column estimate_column() { return {"peak_reserved_error", "resv error", col_kind::error}; }

cell estimate_cell(bool estimate) { return estimate ? sim_pool_peak_error : 0.0; }

std::string estimate_note() {
  return "sim pool figures (cudaMallocAsync, async-raw on the sim driver) are estimates: the sim's model of "
         "CUDA's stream-ordered pool was within ±" +
         fixed(sim_pool_peak_error * 100.0, 0) +
         "% of an H200's peak reserved on the measured traces (column 'resv error'; docs/benchmarks.md)";
}

}  // namespace streampool::bench
