// address_probe.cpp — measures where the real driver places cudaMalloc allocations, so the simulated
// device can hand out addresses in the same pattern (best fit breaks ties by address, so the
// pattern decides which cached block a replay reuses). Reads operations from stdin, one a line:
//   m BYTES    cudaMalloc(BYTES); the allocation gets the next id (0, 1, ...)
//   f ID       cudaFree of allocation ID
// and prints, for each malloc, "ID BYTES ADDRESS OFFSET" (OFFSET = ADDRESS - first address, signed).
// Build: g++ -O2 -std=c++17 address_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

int main() {
  std::vector<void*> ptrs;
  std::intptr_t first = 0;
  std::string op;
  long long value = 0;
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "address_probe: no CUDA device\n");
    return 1;
  }
  while (std::cin >> op >> value) {
    if (op == "m") {
      void* p = nullptr;
      cudaError_t rc = cudaMalloc(&p, static_cast<std::size_t>(value));
      if (rc != cudaSuccess) {
        std::fprintf(stderr, "address_probe: cudaMalloc(%lld) failed: %s\n", value, cudaGetErrorName(rc));
        return 1;
      }
      if (ptrs.empty()) first = reinterpret_cast<std::intptr_t>(p);
      std::printf("%zu %lld %ju %lld\n", ptrs.size(), value, static_cast<std::uintmax_t>(reinterpret_cast<std::uintptr_t>(p)),
                  static_cast<long long>(reinterpret_cast<std::intptr_t>(p) - first));
      ptrs.push_back(p);
    } else if (op == "f") {
      if (value < 0 || static_cast<std::size_t>(value) >= ptrs.size() || ptrs[value] == nullptr) {
        std::fprintf(stderr, "address_probe: bad free id %lld\n", value);
        return 1;
      }
      cudaFree(ptrs[value]);
      ptrs[value] = nullptr;
    } else {
      std::fprintf(stderr, "address_probe: unknown op '%s'\n", op.c_str());
      return 1;
    }
  }
  return 0;
}
