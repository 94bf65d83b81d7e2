// expandable_segments_test.cpp — expandable segments (docs/pytorch-compatibility.md §2.13) on a real GPU through the CUDA
// VMM calls: growth in place keeps the data written before it, empty_cache unmaps free pages and
// the memory is reusable afterwards, an allocation larger than any free run succeeds once free
// pages are unmapped and remapped (a small device made with set_memory_fraction), and a replay of
// the trace in tests/data whose peak reserved must equal the sim driver's prediction within a
// page per pool. Skips (with the reason) without a device or without VMM.
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "streampool/replay.hpp"
#include "streampool_kernels.hpp"
#include "support/backend_fixture.hpp"
#include "support/kernel_ok.hpp"

namespace streampool::testing {
namespace {

std::int64_t i64(std::size_t v) { return static_cast<std::int64_t>(v); }

class gpu_expandable : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = make_cuda_driver();
    const std::string reason = real_device_unavailable_reason(*driver_);
    if (!reason.empty()) GTEST_SKIP() << reason;
    check(*driver_, driver_->get_device_info(0, &info_), "get_device_info");
    if (!info_.vmm_supported) GTEST_SKIP() << "device 0 has no virtual memory management";
    check(*driver_, driver_->set_device(0), "set_device");
    const std::size_t unit = std::lcm(info_.vmm_granularity, 2 * mib);
    page_ = (20 * mib + unit - 1) / unit * unit;  // large page: large_segment_size rounded up
    alloc_ = make_allocator(parse_config("expandable_segments:True"), driver_);
    check(*driver_, driver_->stream_create(0, &stream_), "stream_create");
  }
  void TearDown() override {
    alloc_.reset();
    if (stream_ != nullptr) (void)driver_->stream_destroy(0, stream_);
  }
  void fill(void* p, std::size_t bytes, std::uint32_t seed) {
    KERNEL_OK(kernels::fill_pattern(p, bytes, seed, stream_));
  }
  std::uint64_t mismatches(const void* p, std::size_t bytes, std::uint32_t seed) {
    std::uint64_t bad = ~std::uint64_t{0};
    const int code = kernels::count_mismatches(p, bytes, seed, stream_, &bad);
    EXPECT_EQ(code, 0) << kernels::error_text(code);
    return bad;
  }

  std::shared_ptr<driver> driver_;
  device_info info_;
  std::size_t page_ = 20 * mib;
  std::unique_ptr<allocator> alloc_;
  stream_t stream_ = nullptr;
};

TEST_F(gpu_expandable, DataWrittenBeforeAGrowSurvivesIt) {
  void* a = alloc_->allocate(page_ + page_ / 2, stream_);  // two pages, the second half used
  fill(a, page_ + page_ / 2, 1);
  std::vector<std::pair<void*, std::uint32_t>> grown;
  for (std::uint32_t i = 0; i < 8; ++i) {  // each one grows the same range in place
    void* p = alloc_->allocate(page_, stream_);
    fill(p, page_, 100 + i);
    grown.emplace_back(p, 100 + i);
  }
  EXPECT_EQ(static_cast<char*>(grown[0].first), static_cast<char*>(a) + page_ + page_ / 2) << "contiguous";
  EXPECT_EQ(mismatches(a, page_ + page_ / 2, 1), 0u);
  for (const auto& [p, seed] : grown) EXPECT_EQ(mismatches(p, page_, seed), 0u);
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.reserved_bytes[0].current, i64(10 * page_));
  EXPECT_EQ(s.segment[0].current, 0);
  EXPECT_GE(s.num_device_alloc, 2);
  for (const auto& [p, seed] : grown) alloc_->deallocate(p);
  alloc_->deallocate(a);
}

TEST_F(gpu_expandable, EmptyCacheUnmapsAndMemoryIsReusedAfterwards) {
  void* a = alloc_->allocate(3 * page_, stream_);
  void* keep = alloc_->allocate(page_ / 2, stream_);
  fill(keep, page_ / 2, 7);
  alloc_->deallocate(a);
  alloc_->empty_cache();
  memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.reserved_bytes[0].current, i64(page_)) << "only the page holding `keep` stays mapped";
  EXPECT_GE(s.num_device_free, 1);
  EXPECT_EQ(mismatches(keep, page_ / 2, 7), 0u) << "unmapping the free pages left the live block alone";
  void* b = alloc_->allocate(3 * page_, stream_);  // maps the hole again
  EXPECT_EQ(b, a);
  fill(b, 3 * page_, 8);
  EXPECT_EQ(mismatches(b, 3 * page_, 8), 0u);
  EXPECT_EQ(mismatches(keep, page_ / 2, 7), 0u);
  alloc_->deallocate(b);
  alloc_->deallocate(keep);
  alloc_->empty_cache();
  s = alloc_->stats(0);
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_TRUE(alloc_->snapshot().segments.empty());
}

