// c_api_pair.cpp — streampool-c-api-pair: N alloc+free pairs through the C API (streampool_alloc /
// streampool_free, what PyTorch's pluggable allocator calls), for counting instructions per pair
// with callgrind on a simulated device (docs/benchmarks.md, "C API pair": run it with two values
// of N and divide the difference of the totals by the difference of N, so start-up cancels out),
// or for timing the pair on the real GPU (DRIVER cuda: prints nanoseconds per pair, and with
// STREAM created the cost of the capture-status query each C entry point makes, timed apart).
//   usage: streampool-c-api-pair N [SIZE] [CONFIG] [STREAM] [DRIVER]
//   STREAM: legacy (the default stream, nullptr; default) or created (a stream made for the run,
//   as PyTorch's side streams are). DRIVER: sim (default) or cuda.
#include <chrono>
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
    std::fprintf(stderr, "usage: streampool-c-api-pair N [SIZE] [CONFIG] [legacy|created] [sim|cuda]\n");
    return 2;
  }
  const long pairs = std::atol(argv[1]);
  const std::size_t size = argc > 2 ? static_cast<std::size_t>(std::atol(argv[2])) : 4096;
  const std::string config = argc > 3 ? argv[3] : "";
  const std::string stream_kind = argc > 4 ? argv[4] : "legacy";
  const std::string driver_kind = argc > 5 ? argv[5] : "sim";
  if (pairs < 0 || size == 0 || (stream_kind != "legacy" && stream_kind != "created") ||
      (driver_kind != "sim" && driver_kind != "cuda")) {
    std::fprintf(stderr, "streampool-c-api-pair: N >= 0, SIZE > 0, STREAM legacy or created, DRIVER sim or cuda\n");
    return 2;
  }
  std::shared_ptr<streampool::driver> drv;
  if (driver_kind == "sim") {
    drv = std::make_shared<streampool::sim_driver>();
  } else {
    drv = streampool::make_cuda_driver();
  }
  streampool::stream_t stream = nullptr;
  if (stream_kind == "created" && !drv->stream_create(0, &stream).ok()) {
    std::fprintf(stderr, "streampool-c-api-pair: cannot create a stream on device 0\n");
    return 1;
  }
  streampool::c_api_impl::c_api_install(streampool::make_allocator(streampool::parse_config(config), drv));
  void* warm = streampool_alloc(size, 0, stream);  // the first pair obtains a segment
  streampool_free(warm, size, 0, stream);
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    void* p = streampool_alloc(size, 0, stream);
    if (p == nullptr) {
      std::fprintf(stderr, "streampool_alloc failed: %s\n", streampool_last_error());
      return 1;
    }
    streampool_free(p, size, 0, stream);
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  std::printf("%ld pairs of %zu bytes on the %s stream (%s driver): %.1f ns per pair\n", pairs, size,
              stream_kind.c_str(), driver_kind.c_str(), pairs > 0 ? elapsed.count() / double(pairs) : 0.0);
  // The capture-status query the C entry points make per call on a non-legacy stream (Note
  // [Captures the C API was not told about] in src/c_api/c_api_capture.cpp), timed on its own.
  if (stream != nullptr && pairs > 0 && driver_kind == "cuda") {
    streampool::capture_info info;
    const auto query_start = std::chrono::steady_clock::now();
    for (long i = 0; i < pairs; ++i) (void)drv->stream_capture_info(stream, &info);
    const std::chrono::duration<double, std::nano> query = std::chrono::steady_clock::now() - query_start;
    std::printf("stream_capture_info: %.1f ns per query (2 per pair)\n", query.count() / double(pairs));
  }
  const int shut = streampool_shutdown();
  if (stream != nullptr) (void)drv->stream_destroy(0, stream);
  return shut == STREAMPOOL_OK ? 0 : 1;
}
