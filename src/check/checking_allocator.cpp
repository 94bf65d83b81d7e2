// checking_allocator.cpp — checking mode's allocate / deallocate / record_stream: the canary
// written after each allocation, verified and followed by the poison when it is freed. The
// remaining calls pass straight to the wrapped backend (checking_passthrough.cpp).
#include "check/checking_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "check/check_layout.hpp"
#include "core/format.hpp"

namespace streampool::check_impl {

// Note [Checking mode reports, never throws]
// An overrun found at deallocate is the program's bug, not a failure of the free: the pointer is
// valid and the block goes back to the backend as usual (poisoned), so nothing is lost and a
// program that catches nothing keeps running. The report goes to the warning handler
// (set_warning_handler(); by default stderr), naming the allocation: its number, address,
// requested size, device, stream and allocation time, which match the trace's 'alloc' entry
// when record_history is on. A program that wants to stop at the first overrun installs a
// handler that aborts or throws. Driver failures of the check itself (a failed memset, no check
// kernel in this build) are warnings too: checking mode must never make a correct free fail.
// Only allocate throws, when the canary cannot be written (the block goes back first).

// Note [Checking mode and capture]
// While the allocation's stream (or a stream it was record_stream'ed to) is capturing, stream
// work would be captured into the graph and replayed later, and the canary check, which waits
// for its kernel, cannot run at all. So an allocation made during a capture gets no canary and a
// block freed during a capture is neither checked nor poisoned: checking mode covers eager code.
// Frees outside any capture never wait on a CUDA call that a capture forbids: the check waits in
// relaxed capture mode (Note [Check slots], src/driver/cuda/cuda_check_ops.cpp).

checking_allocator::checking_allocator(std::unique_ptr<allocator> inner, allocator_config config,
                                       std::shared_ptr<driver> drv)
    : allocator(std::move(config), std::move(drv)), inner_(std::move(inner)) {
  if (!inner_) throw error("checking mode: no backend to wrap");
  int count = 0;
  if (!device_driver().device_count(&count).ok()) count = 0;
  for (int dev = 0; dev < count; ++dev) pools_.push_back(std::make_unique<pool_seam>(inner_->pools(dev)));
}

checking_allocator::~checking_allocator() = default;

bool checking_allocator::not_capturing(stream_t stream) const noexcept {
  capture_info info;
  const drv_result result = device_driver().stream_capture_info(stream, &info);
  return result.ok() && info.status == capture_status::none;
}

void* checking_allocator::do_allocate(int device, std::size_t bytes, stream_t stream) {
  void* ptr = inner_->allocate(padded_size(bytes), stream, device);
  checked_allocation allocation;
  allocation.requested = bytes;
  allocation.padded = padded_size(bytes);
  allocation.device = device;
  allocation.stream = stream;
  allocation.time_us = core::now_us();
  try {
    if (not_capturing(stream)) {  // Note [Checking mode and capture]
      driver& drv = device_driver();
      const drv_result written = drv.memset_async(device, static_cast<std::byte*>(ptr) + bytes, canary_byte,
                                                  allocation.padded - bytes, stream);
      check(drv, written, "checking mode: cudaMemsetAsync of the canary after " + format_size(bytes));
      allocation.guarded = true;
    }
    const std::lock_guard lock(mutex_);
    live_.reserve_one();  // may throw std::bad_alloc: then nothing changed and the block goes back
    allocation.serial = ++serial_;
    live_.insert(reinterpret_cast<std::uintptr_t>(ptr), std::move(allocation));
  } catch (...) {
    inner_->deallocate(ptr);
    throw;
  }
  return ptr;
}

drv_result checking_allocator::order_after_uses(const checked_allocation& allocation) const noexcept {
  driver& drv = device_driver();
  for (const stream_t used : allocation.used_by) {
    event_t event = nullptr;
    drv_result result = drv.event_create(allocation.device, &event);
    if (!result.ok()) return result;
    result = drv.event_record(event, used);
    if (result.ok()) result = drv.stream_wait_event(allocation.stream, event);
    (void)drv.event_destroy(allocation.device, event);  // the wait keeps what it needs
    if (!result.ok()) return result;
  }
  return {};
}

void checking_allocator::check_and_poison(void* ptr, const checked_allocation& allocation) {
  driver& drv = device_driver();
  const bool eager = not_capturing(allocation.stream) &&
                     std::all_of(allocation.used_by.begin(), allocation.used_by.end(),
                                 [&](stream_t used) { return not_capturing(used); });
  if (!eager) return;  // Note [Checking mode and capture]
  if (const drv_result ordered = order_after_uses(allocation); !ordered.ok()) {
    // Checking or poisoning now could race with a record_stream'ed reader: leave the block be.
    warn(check_failure_message(ptr, allocation, "ordering the check after its record_stream streams",
                               drv.describe(ordered)));
    return;
  }
  if (allocation.guarded) {
    byte_check found;
    const drv_result checked = drv.check_bytes(allocation.device, static_cast<std::byte*>(ptr) + allocation.requested,
                                               allocation.padded - allocation.requested, canary_byte,
                                               allocation.stream, &found);
    if (checked.ok() && found.mismatches != 0) {
      warn(overrun_message(ptr, allocation, found));
    } else if (checked.code == status::not_supported) {
      warn("checking mode: canaries are written but not verified: this libstreampool was built without "
           "its check kernel (STREAMPOOL_BUILD_KERNELS=OFF); freed blocks are still poisoned");
    } else if (!checked.ok()) {
      warn(check_failure_message(ptr, allocation, "verifying the canary", drv.describe(checked)));
    }
  }
  const drv_result poisoned = drv.memset_async(allocation.device, ptr, poison_byte, allocation.padded,
                                               allocation.stream);
  if (!poisoned.ok()) {
    warn(check_failure_message(ptr, allocation, "poisoning the freed block", drv.describe(poisoned)));
  }
}

void checking_allocator::do_deallocate(void* ptr) {
  checked_allocation allocation;
  bool ours = false;
  {
    // Erase first: once the backend has the block back, another thread may be handed the same
    // address and insert its own record (the race of Note [Free erases its record first]).
    const std::lock_guard lock(mutex_);
    if (std::optional<checked_allocation> found = live_.take(reinterpret_cast<std::uintptr_t>(ptr))) {
      allocation = std::move(*found);
      ours = true;
    }
  }
  if (!ours) {
    inner_->deallocate(ptr);  // the backend reports it (double free, unknown pointer)
    return;
  }
  try {
    check_and_poison(ptr, allocation);
    inner_->deallocate(ptr);
  } catch (...) {
    // The backend kept the block (a throwing deallocate leaves it live): so do we.
    const std::lock_guard lock(mutex_);
    live_.reserve_one();  // cannot grow: the entry taken out above left its slot free
    live_.insert(reinterpret_cast<std::uintptr_t>(ptr), std::move(allocation));
    throw;
  }
}

void checking_allocator::do_record_stream(void* ptr, stream_t stream) {
  inner_->record_stream(ptr, stream);  // validates ptr
  const std::lock_guard lock(mutex_);
  checked_allocation* found = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (found == nullptr || stream == found->stream) return;
  std::vector<stream_t>& used = found->used_by;
  if (std::find(used.begin(), used.end(), stream) == used.end()) used.push_back(stream);
}

std::unique_ptr<allocator> make_checking_allocator(std::unique_ptr<allocator> inner, allocator_config config,
                                                   std::shared_ptr<driver> drv) {
  return std::make_unique<checking_allocator>(std::move(inner), std::move(config), std::move(drv));
}

}  // namespace streampool::check_impl
