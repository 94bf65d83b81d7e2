// The data structures under the allocator, checked against simple references with random
// operations: the free lists (best fit = smallest size, then lowest address) and the segment map.
// The per-arena block map is core's address_table (tests/unit/core/address_table_test.cpp).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "native/free_list.hpp"
#include "native/segment_map.hpp"
#include "support/test_seed.hpp"

namespace streampool::native {
namespace {

using streampool::testing::test_seed;

template <typename List, typename Find>
void check_against_set(List& list, std::size_t max_size, Find find, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<block> storage(2000);
  std::set<std::pair<std::size_t, std::uintptr_t>> ref;
  std::vector<std::size_t> in;  // indices of storage in the list
  for (std::size_t i = 0; i < storage.size(); ++i) {
    storage[i].ptr = 0x10000000 + i * 4096 * 1024;
    storage[i].size = (rng() % (max_size / 512) + 1) * 512;
  }
  std::vector<std::size_t> out(storage.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = i;
  for (int step = 0; step < 20000; ++step) {
    if (!out.empty() && (in.empty() || rng() % 2 == 0)) {
      const std::size_t k = rng() % out.size();
      block& b = storage[out[k]];
      list.insert(&b);
      ref.insert({b.size, b.ptr});
      in.push_back(out[k]);
      out[k] = out.back();
      out.pop_back();
    } else {
      const std::size_t k = rng() % in.size();
      block& b = storage[in[k]];
      list.erase(&b);
      ref.erase({b.size, b.ptr});
      out.push_back(in[k]);
      in[k] = in.back();
      in.pop_back();
    }
    const std::size_t want = (rng() % (max_size / 512) + 1) * 512;
    const block* got = find(list, want);
    const auto it = ref.lower_bound({want, 0});
    if (it == ref.end()) {
      ASSERT_EQ(got, nullptr) << "step " << step;
    } else {
      ASSERT_NE(got, nullptr) << "step " << step;
      ASSERT_EQ(got->size, it->first) << "step " << step;
      ASSERT_EQ(got->ptr, it->second) << "step " << step;
    }
    if (!ref.empty()) {
      ASSERT_EQ(list.largest()->size, ref.rbegin()->first);
    }
  }
}

TEST(free_lists, SmallBinsGiveBestFitLowestAddress) {
  auto list = std::make_unique<small_free_list>();
  check_against_set(*list, small_buffer, [](const small_free_list& l, std::size_t s) { return l.find(s); },
                    test_seed());
}

TEST(free_lists, LargeTreeGivesBestFitLowestAddress) {
  const allocator_config config;
  const size_policy policy(config);
  large_free_list list;
  check_against_set(list, 256 * mib, [&](const large_free_list& l, std::size_t s) { return l.find(s, policy); },
                    test_seed());
}

TEST(free_lists, ForEachIsInOrder) {
  large_free_list list;
  std::vector<block> blocks(5);
  const std::size_t sizes[] = {5, 3, 5, 1, 4};
  for (std::size_t i = 0; i < 5; ++i) {
    blocks[i].ptr = 0x1000 * (5 - i);
    blocks[i].size = sizes[i] * mib;
    list.insert(&blocks[i]);
  }
  std::vector<std::pair<std::size_t, std::uintptr_t>> seen;
  list.for_each([&](block* b) { seen.emplace_back(b->size, b->ptr); });
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

TEST(segment_map, FindsOwnerIncludingSharedGranules) {
  segment_map map;
  auto* a = reinterpret_cast<stream_arena*>(std::uintptr_t{0x1000});
  auto* b = reinterpret_cast<stream_arena*>(std::uintptr_t{0x2000});
  auto* c = reinterpret_cast<stream_arena*>(std::uintptr_t{0x3000});
  const std::uintptr_t base = std::uintptr_t{1} << 52;
  // a: [base + 512, +2 MiB) starts inside granule 0; b follows at once and is 20 MiB; c is far away.
  map.insert(base + 512, 2 * mib, a);
  map.insert(base + 512 + 2 * mib, 20 * mib, b);
  map.insert(std::uintptr_t{3} << 40, 4 * mib, c);
  EXPECT_EQ(map.find(base), nullptr) << "below a";
  EXPECT_EQ(map.find(base + 512), a);
  EXPECT_EQ(map.find(base + 2 * mib + 511), a) << "a's last byte, in the granule b starts in";
  EXPECT_EQ(map.find(base + 2 * mib + 512), b);
  EXPECT_EQ(map.find(base + 22 * mib + 511), b);
  // Past b's end but in its last granule: still b (a granule records no segment end); harmless,
  // since the arena's block map then finds no live block there.
  EXPECT_EQ(map.find(base + 22 * mib + 512), b);
  EXPECT_EQ(map.find(base + 24 * mib), nullptr);
  EXPECT_EQ(map.find((std::uintptr_t{3} << 40) + 3 * mib), c);
  map.erase(base + 512, 2 * mib);
  EXPECT_EQ(map.find(base + 512), nullptr);
  EXPECT_EQ(map.find(base + 2 * mib + 512), b) << "b unaffected";
  map.erase(base + 512 + 2 * mib, 20 * mib);
  EXPECT_EQ(map.find(base + 10 * mib), nullptr);
  EXPECT_EQ(map.find(std::uintptr_t{1} << 20), nullptr) << "never-used part of the tree";
}

}  // namespace
}  // namespace streampool::native
