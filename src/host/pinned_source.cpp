// pinned_source.cpp — obtaining and giving back the host allocator's pinned ranges: driver
// host_alloc, or malloc + page touching + host_register, and the reserve segment.
//
// Note [Reserve segment]
// With pinned_reserve_segment_size_mb:N the first block that misses the cache first obtains one
// range of N MiB (by the configured path) and blocks are then carved from it, one after the
// other, while they fit: no driver call for them. Each block starts at a multiple of
// min(its size, 4 KiB), so small blocks stay naturally aligned (PyTorch packs them back to back).
// Carved blocks are never given back on their own, and empty_cache leaves them cached (PyTorch
// drops them from its lists, so that part of the reserve is lost until exit); the reserve goes
// back to the driver when the allocator is destroyed. It counts as one segment.
#include "host/pinned_source.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "streampool/stats.hpp"

namespace streampool::host {
namespace {

using clock_type = std::chrono::steady_clock;

std::int64_t micros_since(clock_type::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - start).count();
}

/// Physical memory of this machine (0 if unknown).
std::size_t physical_memory() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

[[noreturn]] void throw_driver_failure(const driver& drv, drv_result result, const std::string& what,
                                       std::size_t bytes) {
  const std::string message = "streampool host allocator: " + what + " failed: " + drv.describe(result);
  if (result.code == status::out_of_memory) {
    throw out_of_memory(message + ". Pinned (page-locked) host memory is limited by the machine's RAM and the "
                                  "locked-memory limit (ulimit -l); free pinned buffers or call empty_cache()",
                        bytes, -1);
  }
  throw cuda_error(message, result.native);
}

}  // namespace

pinned_source::pinned_source(const allocator_config& config, driver& drv) : config_(config), driver_(drv) {
  if (config_.pinned_use_cuda_host_register) {
    toucher_ = std::make_unique<page_toucher>(config_.pinned_num_register_threads);
  }
}

block_origin pinned_source::obtain(std::size_t size, void** out) {
  *out = nullptr;
  carve_reserve_if_needed();
  {
    const std::lock_guard lock(mutex_);
    if (reserve_base_ != 0) {
      const std::size_t align = size < touch_page_size ? size : touch_page_size;
      const std::size_t offset = (reserve_used_ + align - 1) / align * align;
      if (offset <= reserve_size_ && size <= reserve_size_ - offset) {
        reserve_used_ = offset + size;
        *out = reinterpret_cast<void*>(reserve_base_ + offset);
        return block_origin::reserve;
      }
    }
  }
  bool registered = false;
  *out = obtain_range(size, &registered);
  return registered ? block_origin::registered : block_origin::host_alloc;
}

void pinned_source::carve_reserve_if_needed() {
  const std::size_t bytes = config_.pinned_reserve_segment_size_mb * mib;
  if (bytes == 0) return;
  {
    const std::lock_guard lock(mutex_);
    if (reserve_tried_) return;
    reserve_tried_ = true;  // concurrent first callers: one obtains it, the others go on without
  }
  bool registered = false;
  void* base = nullptr;
  try {
    base = obtain_range(bytes, &registered);
  } catch (...) {
    const std::lock_guard lock(mutex_);
    reserve_tried_ = false;  // the next miss tries again
    throw;
  }
  const std::lock_guard lock(mutex_);
  reserve_base_ = reinterpret_cast<std::uintptr_t>(base);
  reserve_size_ = bytes;
}

void* pinned_source::obtain_range(std::size_t bytes, bool* registered) {
  *registered = config_.pinned_use_cuda_host_register;
  const auto start = clock_type::now();
  void* ptr = nullptr;
  if (*registered) {
    ptr = register_range(bytes);
  } else {
    const drv_result result = driver_.host_alloc(bytes, &ptr);
    if (!result.ok()) throw_driver_failure(driver_, result, "cudaHostAlloc of " + format_size(bytes), bytes);
  }
  const std::int64_t took = micros_since(start);
  const std::lock_guard lock(mutex_);
  segments_[reinterpret_cast<std::uintptr_t>(ptr)] = segment_rec{bytes, *registered};
  segment_.increase(1);
  reserved_bytes_.increase(static_cast<std::int64_t>(bytes));
  alloc_time_.increase(took);
  return ptr;
}

