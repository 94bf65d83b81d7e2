// async_allocator.cpp — the cudaMallocAsync backend's do_* hooks: the pointer map for frees and
// record_stream, lazy per-device setup, and the per-device entry points of async_device.
#include "async/async_allocator.hpp"

#include <algorithm>
#include <string>

#include "core/backends.hpp"
#include "core/format.hpp"

namespace streampool::async {

async_allocator::async_allocator(allocator_config config, std::shared_ptr<driver> drv)
    : allocator(std::move(config), std::move(drv)) {
  int count = 0;
  // No device is not an error (a machine without a GPU): the base class reports it at first use.
  if (!device_driver().device_count(&count).ok()) count = 0;
  slot_count_ = std::max(count, 0);
  slots_ = std::make_unique<device_slot[]>(static_cast<std::size_t>(slot_count_));
  for (int dev = 0; dev < slot_count_; ++dev) pools_.push_back(std::make_unique<pool_seam>(*this, dev));
}

async_allocator::~async_allocator() = default;

async_device* async_allocator::find_device(int device) const noexcept {
  if (device < 0 || device >= slot_count_) return nullptr;
  return slots_[static_cast<std::size_t>(device)].ready.load(std::memory_order_acquire);
}

const async_device* async_allocator::initialized_device(int device) const noexcept { return find_device(device); }

async_device& async_allocator::device(int device) {
  // resolve_device() of the base class already checked the range.
  device_slot& slot = slots_[static_cast<std::size_t>(device)];
  if (async_device* ready = slot.ready.load(std::memory_order_acquire)) return *ready;
  std::lock_guard lock(slot.init_mutex);
  if (async_device* ready = slot.ready.load(std::memory_order_relaxed)) return *ready;
  slot.owner = std::make_unique<async_device>(device_driver(), device, config(), pointers_, slot.trace);
  slot.ready.store(slot.owner.get(), std::memory_order_release);
  return *slot.owner;
}

error async_allocator::bad_pointer(const char* operation, void* ptr) const {
  const std::string head = "streampool: " + std::string(operation) + "(" + core::format_pointer(ptr) + "): ";
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (const auto containing = pointers_.find_containing(address)) {
    const auto& [base, record] = *containing;
    return error(head + "the pointer is " + std::to_string(address - base) + " bytes inside the allocation at " +
                 core::format_pointer(base) + " (" + format_size(record.size) + " on device " +
                 std::to_string(record.device) + "); pass the pointer that allocate() returned");
  }
  return error(head + "not a live allocation of this allocator (cudaMallocAsync backend): it was never "
                      "returned by allocate(), or it was already freed (double free)");
}

void* async_allocator::do_allocate(int dev, std::size_t bytes, stream_t stream) {
  return device(dev).allocate(bytes, stream);
}

void async_allocator::do_deallocate(void* ptr) {
  std::optional<allocation_record> record = pointers_.take(ptr);
  if (!record) throw bad_pointer("deallocate", ptr);
  // A live record means its device was set up (allocate created it).
  async_device& owner = *find_device(record->device);
  try {
    owner.free(ptr, *record);
  } catch (...) {
    pointers_.restore(ptr, std::move(*record));  // nothing changed: the allocation stays live
    throw;
  }
}

// Note [record_stream of a bad stream on cudaMallocAsync]
// A handle that is no stream is refused when record_stream is called, with nothing recorded, as
// native refuses it (Note [record_stream across devices] in src/native/native_allocator.cpp). This
// backend used to accept a garbage handle and fail only at the free. A stream of another device
// stays accepted here: this backend orders such a free by waiting on the host (see
// record_stream_order.cpp), which native cannot. The check is the same host-side lookup
// (cudaStreamGetDevice), made only for a stream other than the allocation's and never while a
// capture is underway on the block's device; a driver that cannot tell skips it.
void async_allocator::do_record_stream(void* ptr, stream_t stream) {
  const std::optional<std::pair<int, stream_t>> owner = pointers_.owner_of(ptr);
  if (!owner) throw bad_pointer("record_stream", ptr);
  // Same stream as the allocation's: no effect (docs/pytorch-compatibility.md §4 warns; the contract says "no effect").
  if (stream != owner->second) {
    const async_device* state = find_device(owner->first);
    if (state == nullptr || !state->capture_underway()) check_stream_handle(ptr, owner->first, stream);
  }
  if (pointers_.add_stream_use(ptr, stream) == stream_use_result::unknown_pointer) {
    throw bad_pointer("record_stream", ptr);
  }
}

void async_allocator::check_stream_handle(const void* ptr, int owner, stream_t stream) const {
  int device = -1;
  const drv_result result = device_driver().stream_get_device(stream, &device);
  if (result.ok() || result.code == status::not_supported) [[likely]] return;
  throw error("streampool: record_stream(" + core::format_pointer(ptr) + ", " + core::format_pointer(stream) +
              "): the stream is not a valid stream handle (" + device_driver().describe(result) +
              "); pass a live stream (the allocation was made on device " + std::to_string(owner) +
              "); nothing was recorded");
}

void async_allocator::do_empty_cache() {
  for (int dev = 0; dev < slot_count_; ++dev) {
    if (async_device* state = find_device(dev)) state->empty_cache();
  }
}

memory_stats async_allocator::do_stats(int dev) const {
  // A device never used reads as zeros and is not set up (PyTorch does the same).
  async_device* state = find_device(dev);
  return state ? state->stats() : memory_stats{};
}

void async_allocator::do_reset_peak_stats(int dev) {
  if (async_device* state = find_device(dev)) state->reset_peak_stats();
}

void async_allocator::do_reset_accumulated_stats(int dev) {
  if (async_device* state = find_device(dev)) state->reset_accumulated_stats();
}

memory_snapshot async_allocator::do_snapshot() const {
  memory_snapshot snapshot;
  for (int dev = 0; dev < slot_count_; ++dev) {
    const async_device* state = find_device(dev);
    if (state == nullptr) continue;
    state->collect_segments(snapshot.segments);
    // As in PyTorch, taking a snapshot is itself traced (size = active bytes).
    slots_[static_cast<std::size_t>(dev)].trace.record(trace_action::snapshot, dev, 0, state->active_bytes(),
                                                       nullptr);
  }
  std::sort(snapshot.segments.begin(), snapshot.segments.end(),
            [](const segment_info& a, const segment_info& b) { return a.address < b.address; });
  for (int dev = 0; dev < slot_count_; ++dev) {
    const device_slot& slot = slots_[static_cast<std::size_t>(dev)];
    if (!slot.trace.enabled()) continue;
    std::vector<trace_entry> entries = slot.trace.entries();
    snapshot.trace.insert(snapshot.trace.end(), entries.begin(), entries.end());
  }
  snapshot.allocator_settings = settings().text;
  return snapshot;
}

void async_allocator::do_record_history(bool enabled, std::size_t max_entries) {
  for (int dev = 0; dev < slot_count_; ++dev) {
    slots_[static_cast<std::size_t>(dev)].trace.configure(enabled, max_entries);
  }
}

void async_allocator::do_set_segment_listener(std::shared_ptr<const segment_listener> listener) {
  // Note [Segment listener]: each allocation's footprint is a segment here (segment_alloc /
  // segment_free), as this backend's trace has it.
  for (int dev = 0; dev < slot_count_; ++dev) slots_[static_cast<std::size_t>(dev)].trace.set_listener(listener);
}

std::vector<trace_entry> async_allocator::do_trace(int dev) const {
  return slots_[static_cast<std::size_t>(dev)].trace.entries();
}

void async_allocator::do_set_memory_fraction(int dev, double fraction) { device(dev).set_memory_fraction(fraction); }

// Note [Settings changed at run time] (src/config/runtime_settings.cpp): of the runtime keys this
// backend reads only per_process_memory_fraction (the others are PyTorch-native rules that
// cudaMallocAsync has no use for; apply_settings warns about them). It applies to every device,
// and only when the change names it: a cap set since with set_memory_fraction() stays otherwise.
void async_allocator::do_set_settings(std::string_view text, const allocator_config& next) {
  if (parse_config(text).source_of(config_key::per_process_memory_fraction) == config_source::default_value) return;
  for (int dev = 0; dev < slot_count_; ++dev) device(dev).set_memory_fraction(next.per_process_memory_fraction);
}

double async_allocator::do_memory_fraction(int dev) const {
  const async_device* state = find_device(dev);
  return state ? state->memory_fraction() : config().per_process_memory_fraction;
}

device_pools* async_allocator::do_pools(int dev) const { return pools_[static_cast<std::size_t>(dev)].get(); }

}  // namespace streampool::async

namespace streampool::async {

std::unique_ptr<allocator> make_async_allocator(allocator_config config, std::shared_ptr<driver> drv) {
  // Devices are set up on first use, so this succeeds on a machine with no device (or without
  // memory-pool support); the first allocation on such a device reports the problem.
  return std::make_unique<async_allocator>(std::move(config), std::move(drv));
}

}  // namespace streampool::async
