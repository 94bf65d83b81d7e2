// sim_host.cpp — the simulated device's pinned host memory: host_alloc / host_free (real memory,
// so programs and tests can write the buffers), host_register / host_unregister of the caller's
// memory, a host capacity shared by both, and memcpy_async as one work item on a stream. Counted
// and fault-injectable like every sim call. See Note [Sim pinned host memory].
#include <cstdlib>
#include <iterator>

#include "driver/sim_state.hpp"
#include "streampool/errors.hpp"

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

namespace sim {

host_book::~host_book() {
  for (const auto& [base, size] : allocs) std::free(reinterpret_cast<void*>(base));
}

}  // namespace sim

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

drv_result sim_driver::host_alloc(std::size_t bytes, void** out) noexcept {
  *out = nullptr;
  return state_->run(counters_, driver_call::host_alloc, [&] {
    sim::host_book& book = state_->host_;
    if (bytes == 0) return sim::fail(status::invalid_value);
    if (bytes > options_.host_capacity - book.pinned) {
      return sim::fail(status::out_of_memory, sim::reason_host_capacity);
    }
    const std::size_t rounded = sim::round_up(bytes, host_page);
    void* memory = std::aligned_alloc(host_page, rounded);
    if (memory == nullptr) return sim::fail(status::out_of_memory, sim::reason_host_capacity);
    book.allocs.emplace(reinterpret_cast<std::uintptr_t>(memory), bytes);
    book.pinned += bytes;
    *out = memory;
    return drv_result{};
  });
}

drv_result sim_driver::host_free(void* ptr) noexcept {
  return state_->run(counters_, driver_call::host_free, [&] {
    if (ptr == nullptr) return drv_result{};
    if (state_->active_captures_ > 0) return state_->refuse_in_capture();
    sim::host_book& book = state_->host_;
    const auto found = book.allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (found == book.allocs.end()) return sim::fail(status::invalid_value);
    state_->complete_all();  // cudaFreeHost synchronises
    book.pinned -= found->second;
    book.allocs.erase(found);
    std::free(ptr);
    return drv_result{};
  });
}

drv_result sim_driver::host_register(void* ptr, std::size_t bytes) noexcept {
  return state_->run(counters_, driver_call::host_register, [&] {
    sim::host_book& book = state_->host_;
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    if (ptr == nullptr || bytes == 0 || addr + bytes < addr) return sim::fail(status::invalid_value);
    if (overlaps(book.registered, addr, bytes) || overlaps(book.allocs, addr, bytes)) {
      return sim::fail(status::invalid_value);
    }
    if (bytes > options_.host_capacity - book.pinned) {
      return sim::fail(status::out_of_memory, sim::reason_host_capacity);
    }
    book.registered.emplace(addr, bytes);
    book.pinned += bytes;
    return drv_result{};
  });
}

drv_result sim_driver::host_unregister(void* ptr) noexcept {
  return state_->run(counters_, driver_call::host_unregister, [&] {
    sim::host_book& book = state_->host_;
    const auto found = book.registered.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (found == book.registered.end()) return sim::fail(status::invalid_value);
    book.pinned -= found->second;
    book.registered.erase(found);
    return drv_result{};
  });
}

drv_result sim_driver::memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) noexcept {
  return state_->run(counters_, driver_call::memcpy_async, [&] {
    const std::uint32_t index = state_->find_stream(stream);
    if (index == sim::no_stream) return sim::fail(status::invalid_value);
    if (bytes == 0) return drv_result{};
    if (dst == nullptr || src == nullptr) return sim::fail(status::invalid_value);
    state_->submit(index);
    return drv_result{};
  });
}

std::uint64_t sim_driver::submitted_work(stream_t stream) const {
  const std::lock_guard lock(state_->mutex_);
  const std::uint32_t index = state_->find_stream(stream);
  if (index == sim::no_stream) throw error("sim_driver::submitted_work: not a live stream of this sim");
  return state_->streams_[index].submitted;
}

std::uint64_t sim_driver::completed_work(stream_t stream) const {
  const std::lock_guard lock(state_->mutex_);
  const std::uint32_t index = state_->find_stream(stream);
  if (index == sim::no_stream) throw error("sim_driver::completed_work: not a live stream of this sim");
  return state_->streams_[index].completed;
}

std::size_t sim_driver::host_bytes_pinned() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->host_.pinned;
}

std::size_t sim_driver::live_host_allocs() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->host_.allocs.size();
}

std::size_t sim_driver::live_host_registrations() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->host_.registered.size();
}

}  // namespace streampool