/// On a device made "small" (about 5 pages allowed): A, B, C carved from a freed 3-page block, D
/// = 2 pages; B and D freed; E = 2.5 pages. Normal segments: out of memory (B is inside a split
/// segment). Expandable: release-all unmaps B's and D's pages and E is mapped after C.
TEST_F(gpu_expandable, AllocationLargerThanAnyFreeRunSucceedsAfterUnmapping) {
  const double fraction = static_cast<double>(5 * page_ + mib) / static_cast<double>(info_.total_memory);
  for (const bool expandable : {false, true}) {
    auto alloc = make_allocator(parse_config(expandable ? "expandable_segments:True" : ""), driver_);
    alloc->set_memory_fraction(fraction, 0);
    alloc->deallocate(alloc->allocate(3 * page_, stream_));
    void* a = alloc->allocate(page_, stream_);
    void* b = alloc->allocate(page_, stream_);
    void* c = alloc->allocate(page_, stream_);
    void* d = alloc->allocate(2 * page_, stream_);
    fill(a, page_, 21);
    fill(c, page_, 23);
    alloc->deallocate(b);
    alloc->deallocate(d);
    if (!expandable) {
      EXPECT_THROW((void)alloc->allocate(2 * page_ + page_ / 2, stream_), out_of_memory);
    } else {
      void* e = alloc->allocate(2 * page_ + page_ / 2, stream_);
      EXPECT_EQ(static_cast<char*>(e), static_cast<char*>(c) + page_);
      fill(e, 2 * page_ + page_ / 2, 25);
      EXPECT_EQ(mismatches(e, 2 * page_ + page_ / 2, 25), 0u);
      EXPECT_EQ(alloc->stats(0).num_alloc_retries, 1);
      alloc->deallocate(e);
    }
    EXPECT_EQ(mismatches(a, page_, 21), 0u);
    EXPECT_EQ(mismatches(c, page_, 23), 0u);
    alloc->deallocate(a);
    alloc->deallocate(c);
  }
}

TEST_F(gpu_expandable, TraceReplayReservesWhatTheSimPredicts) {
  const std::vector<trace_event> events =
      read_trace(std::string(STREAMPOOL_TEST_DATA_DIR) + "/encoder_varlen.trace.csv.gz");
  const replay_result real = replay_trace(*alloc_, events);  // empties the cache (its own streams)

  sim_options o;
  o.capacity = info_.total_memory;
  o.vmm_granularity = info_.vmm_granularity;
  auto sim = std::make_shared<sim_driver>(o);
  auto predicted_alloc = make_allocator(parse_config("expandable_segments:True"), sim);
  replay_options options;
  options.sim = sim.get();
  const replay_result predicted = replay_trace(*predicted_alloc, events, options);

  const double mib_d = static_cast<double>(mib);
  std::printf("encoder_varlen, expandable_segments:True: real driver peak reserved %.1f MiB (allocated %.1f MiB, "
              "%lld maps, %.2f s); sim driver %.1f MiB (allocated %.1f MiB, %lld maps)\n",
              static_cast<double>(real.peak_reserved) / mib_d, static_cast<double>(real.peak_allocated) / mib_d,
              static_cast<long long>(real.device_mallocs), real.seconds,
              static_cast<double>(predicted.peak_reserved) / mib_d,
              static_cast<double>(predicted.peak_allocated) / mib_d, static_cast<long long>(predicted.device_mallocs));
  const auto diff = static_cast<std::int64_t>(real.peak_reserved) - static_cast<std::int64_t>(predicted.peak_reserved);
  EXPECT_LE(diff < 0 ? -diff : diff, i64(page_ + 2 * mib)) << "within one page per pool of the sim's figure";
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats(0).reserved_bytes[0].current, 0);
}

}  // namespace
}  // namespace streampool::testing
