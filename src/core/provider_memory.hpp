// provider_memory.hpp — obtaining memory from a private pool's segment provider (Note [Pool
// options] in allocator.cpp), with the checks both backends apply to what it returns.
#pragma once

#include <cstddef>

#include "streampool/graph.hpp"

namespace streampool::core {

/// `provider.allocate(bytes, device, stream)`: nullptr when the provider has no memory; memory not
/// aligned to segment_provider::alignment is given back to it and refused.
/// @throws error (misaligned); what the provider throws
[[nodiscard]] void* allocate_from_provider(const segment_provider& provider, std::size_t bytes, int device,
                                           stream_t stream);

}  // namespace streampool::core
