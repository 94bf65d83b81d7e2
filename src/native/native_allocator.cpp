// native_allocator.cpp — record_stream, the slow entry of allocate, bad pointer diagnostics and
// the plumbing of the remaining allocator hooks to the device states (allocate and deallocate
// themselves: hot_path.cpp).
#include "native/native_allocator.hpp"

#include <algorithm>
#include <mutex>
#include <string>

#include "core/backends.hpp"
#include "core/format.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

native_allocator::native_allocator(allocator_config config, std::shared_ptr<driver> drv)
    : allocator(std::move(config), std::move(drv)), live_config_(allocator::config()), policy_(live_config_) {
  int count = 0;
  if (!device_driver().device_count(&count).ok()) count = 0;
  devices_.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    devices_.push_back(
        std::make_unique<device_state>(device_driver(), live_config_, policy_, segments_, i, vmm_warned_));
    pools_.push_back(std::make_unique<pool_seam>(*devices_.back(), segments_));
  }
}

native_allocator::~native_allocator() = default;

// --- hot paths (do_allocate and do_deallocate: hot_path.cpp) ----------------------------------------

block* native_allocator::allocate_slow_entry(device_state& d, stream_t stream, std::size_t rounded,
                                             std::size_t requested) {
  std::lock_guard device_lock(d.mutex());
  stream_arena* a = nullptr;
  if (d.capture_underway()) {
    d.reuse_in_capture_locked(stream);  // Note [Reuse within a capture] (graph_capture_record_stream_reuse)
    a = &d.route_locked(stream);  // Note [Deferred frees during capture]: no event processing
  } else {
    d.process_deferred(nullptr);
    d.process_all_events(nullptr);  // docs/pytorch-compatibility.md §2.3 step 1, for every stream of the device
    a = &d.default_arena_locked(stream);
  }
  d.check_awake_locked(a->pool_id(), requested);  // Note [Refused while asleep]
  std::lock_guard arena_lock(a->mutex());
  block* b = a->try_allocate(rounded, requested, stream);
  return b != nullptr ? b : d.allocate_slow(*a, rounded, requested, stream);
}

// Note [Settings changed at run time] (src/config/runtime_settings.cpp): every device mutex is
// held (in device order) while the runtime keys of live_config_ change, so no slow path reads a
// half-changed config; the hot path reads only the size rules, which are atomics (Note [Size rules
// changed at run time]).
void native_allocator::do_set_settings(std::string_view text, const allocator_config& next) {
  const bool fraction_given =
      parse_config(text).source_of(config_key::per_process_memory_fraction) != config_source::default_value;
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(devices_.size());
  for (auto& d : devices_) locks.emplace_back(d->mutex());
  copy_runtime_values(next, live_config_);
  policy_.update(live_config_);
  for (auto& d : devices_) d->apply_settings_locked(fraction_given);
}

void native_allocator::do_record_stream(void* ptr, stream_t stream) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (stream_arena* a = segments_.find(address)) {
    std::lock_guard lock(a->mutex());
    if (block* b = a->find_live(address)) {
      if (stream == b->stream) return;
      // Note [record_stream across devices]: no lookup while a capture is underway.
      if (!a->device().capture_underway()) check_stream_device(*a, *b, stream);
      a->record_use(b, stream, a->device().capture_underway());
      return;
    }
  }
  bad_pointer("record_stream", ptr);
}

// Note [record_stream across devices]
// An event recorded on a stream of device 1 cannot order the reuse of memory of device 0 (and
// cudaEventRecord refuses an event of another device), so a use on another device's stream would
// only surface at free time, as a deallocate that fails. record_stream therefore asks the driver
// which device the stream belongs to (cudaStreamGetDevice, a host-side lookup: no device work)
// and refuses a stream of another device, or a handle that is no stream, before anything is
// recorded. A driver that cannot tell (status::not_supported: a runtime older than CUDA 12.8, or a
// driver without the call) skips the check. The call is made only when the stream differs from the
// block's own, under the arena lock (it takes no lock of ours), and never while one of this
// device's captures is underway: on the H200 (CUDA 13, 2026-12-01) cudaStreamGetDevice made in
// the default capture mode during a torch.cuda.graph capture failed with
// cudaErrorStreamCaptureUnsupported and invalidated the capture (autograd records the backward's
// stream on gradients during a captured training step). A capture-time use is dropped at the end
// of the capture anyway (Note [Deferred frees during capture]), so nothing is lost by not checking
// it; the real driver also makes the call in relaxed capture mode (Note [Relaxed queries]) for
// captures streampool is not told about.
void native_allocator::check_stream_device(const stream_arena& a, const block& b, stream_t stream) const {
  int device = -1;
  const drv_result result = device_driver().stream_get_device(stream, &device);
  if (result.code == status::not_supported) return;
  const int owner = a.device().index;
  if (result.ok() && device == owner) [[likely]] return;
  const std::string head = "streampool: record_stream(" + core::format_pointer(b.ptr) + ", " +
                           core::format_pointer(stream) + "): ";
  if (!result.ok()) {
    throw error(head + "the stream is not a valid stream handle (" + device_driver().describe(result) +
                "); pass a live stream of device " + std::to_string(owner) + "; nothing was recorded");
  }
  throw error(head + "the stream belongs to device " + std::to_string(device) + ", but the block (" +
              format_size(b.size) + ") was allocated on device " + std::to_string(owner) +
              "; record a stream of device " + std::to_string(owner) +
              " (to order work of another device, make one of its streams wait on an event of that device); "
              "nothing was recorded");
}

