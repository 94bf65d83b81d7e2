// sim_contents_test.cpp — the sim driver's model of memory contents that checking mode relies on
// (Note [Sim memory contents]): memset_async and write_bytes set bytes, read_bytes and
// check_bytes see them, ranges must be device memory of the right device, check_bytes waits for
// its stream and refuses a capturing one, and both calls are counted and can be failed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "driver/sim/sim_contents.hpp"
#include "driver_test_support.hpp"
#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::testing {
namespace {

class sim_contents : public ::testing::Test {
 protected:
  sim_contents() : sim_(make_options()) {
    check(sim_, sim_.malloc(0, 4096, &block_), "malloc");
    check(sim_, sim_.stream_create(0, &stream_), "stream_create");
  }
  static sim_options make_options() { return lazy_two_devices(); }
  std::uint8_t* at(std::size_t offset) { return static_cast<std::uint8_t*>(block_) + offset; }

  sim_driver sim_;
  void* block_ = nullptr;
  stream_t stream_ = nullptr;
};

TEST_F(sim_contents, UnwrittenBytesReadZero) {
  EXPECT_EQ(sim_.read_bytes(block_, 16), std::vector<std::uint8_t>(16, 0));
}

TEST_F(sim_contents, MemsetAndWritesOverlayEachOther) {
  check(sim_, sim_.memset_async(0, at(100), 0xAB, 200, stream_), "memset_async");
  const std::uint8_t planted[3] = {1, 2, 3};
  sim_.write_bytes(at(150), planted, 3);
  check(sim_, sim_.memset_async(0, at(250), 0xCD, 100, stream_), "memset_async");
  const std::vector<std::uint8_t> got = sim_.read_bytes(at(98), 260);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::size_t offset = 98 + i;
    std::uint8_t want = 0;
    if (offset >= 100 && offset < 250) want = 0xAB;
    if (offset >= 150 && offset < 153) want = static_cast<std::uint8_t>(offset - 149);
    if (offset >= 250 && offset < 350) want = 0xCD;
    EXPECT_EQ(got[i], want) << "offset " << offset;
  }
  // One memset over everything leaves one value.
  check(sim_, sim_.memset_async(0, block_, 0xFF, 4096, stream_), "memset_async");
  EXPECT_EQ(sim_.read_bytes(block_, 4096), std::vector<std::uint8_t>(4096, 0xFF));
}

TEST_F(sim_contents, CheckBytesCountsMismatchesAndNamesTheFirst) {
  check(sim_, sim_.memset_async(0, block_, 0xFD, 512, stream_), "memset_async");
  byte_check found;
  check(sim_, sim_.check_bytes(0, block_, 512, 0xFD, stream_, &found), "check_bytes");
  EXPECT_EQ(found.mismatches, 0u);
  const std::uint8_t stray[2] = {0x00, 0x7E};
  sim_.write_bytes(at(40), stray, 2);
  sim_.write_bytes(at(300), stray + 1, 1);
  check(sim_, sim_.check_bytes(0, block_, 512, 0xFD, stream_, &found), "check_bytes");
  EXPECT_EQ(found.mismatches, 3u);
  EXPECT_EQ(found.first_offset, 40u);
  EXPECT_EQ(found.first_value, 0x00);
  // Bytes past the memset were never written: they read 0 and count.
  check(sim_, sim_.check_bytes(0, at(500), 20, 0xFD, stream_, &found), "check_bytes");
  EXPECT_EQ(found.mismatches, 8u);
  EXPECT_EQ(found.first_offset, 12u);
}

TEST_F(sim_contents, CheckBytesWaitsForItsStream) {
  event_t event = nullptr;
  check(sim_, sim_.event_create(0, &event), "event_create");
  check(sim_, sim_.event_record(event, stream_), "event_record");
  ASSERT_EQ(sim_.event_query(event).code, status::not_ready);
  byte_check found;
  check(sim_, sim_.check_bytes(0, block_, 8, 0, stream_, &found), "check_bytes");
  EXPECT_EQ(sim_.event_query(event).code, status::ok);
  check(sim_, sim_.event_destroy(0, event), "event_destroy");
}

