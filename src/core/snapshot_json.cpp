// snapshot_json.cpp — memory_snapshot::to_json (the shape of torch.cuda.memory._snapshot(), so
// memory_viz-style consumers read it, plus the "leftover_pages" key), the snapshot's per-device
// byte sums, and trace_to_csv (the format of docs/trace-format.md).
#include <algorithm>
#include "core/text_builder.hpp"

#include "core/format.hpp"
#include "streampool/stats.hpp"

namespace streampool {
namespace {

std::string_view state_name(block_state state) {
  switch (state) {
    case block_state::active_allocated: return "active_allocated";
    case block_state::active_pending_free: return "active_pending_free";
    case block_state::inactive: return "inactive";
  }
  return "inactive";
}

std::uintptr_t stream_number(stream_t stream) { return reinterpret_cast<std::uintptr_t>(stream); }

void write_trace_entry(core::text_builder& out, const trace_entry& entry) {
  out << "{\"action\":" << core::json_quote(to_string(entry.action))
      << (entry.action == trace_action::oom ? ",\"device_free\":" : ",\"addr\":") << entry.address
      << ",\"size\":" << entry.size << ",\"stream\":" << stream_number(entry.stream)
      << ",\"segment_pool_id\":[" << entry.pool.first << ',' << entry.pool.second << ']'
      << ",\"time_us\":" << entry.time_us << ",\"frames\":[]}";
}

}  // namespace

std::string_view to_string(trace_action action) noexcept {
  switch (action) {
    case trace_action::alloc: return "alloc";
    case trace_action::free_requested: return "free_requested";
    case trace_action::free_completed: return "free_completed";
    case trace_action::segment_alloc: return "segment_alloc";
    case trace_action::segment_free: return "segment_free";
    case trace_action::segment_map: return "segment_map";
    case trace_action::segment_unmap: return "segment_unmap";
    case trace_action::oom: return "oom";
    case trace_action::snapshot: return "snapshot";
  }
  return "unknown";
}

std::string memory_snapshot::to_json() const {
  core::text_builder out;
  out << "{\"segments\":[";
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const segment_info& s = segments[i];
    if (i != 0) out << ',';
    out << "{\"device\":" << s.device << ",\"address\":" << s.address << ",\"total_size\":" << s.total_size
        << ",\"allocated_size\":" << s.allocated_size << ",\"active_size\":" << s.active_size
        << ",\"requested_size\":" << s.requested_size << ",\"stream\":" << stream_number(s.stream)
        << ",\"segment_type\":\"" << (s.is_large ? "large" : "small") << "\",\"segment_pool_id\":["
        << s.pool.first << ',' << s.pool.second << "],\"is_expandable\":" << (s.is_expandable ? "true" : "false");
    if (s.is_asleep) out << ",\"is_asleep\":true";  // streampool's addition, only when asleep
    out << ",\"frames\":[],\"blocks\":[";
    for (std::size_t j = 0; j < s.blocks.size(); ++j) {
      const block_info& b = s.blocks[j];
      if (j != 0) out << ',';
      out << "{\"address\":" << b.address << ",\"size\":" << b.size << ",\"requested_size\":" << b.requested_size
          << ",\"state\":\"" << state_name(b.state) << "\",\"stream\":" << stream_number(b.stream)
          << ",\"frames\":[]}";
    }
    out << "]}";
  }
  // streampool's addition (Note [Leftover pages] in src/native/leftover_pages.hpp): consumers of the
  // PyTorch shape ignore the key; segments + leftover pages = reserved_bytes per device.
  out << "],\"leftover_pages\":[";
  for (std::size_t i = 0; i < leftover_pages.size(); ++i) {
    const leftover_page_info& page = leftover_pages[i];
    if (i != 0) out << ',';
    out << "{\"device\":" << page.device << ",\"address\":" << page.address << ",\"size\":" << page.size
        << ",\"segment_type\":\"" << (page.is_large ? "large" : "small") << "\"}";
  }
  out << "],\"device_traces\":[";
  int max_device = -1;
  for (const trace_entry& entry : trace) max_device = std::max(max_device, entry.device);
  for (int device = 0; device <= max_device; ++device) {
    if (device != 0) out << ',';
    out << '[';
    bool first = true;
    for (const trace_entry& entry : trace) {
      if (entry.device != device) continue;
      if (!first) out << ',';
      first = false;
      write_trace_entry(out, entry);
    }
    out << ']';
  }
  out << "],\"allocator_settings\":{\"PYTORCH_CUDA_ALLOC_CONF\":" << core::json_quote(allocator_settings)
      << "},\"external_annotations\":[]}";
  return out.str();
}

std::size_t memory_snapshot::leftover_bytes(int device) const noexcept {
  std::size_t bytes = 0;
  for (const leftover_page_info& page : leftover_pages) {
    if (page.device == device) bytes += page.size;
  }
  return bytes;
}

std::size_t memory_snapshot::reserved_bytes(int device) const noexcept {
  std::size_t bytes = leftover_bytes(device);
  for (const segment_info& seg : segments) {
    if (seg.device == device) bytes += seg.total_size;
  }
  return bytes;
}

std::string trace_to_csv(const std::vector<trace_entry>& entries) {
  core::text_builder out;
  out << "action,addr,size,stream,time_us\n";
  for (const trace_entry& entry : entries) {
    out << to_string(entry.action) << ',' << entry.address << ',' << entry.size << ','
        << stream_number(entry.stream) << ',' << entry.time_us << '\n';
  }
  return out.str();
}

}  // namespace streampool
