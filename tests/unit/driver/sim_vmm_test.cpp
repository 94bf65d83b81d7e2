// sim_vmm_test.cpp — the sim driver's virtual memory management: reservations (alignment, no
// capacity charge, never reused), physical handles (capacity, out_of_memory), and the strict
// rules of map, set_access, unmap, release and free, including release-while-mapped.
#include <gtest/gtest.h>

#include <cstdint>

#include "driver_test_support.hpp"

namespace streampool::testing {
namespace {

constexpr std::size_t granule = 2 * mib;

class sim_vmm : public sim_test {
 protected:
  sim_options make_options() override {
    sim_options options;
    options.device_count = 2;
    options.capacity = 16 * mib;
    return options;
  }
  void* reserve(std::size_t bytes, std::size_t alignment = 0) {
    void* va = nullptr;
    EXPECT_TRUE(ok(sim().vmm_reserve(0, bytes, alignment, &va)));
    return va;
  }
  vmm_handle_t create(std::size_t bytes = granule) {
    vmm_handle_t handle = 0;
    EXPECT_TRUE(ok(sim().vmm_create(0, bytes, &handle)));
    return handle;
  }
  static void* at(void* va, std::size_t offset) { return static_cast<char*>(va) + offset; }
};

TEST_F(sim_vmm, ReservationsAreAlignedFreeOfChargeAndDisjoint) {
  void* first = reserve(64 * mib);
  void* second = reserve(granule, 64 * mib);
  EXPECT_EQ(address(first) % granule, 0u);
  EXPECT_EQ(address(second) % (64 * mib), 0u) << "a larger alignment is honoured";
  EXPECT_GE(address(second), address(first) + 64 * mib);
  EXPECT_EQ(sim().bytes_in_use(0), 0u) << "address space costs no memory (64 MiB > 16 MiB capacity)";
  ASSERT_TRUE(ok(sim().vmm_free(first, 64 * mib)));
  void* third = reserve(granule);
  EXPECT_GT(address(third), address(second)) << "addresses are never reused";
}

TEST_F(sim_vmm, ReserveRejectsBadSizesAlignmentsAndDevices) {
  void* va = reinterpret_cast<void*>(0x1);
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_reserve(0, granule + 512, 0, &va)));
  EXPECT_EQ(va, nullptr);
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_reserve(0, 0, 0, &va)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_reserve(0, granule, 3 * mib, &va)));
  EXPECT_TRUE(fails(status::invalid_device, sim().vmm_reserve(2, granule, 0, &va)));
  sim_options no_vmm;
  no_vmm.vmm_supported = false;
  sim_driver bare(no_vmm);
  vmm_handle_t handle = 0;
  EXPECT_TRUE(fails_with(bare, status::not_supported, bare.vmm_reserve(0, granule, 0, &va)));
  EXPECT_TRUE(fails_with(bare, status::not_supported, bare.vmm_create(0, granule, &handle)));
}

TEST_F(sim_vmm, PhysicalMemoryCountsTowardCapacity) {
  const vmm_handle_t a = create(8 * mib);
  const vmm_handle_t b = create(8 * mib);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(sim().bytes_in_use(0), 16 * mib);
  vmm_handle_t none = 99;
  const drv_result failed = sim().vmm_create(0, granule, &none);
  EXPECT_EQ(failed.code, status::out_of_memory);
  EXPECT_EQ(none, 0u);
  EXPECT_NE(sim().describe(failed).find("device 0"), std::string::npos);
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_create(0, granule / 2, &none)));
  EXPECT_TRUE(ok(sim().vmm_create(1, granule, &none))) << "device 1 has its own capacity";
  ASSERT_TRUE(ok(sim().vmm_release(a)));
  EXPECT_EQ(sim().bytes_in_use(0), 8 * mib);
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_release(a))) << "released twice";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_release(12345)));
}