void* pinned_source::register_range(std::size_t bytes) {
  // Touching more pages than the machine has would end in the OOM killer, not in an error.
  const std::size_t physical = physical_memory();
  if (physical != 0 && bytes > physical) {
    throw out_of_memory("streampool host allocator: cannot pin " + format_size(bytes) + " with cudaHostRegister: the " +
                            "machine has " + format_size(physical) + " of physical memory",
                        bytes, -1);
  }
  void* ptr = std::malloc(bytes);
  if (ptr == nullptr) {
    throw out_of_memory("streampool host allocator: malloc of " + format_size(bytes) +
                            " failed (pinned_use_cuda_host_register path)",
                        bytes, -1);
  }
  toucher_->touch(ptr, bytes);
  const drv_result result = driver_.host_register(ptr, bytes);
  if (!result.ok()) {
    std::free(ptr);
    throw_driver_failure(driver_, result, "cudaHostRegister of " + format_size(bytes), bytes);
  }
  return ptr;
}

drv_result pinned_source::release(void* ptr) {
  segment_rec rec;
  {
    const std::lock_guard lock(mutex_);
    const auto found = segments_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (found == segments_.end()) return {status::invalid_value, 0};
    rec = found->second;
  }
  const drv_result result = release_range(ptr, rec);
  if (result.ok()) {
    const std::lock_guard lock(mutex_);
    segments_.erase(reinterpret_cast<std::uintptr_t>(ptr));
  }
  return result;
}

drv_result pinned_source::release_range(void* ptr, const segment_rec& rec) {
  const auto start = clock_type::now();
  drv_result result;
  if (rec.registered) {
    result = driver_.host_unregister(ptr);
    if (result.ok()) std::free(ptr);
  } else {
    result = driver_.host_free(ptr);
  }
  if (!result.ok()) return result;
  const std::int64_t took = micros_since(start);
  const std::lock_guard lock(mutex_);
  segment_.decrease(1);
  reserved_bytes_.decrease(static_cast<std::int64_t>(rec.size));
  free_time_.increase(took);
  return result;
}

void pinned_source::release_reserve() noexcept {
  std::uintptr_t base = 0;
  {
    const std::lock_guard lock(mutex_);
    base = reserve_base_;
    reserve_base_ = 0;
    reserve_size_ = reserve_used_ = 0;
  }
  if (base != 0) (void)release(reinterpret_cast<void*>(base));
}

void pinned_source::add_stats(host_memory_stats& out) const {
  const std::lock_guard lock(mutex_);
  out.segment = segment_;
  out.reserved_bytes = reserved_bytes_;
  out.host_alloc_time = alloc_time_;
  out.host_free_time = free_time_;
  out.num_host_alloc = segment_.allocated;
  out.num_host_free = segment_.freed;
}

void pinned_source::reset_peak() noexcept {
  const std::lock_guard lock(mutex_);
  segment_.reset_peak();
  reserved_bytes_.reset_peak();
  alloc_time_.reset_peak();
  free_time_.reset_peak();
}

void pinned_source::reset_accumulated() noexcept {
  const std::lock_guard lock(mutex_);
  segment_.reset_accumulated();
  reserved_bytes_.reset_accumulated();
  alloc_time_.reset_accumulated();
  free_time_.reset_accumulated();
}

std::vector<host_segment_info> pinned_source::segments() const {
  const std::lock_guard lock(mutex_);
  std::vector<host_segment_info> out;
  out.reserve(segments_.size());
  for (const auto& [base, rec] : segments_) {
    const bool reserve = base == reserve_base_;
    out.push_back({base, rec.size, rec.registered, reserve, reserve ? reserve_used_ : 0});
  }
  return out;
}

}  // namespace streampool::host
