// torch_allocator.cpp — the allocation hooks of torch_allocator: malloc/free (DataPtr and raw),
// record_stream, the cache, the memory fraction, statistics, and OOM as c10::OutOfMemoryError.
#include "torch_allocator.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

namespace streampool::torch_ext {

namespace {

std::atomic<torch_allocator*> g_installed{nullptr};

// The DataPtr deleter runs in destructors (~TensorImpl, ~StorageImpl), where an exception ends the
// process (seen on the H200: std::terminate after a failed cudaFreeAsync of a graph's memory). A
// free that fails is reported as a warning naming the pointer; that memory stays with streampool.
void delete_through_installed(void* ptr) noexcept {
  torch_allocator* instance = g_installed.load(std::memory_order_acquire);
  if (instance == nullptr) return;
  try {
    instance->raw_delete(ptr);
  } catch (const std::exception& e) {
    TORCH_WARN("streampool: a tensor's memory could not be freed (it stays allocated): ", e.what());
  } catch (...) {
    TORCH_WARN("streampool: a tensor's memory at ", ptr, " could not be freed (it stays allocated)");
  }
}

c10::DeviceIndex current_device() {
  c10::DeviceIndex device = -1;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return device;
}

void copy_stat(const stat& from, c10::CachingAllocator::Stat& to) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

void copy_stats(const stat_array& from, c10::CachingAllocator::StatArray& to) {
  for (std::size_t i = 0; i < stat_pool_count; ++i) copy_stat(from[i], to[i]);
}

// Note [Profiler memory events]
// torch.profiler(profile_memory=True) learns of every allocation and free from the allocator
// (c10::reportMemoryUsageToProfiler: the pointer, the bytes, the device's allocated and reserved
// totals), as PyTorch's allocator reports them. The extension does the same while a profiler asks
// for memory (one thread-local check otherwise). The bytes are the change of the device's
// allocated_bytes across the call (the size as rounded by the backend, which the C++ API does not
// return; a free knows only its pointer); with other threads allocating on the device at the same
// moment the figure can include theirs.
struct device_usage {
  std::int64_t allocated = 0;
  std::int64_t reserved = 0;
};

device_usage usage_of(const allocator& a, c10::DeviceIndex device) {
  const memory_stats s = a.stats(device);
  return {s.allocated_bytes[0].current, s.reserved_bytes[0].current};
}

void report_to_profiler(void* ptr, std::int64_t bytes, const device_usage& now, c10::DeviceIndex device) {
  c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<size_t>(now.allocated), static_cast<size_t>(now.reserved),
                                   c10::Device(c10::DeviceType::CUDA, device));
}

}  // namespace

torch_allocator* installed() noexcept { return g_installed.load(std::memory_order_acquire); }
void set_installed(torch_allocator* instance) noexcept { g_installed.store(instance, std::memory_order_release); }

// Note [Built at first use]
// install() parses and validates the config (a bad one fails there) but makes no CUDA call: the
// streampool allocator, whose construction asks the driver for the devices (cuInit), is built
// when PyTorch initialises CUDA (init(), from torch.cuda's lazy init) or at the first call that
// needs it. A process that installs streampool and then forks before using CUDA therefore leaves
// CUDA usable in the child, as with PyTorch's own allocator (test_cuda.py's
// test_is_pinned_no_context, DataLoader workers started with fork).
torch_allocator::torch_allocator(allocator_config config, env_snapshot env)
    : config_(std::move(config)), env_(std::move(env)) {}

allocator& torch_allocator::build() const {
  std::call_once(built_once_, [this] {
    alloc_ = make_allocator(config_, make_cuda_driver());
    built_.store(alloc_.get(), std::memory_order_release);
  });
  return *alloc_;
}

// PyTorch's names for its backends ("native", "cudaMallocAsync"): torch.cuda.get_allocator_backend()
// returns it, and code (PyTorch's tests among it) compares it with those names.
std::string torch_allocator::name() { return std::string(to_string(config_.backend)); }

void torch_allocator::init(int /*device_count*/) {
  // Note [Built at first use]: CUDA is being initialised, so the allocator can be built now; it
  // sizes its per-device state from the driver itself.
  (void)impl();
  initialized_.store(true);
}

