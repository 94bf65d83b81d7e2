// checking_random_test.cpp — seeded random programs under checking mode, for both backends on a
// non-eager sim: allocations of sizes around the 512-byte boundaries on three streams, frees,
// record_stream, stream completion, empty_cache, and planted overruns of 1–64 bytes on about a
// fifth of the blocks. Exactly the overrun blocks are reported (by number), every freed block
// reads poison until it is handed out again, and at the end nothing is left.
#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "check/check_layout.hpp"
#include "check_test_support.hpp"

namespace streampool::testing {
namespace {

using checking_random = checking_test;

std::size_t random_size(std::mt19937& rng) {
  static constexpr std::size_t anchors[] = {1, 448, 512, 1024, 4096, 1u << 20, 2u << 20, 10u << 20};
  const std::size_t base = anchors[rng() % std::size(anchors)];
  const std::size_t jitter = rng() % 129;
  return rng() % 2 == 0 ? base + jitter : std::max<std::size_t>(1, base - std::min(base - 1, jitter));
}

TEST_P(checking_random, ReportsExactlyThePlantedOverrunsAndPoisonsEveryFree) {
  std::size_t total_planted = 0;
  std::size_t total_frees = 0;
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    build("debug_checks:True");
    warnings_scope::messages().clear();
    std::mt19937 rng(seed);
    const stream_t streams[3] = {new_stream(), new_stream(), new_stream()};
    struct live_block {
      std::size_t size;
      std::uint64_t serial;
      bool overrun;
    };
    std::map<void*, live_block> live;
    std::set<std::uint64_t> planted;
    std::uint64_t serial = 0;
    for (int step = 0; step < 300; ++step) {
      const unsigned op = rng() % 10;
      if (op < 5 || live.empty()) {
        const std::size_t size = random_size(rng);
        void* p = alloc_->allocate(size, streams[rng() % 3]);
        ASSERT_FALSE(live.count(p));
        write(p, 0, std::min<std::size_t>(size, 64), 0x11);  // the program writes its data...
        live_block block{size, ++serial, rng() % 5 == 0};
        if (block.overrun) {  // ...and sometimes 1 to 64 bytes too many
          write(p, size, 1 + rng() % 64, static_cast<std::uint8_t>(rng() % 0xFD));
          planted.insert(block.serial);
        }
        live.emplace(p, block);
      } else if (op < 8) {
        auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
        void* p = it->first;
        const std::size_t padded = check_impl::padded_size(it->second.size);
        live.erase(it);
        alloc_->deallocate(p);
        ++total_frees;
        // The head and the tail of the block (canary included) read poison; the middle of a
        // large block is one memset run as well, and reading megabytes would only cost time.
        const std::size_t probe = std::min<std::size_t>(padded, 4096);
        for (const std::size_t offset : {std::size_t{0}, padded - probe}) {
          const std::vector<std::uint8_t> after = read(static_cast<std::uint8_t*>(p) + offset, probe);
          ASSERT_TRUE(std::all_of(after.begin(), after.end(), [](std::uint8_t b) { return b == check_impl::poison_byte; }))
              << "step " << step << ", offset " << offset;
        }
      } else if (op == 8) {
        auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
        alloc_->record_stream(it->first, streams[rng() % 3]);
      } else if (rng() % 4 == 0) {
        alloc_->empty_cache();
      } else {
        sim_->complete(streams[rng() % 3]);
      }
    }
    for (const auto& [p, block] : live) alloc_->deallocate(p);
    std::set<std::uint64_t> reported;
    for (const std::string& message : warnings_scope::containing("buffer overrun")) {
      const std::size_t at = message.find("allocation #") + 12;
      reported.insert(std::stoull(message.substr(at)));
    }
    EXPECT_EQ(reported, planted);
    total_planted += planted.size();
    EXPECT_EQ(warnings_scope::containing("buffer overrun").size(), planted.size());
    EXPECT_EQ(warnings_scope::messages().size(), planted.size()) << ::testing::PrintToString(warnings_scope::messages());
    expect_nothing_left();
  }
  EXPECT_GT(total_planted, 100u);  // the programs really plant bugs (654 per backend)...
  EXPECT_GT(total_frees, 1000u);   // ...and free blocks mid-run (1 748)
}

INSTANTIATE_TEST_SUITE_P(backends, checking_random, ::testing::ValuesIn(check_cases()), check_case_name);

}  // namespace
}  // namespace streampool::testing
