// captured_graph.cpp — the graph object capture_scope::end() returns: owns the graph and its
// executable, replays it, and on destruction gives its use of the private pool back so the pool's
// memory can be released once no graph can replay it (docs/pytorch-compatibility.md §3.1, Note [Graph lifetime]). Like
// capture_scope, it sits above the allocator facade.
#include <string>
#include <utility>

#include "streampool/allocator.hpp"
#include "streampool/errors.hpp"
#include "streampool/graph.hpp"

namespace streampool {

captured_graph::captured_graph(captured_graph&& other) noexcept
    : alloc_(std::exchange(other.alloc_, nullptr)),
      device_(other.device_),
      graph_(std::exchange(other.graph_, nullptr)),
      exec_(std::exchange(other.exec_, nullptr)),
      pool_(std::exchange(other.pool_, mempool_id{})) {}

captured_graph& captured_graph::operator=(captured_graph&& other) noexcept {
  if (this != &other) {
    reset();
    alloc_ = std::exchange(other.alloc_, nullptr);
    device_ = other.device_;
    graph_ = std::exchange(other.graph_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
    pool_ = std::exchange(other.pool_, mempool_id{});
  }
  return *this;
}

captured_graph::~captured_graph() { reset(); }

void captured_graph::launch(stream_t stream) const {
  if (exec_ == nullptr) throw error("streampool: captured_graph::launch: the graph is empty (moved from or reset)");
  driver& drv = alloc_->device_driver();
  const drv_result result = drv.graph_launch(exec_, stream);
  if (!result.ok()) {
    throw cuda_error("streampool: captured_graph::launch: cudaGraphLaunch failed: " + drv.describe(result) +
                         (result.code == status::invalid_value
                              ? " (a graph whose graph-owned allocations outlive a launch can only be relaunched "
                                "when instantiated with capture_options::auto_free_on_launch)"
                              : ""),
                     result.native);
  }
}

// Note [Graph lifetime]
// The executable is destroyed first (a replay in flight completes first: cudaGraphExecDestroy
// frees it asynchronously), then the graph, then the pool use. After release_pool the pool keeps
// its memory until empty_cache(), which on the native backend returns it with cudaFree (which
// synchronises, so a replay still running is not cut short) once every graph sharing the pool has
// released it and no block is live; the cudaMallocAsync backend's graph memory belongs to the
// executable, and its empty_cache trims what the device keeps cached for graphs.
void captured_graph::reset() noexcept {
  if (alloc_ == nullptr) return;
  driver& drv = alloc_->device_driver();
  if (exec_ != nullptr) (void)drv.graph_exec_destroy(exec_);
  if (graph_ != nullptr) (void)drv.graph_destroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  try {
    alloc_->release_pool(pool_, device_);
  } catch (const std::exception& e) {
    try {
      warn(std::string("captured_graph: release_pool failed: ") + e.what());
    } catch (...) {
      // Nothing more can be done from a destructor.
    }
  }
  alloc_ = nullptr;
  pool_ = mempool_id{};
}

}  // namespace streampool
