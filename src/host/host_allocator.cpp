// host_allocator.cpp — streampool::host_allocator, the public face of the pinned host caching
// allocator (src/host/host_cache.*), and make_host_allocator().
#include "streampool/host_allocator.hpp"

#include "host/host_cache.hpp"

namespace streampool {

host_allocator::host_allocator(allocator_config config, std::shared_ptr<driver> drv) {
  if (!drv) throw error("streampool: make_host_allocator: the driver is null");
  cache_ = std::make_unique<host::host_cache>(std::move(config), std::move(drv));
}

host_allocator::~host_allocator() = default;

void* host_allocator::allocate(std::size_t bytes) { return cache_->allocate(bytes); }
void host_allocator::deallocate(void* ptr) { cache_->deallocate(ptr); }
void host_allocator::record_stream(void* ptr, stream_t stream) { cache_->record_stream(ptr, stream); }
void host_allocator::empty_cache() { cache_->empty_cache(); }
host_memory_stats host_allocator::stats() const { return cache_->stats(); }
void host_allocator::reset_peak_stats() { cache_->reset_peak_stats(); }
void host_allocator::reset_accumulated_stats() { cache_->reset_accumulated_stats(); }
host_snapshot host_allocator::snapshot() const { return cache_->snapshot(); }
bool host_allocator::owns(const void* ptr) const { return cache_->owns(ptr); }
const allocator_config& host_allocator::config() const noexcept { return cache_->config(); }
driver& host_allocator::host_driver() const noexcept { return cache_->drv(); }

std::unique_ptr<host_allocator> make_host_allocator(allocator_config config, std::shared_ptr<driver> drv) {
  return std::make_unique<host_allocator>(std::move(config), std::move(drv));
}

std::unique_ptr<host_allocator> make_host_allocator() {
  return make_host_allocator(config_from_env(), make_cuda_driver());
}

}  // namespace streampool