void native_allocator::bad_pointer(const char* operation, const void* ptr) const {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  const std::string head = std::string("streampool: ") + operation + "(" + core::format_pointer(ptr) + "): ";
  memory_snapshot snap;
  for (const auto& d : devices_) d->append_segments(snap.segments);
  for (const segment_info& seg : snap.segments) {
    if (address < seg.address || address >= seg.address + seg.total_size) continue;
    for (const block_info& b : seg.blocks) {
      if (address < b.address || address >= b.address + b.size) continue;
      const std::string where = core::format_pointer(b.address) + " (" + format_size(b.size) + ", device " +
                                std::to_string(seg.device) + ")";
      if (b.state != block_state::active_allocated) {
        throw error(head + "no allocation starts here: the address is in the free block at " + where +
                    "; it was already freed (double free?)");
      }
      throw error(head + "invalid device pointer: it points " + std::to_string(address - b.address) +
                  " bytes into the allocated block at " + where + "; pass the pointer allocate() returned");
    }
  }
  throw error(head + "invalid device pointer: it was not returned by allocate() of this allocator");
}

// --- the other hooks ----------------------------------------------------------------------------------

void native_allocator::do_empty_cache() {
  for (const auto& d : devices_) (void)d->empty_cache();
}

memory_stats native_allocator::do_stats(int device) const { return devices_[static_cast<std::size_t>(device)]->stats(); }
void native_allocator::do_reset_peak_stats(int device) { devices_[static_cast<std::size_t>(device)]->reset_peaks(); }
void native_allocator::do_reset_accumulated_stats(int device) {
  devices_[static_cast<std::size_t>(device)]->reset_accumulated();
}

memory_snapshot native_allocator::do_snapshot() const {
  memory_snapshot snap;
  for (const auto& d : devices_) d->append_snapshot(snap);
  std::sort(snap.segments.begin(), snap.segments.end(),
            [](const segment_info& a, const segment_info& b) { return a.address < b.address; });
  for (const auto& d : devices_) {
    std::vector<trace_entry> entries = d->trace().entries();
    snap.trace.insert(snap.trace.end(), entries.begin(), entries.end());
  }
  snap.allocator_settings = settings().text;
  // docs/pytorch-compatibility.md §2.15: taking a snapshot is itself a trace event (size = active bytes); it is recorded
  // after the trace was copied, so a snapshot's last entry is still the last allocator action.
  for (const auto& d : devices_) {
    if (!d->trace().enabled()) continue;
    std::size_t active = 0;
    for (const segment_info& seg : snap.segments) {
      if (seg.device == d->index()) active += seg.active_size;
    }
    d->trace().record(trace_action::snapshot, d->index(), 0, active, nullptr);
  }
  return snap;
}

void native_allocator::do_record_history(bool enabled, std::size_t max_entries) {
  for (const auto& d : devices_) d->trace().configure(enabled, max_entries);
}

std::vector<trace_entry> native_allocator::do_trace(int device) const {
  return devices_[static_cast<std::size_t>(device)]->trace().entries();
}

void native_allocator::do_set_segment_listener(std::shared_ptr<const segment_listener> listener) {
  for (const auto& d : devices_) d->trace().set_listener(listener);  // Note [Segment listener]
}

void native_allocator::do_set_memory_fraction(int device, double fraction) {
  device_state& d = *devices_[static_cast<std::size_t>(device)];
  std::lock_guard lock(d.mutex());
  d.set_fraction(fraction);
}

double native_allocator::do_memory_fraction(int device) const {
  return devices_[static_cast<std::size_t>(device)]->fraction();
}

device_pools* native_allocator::do_pools(int device) const { return pools_[static_cast<std::size_t>(device)].get(); }

int native_allocator::pool_use_count(mempool_id pool, int device) const {
  return devices_.at(static_cast<std::size_t>(device))->pool_use_count(pool);
}
std::uint64_t native_allocator::pending_events(int device) const {
  return devices_.at(static_cast<std::size_t>(device))->pending_events();
}
std::size_t native_allocator::events_created(int device) const {
  return devices_.at(static_cast<std::size_t>(device))->events().created();
}
void native_allocator::set_front_blocks(int device, bool on) {
  devices_.at(static_cast<std::size_t>(device))->set_front_blocks(on);
}

std::uint64_t native_allocator::peak_arena_reads(int device) const {
  return devices_.at(static_cast<std::size_t>(device))->peak_arena_reads();
}

std::unique_ptr<allocator> make_native_allocator(allocator_config config, std::shared_ptr<driver> drv) {
  return std::make_unique<native_allocator>(std::move(config), std::move(drv));
}

}  // namespace streampool::native
