// async_bad_input_test.cpp — bad input to the cudaMallocAsync backend gets a clear streampool::error
// and leaves the state unchanged (statistics identical before and after), and the allocator keeps
// working: double free, unknown and interior pointers, record_stream of them, size 0, bad devices.
#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

class async_bad_input : public async_fixture {
 protected:
  /// Runs `f`, expects streampool::error (not a subclass for driver failures) and returns its text.
  template <class F>
  std::string error_of(F&& f) {
    try {
      f();
    } catch (const cuda_error& e) {
      ADD_FAILURE() << "bad input reported as a driver failure: " << e.what();
      return e.what();
    } catch (const error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected streampool::error";
    return {};
  }
};

TEST_F(async_bad_input, DoubleFree) {
  void* keep = alloc_->allocate(100);
  void* p = alloc_->allocate(100);
  alloc_->deallocate(p);
  const auto before = stats_map();
  const auto frees = sim_->calls(driver_call::free_async);
  const std::string message = error_of([&] { alloc_->deallocate(p); });
  EXPECT_NE(message.find("already freed"), std::string::npos) << message;
  EXPECT_NE(message.find("double free"), std::string::npos) << message;
  EXPECT_EQ(stats_map(), before);
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees);
  alloc_->deallocate(keep);  // still works
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);
}

TEST_F(async_bad_input, UnknownPointer) {
  void* keep = alloc_->allocate(100);
  const auto before = stats_map();
  int host_object = 0;
  const std::string message = error_of([&] { alloc_->deallocate(&host_object); });
  EXPECT_NE(message.find("not a live allocation"), std::string::npos) << message;
  EXPECT_NE(message.find("deallocate("), std::string::npos) << message;
  EXPECT_EQ(stats_map(), before);
  alloc_->deallocate(keep);
}

TEST_F(async_bad_input, InteriorPointerNamesTheAllocation) {
  void* p = alloc_->allocate(4096);
  const auto before = stats_map();
  void* inside = static_cast<char*>(p) + 16;
  const std::string message = error_of([&] { alloc_->deallocate(inside); });
  EXPECT_NE(message.find("16 bytes inside the allocation"), std::string::npos) << message;
  EXPECT_NE(message.find("4.00 KiB"), std::string::npos) << message;
  EXPECT_EQ(stats_map(), before);
  const std::string record_message = error_of([&] { alloc_->record_stream(inside, new_stream()); });
  EXPECT_NE(record_message.find("record_stream("), std::string::npos) << record_message;
  EXPECT_EQ(stats_map(), before);
  alloc_->deallocate(p);  // the real pointer is still live
}

TEST_F(async_bad_input, RecordStreamOfUnknownOrFreedPointer) {
  void* p = alloc_->allocate(100);
  alloc_->deallocate(p);
  const auto before = stats_map();
  const std::string message = error_of([&] { alloc_->record_stream(p, new_stream()); });
  EXPECT_NE(message.find("not a live allocation"), std::string::npos) << message;
  EXPECT_EQ(stats_map(), before);
  EXPECT_THROW(alloc_->record_stream(nullptr, nullptr), error);
}

TEST_F(async_bad_input, SizeZeroAndBadDevices) {
  EXPECT_THROW((void)alloc_->allocate(0), error);
  EXPECT_THROW((void)alloc_->allocate(100, nullptr, 1), error);  // one device only
  EXPECT_THROW((void)alloc_->stats(5), error);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 0u);
  EXPECT_NO_THROW(alloc_->deallocate(nullptr));
}

TEST_F(async_bad_input, FailedFreeKeepsTheAllocationLive) {
  void* p = alloc_->allocate(100);
  const auto before = stats_map();
  sim_->fail_next(driver_call::free_async, 1, status::invalid_value);
  EXPECT_THROW(alloc_->deallocate(p), cuda_error);
  EXPECT_EQ(stats_map(), before);
  EXPECT_EQ(alloc_->snapshot().segments.size(), 1u);
  alloc_->deallocate(p);
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);
}

TEST_F(async_bad_input, FailedDriverCallAtAllocateChangesNothing) {
  (void)alloc_->stats(0);
  alloc_->deallocate(alloc_->allocate(100));  // set up
  const auto before = stats_map();
  sim_->fail_next(driver_call::malloc_async, 1, status::invalid_value);
  EXPECT_THROW((void)alloc_->allocate(100), cuda_error);
  EXPECT_EQ(stats_map(), before);
}

}  // namespace
}  // namespace streampool::testing
