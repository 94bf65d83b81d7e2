// streampool/graph.hpp — CUDA graph capture: identifiers and routing for private memory pools
// (docs/pytorch-compatibility.md §3), and capture_scope / captured_graph, the RAII way to capture a stream's work into a
// graph whose allocations come from a private pool. Allocations made while a filter of an active
// begin_allocate_to_pool() matches go to that pool; its memory stays reserved while any graph
// captured into it may replay. Rules and examples: docs/graph-capture.md.
#pragma once

#include "streampool/export.h"

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "streampool/driver.hpp"

namespace streampool {

/// Identifier of a private memory pool (docs/pytorch-compatibility.md §3.1). {0,0} means "no pool" (the default pools).
/// User-created ids (create_pool_id) are {0, n}; ids made for a graph without a pool are {n, 0}.
struct STREAMPOOL_API mempool_id {
  std::uint64_t first = 0;
  std::uint64_t second = 0;
  friend constexpr bool operator==(mempool_id, mempool_id) = default;
  friend constexpr auto operator<=>(mempool_id, mempool_id) = default;
  [[nodiscard]] constexpr bool is_default() const noexcept { return first == 0 && second == 0; }
};

/// Where a private pool's segments come from instead of cudaMalloc / cudaFree, as for a
/// torch.cuda.MemPool with an allocator of its own (a CUDAPluggableAllocator, ...). `allocate`
/// returns nullptr when it has no memory (the pool's allocation then goes on down the OOM ladder)
/// and otherwise memory aligned to `alignment` bytes (else the allocation fails with an error);
/// `deallocate` gets each pointer `allocate` returned, once, with the same bytes and device (when
/// it throws, the native backend reports it and keeps the segment cached; the cudaMallocAsync
/// backend keeps the block for a later empty_cache). Both run under the allocator's locks: they
/// must not call back into the allocator. Segments from a provider are never expandable.
struct STREAMPOOL_API segment_provider {
  static constexpr std::size_t alignment = 256;  ///< what cudaMalloc guarantees
  std::string name;  ///< for error messages
  std::function<void*(std::size_t bytes, int device, stream_t stream)> allocate;
  std::function<void(void* ptr, std::size_t bytes, int device, stream_t stream)> deallocate;
};

/// Options of a private pool, as torch.cuda.MemPool(no_split=..., use_on_oom=...) sets them
/// (docs/pytorch-compatibility.md §3.6, Note [Pool options] in src/core/allocator.cpp).
struct STREAMPOOL_API pool_options {
  /// Blocks of the pool are handed out whole, never split (one allocation per segment).
  bool no_split = false;
  /// A default-pool allocation that is about to fail with out of memory may take a free block of
  /// this pool (on its stream; no new memory), after every other step of the OOM ladder.
  bool use_on_oom = false;
  /// New segments of the pool come from here (null: from the device, as for any pool). Segments
  /// obtained earlier go back to where they came from.
  std::shared_ptr<const segment_provider> provider;
  /// New segments of the pool are VMM (expandable) segments whatever expandable_segments says, so
  /// that the pool can sleep (device_pools::sleep; docs/sleep-wake.md). Native backend only; a
  /// pool with a provider takes its segments from the provider, which cannot sleep.
  bool sleepable = false;
  /// Bytes per page of the pool's large expandable (VMM) segments, rounded up to the mapping unit
  /// (2 MiB or the device's VMM granularity); at most 16 TiB. 0: 64 MiB for a sleepable pool (or
  /// large_segment_size_mb when larger), large_segment_size_mb otherwise. A discard wake maps one
  /// page at a time, so bigger pages wake faster and cost at most one partly used page per stream
  /// of the pool (Note [Pages of a private pool] in src/native/expandable.hpp). Applies to
  /// segments reserved after it is set; native backend only (cudaMallocAsync refuses a non-zero one).
  std::size_t page_bytes = 0;
  friend bool operator==(const pool_options&, const pool_options&) = default;
};

/// Decides, for the stream of an allocation, whether it goes to the pool being recorded.
/// Called under the allocator's lock: keep it cheap and do not call back into the allocator.
using stream_filter = std::function<bool(stream_t)>;

class allocator;  // streampool/allocator.hpp

/// How a capture_scope captures and instantiates.
struct STREAMPOOL_API capture_options {
  /// cudaStreamCaptureMode. `global` (the default, as in PyTorch) makes any thread's unsafe CUDA
  /// call during the capture an error; the allocators never make one while a capture is underway.
  capture_mode mode = capture_mode::global;
  /// Instantiate with cudaGraphInstantiateFlagAutoFreeOnLaunch: needed to relaunch a graph whose
  /// graph-owned allocations (cudaMallocAsync called directly in the captured work; streampool's
  /// backends make none) outlive a launch. See docs/graph-capture.md.
  bool auto_free_on_launch = false;
  /// Device of the stream and of the pool; -1 = the calling thread's current device.
  int device = -1;
};

/// A captured, instantiated graph and the private pool its allocations live in. Movable, not
/// copyable. Destroying it (or reset()) destroys the executable and the graph and drops its use
/// of the pool, so that once no graph can replay, the pool's memory is released by the next
/// allocator::empty_cache() (docs/pytorch-compatibility.md §3.1). The allocator must outlive it.
class STREAMPOOL_API captured_graph {
 public:
  captured_graph() noexcept = default;
  captured_graph(captured_graph&& other) noexcept;
  captured_graph& operator=(captured_graph&& other) noexcept;
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;
  ~captured_graph();

