// capture_reuse_test.cpp — graph_capture_record_stream_reuse:True on a real GPU (Note [Reuse within
// a capture] in src/native/capture_reuse.hpp): in a CUDA graph capture with a side stream, a block
// written on the main stream, read late by the side stream (record_stream) and freed is not reused
// before the side stream is joined back, and is reused after; replaying the graph then shows the
// side stream read the old data before the main stream's new owner overwrote it.
#include <vector>

#include "streampool_kernels.hpp"
#include "support/backend_fixture.hpp"
#include "support/kernel_ok.hpp"

namespace streampool::testing {
namespace {

using gpu_capture_reuse = backend_test;

constexpr std::size_t size = 8 * mib;
constexpr std::uint32_t late_us = 20000;  // the side stream reads ~20 ms late in every replay

TEST_P(gpu_capture_reuse, ABlockFreedInTheCaptureIsReusedOnlyAfterTheJoinAndReplaysInOrder) {
  const stream_t main = new_stream();
  const stream_t side = new_stream();
  event_t fork = nullptr;
  event_t join = nullptr;
  check(*driver_, driver_->event_create(0, &fork), "event_create");
  check(*driver_, driver_->event_create(0, &join), "event_create");
  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, [main, side](stream_t s) { return s == main || s == side; });
  check(*driver_, driver_->stream_begin_capture(main, capture_mode::global), "stream_begin_capture");
  check(*driver_, driver_->event_record(fork, main), "event_record");
  check(*driver_, driver_->stream_wait_event(side, fork), "stream_wait_event");

  void* x = alloc_->allocate(size, main);
  void* out = alloc_->allocate(size, side);
  KERNEL_OK(kernels::fill_pattern(x, size, 7, main));
  check(*driver_, driver_->event_record(fork, main), "event_record");
  check(*driver_, driver_->stream_wait_event(side, fork), "stream_wait_event");
  alloc_->record_stream(x, side);
  KERNEL_OK(kernels::delayed_copy(out, x, size, late_us, side));  // the side stream reads x late
  alloc_->deallocate(x);
  void* before = alloc_->allocate(size, main);
  EXPECT_NE(before, x) << "reused before the side stream was joined back";
  check(*driver_, driver_->event_record(join, side), "event_record");
  check(*driver_, driver_->stream_wait_event(main, join), "stream_wait_event");
  void* after = alloc_->allocate(size, main);
  EXPECT_EQ(after, x) << "joined: the graph orders the side stream's read before main's next work";
  KERNEL_OK(kernels::fill_pattern(after, size, 999, main));
  graph_t graph = nullptr;
  check(*driver_, driver_->stream_end_capture(main, &graph), "stream_end_capture");
  alloc_->end_allocate_to_pool(pool);

  graph_exec_t exec = nullptr;
  check(*driver_, driver_->graph_instantiate(graph, &exec, instantiate_flags::none), "graph_instantiate");
  for (int replay = 0; replay < 3; ++replay) check(*driver_, driver_->graph_launch(exec, main), "graph_launch");
  synchronize();
  std::uint64_t bad = 0;
  KERNEL_OK(kernels::count_mismatches(out, size, 7, main, &bad));
  EXPECT_EQ(bad, 0u) << "the side stream read the new owner's data: the reuse was not ordered";
  KERNEL_OK(kernels::count_mismatches(after, size, 999, main, &bad));
  EXPECT_EQ(bad, 0u);

  check(*driver_, driver_->graph_exec_destroy(exec), "graph_exec_destroy");
  check(*driver_, driver_->graph_destroy(graph), "graph_destroy");
  for (void* p : {out, before, after}) alloc_->deallocate(p);
  alloc_->release_pool(pool);
  alloc_->empty_cache();
  (void)driver_->event_destroy(0, fork);
  (void)driver_->event_destroy(0, join);
}

std::vector<backend_case> capture_reuse_cases() {
  return {{"capture_reuse_cuda", "graph_capture_record_stream_reuse:True", true}};
}

INSTANTIATE_TEST_SUITE_P(real_device, gpu_capture_reuse, ::testing::ValuesIn(capture_reuse_cases()), backend_case_name);

}  // namespace
}  // namespace streampool::testing
