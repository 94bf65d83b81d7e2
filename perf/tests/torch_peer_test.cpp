// torch_peer_test.cpp — the PyTorch peers' loader and allocator wrapper, against the fake plugin
// (tests/fake_torch_peer: the plugin's C interface over host memory), on the sim driver: loading
// through selected_backends, statistics taken from the plugin, errors mapped to streampool's
// exceptions, and one c10 backend per process. The real plugin needs libtorch and a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include "backend_registry.hpp"
#include "cli_common.hpp"
#include "peer_torch.hpp"
#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::bench {
namespace {

driver_choice gpu_choice() {  // the fake plugin needs no device; the registry only checks `sim`
  driver_choice choice;
  choice.sim = false;
  choice.why = "test";
  return choice;
}

// First: it must run before a plugin is loaded in this process (tests run in file order).
TEST(torch_peer, PluginWithoutTheInterfaceIsBadInput) {
  // A shared library that is not a torch peer plugin: named in the message, never half-loaded.
  set_torch_peer_path("libm.so.6");
  try {
    (void)selected_backends("torch-native", gpu_choice());
    FAIL() << "libm accepted as a plugin";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("has no symbol streampool_torch_peer_abi_version"), std::string::npos)
        << e.what();
  }
  set_torch_peer_path("");
}

// One test, because the plugin (like c10) is loaded once per process.
TEST(torch_peer, FakePluginRunsTorchNativeAndRefusesTorchAsyncAfterIt) {
  if (::access(STREAMPOOL_FAKE_TORCH_PEER, R_OK) != 0) {
    GTEST_SKIP() << "fake plugin " << STREAMPOOL_FAKE_TORCH_PEER << " not found (test binary copied away from its build?)";
  }
  set_torch_peer_path(STREAMPOOL_FAKE_TORCH_PEER);
  EXPECT_EQ(torch_peer_why_not(gpu_choice()), "");
  // The default list on a GPU has torch-native but not torch-async (one backend per process).
  bool native_in_defaults = false, async_in_defaults = false;
  for (const backend_spec& spec : default_backends(gpu_choice())) {
    native_in_defaults = native_in_defaults || spec.name == "torch-native";
    async_in_defaults = async_in_defaults || spec.name == "torch-async";
  }
  EXPECT_TRUE(native_in_defaults);
  EXPECT_FALSE(async_in_defaults);

  const std::vector<backend_spec> specs = selected_backends("torch-native", gpu_choice());  // loads the plugin
  ASSERT_EQ(specs.size(), 1u);
  auto sim = std::make_shared<sim_driver>();
  std::unique_ptr<allocator> alloc = make_backend(specs[0], sim);
  stream_t s1 = nullptr, s2 = nullptr;
  ASSERT_TRUE(sim->stream_create(0, &s1).ok());
  ASSERT_TRUE(sim->stream_create(0, &s2).ok());

  void* a = alloc->allocate(1000, s1, 0);
  void* b = alloc->allocate(4096, s1, 0);
  memory_stats st = alloc->stats(0);
  EXPECT_EQ(st.allocated_bytes[0].current, 1024 + 4096);  // the plugin's (rounded) figure, not the request
  EXPECT_EQ(st.reserved_bytes[0].current, 1024 + 4096);
  EXPECT_EQ(st.requested_bytes[0].current, 1000 + 4096);
  EXPECT_EQ(st.num_device_alloc, 2);
  EXPECT_NE(leak_check(*alloc, 0), "ok");

  alloc->record_stream(a, s2);
  const std::uint64_t waits_before = sim->calls(driver_call::stream_wait_event);
  alloc->deallocate(a);  // ordered after s2's work: an event on s2, then s1 waits for it
  EXPECT_EQ(sim->calls(driver_call::stream_wait_event), waits_before + 1);
  EXPECT_THROW(alloc->deallocate(a), error);  // double free: refused before reaching the plugin
  EXPECT_THROW((void)alloc->allocate(std::size_t{2} << 40, s1, 0), out_of_memory);
  alloc->deallocate(b);
  EXPECT_EQ(leak_check(*alloc, 0), "ok");
  EXPECT_EQ(alloc->stats(0).allocated_bytes[0].peak, 1024 + 4096);
  alloc->reset_peak_stats(0);
  EXPECT_EQ(alloc->stats(0).allocated_bytes[0].peak, 0);
  alloc.reset();
  EXPECT_TRUE(sim->stream_destroy(0, s1).ok());
  EXPECT_TRUE(sim->stream_destroy(0, s2).ok());

  try {
    (void)selected_backends("torch-async", gpu_choice());
    FAIL() << "torch-async accepted after c10 was loaded for torch-native";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("one PyTorch backend per process"), std::string::npos) << e.what();
  }
  set_torch_peer_path("");
}

}  // namespace
}  // namespace streampool::bench
