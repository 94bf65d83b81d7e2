// streampool/driver.hpp — the device-driver boundary: every CUDA runtime/driver call streampool
// makes goes through `driver`. Two implementations: `cuda_driver` (the real device, the only code
// that calls cuda*/cu*) and `sim_driver` (a simulated device for tests, CI and trace replay;
// see sim_driver.hpp). The allocator core never knows which one it runs on.
//
// Every call is noexcept and returns a `drv_result`; callers that may throw wrap it with
// `check()`. Handles are opaque pointers whose representation equals the CUDA type they stand
// for (a `stream_t` is a `cudaStream_t`), so user handles pass straight through.
#pragma once

#include "streampool/export.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace streampool {

using stream_t = void*;     ///< cudaStream_t; nullptr = the legacy default stream
using event_t = void*;      ///< cudaEvent_t
using mempool_t = void*;    ///< cudaMemPool_t
using vmm_handle_t = std::uint64_t;  ///< CUmemGenericAllocationHandle
using graph_t = void*;       ///< cudaGraph_t
using graph_exec_t = void*;  ///< cudaGraphExec_t
using graph_node_t = void*;  ///< cudaGraphNode_t

/// Outcome of a driver call, in streampool's vocabulary (the native code is kept alongside).
enum class status : std::uint8_t {
  ok = 0,
  out_of_memory,       ///< cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY (recoverable)
  not_ready,           ///< event or stream has pending work (event_query only)
  invalid_value,       ///< bad argument: unknown handle, misaligned address, size 0 where forbidden
  invalid_device,      ///< device ordinal out of range
  not_supported,       ///< the device or driver lacks the feature (memory pools, VMM)
  no_device,           ///< no NVIDIA driver, or no CUDA device on this machine
  illegal_in_capture,  ///< the call is not permitted while a stream is capturing
  other,               ///< anything else (see native code)
};

/// Result of a driver call: `code` plus the driver's own number (cudaError_t / CUresult, or the sim
/// driver's code) for diagnostics.
struct [[nodiscard]] drv_result {
  status code = status::ok;
  int native = 0;
  [[nodiscard]] constexpr bool ok() const noexcept { return code == status::ok; }
  [[nodiscard]] constexpr explicit operator bool() const noexcept { return ok(); }
};

/// Capture state of a stream (cudaStreamCaptureStatus).
enum class capture_status : std::uint8_t { none, active, invalidated };

struct STREAMPOOL_API capture_info {
  capture_status status = capture_status::none;
  std::uint64_t id = 0;  ///< unique per capture sequence; 0 unless active (CUDA gives no id to an invalidated one)
};

/// cudaStreamCaptureMode: which threads may not make "potentially unsafe" calls (cudaMalloc,
/// cudaFree, event queries, synchronisation) while the capture is active. `global`: every
/// thread; `thread_local_` (cudaStreamCaptureModeThreadLocal; `thread_local` is a keyword): the
/// capturing thread; `relaxed`: none.
enum class capture_mode : std::uint8_t { global, thread_local_, relaxed };

