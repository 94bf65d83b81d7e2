// peer_allocators.hpp — the two peers built on the driver interface, so they run on the sim driver
// as well as on a GPU: `cuda` (a device malloc/free per request, i.e. cudaMalloc/cudaFree) and
// `async-raw` (malloc_async/free_async on the device's default pool, i.e. raw cudaMallocAsync).
// Both are streampool::allocator subclasses so every command (replay included) drives them alike.
#pragma once

#include <memory>

#include "backend_registry.hpp"

namespace streampool::bench {

[[nodiscard]] std::unique_ptr<allocator> make_raw_device_peer(const backend_spec& spec, std::shared_ptr<driver> drv);
[[nodiscard]] std::unique_ptr<allocator> make_raw_async_peer(const backend_spec& spec, std::shared_ptr<driver> drv);
/// True when `alloc` is an `async-raw` peer.
[[nodiscard]] bool is_raw_async_peer(const allocator& alloc);

}  // namespace streampool::bench
