// streampool/allocator.hpp — the one allocator interface both backends implement.
//
// Public functions are non-virtual: they resolve the device, validate arguments and then call the
// private virtual do_* hooks of the backend (NVI), so checks live in one place. Build one with
// make_allocator(); the `backend` key of the config picks the implementation.
#pragma once

#include "streampool/export.h"

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"
#include "streampool/graph.hpp"
#include "streampool/pools.hpp"
#include "streampool/stats.hpp"

namespace streampool {

/// Pass as `device` to mean the calling thread's current device.
inline constexpr int current_device = -1;

/// Requests of this size or more are refused outright (docs/pytorch-compatibility.md §2.1: 1 EiB).
inline constexpr std::size_t max_request_bytes = std::size_t{1} << 60;

class STREAMPOOL_API allocator {
 public:
  virtual ~allocator();
  allocator(const allocator&) = delete;
  allocator& operator=(const allocator&) = delete;

  /// Allocates `bytes` for use on `stream` (nullptr = legacy default stream) of `device`.
  /// The memory is 512-byte aligned and may be reused by the same stream at once after
  /// deallocate(); other streams reuse it only after the work recorded with record_stream is done.
  /// @throws error for size 0 or a device out of range
  /// @throws out_of_memory when the request cannot be served (message explains why)
  /// @throws cuda_error when the driver fails for another reason
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream = nullptr, int device = current_device);

  /// Returns memory from allocate(). nullptr is a no-op.
  /// @throws error for a pointer this allocator did not hand out (or already freed); state unchanged
  void deallocate(void* ptr);

  /// Marks `ptr` as used by `stream`: its memory is not reused until the work submitted to
  /// `stream` before deallocate() has completed. Same as the allocation stream: no effect.
  /// @throws error for a pointer this allocator did not hand out
  void record_stream(void* ptr, stream_t stream);

  /// Returns all cached, unused memory of every device to the driver (after synchronising the
  /// events it waits on). Live allocations and memory of pools graphs may replay are kept.
  void empty_cache();

  [[nodiscard]] memory_stats stats(int device = current_device) const;
  void reset_peak_stats(int device = current_device);
  void reset_accumulated_stats(int device = current_device);

  /// Segments and blocks of every device, and the trace if recording (see record_history()).
  [[nodiscard]] memory_snapshot snapshot() const;

  /// Turns the allocation trace ring buffer on (keeping the last `max_entries`) or off (clears it).
  void record_history(bool enabled, std::size_t max_entries = 1u << 20);
  /// Entries of the trace ring buffer of `device`, oldest first.
  [[nodiscard]] std::vector<trace_entry> trace(int device = current_device) const;
  /// Makes `listener` (an empty function: none) receive every segment event of every device from
  /// now on, with history on or off: the entries record_history() would keep with action
  /// segment_alloc, segment_free (a whole segment obtained / given back), segment_map and
  /// segment_unmap (a range of an expandable segment), at the moment the trace records them: a
  /// segment_free just before the memory goes back to the driver, the others just after the
  /// change (Note [Segment listener] in src/core/trace_ring.hpp). It is called on the allocating
  /// thread with the device's lock held, so it must not call this allocator; what it throws is
  /// passed to warn() and dropped. Replaces the previous listener.
  /// @throws error when the allocator has no segment events of its own (a wrapper of another)
  void set_segment_listener(segment_listener listener);

  /// Caps the memory this allocator may obtain from `device` at fraction × total memory.
  /// @throws error unless 0 <= fraction <= 1
  void set_memory_fraction(double fraction, int device = current_device);
  [[nodiscard]] double memory_fraction(int device = current_device) const;

  /// A fresh pool id {0, n} (graph_pool_handle()).
  [[nodiscard]] static mempool_id create_pool_id() noexcept;
  /// The private pools of `device`: every pool operation (the calls below go through it).
  /// @throws error for a device out of range, or an allocator without private pools of its own
  [[nodiscard]] device_pools& pools(int device = current_device) const;
  /// Routes allocations whose stream satisfies `filter` to private pool `pool` (created on first
  /// use; a further begin on an existing pool increments its use count).
  /// @throws error if `pool` is the default id or is already being recorded to
  void begin_allocate_to_pool(mempool_id pool, stream_filter filter, int device = current_device);
  /// Stops routing to `pool`. @throws error if it is not being recorded to.
  void end_allocate_to_pool(mempool_id pool, int device = current_device);
  /// Drops one use of `pool`; at zero its free memory is released by the next empty_cache().
  void release_pool(mempool_id pool, int device = current_device);
  /// Sets the options of private pool `pool` (existing: begun and not forgotten), as
  /// torch.cuda.MemPool's no_split / use_on_oom do. no_split applies to blocks handed out from now
  /// on. @throws error if `pool` is the default id or unknown on `device`
  void set_pool_options(mempool_id pool, const pool_options& options, int device = current_device);
  /// The options of private pool `pool`. @throws error if `pool` is the default id or unknown
  [[nodiscard]] pool_options get_pool_options(mempool_id pool, int device = current_device) const;
  /// Allocates exactly [ptr, ptr + bytes) of private pool `pool`: memory of the pool that is free
  /// now (restoring a checkpoint of the pool, as PyTorch's CUDA graph trees do after a freed
  /// allocation: docs/integrations/pytorch.md). Returns `ptr`; free it with deallocate().
  /// @throws error when `bytes` is 0 or not a multiple of 512, when the range is not free memory
  ///         of `pool` on `device` (nothing changed), or when the backend cannot (cudaMallocAsync,
  ///         debug_checks)
  [[nodiscard]] void* allocate_at(void* ptr, std::size_t bytes, mempool_id pool, int device = current_device);