/// Flags of graph_instantiate (cudaGraphInstantiateFlags subset), combinable with `|`.
enum class instantiate_flags : std::uint32_t {
  none = 0,
  /// cudaGraphInstantiateFlagAutoFreeOnLaunch: a launch first frees the graph-owned allocations
  /// that the previous launch left unfreed, so a graph whose allocations outlive a launch can be
  /// relaunched (without it such a relaunch fails). See docs/graph-capture.md.
  auto_free_on_launch = 1,
};
[[nodiscard]] constexpr instantiate_flags operator|(instantiate_flags a, instantiate_flags b) noexcept {
  return static_cast<instantiate_flags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
[[nodiscard]] constexpr bool has_flag(instantiate_flags flags, instantiate_flags flag) noexcept {
  return (static_cast<std::uint32_t>(flags) & static_cast<std::uint32_t>(flag)) != 0;
}

/// Static facts about one device.
struct STREAMPOOL_API device_info {
  int ordinal = 0;
  std::string name;
  std::size_t total_memory = 0;
  int compute_major = 0;
  int compute_minor = 0;
  bool memory_pools_supported = false;  ///< cudaDevAttrMemoryPoolsSupported
  bool vmm_supported = false;           ///< CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  std::size_t vmm_granularity = 0;      ///< cuMemGetAllocationGranularity (minimum), 0 if no VMM
  /// vmm_create makes handles that vmm_export_fd can share with other processes
  /// (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED).
  bool vmm_ipc_supported = false;
};

/// Attributes of a stream-ordered memory pool (cudaMemPoolAttr subset).
enum class pool_attr : std::uint8_t {
  release_threshold,
  reserved_mem_current,
  reserved_mem_high,  ///< set to 0 to reset to current
  used_mem_current,
  used_mem_high,      ///< set to 0 to reset to current
  reuse_follow_event_dependencies,
  reuse_allow_opportunistic,
  reuse_allow_internal_dependencies,
};

/// What check_bytes found in a range: how many bytes differ from the expected value, and the
/// first of them.
struct STREAMPOOL_API byte_check {
  std::size_t mismatches = 0;
  std::size_t first_offset = 0;  ///< offset of the first differing byte (when mismatches > 0)
  std::uint8_t first_value = 0;  ///< the value found there
};

/// Names of the calls, for the sim driver's counters and fault injection.
enum class driver_call : std::uint8_t {
  malloc, free, mem_get_info,
  stream_create, stream_destroy, stream_synchronize, stream_wait_event, stream_capture_info,
  device_synchronize,
  event_create, event_destroy, event_record, event_query, event_synchronize,
  pool_get_default, pool_create, pool_destroy, pool_set_attr, pool_get_attr, pool_set_access,
  malloc_async, free_async, pool_trim_to,
  vmm_reserve, vmm_free, vmm_create, vmm_release, vmm_map, vmm_set_access, vmm_unmap,
  stream_begin_capture, stream_end_capture, graph_instantiate, graph_launch, graph_exec_destroy, graph_destroy,
  graph_mem_trim,
  memset_async, check_bytes,
  stream_get_device,
  host_alloc, host_free, host_register, host_unregister, memcpy_async,
  capture_on_graph_release, capture_dependencies, graph_node_dependencies,
  vmm_export_fd, vmm_import_fd, vmm_retain,
  count_
};
inline constexpr std::size_t driver_call_count = static_cast<std::size_t>(driver_call::count_);
[[nodiscard]] STREAMPOOL_API std::string_view to_string(driver_call call) noexcept;
[[nodiscard]] STREAMPOOL_API std::string_view to_string(status code) noexcept;

/// The device boundary. Implementations are thread-safe. Preconditions are documented per call;
/// violating one returns status::invalid_value (never UB on the sim driver).
class STREAMPOOL_API driver {
 public:
  virtual ~driver() = default;

  /// "cuda" or "sim".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Human-readable text for a result: "cudaErrorMemoryAllocation: out of memory".
  [[nodiscard]] virtual std::string describe(drv_result result) const = 0;

  // --- devices -------------------------------------------------------------------------------
  /// Number of devices; status::no_device (and *count = 0) when there is no driver or device.
  virtual drv_result device_count(int* count) noexcept = 0;
  /// The calling thread's current device.
  virtual drv_result get_device(int* device) noexcept = 0;
  virtual drv_result set_device(int device) noexcept = 0;
  virtual drv_result get_device_info(int device, device_info* out) noexcept = 0;
  virtual drv_result mem_get_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept = 0;

  // --- plain device memory ---------------------------------------------------------------------
  /// cudaMalloc on `device`. Illegal while a global capture is open (it would invalidate it)
  /// unless the calling thread is in relaxed capture mode: see relaxed_thread_scope.
  virtual drv_result malloc(int device, std::size_t bytes, void** out) noexcept = 0;
  /// cudaFree; `ptr` must come from malloc on `device`. Synchronises the device (as cudaFree does).
  virtual drv_result free(int device, void* ptr) noexcept = 0;

  // --- streams -----------------------------------------------------------------------------------
  virtual drv_result stream_create(int device, stream_t* out) noexcept = 0;
  virtual drv_result stream_destroy(int device, stream_t stream) noexcept = 0;
  virtual drv_result stream_synchronize(int device, stream_t stream) noexcept = 0;
  /// Work submitted to `stream` after this call waits for `event`'s recorded work.
  virtual drv_result stream_wait_event(stream_t stream, event_t event) noexcept = 0;
  virtual drv_result stream_capture_info(stream_t stream, capture_info* out) noexcept = 0;
  /// cudaStreamGetDevice: the device `stream` belongs to (nullptr and the special handles
  /// cudaStreamLegacy / cudaStreamPerThread: the calling thread's current device);
  /// status::invalid_value for a handle that is not a live stream. Not pure: the default returns
  /// status::not_supported (a driver that predates it; callers then skip their check).
  virtual drv_result stream_get_device(stream_t stream, int* device) noexcept;
  virtual drv_result device_synchronize(int device) noexcept = 0;

  // --- events (created with timing disabled) -------------------------------------------------
  virtual drv_result event_create(int device, event_t* out) noexcept = 0;
  virtual drv_result event_destroy(int device, event_t event) noexcept = 0;
  virtual drv_result event_record(event_t event, stream_t stream) noexcept = 0;
  /// status::ok when the recorded work is done, status::not_ready otherwise. Illegal in capture.
  virtual drv_result event_query(event_t event) noexcept = 0;
  virtual drv_result event_synchronize(event_t event) noexcept = 0;

  // --- stream-ordered memory pools -----------------------------------------------------------
  virtual drv_result pool_get_default(int device, mempool_t* out) noexcept = 0;
  virtual drv_result pool_create(int device, mempool_t* out) noexcept = 0;
  virtual drv_result pool_destroy(mempool_t pool) noexcept = 0;
  virtual drv_result pool_set_attr(mempool_t pool, pool_attr attr, std::uint64_t value) noexcept = 0;
  virtual drv_result pool_get_attr(mempool_t pool, pool_attr attr, std::uint64_t* value) noexcept = 0;
  /// Grants (or revokes) read-write access to `pool`'s memory from `peer_device`.
  virtual drv_result pool_set_access(mempool_t pool, int peer_device, bool enable) noexcept = 0;
  /// cudaMallocFromPoolAsync: `bytes` from `pool`, ordered on `stream`.
  virtual drv_result malloc_async(mempool_t pool, std::size_t bytes, stream_t stream, void** out) noexcept = 0;
  /// cudaFreeAsync: returns `ptr` to its pool once `stream`'s prior work is done.
  virtual drv_result free_async(void* ptr, stream_t stream) noexcept = 0;
  /// cudaMemPoolTrimTo: release unused reserved memory until at most `keep_bytes` stay reserved.
  virtual drv_result pool_trim_to(mempool_t pool, std::size_t keep_bytes) noexcept = 0;

  // --- virtual memory management (expandable segments) ---------------------------------------
  /// cuMemAddressReserve: `bytes` of address space aligned to `alignment` (multiples of granularity).
  virtual drv_result vmm_reserve(int device, std::size_t bytes, std::size_t alignment, void** va) noexcept = 0;
  virtual drv_result vmm_free(void* va, std::size_t bytes) noexcept = 0;
  /// cuMemCreate: `bytes` (a multiple of granularity) of pinned device memory on `device`, shareable
  /// with other processes (vmm_export_fd) where device_info::vmm_ipc_supported says so.
  virtual drv_result vmm_create(int device, std::size_t bytes, vmm_handle_t* out) noexcept = 0;
  virtual drv_result vmm_release(vmm_handle_t handle) noexcept = 0;
  virtual drv_result vmm_map(void* va, std::size_t bytes, vmm_handle_t handle) noexcept = 0;
  /// cuMemSetAccess read-write for `device` on [va, va + bytes).
  virtual drv_result vmm_set_access(void* va, std::size_t bytes, int device) noexcept = 0;
  virtual drv_result vmm_unmap(void* va, std::size_t bytes) noexcept = 0;

  // --- stream capture and graphs (docs/graph-capture.md) ---------------------------------------
  // Not pure: a driver without graph support inherits these, which return status::not_supported.

  /// cudaStreamBeginCapture. `stream` must be a created (non-default) stream that is not already
  /// capturing; stream_capture_info then reports it active with a new, process-unique id.
  virtual drv_result stream_begin_capture(stream_t stream, capture_mode mode) noexcept;
  /// cudaStreamEndCapture on the stream that began the capture: `*out` is the captured graph
  /// (nullptr on failure). Fails with status::illegal_in_capture (and ends the capture, no graph)
  /// when the capture was invalidated or a stream joined to it was not joined back.
  virtual drv_result stream_end_capture(stream_t stream, graph_t* out) noexcept;
  /// cudaGraphInstantiate(out, graph, flags). May report out_of_memory (graph-owned allocations
  /// are reserved here, not at capture).
  virtual drv_result graph_instantiate(graph_t graph, graph_exec_t* out, instantiate_flags flags) noexcept;
  /// cudaGraphLaunch: one replay of `exec`, ordered on `stream`.
  virtual drv_result graph_launch(graph_exec_t exec, stream_t stream) noexcept;
  /// cudaGraphExecDestroy (a launch in flight completes first, asynchronously).
  virtual drv_result graph_exec_destroy(graph_exec_t exec) noexcept;
  /// cudaGraphDestroy (executables instantiated from it are unaffected).
  virtual drv_result graph_destroy(graph_t graph) noexcept;
  /// cudaDeviceGraphMemTrim: returns the device's cached graph-allocation memory that no
  /// instantiated graph uses to the OS. Not legal while a capture is active.
  virtual drv_result graph_mem_trim(int device) noexcept;
  /// cudaThreadExchangeStreamCaptureMode: sets the calling thread's capture mode to `*mode` and
  /// returns the previous one in `*mode`. In relaxed mode a thread may make calls that a global or
  /// thread-local capture would otherwise refuse (and be invalidated by), such as stream-ordered
  /// allocation on a stream outside the capture (Note [Relaxed uncaptured calls] in
  /// docs/graph-capture.md). Use relaxed_thread_scope (below) rather than calling this directly.
  virtual drv_result thread_exchange_capture_mode(capture_mode* mode) noexcept;
  /// Ties `on_release(arg)` to the lifetime of the graph that the capture `stream` takes part in
  /// records into (CUDA: a user object retained by that graph, cudaUserObjectCreate +
  /// cudaGraphRetainUserObject). It is called exactly once, possibly later on a thread of the
  /// driver's, when that graph and every executable instantiated from it have been destroyed (CUDA:
  /// once their launches are done), or when the capture ends without a graph (invalidated or
  /// unjoined). `on_release` must not call the driver and must not block. status::invalid_value
  /// when `stream` is not in an active capture, or `on_release` is null; on any failure it is
  /// never called. Legal during any capture. docs/graph-capture.md, "Captures streampool was not
  /// told about".
  virtual drv_result capture_on_graph_release(stream_t stream, void (*on_release)(void*), void* arg) noexcept;
  /// The nodes the next work captured on `stream` would depend on (cudaStreamGetCaptureInfo's
  /// dependencies), replacing `*out`; empty when `stream` is not capturing. Legal during any capture.
  virtual drv_result capture_dependencies(stream_t stream, std::vector<graph_node_t>* out) noexcept;
  /// The nodes `node` of a graph being captured depends on (cudaGraphNodeGetDependencies),
  /// replacing `*out`. Legal during any capture.
  virtual drv_result graph_node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) noexcept;

  // --- memory contents (checking mode, src/check; docs/reliability.md#checking-mode) ----------
  // Not pure: a driver without them inherits these, which return status::not_supported.
  // Implemented in src/driver/cuda/cuda_check_ops.cpp and src/driver/sim/sim_content_calls.cpp.

  /// cudaMemsetAsync: sets every byte of [ptr, ptr + bytes) (memory of `device`) to `value`,
  /// ordered on `stream` (a stream of `device`; nullptr = its legacy stream). bytes 0: no-op.
  virtual drv_result memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes,
                                  stream_t stream) noexcept;
  /// Compares every byte of [ptr, ptr + bytes) with `expected` once the work submitted to `stream`
  /// before this call is done (a kernel from kernels/ on the real device), and waits for the
  /// answer in `*out`. The wait (a stream synchronisation in relaxed capture mode) is legal while
  /// other streams capture; `stream` itself must not be capturing (status::illegal_in_capture). status::not_supported when the library was built without
  /// kernels (STREAMPOOL_BUILD_KERNELS=OFF).
  virtual drv_result check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected,
                                 stream_t stream, byte_check* out) noexcept;

  // --- VMM memory shared with other processes (docs/ipc-and-nccl.md) ---------------------------
  // Not pure: a driver without them inherits these, which return status::not_supported.
  // Note [Sharing VMM handles] in src/driver/driver_ipc_ops.cpp.

  /// cuMemExportToShareableHandle(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): a file descriptor,
  /// the caller's to close(), that another process (given it over a Unix socket or by
  /// pidfd_getfd) imports with vmm_import_fd. `handle` is one of vmm_create or vmm_import_fd, not
  /// released. Fails for a handle that was not made shareable (vmm_ipc_supported false): the sim
  /// answers status::not_supported, CUDA its own code; status::invalid_value for an unknown or
  /// released handle.
  virtual drv_result vmm_export_fd(vmm_handle_t handle, int* fd) noexcept;
  /// cuMemImportFromShareableHandle: a handle of the memory behind `fd` (of vmm_export_fd, in this
  /// process or another), mapped, given access and released like one of vmm_create; the memory
  /// lives until every process has released its handles and unmapped them. The descriptor stays
  /// the caller's. status::invalid_value when `fd` names no memory that still exists.
  virtual drv_result vmm_import_fd(int fd, vmm_handle_t* out) noexcept;
  /// cuMemRetainAllocationHandle: the handle of the memory mapped at `va` (the value it was mapped
  /// with), held once more: release it with vmm_release. status::invalid_value when nothing is
  /// mapped there.
  virtual drv_result vmm_retain(void* va, vmm_handle_t* out) noexcept;

  // --- pinned host memory (the host allocator, src/host; docs/pytorch-compatibility.md) -------
  // Not pure: a driver without them inherits these, which return status::not_supported.
  // Implemented in src/driver/cuda/cuda_host.cpp and src/driver/sim/sim_host.cpp.

  /// cudaHostAlloc(out, bytes, cudaHostAllocDefault): `bytes` (> 0) of page-locked host memory that
  /// every device can copy from and to. status::out_of_memory when the host cannot pin that much.
  virtual drv_result host_alloc(std::size_t bytes, void** out) noexcept;
  /// cudaFreeHost: `ptr` must come from host_alloc (status::invalid_value otherwise). Like
  /// cudaFreeHost, it waits for the work submitted to the devices so far. Illegal in capture.
  virtual drv_result host_free(void* ptr) noexcept;
  /// cudaHostRegister(ptr, bytes, cudaHostRegisterDefault): page-locks [ptr, ptr + bytes) of
  /// ordinary host memory (bytes > 0; the range must not overlap a registered one).
  virtual drv_result host_register(void* ptr, std::size_t bytes) noexcept;
  /// cudaHostUnregister: `ptr` must be the start of a range given to host_register.
  virtual drv_result host_unregister(void* ptr) noexcept;
  /// cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream): copies `bytes` between host and
  /// device memory (the direction follows from the addresses), ordered on `stream`. bytes 0: no-op.
  virtual drv_result memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) noexcept;
};

