// peer_cub.cpp — the `cub` peer (peer_cub.hpp): CUB's CachingDeviceAllocator with its default bins
// (512 B, 4 KiB, 32 KiB, 256 KiB, 2 MiB; larger requests are a cudaMalloc each and never cached;
// at most 6 MiB cached per device), as a user who writes `cub::CachingDeviceAllocator a;` gets it.
// Statistics: allocated = requested bytes of live blocks; reserved = bytes CUB holds from cudaMalloc
// (live + cached), with its peak; device mallocs = CUB's cudaMalloc calls (Note [Counting CUB's
// device mallocs]). Compiled by the host compiler: the header needs no nvcc.
#include "peer_cub.hpp"

#include "peer_base.hpp"
#include "streampool/sim_driver.hpp"

#if STREAMPOOL_BENCH_HAVE_CUB
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

// What util_allocator.cuh includes, first, so that the macros below touch only its own code.
#include <cub/config.cuh>
#include <cub/util_debug.cuh>
#include <cub/util_namespace.cuh>

namespace streampool::bench::cub_counting {
cudaError_t counted_malloc(void* owner, void** ptr, std::size_t bytes) noexcept;
cudaError_t counted_free(void* owner, void* ptr) noexcept;
}  // namespace streampool::bench::cub_counting

// Note [Counting CUB's device mallocs]
// CachingDeviceAllocator keeps no counters, and whether a DeviceAllocate was a cache hit cannot be
// told from outside without racing other threads. Its header is inline code, so its calls to
// cudaMalloc and cudaFree (all inside its member functions, hence `this`) are redirected to
// wrappers that count them and the bytes they hold before calling CUDA: exact device-malloc counts
// and reserved peaks at the cost of a few instructions per miss, nothing on a cache hit.
#define cudaMalloc(ptr, bytes) ::streampool::bench::cub_counting::counted_malloc(this, (ptr), (bytes))
#define cudaFree(ptr) ::streampool::bench::cub_counting::counted_free(this, (ptr))
#include <cub/util_allocator.cuh>
#undef cudaMalloc
#undef cudaFree
#endif

namespace streampool::bench {

#if STREAMPOOL_BENCH_HAVE_CUB
namespace {

/// CUB's allocator plus what its redirected cudaMalloc/cudaFree calls count.
struct counted_cub final : cub::CachingDeviceAllocator {
  // skip_cleanup: the base destructor would free the cache through the wrappers after this
  // object's members are gone, so ~counted_cub frees it first.
  counted_cub() : cub::CachingDeviceAllocator(/*skip_cleanup=*/true, /*debug=*/false) {}
  ~counted_cub() override { (void)FreeAllCached(); }
  counted_cub(const counted_cub&) = delete;
  counted_cub& operator=(const counted_cub&) = delete;

  std::mutex segments_mutex;
  std::unordered_map<void*, std::size_t> segments;  // every live cudaMalloc of CUB, with its size
  byte_gauge reserved;
  std::atomic<std::int64_t> mallocs{0};
  std::atomic<std::int64_t> frees{0};
};

counted_cub& owner_of(void* owner) {
  return static_cast<counted_cub&>(*static_cast<cub::CachingDeviceAllocator*>(owner));
}

}  // namespace

cudaError_t cub_counting::counted_malloc(void* owner, void** ptr, std::size_t bytes) noexcept {
  const cudaError_t result = ::cudaMalloc(ptr, bytes);
  if (result != cudaSuccess) return result;
  counted_cub& cub = owner_of(owner);
  cub.mallocs.fetch_add(1, std::memory_order_relaxed);
  cub.reserved.add(static_cast<std::int64_t>(bytes));
  try {
    const std::lock_guard lock(cub.segments_mutex);
    cub.segments.emplace(*ptr, bytes);
  } catch (...) {  // no memory for the map: the segment is not counted when freed
  }
  return result;
}

cudaError_t cub_counting::counted_free(void* owner, void* ptr) noexcept {
  const cudaError_t result = ::cudaFree(ptr);
  if (result != cudaSuccess) return result;
  counted_cub& cub = owner_of(owner);
  cub.frees.fetch_add(1, std::memory_order_relaxed);
  const std::lock_guard lock(cub.segments_mutex);
  if (const auto it = cub.segments.find(ptr); it != cub.segments.end()) {
    cub.reserved.sub(static_cast<std::int64_t>(it->second));
    cub.segments.erase(it);
  }
  return result;
}

namespace {

class cub_peer final : public peer_base {
 public:
  explicit cub_peer(std::shared_ptr<driver> drv) : peer_base("cub", std::move(drv)) {}
  ~cub_peer() override {
    for (auto& [ptr, block] : table_.take_all()) (void)cub_.DeviceFree(block.device, ptr);
  }

