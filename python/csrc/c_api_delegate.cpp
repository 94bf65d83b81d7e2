// c_api_delegate.cpp — the extension as the C API's delegate (streampool_set_delegate in
// include/streampool/c_api.h, Note [C API delegate] in src/c_api/c_api_delegate.cpp): a table of C
// functions over the installed torch_allocator, which streampool.install() hands to
// libstreampool.so, so that C and C++ code of the process (streampool/process_allocator.hpp) draws
// on the allocator PyTorch uses. Each function catches everything and keeps the message for
// last_error() (per thread): no exception crosses the C ABI.
#include "c_api_delegate.hpp"

#include <c10/cuda/CUDAGuard.h>

#include <exception>
#include <optional>
#include <string>

#include "torch_allocator.hpp"

namespace streampool::torch_ext {
namespace {

thread_local std::string last_error_text;

/// The status of the exception in flight, its message kept for last_error().
int fail_current() noexcept {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    last_error_text = e.what_without_backtrace();
    return STREAMPOOL_ERROR_OUT_OF_MEMORY;
  } catch (const streampool::out_of_memory& e) {
    last_error_text = e.what();
    return STREAMPOOL_ERROR_OUT_OF_MEMORY;
  } catch (const streampool::cuda_error& e) {
    last_error_text = e.what();
    return STREAMPOOL_ERROR_CUDA;
  } catch (const streampool::error& e) {
    last_error_text = e.what();
    return STREAMPOOL_ERROR_INVALID_ARGUMENT;
  } catch (const c10::Error& e) {
    last_error_text = e.what_without_backtrace();
    return STREAMPOOL_ERROR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    last_error_text = e.what();
    return STREAMPOOL_ERROR_INTERNAL;
  } catch (...) {
    last_error_text = "unknown exception";
    return STREAMPOOL_ERROR_INTERNAL;
  }
}

torch_allocator& served() {
  torch_allocator* a = installed();
  if (a == nullptr) throw streampool::error("streampool: the PyTorch extension's allocator is not installed");
  return *a;
}

template <typename F>
int guarded(F&& body) noexcept {
  try {
    body();
    return STREAMPOOL_OK;
  } catch (...) {
    return fail_current();
  }
}

int d_alloc(size_t size, int device, void* stream, void** out) {
  return guarded([&] {
    std::optional<c10::cuda::CUDAGuard> guard;
    if (device >= 0) guard.emplace(static_cast<c10::DeviceIndex>(device));
    *out = served().raw_alloc_with_stream(size, static_cast<cudaStream_t>(stream));
  });
}
int d_free(void* ptr) {
  return guarded([&] { served().raw_delete(ptr); });
}
int d_record_stream(void* ptr, void* stream) {
  return guarded([&] { served().impl().record_stream(ptr, stream); });
}
int d_empty_cache() {
  return guarded([&] { served().impl().empty_cache(); });
}
int d_set_memory_fraction(double fraction, int device) {
  return guarded([&] { served().impl().set_memory_fraction(fraction, device); });
}
const char* d_stats_json(int device) {
  thread_local std::string text;
  return guarded([&] { text = served().impl().stats(device).to_json(); }) == STREAMPOOL_OK ? text.c_str() : nullptr;
}
const char* d_snapshot_json() {
  thread_local std::string text;
  return guarded([&] { text = served().impl().snapshot().to_json(); }) == STREAMPOOL_OK ? text.c_str() : nullptr;
}
const char* d_backend_name() {
  const char* name = nullptr;
  // backend_name() views a string literal (to_string of the backend).
  return guarded([&] { name = served().impl().backend_name().data(); }) == STREAMPOOL_OK ? name : nullptr;
}
const char* d_last_error() { return last_error_text.c_str(); }

}  // namespace

const streampool_delegate& c_api_delegate() noexcept {
  static const streampool_delegate table{STREAMPOOL_DELEGATE_ABI,
                                         "the PyTorch extension's allocator (streampool._C10)",
                                         &d_alloc,
                                         &d_free,
                                         &d_record_stream,
                                         &d_empty_cache,
                                         &d_set_memory_fraction,
                                         &d_stats_json,
                                         &d_snapshot_json,
                                         &d_backend_name,
                                         &d_last_error};
  return table;
}

}  // namespace streampool::torch_ext
