// page_toucher.hpp (internal) — pre-faults the pages of freshly malloc'd memory before it is
// registered with the driver (pinned_use_cuda_host_register), split over
// pinned_num_register_threads threads. See Note [Touching pages before registering].
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace streampool::host {

/// The page size the touch loop steps by (PyTorch's fixed 4 KiB; larger pages are touched more
/// than once, which is harmless).
inline constexpr std::size_t touch_page_size = 4096;

class page_toucher {
 public:
  /// `threads` >= 1: the calling thread plus threads - 1 workers, started on first need.
  explicit page_toucher(std::size_t threads) : threads_(threads < 1 ? 1 : threads) {}
  ~page_toucher();
  page_toucher(const page_toucher&) = delete;
  page_toucher& operator=(const page_toucher&) = delete;

  /// Writes the first byte of every touch_page_size page of [ptr, ptr + bytes) (to 0). Uses every
  /// thread when bytes >= threads x page, else the calling thread alone. One touch at a time:
  /// concurrent callers take turns.
  void touch(void* ptr, std::size_t bytes);
  [[nodiscard]] std::size_t threads() const noexcept { return threads_; }

 private:
  void work(std::size_t worker);
  void start_workers();

  const std::size_t threads_;
  std::mutex touch_mutex_;  ///< one touch at a time
  std::mutex mutex_;        ///< guards the job fields below
  std::condition_variable job_ready_;
  std::condition_variable job_done_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
  std::size_t generation_ = 0;  ///< bumped per job; a worker runs each generation once
  std::size_t remaining_ = 0;   ///< workers still busy with the current job
  char* job_ptr_ = nullptr;
  std::size_t job_bytes_ = 0;
};

}  // namespace streampool::host
