// cuda_driver.cpp — the real driver's CUDA runtime calls: devices, cudaMalloc, streams, events
// and stream-ordered pools. With the other cuda_*.cpp files (errors, VMM, graphs, checks,
// host) this is the only code in streampool that calls cuda*/cu*. Every method is a thin
// translation: no caching, no policy, and no extra CUDA call on the hot path (event
// record/query, stream wait, malloc/free async).
#include "driver/cuda/cuda_driver.hpp"

#include "driver/cuda/cuda_scopes.hpp"

#include <cstdint>
#include <memory>

namespace streampool {
namespace driver_impl {

namespace {

cudaMemPoolAttr native_attr(pool_attr attr) noexcept {
  switch (attr) {
    case pool_attr::release_threshold: return cudaMemPoolAttrReleaseThreshold;
    case pool_attr::reserved_mem_current: return cudaMemPoolAttrReservedMemCurrent;
    case pool_attr::reserved_mem_high: return cudaMemPoolAttrReservedMemHigh;
    case pool_attr::used_mem_current: return cudaMemPoolAttrUsedMemCurrent;
    case pool_attr::used_mem_high: return cudaMemPoolAttrUsedMemHigh;
    case pool_attr::reuse_follow_event_dependencies: return cudaMemPoolReuseFollowEventDependencies;
    case pool_attr::reuse_allow_opportunistic: return cudaMemPoolReuseAllowOpportunistic;
    case pool_attr::reuse_allow_internal_dependencies: return cudaMemPoolReuseAllowInternalDependencies;
  }
  return cudaMemPoolAttrReleaseThreshold;
}

/// The reuse policies are `int` attributes; the memory figures are cuuint64_t.
bool is_int_attr(pool_attr attr) noexcept {
  return attr == pool_attr::reuse_follow_event_dependencies || attr == pool_attr::reuse_allow_opportunistic ||
         attr == pool_attr::reuse_allow_internal_dependencies;
}

}  // namespace

// --- devices -------------------------------------------------------------------------------------

drv_result cuda_driver::device_count(int* count) noexcept {
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess) {
    *count = 0;
    return runtime_result(error);
  }
  *count = devices;
  if (devices == 0) {
    return {status::no_device, static_cast<int>(cudaErrorNoDevice)};
  }
  return {};
}

drv_result cuda_driver::get_device(int* device) noexcept { return runtime_result(cudaGetDevice(device)); }

drv_result cuda_driver::set_device(int device) noexcept { return runtime_result(cudaSetDevice(device)); }

// Note [Relaxed queries]
// Pool attribute reads and writes, cudaMemGetInfo, device properties, pool creation and graph
// instantiation/destruction are "potentially unsafe" calls: while the calling thread is in a global
// or thread-local capture (or any thread is in a global one) they fail with
// cudaErrorStreamCaptureUnsupported AND invalidate the capture. Seen on the H200 (2026-11-30,
// scripts/probes/capture_rules_probe.cpp): with captures A and B open on one thread,
// cudaGraphInstantiate of B after B ended failed and invalidated A; the same call in relaxed mode
// succeeded and A stayed active. Pool reads for statistics, lazy per-device setup on a first
// allocation made inside a capture, and a graph instantiated while another capture is open all hit
// this. None of these calls is a stream operation, so they always run with this thread in relaxed
// capture mode (relaxed_thread_scope, Note [Relaxed capture mode] in streampool/driver.hpp);
// outside capture that costs two cheap calls, and none of them is on an allocation's hot path.
drv_result cuda_driver::get_device_info(int device, device_info* out) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  cudaDeviceProp props{};
  if (const cudaError_t error = cudaGetDeviceProperties(&props, device); error != cudaSuccess) {
    return runtime_result(error);
  }
  int pools = 0;
  if (const cudaError_t error = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
      error != cudaSuccess) {
    return runtime_result(error);
  }
  out->ordinal = device;
  out->name = props.name;
  out->total_memory = props.totalGlobalMem;
  out->compute_major = props.major;
  out->compute_minor = props.minor;
  out->memory_pools_supported = pools != 0;
  cuda_vmm::facts(device, out);  // the driver-API part
  return {};
}

drv_result cuda_driver::mem_get_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) {
    return runtime_result(scope.error());
  }
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  return runtime_result(cudaMemGetInfo(free_bytes, total_bytes));
}

// --- plain device memory ---------------------------------------------------------------------

// A caller that may allocate while a capture is open brackets this with relaxed_thread_scope
// (Note [Relaxed capture mode] in streampool/driver.hpp).
drv_result cuda_driver::malloc(int device, std::size_t bytes, void** out) noexcept {
  *out = nullptr;
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) {
    return runtime_result(scope.error());
  }
  return runtime_result(cudaMalloc(out, bytes));
}

drv_result cuda_driver::free(int /*device*/, void* ptr) noexcept { return runtime_result(cudaFree(ptr)); }

// --- streams -------------------------------------------------------------------------------------

drv_result cuda_driver::stream_create(int device, stream_t* out) noexcept {
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) {
    return runtime_result(scope.error());
  }
  cudaStream_t stream = nullptr;
  const cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  *out = stream;
  return runtime_result(error);
}