// --- allocation -----------------------------------------------------------------------------------

void* torch_allocator::malloc_on(size_t nbytes, c10::DeviceIndex device, cudaStream_t stream) {
  if (nbytes == 0) return nullptr;
  if (!enabled_.load(std::memory_order_relaxed)) {  // Note [Caching disabled]
    void* ptr = nullptr;
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaMalloc(&ptr, nbytes));
    std::lock_guard<std::mutex> lock(uncached_mutex_);
    uncached_.insert(ptr);
    uncached_count_.fetch_add(1);
    return ptr;
  }
  context_ptr context = contexts_.before_alloc();  // Note [Stack contexts]: before any lock of ours
  const bool profiling = c10::memoryProfilingEnabled();  // Note [Profiler memory events]
  const std::int64_t before = profiling ? usage_of(impl(), device).allocated : 0;
  try {
    void* ptr = impl().allocate(nbytes, stream, device);
    if (context != nullptr) contexts_.after_alloc(ptr, std::move(context));
    if (profiling) {
      const device_usage now = usage_of(impl(), device);
      report_to_profiler(ptr, now.allocated - before, now, device);
    }
    return ptr;
  } catch (const out_of_memory& oom) {
    raise_oom(oom, nbytes, device);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: allocation of ", nbytes, " bytes on device ", static_cast<int>(device),
                " failed: ", e.what());
  }
}

void torch_allocator::raise_oom(const out_of_memory& oom, size_t nbytes, c10::DeviceIndex device) {
  std::size_t device_free = 0;
  std::size_t device_total = 0;
  (void)impl().device_driver().mem_get_info(device, &device_free, &device_total);
  const memory_stats stats = impl().stats(device);
  std::vector<c10a::OutOfMemoryObserver> observers;
  {
    std::lock_guard<std::mutex> lock(observers_mutex_);
    observers = oom_observers_;
  }
  // As PyTorch's allocator calls them: the request, the memory the process may use (the fraction
  // cap when one is set, else the device's total), the device's free memory.
  const double fraction = impl().memory_fraction(device);
  const auto allowed = fraction < 1.0 ? static_cast<size_t>(fraction * static_cast<double>(device_total)) : device_total;
  for (const auto& observer : observers) observer(device, nbytes, allowed, device_free);
  c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(nbytes), static_cast<size_t>(stats.allocated_bytes[0].current),
                                   static_cast<size_t>(stats.reserved_bytes[0].current),
                                   c10::Device(c10::DeviceType::CUDA, device));
  std::string message = oom.what();
  const std::string env_note = env_mismatch_warnings(env_);
  if (!env_note.empty()) {
    TORCH_WARN(env_note);
    message += "\n" + env_note;
  }
  TORCH_CHECK_WITH(OutOfMemoryError, false, message);
}

c10::DataPtr torch_allocator::allocate(size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  void* ptr = malloc_on(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream());
  return {ptr, ptr, &delete_through_installed, c10::Device(c10::DeviceType::CUDA, device)};
}

c10::DeleterFnPtr torch_allocator::raw_deleter() const { return &delete_through_installed; }

void* torch_allocator::raw_alloc(size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  return malloc_on(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream());
}

void* torch_allocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  return malloc_on(nbytes, current_device(), stream);
}

void torch_allocator::raw_delete(void* ptr) {
  if (ptr == nullptr) return;
  if (uncached_count_.load(std::memory_order_relaxed) != 0) {  // Note [Caching disabled]
    std::unique_lock<std::mutex> lock(uncached_mutex_);
    if (uncached_.erase(ptr) != 0) {
      uncached_count_.fetch_sub(1);
      lock.unlock();
      C10_CUDA_CHECK(cudaFree(ptr));
      return;
    }
  }
  contexts_.before_free(ptr);  // Note [Stack contexts]
  // Note [Profiler memory events]: the pointer's device, and the allocated bytes before the free.
  c10::DeviceIndex device = -1;
  std::int64_t before = 0;
  if (c10::memoryProfilingEnabled()) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) == cudaSuccess && attributes.device >= 0) {
      device = static_cast<c10::DeviceIndex>(attributes.device);
      before = usage_of(impl(), device).allocated;
    } else {
      (void)cudaGetLastError();  // not reported; the free goes on
    }
  }
  try {
    impl().deallocate(ptr);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: freeing ", ptr, " failed: ", e.what());
  }
  if (device >= 0) {
    const device_usage now = usage_of(impl(), device);
    report_to_profiler(ptr, now.allocated - before, now, device);
  }
}

