// Bad input (bad input never corrupts state: docs/reliability.md): each case throws a clear error and leaves
// every statistic and the snapshot unchanged; the allocator keeps working afterwards.
#include <gtest/gtest.h>

#include <string>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  } catch (const out_of_memory& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return {};
}

struct bad_input : ::testing::Test {
  native_env env;
  void* live = nullptr;
  void* freed = nullptr;
  std::map<std::string, std::int64_t> stats_before;
  std::size_t segments_before = 0;

  void SetUp() override {
    live = env.alloc->allocate(4096);
    freed = env.alloc->allocate(8192);
    env.alloc->deallocate(freed);
    stats_before = env.stats().to_map();
    segments_before = env.segments()[0].blocks.size();
  }
  void TearDown() override {
    EXPECT_EQ(env.stats().to_map(), stats_before) << "state changed";
    EXPECT_EQ(env.segments()[0].blocks.size(), segments_before);
    env.alloc->deallocate(live);  // still works
    void* again = env.alloc->allocate(4096);
    EXPECT_NE(again, nullptr);
    env.alloc->deallocate(again);
  }
};

TEST_F(bad_input, DoubleFree) {
  const std::string what = error_of([&] { env.alloc->deallocate(freed); });
  EXPECT_NE(what.find("already freed"), std::string::npos) << what;
  EXPECT_NE(what.find("double free"), std::string::npos) << what;
}

TEST_F(bad_input, UnknownPointer) {
  int host = 0;
  const std::string what = error_of([&] { env.alloc->deallocate(&host); });
  EXPECT_NE(what.find("invalid device pointer"), std::string::npos) << what;
  EXPECT_NE(what.find("not returned by allocate()"), std::string::npos) << what;
}

TEST_F(bad_input, DoubleFreeOfAMergedBlock) {
  void* a = env.alloc->allocate(4096);
  void* b = env.alloc->allocate(4096);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);  // merges into a's free block (and the tail)
  const std::string what = error_of([&] { env.alloc->deallocate(b); });
  EXPECT_NE(what.find("already freed (double free?)"), std::string::npos) << what;
  stats_before = env.stats().to_map();
}

TEST_F(bad_input, InteriorPointer) {
  void* inside = static_cast<char*>(live) + 1024;
  const std::string what = error_of([&] { env.alloc->deallocate(inside); });
  EXPECT_NE(what.find("1024 bytes into the allocated block"), std::string::npos) << what;
}

TEST_F(bad_input, RecordStreamOfUnknownPointer) {
  stream_t s = env.new_stream();
  int host = 0;
  const std::string what = error_of([&] { env.alloc->record_stream(&host, s); });
  EXPECT_NE(what.find("record_stream"), std::string::npos) << what;
  EXPECT_NE(what.find("invalid device pointer"), std::string::npos) << what;
  const std::string twice = error_of([&] { env.alloc->record_stream(freed, s); });
  EXPECT_NE(twice.find("already freed"), std::string::npos) << twice;
}

TEST_F(bad_input, SizeZero) {
  const std::string what = error_of([&] { (void)env.alloc->allocate(0); });
  EXPECT_NE(what.find("size 0"), std::string::npos) << what;
}

TEST_F(bad_input, DeviceOutOfRange) {
  const std::string what = error_of([&] { (void)env.alloc->allocate(512, nullptr, 3); });
  EXPECT_NE(what.find("out of range"), std::string::npos) << what;
}

TEST_F(bad_input, LargerThanTheDevice) {
  std::string what;
  try {
    (void)env.alloc->allocate(800000000ull * GiB);
  } catch (const out_of_memory& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("Tried to allocate 800000000.00 GiB"), std::string::npos) << what;
  EXPECT_NE(what.find("GPU 0 has a total capacity of"), std::string::npos) << what;
  // The OOM is counted and the (split, in use) segment survives the release-all step.
  stats_before["num_ooms"] += 1;
  stats_before["num_alloc_retries"] += 1;
  stats_before["num_sync_all_streams"] += 1;
}

TEST_F(bad_input, MoreThanOneExabyte) {
  std::string what;
  try {
    (void)env.alloc->allocate(std::size_t{1} << 61);
  } catch (const out_of_memory& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("more than 1EB"), std::string::npos) << what;
}

TEST(bad_input_standalone, FreeOfAnotherAllocatorsPointer) {
  native_env one;
  native_env two;
  void* p = one.alloc->allocate(512);
  EXPECT_THROW(two.alloc->deallocate(p), error);
  one.alloc->deallocate(p);
}

}  // namespace
}  // namespace streampool::test
