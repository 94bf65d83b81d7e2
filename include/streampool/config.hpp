// streampool/config.hpp — the typed allocator configuration and its string/environment parsers.
//
// `allocator_config` is the truth; the config string ("key:value,key:[k:v,...]") is only a way to
// fill it. Grammar, keys and validation follow PyTorch's PYTORCH_CUDA_ALLOC_CONF (docs/pytorch-compatibility.md §1.2–§1.4,
// newest bounds) plus streampool's own keys. See docs/config.md for every key.
#pragma once

#include "streampool/export.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace streampool {

inline constexpr std::size_t kib = std::size_t{1} << 10;
inline constexpr std::size_t mib = std::size_t{1} << 20;
inline constexpr std::size_t gib = std::size_t{1} << 30;

/// Which implementation serves allocations.
enum class backend_kind : std::uint8_t {
  native,             ///< streampool's stream-ordered caching allocator (PyTorch-native behaviour)
  cuda_malloc_async,  ///< CUDA stream-ordered memory pools (cudaMallocAsync / cudaFreeAsync)
};

/// Pool used by the cudaMallocAsync backend (streampool key `async_pool`).
enum class async_pool_kind : std::uint8_t {
  device_default,  ///< the device's default pool (what PyTorch uses)
  dedicated,       ///< a pool created for streampool, so other users of the default pool are unaffected
};

/// Where the value of a key came from, for the effective-config dump.
enum class config_source : std::uint8_t {
  default_value,            ///< nobody set it
  env_streampool,           ///< STREAMPOOL_ALLOC_CONF
  env_pytorch_cuda,         ///< PYTORCH_CUDA_ALLOC_CONF
  env_pytorch,              ///< PYTORCH_ALLOC_CONF
  api,                      ///< parse_config() called by the program
  runtime,                  ///< changed while the allocator runs (allocator::set_settings)
};

/// Every key the parser knows. Order = order of the effective-config dump.
enum class config_key : std::uint8_t {
  backend,
  max_split_size_mb,
  max_non_split_rounding_mb,
  roundup_power2_divisions,
  roundup_bypass_threshold_mb,
  garbage_collection_threshold,
  expandable_segments,
  release_lock_on_cudamalloc,
  graph_capture_record_stream_reuse,
  per_process_memory_fraction,
  large_segment_size_mb,
  expandable_segments_reserve,
  async_pool,
  debug_checks,
  pinned_use_cuda_host_register,
  pinned_num_register_threads,
  pinned_use_background_threads,
  pinned_reserve_segment_size_mb,
  cross_stream_reuse,
  count_
};
inline constexpr std::size_t config_key_count = static_cast<std::size_t>(config_key::count_);

/// Canonical spelling of a key ("max_split_size_mb", ...).
[[nodiscard]] STREAMPOOL_API std::string_view key_name(config_key key) noexcept;

/// The typed configuration. Sizes are stored in bytes. Defaults equal PyTorch's.
struct STREAMPOOL_API allocator_config {
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t roundup_intervals = 16;  // docs/pytorch-compatibility.md §1.4: [<2 MiB], [2,4) MiB ... [>=32 GiB]

  backend_kind backend = backend_kind::native;
  std::size_t max_split_size = unlimited;             ///< bytes; blocks >= this are never split
  std::size_t max_non_split_rounding = 20 * mib;      ///< bytes; oversize reuse slack
  std::array<std::size_t, roundup_intervals> roundup_power2_divisions{};  ///< 0 = off per interval
  std::size_t roundup_bypass_threshold = unlimited;   ///< bytes; larger requests skip power-2 rounding
  double garbage_collection_threshold = 0.0;          ///< 0 = off, else in (0, 1)
  bool expandable_segments = false;
  bool release_lock_on_cudamalloc = false;
  bool graph_capture_record_stream_reuse = false;
  double per_process_memory_fraction = 1.0;           ///< in [0, 1]
  std::size_t large_segment_size = 20 * mib;          ///< bytes; segment for 1–10 MiB requests
  double expandable_segments_reserve = 9.0 / 8.0;     ///< VA reserved per expandable segment, x device memory
  /// Bytes of VA reserved per expandable segment when the key was given as `<n>G`; 0 = use the
  /// fraction above (device memory is unknown at parse time, so `<n>G` cannot become a fraction).
  std::size_t expandable_segments_reserve_bytes = 0;
  async_pool_kind async_pool = async_pool_kind::device_default;
  /// Checking mode for the program's own memory bugs (docs/reliability.md#checking-mode): canary
  /// bytes after each allocation verified at free, freed blocks poisoned. Off by default.
  bool debug_checks = false;
  // Keys of the pinned host allocator (host_allocator.hpp; PyTorch's CachingHostAllocator keys).
  bool pinned_use_cuda_host_register = false;
  std::size_t pinned_num_register_threads = 1;
  bool pinned_use_background_threads = false;
  std::size_t pinned_reserve_segment_size_mb = 0;
  /// streampool-only policy: free memory serves any stream, ordered by events (docs/cross-stream-reuse.md)
  bool cross_stream_reuse = false;

