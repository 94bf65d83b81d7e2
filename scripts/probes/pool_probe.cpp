// pool_probe.cpp — measures how CUDA's stream-ordered pool (cudaMallocAsync on the device's default
// pool) grows and shrinks, so the simulated device's pool can be calibrated against it. Reads
// operations from stdin, one a line:
//   m BYTES STREAM   cudaMallocAsync(BYTES) on stream STREAM (0..7); the allocation gets the next id
//   f ID STREAM      cudaFreeAsync of allocation ID on stream STREAM
//   s                synchronize the device
// and prints "OP_INDEX RESERVED_BYTES USED_BYTES ADDRESS_OFFSET" whenever the pool's reserved
// memory changes (and for every malloc the offset of its address from the first one), then the
// peak reserved and used at the end.
// Build: g++ -O2 -std=c++17 pool_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

int main() {
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "pool_probe: no CUDA device\n");
    return 1;
  }
  cudaMemPool_t pool;
  cudaDeviceGetDefaultMemPool(&pool, 0);
  std::uint64_t threshold = UINT64_MAX;  // what PyTorch's backend and ours set: keep memory cached
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  cudaStream_t streams[8];
  for (auto& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::vector<void*> ptrs;
  std::intptr_t first = 0;
  std::uint64_t last_reserved = 0;
  std::string op;
  long index = 0;
  while (std::cin >> op) {
    long long a = 0, b = 0;
    if (op == "m" || op == "f") std::cin >> a >> b;
    cudaStream_t s = streams[b & 7];
    if (op == "m") {
      void* p = nullptr;
      if (cudaMallocAsync(&p, static_cast<std::size_t>(a), s) != cudaSuccess) {
        std::fprintf(stderr, "pool_probe: cudaMallocAsync(%lld) failed at op %ld\n", a, index);
        return 1;
      }
      if (ptrs.empty()) first = reinterpret_cast<std::intptr_t>(p);
      ptrs.push_back(p);
    } else if (op == "f") {
      if (a < 0 || static_cast<std::size_t>(a) >= ptrs.size() || ptrs[a] == nullptr) {
        std::fprintf(stderr, "pool_probe: bad free id %lld\n", a);
        return 1;
      }
      cudaFreeAsync(ptrs[a], s);
      ptrs[a] = nullptr;
    } else if (op == "s") {
      cudaDeviceSynchronize();
    }
    std::uint64_t reserved = 0, used = 0;
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
    if (reserved != last_reserved) {
      std::printf("%ld %ju %ju %lld\n", index, static_cast<std::uintmax_t>(reserved), static_cast<std::uintmax_t>(used),
                  op == "m" ? static_cast<long long>(reinterpret_cast<std::intptr_t>(ptrs.back()) - first) : 0LL);
      last_reserved = reserved;
    }
    ++index;
  }
  cudaDeviceSynchronize();
  std::uint64_t high = 0, used_high = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high);
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high);
  std::printf("peak_reserved %ju peak_used %ju ops %ld\n", static_cast<std::uintmax_t>(high),
              static_cast<std::uintmax_t>(used_high), index);
  return 0;
}
