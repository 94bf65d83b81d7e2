// host_peers.cpp — the host peers of host_peers.hpp: streampool's host allocator, raw
// cudaHostAlloc/cudaFreeHost through the driver, and c10's CachingHostAllocator through the
// PyTorch peer plugin (peer_torch_host.cpp).
#include "host_peers.hpp"

#include <atomic>
#include <mutex>
#include <unordered_set>

#include "cli_common.hpp"
#include "peer_torch.hpp"
#include "streampool/host_allocator.hpp"

namespace streampool::bench {
namespace {

class pinned_peer final : public host_peer {
 public:
  pinned_peer(allocator_config config, std::shared_ptr<driver> drv)
      : alloc_(make_host_allocator(std::move(config), std::move(drv))) {}
  void* allocate(std::size_t bytes) override { return alloc_->allocate(bytes); }
  void deallocate(void* ptr) override { alloc_->deallocate(ptr); }
  void record_stream(void* ptr, stream_t stream) override { alloc_->record_stream(ptr, stream); }
  std::int64_t driver_allocations() const override { return alloc_->stats().num_host_alloc; }
  std::string leak_check() const override {
    try {
      const host_memory_stats s = alloc_->stats();
      std::int64_t live = 0;
      for (const host_block_info& b : alloc_->snapshot().blocks) live += b.state == host_block_state::in_use;
      if (live == 0) return "ok";
      return "FAIL: " + std::to_string(live) + " pinned blocks still in use after freeing everything (" +
             std::to_string(s.allocated_bytes.current) + " bytes allocated)";
    } catch (const std::exception& e) {
      return std::string("FAIL: stats() threw: ") + e.what();
    }
  }

 private:
  std::unique_ptr<host_allocator> alloc_;
};

/// cudaHostAlloc / cudaFreeHost per request: what a program without a cache pays.
class raw_host_peer final : public host_peer {
 public:
  explicit raw_host_peer(std::shared_ptr<driver> drv) : driver_(std::move(drv)) {}
  ~raw_host_peer() override {
    for (void* ptr : live_) (void)driver_->host_free(ptr);
  }
  void* allocate(std::size_t bytes) override {
    void* ptr = nullptr;
    const drv_result result = driver_->host_alloc(bytes, &ptr);
    if (!result.ok()) {
      const std::string message = "cudaHostAlloc peer: host_alloc of " + std::to_string(bytes) +
                                  " bytes failed: " + driver_->describe(result);
      if (result.code == status::out_of_memory) throw out_of_memory(message, bytes, -1);
      throw cuda_error(message, result.native);
    }
    allocations_.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard lock(mutex_);
    live_.insert(ptr);
    return ptr;
  }
  void deallocate(void* ptr) override {
    {
      const std::lock_guard lock(mutex_);
      if (live_.erase(ptr) == 0) throw error("cudaHostAlloc peer: free of a pointer it did not hand out");
    }
    check(*driver_, driver_->host_free(ptr), "cudaHostAlloc peer: host_free");
  }
  void record_stream(void*, stream_t) override {}  // cudaFreeHost synchronises
  std::int64_t driver_allocations() const override { return allocations_.load(std::memory_order_relaxed); }
  std::string leak_check() const override {
    const std::lock_guard lock(mutex_);
    return live_.empty() ? "ok" : "FAIL: " + std::to_string(live_.size()) + " host allocations still live";
  }

 private:
  std::shared_ptr<driver> driver_;
  mutable std::mutex mutex_;
  std::unordered_set<void*> live_;
  std::atomic<std::int64_t> allocations_{0};
};

}  // namespace

bool is_host_backend(std::string_view name) noexcept {
  return name == "pinned" || name == "cudaHostAlloc" || name == "torch-pinned";
}

std::unique_ptr<host_peer> make_host_peer(const backend_spec& spec, std::shared_ptr<driver> drv) {
  if (spec.name == "pinned") {
    allocator_config config;
    try {
      config = parse_config(spec.config_text);
    } catch (const config_error& e) {
      throw usage_error("--backends: config of 'pinned' (" + spec.config_text + "): " + e.what());
    }
    return std::make_unique<pinned_peer>(std::move(config), std::move(drv));
  }
  if (spec.name == "cudaHostAlloc") return std::make_unique<raw_host_peer>(std::move(drv));
  if (spec.name == "torch-pinned") return make_torch_pinned_peer(std::move(drv));
  throw error("'" + spec.name + "' is not a host allocator");
}

std::unique_ptr<allocator> refuse_host_backend(const backend_spec& spec, std::shared_ptr<driver>) {
  throw usage_error("--backends: '" + spec.name +
                    "' is a pinned host allocator: only `streampool-bench latency` runs it (alloc+free pairs and the "
                    "copy loop)");
}

}  // namespace streampool::bench
