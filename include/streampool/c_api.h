/* streampool/c_api.h — C entry points over one process-wide allocator, for C programs and for
 * PyTorch's CUDAPluggableAllocator (docs/pytorch-compatibility.md §5): streampool_alloc / streampool_free have exactly the
 * signatures it loads from libstreampool.so. The allocator is created on first use from
 * STREAMPOOL_ALLOC_CONF (else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF) on the real GPU,
 * or explicitly with streampool_init() (streampool_init_sim(): on the simulated device, no GPU).
 * No C++ exception ever crosses this boundary: failures return NULL or a non-zero status, and
 * streampool_last_error() says why (per thread). */
#ifndef STREAMPOOL_C_API_H
#define STREAMPOOL_C_API_H

#include <stddef.h>

#include "streampool/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum streampool_status {
  STREAMPOOL_OK = 0,
  STREAMPOOL_ERROR_INVALID_ARGUMENT = 1, /* bad pointer, double free, bad fraction, bad device */
  STREAMPOOL_ERROR_OUT_OF_MEMORY = 2,
  STREAMPOOL_ERROR_CUDA = 3,             /* a driver call failed */
  STREAMPOOL_ERROR_CONFIG = 4,           /* the config string does not parse */
  STREAMPOOL_ERROR_STATE = 5,            /* e.g. streampool_init after the allocator is in use */
  STREAMPOOL_ERROR_INTERNAL = 6,
  STREAMPOOL_ERROR_NOT_INITIALIZED = 7   /* after streampool_shutdown, until the next init: nothing done */
} streampool_status;

/* Explicit initialisation with a config string (NULL = read the environment) on the real GPU.
 * Fails with STREAMPOOL_ERROR_STATE when the allocator already exists, STREAMPOOL_ERROR_CONFIG
 * when the config does not parse, and STREAMPOOL_ERROR_CUDA when no GPU is usable (no driver, a
 * driver older than the runtime, no device: the runtime's status, e.g. cudaErrorNoDevice or
 * cudaErrorInsufficientDriver, is named in streampool_last_error()); nothing is installed then.
 * Optional: before the first streampool_shutdown, the first call of any other function
 * initialises from the environment, with the same checks. */
STREAMPOOL_API int streampool_init(const char* config);
/* Frees every cached block (live allocations stay valid) and destroys the allocator when nothing
 * is live; returns STREAMPOOL_ERROR_STATE (and keeps it) otherwise. Safe while other threads are
 * inside C API calls: it waits for them before destroying the allocator. After it succeeds,
 * nothing creates an allocator by itself: every call but streampool_init / streampool_init_sim
 * (and the host allocator's, which has its own lifetime) fails with
 * STREAMPOOL_ERROR_NOT_INITIALIZED and does nothing, until one of them installs the next.
 * Re-initialising while other threads use the C API (e.g. to change the config): call
 * streampool_shutdown until it returns STREAMPOOL_OK (STREAMPOOL_ERROR_STATE means an allocation
 * was live at that moment: nothing changed, free it or retry), then streampool_init; meanwhile the
 * other threads' calls fail with STREAMPOOL_ERROR_NOT_INITIALIZED, and cannot make that init fail.
 * Calling it again when nothing is installed returns STREAMPOOL_OK. */
STREAMPOOL_API int streampool_shutdown(void);

/* PyTorch CUDAPluggableAllocator signatures. `stream` is a cudaStream_t. size 0 returns NULL with
 * status OK (as cudaMalloc). On failure: NULL, and streampool_last_status()/last_error() say why. */
STREAMPOOL_API void* streampool_alloc(size_t size, int device, void* stream);
/* size/device/stream are what PyTorch recorded at allocation. When they differ from what
 * streampool recorded, the block is freed anyway (a refused free would leak: PyTorch ignores the
 * status) and the mismatch is reported once through the warning handler. An unknown pointer or a
 * double free is STREAMPOOL_ERROR_INVALID_ARGUMENT. */
STREAMPOOL_API void streampool_free(void* ptr, size_t size, int device, void* stream);

