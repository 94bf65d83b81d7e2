// sim_ipc.hpp (internal) — the simulated device's sharing of VMM memory between "processes"
// (sim_driver instances of one process): a shared memory object per exported physical handle,
// alive while any vmm_space holds a handle of it, and the registry that names it by the file
// descriptor vmm_export_fd hands out (a memfd, so that it can be closed and passed like a real
// one). Note [Sim IPC] in sim_ipc.cpp.
#pragma once

#include <cstddef>
#include <memory>

namespace streampool::sim {

/// The physical memory behind a handle that was exported: what every handle of it, in any
/// vmm_space, shares. Counted process-wide (live_shared_memory()), for leak checks.
class shared_memory {
 public:
  shared_memory(int device, std::size_t size) noexcept;
  ~shared_memory();
  shared_memory(const shared_memory&) = delete;
  shared_memory& operator=(const shared_memory&) = delete;

  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  int device_;
  std::size_t size_;
};

/// A new descriptor naming `memory` (the caller's to close), or -1 when the OS gives none.
[[nodiscard]] int publish_shared_memory(const std::shared_ptr<shared_memory>& memory) noexcept;
/// The memory a descriptor of publish_shared_memory names, or nullptr: not such a descriptor
/// (closed, or another file), or the memory no longer exists.
[[nodiscard]] std::shared_ptr<shared_memory> find_shared_memory(int fd) noexcept;
/// Shared memory objects alive in this process (every sim_driver together).
[[nodiscard]] std::size_t live_shared_memory() noexcept;

}  // namespace streampool::sim
