// The IPC handle formats (python/csrc/ipc_handles.cpp, Note [IPC handle formats]) and the import
// of another "process"'s expandable pages (ipc_import.cpp, Note [Importing expandable pages]) on
// the sim: PyTorch's bytes exactly, every format read, every malformed handle refused with a
// message; pages taken with pidfd_getfd from this process, mapped into a reservation of exactly
// their extent, still readable after the exporter let go, and nothing left once closed; each
// failure leaves nothing behind.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "../../../python/csrc/ipc_handles.hpp"
#include "../../../python/csrc/ipc_import.hpp"
#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::torch_ext::ipc {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

TEST(ipc_handles, CudaMallocHandlesArePyTorchsBytes) {
  char raw[cuda_ipc_handle_size];
  for (std::size_t i = 0; i < sizeof(raw); ++i) raw[i] = static_cast<char>(i * 7);
  const std::string h = encode_cuda_malloc(raw);
  ASSERT_EQ(h.size(), 66u);
  EXPECT_EQ(h[0], '\x02');
  EXPECT_EQ(h[1], 'c');
  EXPECT_EQ(std::memcmp(h.data() + 2, raw, sizeof(raw)), 0);
  const decoded_handle d = decode(h);
  EXPECT_EQ(d.kind, kind_cuda_malloc);
  EXPECT_EQ(d.cuda_handle, std::string(raw, sizeof(raw)));
}

TEST(ipc_handles, OlderFormatsAreRead) {
  const std::string raw(cuda_ipc_handle_size, 'x');
  EXPECT_EQ(decode(raw).cuda_handle, raw) << "a bare handle: PyTorch before the version byte";
  const decoded_handle ours = decode(std::string(streampool_v1_prefix) + raw);
  EXPECT_EQ(ours.kind, kind_cuda_malloc);
  EXPECT_EQ(ours.cuda_handle, raw);
}

TEST(ipc_handles, ExpandableHandlesHavePyTorchsHeader) {
  const std::string h = encode_expandable({4242, 20u << 20, {7, 9, 11}});
  ASSERT_EQ(h.size(), 2u + 24u + 3u * 4u);
  EXPECT_EQ(h[1], 'e');
  std::int32_t pid = 0;
  std::size_t segment_size = 0;
  std::size_t count = 0;
  std::memcpy(&pid, h.data() + 2, 4);
  std::memcpy(&segment_size, h.data() + 2 + 8, 8);
  std::memcpy(&count, h.data() + 2 + 16, 8);
  EXPECT_EQ(pid, 4242);
  EXPECT_EQ(segment_size, 20u << 20);
  EXPECT_EQ(count, 3u);
  const decoded_handle d = decode(h);
  EXPECT_EQ(d.kind, kind_expandable);
  EXPECT_EQ(d.pages.pid, 4242);
  EXPECT_EQ(d.pages.page_size, 20u << 20);
  EXPECT_EQ(d.pages.fds, (std::vector<int>{7, 9, 11}));
  EXPECT_NE(message_of([] { (void)encode_expandable({1, 2u << 20, {}}); }), "");
}

TEST(ipc_handles, MalformedHandlesAreRefusedWithTheReason) {
  EXPECT_NE(message_of([] { (void)decode("x"); }).find("too few for any format"), std::string::npos);
  EXPECT_NE(message_of([] { (void)decode(std::string("\x03" "c") + std::string(64, 'a')); }).find("format version 3"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)decode(std::string("\x02" "c") + std::string(10, 'a')); }).find("cudaMalloc handle of 10"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)decode(std::string("\x02" "z") + std::string(10, 'a')); }).find("unknown kind 'z'"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)decode(std::string("\x02" "e") + std::string(10, 'a')); }).find("shorter than its header"),
            std::string::npos);
  std::string fabric = encode_expandable({1, 2u << 20, {3}});
  fabric.append(60, '\0');  // a 64-byte fabric handle where a 4-byte descriptor was expected
  const std::string why = message_of([&] { (void)decode(fabric); });
  EXPECT_NE(why.find("expandable_segments:False in the sender"), std::string::npos) << why;
}

// --- importing on the sim --------------------------------------------------------------------------