drv_result cuda_driver::stream_destroy(int /*device*/, stream_t stream) noexcept {
  return runtime_result(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
}

drv_result cuda_driver::stream_synchronize(int device, stream_t stream) noexcept {
  if (reinterpret_cast<std::uintptr_t>(stream) > 2) {
    return runtime_result(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }
  // nullptr, cudaStreamLegacy and cudaStreamPerThread name a stream of the *current* device.
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) {
    return runtime_result(scope.error());
  }
  return runtime_result(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

drv_result cuda_driver::stream_wait_event(stream_t stream, event_t event) noexcept {
  return runtime_result(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

drv_result cuda_driver::stream_get_device(stream_t stream, int* device) noexcept {
#if CUDART_VERSION >= 12080
  // Not a stream operation, but refused (and capture-invalidating) in the default capture mode
  // (Note [record_stream across devices] in src/native/native_allocator.cpp).
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  return runtime_result(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), device));
#else
  (void)stream;
  (void)device;
  return {status::not_supported, 0};  // cudaStreamGetDevice is CUDA 12.8+
#endif
}

drv_result cuda_driver::stream_capture_info(stream_t stream, capture_info* out) noexcept {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (const cudaError_t error = cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &capture, &id);
      error != cudaSuccess) {
    return runtime_result(error);
  }
  switch (capture) {
    case cudaStreamCaptureStatusActive: out->status = capture_status::active; break;
    case cudaStreamCaptureStatusInvalidated: out->status = capture_status::invalidated; break;
    default: out->status = capture_status::none; break;
  }
  // CUDA returns a valid id only while the capture is active: 0 otherwise, invalidated included.
  out->id = out->status == capture_status::active ? static_cast<std::uint64_t>(id) : 0;
  return {};
}

drv_result cuda_driver::device_synchronize(int device) noexcept {
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) {
    return runtime_result(scope.error());
  }
  return runtime_result(cudaDeviceSynchronize());
}

// --- events --------------------------------------------------------------------------------------

drv_result cuda_driver::event_create(int device, event_t* out) noexcept {
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) {
    return runtime_result(scope.error());
  }
  cudaEvent_t event = nullptr;
  const cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  *out = event;
  return runtime_result(error);
}

drv_result cuda_driver::event_destroy(int /*device*/, event_t event) noexcept {
  return runtime_result(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

drv_result cuda_driver::event_record(event_t event, stream_t stream) noexcept {
  return runtime_result(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

drv_result cuda_driver::event_query(event_t event) noexcept {
  return runtime_result(cudaEventQuery(static_cast<cudaEvent_t>(event)));
}

drv_result cuda_driver::event_synchronize(event_t event) noexcept {
  return runtime_result(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

// --- stream-ordered memory pools -----------------------------------------------------------------

drv_result cuda_driver::pool_get_default(int device, mempool_t* out) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  cudaMemPool_t pool = nullptr;
  const cudaError_t error = cudaDeviceGetDefaultMemPool(&pool, device);
  *out = pool;
  return runtime_result(error);
}

drv_result cuda_driver::pool_create(int device, mempool_t* out) noexcept {
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) {
    return runtime_result(scope.error());
  }
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  const cudaError_t error = cudaMemPoolCreate(&pool, &props);
  *out = pool;
  return runtime_result(error);
}

drv_result cuda_driver::pool_destroy(mempool_t pool) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  return runtime_result(cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool)));
}

drv_result cuda_driver::pool_set_attr(mempool_t pool, pool_attr attr, std::uint64_t value) noexcept {
  const auto handle = static_cast<cudaMemPool_t>(pool);
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  if (is_int_attr(attr)) {
    int flag = value != 0 ? 1 : 0;
    return runtime_result(cudaMemPoolSetAttribute(handle, native_attr(attr), &flag));
  }
  cuuint64_t bytes = value;
  return runtime_result(cudaMemPoolSetAttribute(handle, native_attr(attr), &bytes));
}

drv_result cuda_driver::pool_get_attr(mempool_t pool, pool_attr attr, std::uint64_t* value) noexcept {
  const auto handle = static_cast<cudaMemPool_t>(pool);
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  if (is_int_attr(attr)) {
    int flag = 0;
    const cudaError_t error = cudaMemPoolGetAttribute(handle, native_attr(attr), &flag);
    *value = static_cast<std::uint64_t>(flag);
    return runtime_result(error);
  }
  cuuint64_t bytes = 0;
  const cudaError_t error = cudaMemPoolGetAttribute(handle, native_attr(attr), &bytes);
  *value = bytes;
  return runtime_result(error);
}

drv_result cuda_driver::pool_set_access(mempool_t pool, int peer_device, bool enable) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  cudaMemAccessDesc desc{};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = peer_device;
  desc.flags = enable ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtNone;
  return runtime_result(cudaMemPoolSetAccess(static_cast<cudaMemPool_t>(pool), &desc, 1));
}

drv_result cuda_driver::malloc_async(mempool_t pool, std::size_t bytes, stream_t stream, void** out) noexcept {
  *out = nullptr;
  return runtime_result(
      cudaMallocFromPoolAsync(out, bytes, static_cast<cudaMemPool_t>(pool), static_cast<cudaStream_t>(stream)));
}

drv_result cuda_driver::free_async(void* ptr, stream_t stream) noexcept {
  return runtime_result(cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)));
}

drv_result cuda_driver::pool_trim_to(mempool_t pool, std::size_t keep_bytes) noexcept {
  return runtime_result(cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool), keep_bytes));
}

}  // namespace driver_impl

// Note [No driver at construction]
// Constructing the real driver makes no CUDA call, so it cannot fail on a machine without an
// NVIDIA driver (CI, laptops). The condition surfaces per call: device_count() reports
// status::no_device with the runtime's reason, which is what tests skip on and what
// `--driver auto` uses to fall back to the sim driver.
std::shared_ptr<driver> make_cuda_driver() { return std::make_shared<driver_impl::cuda_driver>(); }

}  // namespace streampool
