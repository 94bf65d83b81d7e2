// c_api_delegate_test.cpp — the C API's delegate (streampool_set_delegate, Note [C API delegate]):
// while one is set, the allocation calls and statistics go to it and every other call of the device
// allocator is refused naming it; its errors pass through with their status; foreign and double
// frees are refused without reaching it; setting and clearing follow c_api.h's rules. And
// process_allocator (streampool/process_allocator.hpp), the C++ view of the C API, on the delegate
// and on the C API's own allocator. The delegate here serves from an allocator on the sim driver,
// as the PyTorch extension serves from its own (python/csrc/c_api_delegate.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "streampool/process_allocator.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

std::unique_ptr<allocator>& served() {
  static std::unique_ptr<allocator> a;
  return a;
}
thread_local std::string served_error;
int calls_served = 0;

template <typename F>
int serve(F&& body) {
  ++calls_served;
  try {
    body();
    return STREAMPOOL_OK;
  } catch (const out_of_memory& e) {
    served_error = e.what();
    return STREAMPOOL_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    served_error = e.what();
    return STREAMPOOL_ERROR_INVALID_ARGUMENT;
  }
}

int d_alloc(size_t size, int device, void* stream, void** out) {
  return serve([&] { *out = served()->allocate(size, stream, device); });
}
int d_free(void* ptr) {
  return serve([&] { served()->deallocate(ptr); });
}
int d_record_stream(void* ptr, void* stream) {
  return serve([&] { served()->record_stream(ptr, stream); });
}
int d_empty_cache() {
  return serve([&] { served()->empty_cache(); });
}
int d_set_memory_fraction(double fraction, int device) {
  return serve([&] { served()->set_memory_fraction(fraction, device); });
}
const char* d_stats_json(int device) {
  thread_local std::string text;
  return serve([&] { text = served()->stats(device).to_json(); }) == STREAMPOOL_OK ? text.c_str() : nullptr;
}
const char* d_snapshot_json() {
  thread_local std::string text;
  return serve([&] { text = served()->snapshot().to_json(); }) == STREAMPOOL_OK ? text.c_str() : nullptr;
}
const char* d_backend_name() { return "native"; }
const char* d_last_error() { return served_error.c_str(); }

streampool_delegate table() {
  return {STREAMPOOL_DELEGATE_ABI, "the test's delegate", &d_alloc, &d_free, &d_record_stream, &d_empty_cache,
          &d_set_memory_fraction, &d_stats_json, &d_snapshot_json, &d_backend_name, &d_last_error};
}

class c_api_delegate : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_uninstall();
    (void)streampool_set_delegate(nullptr);
    c_api_impl::c_api_set_factory([] {
      return make_allocator(parse_config("backend:native"), std::make_shared<sim_driver>());
    });
    sim_options options;
    options.capacity = std::size_t{1} << 30;  // 1 GiB: an allocation of 2 GiB is out of memory
    served() = make_allocator(parse_config("backend:native"), std::make_shared<sim_driver>(options));
    calls_served = 0;
  }
  void TearDown() override {
    (void)streampool_set_delegate(nullptr);
    (void)c_api_impl::c_api_uninstall();
    c_api_impl::c_api_set_factory({});
    served().reset();
  }
  static std::int64_t served_bytes() { return served()->stats(0).allocated_bytes[0].current; }
  static std::string last_error() { return streampool_last_error(); }

  const streampool_delegate delegate_ = table();
};

TEST_F(c_api_delegate, AllocationCallsAndStatisticsGoToTheDelegate) {
  ASSERT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK) << last_error();
  EXPECT_STREQ(streampool_delegate_name(), "the test's delegate");
  void* p = streampool_alloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr) << last_error();
  void* q = streampool_alloc(1 << 20, 0, nullptr);
  ASSERT_NE(q, nullptr) << last_error();
  EXPECT_EQ(served_bytes(), 4096 + (1 << 20));
  EXPECT_EQ(std::string(streampool_stats_json(0)), served()->stats(0).to_json());
  EXPECT_NE(std::string(streampool_snapshot_json()).find("segments"), std::string::npos);
  EXPECT_STREQ(streampool_backend_name(), "native");
  EXPECT_EQ(streampool_record_stream(p, nullptr), STREAMPOOL_OK) << last_error();
  EXPECT_EQ(streampool_set_memory_fraction(0.5, 0), STREAMPOOL_OK) << last_error();
  EXPECT_DOUBLE_EQ(served()->memory_fraction(0), 0.5);
  streampool_free(p, 4096, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << last_error();
  EXPECT_EQ(streampool_free_unsized(q), STREAMPOOL_OK) << last_error();
  EXPECT_EQ(served_bytes(), 0);
  EXPECT_GT(served()->stats(0).reserved_bytes[0].current, 0);
  EXPECT_EQ(streampool_empty_cache(), STREAMPOOL_OK) << last_error();
  EXPECT_EQ(served()->stats(0).reserved_bytes[0].current, 0);
  EXPECT_EQ(c_api_impl::c_api_uninstall(), nullptr) << "no allocator of the C API's own was created";
}

