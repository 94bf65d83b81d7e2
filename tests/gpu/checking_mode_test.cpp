// checking_mode_test.cpp — checking mode (debug_checks:True) on a real GPU, both backends: a
// kernel that writes past the requested size is reported when the block is freed, naming the
// allocation; a kernel that reads a freed block reads the poison (0xFF), where without checking
// mode it reads the old data; and a block still read by a record_stream'ed stream is checked and
// poisoned only after that stream's work. Skips (with the reason) without a device.
#include <optional>
#include <string>
#include <vector>

#include "check/check_layout.hpp"
#include "core/format.hpp"
#include "streampool_kernels.hpp"
#include "support/backend_fixture.hpp"
#include "support/kernel_ok.hpp"
#include "support/warnings_scope.hpp"

namespace streampool::testing {
namespace {

std::vector<std::string> overrun_reports() { return warnings_scope::containing("buffer overrun"); }

class gpu_checking : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    driver_ = make_cuda_driver();
    const std::string reason = real_device_unavailable_reason(*driver_);
    if (!reason.empty()) GTEST_SKIP() << reason;
    check(*driver_, driver_->set_device(0), "set_device");
    warnings_.emplace();
    build(true);
    a_ = new_stream();
    b_ = new_stream();
  }
  void TearDown() override {
    alloc_.reset();
    for (const stream_t s : streams_) (void)driver_->stream_destroy(0, s);
    warnings_.reset();
  }
  void build(bool checks) {
    alloc_.reset();
    alloc_ = make_allocator(parse_config("backend:" + GetParam() + (checks ? ",debug_checks:True" : "")), driver_);
  }
  stream_t new_stream() {
    stream_t s = nullptr;
    check(*driver_, driver_->stream_create(0, &s), "stream_create");
    streams_.push_back(s);
    return s;
  }
  /// Bytes of [ptr, ptr + bytes) that are not `value`, counted by the check kernel.
  std::size_t bytes_not(const void* ptr, std::size_t bytes, std::uint8_t value, stream_t stream) {
    byte_check found;
    check(*driver_, driver_->check_bytes(0, ptr, bytes, value, stream, &found), "check_bytes");
    return found.mismatches;
  }

  std::shared_ptr<driver> driver_;
  std::unique_ptr<allocator> alloc_;
  std::vector<stream_t> streams_;
  stream_t a_ = nullptr;
  stream_t b_ = nullptr;
  std::optional<warnings_scope> warnings_;  ///< collects checking mode's reports for the test
};

TEST_P(gpu_checking, KernelWritingExactlyTheRequestIsNotReported) {
  for (std::size_t size : {1ul, 448ul, 1000ul, 4096ul, 3ul * mib + 7}) {
    void* p = alloc_->allocate(size, a_);
    KERNEL_OK(kernels::fill_pattern(p, size, 7, a_));
    alloc_->deallocate(p);
  }
  EXPECT_TRUE(overrun_reports().empty()) << overrun_reports().front();
}

TEST_P(gpu_checking, KernelWritingPastTheEndIsReported) {
  void* keep = alloc_->allocate(100, a_);
  void* p = alloc_->allocate(1000, a_);
  KERNEL_OK(kernels::fill_pattern(p, 1000 + 5, 99, a_));  // five bytes too many
  alloc_->deallocate(p);
  const std::vector<std::string> reports = overrun_reports();
  ASSERT_EQ(reports.size(), 1u) << ::testing::PrintToString(warnings_scope::messages());
  const std::string& report = reports.front();
  EXPECT_NE(report.find("allocation #2 (1000 bytes requested at " + core::format_pointer(p)), std::string::npos)
      << report;
  EXPECT_NE(report.find("stream " + core::format_pointer(a_)), std::string::npos) << report;
  // fill_pattern(seed 99) writes 0x7c 0x02 0x67 0xea 0x4e at bytes 1000..1004: none is 0xFD.
  EXPECT_NE(report.find("5 of the 536 canary bytes"), std::string::npos) << report;
  EXPECT_NE(report.find("at byte 1000 (0 past the end) holds 0x7c instead of 0xfd"), std::string::npos) << report;
  alloc_->deallocate(keep);
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);  // freed all the same
}

TEST_P(gpu_checking, KernelReadingAFreedBlockReadsPoison) {
  constexpr std::size_t size = 1 * mib;
  void* out = alloc_->allocate(size, a_);
  void* p = alloc_->allocate(size, a_);
  KERNEL_OK(kernels::fill_pattern(p, size, 1234, a_));
  alloc_->deallocate(p);
  KERNEL_OK(kernels::delayed_copy(out, p, size, 0, a_));  // the bug: a read after free
  EXPECT_EQ(bytes_not(out, size, check_impl::poison_byte, a_), 0u) << "the read after free did not see poison";
  alloc_->deallocate(out);
  EXPECT_TRUE(overrun_reports().empty());
}

TEST_P(gpu_checking, WithoutChecksTheSameReadSeesStaleData) {
  build(false);
  constexpr std::size_t size = 1 * mib;
  void* out = alloc_->allocate(size, a_);
  void* p = alloc_->allocate(size, a_);
  KERNEL_OK(kernels::fill_pattern(p, size, 1234, a_));
  alloc_->deallocate(p);
  KERNEL_OK(kernels::delayed_copy(out, p, size, 0, a_));
  std::uint64_t bad = 0;
  KERNEL_OK(kernels::count_mismatches(out, size, 1234, a_, &bad));
  EXPECT_EQ(bad, 0u) << "expected the plausible stale data that checking mode replaces with poison";
  alloc_->deallocate(out);
}

TEST_P(gpu_checking, PoisonWaitsForARecordStreamedReader) {
  constexpr std::size_t size = 4 * mib;
  void* src = alloc_->allocate(size, a_);
  void* dst = alloc_->allocate(size, b_);
  KERNEL_OK(kernels::fill_pattern(src, size, 4321, a_));
  check(*driver_, driver_->stream_synchronize(0, a_), "stream_synchronize");
  // Stream b reads src after ~50 ms; src is freed (and poisoned) on a meanwhile.
  KERNEL_OK(kernels::delayed_copy(dst, src, size, 50000, b_));
  alloc_->record_stream(src, b_);
  alloc_->deallocate(src);
  std::uint64_t bad = 0;
  KERNEL_OK(kernels::count_mismatches(dst, size, 4321, b_, &bad));
  EXPECT_EQ(bad, 0u) << "the poison overwrote memory that stream b was still reading";
  alloc_->deallocate(dst);
  EXPECT_TRUE(overrun_reports().empty()) << overrun_reports().front();
}

std::string case_name(const ::testing::TestParamInfo<std::string>& param) {
  return param.param == "native" ? "native" : "async";
}

INSTANTIATE_TEST_SUITE_P(real_device, gpu_checking, ::testing::Values("native", "cudaMallocAsync"), case_name);

}  // namespace
}  // namespace streampool::testing