 private:
  [[noreturn]] void fail(const char* call, cudaError_t result, std::size_t bytes, int device) const {
    const std::string what = "cub peer: " + std::string(call) + " of " + std::to_string(bytes) + " bytes failed: " +
                             ::cudaGetErrorName(result) + " (" + ::cudaGetErrorString(result) + ")";
    if (result == cudaErrorMemoryAllocation) throw out_of_memory(what, bytes, device);
    throw cuda_error(what, static_cast<int>(result));
  }
  // The explicit-device forms: DeviceAllocate makes no CUDA call on a cache hit; DeviceFree reads
  // and sets the current device (CUB's code), as for any caller naming the device.
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override {
    void* ptr = nullptr;
    const cudaError_t result = cub_.DeviceAllocate(device, &ptr, bytes, static_cast<cudaStream_t>(stream));
    if (result != cudaSuccess) fail("DeviceAllocate", result, bytes, device);
    add(ptr, bytes, stream, device);
    return ptr;
  }
  void do_deallocate(void* ptr) override {
    const peer_block block = take(ptr);
    joiner_.join(block);  // CUB records its ready event on the allocation stream only
    const cudaError_t result = cub_.DeviceFree(block.device, ptr);
    if (result != cudaSuccess) fail("DeviceFree", result, block.bytes, block.device);
  }
  void do_empty_cache() override {
    const cudaError_t result = cub_.FreeAllCached();
    if (result != cudaSuccess) fail("FreeAllCached", result, 0, 0);
  }
  memory_stats do_stats(int) const override {
    memory_stats s = base_stats();
    s.reserved_bytes[0].current = cub_.reserved.current.load(std::memory_order_relaxed);
    s.reserved_bytes[0].peak = cub_.reserved.peak.load(std::memory_order_relaxed);
    s.num_device_alloc = cub_.mallocs.load(std::memory_order_relaxed);
    s.num_device_free = cub_.frees.load(std::memory_order_relaxed);
    s.segment[0].current = s.num_device_alloc - s.num_device_free;
    return s;
  }
  void do_reset_peak_stats(int device) override {
    peer_base::do_reset_peak_stats(device);
    cub_.reserved.reset_peak();
  }

  mutable counted_cub cub_;
  stream_joiner joiner_{device_driver(), "cub"};
};

}  // namespace

bool cub_peer_built() noexcept { return true; }

std::unique_ptr<allocator> make_cub_peer(const backend_spec&, std::shared_ptr<driver> drv) {
  if (dynamic_cast<sim_driver*>(drv.get()) != nullptr) {
    throw error("cub peer: needs a real GPU (CUB calls cudaMalloc itself, not through the driver interface)");
  }
  return std::make_unique<cub_peer>(std::move(drv));
}

#else  // built without CUB's header

bool cub_peer_built() noexcept { return false; }

std::unique_ptr<allocator> make_cub_peer(const backend_spec&, std::shared_ptr<driver>) {
  throw error("cub peer: not built (cub/util_allocator.cuh was not found at build time)");
}

#endif

}  // namespace streampool::bench
