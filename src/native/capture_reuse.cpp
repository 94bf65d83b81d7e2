// capture_reuse.cpp — free markers and the backward walk of a capture's graph for
// graph_capture_record_stream_reuse:True (capture_reuse.hpp, Note [Reuse within a capture]).
#include "native/capture_reuse.hpp"

#include <algorithm>
#include <utility>

namespace streampool::native {

bool capture_reuse::dependencies(stream_t stream, std::vector<graph_node_t>* out,
                                 std::uint64_t* capture_id) const noexcept {
  capture_info info;
  if (!drv_->stream_capture_info(stream, &info).ok() || info.status != capture_status::active) return false;
  if (capture_id != nullptr) *capture_id = info.id;
  return drv_->capture_dependencies(stream, out).ok();
}

void capture_reuse::note_free(const block* b) noexcept {
  try {
    std::vector<graph_node_t> markers;
    std::vector<graph_node_t> nodes;
    if (!dependencies(b->stream, &nodes)) return;
    markers.insert(markers.end(), nodes.begin(), nodes.end());
    for (std::size_t i = 0; i < b->uses.size(); ++i) {
      if (!dependencies(b->uses[i].stream, &nodes)) return;  // a stream outside the capture: wait for its end
      markers.insert(markers.end(), nodes.begin(), nodes.end());
    }
    std::sort(markers.begin(), markers.end());
    markers.erase(std::unique(markers.begin(), markers.end()), markers.end());
    const std::lock_guard lock(mutex_);
    markers_[b] = std::move(markers);
  } catch (...) {
    // no room for the markers: the block waits for the end of the capture
  }
}

void capture_reuse::forget(const block* b) noexcept {
  const std::lock_guard lock(mutex_);
  markers_.erase(b);
}

bool capture_reuse::empty() const noexcept {
  const std::lock_guard lock(mutex_);
  return markers_.empty();
}

std::unordered_set<const block*> capture_reuse::ready(stream_t stream, const std::vector<const block*>& candidates) {
  std::unordered_set<const block*> out;
  std::unordered_map<const block*, std::vector<graph_node_t>> wanted_by;
  std::unordered_set<graph_node_t> wanted;
  {
    const std::lock_guard lock(mutex_);
    for (const block* b : candidates) {
      const auto found = markers_.find(b);
      if (found == markers_.end()) continue;
      wanted_by.emplace(b, found->second);
      wanted.insert(found->second.begin(), found->second.end());
    }
  }
  if (wanted_by.empty()) return out;
  // Walk the graph backwards from the stream's next work, through nodes not seen before, until
  // every wanted marker is seen.
  std::uint64_t capture_id = 0;
  std::vector<graph_node_t> frontier;
  if (!dependencies(stream, &frontier, &capture_id)) return out;
  walked& w = walked_[stream];
  if (w.capture_id != capture_id) w = walked{capture_id, {}, {}};
  std::unordered_set<graph_node_t>& seen = w.seen;
  for (const graph_node_t node : frontier) {
    if (seen.insert(node).second) w.pending.push_back(node);
  }
  std::size_t found = 0;  // wanted markers among the nodes seen (this walk's and earlier ones')
  for (const graph_node_t m : wanted) found += seen.count(m);
  std::vector<graph_node_t> parents;
  while (!w.pending.empty() && found < wanted.size()) {
    const graph_node_t node = w.pending.back();
    if (!drv_->graph_node_dependencies(node, &parents).ok()) return out;  // unsure: they stay parked
    w.pending.pop_back();
    for (const graph_node_t parent : parents) {
      if (!seen.insert(parent).second) continue;
      found += wanted.count(parent);
      w.pending.push_back(parent);
    }
  }
  for (const auto& [b, markers] : wanted_by) {
    if (std::all_of(markers.begin(), markers.end(), [&](graph_node_t m) { return seen.count(m) != 0; })) out.insert(b);
  }
  return out;
}

}  // namespace streampool::native
