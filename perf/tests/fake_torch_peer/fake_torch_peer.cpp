// fake_torch_peer.cpp — a stand-in for the PyTorch peer plugin (perf/torch_peer/) with the same C
// interface, so the bench's loader and torch peer are tested where there is no libtorch: host
// memory, sizes rounded up to 512 B like c10's, one "segment" per allocation, an out-of-memory
// answer above 1 TiB, and — like c10 — the backend read from PYTORCH_CUDA_ALLOC_CONF when the
// library is loaded.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "streampool_torch_peer.h"

namespace {

std::string loaded_backend = [] {
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  return conf != nullptr && std::strstr(conf, "backend:cudaMallocAsync") != nullptr ? "cudaMallocAsync" : "native";
}();
std::mutex mutex;
std::unordered_map<void*, std::size_t> live;  // pointer -> rounded size
streampool_torch_peer_stats stats{};
thread_local std::string last_error;

int fail(const std::string& what, int status = STREAMPOOL_TORCH_PEER_ERROR) {
  last_error = what;
  return status;
}

}  // namespace

extern "C" {

int streampool_torch_peer_abi_version(void) { return STREAMPOOL_TORCH_PEER_ABI_VERSION; }

int streampool_torch_peer_open(const char* backend, int) {
  if (loaded_backend != backend) return fail("open: fake c10 runs '" + loaded_backend + "', not '" + backend + "'");
  const std::lock_guard lock(mutex);
  stats.allocated_peak = stats.allocated_current;
  stats.reserved_peak = stats.reserved_current;
  return STREAMPOOL_TORCH_PEER_OK;
}

int streampool_torch_peer_close(void) { return STREAMPOOL_TORCH_PEER_OK; }

const char* streampool_torch_peer_backend(void) { return loaded_backend.c_str(); }

int streampool_torch_peer_alloc(size_t bytes, void*, void** out) {
  *out = nullptr;
  if (bytes > (std::size_t{1} << 40)) return fail("raw_alloc_with_stream: fake out of memory", STREAMPOOL_TORCH_PEER_OUT_OF_MEMORY);
  const std::size_t rounded = (bytes + 511) / 512 * 512;
  void* ptr = std::malloc(rounded);
  if (ptr == nullptr) return fail("raw_alloc_with_stream: malloc failed", STREAMPOOL_TORCH_PEER_OUT_OF_MEMORY);
  const std::lock_guard lock(mutex);
  live.emplace(ptr, rounded);
  const auto size = static_cast<int64_t>(rounded);
  stats.allocated_current += size;
  stats.reserved_current += size;
  stats.requested_current += static_cast<int64_t>(bytes);
  stats.allocated_peak = std::max(stats.allocated_peak, stats.allocated_current);
  stats.reserved_peak = std::max(stats.reserved_peak, stats.reserved_current);
  stats.requested_peak = std::max(stats.requested_peak, stats.requested_current);
  ++stats.segments_current;
  ++stats.num_device_alloc;
  *out = ptr;
  return STREAMPOOL_TORCH_PEER_OK;
}

int streampool_torch_peer_free(void* ptr) {
  const std::lock_guard lock(mutex);
  const auto it = live.find(ptr);
  if (it == live.end()) return fail("raw_delete: invalid device pointer");
  const auto size = static_cast<int64_t>(it->second);
  stats.allocated_current -= size;
  stats.reserved_current -= size;
  stats.requested_current = 0;  // the fake does not keep requested sizes per pointer
  --stats.segments_current;
  ++stats.num_device_free;
  live.erase(it);
  std::free(ptr);
  return STREAMPOOL_TORCH_PEER_OK;
}

int streampool_torch_peer_empty_cache(void) { return STREAMPOOL_TORCH_PEER_OK; }

int streampool_torch_peer_stats_of(int, streampool_torch_peer_stats* out) {
  const std::lock_guard lock(mutex);
  *out = stats;
  return STREAMPOOL_TORCH_PEER_OK;
}

int streampool_torch_peer_reset_peak(int) {
  const std::lock_guard lock(mutex);
  stats.allocated_peak = stats.allocated_current;
  stats.reserved_peak = stats.reserved_current;
  stats.requested_peak = stats.requested_current;
  return STREAMPOOL_TORCH_PEER_OK;
}

const char* streampool_torch_peer_last_error(void) { return last_error.c_str(); }

}  // extern "C"
