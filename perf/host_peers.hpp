// host_peers.hpp — the pinned host allocators the harness compares (`latency` only): streampool's
// `pinned` (the host allocator, configured by =CONFIG with the pinned_* keys), `cudaHostAlloc`
// (raw host_alloc / host_free per request, through the driver, so it also runs on the sim) and
// `torch-pinned` (c10's CachingHostAllocator through the --torch-peer plugin; real GPU only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend_registry.hpp"

namespace streampool::bench {

/// A pinned host allocator as the harness drives it. Thread-safe.
class host_peer {
 public:
  virtual ~host_peer() = default;
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  /// `ptr` is read by work submitted to `stream` before the deallocate that follows. Peers whose
  /// free waits for the device anyway (cudaFreeHost) do nothing.
  virtual void record_stream(void* ptr, stream_t stream) = 0;
  /// Pinned ranges obtained from the driver so far (cudaHostAlloc / cudaHostRegister calls); -1
  /// when the peer cannot say.
  [[nodiscard]] virtual std::int64_t driver_allocations() const = 0;
  /// "ok" when nothing is live, else "FAIL: ...". Never throws.
  [[nodiscard]] virtual std::string leak_check() const = 0;
};

/// True for the registry names of host allocators ("pinned", "cudaHostAlloc", "torch-pinned").
[[nodiscard]] bool is_host_backend(std::string_view name) noexcept;
/// A fresh host peer for `spec` on `drv`. @throws usage_error for a bad config, error otherwise
[[nodiscard]] std::unique_ptr<host_peer> make_host_peer(const backend_spec& spec, std::shared_ptr<driver> drv);
/// c10's CachingHostAllocator through the --torch-peer plugin (peer_torch_host.cpp); the plugin
/// must be loaded (selected_backends does it). @throws usage_error when it lacks the host entry points
[[nodiscard]] std::unique_ptr<host_peer> make_torch_pinned_peer(std::shared_ptr<driver> drv);
/// The factory the registry gives host entries for device use: it refuses, naming `latency`.
[[nodiscard]] std::unique_ptr<allocator> refuse_host_backend(const backend_spec& spec, std::shared_ptr<driver> drv);

}  // namespace streampool::bench