  /// Changes settings while the allocator runs, as torch.cuda.memory._set_allocator_settings does:
  /// `text` in config syntax, with the keys of key_changes_at_run_time() only, applied by
  /// apply_settings() (max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold
  /// return to their defaults unless given). Allocations from now on follow the new values; existing
  /// blocks and segments stay as they are. Warnings of the change go to warn().
  /// @throws config_error for a bad string or a key that cannot change at run time (nothing changed)
  void set_settings(std::string_view text);
  /// The config in effect now: config() with every set_settings() change (sources `runtime`).
  [[nodiscard]] allocator_config settings() const;

  /// The config the allocator was made with (settings() has the changes made since).
  [[nodiscard]] const allocator_config& config() const noexcept { return config_; }
  [[nodiscard]] driver& device_driver() const noexcept { return *driver_; }
  /// "native" or "cudaMallocAsync".
  [[nodiscard]] std::string_view backend_name() const noexcept { return to_string(config_.backend); }

 protected:
  allocator(allocator_config config, std::shared_ptr<driver> drv);

 private:
  [[nodiscard]] int resolve_device(int device) const;

  virtual void* do_allocate(int device, std::size_t bytes, stream_t stream) = 0;
  virtual void do_deallocate(void* ptr) = 0;
  virtual void do_record_stream(void* ptr, stream_t stream) = 0;
  virtual void do_empty_cache() = 0;
  [[nodiscard]] virtual memory_stats do_stats(int device) const = 0;
  virtual void do_reset_peak_stats(int device) = 0;
  virtual void do_reset_accumulated_stats(int device) = 0;
  [[nodiscard]] virtual memory_snapshot do_snapshot() const = 0;
  virtual void do_record_history(bool enabled, std::size_t max_entries) = 0;
  [[nodiscard]] virtual std::vector<trace_entry> do_trace(int device) const = 0;
  /// set_segment_listener(): nullptr removes it. The default refuses (allocators that are not
  /// streampool's backends).
  virtual void do_set_segment_listener(std::shared_ptr<const segment_listener> listener);
  virtual void do_set_memory_fraction(int device, double fraction) = 0;
  [[nodiscard]] virtual double do_memory_fraction(int device) const = 0;
  /// pools(): the private pools of `device` (in range), owned by the allocator; nullptr (the
  /// default) for an allocator without private pools of its own (Note [Pool seam]).
  [[nodiscard]] virtual device_pools* do_pools(int device) const;
  /// set_settings(): makes the backend follow `next` (the runtime keys of it); `text` is the change
  /// as given (a wrapper passes it on). Called with set_settings serialised; must not throw after
  /// changing anything. The default refuses (allocators that are not streampool's backends).
  virtual void do_set_settings(std::string_view text, const allocator_config& next);

  allocator_config config_;
  /// Note [Settings changed at run time]: the config with the changes (settings()); guarded.
  struct settings_state;
  std::unique_ptr<settings_state> settings_;
  std::shared_ptr<driver> driver_;
  int device_count_ = 0;
};

/// Receives streampool's warnings (config keys the backend ignores, features that fall back).
using warning_handler = void (*)(std::string_view message);
/// Replaces the process-wide warning handler; nullptr restores the default, which prints each
/// distinct message once to stderr prefixed "streampool: warning: ". Returns the previous handler.
STREAMPOOL_API warning_handler set_warning_handler(warning_handler handler) noexcept;
/// Sends `message` to the current handler.
STREAMPOOL_API void warn(std::string_view message);

/// Builds the backend named by `config.backend` on `drv`. The config's warnings go to the
/// warning handler.
/// @throws error if the backend cannot run on this driver (e.g. no memory-pool support)
[[nodiscard]] STREAMPOOL_API std::unique_ptr<allocator> make_allocator(allocator_config config, std::shared_ptr<driver> drv);

/// make_allocator(config_from_env(), make_cuda_driver()).
[[nodiscard]] STREAMPOOL_API std::unique_ptr<allocator> make_allocator();

}  // namespace streampool
