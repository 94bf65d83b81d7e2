// ipc_export.cpp — page_exports (ipc_export.hpp): exporting the pages that hold a tensor, and
// closing their descriptors when the memory goes.
#include "ipc_export.hpp"

#include <unistd.h>

#include <string>
#include <vector>

#include <streampool/errors.hpp>

#include "ipc_handles.hpp"

namespace streampool::torch_ext::ipc {

// Note [Exporting expandable pages]
// PyTorch's sender of an expandable-segment tensor exports each page that holds it
// (cuMemExportToShareableHandle to a POSIX descriptor), keeps the descriptor for as long as the
// page is mapped, and puts its number, with the process id, in the 'e' handle; the receiver takes
// it with pidfd_getfd. streampool does the same without knowing its backend's pages: a page's
// handle is found from its address (vmm_retain, cuMemRetainAllocationHandle), exported, and the
// hold released again; the descriptor is what keeps the export. The segment listener tells when
// memory is unmapped (segment_unmap) or freed (segment_free), and the descriptors of the pages in
// it are closed then, so an exported descriptor never names memory the allocator has given back
// (a page mapped again later is a new mapping and is exported anew). The pages are those of the
// tensor's block, counted from the start of its mapped range, which is a page boundary; the
// receiver maps exactly those pages (Note [Importing expandable pages]).

page_exports::~page_exports() {
  for (const auto& [va, fd] : fds_) ::close(fd);
}

std::string page_exports::share(driver& drv, std::uintptr_t range_start, std::size_t page, std::uintptr_t ptr,
                                std::size_t bytes, std::ptrdiff_t* offset) {
  if (page == 0 || bytes == 0 || ptr < range_start) {
    throw error("streampool: cannot share this memory: no page size, an empty block, or a pointer before its range");
  }
  const std::uintptr_t first = range_start + (ptr - range_start) / page * page;
  const std::uintptr_t end = range_start + (ptr + bytes - range_start + page - 1) / page * page;
  expandable_pages pages;
  pages.pid = static_cast<std::int32_t>(::getpid());
  pages.page_size = page;
  std::lock_guard lock(mutex_);
  for (std::uintptr_t va = first; va < end; va += page) {
    auto known = fds_.find(va);
    if (known != fds_.end()) {
      pages.fds.push_back(known->second);
      continue;
    }
    vmm_handle_t handle = 0;
    const drv_result held = drv.vmm_retain(reinterpret_cast<void*>(va), &handle);
    if (!held.ok()) {
      throw cuda_error("streampool: finding the page at " + std::to_string(va) + " to share it with another process "
                           "failed: " + drv.describe(held),
                       held.native);
    }
    int fd = -1;
    const drv_result exported = drv.vmm_export_fd(handle, &fd);
    (void)drv.vmm_release(handle);  // the retain's hold; the mapping keeps the page
    if (!exported.ok()) {
      throw cuda_error("streampool: exporting a page of an expandable segment for another process failed: " +
                           drv.describe(exported) +
                           (exported.code == status::not_supported
                                ? std::string("; the device makes no shareable VMM handles: set "
                                              "expandable_segments:False in the sending process")
                                : std::string()),
                       exported.native);
    }
    fds_.emplace(va, fd);
    pages.fds.push_back(fd);
  }
  *offset = static_cast<std::ptrdiff_t>(ptr - first);
  return encode_expandable(pages);
}

void page_exports::on_segment_event(const trace_entry& e) noexcept {
  if (e.action != trace_action::segment_unmap && e.action != trace_action::segment_free) return;
  std::lock_guard lock(mutex_);
  for (auto it = fds_.lower_bound(e.address); it != fds_.end() && it->first < e.address + e.size;) {
    ::close(it->second);
    it = fds_.erase(it);
  }
}

std::size_t page_exports::open_descriptors() const {
  std::lock_guard lock(mutex_);
  return fds_.size();
}

}  // namespace streampool::torch_ext::ipc
