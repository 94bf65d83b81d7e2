// ipc_export.hpp — the sender side of an 'e' IPC handle (ipc_handles.hpp): the POSIX descriptors
// of streampool's expandable pages that hold a tensor sent to another process, exported once per
// mapping of a page, kept open while the page stays mapped (the receiver takes them from this
// process with pidfd_getfd), closed when the allocator unmaps or frees that memory (its segment
// listener). Note [Exporting expandable pages]. No torch here: tests/unit/torch_ext tests it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <streampool/driver.hpp>
#include <streampool/stats.hpp>

namespace streampool::torch_ext::ipc {

class page_exports {
 public:
  page_exports() = default;
  page_exports(const page_exports&) = delete;
  page_exports& operator=(const page_exports&) = delete;
  ~page_exports();

  /// The 'e' handle of the pages of `page` bytes, counted from `range_start` (a page boundary: the
  /// start of a mapped range of an expandable segment), that cover [ptr, ptr + bytes); `*offset`
  /// is ptr's offset from the first of them. @throws error / cuda_error naming the page and step
  /// (nothing is half exported: a page's descriptor is kept only once it exists)
  [[nodiscard]] std::string share(driver& drv, std::uintptr_t range_start, std::size_t page, std::uintptr_t ptr,
                                  std::size_t bytes, std::ptrdiff_t* offset);
  /// A segment event of the allocator: an unmap or free closes the descriptors of the pages in it.
  void on_segment_event(const trace_entry& e) noexcept;
  /// Descriptors held open now.
  [[nodiscard]] std::size_t open_descriptors() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, int> fds_;  ///< page address -> its exported descriptor
};

}  // namespace streampool::torch_ext::ipc