TEST_F(sim_vmm, MapRequiresAFreeAlignedRangeInsideOneReservation) {
  void* va = reserve(4 * granule);
  const vmm_handle_t handle = create();
  const vmm_handle_t wide = create(2 * granule);
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(at(va, granule / 2), granule, handle))) << "misaligned";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(at(va, 4 * granule), granule, handle))) << "outside";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(at(va, 3 * granule), 2 * granule, wide)))
      << "straddles the end";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(reinterpret_cast<void*>(0x200000), granule, handle)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(va, granule, 777))) << "unknown handle";
  EXPECT_TRUE(fails(status::not_supported, sim().vmm_map(va, granule, wide))) << "part of a handle";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(va, 2 * granule, handle))) << "more than the handle";
  ASSERT_TRUE(ok(sim().vmm_map(at(va, granule), granule, handle)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(va, 2 * granule, wide))) << "overlaps the mapping";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(at(va, granule), granule, handle))) << "already mapped";
  EXPECT_TRUE(ok(sim().vmm_map(at(va, 2 * granule), 2 * granule, wide)));
}

TEST_F(sim_vmm, SetAccessNeedsTheWholeRangeMapped) {
  void* va = reserve(4 * granule);
  ASSERT_TRUE(ok(sim().vmm_map(va, granule, create())));
  ASSERT_TRUE(ok(sim().vmm_map(at(va, granule), granule, create())));
  EXPECT_TRUE(ok(sim().vmm_set_access(va, 2 * granule, 0))) << "may span mappings";
  EXPECT_TRUE(ok(sim().vmm_set_access(at(va, granule), granule, 1)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_set_access(va, 3 * granule, 0)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_set_access(at(va, 3 * granule), granule, 0)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_set_access(va, 0, 0)));
  EXPECT_TRUE(fails(status::invalid_device, sim().vmm_set_access(va, granule, 5)));
}

TEST_F(sim_vmm, UnmapTakesWholeMappingsOnly) {
  void* va = reserve(4 * granule);
  const vmm_handle_t first = create();
  const vmm_handle_t second = create();
  const vmm_handle_t far = create();
  ASSERT_TRUE(ok(sim().vmm_map(va, granule, first)));
  ASSERT_TRUE(ok(sim().vmm_map(at(va, granule), granule, second)));
  ASSERT_TRUE(ok(sim().vmm_map(at(va, 3 * granule), granule, far)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_unmap(va, granule / 2))) << "part of a mapping";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_unmap(va, 4 * granule))) << "a gap in the range";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_unmap(at(va, 2 * granule), granule))) << "never mapped";
  EXPECT_TRUE(ok(sim().vmm_unmap(va, 2 * granule))) << "two whole mappings";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_unmap(va, granule))) << "already unmapped";
  EXPECT_TRUE(ok(sim().vmm_unmap(at(va, 3 * granule), granule)));
}

TEST_F(sim_vmm, ReleasedMemoryLivesUntilItsLastMappingGoes) {
  void* va = reserve(2 * granule);
  const vmm_handle_t shared = create();
  ASSERT_TRUE(ok(sim().vmm_map(va, granule, shared)));
  ASSERT_TRUE(ok(sim().vmm_map(at(va, granule), granule, shared))) << "a handle may be mapped twice";
  ASSERT_TRUE(ok(sim().vmm_release(shared)));
  EXPECT_EQ(sim().bytes_in_use(0), granule);
  vmm_handle_t unused = 0;
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(va, granule, shared))) << "released handles cannot map";
  ASSERT_TRUE(ok(sim().vmm_unmap(va, granule)));
  EXPECT_EQ(sim().bytes_in_use(0), granule) << "one mapping left";
  ASSERT_TRUE(ok(sim().vmm_unmap(at(va, granule), granule)));
  EXPECT_EQ(sim().bytes_in_use(0), 0u);
  EXPECT_TRUE(ok(sim().vmm_create(0, 16 * mib, &unused))) << "all the capacity is back";
}

TEST_F(sim_vmm, FreeNeedsTheExactUnmappedReservation) {
  void* va = reserve(2 * granule);
  const vmm_handle_t handle = create();
  ASSERT_TRUE(ok(sim().vmm_map(va, granule, handle)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_free(va, 2 * granule))) << "still mapped";
  ASSERT_TRUE(ok(sim().vmm_unmap(va, granule)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_free(va, granule))) << "part of it";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_free(at(va, granule), granule))) << "interior";
  EXPECT_TRUE(ok(sim().vmm_free(va, 2 * granule)));
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_free(va, 2 * granule))) << "freed twice";
  EXPECT_TRUE(fails(status::invalid_value, sim().vmm_map(va, granule, handle))) << "no reservation any more";
  EXPECT_TRUE(ok(sim().vmm_release(handle)));
}

}  // namespace
}  // namespace streampool::testing