STREAMPOOL_API int streampool_record_stream(void* ptr, void* stream);
STREAMPOOL_API int streampool_empty_cache(void);
STREAMPOOL_API int streampool_set_memory_fraction(double fraction, int device);
/* Changes settings while the allocator runs (allocator::set_settings: the keys that can change at
 * run time, PyTorch's _set_allocator_settings rules). A bad string or a key that cannot change is
 * STREAMPOOL_ERROR_INVALID_ARGUMENT (config errors) with nothing changed; the effective config is
 * streampool_settings_text(). */
STREAMPOOL_API int streampool_set_settings(const char* config);
/* The config in effect now, multi-line, each key with where its value came from ("set at run
 * time" for set_settings changes). NULL on error. Valid until the next call on this thread. */
STREAMPOOL_API const char* streampool_settings_text(void);
/* Statistics of `device` (-1 = current) as a JSON object with PyTorch's key names; snapshot as
 * JSON in the shape of torch.cuda.memory._snapshot(). The returned text stays valid until the
 * calling thread's next call of the same function; NULL on failure. */
STREAMPOOL_API const char* streampool_stats_json(int device);
STREAMPOOL_API const char* streampool_snapshot_json(void);
/* "native" or "cudaMallocAsync"; NULL on failure. */
STREAMPOOL_API const char* streampool_backend_name(void);

/* --- statistics, trace and simulated device (src/c_api/c_api_trace.cpp) --------------------- */

/* Peak values of `device`'s statistics (-1 = current device) become their current values, as
 * torch.cuda.reset_peak_memory_stats() does. */
STREAMPOOL_API int streampool_reset_peak_stats(int device);
/* The cumulative counters of `device` (allocated/freed totals, num_alloc_retries, num_ooms, ...)
 * go back to 0, as torch.cuda.reset_accumulated_memory_stats() does. */
STREAMPOOL_API int streampool_reset_accumulated_stats(int device);
/* Allocation trace of every device: enabled != 0 starts recording into a ring buffer that keeps
 * the last `max_entries` events per device (max_entries must be >= 1); enabled == 0 stops and
 * discards it. Either way what was recorded before is discarded, so read it first
 * (streampool_snapshot_json's "device_traces", or streampool_trace_csv). */
STREAMPOOL_API int streampool_record_history(int enabled, size_t max_entries);
/* The trace of `device` (-1 = current), oldest first, as CSV "action,addr,size,stream,time_us"
 * (the format `streampool-bench replay --trace` reads). Valid until the calling thread's next
 * call of this function; NULL on failure. Empty (the header only) when recording is off. */
STREAMPOOL_API const char* streampool_trace_csv(int device);
/* Number of devices the allocator sees, in *count. */
STREAMPOOL_API int streampool_device_count(int* count);
/* Creates the allocator on streampool's simulated device instead of the GPU, for tests and for
 * trying a config where there is no GPU: `device_count` devices (1..64) of `capacity_bytes`
 * each (0 = 80 GiB). `config` as in streampool_init (NULL = read the environment). Fails with
 * STREAMPOOL_ERROR_STATE when the allocator already exists. Pointers it returns are not memory:
 * never dereference them. */
STREAMPOOL_API int streampool_init_sim(const char* config, size_t capacity_bytes, int device_count);

/* Pinned host memory: page-locked staging buffers from the pinned host caching allocator
 * (docs/pytorch-compatibility.md "Pinned host memory"), one per process, configured by the
 * pinned_* keys. Created on first use from the environment on the real GPU, or explicitly with
 * streampool_host_init(config) (NULL = the environment; STREAMPOOL_ERROR_STATE once it exists).
 * It lives until the process exits. streampool_host_alloc returns NULL on failure (size 0:
 * STREAMPOOL_ERROR_INVALID_ARGUMENT). streampool_host_record_stream marks a buffer as used by
 * copies on `stream` (a cudaStream_t): after streampool_host_free it is reused only once that
 * stream's work submitted before the free is done. A pointer the host allocator did not hand out,
 * a double free or a dead stream: STREAMPOOL_ERROR_INVALID_ARGUMENT. Stats use the key names of
 * torch.cuda.host_memory_stats(); the returned text stays valid until the calling thread's next
 * call of the same function. */
