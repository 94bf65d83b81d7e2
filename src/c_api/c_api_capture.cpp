// c_api_capture.cpp — the C API's guard against CUDA graph captures nobody announced to streampool
// (PyTorch's CUDAPluggableAllocator route): detection by the capture status of each call's stream,
// a private pool per such capture, its routing ended once the capture is over and its pool
// released once the driver reports the graph destroyed. Declared in c_api_capture.hpp.
#include "c_api/c_api_capture.hpp"

#include <cstdio>
#include <new>
#include <string>

#include "capture/capture_filter.hpp"
#include "streampool/errors.hpp"

namespace streampool::c_api_impl {

// Note [Captures the C API was not told about]
// PyTorch tells a pluggable allocator nothing about a capture: torch.cuda.graph's
// beginAllocateToPool / releasePool reach only allocators that registered those hooks in C++,
// which a .so loaded by CUDAPluggableAllocator cannot. Left alone, an allocation inside the
// capture that misses the cache calls cudaMalloc, which a global-mode capture refuses (and is
// invalidated by), and one that hits the cache (or any allocation in relaxed mode) takes a block
// of the general pool, whose address the graph bakes in while eager code may get the block again
// once the tensor is freed. So each streampool_alloc first asks the driver for the capture status
// of its stream (one cudaStreamGetCaptureInfo; the legacy default stream, which never captures, is
// not asked), and so does each streampool_free on the cudaMallocAsync backend, whose cudaFreeAsync
// of memory allocated before the capture, on a stream of the capture, would become a free node of
// memory the graph does not own (the backend parks such a free once the routing is open). A native
// free makes no driver call a capture could refuse and cannot hand the graph an address, so it is
// not checked. A capture no tracked entry covers gets:
//  - a private pool (create_pool_id) and a recording for it whose stream filter accepts any stream
//    in that capture sequence (its capture id: side streams joined through events included, as in
//    Note [Capture filter] of capture_scope.cpp), opened BEFORE the call goes on, so the call and
//    every later one of the capture are routed there by the backend's capture router, which also
//    keeps cudaMalloc legal (relaxed mode) and parks the frees it must not complete meanwhile;
//  - a callback tied to the captured graph's lifetime (driver::capture_on_graph_release: a CUDA
//    user object the graph retains), which fires once the graph and every executable made from
//    it are destroyed, or at once if the capture ends without a graph.
// Lazily, at the first C API call that finds a tracked capture over (its first stream is no longer
// in its capture sequence), the recording is ended: later allocations go to the general pool. The
// pool keeps its use until the callback has fired: blocks freed during the capture are still free
// blocks of the pool, and replays of the graph write to them, so they must stay out of the general
// pool for as long as the graph can replay (freeing every block is not enough: a captured step
// whose tensors all die inside the capture leaves the pool empty at once). When the graph is gone
// the next C API call releases the pool; its memory goes back to the device at the next
// empty_cache (or when an allocation would otherwise fail), as for any released pool. An
// invalidated capture has no capture id (CUDA gives one only while a capture is active), so the
// filter (capture::capture_sequence) keeps it by the streams it saw: its allocations stay in its
// pool, where cudaMalloc stays legal, until the capture ends. One first seen invalidated never
// yields a graph: it is tracked by its stream, and its pool is released as soon as its routing
// ends. When the driver cannot tie a callback to the graph, the pool is kept until
// the allocator is shut down (warned once). Every call, checked or not, first ends what is over
// (two relaxed loads when nothing is tracked). The cost outside captures is the driver query,
// measured in docs/benchmarks-history.md ("C API pair with the capture check").

// Note [Relaxed frees on the cudaMallocAsync backend]
// The stream check cannot see a capture that has not yet touched an allocation's stream, and a
// captured step often starts with a free on another stream: optimizer.zero_grad(set_to_none=True)
// frees gradients allocated during warm-up on a side stream. The native backend makes no driver
// call on such a free; the cudaMallocAsync backend calls cudaFreeAsync on that stream, which CUDA
// refuses while a global capture is open, invalidating it (Note [Relaxed uncaptured calls] in
// docs/graph-capture.md). So streampool_free runs the cudaMallocAsync backend's free with the
// thread in relaxed capture mode (two cudaThreadExchangeStreamCaptureMode calls per free). The
// free itself is sound: the memory came from the stream-ordered pool, which the capture's own
// allocations (graph memory) never draw from; a graph that read the tensor before it was freed
// is the caller's business, as with any allocator. Frees on a stream of the capture are parked by
// the backend instead, once the stream check has opened the capture's routing.

/// A capture found on a call's stream. `routing` is under the guard's mutex; `graph_gone` is set
/// by the driver's callback, on any thread.
struct unannounced_capture {
  /// `probe`: the stream it was first seen on, asked whether the capture is over; `id` its capture
  /// id (0 when first seen invalidated: CUDA gives none then).
  unannounced_capture(driver& drv, stream_t probe, std::uint64_t id) : sequence(drv, probe, id) {}
  int device = 0;
  capture::capture_sequence sequence;  ///< the recording's stream filter
  mempool_id pool;
  bool routing = true;
  std::atomic<bool> graph_gone{false};
  std::shared_ptr<capture_guard_signals> signals;