TEST_F(c_api_delegate, CallsItDoesNotServeAreRefusedNamingIt) {
  ASSERT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK) << last_error();
  EXPECT_EQ(streampool_trace_csv(0), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_STATE);
  EXPECT_NE(last_error().find("the test's delegate"), std::string::npos) << last_error();
  EXPECT_EQ(streampool_reset_peak_stats(0), STREAMPOOL_ERROR_STATE);
  EXPECT_EQ(streampool_init("backend:native"), STREAMPOOL_ERROR_STATE);
  EXPECT_NE(last_error().find("streampool_init"), std::string::npos) << last_error();
  EXPECT_EQ(streampool_init_sim(nullptr, 0, 1), STREAMPOOL_ERROR_STATE);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_ERROR_STATE);
  EXPECT_EQ(calls_served, 0) << "a refused call reaches nobody";
  EXPECT_EQ(c_api_impl::c_api_uninstall(), nullptr) << "nothing created an allocator beside the delegate";
}

TEST_F(c_api_delegate, ForeignAndDoubleFreesAreRefusedWithoutReachingIt) {
  ASSERT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK);
  void* own = served()->allocate(4096);  // the delegate's allocator's, but not from streampool_alloc (a tensor's)
  EXPECT_EQ(streampool_free_unsized(own), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("was not allocated by streampool_alloc"), std::string::npos) << last_error();
  EXPECT_EQ(calls_served, 0);
  EXPECT_EQ(served_bytes(), 4096) << "still live";
  void* p = streampool_alloc(512, 0, nullptr);
  ASSERT_NE(p, nullptr);
  streampool_free(p, 512, 0, nullptr);
  streampool_free(p, 512, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(served_bytes(), 4096);
  served()->deallocate(own);
}

TEST_F(c_api_delegate, ItsErrorsPassThroughWithTheirStatus) {
  ASSERT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK);
  EXPECT_EQ(streampool_alloc(std::size_t{2} << 30, 0, nullptr), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(last_error().find("[served by the test's delegate]"), std::string::npos) << last_error();
  EXPECT_EQ(streampool_set_memory_fraction(2.0, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(streampool_stats_json(7), nullptr) << "device 7 does not exist";
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INTERNAL) << "a NULL text without a status of its own";
  EXPECT_EQ(served_bytes(), 0);
}

TEST_F(c_api_delegate, SettingAndClearingFollowTheRules) {
  streampool_delegate bad = table();
  bad.abi = STREAMPOOL_DELEGATE_ABI + 1;
  EXPECT_EQ(streampool_set_delegate(&bad), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("ABI"), std::string::npos) << last_error();
  bad = table();
  bad.stats_json = nullptr;
  EXPECT_EQ(streampool_set_delegate(&bad), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(streampool_delegate_name(), nullptr) << "a refused delegate is not set";

  ASSERT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK);
  EXPECT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK) << "the same one again";
  const streampool_delegate other = table();
  EXPECT_EQ(streampool_set_delegate(&other), STREAMPOOL_ERROR_STATE);
  void* p = streampool_alloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(streampool_set_delegate(nullptr), STREAMPOOL_ERROR_STATE) << "an allocation made through it lives";
  EXPECT_NE(last_error().find("1 allocation(s)"), std::string::npos) << last_error();
  EXPECT_STREQ(streampool_delegate_name(), "the test's delegate") << "it stays";
  EXPECT_EQ(streampool_free_unsized(p), STREAMPOOL_OK) << "and still serves the free";
  EXPECT_EQ(streampool_set_delegate(nullptr), STREAMPOOL_OK) << last_error();
  EXPECT_EQ(streampool_delegate_name(), nullptr);

  // Back on the C API's own allocator (the factory's); while it exists no delegate can be set.
  void* own = streampool_alloc(4096, 0, nullptr);
  ASSERT_NE(own, nullptr) << last_error();
  EXPECT_EQ(served_bytes(), 0);
  EXPECT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_ERROR_STATE);
  EXPECT_NE(last_error().find("streampool_shutdown"), std::string::npos) << last_error();
  streampool_free(own, 4096, 0, nullptr);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK) << last_error();
  EXPECT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK) << "after the shutdown: " << last_error();
}

TEST_F(c_api_delegate, ProcessAllocatorServesFromTheDelegate) {
  ASSERT_EQ(streampool_set_delegate(&delegate_), STREAMPOOL_OK);
  process_allocator& proc = process_memory();
  void* p = proc.allocate(1 << 20, nullptr, 0);
  EXPECT_EQ(served_bytes(), 1 << 20);
  EXPECT_EQ(proc.backend_name(), "native");
  proc.record_stream(p, nullptr);
  proc.deallocate(p);
  EXPECT_EQ(served_bytes(), 0);
  EXPECT_THROW(proc.deallocate(p), error) << "a double free";
  EXPECT_THROW((void)proc.allocate(std::size_t{2} << 30, nullptr, 0), out_of_memory);
  EXPECT_THROW((void)proc.allocate(0), error);
  proc.deallocate(nullptr);  // a no-op
  proc.empty_cache();
  EXPECT_EQ(served()->stats(0).reserved_bytes[0].current, 0);
}

TEST_F(c_api_delegate, ProcessAllocatorServesFromTheOwnAllocatorWithoutOne) {
  process_allocator& proc = process_memory();
  void* p = proc.allocate(4096, nullptr, 0);
  EXPECT_EQ(served_bytes(), 0) << "no delegate: the C API's own allocator";
  auto own = c_api_impl::instance();
  EXPECT_EQ(own->stats(0).allocated_bytes[0].current, 4096);
  proc.deallocate(p);
  EXPECT_EQ(own->stats(0).allocated_bytes[0].current, 0);
  EXPECT_THROW(proc.record_stream(p, nullptr), error) << "freed already";
}

}  // namespace
}  // namespace streampool
