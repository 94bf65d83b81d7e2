// backend_registry.hpp — the backends and peers the harness can run, by name: streampool's
// `native` and `cudaMallocAsync` (each with an optional config), the driver-level peers `cuda` and
// `async-raw` (which also run on the sim driver), `cub` (real GPU only) and the PyTorch peers
// `torch-native` / `torch-async` (real GPU and the plugin of perf/torch_peer/). An entry that cannot
// run in this build or on this driver is listed with the reason. Adding a peer = one entry in the
// registry (see docs/harness.md "Adding a peer").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "streampool/allocator.hpp"

namespace streampool::bench {

struct driver_choice;  // cli_common.hpp

/// One entry of --backends: a registry name plus, for streampool backends, a config string.
struct backend_spec {
  std::string name;         ///< registry key: "native", "cudaMallocAsync", "cuda", ...
  std::string config_text;  ///< our config syntax ("" = defaults); only for configurable entries
  bool from_env = false;    ///< config_text came from STREAMPOOL_ALLOC_CONF (Note [The environment's config])

  /// "native", or "native[expandable_segments:True]" when a config is given.
  [[nodiscard]] std::string label() const;
  /// The config text, or "default".
  [[nodiscard]] std::string config_label() const;
};

using backend_factory = std::function<std::unique_ptr<allocator>(const backend_spec&, std::shared_ptr<driver>)>;
/// "" when an entry can run with this driver choice (and this process's settings), else why not.
using runnable_check = std::function<std::string(const driver_choice&)>;

struct backend_entry {
  std::string description;
  bool configurable = false;      ///< accepts "=CONFIG"
  backend_factory make;           ///< empty = not available in this binary
  std::string unavailable_reason;
  runnable_check runnable;        ///< empty = runs on every driver
  bool in_defaults = true;        ///< part of the default --backends list when it can run
  [[nodiscard]] bool available() const noexcept { return static_cast<bool>(make); }
  /// "" when the entry can run with `choice`; else the reason (not built, or not on this driver).
  [[nodiscard]] std::string why_not(const driver_choice& choice) const;
};

/// Every known name, available or not (std::map: listed in name order).
[[nodiscard]] const std::map<std::string, backend_entry>& backend_registry();

/// Parses --backends. Entries are separated by commas at bracket depth 0; a piece that is neither a
/// registry name nor "name=..." (it contains ':' first) continues the previous entry's config, and
/// ';' inside a config stands for ','. So these are the same:
///   native=expandable_segments:True,max_split_size_mb:256,cuda
///   native=expandable_segments:True;max_split_size_mb:256,cuda
/// @throws usage_error for an unknown or unavailable name, a config on a peer, or a bad config
[[nodiscard]] std::vector<backend_spec> parse_backend_list(std::string_view text);
/// The backends a command runs: parse_backend_list(text), or default_backends(choice) when `text`
/// is empty; then applies STREAMPOOL_ALLOC_CONF (apply_env_config) and prepares what they need
/// (loads the PyTorch peer plugin). The pinned host allocators (host_peers.hpp) are accepted only
/// with `host_backends` (latency).
/// @throws usage_error also for a named entry that cannot run with `choice` (cub on the sim driver,
///         a host allocator without `host_backends`,
///         a PyTorch peer without --torch-peer), both PyTorch peers at once, or a plugin that
///         does not load
[[nodiscard]] std::vector<backend_spec> selected_backends(const std::string& text, const driver_choice& choice,
                                                         bool host_backends = false);
/// STREAMPOOL_ALLOC_CONF when it is set and not empty, else "".
[[nodiscard]] std::string env_config_text();
/// Gives every streampool entry listed without a config the environment's (STREAMPOOL_ALLOC_CONF),
/// unless that config selects the other backend. Returns the note for the report ("" when unset).
/// @throws usage_error when STREAMPOOL_ALLOC_CONF does not parse
std::string apply_env_config(std::vector<backend_spec>& specs);

/// Every entry that can run with `choice` and is in_defaults, with default config (the default of
/// --backends).
[[nodiscard]] std::vector<backend_spec> default_backends(const driver_choice& choice);
/// {name, reason} for the entries that cannot run with `choice` (not built here, or not on this
/// driver), and for torch-async when it is left out of the defaults.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> unavailable_backends(const driver_choice& choice);

/// One line naming the entries of unavailable_backends() grouped by reason: "not run here: cub
/// (needs a real GPU); cudaHostAlloc, pinned (a pinned host allocator); ...".
[[nodiscard]] std::string unavailable_summary(const std::vector<std::pair<std::string, std::string>>& missing);

/// The typed config of a streampool backend spec (backend key forced to the entry's backend).
/// @throws usage_error naming the entry when the config does not parse or names another backend
[[nodiscard]] allocator_config config_for(const backend_spec& spec);

/// Builds the allocator of `spec` on `drv`.
[[nodiscard]] std::unique_ptr<allocator> make_backend(const backend_spec& spec, std::shared_ptr<driver> drv);

/// The check every run ends with, after freeing everything: "ok" when allocated_bytes.all.current
/// is 0, else "FAIL: <n> bytes still allocated". Never throws.
[[nodiscard]] std::string leak_check(const allocator& alloc, int device = 0);

}  // namespace streampool::bench
