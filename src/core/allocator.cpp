// allocator.cpp — the non-virtual public API of `allocator`: device resolution and argument checks
// shared by both backends, then a call to the backend's do_* hook.
#include "streampool/allocator.hpp"

#include <atomic>
#include <mutex>
#include <string>

#include "core/format.hpp"

namespace streampool {

/// The config with the changes of set_settings(), behind its own mutex (readers copy it).
struct allocator::settings_state {
  mutable std::mutex mutex;
  allocator_config current;
};

allocator::allocator(allocator_config config, std::shared_ptr<driver> drv)
    : config_(std::move(config)), settings_(std::make_unique<settings_state>()), driver_(std::move(drv)) {
  settings_->current = config_;
  if (!driver_) throw error("allocator: driver is null");
  int count = 0;
  const drv_result result = driver_->device_count(&count);
  // No device is not an error here: construction must work on machines without a GPU (the first
  // allocation reports it). Any device call then fails with a clear message from resolve_device.
  device_count_ = result.ok() ? count : 0;
}

allocator::~allocator() = default;

int allocator::resolve_device(int device) const {
  if (device == current_device) {
    const drv_result result = driver_->get_device(&device);
    if (!result.ok()) {
      throw cuda_error("streampool: cannot determine the current device: " + driver_->describe(result),
                       result.native);
    }
  }
  if (device < 0 || device >= device_count_) {
    if (device_count_ == 0) {
      int ignored = 0;
      const drv_result result = driver_->device_count(&ignored);
      throw error("streampool: no device to allocate on (" + std::string(driver_->name()) +
                  " driver: " + driver_->describe(result) +
                  "); on a machine without a GPU use the simulated driver");
    }
    throw error("streampool: device " + std::to_string(device) + " is out of range; this machine has " +
                std::to_string(device_count_) + " device(s) (valid: 0.." + std::to_string(device_count_ - 1) + ")");
  }
  return device;
}

// Note [Allocate fast path]
// allocate() runs on every allocation, so its common case (an explicit device in range, a size in
// [1, 1 EiB)) is two unsigned compares and a tail call into the backend: `bytes - 1 <
// max_request_bytes - 1` is false for 0 (it wraps) and for 1 EiB or more, and
// `unsigned(device) < unsigned(device_count_)` is false for current_device (-1) and for any device
// out of range. The rest — the current device (a driver call; it is not cached per thread, since
// the caller may switch devices behind our back with cudaSetDevice), the errors — is in an
// out-of-line lambda and cold functions, so that the fast path needs no stack frame. The order of
// the checks there (size 0, then the device, then 1 EiB) decides which error a doubly bad call
// gets, as before.
namespace {

[[noreturn, gnu::cold, gnu::noinline]] void throw_size_zero() {
  throw error("streampool: allocate(0): size 0 is not a valid request; allocate at least 1 byte "
              "(streampool never returns a null pointer for a successful allocation)");
}

[[noreturn, gnu::cold, gnu::noinline]] void throw_over_1eib(std::size_t bytes, int dev) {
  throw out_of_memory("CUDA out of memory. Tried to allocate more than 1EB memory (" + std::to_string(bytes) +
                          " bytes requested on device " + std::to_string(dev) + ").",
                      bytes, dev);
}

}  // namespace

void* allocator::allocate(std::size_t bytes, stream_t stream, int device) {
  if (bytes - 1 < max_request_bytes - 1 &&
      static_cast<unsigned>(device) < static_cast<unsigned>(device_count_)) [[likely]] {
    return do_allocate(device, bytes, stream);
  }
  // Out of line (a lambda may call private members), so that the fast path saves no registers.
  const auto checked = [](allocator* self, std::size_t n, stream_t s, int d) __attribute__((noinline)) -> void* {
    if (n == 0) throw_size_zero();
    const int dev = self->resolve_device(d);
    if (n >= max_request_bytes) throw_over_1eib(n, dev);
    return self->do_allocate(dev, n, s);
  };
  return checked(this, bytes, stream, device);
}

void allocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  do_deallocate(ptr);
}

void allocator::record_stream(void* ptr, stream_t stream) {
  if (ptr == nullptr) throw error("streampool: record_stream(nullptr): pass a pointer returned by allocate()");
  do_record_stream(ptr, stream);
}

