// async_pointer_map_test.cpp — the cudaMallocAsync backend's pointer map (sharded flat tables,
// Note [Sharded pointer map], Note [Address table]) against a std::map model under random churn:
// inserts, takes of present and absent pointers, restores, record_stream uses, growth far past
// a table's first size and the backward-shift deletion that keeps probe runs intact. The seed is
// printed; STREAMPOOL_TEST_SEED reproduces a run.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>

#include "async/pointer_map.hpp"
#include "support/test_seed.hpp"

namespace streampool::testing {
namespace {

void* address(std::uint64_t granule) { return reinterpret_cast<void*>(std::uintptr_t{1} << 40 | granule << 9); }

TEST(async_pointer_map, MatchesAModelUnderRandomChurn) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  async::pointer_map map;
  std::map<void*, std::size_t> model;  // pointer -> size
  // Granules from a small range, so that the same addresses come back (as the pool reuses them)
  // and many keys share a shard and collide in its table.
  std::uniform_int_distribution<std::uint64_t> granule(1, 4096);
  for (int step = 0; step < 200000; ++step) {
    void* ptr = address(granule(rng));
    const auto it = model.find(ptr);
    const int op = static_cast<int>(rng() % 4);
    if (op <= 1 && it == model.end()) {
      async::allocation_record record;
      record.size = 512 + rng() % 4096;
      record.stream = reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(step % 7 + 1));
      model.emplace(ptr, record.size);
      map.insert(ptr, std::move(record));
    } else if (op == 2) {
      std::optional<async::allocation_record> taken = map.take(ptr);
      ASSERT_EQ(taken.has_value(), it != model.end()) << "step " << step << ", seed " << seed;
      if (taken) {
        EXPECT_EQ(taken->size, it->second) << "step " << step << ", seed " << seed;
        if (rng() % 8 == 0) {
          map.restore(ptr, std::move(*taken));  // a free that failed: the record goes back
        } else {
          model.erase(it);
        }
      }
    } else {
      ASSERT_EQ(map.contains(ptr), it != model.end()) << "step " << step << ", seed " << seed;
    }
  }
  EXPECT_EQ(map.size(), model.size());
  // Everything left is found, with its size, and can be given a record_stream use.
  for (const auto& [ptr, size] : model) {
    EXPECT_EQ(map.add_stream_use(ptr, reinterpret_cast<stream_t>(std::uintptr_t{999})),
              async::stream_use_result::added);
    std::optional<async::allocation_record> taken = map.take(ptr);
    ASSERT_TRUE(taken.has_value()) << "seed " << seed;
    EXPECT_EQ(taken->size, size);
    ASSERT_EQ(taken->stream_uses.size(), 1u);
  }
  EXPECT_EQ(map.size(), 0u);
  EXPECT_FALSE(map.contains(address(1)));
}

TEST(async_pointer_map, LookupsByInteriorAddressAndByDevice) {
  async::pointer_map map;
  for (std::uint64_t i = 1; i <= 1000; ++i) {  // far past a shard table's first 16 slots
    async::allocation_record record;
    record.device = static_cast<int>(i % 2);
    record.size = 1024;
    map.insert(address(i * 4), std::move(record));
  }
  EXPECT_EQ(map.size(), 1000u);
  EXPECT_EQ(map.live_on(0).size(), 500u);
  EXPECT_EQ(map.live_on(1).size(), 500u);
  const auto inside = reinterpret_cast<std::uintptr_t>(address(40)) + 100;
  const auto hit = map.find_containing(inside);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->first, reinterpret_cast<std::uintptr_t>(address(40)));
  EXPECT_FALSE(map.find_containing(reinterpret_cast<std::uintptr_t>(address(41)) + 600).has_value());
  EXPECT_FALSE(map.take(address(41)).has_value());  // never inserted
  EXPECT_EQ(map.add_stream_use(address(41), nullptr), async::stream_use_result::unknown_pointer);
}

}  // namespace
}  // namespace streampool::testing
