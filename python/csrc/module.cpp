// module.cpp — the `streampool._C10` extension module: install() makes a torch_allocator over a
// streampool::allocator PyTorch's CUDA allocator (c10's allocator slot, as
// torch.cuda.memory.change_current_allocator does), and the package's Python functions (stats,
// snapshot, trace, cache, fraction, env check) reach that same allocator through the functions below.
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDAAllocatorConfig.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/extension.h>
#include <torch/headeronly/version.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "c_api_delegate.hpp"
#include "settings_route.hpp"
#include "streampool/pools.hpp"
#include "torch_allocator.hpp"

namespace py = pybind11;
using streampool::torch_ext::torch_allocator;

namespace {

// The PyTorch release this interface was written for (Note [Supported PyTorch] in
// streampool/_version_gate.py): c10's CUDAAllocator changes between releases.
static_assert(TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 11,
              "streampool's extension implements c10's CUDAAllocator of PyTorch 2.11 only");

std::shared_ptr<torch_allocator>& instance_slot() {
  static auto* slot = new std::shared_ptr<torch_allocator>();  // never destroyed: PyTorch frees at exit
  return *slot;
}

torch_allocator& active() {
  auto& slot = instance_slot();
  if (!slot) throw std::runtime_error("streampool: the extension allocator is not installed (streampool.install())");
  return *slot;
}

// Note [PyTorch's config parsed before the swap]
// c10 parses PYTORCH_CUDA_ALLOC_CONF into CUDAAllocatorConfig lazily, on the first read of any of
// its settings, and asserts that a `backend:` value in it equals the current allocator's name()
// ("Allocator backend parsed at runtime != allocator backend parsed at load time"). streampool's
// name() is its backend's PyTorch name ("native" / "cudaMallocAsync"), so that assertion holds
// whenever PyTorch's variable and streampool's config agree on the backend; they can differ
// (STREAMPOOL_ALLOC_CONF picks streampool's), so the parse is still forced here, while PyTorch's
// own allocator, picked from PyTorch's variable, is current (seen on the H200 before: a first read
// during a captured training step failed the assertion). A later
// torch.cuda.memory._set_allocator_settings("backend:...") re-parses and asserts like PyTorch's
// allocator does; changing the backend at run time is not possible with PyTorch's allocator either.
// When PyTorch's variable names streampool's backend (or none, and streampool's is native) the
// assertion holds without the early parse, so it is skipped: that parse checks cudaMallocAsync
// support with a CUDA call for backend:cudaMallocAsync, which would initialise CUDA at install()
// and break a fork made before the first CUDA use (Note [Built at first use]).

// Note [Both allocator slots]
// PyTorch keeps the CUDA allocator in two places: c10::cuda::CUDACachingAllocator::allocator (what
// torch.cuda.* and at::empty_cuda use; changeCurrentAllocator sets it) and c10's per-device-type
// registry (c10::GetAllocator(kCUDA), filled at load time with the native allocator), which the
// device-agnostic torch.accelerator memory API of PyTorch >= 2.9 reads through
// c10::getDeviceAllocator. Both point at streampool after install(), or torch.accelerator.memory_stats()
// would report PyTorch's idle allocator. The registry takes the highest priority so that no later
// static registration replaces it.

// Note [Runtime settings from PyTorch]
// torch.cuda.memory._set_allocator_settings(env) and torch._C._accelerator_setAllocatorSettings(env)
// end in c10::CachingAllocator::setAllocatorSettings: c10's AcceleratorAllocatorConfig parses and
// validates `env` (a bad value raises ValueError there, before anything below runs), then calls
// the device's config parser hook (CUDAAllocatorConfig's, for the CUDA-only keys). install() puts
// a hook of its own in that slot which calls PyTorch's first, so PyTorch's validation, errors and
// own records stay as they are, and then hands the same string to streampool's
// allocator::set_settings (Note [Settings changed at run time]), so the change takes effect in the
// allocator that serves PyTorch. The pinned_* keys are left to PyTorch: its pinned host allocator is
// its own (docs/pytorch-compatibility.md). A key PyTorch accepts but streampool cannot change while
// it runs (large_segment_size_mb, cross_stream_reuse, ...) raises ValueError saying so.

void route_runtime_settings() {
  auto& hook = c10::CachingAllocator::AcceleratorAllocatorConfig::getConfigParserHook();
  std::function<void(const std::string&)> pytorch_hook = hook;
  hook = [pytorch_hook](const std::string& env) {
    if (pytorch_hook) pytorch_hook(env);  // PyTorch's CUDA keys, validated and recorded as before
    torch_allocator* ours = streampool::torch_ext::installed();
    if (ours == nullptr) return;
    try {
      ours->impl().set_settings(streampool::torch_ext::without_pinned_keys(env));
    } catch (const streampool::config_error& e) {
      TORCH_CHECK_VALUE(false, e.what());
    }
  };
}

// PyTorch's words for a config error where code matches them (test_cuda.py's
// test_allocator_memory_fraction_setting looks for "per_process_memory_fraction is invalid").
streampool::allocator_config checked_config(const std::optional<std::string>& config) {
  try {
    return config ? streampool::parse_config(*config, streampool::config_source::api) : streampool::config_from_env();
  } catch (const streampool::config_error& e) {
    if (e.key() == "per_process_memory_fraction") {
      throw streampool::config_error(std::string(e.what()) + " (PyTorch: per_process_memory_fraction is invalid, set "
                                     "it in [0.0, 1.0])", e.key(), e.position());
    }
    throw;
  }
}

void install(std::optional<std::string> config) {
  if (instance_slot()) throw std::runtime_error("streampool: the extension allocator is already installed");
  streampool::allocator_config cfg = checked_config(config);
  streampool::torch_ext::env_snapshot env = streampool::torch_ext::read_env(cfg);
  const streampool::backend_kind cfg_backend = cfg.backend;
  // Note [Built at first use] (torch_allocator.cpp): the config is checked now, the allocator made
  // when CUDA starts.
  auto alloc = std::make_shared<torch_allocator>(std::move(cfg), std::move(env));
  // Note [PyTorch's config parsed before the swap]
  if (streampool::torch_ext::pytorch_backend() != cfg_backend) {
    (void)c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig::instance();
  }
  streampool::torch_ext::set_installed(alloc.get());
  c10::Allocator* registered = c10::GetAllocator(c10::DeviceType::CUDA);
  try {
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(alloc);
    // Note [Both allocator slots]
    c10::SetAllocator(c10::DeviceType::CUDA, alloc.get(), std::numeric_limits<std::uint8_t>::max());
    TORCH_CHECK(c10::GetAllocator(c10::DeviceType::CUDA) == alloc.get(),
                "streampool: c10::SetAllocator(CUDA) did not take streampool's allocator; "
                "torch.accelerator's memory functions would not reach it");
  } catch (...) {
    if (c10::GetAllocator(c10::DeviceType::CUDA) == alloc.get()) {
      c10::SetAllocator(c10::DeviceType::CUDA, registered, std::numeric_limits<std::uint8_t>::max());
    }
    streampool::torch_ext::set_installed(nullptr);
    throw;
  }
  instance_slot() = std::move(alloc);
  route_runtime_settings();  // Note [Runtime settings from PyTorch]
}

py::dict env_at_creation() {
  py::dict out;
  const auto& env = active().env();
  for (std::size_t i = 0; i < streampool::torch_ext::config_variables.size(); ++i) {
    const auto& value = env.values[i];
    out[py::str(std::string(streampool::torch_ext::config_variables[i]))] =
        value ? py::object(py::str(*value)) : py::object(py::none());
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "streampool as PyTorch's CUDA allocator (c10 CUDAAllocator of PyTorch 2.11); use streampool.install()";
  m.attr("torch_version") = py::make_tuple(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
  m.def("install", &install, py::arg("config") = py::none(),
        "Builds the allocator (config string, else the environment) and makes it PyTorch's CUDA allocator");
  m.def("is_installed", [] { return static_cast<bool>(instance_slot()); });
  m.def("c_api_delegate", [] { return reinterpret_cast<std::uintptr_t>(&streampool::torch_ext::c_api_delegate()); },
        "Address of the streampool_delegate table over this allocator (for libstreampool.so's streampool_set_delegate)");
  m.def("name", [] { return active().name(); });
  m.def("backend_name", [] { return std::string(active().impl().backend_name()); });
  m.def("config_text", [] { return streampool::to_string(active().impl().settings()); });
  m.def("set_settings", [](const std::string& text) {
    try {
      active().impl().set_settings(text);
    } catch (const streampool::config_error& e) {
      throw py::value_error(e.what());
    }
  }, py::arg("config"), "Changes the runtime keys of the allocator's config (allocator::set_settings)");
  m.def("settings_text", [] { return streampool::to_string(active().impl().settings()); });
  m.def("config_in_effect", [] { return active().env().config_text + " (from " + active().env().source + ")"; });
  m.def("env_at_creation", &env_at_creation);
  m.def("env_mismatch_warnings", [] { return streampool::torch_ext::env_mismatch_warnings(active().env()); });
  m.def("device_count", [] {
    int count = 0;
    (void)active().impl().device_driver().device_count(&count);
    return count;
  });
  m.def("stats_json", [](int device) { return active().impl().stats(device).to_json(); }, py::arg("device") = -1);
  m.def("reset_peak_stats", [](int device) { active().impl().reset_peak_stats(device); }, py::arg("device") = -1);
  m.def("reset_accumulated_stats", [](int device) { active().impl().reset_accumulated_stats(device); },
        py::arg("device") = -1);
  m.def("empty_cache", [] { active().impl().empty_cache(); }, py::call_guard<py::gil_scoped_release>());
  m.def("set_memory_fraction", [](double f, int device) { active().impl().set_memory_fraction(f, device); },
        py::arg("fraction"), py::arg("device") = -1);
  m.def("memory_fraction", [](int device) { return active().impl().memory_fraction(device); }, py::arg("device") = -1);
  m.def("record_history", [](bool enabled, std::size_t max_entries) {
    active().recordHistory(enabled, nullptr, max_entries, c10::CachingDeviceAllocator::RecordContext::NEVER, true, {});
  }, py::arg("enabled"), py::arg("max_entries"));
  m.def("trace_csv", [](int device) { return streampool::trace_to_csv(active().impl().trace(device)); },
        py::arg("device") = -1);
  m.def("snapshot_json", [] { return active().impl().snapshot().to_json(); });
  // Sleep and wake (docs/sleep-wake.md): pools named by their torch.cuda.MemPool / graph pool id.
  m.def("pool_sleep", [](int device, std::uint64_t first, std::uint64_t second, bool discard, bool keep_backup) {
    streampool::sleep_options options;
    options.mode = discard ? streampool::sleep_mode::discard : streampool::sleep_mode::offload;
    options.keep_backup = keep_backup;
    active().impl().pools(device).sleep({first, second}, options);
  }, py::arg("device"), py::arg("first"), py::arg("second"), py::arg("discard"), py::arg("keep_backup"),
        py::call_guard<py::gil_scoped_release>());
  m.def("pool_wake", [](int device, std::uint64_t first, std::uint64_t second) {
    active().impl().pools(device).wake({first, second});
  }, py::arg("device"), py::arg("first"), py::arg("second"), py::call_guard<py::gil_scoped_release>());
  m.def("pool_sleep_state", [](int device, std::uint64_t first, std::uint64_t second) {
    return streampool::to_json(active().impl().pools(device).sleep_state({first, second}));
  }, py::arg("device"), py::arg("first"), py::arg("second"));
  m.def("pool_make_sleepable", [](int device, std::uint64_t first, std::uint64_t second) {
    streampool::device_pools& pools = active().impl().pools(device);
    streampool::pool_options options = pools.options({first, second});
    options.sleepable = true;
    pools.set_options({first, second}, options);
  }, py::arg("device"), py::arg("first"), py::arg("second"),
        "Makes a private pool's new segments VMM, so that it can sleep (pool_options::sleepable)");
  // attachAllocatorTraceTracker's state (Note [Mapped ranges as segments]): (trackers attached,
  // [(device, address, size), ...] ranges told as SEGMENT_ALLOC and not yet as SEGMENT_FREE).
  m.def("tracker_ranges", [] {
    torch_allocator& a = active();
    py::list ranges;
    for (const auto& [device, address, size] : a.tracker_ranges_told()) ranges.append(py::make_tuple(device, address, size));
    return py::make_tuple(a.tracker_count(), ranges);
  });
}
