// host_bad_input_test.cpp — bad input to the host allocator: a foreign pointer, an interior
// pointer, a double free, record_stream on memory of another allocator or on a dead stream, size
// 0 and absurd sizes, driver failures. Each gets a clear error and leaves the allocator working,
// with nothing lost.
#include "host_test_support.hpp"

namespace streampool::test {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(host_bad_input, ForeignAndInteriorPointersAreRefused) {
  host_env env;
  void* a = env.alloc->allocate(256);
  int local = 0;
  const std::string foreign = message_of([&] { env.alloc->deallocate(&local); });
  EXPECT_TRUE(has(foreign, "not a pointer this host allocator handed out")) << foreign;
  EXPECT_TRUE(has(foreign, "nothing was freed")) << foreign;
  EXPECT_THROW(env.alloc->deallocate(static_cast<char*>(a) + 1), error);
  EXPECT_TRUE(env.alloc->owns(a));
  env.alloc->deallocate(a);
  env.alloc->deallocate(nullptr);  // no-op
}

TEST(host_bad_input, DoubleFreeIsRefusedAndChangesNothing) {
  host_env env;
  void* a = env.alloc->allocate(256);
  env.alloc->deallocate(a);
  const host_memory_stats before = env.alloc->stats();
  const std::string text = message_of([&] { env.alloc->deallocate(a); });
  EXPECT_TRUE(has(text, "double free")) << text;
  EXPECT_EQ(env.alloc->stats().allocation.freed, before.allocation.freed);
  void* b = env.alloc->allocate(256);
  void* c = env.alloc->allocate(256);
  EXPECT_EQ(b, a);
  EXPECT_NE(c, a) << "the block was not filed twice";
  env.alloc->deallocate(b);
  env.alloc->deallocate(c);
}

TEST(host_bad_input, RecordStreamOnMemoryOfAnotherAllocator) {
  host_env env;
  host_env other;
  void* mine = env.alloc->allocate(64);
  void* theirs = other.alloc->allocate(64);
  const std::string text = message_of([&] { env.alloc->record_stream(theirs, nullptr); });
  EXPECT_TRUE(has(text, "record_stream")) << text;
  EXPECT_TRUE(has(text, "another allocator")) << text;
  EXPECT_THROW(env.alloc->deallocate(theirs), error);
  EXPECT_TRUE(other.alloc->owns(theirs));
  int local = 0;
  EXPECT_THROW(env.alloc->record_stream(&local, nullptr), error);
  env.alloc->deallocate(mine);
  EXPECT_THROW(env.alloc->record_stream(mine, nullptr), error) << "after free";
  other.alloc->deallocate(theirs);
}

TEST(host_bad_input, RecordStreamOnADeadStream) {
  host_env env;
  const stream_t stream = env.make_stream();
  ASSERT_TRUE(env.sim->stream_destroy(0, stream).ok());
  void* a = env.alloc->allocate(64);
  const std::string text = message_of([&] { env.alloc->record_stream(a, stream); });
  EXPECT_TRUE(has(text, "not a live stream")) << text;
  env.alloc->deallocate(a);
  EXPECT_EQ(env.alloc->allocate(64), a) << "nothing was recorded";
  env.alloc->deallocate(a);
}

TEST(host_bad_input, ZeroAndAbsurdSizes) {
  host_env env;
  const std::string zero = message_of([&] { (void)env.alloc->allocate(0); });
  EXPECT_TRUE(has(zero, "allocate(0)")) << zero;
  EXPECT_THROW((void)env.alloc->allocate(0), error);
  try {
    (void)env.alloc->allocate(std::size_t{1} << 62);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_TRUE(has(e.what(), "larger than 1 EiB")) << e.what();
  }
  EXPECT_THROW((void)env.alloc->allocate(~std::size_t{0}), out_of_memory);
  try {
    (void)env.alloc->allocate(std::size_t{1} << 40);  // more than the sim's 64 GiB of host
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_TRUE(has(e.what(), "cudaHostAlloc of 1024.00 GiB")) << e.what();
    EXPECT_TRUE(has(e.what(), "ulimit -l")) << e.what();
  }
  EXPECT_EQ(env.alloc->stats().segment.current, 0);
  void* ok = env.alloc->allocate(64);
  env.alloc->deallocate(ok);
}

TEST(host_bad_input, OutOfMemoryRetriesOnceAfterEmptyingTheCache) {
  sim_options options;
  options.host_capacity = 1 * mib;
  host_env env("", options);
  void* a = env.alloc->allocate(512 * kib);
  env.alloc->deallocate(a);                      // cached: 512 KiB of the 1 MiB
  void* b = env.alloc->allocate(1 * mib);        // fits only once the cache is given back
  EXPECT_EQ(env.alloc->stats().num_host_free, 1);
  env.alloc->deallocate(b);
}

TEST(host_bad_input, EmptyCacheFailureKeepsTheBlocks) {
  host_env env;
  void* a = env.alloc->allocate(64);
  env.alloc->deallocate(a);
  env.sim->fail_next(driver_call::host_free, 1, status::other);
  EXPECT_THROW(env.alloc->empty_cache(), cuda_error);
  EXPECT_EQ(env.alloc->allocate(64), a) << "still cached";
  env.alloc->deallocate(a);
}

TEST(host_bad_input, AFailedEventRecordWaitsForTheStreamInstead) {
  host_env env("", lazy_streams());
  const stream_t stream = env.make_stream();
  void* device = env.device_buffer(64);
  void* a = env.alloc->allocate(64);
  env.copy_from(a, 64, stream, device);
  env.sim->fail_next(driver_call::event_record, 1, status::other);
  env.alloc->deallocate(a);
  EXPECT_EQ(env.sim->calls(driver_call::stream_synchronize), 1u);
  EXPECT_EQ(env.alloc->allocate(64), a) << "the stream was waited for";
  env.alloc->deallocate(a);
  (void)env.sim->free(0, device);
}

}  // namespace
}  // namespace streampool::test
