// async_record_stream_device_test.cpp — issue 31: record_stream on the cudaMallocAsync backend
// refuses a handle that is no stream when it is called, with nothing recorded (Note [record_stream
// of a bad stream on cudaMallocAsync]); it used to accept a garbage handle, which surfaced only at
// the free. (A stream of another device stays accepted: async_record_stream_devices.)
#include <string>

#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

class async_record_stream_device : public async_fixture {
 protected:
  void SetUp() override {
    sim_options options;
    options.device_count = 2;
    options.eager_completion = false;
    make(options);
  }

  static std::string error_of(const std::function<void()>& body) {
    try {
      body();
    } catch (const error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected streampool::error";
    return "";
  }
};

TEST_F(async_record_stream_device, AGarbageHandleIsRefusedAndNothingIsRecorded) {
  const stream_t s0 = new_stream(0);
  void* p = alloc_->allocate(4096, s0, 0);
  const auto garbage = reinterpret_cast<stream_t>(std::uintptr_t{0xdeadbeef});
  const std::string message = error_of([&] { alloc_->record_stream(p, garbage); });
  EXPECT_TRUE(contains(message, "not a valid stream handle")) << message;
  EXPECT_TRUE(contains(message, "nothing was recorded")) << message;
  stream_t gone = new_stream(0);
  ASSERT_TRUE(sim_->stream_destroy(0, gone).ok());
  EXPECT_TRUE(contains(error_of([&] { alloc_->record_stream(p, gone); }), "not a valid stream handle"));
  sim_->reset_counters();
  EXPECT_NO_THROW(alloc_->deallocate(p)) << "nothing was recorded: the free needs no event";
  EXPECT_EQ(sim_->calls(driver_call::event_record), 0u);
}

TEST_F(async_record_stream_device, TheCheckIsMadeOnlyForAnotherStream) {
  const stream_t s0 = new_stream(0);
  void* p = alloc_->allocate(4096, s0, 0);
  sim_->reset_counters();
  alloc_->record_stream(p, s0);
  EXPECT_EQ(sim_->calls(driver_call::stream_get_device), 0u);
  alloc_->record_stream(p, new_stream(0));
  EXPECT_EQ(sim_->calls(driver_call::stream_get_device), 1u);
  alloc_->deallocate(p);
}

}  // namespace
}  // namespace streampool::testing
