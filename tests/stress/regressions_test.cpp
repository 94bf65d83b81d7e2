// regressions_test.cpp — deterministic reproductions of bugs the reliability suites found and that
// are fixed now; each failed before its fix (docs/reliability.md, "Failures found").
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <utility>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "stress/stress_test_support.hpp"

namespace streampool::stress {
namespace {

/// Delegates to a real allocator and runs a hook right after each deallocate (to interleave a
/// C API call deterministically where another thread's call could land).
class hooked_allocator final : public allocator {
 public:
  hooked_allocator(std::unique_ptr<allocator> inner, std::shared_ptr<driver> drv)
      : allocator(inner->config(), std::move(drv)), inner_(std::move(inner)) {}
  std::function<void()> after_deallocate;

 private:
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override {
    return inner_->allocate(bytes, stream, device);
  }
  void do_deallocate(void* ptr) override {
    inner_->deallocate(ptr);
    if (auto hook = std::exchange(after_deallocate, nullptr)) hook();
  }
  void do_record_stream(void* ptr, stream_t stream) override { inner_->record_stream(ptr, stream); }
  void do_empty_cache() override { inner_->empty_cache(); }
  memory_stats do_stats(int device) const override { return inner_->stats(device); }
  void do_reset_peak_stats(int device) override { inner_->reset_peak_stats(device); }
  void do_reset_accumulated_stats(int device) override { inner_->reset_accumulated_stats(device); }
  memory_snapshot do_snapshot() const override { return inner_->snapshot(); }
  void do_record_history(bool enabled, std::size_t max_entries) override {
    inner_->record_history(enabled, max_entries);
  }
  std::vector<trace_entry> do_trace(int device) const override { return inner_->trace(device); }
  void do_set_memory_fraction(int device, double fraction) override { inner_->set_memory_fraction(fraction, device); }
  double do_memory_fraction(int device) const override { return inner_->memory_fraction(device); }
  device_pools* do_pools(int device) const override { return &inner_->pools(device); }

  std::unique_ptr<allocator> inner_;
};

// src/c_api/c_api.cpp, streampool_free: the pointer's record used to be erased *after* deallocate()
// returned, outside the records lock. A streampool_alloc (another thread) that got the same
// address in between inserted its record, which the free then erased: the new allocation's own
// streampool_free failed with "was not allocated by streampool_alloc" and its memory leaked.
// Found by c_api_concurrency.ThreadsOnOneStreamAllocAndFree; fixed in 411ca58 (Note [Free erases
// its record first]). The hook below puts the "other thread's" allocation exactly in that window.
TEST(regressions, CApiFreeKeepsTheRecordOfAnAllocationMadeDuringIt) {
  (void)c_api_impl::c_api_uninstall();
  auto sim = std::make_shared<sim_driver>();
  auto hooked = std::make_unique<hooked_allocator>(make_allocator(parse_config("backend:native"), sim), sim);
  hooked_allocator* hook = hooked.get();
  c_api_impl::c_api_install(std::move(hooked));
  void* p = streampool_alloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  void* q = nullptr;
  hook->after_deallocate = [&] { q = streampool_alloc(1000, 0, nullptr); };  // "another thread"
  streampool_free(p, 1000, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << streampool_last_error();
  ASSERT_EQ(q, p) << "precondition: the freed block is reused at once on the same stream";
  streampool_free(q, 1000, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_EQ(streampool_empty_cache(), STREAMPOOL_OK);
  EXPECT_EQ(sim->bytes_in_use(0), 0u) << "leak";
  (void)c_api_impl::c_api_uninstall();
}

}  // namespace
}  // namespace streampool::stress
