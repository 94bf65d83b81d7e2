// host_report.cpp — host_memory_stats::to_map / to_json with the key names of
// torch.cuda.host_memory_stats(), and host_snapshot::to_json.
#include <string>

#include "core/format.hpp"
#include "core/text_builder.hpp"
#include "streampool/host_allocator.hpp"

namespace streampool {
namespace {

using core::put_stat;

void put_duration(std::map<std::string, std::int64_t>& out, const std::string& name, const duration_stat& d) {
  out[name + ".total"] = d.total;
  out[name + ".max"] = d.max;
  out[name + ".min"] = d.min;
  out[name + ".count"] = d.count;
  out[name + ".avg"] = d.avg();
}

std::string_view state_name(host_block_state state) noexcept {
  switch (state) {
    case host_block_state::in_use: return "in_use";
    case host_block_state::pending: return "pending";
    case host_block_state::cached: return "cached";
  }
  return "unknown";
}

}  // namespace

std::map<std::string, std::int64_t> host_memory_stats::to_map() const {
  std::map<std::string, std::int64_t> out;
  put_stat(out, "allocation", allocation);
  put_stat(out, "allocated_bytes", allocated_bytes);
  put_stat(out, "segment", segment);
  put_stat(out, "reserved_bytes", reserved_bytes);
  put_duration(out, "host_alloc_time", host_alloc_time);
  put_duration(out, "host_free_time", host_free_time);
  out["num_host_alloc"] = num_host_alloc;
  out["num_host_free"] = num_host_free;
  return out;
}

std::string host_memory_stats::to_json() const { return core::json_object(to_map()); }

std::string host_snapshot::to_json() const {
  core::text_builder out;
  out << "{\"allocator_settings\":" << core::json_quote(allocator_settings) << ",\"segments\":[";
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const host_segment_info& s = segments[i];
    if (i > 0) out << ',';
    out << "{\"address\":" << s.address << ",\"total_size\":" << s.size
        << ",\"registered\":" << (s.registered ? "true" : "false") << ",\"reserve\":" << (s.reserve ? "true" : "false")
        << ",\"reserve_used\":" << s.reserve_used << '}';
  }
  out << "],\"blocks\":[";
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const host_block_info& b = blocks[i];
    if (i > 0) out << ',';
    out << "{\"address\":" << b.address << ",\"size\":" << b.size << ",\"requested_size\":" << b.requested_size
        << ",\"state\":" << core::json_quote(state_name(b.state))
        << ",\"from_reserve\":" << (b.from_reserve ? "true" : "false") << ",\"pending_events\":" << b.pending_events
        << '}';
  }
  out << "],\"stats\":" << stats.to_json() << '}';
  return out.str();
}

}  // namespace streampool
