/* streampool/c_api.h — C entry points over one process-wide allocator, for C programs and for
 * PyTorch's CUDAPluggableAllocator (docs/pytorch-compatibility.md §5): streampool_alloc / streampool_free have exactly the
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
 * is live; returns STREAMPOOL_ERROR_STATE (and keeps it) otherwise. Safe while other threads are
 * inside C API calls: it waits for them before destroying the allocator. */
int streampool_shutdown(void);

/* PyTorch CUDAPluggableAllocator signatures. `stream` is a cudaStream_t. size 0 returns NULL with
 * status OK (as cudaMalloc). On failure: NULL, and streampool_last_status()/last_error() say why. */
void* streampool_alloc(size_t size, int device, void* stream);
/* size/device/stream are what PyTorch recorded at allocation. When they differ from what
 * streampool recorded, the block is freed anyway (a refused free would leak: PyTorch ignores the
 * status) and the mismatch is reported once through the warning handler. An unknown pointer or a
 * double free is STREAMPOOL_ERROR_INVALID_ARGUMENT. */
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

/* Status and message of the calling thread's last failed call ("" / OK when it succeeded). */
int streampool_last_status(void);
const char* streampool_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_C_API_H */
