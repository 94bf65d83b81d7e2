// stream_ordered_pool.hpp — the stream-ordered memory pool (cudaMemPool) one device of the
// cudaMallocAsync backend allocates from: the device's default pool or a dedicated one, set up for
// caching on construction (Note [Pool setup] in stream_ordered_pool.cpp), its attributes read for
// the statistics, trimmed, and handed back as found at teardown (a dedicated pool is destroyed).
// Not thread-safe: the device mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "async/async_accounting.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"

namespace streampool::async {

/// The total memory of `device`, read once its support for stream-ordered pools is checked.
/// @throws error when the device has no memory-pool support (Note [Pool setup]); cuda_error when
/// its properties cannot be read
[[nodiscard]] std::size_t memory_of_pool_capable_device(driver& drv, int device);

class stream_ordered_pool {
 public:
  /// Takes the default pool of `device` (`kind` device_default) or creates one, and sets it up for
  /// caching (Note [Pool setup]). @throws cuda_error when a pool call fails (the pool is left as
  /// it was found, a created one destroyed)
  stream_ordered_pool(driver& drv, int device, async_pool_kind kind);
  /// Destroys a dedicated pool (its memory goes with it); the default pool stays.
  ~stream_ordered_pool();
  stream_ordered_pool(const stream_ordered_pool&) = delete;
  stream_ordered_pool& operator=(const stream_ordered_pool&) = delete;

  [[nodiscard]] mempool_t handle() const noexcept { return pool_; }

  /// Reads the pool's ReservedMemCurrent / ReservedMemHigh into `accounting`, each plus
  /// `outside_bytes` (memory reserved outside the pool: the private pools' blocks). A failed read
  /// keeps the old value (status form).
  void sample_reserved(async_accounting& accounting, std::size_t outside_bytes) const noexcept;
  /// Sets the pool's ReservedMemHigh and UsedMemHigh back to their current values.
  void reset_peaks() noexcept;
  /// The pool's UsedMemCurrent; false when it cannot be read.
  [[nodiscard]] bool used_bytes(std::uint64_t* out) const noexcept;
  /// pool_trim_to(0), status form.
  drv_result trim() noexcept;
  /// pool_trim_to(0). @throws cuda_error naming the device
  void trim_or_throw();
  /// Puts back the release threshold the default pool had before set-up raised it (Note
  /// [Allocator teardown] in async_device.cpp); nothing for a dedicated pool.
  void restore_release_threshold() noexcept;

 private:
  driver* driver_;
  int device_;
  mempool_t pool_ = nullptr;
  bool dedicated_ = false;
  std::uint64_t previous_release_threshold_ = 0;  ///< of the default pool, restored at teardown
};

}  // namespace streampool::async
