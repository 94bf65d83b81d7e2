// The sender side of an expandable-segment IPC handle (python/csrc/ipc_export.cpp, Note [Exporting
// expandable pages]) with the native backend's expandable segments on the sim: the pages of a
// block are exported once, a sim_driver standing for the receiving process maps exactly them, the
// descriptors close when the allocator unmaps the memory (segment listener) while the receiver
// keeps what it mapped, and a device without shareable handles or an unmapped address is refused.
#include <gtest/gtest.h>

#include <fcntl.h>

#include <memory>

#include "../../../python/csrc/ipc_export.hpp"
#include "../../../python/csrc/ipc_handles.hpp"
#include "../../../python/csrc/ipc_import.hpp"
#include "streampool/allocator.hpp"
#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::torch_ext::ipc {
namespace {

struct sender {
  std::shared_ptr<sim_driver> sim;
  std::unique_ptr<allocator> alloc;
  page_exports exports;
  explicit sender(sim_options options = {}) : sim(std::make_shared<sim_driver>(options)) {
    alloc = make_allocator(parse_config("expandable_segments:True"), sim);
    alloc->set_segment_listener([this](const trace_entry& e) { exports.on_segment_event(e); });
  }
  ~sender() { alloc->set_segment_listener(nullptr); }
  /// The mapped range and block holding `p`.
  std::pair<segment_info, block_info> where(void* p) const {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    for (const segment_info& s : alloc->snapshot().segments) {
      for (const block_info& b : s.blocks) {
        if (b.address == address) return {s, b};
      }
    }
    ADD_FAILURE() << "no block at " << p;
    return {};
  }
  std::string share(void* p, std::ptrdiff_t* offset) {
    const auto [s, b] = where(p);
    EXPECT_TRUE(s.is_expandable);
    return exports.share(*sim, s.address, s.page_size, b.address, b.size, offset);
  }
};

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(ipc_export, ABlocksPagesGoToTheReceiverAndCloseWhenTheMemoryIsUnmapped) {
  const std::size_t before = sim_driver::live_shared_memory();
  sender a;
  void* p = a.alloc->allocate(30 * mib);  // two 20 MiB pages
  std::ptrdiff_t offset = -1;
  const std::string handle = a.share(p, &offset);
  EXPECT_EQ(offset, 0);
  const decoded_handle d = decode(handle);
  ASSERT_EQ(d.kind, kind_expandable);
  EXPECT_EQ(d.pages.page_size, a.where(p).first.page_size);
  EXPECT_EQ(d.pages.fds.size(), 2u);
  EXPECT_EQ(a.exports.open_descriptors(), 2u);
  std::ptrdiff_t again = -1;
  EXPECT_EQ(a.share(p, &again), handle) << "a page is exported once";
  EXPECT_EQ(a.sim->calls(driver_call::vmm_export_fd), 2u);

  sim_driver receiver;
  imported_pages pages = imported_pages::open(receiver, 0, d.pages);
  EXPECT_EQ(pages.size(), 2 * d.pages.page_size) << "exactly the block's pages";
  const std::vector<int> fds = d.pages.fds;

  a.alloc->deallocate(p);
  a.alloc->empty_cache();  // unmaps the free pages: their descriptors close
  EXPECT_EQ(a.exports.open_descriptors(), 0u);
  for (const int fd : fds) EXPECT_FALSE(is_open(fd)) << fd;
  EXPECT_EQ(sim_driver::live_shared_memory(), before + 2) << "the receiver still holds the pages";
  EXPECT_TRUE(pages.close().ok());
  EXPECT_EQ(sim_driver::live_shared_memory(), before);
}

TEST(ipc_export, ABlockInsideARangeGetsItsOffsetFromItsFirstPage) {
  sender a;
  void* first = a.alloc->allocate(15 * mib);
  void* second = a.alloc->allocate(15 * mib);  // from 15 MiB: pages 0 and 1 of the range
  std::ptrdiff_t offset = -1;
  const decoded_handle d = decode(a.share(second, &offset));
  EXPECT_EQ(static_cast<std::uintptr_t>(offset) + 0, reinterpret_cast<std::uintptr_t>(second) -
                                                     a.where(second).first.address);
  EXPECT_EQ(d.pages.fds.size(), 2u) << "[15 MiB, 30 MiB) touches both 20 MiB pages";
  a.alloc->deallocate(first);
  a.alloc->deallocate(second);
}

TEST(ipc_export, WithoutShareableHandlesTheErrorSaysWhatToSet) {
  sim_options options;
  options.vmm_ipc_supported = false;
  sender a(options);
  void* p = a.alloc->allocate(mib);
  std::ptrdiff_t offset = 0;
  try {
    (void)a.share(p, &offset);
    ADD_FAILURE() << "exported";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("expandable_segments:False"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.exports.open_descriptors(), 0u);
  EXPECT_EQ(a.sim->calls(driver_call::vmm_retain), 1u);
  a.alloc->deallocate(p);
}

TEST(ipc_export, AnUnmappedAddressOrAnEmptyBlockIsRefused) {
  sender a;
  void* p = a.alloc->allocate(mib);
  const auto [s, b] = a.where(p);
  std::ptrdiff_t offset = 0;
  EXPECT_THROW((void)a.exports.share(*a.sim, s.address + (1ull << 40), s.page_size, s.address + (1ull << 40), 512, &offset),
               error);
  EXPECT_THROW((void)a.exports.share(*a.sim, s.address, s.page_size, b.address, 0, &offset), error);
  EXPECT_THROW((void)a.exports.share(*a.sim, s.address, 0, b.address, 512, &offset), error);
  EXPECT_EQ(a.exports.open_descriptors(), 0u);
  a.alloc->deallocate(p);
}

}  // namespace
}  // namespace streampool::torch_ext::ipc
