// pool_sleep.hpp — sleep and wake of one pool's memory in the native backend (docs/sleep-wake.md):
// the record of a sleeping pool (which pages of which segments went back to the driver, where its
// live bytes were copied), and pool_sleeper, which does the copies on its own streams and unmaps
// and maps the pages of expandable segments at the same addresses. Which pool, and refusing its
// allocations while it sleeps, are device_state's (device_sleep.cpp). Device mutex held, and the
// lock of every arena handed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "native/block.hpp"
#include "native/device_context.hpp"
#include "native/segment_counters.hpp"
#include "native/sleep_windows.hpp"
#include "streampool/driver.hpp"
#include "streampool/pools.hpp"

namespace streampool::native {

class stream_arena;

/// One pool's sleep: kept by device_state while the pool sleeps, and while awake when it keeps
/// its pinned backup (sleep_options::keep_backup).
struct sleep_record {
  bool asleep = false;
  sleep_options options;
  std::vector<sleeping_segment> segments;
  std::vector<backup_run> runs;
  void* backup = nullptr;           ///< pinned host memory (host_alloc), backup_capacity bytes
  std::size_t backup_capacity = 0;
  std::size_t released_bytes = 0;
  std::size_t held_bytes = 0;
  std::size_t offloaded_bytes = 0;

  [[nodiscard]] pool_sleep_state state() const noexcept;
};

class pool_sleeper {
 public:
  /// Copies run on `copy_streams` streams of the device, in chunks of at most `chunk_bytes`, a
  /// window of `window_bytes` (sleep_options::pipeline_bytes, when set) ahead of the unmapping or
  /// behind the mapping (Note [Sleep pipeline]).
  static constexpr std::size_t copy_streams = 4;
  static constexpr std::size_t chunk_bytes = std::size_t{64} << 20;
  static constexpr std::size_t window_bytes = copy_streams * chunk_bytes;

  pool_sleeper(device_context& device, segment_counters& counters) noexcept;
  ~pool_sleeper();
  pool_sleeper(const pool_sleeper&) = delete;
  pool_sleeper& operator=(const pool_sleeper&) = delete;

  /// Puts the memory of `arenas` (one pool's, all locked) to sleep into `rec` (awake, perhaps
  /// holding a kept backup). All or nothing (Note [Sleep all or nothing] in pool_sleep.cpp).
  /// @throws error for a segment that cannot sleep (nothing changed); cuda_error / out_of_memory
  void sleep(sleep_record& rec, const std::vector<stream_arena*>& arenas, mempool_id pool,
             const sleep_options& options);
  /// Maps the pages of `rec` again and copies its backup back; `rec` asleep.
  /// @throws out_of_memory / cuda_error (the pool stays asleep, its backup kept)
  void wake(sleep_record& rec, mempool_id pool);
  /// Frees what a record holds on the host (the pool is awake, or the allocator goes away).
  void drop_backup(sleep_record& rec) noexcept;
  /// Allocator teardown of a pool still asleep: its held pages go back, its backup is freed (the
  /// reservations themselves go with their segments).
  void release_at_exit(sleep_record& rec) noexcept;

  /// True when `a` holds a segment that sleeps (empty_cache leaves such an arena alone).
  [[nodiscard]] static bool asleep(const stream_arena& a) noexcept;

 private:
  /// Waits for every stream that may still use the memory of `arenas`: each arena's stream, the
  /// record_stream uses of its allocated blocks and its outstanding events (Note [Sleep after
  /// queued work]). @throws cuda_error
  void wait_for_uses(const std::vector<stream_arena*>& arenas);
  /// Issues the copies of pieces [w.first_run, w.end_run) between the device and `backup`
  /// (`to_host`), in chunks, round robin over the copy streams; the first failure, if any.
  drv_result issue_copies(const std::vector<backup_run>& pieces, const sleep_window& w, void* backup, bool to_host) noexcept;
  /// Records event slot `slot` on every copy stream / waits for the events of `slot`.
  drv_result record_slot(std::size_t slot) noexcept;
  drv_result wait_slot(std::size_t slot) noexcept;
  /// Waits for every copy stream; the first failure, if any.
  drv_result drain() noexcept;
  /// Unmaps and releases the pages [from, to) of `s`; the index of the first page it could not
  /// unmap (`to` when all went; `*failure` says which call refused and why).
  std::size_t unmap_pages(sleeping_segment& s, std::size_t from, std::size_t to, std::string* failure) noexcept;
  /// Maps the pages [from, to) of `s` again (held handles, else new ones) with access.
  /// @throws out_of_memory / cuda_error after unmapping what this call mapped
  void map_pages(sleeping_segment& s, std::size_t from, std::size_t to);
  /// The text of a failed copy call `r` of sleep (`to_host`) or wake.
  std::string copy_failure(const drv_result& r, const char* call, bool to_host) const;
  /// A wake that cannot finish: the pages of `s` it mapped go back (new handles released, held
  /// ones kept), so the pool is asleep as before.
  void unmap_again(sleeping_segment& s) noexcept;
  /// Statistics and trace of the pages [0, count) of `s` going back (`mapped` false) or coming.
  void count_pages(const sleeping_segment& s, std::size_t count, bool mapped, mempool_id pool) noexcept;
  /// Creates the copy streams and their two slots of events, once. @throws cuda_error
  void ensure_streams();

  device_context* device_;
  driver* drv_;
  int index_;
  segment_counters* counters_;
  std::vector<stream_t> streams_;
  std::vector<event_t> events_;  ///< two slots of copy_streams events: Note [Sleep pipeline]
};

}  // namespace streampool::native
