// Expandable segments under memory pressure (docs/pytorch-compatibility.md §2.13, §2.3, §2.12): allocations that fail with
// normal segments and succeed here, the memory-fraction cap, vmm_create running out of memory
// (pages of the call released, then the OOM ladder), driver errors, and the fallback to normal
// segments when the device or driver has no VMM.
#include <gtest/gtest.h>

#include <string>

#include "support/warnings_scope.hpp"
#include "unit/native/expandable_test_support.hpp"

namespace streampool::test {
namespace {

using streampool::testing::warnings_scope;

/// 8 MiB + 70 MiB, then 20 MiB, on a 100 MiB device. Normal segments need 20 + 70 + 20 MiB:
/// the 12 MiB left in the first segment cannot be combined with new memory. Expandable: the 70
/// MiB grows from the free 12 MiB, the 20 MiB from the 2 MiB left: 100 MiB mapped in all.
bool free_mapped_plus_unmapped_scenario(const std::string& conf) {
  native_env env(conf, sim_with(100 * MiB));
  void* x = env.alloc->allocate(8 * MiB);
  void* y = env.alloc->allocate(70 * MiB);
  bool ok = true;
  try {
    env.alloc->deallocate(env.alloc->allocate(20 * MiB));
  } catch (const out_of_memory&) {
    ok = false;
  }
  env.alloc->deallocate(x);
  env.alloc->deallocate(y);
  return ok;
}

TEST(expandable_oom, FreeMappedPlusUnmappedServesWhatNormalSegmentsCannot) {
  EXPECT_FALSE(free_mapped_plus_unmapped_scenario(""));
  EXPECT_TRUE(free_mapped_plus_unmapped_scenario("expandable_segments:True"));
}

TEST(expandable_oom, FreePagesAreUnmappedAndRemappedContiguously) {
  // A, B, C (20 MiB each) carved from a freed 60 MiB block, D = 40 MiB; B and D freed; E = 50 MiB.
  // Normal segments: B is inside the split 60 MiB segment; release-all frees D's 40 MiB only,
  // and 60 + 50 > 100: out of memory. Expandable: release-all unmaps pages of B and D, and E is
  // mapped in 3 pages after C (40 MiB live + 60 MiB mapped = 100 MiB).
  auto run = [](const std::string& conf, bool expect_success) {
    native_env env(conf, sim_with(100 * MiB));
    env.alloc->deallocate(env.alloc->allocate(60 * MiB));
    void* a = env.alloc->allocate(large_page);
    void* b = env.alloc->allocate(large_page);
    void* c = env.alloc->allocate(large_page);
    void* d = env.alloc->allocate(40 * MiB);
    env.alloc->deallocate(b);
    env.alloc->deallocate(d);
    void* e = nullptr;
    if (!expect_success) {
      EXPECT_THROW(e = env.alloc->allocate(50 * MiB), out_of_memory) << conf;
      EXPECT_EQ(env.stats().num_alloc_retries, 1);
    } else {
      e = env.alloc->allocate(50 * MiB);
      EXPECT_EQ(addr(e), addr(c) + large_page);
      const memory_stats s = env.stats();
      EXPECT_EQ(s.num_alloc_retries, 1);
      EXPECT_EQ(s.num_ooms, 0);
      EXPECT_EQ(env.sim->bytes_in_use(0), 100 * MiB);
      EXPECT_EQ(env.calls(driver_call::vmm_unmap), 3u) << "B's page and D's two pages";
      expect_consistent(env);
      env.alloc->deallocate(e);
    }
    env.alloc->deallocate(a);
    env.alloc->deallocate(c);
  };
  run("", false);
  run("expandable_segments:True", true);
}

TEST(expandable_oom, FractionCapsMappedBytes) {
  expandable_env env(100 * MiB, "per_process_memory_fraction:0.5");
  void* a = env.alloc->allocate(large_page);
  void* b = env.alloc->allocate(large_page);
  const auto creates = env.calls(driver_call::vmm_create);
  try {
    (void)env.alloc->allocate(large_page);  // 40 + 20 > 50 allowed
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("50.00 MiB allowed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(env.calls(driver_call::vmm_create), creates) << "refused before creating a page";
  void* c = env.alloc->allocate(4096);  // 40 + 2 MiB small page: allowed
  EXPECT_LE(env.stats().reserved_bytes[all].peak, i64(50 * MiB));
  env.alloc->deallocate(b);
  void* d = env.alloc->allocate(large_page);  // the cached page serves without a check
  EXPECT_EQ(d, b);
  expect_consistent(env);
  for (void* p : {a, c, d}) env.alloc->deallocate(p);
}

TEST(expandable_oom, CreateOutOfMemoryReleasesThePagesOfTheCallThenRetries) {
  expandable_env env;
  env.sim->fail_next(driver_call::vmm_create, 1, status::out_of_memory, /*skip=*/1);
  void* a = env.alloc->allocate(2 * large_page);  // page 1 of the first try fails
  EXPECT_EQ(env.calls(driver_call::vmm_create), 4u) << "1 + 1 failed, then 2 on the retry";
  EXPECT_EQ(env.calls(driver_call::vmm_release), 1u) << "the page created by the failed call";
  const memory_stats s = env.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  expect_consistent(env);
  env.alloc->deallocate(a);
}

TEST(expandable_oom, PersistentCreateFailureIsOutOfMemoryAndNothingLeaks) {
  expandable_env env;
  env.sim->fail_next(driver_call::vmm_create, 2, status::out_of_memory, /*skip=*/1);
  EXPECT_THROW((void)env.alloc->allocate(2 * large_page), out_of_memory);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.stats().num_ooms, 1);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  void* p = env.alloc->allocate(2 * large_page);  // the allocator keeps working
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  env.alloc->deallocate(p);
}

TEST(expandable_oom, DriverErrorsAreCudaErrorsAndLeaveNothingMapped) {
  expandable_env env;
  env.sim->fail_next(driver_call::vmm_create, 1, status::other, /*skip=*/1);
  EXPECT_THROW((void)env.alloc->allocate(2 * large_page), cuda_error);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  env.sim->fail_next(driver_call::vmm_map, 1, status::other, /*skip=*/1);
  EXPECT_THROW((void)env.alloc->allocate(2 * large_page), cuda_error);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  env.sim->fail_next(driver_call::vmm_set_access, 1, status::other);
  EXPECT_THROW((void)env.alloc->allocate(2 * large_page), cuda_error);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  void* p = env.alloc->allocate(2 * large_page);
  EXPECT_EQ(env.stats().num_device_alloc, 1);
  expect_consistent(env);
  env.alloc->deallocate(p);
  env.alloc->empty_cache();
  EXPECT_EQ(env.calls(driver_call::vmm_free), 1u);
}

TEST(expandable_oom, RefusedReleaseIsRetriedByTheNextEmptyCache) {
  expandable_env env;
  env.alloc->deallocate(env.alloc->allocate(30 * MiB));
  env.sim->fail_next(driver_call::vmm_release, 1, status::other);
  try {
    env.alloc->empty_cache();
    FAIL() << "expected cuda_error";
  } catch (const cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuMemRelease"), std::string::npos) << e.what();
  }
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page) << "the refused page and the one after it stay mapped";
  expect_consistent(env);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  EXPECT_EQ(env.calls(driver_call::vmm_free), 1u);
}

TEST(expandable_oom, RefusedGiveBackOfAFailedGrowthIsRetriedAtTheNextGrowth) {
  expandable_env env;
  env.sim->fail_next(driver_call::vmm_set_access, 1, status::other);
  env.sim->fail_next(driver_call::vmm_unmap, 1, status::other);
  EXPECT_THROW((void)env.alloc->allocate(30 * MiB), cuda_error);
  EXPECT_EQ(env.sim->bytes_in_use(0), large_page) << "page 0 is still mapped, page 1 was released";
  EXPECT_EQ(env.stats().reserved_bytes[all].current, i64(large_page)) << "the kept page is reserved";
  void* p = env.alloc->allocate(30 * MiB);  // gives the leftover back first, then maps there
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, i64(2 * large_page));
  expect_consistent(env);
  env.alloc->deallocate(p);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

TEST(expandable_fallback, DeviceWithoutVmmWarnsOnceAndUsesNormalSegments) {
  warnings_scope w;
  sim_options o = sim_with(1 * GiB);
  o.vmm_supported = false;
  o.device_count = 2;
  native_env env("expandable_segments:True", o);
  EXPECT_TRUE(w.messages().empty()) << "nothing is probed before the first allocation";
  void* a = env.alloc->allocate(100);
  void* b = env.alloc->allocate(100, nullptr, 1);
  ASSERT_EQ(w.messages().size(), 1u) << "one warning per allocator";
  EXPECT_NE(w.messages()[0].find("expandable_segments:True"), std::string::npos) << w.messages()[0];
  EXPECT_NE(w.messages()[0].find("normal segments"), std::string::npos) << w.messages()[0];
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 0u);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_FALSE(segs[0].is_expandable);
  EXPECT_EQ(segs[0].total_size, 2 * MiB);
  EXPECT_EQ(env.stats().segment[all].current, 1);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
}

TEST(expandable_fallback, ReserveNotSupportedFallsBackForGood) {
  warnings_scope w;
  expandable_env env;
  env.sim->fail_next(driver_call::vmm_reserve, 1, status::not_supported);
  void* a = env.alloc->allocate(30 * MiB);
  ASSERT_EQ(w.messages().size(), 1u);
  EXPECT_NE(w.messages()[0].find("cuMemAddressReserve"), std::string::npos) << w.messages()[0];
  void* b = env.alloc->allocate(4096);
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u) << "not asked again";
  EXPECT_EQ(env.calls(driver_call::malloc), 2u);
  EXPECT_EQ(env.stats().segment[all].current, 2);
  for (const segment_info& s : env.segments()) EXPECT_FALSE(s.is_expandable);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
}

TEST(expandable_fallback, WithVmmNothingIsWarned) {
  warnings_scope w;
  expandable_env env;
  env.alloc->deallocate(env.alloc->allocate(100));
  EXPECT_TRUE(w.messages().empty());
}

}  // namespace
}  // namespace streampool::test
