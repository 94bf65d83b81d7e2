// c_api_pair.cpp — streampool-c-api-pair: N alloc+free pairs through the C API (streampool_alloc /
// streampool_free, what PyTorch's pluggable allocator calls) on a simulated device, for counting
// instructions per pair with callgrind (docs/benchmarks.md, "C API pair"): run it with two values
// of N and divide the difference of the totals by the difference of N, so start-up cancels out.
//   usage: streampool-c-api-pair N [SIZE] [CONFIG]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "c_api_internal.hpp"
#include "streampool/allocator.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: streampool-c-api-pair N [SIZE] [CONFIG]\n");
    return 2;
  }
  const long pairs = std::atol(argv[1]);
  const std::size_t size = argc > 2 ? static_cast<std::size_t>(std::atol(argv[2])) : 4096;
  const std::string config = argc > 3 ? argv[3] : "";
  if (pairs < 0 || size == 0) {
    std::fprintf(stderr, "streampool-c-api-pair: N >= 0 and SIZE > 0\n");
    return 2;
  }
  auto sim = std::make_shared<streampool::sim_driver>();
  streampool::detail::c_api_install(streampool::make_allocator(streampool::parse_config(config), sim));
  void* warm = streampool_alloc(size, 0, nullptr);  // the first pair obtains a segment
  streampool_free(warm, size, 0, nullptr);
  for (long i = 0; i < pairs; ++i) {
    void* p = streampool_alloc(size, 0, nullptr);
    if (p == nullptr) {
      std::fprintf(stderr, "streampool_alloc failed: %s\n", streampool_last_error());
      return 1;
    }
    streampool_free(p, size, 0, nullptr);
  }
  std::printf("%ld pairs of %zu bytes\n", pairs, size);
  return streampool_shutdown() == STREAMPOOL_OK ? 0 : 1;
}
