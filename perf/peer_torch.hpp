// peer_torch.hpp — the PyTorch peers `torch-native` and `torch-async`: allocator subclasses that
// call PyTorch's CUDA caching allocator (c10) through the plugin of perf/torch_peer/, which the
// bench dlopens from --torch-peer PATH (or STREAMPOOL_BENCH_TORCH_PEER), so the bench is built
// without libtorch. Real GPU only; one of the two per process (Note [One c10 backend per process]).
#pragma once

#include <memory>
#include <string>

#include "backend_registry.hpp"

namespace streampool::bench {

enum class torch_backend { native, cuda_malloc_async };

/// The plugin path from --torch-peer; "" = use STREAMPOOL_BENCH_TORCH_PEER (or none).
void set_torch_peer_path(const std::string& path);
/// The plugin path in effect: --torch-peer, else STREAMPOOL_BENCH_TORCH_PEER, else "".
[[nodiscard]] std::string torch_peer_path();
/// "" when the PyTorch peers can run with `choice`; else why not (sim driver, no plugin given).
[[nodiscard]] std::string torch_peer_why_not(const driver_choice& choice);
/// Loads the plugin for `backend` once per process, setting PYTORCH_CUDA_ALLOC_CONF first.
/// @throws usage_error naming --torch-peer if it does not load or has another ABI version, or if
///         it was loaded for the other backend
void load_torch_peer(torch_backend backend);

/// Factories of the registry; they need load_torch_peer() first (selected_backends does it).
[[nodiscard]] std::unique_ptr<allocator> make_torch_native_peer(const backend_spec& spec, std::shared_ptr<driver> drv);
[[nodiscard]] std::unique_ptr<allocator> make_torch_async_peer(const backend_spec& spec, std::shared_ptr<driver> drv);

}  // namespace streampool::bench
