// backend_registry.cpp — the name -> factory registry, which entries can run on the chosen driver,
// --backends parsing and the leak check (backend_registry.hpp).
#include "backend_registry.hpp"

#include <algorithm>
#include <cstdlib>

#include "cli_common.hpp"
#include "host_peers.hpp"
#include "peer_allocators.hpp"
#include "peer_cub.hpp"
#include "peer_torch.hpp"
#include "size_parse.hpp"
#include "streampool/errors.hpp"

namespace streampool::bench {
namespace {

std::unique_ptr<allocator> make_streampool(const backend_spec& spec, std::shared_ptr<driver> drv) {
  return make_allocator(config_for(spec), std::move(drv));
}

std::map<std::string, backend_entry> build_registry() {
  std::map<std::string, backend_entry> registry;
  registry["native"] = {"streampool's caching backend (PyTorch-native behaviour)", true, make_streampool, {}, {}};
  registry["cudaMallocAsync"] = {"streampool's backend over CUDA stream-ordered memory pools", true,
                                 make_streampool, {}, {}};
  registry["cuda"] = {"peer: raw device malloc/free per request (cudaMalloc/cudaFree), through the driver",
                      false, make_raw_device_peer, {}, {}};
  registry["async-raw"] = {"peer: raw malloc_async/free_async on the device's default pool, through the driver",
                           false, make_raw_async_peer, {}, {}};
  // Note [Peers that need a real GPU]
  // `cub` and the PyTorch peers call CUDA (or libtorch) directly, not through the driver
  // interface, so they cannot run on the sim driver: there `runnable` says "needs a real GPU" and
  // they are left out of the defaults (compare lists them with the reason); naming one is an
  // error (status 2). The PyTorch peers also need the plugin of perf/torch_peer/ (--torch-peer),
  // and only one of them can run per process (Note [One c10 backend per process], peer_torch.cpp),
  // so torch-async is not in the defaults: name it in a second invocation.
  registry["cub"] = {"peer: CUB's CachingDeviceAllocator (default bins: 512 B..2 MiB, 6 MiB cache cap)", false,
                     cub_peer_built() ? backend_factory(make_cub_peer) : backend_factory(),
                     "not built: CUB's header cub/util_allocator.cuh was not found at build time",
                     [](const driver_choice& choice) {
                       return choice.sim ? std::string("needs a real GPU: CUB's CachingDeviceAllocator calls "
                                                       "cudaMalloc/cudaFree itself, not through the driver interface")
                                         : std::string();
                     }};
  registry["torch-native"] = {"peer: PyTorch's native caching allocator (c10, through the --torch-peer plugin)",
                              false, make_torch_native_peer, {}, torch_peer_why_not};
  registry["torch-async"] = {"peer: PyTorch's cudaMallocAsync allocator (c10, through the --torch-peer plugin)",
                             false, make_torch_async_peer, {}, torch_peer_why_not, /*in_defaults=*/false};
  // Pinned host allocators (host_peers.hpp): only `latency` runs them, so they are never in the
  // defaults and their device factory refuses with a message naming `latency`.
  registry["pinned"] = {"streampool's pinned host caching allocator (=CONFIG: the pinned_* keys)", true,
                        refuse_host_backend, {}, {}, /*in_defaults=*/false};
  registry["cudaHostAlloc"] = {"peer: raw pinned host alloc/free per request (cudaHostAlloc/cudaFreeHost), through "
                               "the driver",
                               false, refuse_host_backend, {}, {}, /*in_defaults=*/false};
  registry["torch-pinned"] = {"peer: PyTorch's pinned host allocator (c10's CachingHostAllocator, through the "
                              "--torch-peer plugin)",
                              false, refuse_host_backend, {}, torch_peer_why_not, /*in_defaults=*/false};
  return registry;
}

/// Splits at commas outside [...].
std::vector<std::string> split_top_level(std::string_view text) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (const char c : text) {
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  return parts;
}

std::string known_names() {
  std::string names;
  for (const auto& [name, entry] : backend_registry()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

std::string backend_spec::label() const { return config_text.empty() ? name : name + "[" + config_text + "]"; }
std::string backend_spec::config_label() const {
  if (config_text.empty()) return "default";
  return from_env ? "STREAMPOOL_ALLOC_CONF: " + config_text : config_text;
}

// Note [The environment's config]
// A user who has tuned STREAMPOOL_ALLOC_CONF expects `streampool-bench latency --backends native`
// to measure that config, as their program would run with it. So a streampool entry given without
// "=CONFIG" takes STREAMPOOL_ALLOC_CONF (only that variable: the PyTorch variables also steer the
// PyTorch peers, and a run compares against PyTorch's defaults unless told otherwise). An entry
// whose backend the variable's `backend` key contradicts keeps its defaults. The report says which
// entries took it (note and config column); `tune` replays explicit candidates and ignores it.
std::string env_config_text() {
  const char* text = std::getenv("STREAMPOOL_ALLOC_CONF");
  if (text == nullptr || std::string_view(text).find_first_not_of(" \t") == std::string_view::npos) return {};
  return text;
}

std::string apply_env_config(std::vector<backend_spec>& specs) {
  const std::string text = env_config_text();
  if (text.find_first_not_of(" \t") == std::string::npos) return {};
  allocator_config env;
  try {
    env = parse_config(text);
  } catch (const config_error& e) {
    throw usage_error(std::string("STREAMPOOL_ALLOC_CONF: ") + e.what());
  }
  const bool backend_set = env.source_of(config_key::backend) != config_source::default_value;
  std::string applied, skipped;
  for (backend_spec& spec : specs) {
    if (!backend_registry().at(spec.name).configurable || !spec.config_text.empty()) continue;
    const backend_kind kind = spec.name == "cudaMallocAsync" ? backend_kind::cuda_malloc_async : backend_kind::native;
    if (backend_set && env.backend != kind) {
      skipped += (skipped.empty() ? "" : ", ") + spec.name;
      continue;
    }
    spec.config_text = text;
    spec.from_env = true;
    (void)config_for(spec);  // validate for this backend now: exit 2
    applied += (applied.empty() ? "" : ", ") + spec.name;
  }
  std::string note = "STREAMPOOL_ALLOC_CONF='" + text + "' is set: ";
  note += applied.empty() ? "no streampool backend here runs without a config, so it is not used"
                          : "applied to " + applied + " (listed without =CONFIG)";
  if (!skipped.empty()) note += "; not to " + skipped + ", whose backend its backend key contradicts";
  return note;
}

std::string backend_entry::why_not(const driver_choice& choice) const {
  if (!available()) return unavailable_reason;
  return runnable ? runnable(choice) : std::string();
}

const std::map<std::string, backend_entry>& backend_registry() {
  static const std::map<std::string, backend_entry> registry = build_registry();
  return registry;
}

std::vector<backend_spec> parse_backend_list(std::string_view text) {
  std::vector<backend_spec> specs;
  for (std::string piece : split_top_level(text)) {
    const std::size_t eq = piece.find('=');
    const std::size_t colon = piece.find(':');
    const bool continuation = colon != std::string::npos && (eq == std::string::npos || colon < eq);
    if (continuation) {
      if (specs.empty() || !backend_registry().at(specs.back().name).configurable) {
        throw usage_error("--backends: '" + piece + "' looks like a config key but follows no native=... or "
                          "cudaMallocAsync=... entry");
      }
      specs.back().config_text += (specs.back().config_text.empty() ? "" : ",") + piece;
      continue;
    }
    backend_spec spec;
    spec.name = split(piece.substr(0, eq), ',').front();
    if (eq != std::string::npos) spec.config_text = piece.substr(eq + 1);
    if (spec.name.empty()) throw usage_error("--backends: empty entry in '" + std::string(text) + "'");
    const auto it = backend_registry().find(spec.name);
    if (it == backend_registry().end()) {
      throw usage_error("--backends: unknown backend '" + spec.name + "'; known: " + known_names());
    }
    if (!it->second.available()) {
      throw usage_error("--backends: '" + spec.name + "' is not available in this binary: " +
                        it->second.unavailable_reason);
    }
    if (eq != std::string::npos && !it->second.configurable) {
      throw usage_error("--backends: '" + spec.name + "' is a peer and takes no config (got '" + spec.config_text + "')");
    }
    specs.push_back(std::move(spec));
  }
  for (backend_spec& spec : specs) {
    for (char& c : spec.config_text) {
      if (c == ';') c = ',';
    }
    if (backend_registry().at(spec.name).configurable) (void)config_for(spec);  // validate now: exit 2
  }
  return specs;
}

std::vector<backend_spec> default_backends(const driver_choice& choice) {
  std::vector<backend_spec> specs;
  // Our backends first, then the peers, in a fixed order.
  for (const char* name : {"native", "cudaMallocAsync", "cuda", "async-raw", "cub", "torch-native", "torch-async"}) {
    const backend_entry& entry = backend_registry().at(name);
    if (entry.in_defaults && entry.why_not(choice).empty()) specs.push_back({name, ""});
  }
  return specs;
}

std::vector<backend_spec> selected_backends(const std::string& text, const driver_choice& choice, bool host_backends) {
  std::vector<backend_spec> specs = text.empty() ? default_backends(choice) : parse_backend_list(text);
  bool torch_native = false, torch_async = false, torch_pinned = false;
  for (const backend_spec& spec : specs) {
    // Before any row runs, not as each row's error (Note [Bad input stops the run once], isolated_run.cpp).
    if (!host_backends && is_host_backend(spec.name)) {
      throw usage_error("--backends: '" + spec.name + "' is a pinned host allocator, which only `streampool-bench "
                        "latency` runs; leave it out here, or run: streampool-bench latency --backends " + spec.name);
    }
    const std::string why = backend_registry().at(spec.name).why_not(choice);
    if (!why.empty()) throw usage_error("--backends: '" + spec.name + "' cannot run here: " + why);
    torch_native = torch_native || spec.name == "torch-native";
    torch_async = torch_async || spec.name == "torch-async";
    torch_pinned = torch_pinned || spec.name == "torch-pinned";
  }
  if (torch_native && torch_async) {
    throw usage_error("--backends: torch-native and torch-async cannot run in one process (c10 picks its allocator "
                      "backend once, when it is loaded); run them in two invocations");
  }
  if (torch_native || torch_async || torch_pinned) load_torch_peer(torch_async ? torch_backend::cuda_malloc_async : torch_backend::native);
  (void)apply_env_config(specs);
  return specs;
}

std::vector<std::pair<std::string, std::string>> unavailable_backends(const driver_choice& choice) {
  std::vector<std::pair<std::string, std::string>> list;
  for (const auto& [name, entry] : backend_registry()) {
    std::string why = entry.why_not(choice);
    if (why.empty() && !entry.in_defaults && is_host_backend(name)) {
      why = "a pinned host allocator: run it with streampool-bench latency --backends " + name;
    } else if (why.empty() && !entry.in_defaults) {
      why = "not in the default list (one PyTorch backend per process): run it with --backends " + name;
    }
    if (!why.empty()) list.emplace_back(name, std::move(why));
  }
  return list;
}

std::string unavailable_summary(const std::vector<std::pair<std::string, std::string>>& missing) {
  // The reason up to its first ':' ("needs a real GPU", "a pinned host allocator"), one group each.
  std::vector<std::pair<std::string, std::string>> groups;  // short reason -> names
  for (const auto& [name, why] : missing) {
    const std::string reason = why.substr(0, why.find(':'));
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == reason; });
    if (it == groups.end()) it = groups.insert(groups.end(), {reason, std::string()});
    it->second += (it->second.empty() ? "" : ", ") + name;
  }
  std::string text = "not run here:";
  for (std::size_t i = 0; i < groups.size(); ++i) {
    text += (i == 0 ? " " : "; ") + groups[i].second + " (" + groups[i].first + ")";
  }
  return text + ". Why in full: --format json, key 'unavailable'; docs/harness.md, \"Backends and peers\"";
}

allocator_config config_for(const backend_spec& spec) {
  const bool async = spec.name == "cudaMallocAsync";
  // The entry name picks the backend: prefix the backend key so that warnings about keys this
  // backend ignores are computed for the right one. A later backend key in the text wins, so check.
  std::string text = async ? "backend:cudaMallocAsync" : "";
  if (!spec.config_text.empty()) text += (text.empty() ? "" : ",") + spec.config_text;
  allocator_config config;
  try {
    config = parse_config(text);
  } catch (const config_error& e) {
    throw usage_error("--backends: config of '" + spec.name + "' (" + spec.config_text + "): " + e.what());
  }
  const backend_kind wanted = async ? backend_kind::cuda_malloc_async : backend_kind::native;
  if (config.backend != wanted) {
    throw usage_error("--backends: '" + spec.label() + "' selects backend " + std::string(to_string(config.backend)) +
                      " in its config; write " + std::string(to_string(config.backend)) + "=... instead");
  }
  return config;
}

std::unique_ptr<allocator> make_backend(const backend_spec& spec, std::shared_ptr<driver> drv) {
  const backend_entry& entry = backend_registry().at(spec.name);
  if (!entry.available()) throw error(spec.name + " is not available: " + entry.unavailable_reason);
  return entry.make(spec, std::move(drv));
}

std::string leak_check(const allocator& alloc, int device) {
  try {
    const std::int64_t live = alloc.stats(device).allocated_bytes[0].current;
    if (live == 0) return "ok";
    return "FAIL: " + std::to_string(live) + " bytes still allocated after freeing everything";
  } catch (const std::exception& e) {
    return std::string("FAIL: stats() threw: ") + e.what();
  }
}

}  // namespace streampool::bench
