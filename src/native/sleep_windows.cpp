// sleep_windows.cpp — plan_sleep_windows (sleep_windows.hpp): the windows of Note [Sleep pipeline].
#include "native/sleep_windows.hpp"

#include <algorithm>

namespace streampool::native {

std::vector<sleep_window> plan_sleep_windows(const std::vector<sleeping_segment>& segments,
                                             std::vector<backup_run> runs, std::size_t window_bytes,
                                             std::vector<backup_run>& pieces) {
  // Runs follow the blocks of each segment, and segments need not be in address order: sorted by
  // address, the runs on a window are found by a search.
  std::sort(runs.begin(), runs.end(), [](const backup_run& a, const backup_run& b) { return a.device < b.device; });
  std::vector<sleep_window> windows;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const sleeping_segment& s = segments[i];
    const std::size_t page = s.seg->page;
    const std::size_t per_window = std::max<std::size_t>(1, window_bytes / page);
    for (std::size_t first = 0; first < s.pages.size();) {
      const std::size_t end = std::min(first + per_window, s.pages.size());
      const std::uintptr_t lo = s.seg->base + s.pages[first] * page;
      const std::uintptr_t hi = s.seg->base + (s.pages[end - 1] + 1) * page;
      sleep_window w{i, first, end, pieces.size(), 0};
      auto it = std::upper_bound(runs.begin(), runs.end(), lo,
                                 [](std::uintptr_t at, const backup_run& r) { return at < r.device; });
      if (it != runs.begin() && std::prev(it)->device + std::prev(it)->bytes > lo) --it;
      for (; it != runs.end() && it->device < hi; ++it) {
        const std::uintptr_t from = std::max(lo, it->device);
        const std::uintptr_t to = std::min(hi, it->device + it->bytes);
        if (from < to) pieces.push_back({from, to - from, it->offset + (from - it->device)});
      }
      w.end_run = pieces.size();
      windows.push_back(w);
      first = end;
    }
  }
  return windows;
}

}  // namespace streampool::native
