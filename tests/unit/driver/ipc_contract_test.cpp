// Sharing VMM memory between processes (vmm_export_fd / vmm_import_fd, Note [Sharing VMM
// handles]) on every driver: an exported handle imports as a handle of its own that maps, takes
// access and releases like any, and outlives the exporter's release; bad handles and descriptors
// fail cleanly; vmm_retain finds the handle mapped at an address. On the real driver "the other process" is this one (CUDA imports its own
// descriptors too); the sim-only suite (sim_ipc_test.cpp) has separate sim_drivers.
#include <fcntl.h>
#include <unistd.h>

#include "driver_contract_test_support.hpp"

namespace streampool::testing {
namespace {

class ipc_contract : public driver_contract {
 protected:
  void SetUp() override {
    driver_contract::SetUp();
    if (IsSkipped()) return;
    if (!info_.vmm_supported) GTEST_SKIP() << "device 0 has no virtual memory management";
    if (!info_.vmm_ipc_supported) GTEST_SKIP() << "device 0 makes no shareable VMM handles";
  }
};

TEST_P(ipc_contract, ExportedMemoryImportsMapsAndOutlivesTheExportersRelease) {
  const std::size_t granularity = info_.vmm_granularity;
  vmm_handle_t created = 0;
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &created)));
  int fd = -1;
  ASSERT_TRUE(ok(drv_->vmm_export_fd(created, &fd)));
  EXPECT_GE(fd, 0);
  vmm_handle_t imported = 0;
  ASSERT_TRUE(ok(drv_->vmm_import_fd(fd, &imported)));
  EXPECT_NE(imported, 0u);
  EXPECT_EQ(::close(fd), 0) << "the descriptor is the caller's";
  EXPECT_TRUE(ok(drv_->vmm_release(created))) << "the exporter lets go first";

  void* va = nullptr;
  ASSERT_TRUE(ok(drv_->vmm_reserve(0, granularity, granularity, &va)));
  EXPECT_TRUE(ok(drv_->vmm_map(va, granularity, imported))) << "the import still names live memory";
  EXPECT_TRUE(ok(drv_->vmm_set_access(va, granularity, 0)));
  EXPECT_TRUE(ok(drv_->vmm_unmap(va, granularity)));
  EXPECT_TRUE(ok(drv_->vmm_release(imported)));
  EXPECT_TRUE(ok(drv_->vmm_free(va, granularity)));
}

TEST_P(ipc_contract, AHandleExportsMoreThanOnce) {
  vmm_handle_t created = 0;
  ASSERT_TRUE(ok(drv_->vmm_create(0, info_.vmm_granularity, &created)));
  int first = -1;
  int second = -1;
  ASSERT_TRUE(ok(drv_->vmm_export_fd(created, &first)));
  ASSERT_TRUE(ok(drv_->vmm_export_fd(created, &second)));
  EXPECT_NE(first, second) << "each export is a descriptor of its own";
  vmm_handle_t imported = 0;
  EXPECT_TRUE(ok(drv_->vmm_import_fd(second, &imported)));
  EXPECT_TRUE(ok(drv_->vmm_release(imported)));
  EXPECT_EQ(::close(first), 0);
  EXPECT_EQ(::close(second), 0);
  EXPECT_TRUE(ok(drv_->vmm_release(created)));
}

TEST_P(ipc_contract, BadHandlesAndDescriptorsFailCleanly) {
  int fd = 7;
  EXPECT_FALSE(drv_->vmm_export_fd(0, &fd).ok()) << "no such handle";
  EXPECT_EQ(fd, -1);
  vmm_handle_t out = 1;
  EXPECT_FALSE(drv_->vmm_import_fd(-1, &out).ok());
  EXPECT_EQ(out, 0u);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  EXPECT_FALSE(drv_->vmm_import_fd(null_fd, &out).ok()) << "a file that is no exported memory";
  EXPECT_EQ(::close(null_fd), 0);
  // The driver keeps working.
  vmm_handle_t created = 0;
  ASSERT_TRUE(ok(drv_->vmm_create(0, info_.vmm_granularity, &created)));
  EXPECT_TRUE(ok(drv_->vmm_release(created)));
}

TEST_P(ipc_contract, RetainGivesTheMappedHandleHeldOnceMore) {
  const std::size_t granularity = info_.vmm_granularity;
  void* va = nullptr;
  ASSERT_TRUE(ok(drv_->vmm_reserve(0, 2 * granularity, granularity, &va)));
  vmm_handle_t created = 0;
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &created)));
  ASSERT_TRUE(ok(drv_->vmm_map(va, granularity, created)));
  ASSERT_TRUE(ok(drv_->vmm_set_access(va, granularity, 0)));
  vmm_handle_t retained = 0;
  ASSERT_TRUE(ok(drv_->vmm_retain(va, &retained)));
  EXPECT_EQ(retained, created) << "the value it was mapped with";
  EXPECT_TRUE(ok(drv_->vmm_release(retained)));
  int fd = -1;
  EXPECT_TRUE(ok(drv_->vmm_export_fd(created, &fd))) << "still held once after the retain's release";
  if (fd >= 0) {
    EXPECT_EQ(::close(fd), 0);
  }
  vmm_handle_t none = 1;
  EXPECT_FALSE(drv_->vmm_retain(reinterpret_cast<void*>(address(va) + granularity), &none).ok()) << "nothing mapped there";
  EXPECT_EQ(none, 0u);
  EXPECT_TRUE(ok(drv_->vmm_release(created)));
  EXPECT_TRUE(ok(drv_->vmm_unmap(va, granularity)));
  EXPECT_TRUE(ok(drv_->vmm_free(va, 2 * granularity)));
}

std::string case_name(const ::testing::TestParamInfo<driver_case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(drivers, ipc_contract,
                         ::testing::Values(driver_case{"sim", [] { return std::make_shared<sim_driver>(); }},
                                           driver_case{"cuda", [] { return make_cuda_driver(); }}),
                         case_name);

}  // namespace
}  // namespace streampool::testing
