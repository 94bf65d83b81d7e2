// device_pools.cpp — the argument checks of device_pools (streampool/pools.hpp), shared by every
// backend, before its do_* hook.
//
// Note [Pool seam]
// Every operation on a private pool goes through one object per device, device_pools, that the
// backend owns: capture routing (begin/end), release, options, allocations at an address, and
// what comes next for pools (releasing and restoring their physical memory, exporting them).
// `allocator` has one hook for all of it (do_pools), so a wrapper such as checking mode forwards
// one object instead of one call per operation, and a new pool feature is a method and a hook
// here, not another hook on `allocator` and on every backend, wrapper and peer. The checks live
// in the non-virtual methods below, once for every backend.
#include "streampool/pools.hpp"

#include <string>

#include "core/format.hpp"
#include "streampool/errors.hpp"

namespace streampool {

device_pools::~device_pools() = default;

void device_pools::begin_allocate_to_pool(mempool_id pool, stream_filter filter) {
  if (pool.is_default()) {
    throw error("streampool: begin_allocate_to_pool: {0,0} is the default pool; use create_pool_id()");
  }
  if (!filter) throw error("streampool: begin_allocate_to_pool: the stream filter is empty");
  do_begin_allocate_to_pool(pool, std::move(filter));
}

void device_pools::end_allocate_to_pool(mempool_id pool) { do_end_allocate_to_pool(pool); }

void device_pools::release_pool(mempool_id pool) {
  if (pool.is_default()) throw error("streampool: release_pool: {0,0} is the default pool and cannot be released");
  do_release_pool(pool);
}

void device_pools::set_options(mempool_id pool, const pool_options& options) {
  if (pool.is_default()) {
    throw error("streampool: set_pool_options: {0,0} is the default pool; options belong to private pools");
  }
  do_set_options(pool, options);
}

pool_options device_pools::options(mempool_id pool) const {
  if (pool.is_default()) {
    throw error("streampool: get_pool_options: {0,0} is the default pool; options belong to private pools");
  }
  return do_options(pool);
}

void* device_pools::allocate_at(void* ptr, std::size_t bytes, mempool_id pool) {
  if (ptr == nullptr || bytes == 0 || bytes % 512 != 0) {
    throw error("streampool: allocate_at(" + core::format_pointer(reinterpret_cast<std::uintptr_t>(ptr)) + ", " +
                std::to_string(bytes) + " bytes): give a pointer of a private pool and a size that is a positive "
                "multiple of 512 (a block size of the pool)");
  }
  if (pool.is_default()) throw error("streampool: allocate_at: {0,0} is the default pool; name a private pool");
  return do_allocate_at(ptr, bytes, pool);
}

const char* to_string(sleep_mode mode) noexcept { return mode == sleep_mode::discard ? "discard" : "offload"; }

std::string to_json(const pool_sleep_state& s) {
  return std::string("{\"asleep\":") + (s.asleep ? "true" : "false") + ",\"mode\":\"" + to_string(s.mode) +
         "\",\"segments\":" + std::to_string(s.segments) + ",\"released_bytes\":" + std::to_string(s.released_bytes) +
         ",\"held_bytes\":" + std::to_string(s.held_bytes) + ",\"offloaded_bytes\":" +
         std::to_string(s.offloaded_bytes) + ",\"backup_bytes\":" + std::to_string(s.backup_bytes) + "}";
}

void device_pools::sleep(mempool_id pool, const sleep_options& options) {
  if (options.mode != sleep_mode::offload && options.mode != sleep_mode::discard) {
    throw error("streampool: sleep: mode " + std::to_string(static_cast<int>(options.mode)) +
                " is neither offload nor discard");
  }
  do_sleep(pool, options);
}

void device_pools::wake(mempool_id pool) { do_wake(pool); }

pool_sleep_state device_pools::sleep_state(mempool_id pool) const { return do_sleep_state(pool); }

}  // namespace streampool
