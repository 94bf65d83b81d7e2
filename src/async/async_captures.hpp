// async_captures.hpp — the capture router (src/capture) as one device of the cudaMallocAsync
// backend keeps it: its private pools hold blocks of their own (private_pools.hpp), its parked
// frees are pointers with their records (Note [Deferred frees during capture] in async_device.cpp).
#pragma once

#include "async/pointer_map.hpp"
#include "async/private_pools.hpp"
#include "capture/capture_router.hpp"

namespace streampool::async {

/// A deallocate() of an allocation made outside any capture, requested while a capture was
/// underway on its device: it is handed to free_async only once no capture is underway.
struct deferred_free {
  void* ptr = nullptr;
  allocation_record record;
};

/// The device's capture bookkeeping: recordings, private pools and parked frees.
using capture_router = capture::capture_router<private_memory, deferred_free>;

}  // namespace streampool::async