void allocator::empty_cache() { do_empty_cache(); }

memory_stats allocator::stats(int device) const { return do_stats(resolve_device(device)); }
void allocator::reset_peak_stats(int device) { do_reset_peak_stats(resolve_device(device)); }
void allocator::reset_accumulated_stats(int device) { do_reset_accumulated_stats(resolve_device(device)); }

memory_snapshot allocator::snapshot() const { return do_snapshot(); }

void allocator::record_history(bool enabled, std::size_t max_entries) {
  if (enabled && max_entries == 0) {
    throw error("streampool: record_history: max_entries must be at least 1 (or pass enabled=false)");
  }
  do_record_history(enabled, max_entries);
}

std::vector<trace_entry> allocator::trace(int device) const { return do_trace(resolve_device(device)); }

void allocator::set_segment_listener(segment_listener listener) {
  do_set_segment_listener(listener ? std::make_shared<const segment_listener>(std::move(listener)) : nullptr);
}

void allocator::do_set_segment_listener(std::shared_ptr<const segment_listener> /*listener*/) {
  throw error("streampool: this allocator (" + std::string(backend_name()) +
              ") reports no segment events of its own: set_segment_listener is not supported");
}

void allocator::set_memory_fraction(double fraction, int device) {
  // Written so that NaN fails too.
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw error("streampool: set_memory_fraction: invalid fraction " + std::to_string(fraction) +
                "; allowed range is [0.0, 1.0] (1.0 = no cap)");
  }
  do_set_memory_fraction(resolve_device(device), fraction);
}

double allocator::memory_fraction(int device) const { return do_memory_fraction(resolve_device(device)); }

void allocator::set_settings(std::string_view text) {
  // Note [Settings changed at run time]: one change at a time; nothing changes when it is refused.
  std::lock_guard lock(settings_->mutex);
  allocator_config next = apply_settings(settings_->current, text);
  do_set_settings(text, next);
  for (const std::string& w : next.warnings) warn(w);
  settings_->current = std::move(next);
}

void allocator::do_set_settings(std::string_view /*text*/, const allocator_config& /*next*/) {
  throw error("streampool: this allocator (" + std::string(backend_name()) +
              ") cannot change its settings at run time; make a new one with the config you want");
}

allocator_config allocator::settings() const {
  std::lock_guard lock(settings_->mutex);
  return settings_->current;
}

mempool_id allocator::create_pool_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return mempool_id{0, next.fetch_add(1, std::memory_order_relaxed)};
}

device_pools& allocator::pools(int device) const {
  device_pools* pools = do_pools(resolve_device(device));
  if (pools == nullptr) {
    throw error("streampool: private pools are not supported by this allocator (" + std::string(backend_name()) + ")");
  }
  return *pools;
}

device_pools* allocator::do_pools(int /*device*/) const { return nullptr; }

void allocator::begin_allocate_to_pool(mempool_id pool, stream_filter filter, int device) {
  pools(device).begin_allocate_to_pool(pool, std::move(filter));
}

void allocator::end_allocate_to_pool(mempool_id pool, int device) { pools(device).end_allocate_to_pool(pool); }

void allocator::release_pool(mempool_id pool, int device) { pools(device).release_pool(pool); }

// Note [Pool options]
// PyTorch 2.8+ lets a torch.cuda.MemPool opt out of splitting (no_split: each allocation keeps the
// whole block it finds or creates, so one allocation per segment) and opt in to serving the general
// pools when they run out (use_on_oom: after every step of the OOM ladder, including releasing the
// cache, an allocation outside any pool takes a free block of such a pool that fits, on its stream,
// before it fails; the block stays the pool's and goes back to it when freed). Both backends keep
// the options with the pool in the capture router; a pool released by all its users (a deleted
// MemPool) never serves an allocation on OOM. The cudaMallocAsync backend's private blocks are
// never split in the first place, so no_split changes nothing there.
void allocator::set_pool_options(mempool_id pool, const pool_options& options, int device) {
  pools(device).set_options(pool, options);
}

pool_options allocator::get_pool_options(mempool_id pool, int device) const { return pools(device).options(pool); }

void* allocator::allocate_at(void* ptr, std::size_t bytes, mempool_id pool, int device) {
  return pools(device).allocate_at(ptr, bytes, pool);
}

}  // namespace streampool
