// canary_check.cu — the checking-mode kernel: counts the bytes of a range that differ from an
// expected value and reports the first one, into host-mapped memory (see canary_check.hpp).
// Compiled into libstreampool itself (not the test kernels library), so it is kept tiny.
#include <cuda_runtime.h>

#include <climits>

#include "canary_check.hpp"

namespace streampool::kernels {
namespace {

constexpr unsigned threads = 256;

// Note [One block]
// Canaries are at most about a KiB (src/check/check_layout.hpp), so one block of 256 threads
// reads them in a few strided steps; one block also means the reduction needs only shared memory
// and the result is written once, by thread 0, with no grid-wide synchronisation.
__global__ void byte_check_kernel(const unsigned char* ptr, unsigned long long bytes, unsigned char expected,
                                  byte_check_slot* slot) {
  __shared__ unsigned long long count;
  __shared__ unsigned long long first;
  if (threadIdx.x == 0) {
    count = 0;
    first = ULLONG_MAX;
  }
  __syncthreads();
  unsigned long long mine = 0;
  unsigned long long my_first = ULLONG_MAX;
  for (unsigned long long i = threadIdx.x; i < bytes; i += blockDim.x) {
    if (ptr[i] != expected) {
      ++mine;
      if (i < my_first) my_first = i;
    }
  }
  if (mine != 0) {
    atomicAdd(&count, mine);
    atomicMin(&first, my_first);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    slot->mismatches = count;
    slot->first_offset = first;
    slot->first_value = count != 0 ? ptr[first] : 0u;
    __threadfence_system();
    *static_cast<volatile std::uint32_t*>(&slot->done) = 1u;
  }
}

}  // namespace

int launch_byte_check(const void* ptr, std::size_t bytes, std::uint8_t expected, byte_check_slot* slot,
                      void* stream) {
  byte_check_kernel<<<1, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const unsigned char*>(ptr), bytes, expected, slot);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace streampool::kernels
