// The sim's sharing of VMM memory between sim_drivers standing for processes (Note [Sim IPC]):
// reference counts that survive either side going first, at every step of export / import / map,
// nothing left alive once both are gone, the charge on the exporter's device only, the errors
// (a closed descriptor, memory that is gone, a handle made unshareable), and the call counter.
#include <gtest/gtest.h>

#include <unistd.h>

#include <memory>

#include "driver_test_support.hpp"

namespace streampool::testing {
namespace {

constexpr std::size_t page = 2 * mib;

/// One "process": a sim_driver, and what it holds of the shared memory.
struct process {
  std::unique_ptr<sim_driver> sim = std::make_unique<sim_driver>();
  vmm_handle_t handle = 0;
  void* va = nullptr;
  bool mapped = false;

  ::testing::AssertionResult ok(drv_result r) const { return succeeded(*sim, r); }
  void map() {
    ASSERT_TRUE(ok(sim->vmm_reserve(0, page, page, &va)));
    ASSERT_TRUE(ok(sim->vmm_map(va, page, handle)));
    ASSERT_TRUE(ok(sim->vmm_set_access(va, page, 0)));
    mapped = true;
  }
  /// Lets go of everything in order, as a process that exits cleanly.
  void finish() {
    if (mapped) {
      EXPECT_TRUE(ok(sim->vmm_unmap(va, page)));
      EXPECT_TRUE(ok(sim->vmm_free(va, page)));
    }
    if (handle != 0) {
      EXPECT_TRUE(ok(sim->vmm_release(handle)));
    }
    handle = 0;
    mapped = false;
  }
  /// Killed: the sim_driver goes with whatever it holds.
  void kill() {
    sim.reset();
    handle = 0;
    mapped = false;
  }
};

TEST(sim_ipc, TheImporterChargesNothingAndTheMemoryGoesWithTheLastHandle) {
  const std::size_t before = sim_driver::live_shared_memory();
  process exporter;
  process importer;
  ASSERT_TRUE(exporter.ok(exporter.sim->vmm_create(0, page, &exporter.handle)));
  int fd = -1;
  ASSERT_TRUE(exporter.ok(exporter.sim->vmm_export_fd(exporter.handle, &fd)));
  EXPECT_EQ(exporter.sim->calls(driver_call::vmm_export_fd), 1u);
  ASSERT_TRUE(importer.ok(importer.sim->vmm_import_fd(fd, &importer.handle)));
  EXPECT_EQ(importer.sim->calls(driver_call::vmm_import_fd), 1u);
  EXPECT_EQ(::close(fd), 0);
  EXPECT_EQ(sim_driver::live_shared_memory(), before + 1);
  importer.map();
  EXPECT_EQ(exporter.sim->bytes_in_use(0), page);
  EXPECT_EQ(importer.sim->bytes_in_use(0), 0u) << "the memory is the exporter's";
  exporter.finish();
  EXPECT_EQ(exporter.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(sim_driver::live_shared_memory(), before + 1) << "the importer's handle keeps it";
  importer.finish();
  EXPECT_EQ(sim_driver::live_shared_memory(), before);
}

TEST(sim_ipc, ADescriptorClosedOrOfMemoryThatIsGoneDoesNotImport) {
  process exporter;
  process importer;
  ASSERT_TRUE(exporter.ok(exporter.sim->vmm_create(0, page, &exporter.handle)));
  int fd = -1;
  ASSERT_TRUE(exporter.ok(exporter.sim->vmm_export_fd(exporter.handle, &fd)));
  int closed = -1;
  ASSERT_TRUE(exporter.ok(exporter.sim->vmm_export_fd(exporter.handle, &closed)));
  ASSERT_EQ(::close(closed), 0);
  vmm_handle_t out = 0;
  EXPECT_TRUE(fails_with(*importer.sim, status::invalid_value, importer.sim->vmm_import_fd(closed, &out)));
  exporter.finish();
  EXPECT_TRUE(fails_with(*importer.sim, status::invalid_value, importer.sim->vmm_import_fd(fd, &out)))
      << "every handle of it was released: the memory is gone (a descriptor keeps nothing alive in the sim)";
  EXPECT_EQ(::close(fd), 0);
  int none = 3;
  EXPECT_TRUE(fails_with(*exporter.sim, status::invalid_value, exporter.sim->vmm_export_fd(exporter.handle + 99, &none)));
  EXPECT_EQ(none, -1);
}

TEST(sim_ipc, AReleasedHandleDoesNotExport) {
  sim_driver sim;
  vmm_handle_t h = 0;
  ASSERT_TRUE(succeeded(sim, sim.vmm_create(0, page, &h)));
  ASSERT_TRUE(succeeded(sim, sim.vmm_release(h)));
  int fd = 0;
  EXPECT_TRUE(fails_with(sim, status::invalid_value, sim.vmm_export_fd(h, &fd)));
}

TEST(sim_ipc, HandlesMadeUnshareableDoNotExport) {
  sim_options options;
  options.vmm_ipc_supported = false;
  sim_driver sim(options);
  device_info info;
  ASSERT_TRUE(succeeded(sim, sim.get_device_info(0, &info)));
  EXPECT_FALSE(info.vmm_ipc_supported);
  vmm_handle_t h = 0;
  ASSERT_TRUE(succeeded(sim, sim.vmm_create(0, page, &h)));
  int fd = 0;
  EXPECT_TRUE(fails_with(sim, status::not_supported, sim.vmm_export_fd(h, &fd)));
  EXPECT_TRUE(succeeded(sim, sim.vmm_release(h)));
  sim_options no_vmm;
  no_vmm.vmm_supported = false;
  sim_driver plain(no_vmm);
  vmm_handle_t out = 0;
  EXPECT_TRUE(fails_with(plain, status::not_supported, plain.vmm_import_fd(0, &out)));
}

TEST(sim_ipc, FaultsCanBeInjected) {
  sim_driver sim;
  vmm_handle_t h = 0;
  ASSERT_TRUE(succeeded(sim, sim.vmm_create(0, page, &h)));
  sim.fail_next(driver_call::vmm_export_fd, 1);
  int fd = 0;
  EXPECT_FALSE(sim.vmm_export_fd(h, &fd).ok());
  ASSERT_TRUE(succeeded(sim, sim.vmm_export_fd(h, &fd)));
  EXPECT_EQ(::close(fd), 0);
  EXPECT_TRUE(succeeded(sim, sim.vmm_release(h)));
}

// Either side killed after each step; the other finishes; nothing stays alive.
enum class step { created, exported, imported, mapped };
struct kill_case {
  step at;
  bool kill_exporter;
};

class sim_ipc_kill : public ::testing::TestWithParam<kill_case> {};

TEST_P(sim_ipc_kill, NothingLeaksWhicheverSideDiesAtWhicheverStep) {
  const auto [at, kill_exporter] = GetParam();
  const std::size_t before = sim_driver::live_shared_memory();
  {
    process exporter;
    process importer;
    ASSERT_TRUE(exporter.ok(exporter.sim->vmm_create(0, page, &exporter.handle)));
    exporter.map();
    int fd = -1;
    auto kill_now = [&] { (kill_exporter ? exporter : importer).kill(); };
    if (at == step::created) kill_now();
    if (exporter.sim != nullptr) {
      ASSERT_TRUE(exporter.ok(exporter.sim->vmm_export_fd(exporter.handle, &fd)));
      if (at == step::exported) kill_now();
    }
    if (fd >= 0 && importer.sim != nullptr) {
      const drv_result imported = importer.sim->vmm_import_fd(fd, &importer.handle);
      // The exporter died holding the only handle: the memory went with it.
      if (exporter.sim == nullptr) {
        EXPECT_TRUE(fails_with(*importer.sim, status::invalid_value, imported));
      } else {
        ASSERT_TRUE(importer.ok(imported));
        if (at == step::imported) kill_now();
        if (importer.sim != nullptr) {
          importer.map();
          if (at == step::mapped) kill_now();
        }
      }
    }
    if (fd >= 0) {
      EXPECT_EQ(::close(fd), 0);
    }
    if (importer.sim != nullptr && importer.mapped && exporter.sim == nullptr) {
      EXPECT_EQ(sim_driver::live_shared_memory(), before + 1) << "the survivor's mapping keeps the memory";
    }
    if (exporter.sim != nullptr) exporter.finish();
    if (importer.sim != nullptr) importer.finish();
  }
  EXPECT_EQ(sim_driver::live_shared_memory(), before);
}

std::string kill_name(const ::testing::TestParamInfo<kill_case>& info) {
  const char* steps[] = {"created", "exported", "imported", "mapped"};
  return std::string(info.param.kill_exporter ? "exporter" : "importer") + "_killed_when_" +
         steps[static_cast<int>(info.param.at)];
}

INSTANTIATE_TEST_SUITE_P(every_step, sim_ipc_kill,
                         ::testing::Values(kill_case{step::created, true}, kill_case{step::created, false},
                                           kill_case{step::exported, true}, kill_case{step::exported, false},
                                           kill_case{step::imported, true}, kill_case{step::imported, false},
                                           kill_case{step::mapped, true}, kill_case{step::mapped, false}),
                         kill_name);

}  // namespace
}  // namespace streampool::testing
