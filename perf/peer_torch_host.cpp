// peer_torch_host.cpp — the `torch-pinned` peer: c10's CachingHostAllocator (the allocator behind
// pin_memory() and non_blocking copies) through the host entry points of the PyTorch peer plugin
// (streampool_torch_peer.h, "Pinned host memory"). The plugin is the one peer_torch.cpp loaded:
// dlopen of the same path returns the loaded library, whose host symbols are looked up here.
#include <dlfcn.h>

#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "cli_common.hpp"
#include "host_peers.hpp"
#include "peer_torch.hpp"
#include "torch_peer/streampool_torch_peer.h"

namespace streampool::bench {
namespace {

struct host_symbols {
  decltype(&streampool_torch_peer_host_alloc) alloc = nullptr;
  decltype(&streampool_torch_peer_host_free) free = nullptr;
  decltype(&streampool_torch_peer_host_record_stream) record_stream = nullptr;
  decltype(&streampool_torch_peer_host_empty_cache) empty_cache = nullptr;
  decltype(&streampool_torch_peer_host_num_alloc) num_alloc = nullptr;
  decltype(&streampool_torch_peer_host_last_error) last_error = nullptr;
};

host_symbols resolve_host_symbols() {
  const std::string path = torch_peer_path();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle == nullptr) throw usage_error("torch-pinned: the --torch-peer plugin '" + path + "' is not loaded");
  host_symbols s;
  auto get = [&](const char* name, auto& out) {
    out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(::dlsym(handle, name));
    if (out == nullptr) {
      throw usage_error("torch-pinned: the --torch-peer plugin '" + path + "' has no " + name +
                        ": it predates the pinned host peer; rebuild it from perf/torch_peer");
    }
  };
  get("streampool_torch_peer_host_alloc", s.alloc);
  get("streampool_torch_peer_host_free", s.free);
  get("streampool_torch_peer_host_record_stream", s.record_stream);
  get("streampool_torch_peer_host_empty_cache", s.empty_cache);
  get("streampool_torch_peer_host_num_alloc", s.num_alloc);
  get("streampool_torch_peer_host_last_error", s.last_error);
  return s;
}

class torch_pinned_peer final : public host_peer {
 public:
  explicit torch_pinned_peer(std::shared_ptr<driver> drv) : driver_(std::move(drv)), sym_(resolve_host_symbols()) {
    call(sym_.empty_cache(), "empty cache", 0);
  }
  ~torch_pinned_peer() override {
    for (const auto& [ptr, ctx] : live_) (void)sym_.free(ctx);
    (void)sym_.empty_cache();
  }
  void* allocate(std::size_t bytes) override {
    void* ptr = nullptr;
    void* ctx = nullptr;
    call(sym_.alloc(bytes, &ptr, &ctx), "allocation", bytes);
    const std::lock_guard lock(mutex_);
    live_.emplace(ptr, ctx);
    return ptr;
  }
  void deallocate(void* ptr) override {
    void* ctx = nullptr;
    {
      const std::lock_guard lock(mutex_);
      const auto found = live_.find(ptr);
      if (found == live_.end()) throw error("torch-pinned peer: free of a pointer it did not hand out");
      ctx = found->second;
      live_.erase(found);
    }
    call(sym_.free(ctx), "free", 0);
  }
  void record_stream(void* ptr, stream_t stream) override {
    void* ctx = nullptr;
    {
      const std::lock_guard lock(mutex_);
      ctx = live_.at(ptr);
    }
    call(sym_.record_stream(ptr, ctx, stream), "record event", 0);
  }
  std::int64_t driver_allocations() const override {
    std::int64_t count = -1;
    return sym_.num_alloc(&count) == STREAMPOOL_TORCH_PEER_OK ? count : -1;
  }
  std::string leak_check() const override {
    const std::lock_guard lock(mutex_);
    return live_.empty() ? "ok" : "FAIL: " + std::to_string(live_.size()) + " pinned buffers still live";
  }

 private:
  void call(int status, const char* what, std::size_t bytes) const {
    if (status == STREAMPOOL_TORCH_PEER_OK) return;
    const std::string message = std::string("torch-pinned peer: ") + what + " failed: " + sym_.last_error();
    if (status == STREAMPOOL_TORCH_PEER_OUT_OF_MEMORY) throw out_of_memory(message, bytes, -1);
    throw error(message);
  }

  std::shared_ptr<driver> driver_;
  host_symbols sym_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, void*> live_;  ///< pointer -> the plugin's handle (c10's DataPtr)
};

}  // namespace

std::unique_ptr<host_peer> make_torch_pinned_peer(std::shared_ptr<driver> drv) {
  return std::make_unique<torch_pinned_peer>(std::move(drv));
}

}  // namespace streampool::bench