void torch_allocator::copy_data(void* dest, const void* src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

void torch_allocator::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  // Memory from another allocator (or from before install, or caching disabled) is not ours to track.
  if (ptr.get() == nullptr || ptr.get_deleter() != &delete_through_installed) return;
  if (uncached_count_.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> lock(uncached_mutex_);
    if (uncached_.count(ptr.get()) != 0) return;  // freed with cudaFree, which waits for the device
  }
  try {
    impl().record_stream(ptr.get(), stream.stream());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: record_stream(", ptr.get(), ") failed: ", e.what());
  }
}

// --- cache, fraction, statistics ------------------------------------------------------------------

void torch_allocator::emptyCache(c10::MempoolId_t mempool_id) {
  // streampool's empty_cache returns every unused cached block, of every pool no graph can still
  // replay; a request for one pool gets that superset (live memory and replayable pools stay).
  // Note [Contexts of a call] (stack_contexts.cpp): the segment frees get this call's stack.
  const context_ptr context = contexts_.before_release();
  const std::uint64_t start_us = context != nullptr ? stack_contexts::now_us() : 0;
  try {
    impl().empty_cache();
    contexts_.after_release(start_us, context);
  } catch (const std::exception& e) {
    // A pool's empty_cache comes from ~MemPool, where an exception would terminate the process.
    if (mempool_id.first != 0 || mempool_id.second != 0) {
      TORCH_WARN("streampool: empty_cache failed: ", e.what());
      return;
    }
    TORCH_CHECK(false, "streampool: empty_cache failed: ", e.what());
  }
}

double torch_allocator::getMemoryFraction(c10::DeviceIndex device) { return impl().memory_fraction(device); }

void torch_allocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  try {
    impl().set_memory_fraction(fraction, device);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: set_memory_fraction(", fraction, ", device ", static_cast<int>(device),
                ") failed: ", e.what());
  }
}

c10a::DeviceStats torch_allocator::getDeviceStats(c10::DeviceIndex device) {
  const memory_stats s = impl().stats(device);
  c10a::DeviceStats out;
  copy_stats(s.allocation, out.allocation);
  copy_stats(s.segment, out.segment);
  copy_stats(s.active, out.active);
  copy_stats(s.inactive_split, out.inactive_split);
  copy_stats(s.allocated_bytes, out.allocated_bytes);
  copy_stats(s.reserved_bytes, out.reserved_bytes);
  copy_stats(s.active_bytes, out.active_bytes);
  copy_stats(s.inactive_split_bytes, out.inactive_split_bytes);
  copy_stats(s.requested_bytes, out.requested_bytes);
  copy_stat(s.oversize_allocations, out.oversize_allocations);
  copy_stat(s.oversize_segments, out.oversize_segments);
  out.num_alloc_retries = s.num_alloc_retries;
  out.num_ooms = s.num_ooms;
  out.num_sync_all_streams = s.num_sync_all_streams;
  out.num_device_alloc = s.num_device_alloc;
  out.num_device_free = s.num_device_free;
  out.max_split_size = s.max_split_size;
  return out;
}

void torch_allocator::resetAccumulatedStats(c10::DeviceIndex device) { impl().reset_accumulated_stats(device); }

void torch_allocator::resetPeakStats(c10::DeviceIndex device) { impl().reset_peak_stats(device); }

void torch_allocator::attachOutOfMemoryObserver(c10a::OutOfMemoryObserver observer) {
  std::lock_guard<std::mutex> lock(observers_mutex_);
  oom_observers_.push_back(std::move(observer));
}

}  // namespace streampool::torch_ext
