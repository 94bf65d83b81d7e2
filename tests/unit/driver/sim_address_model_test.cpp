// sim_address_model_test.cpp — the sim's cudaMalloc address assignment against the real
// driver: replays the cudaMalloc/cudaFree sequences measured on an H200 (tests/data/driver/
// address_probe, README there) and expects every address at the measured distance from the
// first; then one test per rule of Note [Sim address assignment] (src/driver/sim/sim_malloc_space.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "driver_test_support.hpp"

namespace streampool::testing {
namespace {

struct probe_op {
  bool malloc = true;
  std::size_t value = 0;  ///< bytes for a malloc, allocation id for a free
};

std::string probe_path(const std::string& name, const char* extension) {
  return std::string(STREAMPOOL_TEST_DATA_DIR) + "/driver/address_probe/" + name + extension;
}

std::vector<probe_op> read_ops(const std::string& name) {
  std::ifstream in(probe_path(name, ".ops"));
  EXPECT_TRUE(in.good()) << probe_path(name, ".ops") << " is missing";
  std::vector<probe_op> ops;
  std::string op;
  std::size_t value = 0;
  while (in >> op >> value) {
    EXPECT_TRUE(op == "m" || op == "f") << name << ".ops: bad operation '" << op << "'";
    ops.push_back({op == "m", value});
  }
  return ops;
}

/// The probe's output: per malloc, its size and its offset from the first malloc's address.
struct measured {
  std::size_t bytes = 0;
  long long offset = 0;
};

std::vector<measured> read_output(const std::string& name) {
  std::ifstream in(probe_path(name, ".out"));
  EXPECT_TRUE(in.good()) << probe_path(name, ".out") << " is missing";
  std::vector<measured> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::size_t id = 0;
    std::uintmax_t absolute = 0;
    measured row;
    if (!(fields >> id >> row.bytes >> absolute >> row.offset) || id != rows.size()) {
      ADD_FAILURE() << name << ".out: bad line " << rows.size() + 1 << ": " << line;
      break;
    }
    rows.push_back(row);
  }
  return rows;
}

class address_probe : public ::testing::TestWithParam<const char*> {};

TEST_P(address_probe, SimPlacesEveryMallocWhereTheH200Did) {
  const std::string name = GetParam();
  const std::vector<probe_op> ops = read_ops(name);
  const std::vector<measured> real = read_output(name);
  ASSERT_FALSE(ops.empty());
  sim_options options;
  options.capacity = 141 * gib;  // an H200
  sim_driver sim(options);
  std::vector<void*> pointers;
  std::uintptr_t first = 0;
  std::size_t mismatches = 0;
  for (const probe_op& op : ops) {
    if (!op.malloc) {
      ASSERT_LT(op.value, pointers.size()) << name << ": free of an id not yet allocated";
      ASSERT_TRUE(succeeded(sim, sim.free(0, pointers[op.value])));
      continue;
    }
    const std::size_t id = pointers.size();
    ASSERT_LT(id, real.size()) << name << ": more mallocs than measured addresses";
    ASSERT_EQ(real[id].bytes, op.value) << name << ": the .ops and .out files disagree at malloc " << id;
    void* ptr = nullptr;
    ASSERT_TRUE(succeeded(sim, sim.malloc(0, op.value, &ptr)));
    if (id == 0) {
      first = address(ptr);
    }
    const long long offset = static_cast<long long>(address(ptr) - first);
    if (offset != real[id].offset && ++mismatches <= 5) {
      ADD_FAILURE() << name << ": malloc " << id << " of " << op.value / mib << " MiB at " << offset / (1 << 20)
                    << " MiB from the first; the H200 put it at " << real[id].offset / (1 << 20) << " MiB";
    }
    pointers.push_back(ptr);
  }
  EXPECT_EQ(pointers.size(), real.size());
  EXPECT_EQ(mismatches, 0u) << name << ": mallocs placed elsewhere than on the H200";
}

INSTANTIATE_TEST_SUITE_P(h200, address_probe,
                         ::testing::Values("synthetic1", "synthetic2", "random3", "encoder_segments"),
                         [](const ::testing::TestParamInfo<const char*>& test) { return std::string(test.param); });

// The rules one at a time. Sizes above 24 MiB keep clear of the context's free ranges.
class sim_address_rules : public sim_test {
 protected:
  std::uintptr_t take(std::size_t bytes) {
    void* ptr = nullptr;
    EXPECT_TRUE(ok(sim().malloc(0, bytes, &ptr)));
    return address(ptr);
  }
  void give(std::uintptr_t at) { EXPECT_TRUE(ok(sim().free(0, reinterpret_cast<void*>(at)))); }
};

TEST_F(sim_address_rules, ChunksAre32MiBMultiplesPlacedDownward) {
  const std::uintptr_t a = take(40 * mib);  // reserves 64 MiB
  const std::uintptr_t b = take(66 * mib);  // reserves 96 MiB, just below
  const std::uintptr_t c = take(32 * mib);
  EXPECT_EQ(a - b, 96 * mib);
  EXPECT_EQ(b - c, 32 * mib);
  EXPECT_EQ(take(24 * mib), b + 66 * mib) << "the newest chunk with room (c's is full), not a new one";
  EXPECT_EQ(take(24 * mib), a + 40 * mib) << "then the next newest";
}

TEST_F(sim_address_rules, NewestChunkFirstThenBestFitInsideIt) {
  const std::uintptr_t older = take(52 * mib);  // 12 MiB left in its chunk
  const std::uintptr_t newer = take(40 * mib);  // 24 MiB left in its chunk
  EXPECT_EQ(take(12 * mib), newer + 40 * mib) << "the newer chunk, though the older one fits exactly";
  // The newer chunk now has [newer + 52, newer + 64): free `newer` to add [newer, newer + 40).
  give(newer);
  EXPECT_EQ(take(10 * mib), newer + 52 * mib) << "best fit inside the chunk, not the lowest address";
  EXPECT_EQ(take(2 * mib), newer + 62 * mib);
  EXPECT_EQ(take(2 * mib), newer) << "the chunk's only free range left";
  EXPECT_EQ(take(12 * mib), newer + 2 * mib);
  EXPECT_EQ(take(26 * mib), newer + 14 * mib);
  EXPECT_EQ(take(12 * mib), older + 52 * mib) << "the newer chunk is full: the older one";
}

TEST_F(sim_address_rules, EmptyChunksAreReleasedAndExactFitsPassedOver) {
  const std::uintptr_t a = take(64 * mib);
  const std::uintptr_t b = take(64 * mib);
  const std::uintptr_t c = take(64 * mib);
  give(b);  // leaves a hole of exactly 64 MiB between a and c
  EXPECT_EQ(take(64 * mib), c - 64 * mib) << "a hole of exactly the chunk's size is passed over";
  EXPECT_EQ(take(32 * mib), b + 32 * mib) << "a smaller chunk goes at the top of the hole";
  give(a);
  give(c);
  EXPECT_EQ(take(64 * mib), c + 32 * mib) << "released chunks merge: the new chunk spans c's range and b's";
}

TEST_F(sim_address_rules, TheContextsFreeRangesFillWhenNoChunkHasRoom) {
  const std::uintptr_t top_hole = take(20 * mib);  // no chunk yet: the context's 24 MiB range
  const std::uintptr_t small_hole = take(2 * mib);  // best fit: the context's 2 MiB range
  EXPECT_EQ(top_hole - small_hole, 74 * mib);
  const std::uintptr_t chunk = take(6 * mib);  // 4 MiB left in the context: a new chunk
  EXPECT_EQ(top_hole - chunk, 520 * mib) << "below the context's 512 MiB";
  EXPECT_EQ(take(2 * mib), chunk + 6 * mib) << "the new chunk before the context's last 4 MiB";
}

}  // namespace
}  // namespace streampool::testing
