// background_poller.hpp (internal) — the thread of pinned_use_background_threads: it looks at the
// host allocator's pending events every 100 us, so freed blocks become reusable without the
// allocation path querying events. See Note [Background event thread].
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace streampool::host {

class host_cache;

class background_poller {
 public:
  explicit background_poller(host_cache& cache);
  /// Stops the thread and waits for it.
  ~background_poller();
  background_poller(const background_poller&) = delete;
  background_poller& operator=(const background_poller&) = delete;

 private:
  void run();

  host_cache& cache_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  ///< last: started once the fields above exist
};

}  // namespace streampool::host
