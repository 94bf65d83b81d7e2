// peer_cub.hpp — the `cub` peer: CUB's CachingDeviceAllocator (cub/util_allocator.cuh, from the
// CUDA toolkit's CCCL) behind the allocator interface. It calls cudaMalloc/cudaFree itself, so it
// runs on a real GPU only (the registry reports "needs a real GPU" on the sim driver).
#pragma once

#include <memory>

#include "backend_registry.hpp"

namespace streampool::bench {

/// Whether this binary was built with CUB's header (when not, the registry lists `cub` as not built).
[[nodiscard]] bool cub_peer_built() noexcept;
/// @throws error when not built, or when `drv` is the sim driver
[[nodiscard]] std::unique_ptr<allocator> make_cub_peer(const backend_spec& spec, std::shared_ptr<driver> drv);

}  // namespace streampool::bench
