// cuda_errors.cpp — the real driver's error vocabulary: cudaError_t and CUresult mapped to
// streampool::status, failed runtime calls cleared from the thread's last error, and describe(),
// which names a result the way CUDA does ("cudaErrorMemoryAllocation: out of memory").
#include <string>

#include "driver/cuda/cuda_driver.hpp"

namespace streampool::driver_impl {

// Note [Native codes]
// drv_result::native carries the driver's own number for diagnostics. Runtime calls store the
// cudaError_t; driver-API calls (VMM) store cu_result_tag + CUresult, because both enums use
// the same small numbers for different names (201 is cudaErrorDeviceUninitialized and
// CUDA_ERROR_INVALID_CONTEXT) and describe() must pick the right name table. cuda_error's
// native_status() therefore reads "100002" for CUDA_ERROR_OUT_OF_MEMORY from cuMemCreate.

status status_of(cudaError_t error) noexcept {
  switch (error) {
    case cudaSuccess: return status::ok;
    case cudaErrorMemoryAllocation: return status::out_of_memory;
    case cudaErrorNotReady: return status::not_ready;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevicePointer: return status::invalid_value;
    case cudaErrorInvalidDevice: return status::invalid_device;
    case cudaErrorNotSupported: return status::not_supported;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice: return status::no_device;
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread: return status::illegal_in_capture;
    default: return status::other;
  }
}

status status_of(CUresult result) noexcept {
  switch (result) {
    case CUDA_SUCCESS: return status::ok;
    case CUDA_ERROR_OUT_OF_MEMORY: return status::out_of_memory;
    case CUDA_ERROR_NOT_READY: return status::not_ready;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE: return status::invalid_value;
    case CUDA_ERROR_INVALID_DEVICE: return status::invalid_device;
    case CUDA_ERROR_NOT_SUPPORTED: return status::not_supported;
    case CUDA_ERROR_NO_DEVICE: return status::no_device;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_CAPTURED_EVENT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return status::illegal_in_capture;
    default: return status::other;
  }
}

// Note [Clearing the last error]
// A failed runtime call also records its error as the thread's "last error", which a later
// cudaGetLastError()/cudaPeekAtLastError() (ours or the user's kernel-launch check) would report
// as if it were new. Every failure, cudaErrorNotReady from cudaEventQuery included, is therefore
// consumed here with cudaGetLastError(). A sticky error (a faulted context) survives this, as it
// must. The success path makes no extra call.
drv_result runtime_result(cudaError_t error) noexcept {
  if (error == cudaSuccess) {
    return {};
  }
  (void)cudaGetLastError();
  return {status_of(error), static_cast<int>(error)};
}

std::string cuda_driver::describe(drv_result result) const {
  if (result.native == 0) {
    return result.ok() ? "cudaSuccess: no error" : std::string(to_string(result.code));
  }
  if (result.native >= cu_result_tag) {
    const auto code = static_cast<CUresult>(result.native - cu_result_tag);
    const vmm_api& api = driver_api();
    const char* error_name = nullptr;
    const char* error_text = nullptr;
    if (api.resolved.ok() && api.get_error_name(code, &error_name) == CUDA_SUCCESS &&
        api.get_error_string(code, &error_text) == CUDA_SUCCESS) {
      return std::string(error_name) + ": " + error_text;
    }
    return "CUresult " + std::to_string(result.native - cu_result_tag) + " (" +
           std::string(to_string(result.code)) + ")";
  }
  const auto error = static_cast<cudaError_t>(result.native);
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

}  // namespace streampool::driver_impl