STREAMPOOL_API int streampool_host_init(const char* config);
STREAMPOOL_API void* streampool_host_alloc(size_t size);
STREAMPOOL_API int streampool_host_free(void* ptr);
STREAMPOOL_API int streampool_host_record_stream(void* ptr, void* stream);
STREAMPOOL_API int streampool_host_empty_cache(void);
STREAMPOOL_API const char* streampool_host_stats_json(void);
STREAMPOOL_API const char* streampool_host_snapshot_json(void);

/* Status and message of the calling thread's last failed call ("" / OK when it succeeded). */
/* Sleep and wake (docs/sleep-wake.md) of a pool of `device` (-1: the current one): pool {0, 0} is
 * the default pool (it needs expandable_segments:True). STREAMPOOL_SLEEP_OFFLOAD copies the live
 * bytes to pinned host memory and back at wake; STREAMPOOL_SLEEP_DISCARD drops them. keep_backup
 * non-zero keeps the pinned buffer after wake for the next sleep. While asleep the pool's memory is
 * the device's and allocating from it fails; a failed sleep leaves it awake, a failed wake asleep,
 * with nothing lost. The state is JSON: asleep, mode, segments, released_bytes, held_bytes,
 * offloaded_bytes, backup_bytes. */
enum { STREAMPOOL_SLEEP_OFFLOAD = 0, STREAMPOOL_SLEEP_DISCARD = 1 };
STREAMPOOL_API int streampool_sleep(int device, unsigned long long pool_first, unsigned long long pool_second,
                                    int mode, int keep_backup);
STREAMPOOL_API int streampool_wake(int device, unsigned long long pool_first, unsigned long long pool_second);
STREAMPOOL_API const char* streampool_sleep_state_json(int device, unsigned long long pool_first,
                                                       unsigned long long pool_second);

/* Frees an allocation of streampool_alloc without the caller's records of it (C and C++ callers
 * that keep none: streampool/process_allocator.hpp). Same errors as streampool_free, as a status. */
STREAMPOOL_API int streampool_free_unsized(void* ptr);

/* Delegation (docs/integrations/thrust-cccl.md, "One allocator per process"): another copy of
 * streampool in the process, the PyTorch extension streampool._C10, serves the C API's calls, so
 * that C, C++ (process_allocator.hpp), CuPy, Numba and PyTorch share the one allocator PyTorch uses.
 * While a delegate is set, streampool_alloc, streampool_free, streampool_free_unsized,
 * streampool_record_stream, streampool_empty_cache, streampool_set_memory_fraction,
 * streampool_stats_json, streampool_snapshot_json and streampool_backend_name go to it; every other
 * call of the device allocator fails with STREAMPOOL_ERROR_STATE naming it (use its own API).
 * Every member must be set and stay valid until the process exits; `abi` must be
 * STREAMPOOL_DELEGATE_ABI. A member returns a status; on failure its last_error() says why. */
#define STREAMPOOL_DELEGATE_ABI 1u
typedef struct streampool_delegate {
  unsigned abi;
  const char* name; /* who serves, for messages, e.g. "the PyTorch extension (streampool._C10)" */
  int (*alloc)(size_t size, int device, void* stream, void** out);
  int (*free)(void* ptr);
  int (*record_stream)(void* ptr, void* stream);
  int (*empty_cache)(void);
  int (*set_memory_fraction)(double fraction, int device);
  const char* (*stats_json)(int device);       /* NULL on failure */
  const char* (*snapshot_json)(void);          /* NULL on failure */
  const char* (*backend_name)(void);
  const char* (*last_error)(void);             /* of the calling thread's last failed call */
} streampool_delegate;
/* Sets (non-NULL) or clears (NULL) the delegate. Setting fails with STREAMPOOL_ERROR_STATE when the
 * C API's own allocator exists (shut it down first) or another delegate is set (setting the same
 * one again is OK), with STREAMPOOL_ERROR_INVALID_ARGUMENT for another ABI or a NULL member.
 * Clearing fails with STREAMPOOL_ERROR_STATE while allocations made through the delegate are live;
 * it waits for calls in flight. Set it before other threads use the C API. */
STREAMPOOL_API int streampool_set_delegate(const streampool_delegate* delegate);
/* The delegate's name, or NULL when none is set. */
STREAMPOOL_API const char* streampool_delegate_name(void);

STREAMPOOL_API int streampool_last_status(void);
STREAMPOOL_API const char* streampool_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_C_API_H */
