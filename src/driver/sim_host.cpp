// sim_host.cpp — the simulated device's pinned host memory: host_alloc / host_free (real memory,
// so programs and tests can write the buffers), host_register / host_unregister of the caller's
// memory, a host capacity shared by both, and memcpy_async as one work item on a stream. Counted
// and fault-injectable like every sim call. See Note [Sim pinned host memory].
#include <cstdlib>
#include <iterator>

#include "driver/sim_host.hpp"
#include "driver/sim_state.hpp"

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

// --- driver calls ------------------------------------------------------------------------------

drv_result sim_driver::host_alloc(std::size_t bytes, void** out) noexcept {
  *out = nullptr;
  return state_->run(counters_, driver_call::host_alloc, [&] { return state_->host_.alloc(bytes, out); });
}

drv_result sim_driver::host_free(void* ptr) noexcept {
  return state_->run(counters_, driver_call::host_free, [&] {
    if (ptr == nullptr) return drv_result{};
    if (state_->captures_.active() > 0) return state_->captures_.refuse();
    if (!state_->host_.owns(ptr)) return sim::fail(status::invalid_value);
    state_->streams_.complete_all();  // cudaFreeHost synchronises
    state_->host_.free(ptr);
    return drv_result{};
  });
}

drv_result sim_driver::host_register(void* ptr, std::size_t bytes) noexcept {
  return state_->run(counters_, driver_call::host_register, [&] { return state_->host_.register_range(ptr, bytes); });
}

drv_result sim_driver::host_unregister(void* ptr) noexcept {
  return state_->run(counters_, driver_call::host_unregister, [&] { return state_->host_.unregister_range(ptr); });
}

drv_result sim_driver::memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) noexcept {
  return state_->run(counters_, driver_call::memcpy_async, [&] {
    const std::uint32_t index = state_->streams_.find_stream(stream);
    if (index == sim::no_stream) return sim::fail(status::invalid_value);
    if (bytes == 0) return drv_result{};
    if (dst == nullptr || src == nullptr) return sim::fail(status::invalid_value);
    state_->streams_.submit(index);
    return drv_result{};
  });
}

std::size_t sim_driver::host_bytes_pinned() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->host_.pinned();
}

std::size_t sim_driver::live_host_allocs() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->host_.allocs();
}

std::size_t sim_driver::live_host_registrations() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->host_.registrations();
}

}  // namespace streampool
