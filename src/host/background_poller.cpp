// background_poller.cpp — the event-processing thread of the host allocator.
//
// Note [Background event thread]
// With pinned_use_background_threads the allocation path does not query events on a cache hit;
// this thread does, every 100 us (PyTorch's period), and an allocation that finds no cached block
// of its size still looks once itself before pinning new memory. Unlike PyTorch's (a detached
// thread of a process-wide pool that runs until exit), the thread belongs to the allocator: it
// starts with it and is stopped and joined by its destructor. A failure while querying is
// ignored (the events are looked at again on the next pass).
#include "host/background_poller.hpp"

#include <chrono>

#include "host/host_cache.hpp"

namespace streampool::host {

background_poller::background_poller(host_cache& cache) : cache_(cache), thread_([this] { run(); }) {}

background_poller::~background_poller() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void background_poller::run() {
  constexpr auto period = std::chrono::microseconds(100);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    try {
      cache_.process_events();
    } catch (...) {
      // Note [Background event thread]: looked at again next time.
    }
    lock.lock();
    wake_.wait_for(lock, period, [&] { return stopping_; });
  }
}

}  // namespace streampool::host