  /// Where each key's value came from, indexed by config_key.
  std::array<config_source, config_key_count> sources{};
  /// The environment variable the config was read from ("" when none / API).
  std::string source_variable;
  /// The text that was parsed ("" when none).
  std::string text;
  /// Non-fatal findings: keys the chosen backend ignores (docs/pytorch-compatibility.md §1.3), host-allocator keys, ...
  std::vector<std::string> warnings;

  [[nodiscard]] config_source source_of(config_key key) const noexcept {
    return sources[static_cast<std::size_t>(key)];
  }
  /// Divisions for a request of `bytes` (docs/pytorch-compatibility.md §1.4 interval index).
  [[nodiscard]] std::size_t divisions_for(std::size_t bytes) const noexcept;
  /// The index into roundup_power2_divisions for a request of `bytes` (§1.4).
  [[nodiscard]] static std::size_t roundup_interval(std::size_t bytes) noexcept;
};

/// Parses a config string. Duplicate keys: the last one wins. Empty string = all defaults.
/// @throws config_error naming the key, the value, the valid range and the position.
[[nodiscard]] STREAMPOOL_API allocator_config parse_config(std::string_view text,
                                            config_source source = config_source::api);

/// Whether an allocator can take a new value of `key` while it runs (allocator::set_settings;
/// Note [Settings changed at run time] in src/config/runtime_settings.cpp).
[[nodiscard]] STREAMPOOL_API bool key_changes_at_run_time(config_key key) noexcept;
/// Copies the value of every key that key_changes_at_run_time() from `from` into `to` (values only,
/// not where they came from): what a backend takes of the config after a change.
STREAMPOOL_API void copy_runtime_values(const allocator_config& from, allocator_config& to) noexcept;
/// The config after the change `text` (config syntax) to `current`, with PyTorch's rule for
/// _set_allocator_settings: max_split_size_mb, roundup_power2_divisions and
/// garbage_collection_threshold return to their defaults unless `text` gives them; other keys keep
/// their values. Keys set by `text` get source `runtime`; `text` of the result is the config string
/// of every key it sets; its warnings are those of the change.
/// @throws config_error for a string that does not parse, a key that cannot change at run time, or
///         another backend than current's
[[nodiscard]] STREAMPOOL_API allocator_config apply_settings(const allocator_config& current, std::string_view text);

/// Reads STREAMPOOL_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF (the first
/// that is set, even if empty) and parses it; all defaults when none is set.
/// @throws config_error as parse_config(), with the variable name in the message.
[[nodiscard]] STREAMPOOL_API allocator_config config_from_env();

/// Multi-line effective configuration: every key, its value, and where it came from; then warnings.
[[nodiscard]] STREAMPOOL_API std::string to_string(const allocator_config& config);

/// "native" / "cudaMallocAsync" (the spelling of the `backend` key's values).
[[nodiscard]] STREAMPOOL_API std::string_view to_string(backend_kind kind) noexcept;
/// "default" / "dedicated" (the spelling of the `async_pool` key's values).
[[nodiscard]] STREAMPOOL_API std::string_view to_string(async_pool_kind kind) noexcept;
/// "default", "STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF" or "api".
[[nodiscard]] STREAMPOOL_API std::string_view to_string(config_source source) noexcept;

/// The oldest stock PyTorch release whose PYTORCH_CUDA_ALLOC_CONF accepts `key` ("1.10", "2.1",
/// ...), "main" for keys only in PyTorch builds newer than 2.9, "" for streampool's own keys.
/// docs/config.md lists the same versions.
[[nodiscard]] STREAMPOOL_API std::string_view key_pytorch_since(config_key key) noexcept;

/// What stock PyTorch makes of a config: whether its PYTORCH_CUDA_ALLOC_CONF accepts every key
/// set in it, and from which release.
struct STREAMPOOL_API pytorch_compatibility {
  bool stock = true;                         ///< every key set is a stock PyTorch key
  std::string since;                         ///< oldest release accepting them all ("" when none is set; "main" = after 2.9)
  std::vector<std::string> streampool_only;  ///< the keys stock PyTorch rejects
};
/// Reads which keys `config` sets (`sources` other than default); the list form of
/// roundup_power2_divisions (a table that is not one value) needs PyTorch 2.0.
[[nodiscard]] STREAMPOOL_API pytorch_compatibility pytorch_compatibility_of(const allocator_config& config);

/// Whether `backend` reads `key` (docs/pytorch-compatibility.md §1.3 "Backend" column). `backend` is used by both;
/// the pinned_* keys (the pinned host allocator, beside either backend) by both; `async_pool` only
/// by cudaMallocAsync.
[[nodiscard]] STREAMPOOL_API bool key_used_by(config_key key, backend_kind backend) noexcept;

}  // namespace streampool
