// capture_reuse.hpp — graph_capture_record_stream_reuse:True (Note [Reuse within a capture]):
// where a capture's graph stood on every stream of a block freed with record_stream uses during
// the capture (its free markers), and whether a stream's next captured work comes after all of
// them, so that the block can be reused inside the same capture.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "native/block.hpp"
#include "streampool/driver.hpp"

namespace streampool::native {

// Note [Reuse within a capture]
// A block freed during a capture after record_stream uses waits, by default, for the capture to
// end (Note [Deferred frees during capture] in native_allocator.hpp): its uses are captured work,
// which runs only when the graph is replayed, so no event can tell when it is done. With
// graph_capture_record_stream_reuse:True the graph itself orders it, as in PyTorch: at the free,
// the nodes that the next captured work of the block's stream and of every stream recorded on it
// would depend on are noted (the free markers; none when one of those streams is not capturing,
// and then the block waits for the end as before). At the next allocation on the block's stream
// during the capture, if every marker is an ancestor of that stream's next work in the graph (the
// side streams were joined back), every use of the block is ordered before what that stream does
// next, in every replay: the block goes back to its pool's free list, its uses forgotten, and the
// allocation may take it. Only blocks of private pools (what a capture allocates): a block of the
// general pool freed during a capture could otherwise be handed to work outside the graph that
// runs before the graph's uses do. The graph is walked backwards from the stream's dependencies
// (cudaStreamGetCaptureInfo, cudaGraphNodeGetDependencies) until every wanted marker is found or
// nothing is left; a failed query leaves the blocks parked (safe: they wait for the end). As in
// PyTorch, the nodes found are kept per (stream, capture id) and a later walk goes only through
// nodes not seen before: a stream's next work depends on what its earlier work depended on, so
// what was an ancestor stays one, and a capture costs one walk of its graph per stream, not one
// per allocation.
class capture_reuse {
 public:
  explicit capture_reuse(driver& drv) noexcept : drv_(&drv) {}

  /// `b` (a private pool's block with record_stream uses) was parked by a free during a capture:
  /// notes its free markers when all its streams capture. Never throws (no markers on failure).
  void note_free(const block* b) noexcept;
  /// Forgets `b`'s markers (it left the parked frees).
  void forget(const block* b) noexcept;
  [[nodiscard]] bool empty() const noexcept;
  /// Drops what earlier walks found (nothing is parked with markers). Device mutex held.
  void reset_walks() noexcept { walked_.clear(); }
  /// Of the parked blocks `candidates` allocated on `stream`, those whose markers all precede
  /// `stream`'s next captured work. @throws std::bad_alloc
  [[nodiscard]] std::unordered_set<const block*> ready(stream_t stream, const std::vector<const block*>& candidates);

 private:
  /// The nodes `stream`'s next captured work depends on, and (when asked) its capture's id; false
  /// when it is not capturing or a query failed.
  [[nodiscard]] bool dependencies(stream_t stream, std::vector<graph_node_t>* out,
                                  std::uint64_t* capture_id = nullptr) const noexcept;

  /// The ancestors of a stream's next work found so far in one capture.
  struct walked {
    std::uint64_t capture_id = 0;
    std::unordered_set<graph_node_t> seen;  ///< ancestors found
    std::vector<graph_node_t> pending;      ///< of which those whose parents are not looked at yet
  };

  driver* drv_;
  mutable std::mutex mutex_;
  std::unordered_map<const block*, std::vector<graph_node_t>> markers_;
  std::unordered_map<stream_t, walked> walked_;  // device mutex held (ready() only)
};

}  // namespace streampool::native