  /// Replays the graph on `stream` (cudaGraphLaunch). Graphs sharing a pool must be replayed in
  /// capture order and never concurrently.
  /// @throws error if empty; cuda_error if the launch fails
  void launch(stream_t stream) const;
  /// Destroys the executable and the graph and releases the pool use now; the object becomes empty.
  void reset() noexcept;

  /// The private pool: pass it to another capture_scope to share the pool. Default id when empty.
  [[nodiscard]] mempool_id pool() const noexcept { return pool_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] graph_t native_graph() const noexcept { return graph_; }
  [[nodiscard]] graph_exec_t native_exec() const noexcept { return exec_; }
  [[nodiscard]] explicit operator bool() const noexcept { return exec_ != nullptr; }

 private:
  friend class capture_scope;
  captured_graph(allocator& alloc, int device, graph_t graph, graph_exec_t exec, mempool_id pool) noexcept
      : alloc_(&alloc), device_(device), graph_(graph), exec_(exec), pool_(pool) {}

  allocator* alloc_ = nullptr;
  int device_ = 0;
  graph_t graph_ = nullptr;
  graph_exec_t exec_ = nullptr;
  mempool_id pool_;
};

/// Captures the work submitted to `stream` between construction and end() into a graph, with
/// every allocation made meanwhile on `stream` — or on a side stream joined to this capture —
/// coming from a private pool (docs/pytorch-compatibility.md §3.2). Construction calls begin_allocate_to_pool and then
/// begins the stream capture; end() joins the side streams that allocated back into `stream`,
/// ends the capture, ends allocate-to-pool and instantiates. If end() is never reached (an
/// exception, e.g. out_of_memory during the capture), the destructor ends the capture, discards
/// the graph, ends allocate-to-pool and releases the pool: the allocator stays usable.
class STREAMPOOL_API capture_scope {
 public:
  /// Captures into a fresh private pool (allocator::create_pool_id()).
  /// @throws error if `stream` is a default stream (nullptr, cudaStreamLegacy, cudaStreamPerThread)
  /// @throws cuda_error if the capture cannot begin (e.g. the stream is already capturing)
  capture_scope(allocator& alloc, stream_t stream, capture_options options = {});
  /// Captures into `pool`, shared with the graphs captured into it before (pass their pool()).
  /// @throws error also if `pool` is the default id or is being recorded to by another capture
  capture_scope(allocator& alloc, stream_t stream, mempool_id pool, capture_options options = {});
  ~capture_scope();
  capture_scope(const capture_scope&) = delete;
  capture_scope& operator=(const capture_scope&) = delete;

  /// Ends the capture and instantiates the graph. On failure everything is undone first.
  /// @throws error if called twice; cuda_error if the capture was invalidated (an illegal call
  ///         during it) or a side stream was not joined back; out_of_memory if instantiation
  ///         cannot reserve the graph's memory
  [[nodiscard]] captured_graph end();

  [[nodiscard]] mempool_id pool() const noexcept { return pool_; }
  [[nodiscard]] stream_t stream() const noexcept { return stream_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The driver's id of this capture sequence (stream_capture_info); 0 once ended.
  [[nodiscard]] std::uint64_t capture_id() const noexcept;
  /// True between a successful construction and end().
  [[nodiscard]] bool active() const noexcept { return capturing_; }

 private:
  struct shared_state;  // the capture id and the side streams, shared with the stream filter

  void join_side_streams();
  /// Undoes whatever is still open (capture, routing, pool use, event); never throws.
  void cleanup() noexcept;

  allocator* alloc_;
  driver* driver_;
  stream_t stream_;
  mempool_id pool_;
  capture_options options_;
  int device_ = 0;
  std::shared_ptr<shared_state> state_;
  event_t join_event_ = nullptr;
  bool routing_ = false;    ///< begin_allocate_to_pool done, end_allocate_to_pool not yet
  bool capturing_ = false;  ///< stream_begin_capture done, stream_end_capture not yet
  bool pool_held_ = false;  ///< the pool use taken by begin is ours (not yet a graph's)
};

}  // namespace streampool
