// src/config/config_print.cpp — the effective-configuration dump, value rendering and the enum names.
//
// to_string(allocator_config) lists every key with its value in config-string syntax and where
// it came from, then the warnings and what the backend in effect reads. render_value() renders a
// value through its key's row (Note [One row per key] in key_table.cpp) from the renderers here
// (render_bool, render_mib, render_double and the special keys' render_*, key_codecs.hpp); it is
// also used by the warnings of config_parse.cpp so that both show values the same way.
#include <algorithm>
#include <array>
#include <charconv>

#include "config/key_codecs.hpp"

namespace streampool {
namespace config_impl {

std::string render_double(double value) {
  std::array<char, 32> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return ec == std::errc{} ? std::string(buffer.data(), end) : std::string("?");
}

std::string render_mib(std::size_t bytes) {
  if (bytes == allocator_config::unlimited) {
    return "unlimited";
  }
  if (bytes % mib == 0) {
    return std::to_string(bytes / mib);
  }
  return render_double(static_cast<double>(bytes) / static_cast<double>(mib));
}

std::string render_bool(bool value) { return value ? "True" : "False"; }

// Note [Rendering the roundup table]
// One number when all 16 intervals agree and are non-zero (the single-value form); otherwise the
// full list with each interval's lower bound in MiB, "[1:0,2:0,4:0,...,32768:0]", which parses
// back to the same table (a single 0 would not parse: docs/pytorch-compatibility.md §1.4 rejects it).
std::string render_roundup(const allocator_config& config) {
  const auto& table = config.roundup_power2_divisions;
  if (table[0] != 0 &&
      std::all_of(table.begin(), table.end(), [&](std::size_t d) { return d == table[0]; })) {
    return std::to_string(table[0]);
  }
  std::string text = "[";
  for (std::size_t i = 0; i < table.size(); ++i) {
    text +=
        (i == 0 ? "" : ",") + std::to_string(std::size_t{1} << i) + ":" + std::to_string(table[i]);
  }
  return text + "]";
}

std::string render_backend(const allocator_config& config) { return std::string(to_string(config.backend)); }

std::string render_async_pool(const allocator_config& config) { return std::string(to_string(config.async_pool)); }

/// "<n>G" for the `<n>G` form; a byte count that is not whole GiB (set through the API) as
/// "<bytes> bytes"; otherwise the fraction.
std::string render_reserve(const allocator_config& config) {
  if (config.expandable_segments_reserve_bytes != 0 && config.expandable_segments_reserve_bytes % gib == 0) {
    return std::to_string(config.expandable_segments_reserve_bytes / gib) + "G";
  }
  if (config.expandable_segments_reserve_bytes != 0) {
    return std::to_string(config.expandable_segments_reserve_bytes) + " bytes";
  }
  return render_double(config.expandable_segments_reserve);
}

std::string render_value(const allocator_config& config, config_key key) {
  if (key >= config_key::count_) {
    return "?";
  }
  return info_of(key).value.render(config);
}

}  // namespace config_impl

std::string_view to_string(backend_kind kind) noexcept {
  return kind == backend_kind::native ? "native" : "cudaMallocAsync";
}

std::string_view to_string(async_pool_kind kind) noexcept {
  return kind == async_pool_kind::device_default ? "default" : "dedicated";
}

std::string_view to_string(config_source source) noexcept {
  switch (source) {
    case config_source::default_value: return "default";
    case config_source::env_streampool: return "STREAMPOOL_ALLOC_CONF";
    case config_source::env_pytorch_cuda: return "PYTORCH_CUDA_ALLOC_CONF";
    case config_source::env_pytorch: return "PYTORCH_ALLOC_CONF";
    case config_source::api: return "api";
    case config_source::runtime: return "set at run time";
  }
  return "unknown";
}

std::string to_string(const allocator_config& config) {
  const auto pad = [](std::string text, std::size_t width) {
    text.resize(std::max(width, text.size() + 1), ' ');
    return text;
  };
  std::string out = "streampool effective configuration";
  if (!config.source_variable.empty()) {
    out += " (from " + config.source_variable + "=\"" + config.text + "\")\n";
  } else if (!config.text.empty()) {
    out += " (from the API: \"" + config.text + "\")\n";
  } else {
    out += " (all defaults)\n";
  }
  std::string used;
  std::string ignored;
  std::string missing;  // Note [Keys accepted but not implemented] (key_table.cpp)
  std::string unused;
  std::string host;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    out += "  " + pad(std::string(key_name(key)), 34) +
           pad(config_impl::render_value(config, key), 24) +
           std::string(to_string(config.source_of(key))) + "\n";
    const bool host_key = key_name(key).starts_with("pinned_");  // the pinned host allocator's
    std::string& list = !config_impl::info_of(key).implemented() ? missing
                        : host_key                                 ? host
                        : key_used_by(key, config.backend)        ? used
                        : (key_used_by(key, backend_kind::native) ||
                           key_used_by(key, backend_kind::cuda_malloc_async))
                            ? ignored
                            : unused;
    list += (list.empty() ? "" : ", ") + std::string(key_name(key));
  }
  for (const std::string& warning : config.warnings) {
    out += "warning: " + warning + "\n";
  }
  out += "backend in effect: " + std::string(to_string(config.backend)) + "; it uses " + used +
         "; it ignores " + ignored + (missing.empty() ? "" : "; accepted but not implemented: " + missing) +
         (unused.empty() ? "" : "; never used by streampool: " + unused) +
         "; the pinned host allocator (make_host_allocator) uses " + host + "\n";
  return out;
}

}  // namespace streampool
