// c_api_sleep.cpp — the C entry points of sleep and wake (docs/sleep-wake.md): putting a pool of
// the C API's allocator to sleep, waking it, and its state as JSON. Errors are handled as in
// c_api.cpp (c_api_with_allocator in c_api_internal.hpp): a status and a per-thread message.
#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/allocator.hpp"
#include "streampool/c_api.h"
#include "streampool/pools.hpp"

namespace {

using streampool::allocator;
using streampool::c_api_impl::c_api_with_allocator;

streampool::mempool_id pool_of(unsigned long long first, unsigned long long second) {
  return streampool::mempool_id{first, second};
}

}  // namespace

extern "C" {

int streampool_sleep(int device, unsigned long long pool_first, unsigned long long pool_second, int mode,
                     int keep_backup) {
  return c_api_with_allocator([&](allocator& alloc) {
    if (mode != STREAMPOOL_SLEEP_OFFLOAD && mode != STREAMPOOL_SLEEP_DISCARD) {
      throw streampool::error("streampool_sleep: mode " + std::to_string(mode) +
                              " is neither STREAMPOOL_SLEEP_OFFLOAD (0) nor STREAMPOOL_SLEEP_DISCARD (1)");
    }
    streampool::sleep_options options;
    options.mode = mode == STREAMPOOL_SLEEP_DISCARD ? streampool::sleep_mode::discard : streampool::sleep_mode::offload;
    options.keep_backup = keep_backup != 0;
    alloc.pools(device).sleep(pool_of(pool_first, pool_second), options);
  });
}

int streampool_wake(int device, unsigned long long pool_first, unsigned long long pool_second) {
  return c_api_with_allocator([&](allocator& alloc) { alloc.pools(device).wake(pool_of(pool_first, pool_second)); });
}

const char* streampool_sleep_state_json(int device, unsigned long long pool_first, unsigned long long pool_second) {
  thread_local std::string text;
  const int status = c_api_with_allocator(
      [&](allocator& alloc) { text = streampool::to_json(alloc.pools(device).sleep_state(pool_of(pool_first, pool_second))); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

}  // extern "C"