constexpr std::size_t page = 2 * mib;

struct exporter {
  sim_driver sim;
  std::vector<vmm_handle_t> handles;
  std::vector<int> fds;
  explicit exporter(std::size_t pages) {
    for (std::size_t i = 0; i < pages; ++i) {
      vmm_handle_t h = 0;
      EXPECT_TRUE(sim.vmm_create(0, page, &h).ok());
      int fd = -1;
      EXPECT_TRUE(sim.vmm_export_fd(h, &fd).ok());
      handles.push_back(h);
      fds.push_back(fd);
    }
  }
  void let_go() {
    for (const vmm_handle_t h : handles) EXPECT_TRUE(sim.vmm_release(h).ok());
    handles.clear();
  }
  ~exporter() {
    let_go();
    for (const int fd : fds) ::close(fd);
  }
};

TEST(ipc_import, MapsExactlyTheExtentAndOutlivesTheExporter) {
  const std::size_t before = sim_driver::live_shared_memory();
  exporter sender(3);
  sim_driver receiver;
  const decoded_handle d = decode(encode_expandable({static_cast<std::int32_t>(::getpid()), page, sender.fds}));
  imported_pages pages = imported_pages::open(receiver, 0, d.pages);
  EXPECT_NE(pages.base(), nullptr);
  EXPECT_EQ(pages.size(), 3 * page) << "pages x page size, not the device's memory";
  EXPECT_EQ(receiver.calls(driver_call::vmm_import_fd), 3u);
  EXPECT_EQ(receiver.calls(driver_call::vmm_reserve), 1u);
  EXPECT_EQ(receiver.calls(driver_call::vmm_map), 3u);
  EXPECT_EQ(receiver.calls(driver_call::vmm_set_access), 1u);
  sender.let_go();
  EXPECT_EQ(sim_driver::live_shared_memory(), before + 3) << "the receiver's handles keep the pages";
  EXPECT_TRUE(pages.close().ok()) << "unmapped, released, and the reservation freed at its exact size";
  EXPECT_EQ(sim_driver::live_shared_memory(), before);
  EXPECT_TRUE(pages.close().ok()) << "a second close does nothing";
}

TEST(ipc_import, ASenderThatIsGoneOrADescriptorItLacksIsNamed) {
  exporter sender(1);
  sim_driver receiver;
  const std::string gone = message_of([&] { (void)imported_pages::open(receiver, 0, {999999999, page, sender.fds}); });
  EXPECT_NE(gone.find("pidfd_open"), std::string::npos) << gone;
  const std::string lacks =
      message_of([&] { (void)imported_pages::open(receiver, 0, {static_cast<std::int32_t>(::getpid()), page, {987654}}); });
  EXPECT_NE(lacks.find("pidfd_getfd"), std::string::npos) << lacks;
  EXPECT_NE(lacks.find("no longer holds it"), std::string::npos) << lacks;
  EXPECT_EQ(receiver.calls(driver_call::vmm_reserve), 0u);
}

TEST(ipc_import, EachFailureLeavesNothingBehind) {
  const std::size_t before = sim_driver::live_shared_memory();
  exporter sender(2);
  const expandable_pages pages{static_cast<std::int32_t>(::getpid()), page, sender.fds};
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  {  // the second page is no exported memory: the first page's import is undone
    sim_driver receiver;
    const std::string why =
        message_of([&] { (void)imported_pages::open(receiver, 0, {pages.pid, page, {sender.fds[0], null_fd}}); });
    EXPECT_NE(why.find("importing a page"), std::string::npos) << why;
  }
  for (const driver_call step : {driver_call::vmm_reserve, driver_call::vmm_map, driver_call::vmm_set_access}) {
    sim_driver receiver;
    receiver.fail_next(step, 1, status::other);
    EXPECT_NE(message_of([&] { (void)imported_pages::open(receiver, 0, pages); }), "") << to_string(step);
  }
  ::close(null_fd);
  sender.let_go();
  EXPECT_EQ(sim_driver::live_shared_memory(), before) << "no import survived a failed open";
}

}  // namespace
}  // namespace streampool::torch_ext::ipc
