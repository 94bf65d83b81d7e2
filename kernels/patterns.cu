// patterns.cu — verification kernels: a seeded byte pattern writer and checker, and a delayed
// copy that keeps a stream busy before reading its source.
#include <cuda_runtime.h>

#include "streampool_kernels.hpp"

namespace streampool::kernels {
namespace {

__device__ __forceinline__ unsigned char pattern_byte(std::uint32_t seed, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(seed) << 32) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 29;
  return static_cast<unsigned char>(x);
}

__global__ void fill_kernel(unsigned char* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = pattern_byte(seed, i);
  }
}

__global__ void check_kernel(const unsigned char* p, std::size_t n, std::uint32_t seed,
                             unsigned long long* bad) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    local += p[i] != pattern_byte(seed, i);
  }
  if (local != 0) atomicAdd(bad, local);
}

__global__ void delayed_copy_kernel(unsigned char* dst, const unsigned char* src, std::size_t n,
                                    std::uint32_t microseconds) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    // ~1.5 GHz: 1500 cycles per microsecond; __nanosleep keeps the SM mostly idle.
    while (clock64() - start < static_cast<long long>(microseconds) * 1500) __nanosleep(1000);
  }
  __syncthreads();
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024);
}

}  // namespace

int fill_pattern(void* ptr, std::size_t bytes, std::uint32_t seed, void* stream) {
  fill_kernel<<<grid_for(bytes), 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<unsigned char*>(ptr),
                                                                               bytes, seed);
  return static_cast<int>(cudaGetLastError());
}

int count_mismatches(const void* ptr, std::size_t bytes, std::uint32_t seed, void* stream,
                     std::uint64_t* mismatches) {
  const auto s = static_cast<cudaStream_t>(stream);
  unsigned long long* bad = nullptr;
  cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&bad), sizeof *bad, s);
  if (err != cudaSuccess) return static_cast<int>(err);
  cudaMemsetAsync(bad, 0, sizeof *bad, s);
  check_kernel<<<grid_for(bytes), 256, 0, s>>>(static_cast<const unsigned char*>(ptr), bytes, seed, bad);
  unsigned long long host = 0;
  cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, s);
  cudaFreeAsync(bad, s);
  err = cudaStreamSynchronize(s);
  *mismatches = host;
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

int delayed_copy(void* dst, const void* src, std::size_t bytes, std::uint32_t microseconds, void* stream) {
  delayed_copy_kernel<<<grid_for(bytes), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes, microseconds);
  return static_cast<int>(cudaGetLastError());
}

const char* error_text(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace streampool::kernels
