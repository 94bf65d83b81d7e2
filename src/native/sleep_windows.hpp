// sleep_windows.hpp — how sleep and wake cut a pool's pages into windows for the pipeline of Note
// [Sleep pipeline] (pool_sleep.cpp): consecutive mapped pages of one segment, at most a given
// number of bytes each, with the live runs that lie on them clipped to the window. Pure planning:
// no driver call, no statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "native/block.hpp"
#include "streampool/driver.hpp"

namespace streampool::native {

class stream_arena;

/// A segment of a sleeping pool: the pages that went back (indices from its base), and for each
/// the handle the driver refused to release (0: released; the page is mapped with it again).
struct sleeping_segment {
  segment* seg = nullptr;
  stream_arena* arena = nullptr;
  std::vector<std::size_t> pages;
  std::vector<vmm_handle_t> held;
};

/// A live range copied to the host: [device, device + bytes) at host offset `offset`.
struct backup_run {
  std::uintptr_t device = 0;
  std::size_t bytes = 0;
  std::size_t offset = 0;
};

/// Pages [first_page, end_page) of segments[segment].pages, and the pieces [first_run, end_run)
/// of the live runs that lie on them.
struct sleep_window {
  std::size_t segment = 0;
  std::size_t first_page = 0;
  std::size_t end_page = 0;
  std::size_t first_run = 0;
  std::size_t end_run = 0;
};

/// Cuts the pages of `segments` (each segment's in its order) into windows of at most
/// `window_bytes` (at least one page each), and appends to `pieces` the parts of `runs` that lie
/// on each window, in address order, keeping their host offsets. Runs on no window's pages are
/// left out (a rollback copies back only what went).
[[nodiscard]] std::vector<sleep_window> plan_sleep_windows(const std::vector<sleeping_segment>& segments,
                                                           std::vector<backup_run> runs, std::size_t window_bytes,
                                                           std::vector<backup_run>& pieces);

}  // namespace streampool::native