// Note [Relaxed capture mode]
// While a global (or thread-local) stream capture is open, CUDA refuses the "potentially unsafe"
// calls a thread makes in the default mode, and the refusal invalidates the capture: cudaMalloc,
// stream-ordered allocation and free on a stream outside the capture, pool and device queries,
// graph instantiation. With the calling thread in relaxed mode the same calls succeed and the
// capture stays valid (measured on an H200: docs/graph-capture.md). relaxed_thread_scope is the
// one way streampool switches a thread to relaxed mode and back: the backends engage it around
// their cudaMalloc / cudaMallocAsync / cudaFreeAsync only while one of their captures is
// underway, and the real driver engages it around its non-stream queries always (Note [Relaxed
// queries] in src/driver/cuda/cuda_driver.cpp).

/// Runs the rest of a scope with the calling thread in relaxed capture mode, then puts the
/// previous mode back (driver::thread_exchange_capture_mode; Note [Relaxed capture mode]).
/// `engaged` false: does nothing, so a hot path pays only a branch when no capture is open. A
/// driver that cannot exchange modes (status::not_supported: the default implementation) leaves
/// the thread as it is.
class STREAMPOOL_API relaxed_thread_scope {
 public:
  relaxed_thread_scope(driver& drv, bool engaged) noexcept : drv_(engaged ? &drv : nullptr) {
    if (drv_ == nullptr) return;
    const drv_result result = drv_->thread_exchange_capture_mode(&previous_);
    if (result.ok()) return;
    drv_ = nullptr;
    if (result.code != status::not_supported) refusal_ = result;
  }
  ~relaxed_thread_scope() {
    if (drv_ != nullptr) (void)drv_->thread_exchange_capture_mode(&previous_);
  }
  relaxed_thread_scope(const relaxed_thread_scope&) = delete;
  relaxed_thread_scope& operator=(const relaxed_thread_scope&) = delete;

  /// Why the thread could not be switched although the driver has capture modes; ok otherwise.
  /// A caller whose next call would break an open capture in the thread's own mode skips it.
  [[nodiscard]] drv_result refusal() const noexcept { return refusal_; }

 private:
  driver* drv_;
  capture_mode previous_ = capture_mode::relaxed;  ///< in: the mode to set; after: the caller's
  drv_result refusal_{};
};

/// The real driver over the CUDA runtime (and the driver API, resolved at run time through
/// cudaGetDriverEntryPointByVersion, so binaries start on machines with no NVIDIA driver).
[[nodiscard]] STREAMPOOL_API std::shared_ptr<driver> make_cuda_driver();

/// Throws cuda_error (or out_of_memory for status::out_of_memory is NOT done here: callers
/// decide) when `result` is not ok. `what` names the operation ("cudaMalloc of 2.00 MiB").
STREAMPOOL_API void check(const driver& drv, drv_result result, std::string_view what);

}  // namespace streampool
