// ipc_import.hpp — opening the pages of another process's expandable segment (an 'e' IPC handle,
// ipc_handles.hpp) through streampool's driver: each page's descriptor taken from the sender
// (pidfd_getfd), imported (vmm_import_fd), and mapped into a reservation of exactly the pages'
// extent, with access for the importing device. Note [Importing expandable pages]. No torch here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <streampool/driver.hpp>

#include "ipc_handles.hpp"

namespace streampool::torch_ext::ipc {

class imported_pages {
 public:
  /// Opens `pages` on `device` of `drv`. @throws error / cuda_error naming the step that failed
  /// and what to do; nothing stays reserved, imported or open then.
  [[nodiscard]] static imported_pages open(driver& drv, int device, const expandable_pages& pages);

  imported_pages(imported_pages&& other) noexcept;
  imported_pages& operator=(imported_pages&&) = delete;
  imported_pages(const imported_pages&) = delete;
  imported_pages& operator=(const imported_pages&) = delete;
  ~imported_pages() { (void)close(); }

  [[nodiscard]] void* base() const noexcept { return base_; }
  /// The bytes reserved and mapped: pages × page size, nothing more.
  [[nodiscard]] std::size_t size() const noexcept { return handles_.size() * page_size_; }
  /// Unmaps, releases and frees the reservation (the memory stays with the other handles of it);
  /// the first failure, or ok. A second close does nothing.
  drv_result close() noexcept;

 private:
  imported_pages(driver& drv, std::size_t page_size) noexcept : drv_(&drv), page_size_(page_size) {}

  driver* drv_;
  std::size_t page_size_;
  void* base_ = nullptr;
  std::size_t mapped_ = 0;  ///< pages mapped, from the first
  std::vector<vmm_handle_t> handles_;
};

}  // namespace streampool::torch_ext::ipc
