// torch_peer_host.cpp — the pinned-host entry points of the PyTorch peer plugin
// (streampool_torch_peer.h, "Pinned host memory") over c10's CachingHostAllocator: allocate (a
// DataPtr kept alive behind the returned handle), CachingHostAllocator_recordEvent, the DataPtr's
// deleter as free, emptyCache, and num_host_alloc from HostStats (PyTorch 2.6 and later).
// Built into the plugin unless -DSTREAMPOOL_TORCH_PEER_HOST=OFF (perf/torch_peer/CMakeLists.txt).
#include <ATen/cuda/CachingHostAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

#include <exception>
#include <string>

#include "streampool_torch_peer.h"

// The at::cuda::CachingHostAllocator_* functions are deprecated in recent PyTorch (in favour of
// at::getHostAllocator(at::kCUDA)), which older releases lack; the deprecated names work in both.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

thread_local std::string host_error;

template <class F>
int host_guarded(const char* call, F&& f) noexcept {
  host_error.clear();
  try {
    f();
    return STREAMPOOL_TORCH_PEER_OK;
  } catch (const c10::OutOfMemoryError& e) {
    host_error = std::string(call) + ": " + e.what_without_backtrace();
    return STREAMPOOL_TORCH_PEER_OUT_OF_MEMORY;
  } catch (const c10::Error& e) {
    host_error = std::string(call) + ": " + e.what_without_backtrace();
    return STREAMPOOL_TORCH_PEER_ERROR;
  } catch (const std::exception& e) {
    host_error = std::string(call) + ": " + e.what();
    return STREAMPOOL_TORCH_PEER_ERROR;
  } catch (...) {
    host_error = std::string(call) + ": unknown exception";
    return STREAMPOOL_TORCH_PEER_ERROR;
  }
}

}  // namespace

extern "C" {

int streampool_torch_peer_host_alloc(size_t bytes, void** out, void** ctx) {
  *out = nullptr;
  *ctx = nullptr;
  return host_guarded("CachingHostAllocator allocate", [&] {
    (void)c10::cuda::getCurrentCUDAStream();  // Note [Starting c10 from C++] (torch_peer.cpp)
    auto* data = new c10::DataPtr(at::cuda::getCachingHostAllocator()->allocate(bytes));
    *out = data->get();
    *ctx = data;
  });
}

int streampool_torch_peer_host_free(void* ctx) {
  return host_guarded("CachingHostAllocator free", [&] { delete static_cast<c10::DataPtr*>(ctx); });
}

int streampool_torch_peer_host_record_stream(void* ptr, void* ctx, void* stream) {
  return host_guarded("CachingHostAllocator_recordEvent", [&] {
    auto* data = static_cast<c10::DataPtr*>(ctx);
    TORCH_CHECK(data != nullptr && data->get() == ptr, "record_stream: pointer and handle do not match");
    const auto cuda_stream =
        c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), c10::cuda::current_device());
    TORCH_CHECK(at::cuda::CachingHostAllocator_recordEvent(ptr, data->get_context(), cuda_stream),
                "c10 did not recognise the pinned buffer");
  });
}

int streampool_torch_peer_host_empty_cache(void) {
  return host_guarded("CachingHostAllocator_emptyCache", [] { at::cuda::CachingHostAllocator_emptyCache(); });
}

int streampool_torch_peer_host_num_alloc(int64_t* out) {
  *out = -1;
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6))
  return host_guarded("CachingHostAllocator_getStats",
                      [&] { *out = at::cuda::CachingHostAllocator_getStats().num_host_alloc; });
#else
  host_error = "CachingHostAllocator_getStats: this libtorch predates HostStats (PyTorch 2.6)";
  return STREAMPOOL_TORCH_PEER_ERROR;
#endif
}

const char* streampool_torch_peer_host_last_error(void) { return host_error.c_str(); }

}  // extern "C"
