// torch_allocator_state.cpp — what torch_allocator reports about its cache: snapshot (segments,
// blocks, trace, settings, for torch.cuda.memory._snapshot() and memory_viz), the trace switch
// (recordHistory), cacheInfo, getBaseAllocation and the expandable segments' sizes. All of it comes
// from streampool's snapshot.
#include "torch_allocator.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

namespace streampool::torch_ext {

namespace {

using c10::CachingDeviceAllocator::TraceEntry;

TraceEntry::Action to_c10(trace_action action) {
  switch (action) {
    case trace_action::alloc: return TraceEntry::ALLOC;
    case trace_action::free_requested: return TraceEntry::FREE_REQUESTED;
    case trace_action::free_completed: return TraceEntry::FREE_COMPLETED;
    case trace_action::segment_alloc: return TraceEntry::SEGMENT_ALLOC;
    case trace_action::segment_free: return TraceEntry::SEGMENT_FREE;
    case trace_action::segment_map: return TraceEntry::SEGMENT_MAP;
    case trace_action::segment_unmap: return TraceEntry::SEGMENT_UNMAP;
    case trace_action::oom: return TraceEntry::OOM;
    case trace_action::snapshot: return TraceEntry::SNAPSHOT;
  }
  return TraceEntry::ALLOC;
}

c10::CachingDeviceAllocator::BlockInfo free_block(std::size_t size) {
  c10::CachingDeviceAllocator::BlockInfo b;
  b.size = size;
  return b;
}

/// Note [Blocks tile the segment]: PyTorch's snapshot has no block addresses; readers (the
/// _snapshot() dict, memory_viz) place each block after the previous one from the segment's start.
/// streampool lists blocks with addresses and may leave gaps (the cudaMallocAsync backend has one
/// block per segment); gaps become inactive blocks so that every address stays right.
c10::CachingDeviceAllocator::SegmentInfo to_c10(const segment_info& s) {
  c10::CachingDeviceAllocator::SegmentInfo out;
  out.device = static_cast<c10::DeviceIndex>(s.device);
  out.address = s.address;
  out.total_size = s.total_size;
  out.requested_size = s.requested_size;
  out.allocated_size = s.allocated_size;
  out.active_size = s.active_size;
  out.stream = s.stream;
  out.is_large = s.is_large;
  out.is_expandable = s.is_expandable;
  out.owner_private_pool_id = {s.pool.first, s.pool.second};
  std::uintptr_t cursor = s.address;
  for (const block_info& b : s.blocks) {
    if (b.address > cursor) out.blocks.push_back(free_block(b.address - cursor));
    c10::CachingDeviceAllocator::BlockInfo block;
    block.size = b.size;
    block.requested_size = b.requested_size;
    block.allocated = b.state == block_state::active_allocated;
    block.active = b.state != block_state::inactive;
    out.blocks.push_back(block);
    cursor = std::max(cursor, b.address + b.size);
  }
  if (cursor < s.address + s.total_size) out.blocks.push_back(free_block(s.address + s.total_size - cursor));
  return out;
}

c10a::AllocatorConfigInfo config_info(const allocator_config& c) {
  c10a::AllocatorConfigInfo out;
  out.garbage_collection_threshold = c.garbage_collection_threshold;
  out.max_split_size = c.max_split_size;
  out.pinned_num_register_threads = c.pinned_num_register_threads;
  out.expandable_segments = c.expandable_segments;
  out.release_lock_on_malloc = c.release_lock_on_cudamalloc;
  out.pinned_use_host_register = c.pinned_use_cuda_host_register;
  out.graph_capture_record_stream_reuse = c.graph_capture_record_stream_reuse;
  out.last_allocator_settings = c.text;
  out.roundup_power2_divisions.assign(c.roundup_power2_divisions.begin(), c.roundup_power2_divisions.end());
  return out;
}

}  // namespace

std::vector<segment_info> torch_allocator::segments_of(c10::DeviceIndex device, c10::MempoolId_t pool) const {
  memory_snapshot snap = impl().snapshot();
  std::vector<segment_info> out;
  const mempool_id wanted = to_pool(pool);
  for (segment_info& s : snap.segments) {
    if (device >= 0 && s.device != device) continue;
    if (!wanted.is_default() && s.pool != wanted) continue;
    out.push_back(std::move(s));
  }
  return out;
}

c10a::SnapshotInfo torch_allocator::snapshot(c10::MempoolId_t mempool_id, bool include_traces) {
  memory_snapshot snap = impl().snapshot();
  c10a::SnapshotInfo out;
  const streampool::mempool_id wanted = to_pool(mempool_id);
  int max_device = -1;
  for (const segment_info& s : snap.segments) {
    max_device = std::max(max_device, s.device);
    if (!wanted.is_default() && s.pool != wanted) continue;
    out.segments.push_back(to_c10(s));
  }
  int device_count = 0;
  if (impl().device_driver().device_count(&device_count).ok()) max_device = std::max(max_device, device_count - 1);
  out.device_traces.resize(static_cast<std::size_t>(max_device + 1));
  if (include_traces) {
    std::set<trace_action> skipped;
    {
      std::lock_guard<std::mutex> lock(history_mutex_);
      skipped = skipped_actions_;
    }
    for (const trace_entry& e : snap.trace) {
      if (skipped.count(e.action) != 0 || e.device < 0 || e.device > max_device) continue;
      // PyTorch converts its clock to microseconds since the epoch before handing traces out;
      // streampool's entries already are (time_us), so the converted field is set directly.
      TraceEntry entry(to_c10(e.action), static_cast<c10::DeviceIndex>(e.device), e.address, e.size, e.stream,
                       {e.pool.first, e.pool.second}, 0);
      entry.time_.t_ = static_cast<time_t>(e.time_us);
      out.device_traces[static_cast<std::size_t>(e.device)].push_back(std::move(entry));
    }
  }
  contexts_.annotate(out);  // Note [Stack contexts]
  out.config_metadata = config_info(impl().settings());
  return out;
}

void torch_allocator::recordHistory(bool enabled, c10a::CreateContextFn context_recorder,
                                    size_t alloc_trace_max_entries, c10a::RecordContext when,
                                    bool clear_history, const std::vector<std::string>& skip_actions) {
  // Stack traces: gathered and kept by the extension (Note [Stack contexts]), attached at snapshot.
  std::set<trace_action> skipped;
  for (const std::string& name : skip_actions) {
    bool known = false;
    for (trace_action a : {trace_action::alloc, trace_action::free_requested, trace_action::free_completed,
                           trace_action::segment_alloc, trace_action::segment_free, trace_action::segment_map,
                           trace_action::segment_unmap, trace_action::oom, trace_action::snapshot}) {
      if (name == to_string(a)) {
        skipped.insert(a);
        known = true;
      }
    }
    TORCH_CHECK(known, "streampool: recordHistory: unknown action '", name,
                "' in skip_actions; valid: alloc, free_requested, free_completed, segment_alloc, segment_free, "
                "segment_map, segment_unmap, oom, snapshot");
  }
  std::lock_guard<std::mutex> lock(history_mutex_);
  skipped_actions_ = std::move(skipped);
  contexts_.configure(enabled, context_recorder, when, alloc_trace_max_entries, clear_history);
  const bool was_enabled = history_enabled_.load();
  // streampool's record_history restarts (clears) the ring; keep the history when PyTorch asks to
  // keep it and nothing about the ring changes.
  if (enabled && was_enabled && !clear_history && alloc_trace_max_entries == history_max_entries_) return;
  try {
    impl().record_history(enabled, alloc_trace_max_entries == 0 ? 1 : alloc_trace_max_entries);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: record_history failed: ", e.what());
  }
  history_max_entries_ = enabled ? alloc_trace_max_entries : 0;
  history_enabled_.store(enabled);
}

void torch_allocator::cacheInfo(c10::DeviceIndex device, size_t* largest_block) {
  // As PyTorch's: the larger of what the device still has free and the largest cached free block of
  // the general pools (cuDNN sizes its benchmark workspace from it).
  std::size_t device_free = 0;
  std::size_t device_total = 0;
  (void)impl().device_driver().mem_get_info(device, &device_free, &device_total);
  std::size_t largest = device_free;
  for (const segment_info& s : segments_of(device, {0, 0})) {
    if (!s.pool.is_default()) continue;
    for (const block_info& b : s.blocks) {
      if (b.state == block_state::inactive) largest = std::max(largest, b.size);
    }
  }
  *largest_block = largest;
}

void* torch_allocator::getBaseAllocation(void* ptr, size_t* size) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  for (const segment_info& s : segments_of(-1, {0, 0})) {
    if (address >= s.address && address < s.address + s.total_size) {
      if (size != nullptr) *size = s.total_size;
      return reinterpret_cast<void*>(s.address);
    }
  }
  TORCH_CHECK(false, "streampool: getBaseAllocation: ", ptr, " is in no segment of streampool's");
}

std::vector<c10a::StreamSegmentSize> torch_allocator::getExpandableSegmentSizes(c10::DeviceIndex device) {
  std::vector<c10a::StreamSegmentSize> out;
  for (const segment_info& s : segments_of(device, {0, 0})) {
    if (s.is_expandable) out.emplace_back(static_cast<cudaStream_t>(s.stream), !s.is_large, s.total_size);
  }
  return out;
}

}  // namespace streampool::torch_ext
