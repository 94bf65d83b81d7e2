// device_context.hpp — what the arenas and the segment source of one device share and read
// without the device mutex: the driver and device index, the config and size policy, the event
// pool, the trace ring, the device peaks, a few counters and the device's capture router (where a
// free made during a capture is parked). Owned by device_state (which outlives every arena and its
// segment source); nothing here knows the arenas' owner.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "capture/capture_router.hpp"
#include "core/event_pool.hpp"
#include "core/trace_ring.hpp"
#include "native/arena_stats.hpp"
#include "native/size_rounding.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"

namespace streampool::native {

class capture_reuse;
class stream_arena;
struct block;

/// The memory of a private pool: one arena per stream that allocated in it.
struct pool_arenas {
  std::vector<stream_arena*> arenas;
};

/// A private pool as the native backend keeps it: the capture router's record, with its arenas.
using private_pool = capture::private_pool<pool_arenas>;
/// The device's capture bookkeeping (src/capture): private pools holding arenas, parked frees
/// holding blocks (Note [Deferred frees during capture] in native_allocator.hpp).
using capture_router = capture::capture_router<pool_arenas, block*>;

struct device_context {
  /// `router` is device_state's: its recordings decide capture_underway(), and the arenas park
  /// the frees of a capture there.
  device_context(driver& driver_ref, int device, const allocator_config& config_ref, const size_policy& policy_ref,
                 capture_router& router)
      : drv(&driver_ref),
        index(device),
        config(&config_ref),
        policy(&policy_ref),
        events(driver_ref, device),
        captures(&router),
        cross_stream(config_ref.cross_stream_reuse) {}
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;

  /// True while any begin_allocate_to_pool is active on the device: no event queries, no frees.
  [[nodiscard]] bool capture_underway() const noexcept { return captures->underway(); }

  driver* drv;
  int index;
  const allocator_config* config;
  const size_policy* policy;
  core::event_pool events;
  core::trace_ring trace;
  device_peaks peaks;
  std::atomic<std::uint64_t> pending_events{0};  ///< outstanding events of all arenas
  std::atomic<std::uint64_t> gc_clock{0};        ///< large-pool searches while GC is on (docs/pytorch-compatibility.md §2.11)
  std::atomic<bool> gc_enabled{false};           ///< a fraction cap and a GC threshold are set
  capture_router* captures;  ///< parked frees (defer) and the capture-underway count
  /// The device mutex (device_state's), for release_lock_on_cudamalloc:True only (Note [Releasing
  /// the locks around cudaMalloc] in segment_source.cpp).
  std::mutex* device_mutex = nullptr;
  /// graph_capture_record_stream_reuse:True: notes the free markers of frees parked during a
  /// capture (Note [Reuse within a capture] in capture_reuse.hpp); nullptr otherwise. Atomic: the
  /// key can change at run time (Note [Settings changed at run time]) while frees read it.
  std::atomic<capture_reuse*> reuse{nullptr};
  /// cross_stream_reuse:True: the default pool's streams share one arena (docs/cross-stream-reuse.md)
  bool cross_stream;
};

}  // namespace streampool::native
