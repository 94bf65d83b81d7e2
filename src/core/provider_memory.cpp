// provider_memory.cpp — see provider_memory.hpp.
#include "core/provider_memory.hpp"

#include <cstdint>
#include <string>

#include "core/format.hpp"
#include "streampool/errors.hpp"
#include "streampool/stats.hpp"

namespace streampool::core {

void* allocate_from_provider(const segment_provider& provider, std::size_t bytes, int device, stream_t stream) {
  void* ptr = provider.allocate(bytes, device, stream);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (ptr == nullptr || address % segment_provider::alignment == 0) return ptr;
  provider.deallocate(ptr, bytes, device, stream);
  throw error("streampool: segment provider '" + provider.name + "' returned " + format_pointer(address) + " for " +
              format_size(bytes) + ", which is not aligned to " + std::to_string(segment_provider::alignment) +
              " bytes (cudaMalloc's alignment, which blocks rely on)");
}

}  // namespace streampool::core