TEST_F(sim_contents, CheckBytesRefusesACapturingStream) {
  sim_.set_capture(stream_, capture_status::active, 5);
  byte_check found;
  EXPECT_EQ(sim_.check_bytes(0, block_, 8, 0, stream_, &found).code, status::illegal_in_capture);
  // memset_async is a stream operation: legal in capture.
  EXPECT_TRUE(sim_.memset_async(0, block_, 1, 8, stream_).ok());
  sim_.set_capture(stream_, capture_status::none, 0);
}

TEST_F(sim_contents, RangesMustBeDeviceMemoryOfTheDevice) {
  int host = 0;
  byte_check found;
  EXPECT_EQ(sim_.memset_async(0, &host, 0, 4, stream_).code, status::invalid_value);
  EXPECT_EQ(sim_.memset_async(0, at(4000), 0, 200, stream_).code, status::invalid_value);  // runs off the end
  EXPECT_EQ(sim_.memset_async(1, block_, 0, 4, nullptr).code, status::invalid_value);     // device 0's memory
  EXPECT_EQ(sim_.memset_async(1, block_, 0, 4, stream_).code, status::invalid_value);     // device 0's stream
  EXPECT_EQ(sim_.memset_async(5, block_, 0, 4, stream_).code, status::invalid_device);
  EXPECT_EQ(sim_.check_bytes(0, &host, 4, 0, stream_, &found).code, status::invalid_value);
  EXPECT_TRUE(sim_.memset_async(0, block_, 0, 0, stream_).ok());  // 0 bytes: nothing to do
  EXPECT_THROW(sim_.write_bytes(&host, &host, 4), error);
  EXPECT_THROW((void)sim_.read_bytes(at(4090), 100), error);
}

TEST_F(sim_contents, PoolAndVmmMemoryHoldContentsToo) {
  mempool_t pool = nullptr;
  check(sim_, sim_.pool_get_default(0, &pool), "pool_get_default");
  void* async_block = nullptr;
  check(sim_, sim_.malloc_async(pool, 1000, stream_, &async_block), "malloc_async");
  check(sim_, sim_.memset_async(0, async_block, 0x21, 1000, stream_), "memset_async");
  EXPECT_EQ(sim_.read_bytes(async_block, 1000), std::vector<std::uint8_t>(1000, 0x21));
  check(sim_, sim_.free_async(async_block, stream_), "free_async");

  const std::size_t page = sim_.options().vmm_granularity;
  void* va = nullptr;
  vmm_handle_t handle = 0;
  check(sim_, sim_.vmm_reserve(0, 4 * page, page, &va), "vmm_reserve");
  check(sim_, sim_.vmm_create(0, page, &handle), "vmm_create");
  check(sim_, sim_.vmm_map(va, page, handle), "vmm_map");
  EXPECT_TRUE(sim_.memset_async(0, va, 0x42, page, stream_).ok());
  EXPECT_EQ(sim_.memset_async(0, va, 0x42, page + 1, stream_).code, status::invalid_value);  // unmapped
  EXPECT_EQ(sim_.read_bytes(static_cast<std::uint8_t*>(va) + page - 2, 2), std::vector<std::uint8_t>(2, 0x42));
  check(sim_, sim_.vmm_unmap(va, page), "vmm_unmap");
  check(sim_, sim_.vmm_release(handle), "vmm_release");
  check(sim_, sim_.vmm_free(va, 4 * page), "vmm_free");
}

TEST_F(sim_contents, CallsAreCountedAndCanBeFailed) {
  sim_.reset_counters();
  byte_check found;
  sim_.fail_next(driver_call::memset_async, 1, status::other);
  EXPECT_EQ(sim_.memset_async(0, block_, 7, 8, stream_).code, status::other);
  EXPECT_EQ(sim_.read_bytes(block_, 1)[0], 0);  // a failed call does nothing
  sim_.fail_next(driver_call::check_bytes, 1, status::out_of_memory);
  EXPECT_EQ(sim_.check_bytes(0, block_, 8, 0, stream_, &found).code, status::out_of_memory);
  EXPECT_EQ(sim_.calls(driver_call::memset_async), 1u);
  EXPECT_EQ(sim_.calls(driver_call::check_bytes), 1u);
  EXPECT_EQ(to_string(driver_call::memset_async), "memset_async");
  EXPECT_EQ(to_string(driver_call::check_bytes), "check_bytes");
}