  /// The stream filter of the recording: `stream` takes part in this capture sequence.
  [[nodiscard]] bool accepts(stream_t stream) noexcept { return sequence.accepts(stream); }
  void mark_graph_gone() noexcept {
    if (!graph_gone.exchange(true, std::memory_order_acq_rel)) {
      signals->released.fetch_add(1, std::memory_order_relaxed);
    }
  }
};

namespace {

/// driver::capture_on_graph_release's callback: `arg` is a heap-held reference to the capture.
void on_graph_release(void* arg) noexcept {
  auto* token = static_cast<std::shared_ptr<unannounced_capture>*>(arg);
  (*token)->mark_graph_gone();
  delete token;
}

std::string pointer_text(const void* ptr) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%p", ptr);
  return buffer;
}

constexpr const char* announced_routes =
    "A capture that streampool is told about needs none of this: use streampool.install() with the "
    "streampool C++ extension for PyTorch (torch.cuda.graph then calls begin_allocate_to_pool), or in C++ "
    "allocator::begin_allocate_to_pool / streampool::capture_scope (docs/graph-capture.md)";

}  // namespace

capture_guard::capture_guard() : signals_(std::make_shared<capture_guard_signals>()) {}

capture_guard::~capture_guard() = default;  // callbacks still held by graphs keep signals_ alive

std::size_t capture_guard::tracked() const {
  const std::lock_guard lock(mutex_);
  return captures_.size();
}

void capture_guard::check_stream(allocator& alloc, int device, stream_t stream) {
  capture_info info;
  if (!alloc.device_driver().stream_capture_info(stream, &info).ok() || info.status == capture_status::none) {
    return;  // not capturing (a stream the driver does not know fails in the call itself)
  }
  open(alloc, device, stream, info);
}

void capture_guard::open(allocator& alloc, int device, stream_t stream, capture_info info) {
  driver& drv = alloc.device_driver();
  if (device < 0 && !drv.get_device(&device).ok()) device = 0;
  drv_result attached;
  {
    const std::lock_guard lock(mutex_);
    if (!open_locked(alloc, device, stream, info, attached)) return;
  }
  if (!attached.ok()) {  // warned outside the lock: the handler is the user's code
    warn("streampool: the driver cannot tie a callback to a CUDA graph's destruction (" + drv.describe(attached) +
         "), so the private pools of captures streampool was not told about keep their memory until "
         "streampool_shutdown. " + std::string(announced_routes));
  }
}

bool capture_guard::open_locked(allocator& alloc, int device, stream_t stream, capture_info info,
                                drv_result& attached) {
  driver& drv = alloc.device_driver();
  for (const auto& tracked : captures_) {
    // By id while active; an invalidated capture has no id, its streams are known to the sequence.
    if (tracked->routing && tracked->device == device && tracked->sequence.accepts(stream, info)) return false;
  }
  auto capture = std::make_shared<unannounced_capture>(drv, stream, info.id);
  capture->device = device;
  capture->pool = allocator::create_pool_id();
  capture->signals = signals_;
  try {
    captures_.reserve(captures_.size() + 1);
    alloc.begin_allocate_to_pool(
        capture->pool, [capture](stream_t s) { return capture->accepts(s); }, device);
  } catch (const std::exception& e) {
    throw error("streampool: stream " + pointer_text(stream) + " of device " + std::to_string(device) +
                " is capturing a CUDA graph (capture id " + std::to_string(info.id) +
                ") that streampool was not told about, and no private pool could be opened for it (" + e.what() +
                "), so the call was refused rather than let the capture use the general pool. " + announced_routes);
  }
  signals_->routing.fetch_add(1, std::memory_order_relaxed);
  captures_.push_back(capture);  // no throw: reserved above
  if (info.status != capture_status::active) {
    capture->mark_graph_gone();  // invalidated: no graph will ever replay it
    return true;
  }
  auto* token = new (std::nothrow) std::shared_ptr<unannounced_capture>(capture);
  attached = token == nullptr ? drv_result{status::out_of_memory, 0}
                              : drv.capture_on_graph_release(stream, &on_graph_release, token);
  if (!attached.ok()) delete token;  // never called back on failure: the pool is kept
  return true;
}

void capture_guard::sweep(allocator& alloc) {
  const std::lock_guard lock(mutex_);
  for (auto it = captures_.begin(); it != captures_.end();) {
    unannounced_capture& capture = **it;
    if (capture.routing && !capture.accepts(capture.sequence.origin())) {
      alloc.end_allocate_to_pool(capture.pool, capture.device);
      capture.routing = false;
      signals_->routing.fetch_sub(1, std::memory_order_relaxed);
    }
    if (!capture.routing && capture.graph_gone.load(std::memory_order_acquire)) {
      alloc.release_pool(capture.pool, capture.device);
      signals_->released.fetch_sub(1, std::memory_order_relaxed);
      it = captures_.erase(it);
      continue;
    }
    ++it;
  }
}

}  // namespace streampool::c_api_impl
