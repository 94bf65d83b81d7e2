// sim_host.cpp — the simulated device's pinned host memory: host_alloc / host_free (real memory,
// so programs and tests can write the buffers), host_register / host_unregister of the caller's
// memory, and a host capacity shared by both (host_memory). The driver calls, and memcpy_async as
// one work item on a stream, are memory_calls' (sim_memory_calls.cpp), counted and
// fault-injectable like every sim call. See Note [Sim pinned host memory].
#include <cstdlib>
#include <iterator>

#include "driver/sim/sim_host.hpp"

namespace streampool {

// Note [Sim pinned host memory]
// host_alloc hands out real, page-aligned memory from the C heap (std::aligned_alloc), so a
// program on the sim can fill its staging buffers and ASan sees a use after host_free. Requests
// are held against sim_options::host_capacity together with registered ranges (both are page-
// locked memory on a real machine); beyond it the call fails with out_of_memory before touching
// the heap, so "huge" requests are cheap to test. host_free, like cudaFreeHost, first completes
// the work of every stream (it synchronises) and is refused while a capture is active. Ranges
// are exact: host_free and host_unregister take only a start the sim handed out or registered;
// host_register refuses a range overlapping a registered one (cudaErrorHostMemoryAlreadyRegistered
// in CUDA) — the sim cannot check that the caller owns the memory, so it trusts it. memcpy_async
// submits one work item on its stream (events recorded after it complete with it); it moves no
// bytes in the sim's device-contents model.

namespace {

constexpr std::size_t host_page = 4096;

/// True when [addr, addr + bytes) overlaps a range of `ranges` (start -> size).
bool overlaps(const std::map<std::uintptr_t, std::size_t>& ranges, std::uintptr_t addr, std::size_t bytes) {
  auto next = ranges.lower_bound(addr);
  if (next != ranges.end() && next->first < addr + bytes) return true;
  if (next == ranges.begin()) return false;
  const auto before = std::prev(next);
  return before->first + before->second > addr;
}

}  // namespace

namespace sim {

host_memory::~host_memory() {
  for (const auto& [base, size] : allocs_) std::free(reinterpret_cast<void*>(base));
}

drv_result host_memory::alloc(std::size_t bytes, void** out) {
  if (bytes == 0) return fail(status::invalid_value);
  if (bytes > capacity_ - pinned_) return fail(status::out_of_memory, reason_host_capacity);
  void* memory = std::aligned_alloc(host_page, round_up(bytes, host_page));
  if (memory == nullptr) return fail(status::out_of_memory, reason_host_capacity);
  allocs_.emplace(reinterpret_cast<std::uintptr_t>(memory), bytes);
  pinned_ += bytes;
  *out = memory;
  return {};
}

void host_memory::free(void* ptr) {
  const auto found = allocs_.find(reinterpret_cast<std::uintptr_t>(ptr));
  pinned_ -= found->second;
  allocs_.erase(found);
  std::free(ptr);
}

drv_result host_memory::register_range(void* ptr, std::size_t bytes) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (ptr == nullptr || bytes == 0 || addr + bytes < addr) return fail(status::invalid_value);
  if (overlaps(registered_, addr, bytes) || overlaps(allocs_, addr, bytes)) return fail(status::invalid_value);
  if (bytes > capacity_ - pinned_) return fail(status::out_of_memory, reason_host_capacity);
  registered_.emplace(addr, bytes);
  pinned_ += bytes;
  return {};
}

drv_result host_memory::unregister_range(void* ptr) {
  const auto found = registered_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (found == registered_.end()) return fail(status::invalid_value);
  pinned_ -= found->second;
  registered_.erase(found);
  return {};
}

}  // namespace sim

}  // namespace streampool
