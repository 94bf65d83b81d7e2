// peer_allocators.cpp — the `cuda` and `async-raw` peers as allocator subclasses over the driver
// interface (peer_allocators.hpp). Statistics: allocated = requested bytes of live blocks (the raw
// calls expose no rounding); reserved = live malloc'd bytes (`cuda`) or the pool's reserved_mem
// attributes (`async-raw`); device mallocs = device mallocs (`cuda`) or malloc_async calls
// (`async-raw`: PyTorch's definition for its cudaMallocAsync backend, which ours follows too).
#include "peer_allocators.hpp"

#include <string>

#include "peer_base.hpp"

namespace streampool::bench {
namespace {

/// `cuda`: every request is a device malloc, every free a device free (which synchronises the
/// device, so record_stream needs nothing more).
class raw_device_peer final : public peer_base {
 public:
  explicit raw_device_peer(std::shared_ptr<driver> drv) : peer_base("cuda", std::move(drv)) {}
  ~raw_device_peer() override {
    for (auto& [ptr, block] : table_.take_all()) (void)device_driver().free(block.device, ptr);
  }

 private:
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override {
    void* ptr = nullptr;
    const drv_result result = device_driver().malloc(device, bytes, &ptr);
    if (!result.ok()) fail("device malloc", result, bytes, device);
    add(ptr, bytes, stream, device);
    return ptr;
  }
  void do_deallocate(void* ptr) override {
    const peer_block block = take(ptr);
    check(device_driver(), device_driver().free(block.device, ptr), "cuda peer: device free");
  }
  void do_empty_cache() override {}
  // Every block is its own device malloc: reserved = allocated, segments = allocations.
  memory_stats do_stats(int) const override {
    memory_stats s = base_stats();
    s.reserved_bytes[0] = s.allocated_bytes[0];
    s.segment[0] = s.allocation[0];
    return s;
  }
};

/// `async-raw`: malloc_async / free_async on the device's default pool, as a program calling
/// cudaMallocAsync/cudaFreeAsync directly would. The pool's settings are left as the driver has
/// them (release threshold included). record_stream: at free time an event is recorded on each
/// recorded stream and the allocation stream waits for it before the free_async.
class raw_async_peer final : public peer_base {
 public:
  explicit raw_async_peer(std::shared_ptr<driver> drv) : peer_base("async-raw", std::move(drv)) {
    int count = 0;
    check(device_driver(), device_driver().device_count(&count), "async-raw peer: device_count");
    pools_.resize(static_cast<std::size_t>(count));
    for (int d = 0; d < count; ++d) {
      check(device_driver(), device_driver().pool_get_default(d, &pools_[static_cast<std::size_t>(d)]),
            "async-raw peer: pool_get_default");
      // Start from an empty pool, so the figures are this run's (a previous run may have left
      // memory in the shared default pool).
      (void)device_driver().device_synchronize(d);
      (void)device_driver().pool_trim_to(pools_[static_cast<std::size_t>(d)], 0);
      (void)device_driver().pool_set_attr(pools_[static_cast<std::size_t>(d)], pool_attr::reserved_mem_high, 0);
    }
  }
  ~raw_async_peer() override {
    for (auto& [ptr, block] : table_.take_all()) (void)device_driver().free_async(ptr, block.stream);
    for (std::size_t d = 0; d < pools_.size(); ++d) {
      (void)device_driver().device_synchronize(static_cast<int>(d));
      (void)device_driver().pool_trim_to(pools_[d], 0);
    }
  }

 private:
  std::uint64_t pool_reserved(std::size_t device, pool_attr attr) const {
    std::uint64_t value = 0;
    (void)device_driver().pool_get_attr(pools_[device], attr, &value);
    return value;
  }
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override {
    void* ptr = nullptr;
    const auto d = static_cast<std::size_t>(device);
    const drv_result result = device_driver().malloc_async(pools_[d], bytes, stream, &ptr);
    if (!result.ok()) fail("malloc_async", result, bytes, device);
    add(ptr, bytes, stream, device);
    return ptr;
  }
  void do_deallocate(void* ptr) override {
    const peer_block block = take(ptr);
    joiner_.join(block);
    check(device_driver(), device_driver().free_async(ptr, block.stream), "async-raw peer: free_async");
  }
  void do_empty_cache() override {
    for (std::size_t d = 0; d < pools_.size(); ++d) {
      check(device_driver(), device_driver().device_synchronize(static_cast<int>(d)), "async-raw peer: synchronize");
      check(device_driver(), device_driver().pool_trim_to(pools_[d], 0), "async-raw peer: pool_trim_to");
    }
  }
  memory_stats do_stats(int device) const override {
    memory_stats s = base_stats();
    const auto d = static_cast<std::size_t>(device);
    s.reserved_bytes[0].current = static_cast<std::int64_t>(pool_reserved(d, pool_attr::reserved_mem_current));
    s.reserved_bytes[0].peak = static_cast<std::int64_t>(pool_reserved(d, pool_attr::reserved_mem_high));
    return s;
  }
  void do_reset_peak_stats(int device) override {
    peer_base::do_reset_peak_stats(device);
    (void)device_driver().pool_set_attr(pools_[static_cast<std::size_t>(device)], pool_attr::reserved_mem_high, 0);
  }
  std::vector<mempool_t> pools_;
  stream_joiner joiner_{device_driver(), "async-raw"};
};

}  // namespace

std::unique_ptr<allocator> make_raw_device_peer(const backend_spec&, std::shared_ptr<driver> drv) {
  return std::make_unique<raw_device_peer>(std::move(drv));
}

std::unique_ptr<allocator> make_raw_async_peer(const backend_spec&, std::shared_ptr<driver> drv) {
  return std::make_unique<raw_async_peer>(std::move(drv));
}

}  // namespace streampool::bench
