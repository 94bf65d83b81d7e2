// peer_torch.cpp — the PyTorch peers (peer_torch.hpp): loading the plugin of perf/torch_peer/
// (dlopen, symbol lookup, ABI check) and torch_peer, an allocator subclass that forwards to it.
// Statistics are c10's own (allocated, reserved, requested, device mallocs); the pointer table of
// peer_base serves deallocate(ptr) checks and record_stream.
#include "peer_torch.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>

#include "cli_common.hpp"
#include "peer_base.hpp"
#include "torch_peer/streampool_torch_peer.h"

namespace streampool::bench {
namespace {

// Note [One c10 backend per process]
// c10 picks its allocator backend (native or cudaMallocAsync) from PYTORCH_CUDA_ALLOC_CONF in a
// static initializer of libc10_cuda, i.e. when the library is loaded, and never again. So the
// bench sets the variable before it dlopens the plugin (which loads c10), and a process can run
// torch-native or torch-async, not both: selected_backends() refuses both at once (status 2), the
// default list has torch-native only, and torch-async is run in a second invocation. The user's
// own PYTORCH_CUDA_ALLOC_CONF is kept (its other keys, e.g. expandable_segments, apply to c10);
// for torch-async `backend:cudaMallocAsync` is appended unless it names a backend. The plugin
// checks which backend c10 actually runs and fails the run if it is the other one.
// (A child process per PyTorch peer would lift the limit; the rows of two processes would then
// have to be merged, which the bench does not do.)

struct torch_plugin {
  std::string path;
  torch_backend backend = torch_backend::native;
  decltype(&streampool_torch_peer_open) open = nullptr;
  decltype(&streampool_torch_peer_close) close = nullptr;
  decltype(&streampool_torch_peer_alloc) alloc = nullptr;
  decltype(&streampool_torch_peer_free) free = nullptr;
  decltype(&streampool_torch_peer_empty_cache) empty_cache = nullptr;
  decltype(&streampool_torch_peer_stats_of) stats = nullptr;
  decltype(&streampool_torch_peer_reset_peak) reset_peak = nullptr;
  decltype(&streampool_torch_peer_last_error) last_error = nullptr;
};

std::mutex plugin_mutex;
std::string path_option;               // --torch-peer
std::optional<torch_plugin> plugin;    // loaded once, never unloaded (c10 cannot be)

const char* c10_backend_name(torch_backend backend) {
  return backend == torch_backend::native ? "native" : "cudaMallocAsync";
}
const char* peer_name(torch_backend backend) {
  return backend == torch_backend::native ? "torch-native" : "torch-async";
}

template <class F>
void resolve(void* handle, const std::string& path, const char* symbol, F& out) {
  out = reinterpret_cast<F>(::dlsym(handle, symbol));
  if (out == nullptr) {
    throw usage_error("--torch-peer: '" + path + "' has no symbol " + symbol + " (not a streampool torch peer plugin?)");
  }
}

void set_alloc_conf(torch_backend backend) {
  if (backend != torch_backend::cuda_malloc_async) return;
  const char* existing = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  std::string conf = existing != nullptr ? existing : "";
  if (conf.find("backend:") != std::string::npos) return;  // the user's choice; the plugin checks it
  conf += (conf.empty() ? "" : ",") + std::string("backend:cudaMallocAsync");
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", conf.c_str(), 1);
}

torch_plugin load(const std::string& path, torch_backend backend) {
  set_alloc_conf(backend);
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw usage_error("--torch-peer: cannot load '" + path + "': " + (why != nullptr ? why : "dlopen failed"));
  }
  decltype(&streampool_torch_peer_abi_version) abi_version = nullptr;
  resolve(handle, path, "streampool_torch_peer_abi_version", abi_version);
  if (abi_version() != STREAMPOOL_TORCH_PEER_ABI_VERSION) {
    throw usage_error("--torch-peer: '" + path + "' has plugin ABI version " + std::to_string(abi_version()) +
                      ", this bench needs " + std::to_string(STREAMPOOL_TORCH_PEER_ABI_VERSION) + ": rebuild it");
  }
  torch_plugin p;
  p.path = path;
  p.backend = backend;
  resolve(handle, path, "streampool_torch_peer_open", p.open);
  resolve(handle, path, "streampool_torch_peer_close", p.close);
  resolve(handle, path, "streampool_torch_peer_alloc", p.alloc);
  resolve(handle, path, "streampool_torch_peer_free", p.free);
  resolve(handle, path, "streampool_torch_peer_empty_cache", p.empty_cache);
  resolve(handle, path, "streampool_torch_peer_stats_of", p.stats);
  resolve(handle, path, "streampool_torch_peer_reset_peak", p.reset_peak);
  resolve(handle, path, "streampool_torch_peer_last_error", p.last_error);
  return p;
}

const torch_plugin& loaded_plugin(torch_backend backend) {
  const std::lock_guard lock(plugin_mutex);
  if (!plugin) throw error(std::string(peer_name(backend)) + " peer: the --torch-peer plugin is not loaded");
  if (plugin->backend != backend) {
    throw error(std::string(peer_name(backend)) + " peer: this process loaded c10 for " + peer_name(plugin->backend) +
                " (one PyTorch backend per process)");
  }
  return *plugin;
}

/// PyTorch's allocator behind the allocator interface. The c10 allocator is a process-wide
/// singleton: each instance (one per bench run) opens it (empty cache, peaks reset) and closes it
/// (empty cache). Allocates on the calling thread's current device (the bench uses device 0).
class torch_peer final : public peer_base {
 public:
  torch_peer(torch_backend backend, std::shared_ptr<driver> drv)
      : peer_base(peer_name(backend), std::move(drv)), plugin_(loaded_plugin(backend)) {
    call(plugin_.open(c10_backend_name(backend), 0), "open", 0);
  }
  ~torch_peer() override {
    for (auto& [ptr, block] : table_.take_all()) (void)plugin_.free(ptr);
    (void)plugin_.close();
  }

