// hybrid_mutex.hpp — a mutex for hot-path critical sections: one atomic word; an uncontended
// lock/unlock pair is one atomic read-modify-write and a plain store on Linux (no call into
// pthreads); under contention it spins briefly, then sleeps on the word (futex). Lockable, so it
// works with std::lock_guard / std::unique_lock. See Note [Hybrid mutex in core] and Note [Unlock
// without a read-modify-write].
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

namespace streampool::core {

// Note [Hybrid mutex in core]
// The classic three-state futex mutex (0 free, 1 locked, 2 locked with sleepers): a waiter spins
// a little (critical sections are usually tens of nanoseconds), then marks the word contended and
// sleeps on it until unlock() wakes it, so a long critical section (one that waits for a driver
// call) costs sleepers no CPU. An uncontended std::mutex costs two calls into glibc per
// lock/unlock pair, a visible share of a hot path measured in instructions (the cudaMallocAsync
// backend takes four locks per alloc+free pair; the native backend's arena lock is one of these,
// taken once by an allocation and once by a free).
//
// Note [Unlock without a read-modify-write]
// An atomic read-modify-write (lock cmpxchg, xchg) costs about 5 ns on the build machine and ~6 ns
// on the GPU machine's CPU, and a native cache-hit pair did four of them (lock and unlock, twice):
// removing the two of unlock took the sim pair from 57 to 47 ns. So on Linux unlock() is: if the
// word says 1 (no sleeper), a plain release store of 0; else exchange(0) and a futex wake. The
// load and the store are not one atomic step: a waiter may mark the word 2 in between, and the
// store then erases the mark. If that waiter's futex wait had not yet compared the word, the
// compare sees 0 and it retries at once; if the unlocker was interrupted between its load and
// its store long enough for the waiter to fall asleep, no wake comes. Waiters therefore sleep at
// most `max_sleep` (1 ms) before they look again, so a lost wake-up costs that one waiter up to
// 1 ms — it needs an interrupt inside a two-instruction window while another thread is going to
// sleep on the same lock, so it is rare, and nothing can deadlock. Long holds (a cudaMalloc under
// an arena lock) cost a sleeper one futex return per millisecond. The wait and the wake are raw
// futex calls: libstdc++'s atomic::notify_one skips the wake when its own waiter count (kept by
// atomic::wait) says nobody waits, so it would not wake a raw futex sleeper. Elsewhere the lock
// keeps exchange-based unlock and atomic::wait, which lose no wake-up.
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
#if defined(__linux__)
    if (state_.load(std::memory_order_relaxed) == 1) [[likely]] {
      state_.store(0, std::memory_order_release);
      return;
    }
    unlock_contended();
#else
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
#endif
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
    while (state_.exchange(2, std::memory_order_acquire) != 0) sleep_while_contended();
  }

#if defined(__linux__)
  static constexpr long max_sleep_ns = 1'000'000;  // Note [Unlock without a read-modify-write]

  std::uint32_t* word() noexcept { return reinterpret_cast<std::uint32_t*>(&state_); }
  void sleep_while_contended() noexcept {
    const timespec timeout{0, max_sleep_ns};
    // Returns at once unless the word is still 2; EINTR and ETIMEDOUT just mean "look again".
    (void)syscall(SYS_futex, word(), FUTEX_WAIT_PRIVATE, 2u, &timeout, nullptr, 0);
  }
  /// Out of line: keeps the syscall out of the callers' hot code.
  [[gnu::noinline, gnu::cold]] void unlock_contended() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) {
      (void)syscall(SYS_futex, word(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }
#else
  void sleep_while_contended() noexcept { state_.wait(2, std::memory_order_relaxed); }
#endif

  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                std::atomic<std::uint32_t>::is_always_lock_free);
  std::atomic<std::uint32_t> state_{0};
};

}  // namespace streampool::core
