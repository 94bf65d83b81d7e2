// torch_peer.cpp — the PyTorch peer plugin: the C interface of streampool_torch_peer.h over
// PyTorch's CUDA caching allocator (c10::cuda::CUDACachingAllocator: raw_alloc_with_stream,
// raw_delete, getDeviceStats, emptyCache). Depends on libtorch (c10, c10_cuda, torch_cuda) and
// cudart only, not on streampool or Boost; streampool-bench dlopens it (--torch-peer).
#include "streampool_torch_peer.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <exception>
#include <string>

namespace {

namespace c10_alloc = c10::cuda::CUDACachingAllocator;

thread_local std::string last_error;  // the message of this thread's last failure

int fail(const char* call, const std::string& what, int status) {
  last_error = std::string(call) + ": " + what;
  return status;
}

/// Runs `f`, turning a C++ exception into a status and last_error (nothing may cross the C ABI).
template <class F>
int guarded(const char* call, F&& f) noexcept {
  try {
    f();
    return STREAMPOOL_TORCH_PEER_OK;
  } catch (const c10::OutOfMemoryError& e) {
    return fail(call, e.what_without_backtrace(), STREAMPOOL_TORCH_PEER_OUT_OF_MEMORY);
  } catch (const c10::Error& e) {
    return fail(call, e.what_without_backtrace(), STREAMPOOL_TORCH_PEER_ERROR);
  } catch (const std::exception& e) {
    return fail(call, e.what(), STREAMPOOL_TORCH_PEER_ERROR);
  } catch (...) {
    return fail(call, "unknown exception", STREAMPOOL_TORCH_PEER_ERROR);
  }
}

c10_alloc::CUDAAllocator* c10_allocator() {
  c10_alloc::CUDAAllocator* allocator = c10_alloc::get();
  TORCH_CHECK(allocator != nullptr, "c10's CUDA allocator is not set (libc10_cuda not initialised)");
  return allocator;
}

}  // namespace

extern "C" {

int streampool_torch_peer_abi_version(void) { return STREAMPOOL_TORCH_PEER_ABI_VERSION; }

int streampool_torch_peer_open(const char* backend, int device) {
  return guarded("open", [&] {
    const std::string wanted = backend != nullptr ? backend : "";
    const auto index = static_cast<c10::DeviceIndex>(device);
    // Note [Starting c10 from C++]
    // Seen on an H200 with PyTorch 2.11 (CUDA 13.0): c10 used from C++ aborts with "Should never
    // been called" unless ATen's CUDA side is loaded (libtorch_cuda, linked with --no-as-needed)
    // and touched first, e.g. by asking for the current stream (c10::cuda::getCurrentCUDAStream is
    // at::cuda::getCurrentCUDAStream; c10's header spares the plugin ATen's cuBLAS/cuSPARSE
    // includes). Its allocator also needs init() with the device count before the first raw_alloc
    // (Python does this in torch.cuda's lazy init; a C++ program has no such step).
    (void)c10::cuda::getCurrentCUDAStream(index);
    c10_alloc::CUDAAllocator* allocator = c10_allocator();
    if (!allocator->initialized()) allocator->init(static_cast<int>(c10::cuda::device_count()));
    const std::string running = allocator->name();
    TORCH_CHECK(running == wanted, "c10 runs its '", running, "' allocator in this process, not '", wanted,
                "': c10 picks it from PYTORCH_CUDA_ALLOC_CONF when libc10_cuda is loaded (see "
                "PYTORCH_CUDA_ALLOC_CONF in the environment)");
    allocator->emptyCache();
    allocator->resetPeakStats(index);
  });
}

int streampool_torch_peer_close(void) {
  return guarded("close", [] { c10_allocator()->emptyCache(); });
}

const char* streampool_torch_peer_backend(void) {
  thread_local std::string name;
  const int status = guarded("backend", [] { name = c10_allocator()->name(); });
  return status == STREAMPOOL_TORCH_PEER_OK ? name.c_str() : "unknown";
}

int streampool_torch_peer_alloc(size_t bytes, void* stream, void** out) {
  *out = nullptr;
  return guarded("raw_alloc_with_stream", [&] {
    *out = c10_allocator()->raw_alloc_with_stream(bytes, static_cast<cudaStream_t>(stream));
  });
}

int streampool_torch_peer_free(void* ptr) {
  return guarded("raw_delete", [&] { c10_allocator()->raw_delete(ptr); });
}

int streampool_torch_peer_empty_cache(void) {
  return guarded("emptyCache", [] { c10_allocator()->emptyCache(); });
}

int streampool_torch_peer_stats_of(int device, streampool_torch_peer_stats* out) {
  return guarded("getDeviceStats", [&] {
    const auto stats = c10_allocator()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    constexpr std::size_t all = 0;  // StatType::AGGREGATE
    out->allocated_current = stats.allocated_bytes[all].current;
    out->allocated_peak = stats.allocated_bytes[all].peak;
    out->reserved_current = stats.reserved_bytes[all].current;
    out->reserved_peak = stats.reserved_bytes[all].peak;
    out->requested_current = stats.requested_bytes[all].current;
    out->requested_peak = stats.requested_bytes[all].peak;
    out->segments_current = stats.segment[all].current;
    out->num_device_alloc = stats.num_device_alloc;
    out->num_device_free = stats.num_device_free;
  });
}

int streampool_torch_peer_reset_peak(int device) {
  return guarded("resetPeakStats",
                 [&] { c10_allocator()->resetPeakStats(static_cast<c10::DeviceIndex>(device)); });
}

const char* streampool_torch_peer_last_error(void) { return last_error.c_str(); }

}  // extern "C"