 private:
  void call(int status, const char* what, std::size_t bytes, int device = 0) const {
    if (status == STREAMPOOL_TORCH_PEER_OK) return;
    const std::string message = name_ + " peer: " + what + " failed: " + plugin_.last_error();
    if (status == STREAMPOOL_TORCH_PEER_OUT_OF_MEMORY) throw out_of_memory(message, bytes, device);
    throw error(message);
  }
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override {
    void* ptr = nullptr;
    call(plugin_.alloc(bytes, stream, &ptr), "allocation", bytes, device);
    add(ptr, bytes, stream, device);
    return ptr;
  }
  void do_deallocate(void* ptr) override {
    const peer_block block = take(ptr);
    joiner_.join(block);
    call(plugin_.free(ptr), "free", block.bytes, block.device);
  }
  void do_empty_cache() override { call(plugin_.empty_cache(), "empty cache", 0); }
  memory_stats do_stats(int device) const override {
    memory_stats s = base_stats();
    streampool_torch_peer_stats c10{};
    call(plugin_.stats(device, &c10), "stats", 0, device);
    s.allocated_bytes[0].current = c10.allocated_current;
    s.allocated_bytes[0].peak = c10.allocated_peak;
    s.reserved_bytes[0].current = c10.reserved_current;
    s.reserved_bytes[0].peak = c10.reserved_peak;
    s.requested_bytes[0].current = c10.requested_current;
    s.requested_bytes[0].peak = c10.requested_peak;
    s.segment[0].current = c10.segments_current;
    s.num_device_alloc = c10.num_device_alloc;
    s.num_device_free = c10.num_device_free;
    return s;
  }
  void do_reset_peak_stats(int device) override {
    peer_base::do_reset_peak_stats(device);
    call(plugin_.reset_peak(device), "reset peak stats", 0, device);
  }

  const torch_plugin& plugin_;
  stream_joiner joiner_{device_driver(), name_};
};

}  // namespace

void set_torch_peer_path(const std::string& path) {
  const std::lock_guard lock(plugin_mutex);
  path_option = path;
}

/// The plugin beside the running executable, or where this build made it (cmake/streampool_torch_peer.cmake
/// builds it whenever torch imports); "" when neither exists.
std::string found_torch_peer() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path beside = self.parent_path() / "libstreampool_torch_peer.so";
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
#ifdef STREAMPOOL_BENCH_BUILT_TORCH_PEER
  if (std::filesystem::exists(STREAMPOOL_BENCH_BUILT_TORCH_PEER, ec)) return STREAMPOOL_BENCH_BUILT_TORCH_PEER;
#endif
  return {};
}

std::string torch_peer_path() {
  const std::lock_guard lock(plugin_mutex);
  if (!path_option.empty()) return path_option;
  const char* env = std::getenv("STREAMPOOL_BENCH_TORCH_PEER");
  if (env != nullptr && *env != '\0') return env;
  static const std::string found = found_torch_peer();
  return found;
}

std::string torch_peer_why_not(const driver_choice& choice) {
  if (torch_peer_path().empty()) {
    return "needs the PyTorch peer plugin and a real GPU: pass --torch-peer PATH/libstreampool_torch_peer.so (or set "
           "STREAMPOOL_BENCH_TORCH_PEER); build it where libtorch is (docs/harness.md \"PyTorch peers\")";
  }
  if (choice.sim) return "needs a real GPU: PyTorch's allocator calls CUDA itself, not through the driver interface";
  return {};
}

void load_torch_peer(torch_backend backend) {
  const std::string path = torch_peer_path();
  const std::lock_guard lock(plugin_mutex);
  if (plugin) {
    if (plugin->backend != backend) {
      throw usage_error(std::string("--backends: ") + peer_name(backend) + " cannot run: this process loaded c10 for " +
                        peer_name(plugin->backend) + " (one PyTorch backend per process)");
    }
    return;
  }
  if (path.empty()) throw usage_error("--torch-peer: no plugin given");
  plugin = load(path, backend);
}

std::unique_ptr<allocator> make_torch_native_peer(const backend_spec&, std::shared_ptr<driver> drv) {
  return std::make_unique<torch_peer>(torch_backend::native, std::move(drv));
}

std::unique_ptr<allocator> make_torch_async_peer(const backend_spec&, std::shared_ptr<driver> drv) {
  return std::make_unique<torch_peer>(torch_backend::cuda_malloc_async, std::move(drv));
}

}  // namespace streampool::bench
