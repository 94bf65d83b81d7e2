// capture_scope.cpp — the RAII graph capture of graph.hpp: routes allocations of the capture (and
// of side streams joined to it) to a private pool, begins and ends the stream capture in the order
// PyTorch's CUDAGraph uses (docs/pytorch-compatibility.md §3.2), joins allocating side streams back before ending, and
// undoes everything if the capture does not reach end(). captured_graph: captured_graph.cpp.
// Layer: above the allocator facade (only public allocator calls and the driver), unlike the
// capture router beside it, which sits below the backends (docs/architecture.md).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "capture/capture_filter.hpp"
#include "streampool/allocator.hpp"
#include "streampool/errors.hpp"
#include "streampool/graph.hpp"

namespace streampool {

// Note [Capture filter]
// The private pool must receive the allocations of this capture sequence and of nothing else: of
// `stream`, and of every side stream that joined the capture by waiting on an event recorded in
// it (docs/pytorch-compatibility.md §3.2, test_cuda_graph_allocator_propagates_stream). Stream identity cannot say that;
// the driver's capture id can. The filter therefore asks stream_capture_info for the allocating
// stream and accepts it when it is in this scope's capture sequence (capture::capture_sequence,
// the rule the C API's filter shares): active with the scope's id, or invalidated and seen in it
// (the origin, or a side stream accepted while active). An invalidated capture has no id on CUDA
// (cudaStreamGetCaptureInfo gives one only while the capture is active; the H200 showed routings
// matched by id lost at the invalidation, and the general pool's cudaMalloc then refused by the
// global capture), so what the sequence saw stands in for it; the sim reports 0 too. The id is known only
// after stream_begin_capture, which comes after begin_allocate_to_pool (so nothing allocated by
// the capture can miss the pool), hence it is stored in an atomic that is 0 — match nothing —
// until then. The filter runs under the allocator's lock on any thread: it makes one driver call
// and touches only this shared state (never the allocator). It also remembers which side
// streams allocated, for Note [Joining side streams].
struct capture_scope::shared_state {
  shared_state(driver& drv, stream_t origin) : sequence(drv, origin) {}
  capture::capture_sequence sequence;  ///< the filter, and the side streams it accepted
};

namespace {

bool is_default_stream(stream_t stream) noexcept { return reinterpret_cast<std::uintptr_t>(stream) <= 2; }

std::string pool_text(mempool_id pool) {
  return "{" + std::to_string(pool.first) + "," + std::to_string(pool.second) + "}";
}

/// warn() from a cleanup path, where nothing may throw.
void warn_failure(const char* what, const std::exception& e) noexcept {
  try {
    warn(std::string("capture_scope: ") + what + " while abandoning a capture failed: " + e.what());
  } catch (...) {
    // Nothing more can be done from a destructor.
  }
}

}  // namespace

capture_scope::capture_scope(allocator& alloc, stream_t stream, capture_options options)
    : capture_scope(alloc, stream, allocator::create_pool_id(), options) {}

capture_scope::capture_scope(allocator& alloc, stream_t stream, mempool_id pool, capture_options options)
    : alloc_(&alloc), driver_(&alloc.device_driver()), stream_(stream), pool_(pool), options_(options) {
  if (is_default_stream(stream)) {
    throw error("streampool: capture_scope: CUDA graphs must be captured on a non-default stream (got " +
                std::string(stream == nullptr ? "the legacy default stream" : "a default stream handle") +
                "); create a stream and capture on it");
  }
  if (pool.is_default()) {
    throw error("streampool: capture_scope: {0,0} is not a private pool; pass allocator::create_pool_id() or "
                "the pool() of a graph captured before");
  }
  device_ = options.device;
  if (device_ < 0) check(*driver_, driver_->get_device(&device_), "capture_scope: cudaGetDevice");
  state_ = std::make_shared<shared_state>(*driver_, stream);
  // Note [Joining side streams]: created before the capture, so no event is created during it.
  check(*driver_, driver_->event_create(device_, &join_event_), "capture_scope: cudaEventCreate");
  try {
    std::shared_ptr<shared_state> shared = state_;
    // docs/pytorch-compatibility.md §3.2: routing starts before the capture, so the capture's first allocation is routed.
    alloc.begin_allocate_to_pool(pool, [shared](stream_t s) { return shared->sequence.accepts(s); }, device_);
    routing_ = true;
    pool_held_ = true;
    check(*driver_, driver_->stream_begin_capture(stream, options.mode),
          "capture_scope: cudaStreamBeginCapture into pool " + pool_text(pool));
    capturing_ = true;
    capture_info info;
    check(*driver_, driver_->stream_capture_info(stream, &info), "capture_scope: cudaStreamGetCaptureInfo");
    if (info.status != capture_status::active || info.id == 0) {
      throw error("streampool: capture_scope: the stream does not report an active capture after "
                  "cudaStreamBeginCapture");
    }
    state_->sequence.set_id(info.id);
  } catch (...) {
    cleanup();
    throw;
  }
}

capture_scope::~capture_scope() { cleanup(); }

std::uint64_t capture_scope::capture_id() const noexcept {
  return capturing_ ? state_->sequence.id() : 0;
}

// Note [Joining side streams]
// CUDA refuses to end a capture while a stream that joined it has captured work that the origin
// stream does not (transitively) wait for: cudaErrorStreamCaptureUnjoined. A side stream that
// allocated from the pool may have such work that the user never sees — with the
// cudaMallocAsync backend a free of its allocation is a graph free node on that stream, issued
// whenever the tensor dies, possibly after the user's last join (PyTorch's version rejoins its
// "free streams" for the same reason, docs/pytorch-compatibility.md §4 endAllocateToPool). So before ending, end() makes
// `stream` wait on an event recorded on every side stream the filter accepted that is still in
// this capture. A wait on a stream that was already joined adds only an edge that exists anyway.
// The event is created before the capture and re-recorded for each stream (a wait binds to the
// record made just before it).
void capture_scope::join_side_streams() {
  const std::vector<stream_t> sides = state_->sequence.side_streams();
  const std::uint64_t id = state_->sequence.id();
  for (const stream_t side : sides) {
    capture_info info;
    if (!driver_->stream_capture_info(side, &info).ok() || info.status != capture_status::active || info.id != id) {
      continue;  // left the capture (destroyed, or in another one): nothing of ours to join
    }
    check(*driver_, driver_->event_record(join_event_, side), "capture_scope: joining a side stream (cudaEventRecord)");
    check(*driver_, driver_->stream_wait_event(stream_, join_event_),
          "capture_scope: joining a side stream (cudaStreamWaitEvent)");
  }
}

captured_graph capture_scope::end() {
  if (!capturing_) {
    throw error("streampool: capture_scope::end: the capture already ended (end() called twice, or the scope "
                "failed to begin)");
  }
  graph_t graph = nullptr;
  graph_exec_t exec = nullptr;
  try {
    join_side_streams();
    const drv_result ended = driver_->stream_end_capture(stream_, &graph);
    capturing_ = false;
    if (!ended.ok()) {
      throw cuda_error("streampool: capture_scope::end: cudaStreamEndCapture failed: " + driver_->describe(ended) +
                           ". The capture was invalidated by a call that is illegal during capture, or a stream "
                           "that joined the capture was not joined back into the capturing stream; the graph is "
                           "discarded",
                       ended.native);
    }
    // docs/pytorch-compatibility.md §3.2: end the capture, then stop routing.
    routing_ = false;
    alloc_->end_allocate_to_pool(pool_, device_);
    const instantiate_flags flags =
        options_.auto_free_on_launch ? instantiate_flags::auto_free_on_launch : instantiate_flags::none;
    const drv_result made = driver_->graph_instantiate(graph, &exec, flags);
    if (!made.ok()) {
      const std::string message = "streampool: capture_scope::end: cudaGraphInstantiate of the graph of pool " +
                                  pool_text(pool_) + " failed: " + driver_->describe(made);
      if (made.code == status::out_of_memory) throw out_of_memory(message, 0, device_);
      throw cuda_error(message, made.native);
    }
  } catch (...) {
    if (graph != nullptr) (void)driver_->graph_destroy(graph);
    cleanup();
    throw;
  }
  pool_held_ = false;  // the graph's now
  cleanup();           // the join event
  return captured_graph(*alloc_, device_, graph, exec, pool_);
}

void capture_scope::cleanup() noexcept {
  if (capturing_) {
    capturing_ = false;
    graph_t discarded = nullptr;
    (void)driver_->stream_end_capture(stream_, &discarded);
    if (discarded != nullptr) (void)driver_->graph_destroy(discarded);
  }
  if (routing_) {
    routing_ = false;
    try {
      alloc_->end_allocate_to_pool(pool_, device_);
    } catch (const std::exception& e) {
      warn_failure("end_allocate_to_pool", e);
    }
  }
  if (pool_held_) {
    pool_held_ = false;
    try {
      alloc_->release_pool(pool_, device_);
    } catch (const std::exception& e) {
      warn_failure("release_pool", e);
    }
  }
  if (join_event_ != nullptr) {
    (void)driver_->event_destroy(device_, join_event_);
    join_event_ = nullptr;
  }
}

}  // namespace streampool
