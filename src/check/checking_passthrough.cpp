// checking_passthrough.cpp — the calls checking mode leaves to the wrapped backend: cache,
// statistics, snapshots, traces, fractions, settings and private pools (one object per device). The backend sees the padded sizes
// (Note [Checking-mode layout]), so its statistics, snapshots and traces count the canaries.
#include "check/checking_allocator.hpp"

namespace streampool::check_impl {

void checking_allocator::do_empty_cache() { inner_->empty_cache(); }
memory_stats checking_allocator::do_stats(int device) const { return inner_->stats(device); }
void checking_allocator::do_reset_peak_stats(int device) { inner_->reset_peak_stats(device); }
void checking_allocator::do_reset_accumulated_stats(int device) { inner_->reset_accumulated_stats(device); }
memory_snapshot checking_allocator::do_snapshot() const { return inner_->snapshot(); }
void checking_allocator::do_record_history(bool enabled, std::size_t max_entries) {
  inner_->record_history(enabled, max_entries);
}
std::vector<trace_entry> checking_allocator::do_trace(int device) const { return inner_->trace(device); }
void checking_allocator::do_set_memory_fraction(int device, double fraction) {
  inner_->set_memory_fraction(fraction, device);
}
double checking_allocator::do_memory_fraction(int device) const { return inner_->memory_fraction(device); }
void checking_allocator::do_set_settings(std::string_view text, const allocator_config& /*next*/) {
  inner_->set_settings(text);
}
void checking_allocator::do_set_segment_listener(std::shared_ptr<const segment_listener> listener) {
  inner_->set_segment_listener(listener != nullptr ? *listener : segment_listener{});
}
device_pools* checking_allocator::do_pools(int device) const {
  return static_cast<std::size_t>(device) < pools_.size() ? pools_[static_cast<std::size_t>(device)].get() : nullptr;
}

void checking_allocator::pool_seam::do_begin_allocate_to_pool(mempool_id pool, stream_filter filter) {
  inner_->begin_allocate_to_pool(pool, std::move(filter));
}
void checking_allocator::pool_seam::do_end_allocate_to_pool(mempool_id pool) { inner_->end_allocate_to_pool(pool); }
void checking_allocator::pool_seam::do_release_pool(mempool_id pool) { inner_->release_pool(pool); }
void checking_allocator::pool_seam::do_set_options(mempool_id pool, const pool_options& options) {
  inner_->set_options(pool, options);
}
pool_options checking_allocator::pool_seam::do_options(mempool_id pool) const { return inner_->options(pool); }
void* checking_allocator::pool_seam::do_allocate_at(void* /*ptr*/, std::size_t /*bytes*/, mempool_id /*pool*/) {
  throw error("streampool: allocate_at is not supported with debug_checks: an allocation placed at an address would "
              "have no canary; turn debug_checks off to restore CUDA graph trees checkpoints");
}

void checking_allocator::pool_seam::do_sleep(mempool_id pool, const sleep_options& options) {
  inner_->sleep(pool, options);
}
void checking_allocator::pool_seam::do_wake(mempool_id pool) { inner_->wake(pool); }
pool_sleep_state checking_allocator::pool_seam::do_sleep_state(mempool_id pool) const {
  return inner_->sleep_state(pool);
}

}  // namespace streampool::check_impl
