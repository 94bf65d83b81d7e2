// hybrid_mutex.hpp — the lock of a stream arena and of a pointer-map shard: one atomic word, an
// uncontended lock/unlock pair is two atomic operations (no call into pthreads); under contention
// it spins briefly, then sleeps on the word (C++20 atomic wait = futex on Linux). Lockable, so it
// works with std::lock_guard / std::unique_lock.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace streampool::native {

// Note [Hybrid mutex]
// Hot-path critical sections (best-fit search + split, or merge + insert) last tens of
// nanoseconds, so an uncontended std::mutex (a call into glibc per lock and per unlock) would be a
// visible share of the 100 ns budget. Critical sections can also be long (a new segment means a
// cudaMalloc under the arena lock), so pure spinning is wrong too: after a short spin a waiter
// marks the word "contended" (2) and sleeps in atomic::wait until unlock() notifies it. This is
// the classic three-state futex mutex.
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

}  // namespace streampool::native
