// hybrid_mutex.hpp — a mutex for hot-path critical sections: one atomic word; an uncontended
// lock/unlock pair is two atomic operations (no call into pthreads); under contention it spins
// briefly, then sleeps on the word (C++20 atomic wait = futex on Linux). Lockable, so it works
// with std::lock_guard / std::unique_lock. See Note [Hybrid mutex in core].
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace streampool::detail {

// Note [Hybrid mutex in core]
// The classic three-state futex mutex (0 free, 1 locked, 2 locked with sleepers): a waiter spins
// a little (critical sections are usually tens of nanoseconds), then marks the word contended and
// sleeps in atomic::wait until unlock() notifies it, so a long critical section (one that waits
// for a driver call) costs sleepers no CPU. An uncontended std::mutex costs two calls into glibc
// per lock/unlock pair, a visible share of a hot path measured in instructions (the
// cudaMallocAsync backend takes four locks per alloc+free pair; the native backend's arena lock
// is one of these, taken once by an allocation and once by a free).
class hybrid_mutex {
 public:
  void lock() noexcept {
    std::uint32_t expected = 0;
    if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    lock_contended();
  }
  [[nodiscard]] bool try_lock() noexcept {
    std::uint32_t expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  void lock_contended() noexcept {
    for (int spin = 0; spin < 64; ++spin) {
      pause();
      if (state_.load(std::memory_order_relaxed) == 0) {
        std::uint32_t expected = 0;
        if (state_.compare_exchange_weak(expected, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
      }
    }
    while (state_.exchange(2, std::memory_order_acquire) != 0) state_.wait(2, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> state_{0};
};

}  // namespace streampool::detail
