/* streampool/c_api.h — C entry points over one process-wide allocator, for C programs and for
 * PyTorch's CUDAPluggableAllocator (spec §5): streampool_alloc / streampool_free have exactly the
 * signatures it loads from libstreampool.so. The allocator is created on first use from
 * STREAMPOOL_ALLOC_CONF (else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF) on the real GPU,
 * or explicitly with streampool_init(). No C++ exception ever crosses this boundary: failures
 * return NULL or a non-zero status, and streampool_last_error() says why (per thread). */
#ifndef STREAMPOOL_C_API_H
#define STREAMPOOL_C_API_H

#include <stddef.h>

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
  STREAMPOOL_ERROR_INTERNAL = 6
} streampool_status;

/* Explicit initialisation with a config string (NULL = read the environment). Fails with
 * STREAMPOOL_ERROR_STATE when the allocator already exists. Optional: the first call of any other
 * function initialises from the environment. */
int streampool_init(const char* config);
/* Frees every cached block (live allocations stay valid) and destroys the allocator when nothing
 * is live; returns STREAMPOOL_ERROR_STATE (and keeps it) otherwise. */
int streampool_shutdown(void);

/* PyTorch CUDAPluggableAllocator signatures. `stream` is a cudaStream_t. size 0 returns NULL with
 * status OK (as cudaMalloc). On failure: NULL, and streampool_last_status()/last_error() say why. */
void* streampool_alloc(size_t size, int device, void* stream);
/* size/device/stream are what PyTorch recorded at allocation; they are checked against ours. */
void streampool_free(void* ptr, size_t size, int device, void* stream);

int streampool_record_stream(void* ptr, void* stream);
int streampool_empty_cache(void);
int streampool_set_memory_fraction(double fraction, int device);
/* Statistics of `device` (-1 = current) as a JSON object with PyTorch's key names; snapshot as
 * JSON in the shape of torch.cuda.memory._snapshot(). The returned text stays valid until the
 * calling thread's next call of the same function; NULL on failure. */
const char* streampool_stats_json(int device);
const char* streampool_snapshot_json(void);
/* "native" or "cudaMallocAsync"; NULL on failure. */
const char* streampool_backend_name(void);

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
int streampool_host_init(const char* config);
void* streampool_host_alloc(size_t size);
int streampool_host_free(void* ptr);
int streampool_host_record_stream(void* ptr, void* stream);
int streampool_host_empty_cache(void);
const char* streampool_host_stats_json(void);
const char* streampool_host_snapshot_json(void);

/* Status and message of the calling thread's last failed call ("" / OK when it succeeded). */
int streampool_last_status(void);
const char* streampool_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_C_API_H */
