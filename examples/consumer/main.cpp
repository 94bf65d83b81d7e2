// main.cpp — a find_package(streampool) consumer: allocates through the native and the
// cudaMallocAsync backends on the simulated device (no GPU needed) and prints their statistics.
#include <streampool/streampool.hpp>  // the umbrella header: the whole public C++ API

#include <cstdio>
#include <memory>
#include <vector>

int main() {
  using namespace streampool;
  for (const char* config : {"backend:native", "backend:cudaMallocAsync"}) {
    sim_options options;
    options.capacity = 4 * gib;
    auto alloc = make_allocator(parse_config(config), std::make_shared<sim_driver>(options));
    std::vector<void*> blocks;
    for (std::size_t size : {std::size_t{512}, 3 * kib, 1 * mib, 25 * mib}) blocks.push_back(alloc->allocate(size));
    for (void* p : blocks) alloc->deallocate(p);
    const memory_stats s = alloc->stats(0);
    std::printf("%s (%s): allocations %lld, peak allocated %lld bytes, reserved %lld bytes\n", config,
                std::string(alloc->backend_name()).c_str(), static_cast<long long>(s.allocation[0].allocated),
                static_cast<long long>(s.allocated_bytes[0].peak), static_cast<long long>(s.reserved_bytes[0].current));
    if (s.allocation[0].allocated != 4 || s.allocation[0].current != 0) {
      std::fprintf(stderr, "consumer: unexpected statistics\n");
      return 1;
    }
  }
  std::puts("consumer: OK");
  return 0;
}
