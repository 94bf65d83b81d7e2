// memory_stats.cpp — memory_stats::to_map/to_json/reset with PyTorch's flat key names (docs/pytorch-compatibility.md §2.14):
// "<stat>.<all|small_pool|large_pool>.<current|peak|allocated|freed>" and plain counters.

#include "core/format.hpp"
#include "streampool/stats.hpp"

namespace streampool {
namespace {

constexpr const char* pool_names[stat_pool_count] = {"all", "small_pool", "large_pool"};

using core::put_stat;

void put_array(std::map<std::string, std::int64_t>& out, const char* name, const stat_array& array) {
  for (std::size_t i = 0; i < stat_pool_count; ++i) {
    put_stat(out, std::string(name) + "." + pool_names[i], array[i]);
  }
}

template <typename F>
void for_each_array(memory_stats& stats, F&& f) {
  for (stat_array* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                            &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                            &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (stat& s : *array) f(s);
  }
  f(stats.oversize_allocations);
  f(stats.oversize_segments);
}

}  // namespace

std::map<std::string, std::int64_t> memory_stats::to_map() const {
  std::map<std::string, std::int64_t> out;
  put_array(out, "allocation", allocation);
  put_array(out, "segment", segment);
  put_array(out, "active", active);
  put_array(out, "inactive_split", inactive_split);
  put_array(out, "allocated_bytes", allocated_bytes);
  put_array(out, "reserved_bytes", reserved_bytes);
  put_array(out, "active_bytes", active_bytes);
  put_array(out, "inactive_split_bytes", inactive_split_bytes);
  put_array(out, "requested_bytes", requested_bytes);
  put_stat(out, "oversize_allocations", oversize_allocations);
  put_stat(out, "oversize_segments", oversize_segments);
  out["num_alloc_retries"] = num_alloc_retries;
  out["num_ooms"] = num_ooms;
  out["num_sync_all_streams"] = num_sync_all_streams;
  out["num_device_alloc"] = num_device_alloc;
  out["num_device_free"] = num_device_free;
  out["max_split_size"] = max_split_size;
  out["num_cross_stream_reuses"] = num_cross_stream_reuses;
  out["num_cross_stream_waits"] = num_cross_stream_waits;
  out["num_cross_stream_fences"] = num_cross_stream_fences;
  out["num_fence_host_waits"] = num_fence_host_waits;
  out["num_moved_pages"] = num_moved_pages;
  return out;
}

std::string memory_stats::to_json() const { return core::json_object(to_map()); }

void memory_stats::reset_peak() noexcept {
  for_each_array(*this, [](stat& s) { s.reset_peak(); });
}

void memory_stats::reset_accumulated() noexcept {
  for_each_array(*this, [](stat& s) { s.reset_accumulated(); });
  num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc = num_device_free = 0;
  num_cross_stream_reuses = num_cross_stream_waits = num_cross_stream_fences = 0;
  num_fence_host_waits = num_moved_pages = 0;
}

}  // namespace streampool
