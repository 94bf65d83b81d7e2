// record_stream with a stream of another device, or with a handle that is no stream, is refused
// with a clear error and records nothing (Note [record_stream across devices] in
// src/native/native_allocator.cpp): the block is then freed and reused as if the call was never
// made. Drivers that cannot tell a stream's device skip the check.
#include <gtest/gtest.h>

#include <string>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

sim_options two_devices() {
  sim_options o;
  o.device_count = 2;
  o.eager_completion = false;
  return o;
}

/// The message of the streampool::error that `body` throws ("" and a test failure when none).
template <typename F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected streampool::error";
  return "";
}

TEST(record_stream_device, AStreamOfAnotherDeviceIsRefusedAndNothingIsRecorded) {
  native_env env("", two_devices());
  const stream_t s0 = env.new_stream(0);
  const stream_t s1 = env.new_stream(1);
  void* p = env.alloc->allocate(4096, s0, 0);
  const std::string message = error_of([&] { env.alloc->record_stream(p, s1); });
  EXPECT_NE(message.find("belongs to device 1"), std::string::npos) << message;
  EXPECT_NE(message.find("allocated on device 0"), std::string::npos) << message;
  EXPECT_NE(message.find("nothing was recorded"), std::string::npos) << message;

  env.sim->reset_counters();
  env.alloc->deallocate(p);
  EXPECT_EQ(env.calls(driver_call::event_record), 0u) << "no use of s1 was recorded";
  EXPECT_EQ(env.native().pending_events(0), 0u);
  EXPECT_EQ(env.alloc->allocate(4096, s0, 0), p) << "reusable at once on its own stream";
}

TEST(record_stream_device, ABlockOfDeviceOneRefusesAStreamOfDeviceZero) {
  native_env env("", two_devices());
  ASSERT_TRUE(env.sim->set_device(0).ok());
  const stream_t s0 = env.new_stream(0);
  const stream_t s1 = env.new_stream(1);
  const stream_t s1b = env.new_stream(1);
  void* p = env.alloc->allocate(4096, s1, 1);
  const std::string message = error_of([&] { env.alloc->record_stream(p, s0); });
  EXPECT_NE(message.find("belongs to device 0"), std::string::npos) << message;
  // nullptr is the legacy stream of the current device (0 here): refused as well.
  EXPECT_NE(error_of([&] { env.alloc->record_stream(p, nullptr); }).find("belongs to device 0"), std::string::npos);

  env.alloc->record_stream(p, s1b);  // a stream of the block's own device: accepted
  env.sim->reset_counters();
  env.alloc->deallocate(p);
  EXPECT_EQ(env.calls(driver_call::event_record), 1u) << "only s1b's event";
  EXPECT_EQ(env.native().pending_events(1), 1u);
}

TEST(record_stream_device, AHandleThatIsNoStreamIsRefused) {
  native_env env("", two_devices());
  const stream_t s0 = env.new_stream(0);
  stream_t gone = env.new_stream(0);
  ASSERT_TRUE(env.sim->stream_destroy(0, gone).ok());
  void* p = env.alloc->allocate(4096, s0, 0);
  const std::string message = error_of([&] { env.alloc->record_stream(p, gone); });
  EXPECT_NE(message.find("not a valid stream handle"), std::string::npos) << message;
  EXPECT_NO_THROW(env.alloc->deallocate(p)) << "nothing was recorded, so the free needs no event";
  EXPECT_EQ(env.native().pending_events(0), 0u);
}

TEST(record_stream_device, TheCheckIsMadeOnlyForAnotherStream) {
  native_env env("", two_devices());
  const stream_t s0 = env.new_stream(0);
  void* p = env.alloc->allocate(4096, s0, 0);
  env.sim->reset_counters();
  env.alloc->record_stream(p, s0);
  EXPECT_EQ(env.calls(driver_call::stream_get_device), 0u) << "the block's own stream needs no lookup";
  env.alloc->record_stream(p, env.new_stream(0));
  EXPECT_EQ(env.calls(driver_call::stream_get_device), 1u);
  env.alloc->deallocate(p);
}

}  // namespace
}  // namespace streampool::test