TEST_F(sim_contents, DriversWithoutTheCallsInheritNotSupported) {
  // A driver written before the checking-mode calls inherits the base class's defaults, reached
  // here through a qualified call.
  byte_check found;
  found.mismatches = 9;
  EXPECT_EQ(sim_.driver::memset_async(0, block_, 0, 1, stream_).code, status::not_supported);
  EXPECT_EQ(sim_.driver::check_bytes(0, block_, 1, 0, stream_, &found).code, status::not_supported);
  EXPECT_EQ(found.mismatches, 0u);
}

// Note [Sim literal runs]: varied bytes are one literal run however many values they hold, and
// overwriting part of it keeps the rest byte for byte.
TEST(sim_contents_map, VariedBytesAreOneLiteralRunThatSplitsByteForByte) {
  sim::contents_map map;
  std::vector<std::uint8_t> data(1 << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7 + (i >> 9));
  const std::uintptr_t base = 0x10000;
  map.write(base, data.data(), data.size());
  EXPECT_EQ(map.run_count(), 1u);
  map.write(base + 1000, 24, 0xEE);  // a fill in the middle: head, fill, tail
  EXPECT_EQ(map.run_count(), 3u);
  const std::uint8_t two[2] = {9, 9};
  map.write(base - 1, two, 2);  // equal bytes are a plain run, over the literal's first byte
  for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{999}, std::size_t{1000}, std::size_t{1023},
                        std::size_t{1024}, data.size() - 1}) {
    std::uint8_t want = data[i];
    if (i == 0) want = 9;
    if (i >= 1000 && i < 1024) want = 0xEE;
    EXPECT_EQ(map.read(base + i), want) << "offset " << i;
  }
  EXPECT_EQ(map.read(base - 1), 9);
  EXPECT_EQ(map.read(base + data.size()), 0);
  std::vector<std::uint8_t> seen(data.size() + 2, 0x55);
  map.for_each_run(base - 1, seen.size(), [&](std::size_t offset, std::size_t length, std::uint8_t value,
                                                const std::uint8_t* literal) {
    for (std::size_t i = 0; i < length; ++i) seen[offset + i] = literal ? literal[i] : value;
  });
  for (std::size_t i = 1; i + 1 < seen.size(); ++i) EXPECT_EQ(seen[i], map.read(base - 1 + i)) << "offset " << i;
  EXPECT_EQ(seen.back(), 0);  // past the literal: never written
}

TEST_F(sim_contents, CopiesAndWritesOfVariedBytesRoundTrip) {
  std::vector<std::uint8_t> data(4096);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 31);
  sim_.write_bytes(block_, data.data(), data.size());
  EXPECT_EQ(sim_.read_bytes(block_, data.size()), data);
  byte_check found;
  check(sim_, sim_.check_bytes(0, at(1), 64, 31, stream_, &found), "check_bytes");
  EXPECT_EQ(found.mismatches, 63u);  // only offset 1 holds 31
  EXPECT_EQ(found.first_offset, 1u);
  EXPECT_EQ(found.first_value, 62);

  void* host = nullptr;
  check(sim_, sim_.host_alloc(4096, &host), "host_alloc");
  std::vector<std::uint8_t> reversed(data.rbegin(), data.rend());
  std::memcpy(host, reversed.data(), reversed.size());
  check(sim_, sim_.memcpy_async(block_, host, 4096, stream_), "memcpy_async to the device");
  EXPECT_EQ(sim_.read_bytes(block_, 4096), reversed);
  std::memset(host, 0, 4096);
  check(sim_, sim_.memcpy_async(host, at(10), 100, stream_), "memcpy_async to the host");
  EXPECT_EQ(std::vector<std::uint8_t>(static_cast<std::uint8_t*>(host), static_cast<std::uint8_t*>(host) + 100),
            std::vector<std::uint8_t>(reversed.begin() + 10, reversed.begin() + 110));
  check(sim_, sim_.host_free(host), "host_free");
}

}  // namespace
}  // namespace streampool::testing
