// ipc_import.cpp — imported_pages (ipc_import.hpp): taking the sender's page descriptors,
// importing, reserving the extent, mapping, access, and undoing all of it.
#include "ipc_import.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <streampool/errors.hpp>

// Older C libraries lack the numbers; the kernel has had both since Linux 5.6.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace streampool::torch_ext::ipc {

// Note [Importing expandable pages]
// PyTorch's receiver of an 'e' handle builds a whole ExpandableSegment, whose constructor reserves
// address space for the device's full memory, once per imported segment: 609 imports reserved
// 127.5 TiB for 48 GB mapped (pytorch/pytorch#198129). streampool's receiver reserves exactly the
// pages it maps (pages × page size, aligned to the granularity), so a process can import as many
// tensors as the memory behind them allows. Per page, the sender's descriptor is taken with
// pidfd_getfd (which needs the right to ptrace the sender: the same user, and a Yama ptrace_scope
// of 0 or 1 with the sender an ancestor or, as torch.multiprocessing's children are, allowed),
// imported as a handle of this process (vmm_import_fd) and the local copy closed; then the
// reservation, the maps, and read-write access for the importing device. Each failure undoes what
// was done, so a half-open import never leaks a handle or address space. The memory lives until
// every process has let go of it (Note [Sharing VMM handles]): the sender may exit first.

namespace {

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

/// Closes a descriptor when it goes out of scope.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

imported_pages::imported_pages(imported_pages&& other) noexcept
    : drv_(other.drv_), page_size_(other.page_size_), base_(std::exchange(other.base_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)), handles_(std::move(other.handles_)) {
  other.handles_.clear();
}

imported_pages imported_pages::open(driver& drv, int device, const expandable_pages& pages) {
  if (pages.fds.empty() || pages.page_size == 0) {
    throw error("streampool: an expandable-segment IPC handle with no pages cannot be opened");
  }
  imported_pages out(drv, pages.page_size);
  fd_guard pidfd{static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pages.pid), 0))};
  if (pidfd.fd < 0) {
    const int err = errno;
    throw error("streampool: opening CUDA tensor memory shared by process " + std::to_string(pages.pid) +
                " failed at pidfd_open: " + errno_text(err) +
                (err == ENOSYS ? "; this kernel lacks pidfd_open (Linux >= 5.3 is needed)"
                 : err == ESRCH ? "; the sending process has exited (it must stay alive until the receiver has opened "
                                  "the tensor)"
                                : ""));
  }
  for (const int remote : pages.fds) {
    fd_guard local{static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.fd, remote, 0))};
    if (local.fd < 0) {
      const int err = errno;
      throw error("streampool: taking page descriptor " + std::to_string(remote) + " from process " +
                  std::to_string(pages.pid) + " (pidfd_getfd) failed: " + errno_text(err) +
                  (err == EPERM ? "; this process may not ptrace the sender (same user, and kernel.yama.ptrace_scope "
                                  "<= 1 with the sender allowed)"
                   : err == EBADF ? "; the sender no longer holds it (the tensor's memory was freed there)"
                                  : ""));
    }
    vmm_handle_t handle = 0;
    const drv_result imported = drv.vmm_import_fd(local.fd, &handle);
    if (!imported.ok()) {
      throw cuda_error("streampool: importing a page of CUDA tensor memory shared by process " +
                           std::to_string(pages.pid) + " failed: " + drv.describe(imported),
                       imported.native);
    }
    out.handles_.push_back(handle);
  }
  const std::size_t bytes = out.handles_.size() * pages.page_size;
  // Alignment 0: the granularity, which every page size is a multiple of (a page of 20 MiB is no
  // power of two, which cuMemAddressReserve's alignment must be).
  const drv_result reserved = drv.vmm_reserve(device, bytes, 0, &out.base_);
  if (!reserved.ok()) {
    out.base_ = nullptr;
    throw cuda_error("streampool: reserving " + std::to_string(bytes) + " bytes of address space for CUDA tensor "
                         "memory shared by process " + std::to_string(pages.pid) + " failed: " + drv.describe(reserved),
                     reserved.native);
  }
  const auto base = reinterpret_cast<std::uintptr_t>(out.base_);
  for (const vmm_handle_t handle : out.handles_) {
    void* va = reinterpret_cast<void*>(base + out.mapped_ * pages.page_size);
    const drv_result mapped = drv.vmm_map(va, pages.page_size, handle);
    if (!mapped.ok()) {
      throw cuda_error("streampool: mapping a page of CUDA tensor memory shared by process " +
                           std::to_string(pages.pid) + " failed: " + drv.describe(mapped),
                       mapped.native);
    }
    ++out.mapped_;
  }
  const drv_result access = drv.vmm_set_access(out.base_, bytes, device);
  if (!access.ok()) {
    throw cuda_error("streampool: granting device " + std::to_string(device) +
                         " access to CUDA tensor memory shared by process " + std::to_string(pages.pid) +
                         " failed: " + drv.describe(access),
                     access.native);
  }
  return out;
}

drv_result imported_pages::close() noexcept {
  drv_result first{};
  auto keep = [&first](drv_result r) {
    if (first.ok() && !r.ok()) first = r;
  };
  const auto base = reinterpret_cast<std::uintptr_t>(base_);
  for (std::size_t i = 0; i < mapped_; ++i) keep(drv_->vmm_unmap(reinterpret_cast<void*>(base + i * page_size_), page_size_));
  mapped_ = 0;
  for (const vmm_handle_t handle : handles_) keep(drv_->vmm_release(handle));
  if (base_ != nullptr) keep(drv_->vmm_free(base_, handles_.size() * page_size_));
  handles_.clear();
  base_ = nullptr;
  return first;
}

}  // namespace streampool::torch_ext::ipc
