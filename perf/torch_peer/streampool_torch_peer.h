/* streampool_torch_peer.h — the C interface of the PyTorch peer plugin (libstreampool_torch_peer.so,
 * built from torch_peer.cpp against libtorch). streampool-bench dlopens the plugin (--torch-peer)
 * and drives PyTorch's CUDA caching allocator (c10) through these functions, so the bench itself
 * needs neither libtorch nor its C++ ABI. Every function is noexcept in effect: failures return a
 * nonzero status and streampool_torch_peer_last_error() (per thread) says why. */
#ifndef STREAMPOOL_TORCH_PEER_H
#define STREAMPOOL_TORCH_PEER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change below; the bench refuses a plugin with another version. */
#define STREAMPOOL_TORCH_PEER_ABI_VERSION 1

/* Status codes. */
#define STREAMPOOL_TORCH_PEER_OK 0
#define STREAMPOOL_TORCH_PEER_ERROR 1         /* see streampool_torch_peer_last_error() */
#define STREAMPOOL_TORCH_PEER_OUT_OF_MEMORY 2 /* c10::OutOfMemoryError */

/* Figures of c10's DeviceStats, pool "all" (StatType::AGGREGATE), in bytes or counts. */
typedef struct streampool_torch_peer_stats {
  int64_t allocated_current, allocated_peak;
  int64_t reserved_current, reserved_peak;
  int64_t requested_current, requested_peak;
  int64_t segments_current;
  int64_t num_device_alloc, num_device_free; /* cumulative since the process started */
} streampool_torch_peer_stats;

int streampool_torch_peer_abi_version(void);
/* Starts c10 (CUDA context, current stream) and checks that its allocator backend is `backend`
 * ("native" or "cudaMallocAsync"); c10 picks it from PYTORCH_CUDA_ALLOC_CONF when the library is
 * loaded, so the caller sets that variable before dlopen. Then empties the cache and resets the
 * peak statistics of `device`. Callable again (each bench run opens, then closes). */
int streampool_torch_peer_open(const char* backend, int device);
/* Empties c10's cache (what a run leaves cached goes back to the device). */
int streampool_torch_peer_close(void);
/* The backend c10 runs: "native" or "cudaMallocAsync" (c10's CUDAAllocator::name()). */
const char* streampool_torch_peer_backend(void);
/* c10::cuda::CUDACachingAllocator::raw_alloc_with_stream on the calling thread's current device. */
int streampool_torch_peer_alloc(size_t bytes, void* stream, void** out);
/* c10::cuda::CUDACachingAllocator::raw_delete. */
int streampool_torch_peer_free(void* ptr);
int streampool_torch_peer_empty_cache(void);
int streampool_torch_peer_stats_of(int device, streampool_torch_peer_stats* out);
int streampool_torch_peer_reset_peak(int device);
/* Pinned host memory through c10's CachingHostAllocator (the `torch-pinned` peer). Optional: the
 * bench looks these up only for torch-pinned, so a plugin without them still serves the other
 * peers (same ABI version). host_alloc returns the pointer and a handle (*ctx) that host_free and
 * host_record_stream take back; host_record_stream is CachingHostAllocator_recordEvent on the
 * cudaStream_t `stream` of the current device. host_num_alloc: cudaHostAlloc/cudaHostRegister calls
 * so far (c10's num_host_alloc), or STREAMPOOL_TORCH_PEER_ERROR where libtorch predates HostStats. */
int streampool_torch_peer_host_alloc(size_t bytes, void** out, void** ctx);
int streampool_torch_peer_host_free(void* ctx);
int streampool_torch_peer_host_record_stream(void* ptr, void* ctx, void* stream);
int streampool_torch_peer_host_empty_cache(void);
int streampool_torch_peer_host_num_alloc(int64_t* out);
/* The message of this thread's last failed host_* call ("" if none). */
const char* streampool_torch_peer_host_last_error(void);
/* The message of this thread's last failure ("" if none). */
const char* streampool_torch_peer_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_TORCH_PEER_H */
