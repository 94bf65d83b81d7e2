// capture_router.cpp — the error messages of capture_router (capture_router.hpp), out of line so
// that the template stays small, and the rule for reusing the id of a released pool.
//
// Note [Released pools]
// release_pool drops one use of a pool; at 0 the pool is freeable: the backend frees its memory
// at the next empty_cache (the native backend also on its out-of-memory ladder) once none of it
// is in use — native: no live block in the pool's segments; cudaMallocAsync, whose pools own no
// memory: no live allocation routed to the pool — and then forgets the pool (forget_released).
// Until then begin_allocate_to_pool on that id is refused: reviving it would hand memory a
// released graph may still be reading to a new capture, behind the back of the release. After it,
// the id is unknown again and begin_allocate_to_pool starts a new pool with use count 1. This is
// PyTorch's rule (its beginAllocateToPool asserts use_count > 0 for a pool that still exists, and
// the pool is deleted once its last segment is freed), applied to both backends; it is pinned on
// both by tests/unit/capture/capture_router_test.cpp.
#include "capture/capture_router.hpp"

#include <string>

#include "streampool/errors.hpp"

namespace streampool::capture {
namespace {

std::string where(int device, mempool_id pool) {
  return "pool {" + std::to_string(pool.first) + "," + std::to_string(pool.second) + "} on device " +
         std::to_string(device);
}

}  // namespace

void throw_already_recording(int device, mempool_id pool) {
  throw error("streampool: begin_allocate_to_pool: already recording to " + where(device, pool) +
              "; call end_allocate_to_pool first");
}

void throw_begin_released(int device, mempool_id pool) {
  throw error("streampool: begin_allocate_to_pool: " + where(device, pool) +
              " was released (use count 0) and its memory is not freed yet; use a new id from create_pool_id(), "
              "or call empty_cache() once none of the pool's memory is in use, after which the id starts a new pool");
}

void throw_not_recording(int device, mempool_id pool) {
  throw error("streampool: end_allocate_to_pool: not currently recording to " + where(device, pool) +
              " (no begin_allocate_to_pool for it, or already ended)");
}

void throw_release_unknown(int device, mempool_id pool) {
  throw error("streampool: release_pool: unknown " + where(device, pool) +
              " (never passed to begin_allocate_to_pool, or already freed)");
}

void throw_release_released(int device, mempool_id pool) {
  throw error("streampool: release_pool: " + where(device, pool) + " was already released (use count 0)");
}

void throw_options_unknown(int device, mempool_id pool) {
  throw error("streampool: pool options: unknown " + where(device, pool) +
              " (never passed to begin_allocate_to_pool, or already freed); create the pool first");
}

}  // namespace streampool::capture
