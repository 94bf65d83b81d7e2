// src/config/key_parsers.cpp — validation and storage of each key's value (docs/pytorch-compatibility.md §1.3, §1.4).
//
// The value checks the key table's rows are built from (require_bool, require_mib,
// require_fraction: key_codecs.hpp) and the parsers of the special keys (apply_backend,
// apply_roundup, apply_reserve, ...), with PyTorch's newest bounds and every message;
// apply_value(), which hands a value to its key's row (Note [One row per key] in key_table.cpp);
// also divisions_for().
#include <algorithm>
#include <array>
#include <bit>

#include "config/key_codecs.hpp"

namespace streampool {
namespace config_impl {
namespace {

using k = config_key;

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

std::uint64_t require_uint(const config_value& value, config_key key, std::string_view text) {
  const uint_literal literal = parse_uint(text);
  switch (literal.error) {
    case literal_error::none: return literal.value;
    case literal_error::negative: fail_value(value, key, quoted(text) + " is negative");
    case literal_error::too_large: fail_value(value, key, quoted(text) + " is too large");
    case literal_error::not_a_number: break;
  }
  fail_value(value, key, quoted(text) + " is not an integer");
}

void fail_range(const config_value& value, config_key key) {
  fail_value(value, key, "value " + value.text + " is out of range");
}

// Note [Sizes in MiB]
// Size keys are integers in MiB stored in bytes. A byte count that does not fit size_t saturates
// to `unlimited` for the threshold keys (PyTorch clamps max_split_size_mb to SIZE_MAX/1MiB the
// same way, docs/pytorch-compatibility.md §1.3); the allocator only compares a request with a
// threshold (size_policy::may_reuse subtracts rather than adds, so no threshold can wrap).
//
// Note [Upper bound of segment sizes]
// A segment size (large_segment_size_mb, pinned_reserve_segment_size_mb, and the `<n>G` form of
// expandable_segments_reserve) is not only compared: it is rounded up to the mapping unit, to
// pages, and added to what is held. `large_segment_size_mb:17592186044415` fits size_t as bytes
// (2^64 - 1 MiB) but wrapped to 0 when rounded up to 2 MiB pages, and the first allocation divided
// by it (SIGFPE); `pinned_reserve_segment_size_mb` >= 2^44 wrapped when multiplied by 1 MiB. PyTorch
// has no upper bound for these keys (its arithmetic wraps the same way), so ours is one of our own:
// max_segment_bytes, 16 TiB, is far above any device's memory (a larger segment could never be
// obtained anyway) and far below where rounding to any page or granule could wrap. Checked here,
// at parse time, so a bad value is refused with its key instead of crashing an allocation.
constexpr std::uint64_t max_segment_mib = std::uint64_t{1} << 24;  // 16 TiB
constexpr std::uint64_t max_segment_gib = max_segment_mib / 1024;

void fail_too_large(const config_value& value, config_key key, std::string_view limit) {
  fail_value(value, key,
             quoted(value.text) + " is too large (at most " + std::string(limit) +
                 " = 16 TiB, beyond any device; larger segment sizes overflow when rounded to pages)");
}

double require_double(const config_value& value, config_key key) {
  if (const std::optional<double> number = parse_double(value.text)) {
    return *number;
  }
  fail_value(value, key, quoted(value.text) + " is not a number");
}

/// An enumerated value: `choices[i]` -> i.
template <std::size_t N>
std::size_t require_choice(const config_value& value, config_key key,
                           const std::array<std::string_view, N>& choices) {
  for (std::size_t i = 0; i < N; ++i) {
    if (value.text == choices[i]) {
      return i;
    }
  }
  fail_value(value, key, "unknown value " + quoted(value.text) + did_you_mean(value.text, choices));
}

}  // namespace

std::size_t require_mib(const config_value& value, config_key key, std::uint64_t min_mib,
                        bool saturate) {
  const std::uint64_t mb = require_uint(value, key, value.text);
  if (mb < min_mib) {
    fail_range(value, key);
  }
  if (!saturate && mb > max_segment_mib) {
    fail_too_large(value, key, std::to_string(max_segment_mib));
  }
  if (mb > allocator_config::unlimited / mib) {
    return allocator_config::unlimited;
  }
  return static_cast<std::size_t>(mb) * mib;
}

bool require_bool(const config_value& value, config_key key) {
  if (const std::optional<bool> flag = parse_bool(value.text)) {
    return *flag;
  }
  constexpr std::array<std::string_view, 2> spellings{"True", "False"};
  fail_value(value, key,
             quoted(value.text) + " is not a boolean" + did_you_mean(value.text, spellings));
}

void apply_backend(allocator_config& config, config_key key, const config_value& value) {
  if (value.text == "hipMallocAsync") {
    fail_value(value, key, "hipMallocAsync is PyTorch's ROCm backend and streampool is a CUDA library");
  }
  constexpr std::array<std::string_view, 2> names{"native", "cudaMallocAsync"};
  config.backend = require_choice(value, key, names) == 0 ? backend_kind::native : backend_kind::cuda_malloc_async;
}

void apply_async_pool(allocator_config& config, config_key key, const config_value& value) {
  constexpr std::array<std::string_view, 2> names{"default", "dedicated"};
  config.async_pool =
      require_choice(value, key, names) == 0 ? async_pool_kind::device_default : async_pool_kind::dedicated;
}

// Note [expandable_segments_reserve]
// PyTorch takes a fraction of device memory or "<n>G" (docs/pytorch-compatibility.md §1.3). Device memory is unknown at
// parse time, so "<n>G" goes to expandable_segments_reserve_bytes (n GiB) and a fraction to
// expandable_segments_reserve (resetting the bytes to 0, so the last occurrence wins). The
// fraction range is (0, 2] rather than PyTorch's (0, 1]: the default itself is 9/8 and must be
// writable. PyTorch logs and ignores a bad value; we reject it like every other key.
void apply_reserve(allocator_config& config, config_key /*key*/, const config_value& value) {
  const std::string_view text = value.text;
  if (!text.empty() && text.back() == 'G') {
    const std::uint64_t gigabytes =
        require_uint(value, k::expandable_segments_reserve, text.substr(0, text.size() - 1));
    if (gigabytes == 0) {
      fail_range(value, k::expandable_segments_reserve);
    }
    if (gigabytes > max_segment_gib) {  // Note [Upper bound of segment sizes]
      fail_too_large(value, k::expandable_segments_reserve, std::to_string(max_segment_gib) + "G");
    }
    config.expandable_segments_reserve_bytes = static_cast<std::size_t>(gigabytes) * gib;
    return;
  }
  const double fraction = require_double(value, k::expandable_segments_reserve);
  if (!(fraction > 0.0 && fraction <= 2.0)) {
    fail_range(value, k::expandable_segments_reserve);
  }
  config.expandable_segments_reserve = fraction;
  config.expandable_segments_reserve_bytes = 0;
}

// Note [Upper bound of roundup divisions]
// A request is rounded by D divisions only when it is larger than min_block_size (512) x D
// (docs/pytorch-compatibility.md §1.4). For D >= 2^55 that product wraps (to 0 for D = 2^55), so a
// huge D turned rounding on for every request instead of off. PyTorch has no upper bound (and
// wraps the same way); ours is the largest D for which the product is exact. Any D above 2^40
// already rounds nothing a device could hold, so the bound refuses nothing useful.
namespace {

constexpr std::uint64_t max_divisions = std::uint64_t{1} << 54;

void check_divisions_bound(const config_value& value, std::uint64_t divisions) {
  if (divisions > max_divisions) {
    fail_value(value, k::roundup_power2_divisions,
               "divisions " + std::to_string(divisions) + " is too large (at most " + std::to_string(max_divisions) +
                   " = 2^54; 512 x divisions must not overflow)");
  }
}

std::size_t require_divisions(const config_value& value, const list_entry& entry) {
  const uint_literal literal = parse_uint(entry.divisions);
  if (literal.error != literal_error::none) {
    fail_entry(value, k::roundup_power2_divisions, entry,
               "divisions " + quoted(entry.divisions) + " is not a non-negative integer");
  }
  if (literal.value != 0 && !std::has_single_bit(literal.value)) {
    fail_entry(value, k::roundup_power2_divisions, entry,
               "divisions " + entry.divisions + " is neither 0 nor a power of two");
  }
  check_divisions_bound(value, literal.value);
  return static_cast<std::size_t>(literal.value);
}

// Note [Roundup list semantics]
// docs/pytorch-compatibility.md §1.4, newest version. Each list starts from all zeros (a repeated key replaces the whole
// table: last wins). `K:D` sets interval index clamp(log2 K, 0, 15) to D, and the first numeric
// entry also back-fills every index below it. `>:D` fills every index after the last explicit one
// (not including it: the v2.1–2.8 overwrite was a bug); with no explicit entry before it, it
// fills the whole table. Stricter than PyTorch: `>` must be the last entry, since anything after
// it would silently partly undo it, and an empty list is rejected.
void apply_roundup_list(allocator_config& config, const config_value& value) {
  auto& table = config.roundup_power2_divisions;
  table.fill(0);
  if (value.entries.empty()) {
    fail_value(value, k::roundup_power2_divisions, "the list is empty");
  }
  std::optional<std::size_t> last_index;
  for (std::size_t n = 0; n < value.entries.size(); ++n) {
    const list_entry& entry = value.entries[n];
    const std::size_t divisions = require_divisions(value, entry);
    if (entry.interval == ">") {
      if (n + 1 != value.entries.size()) {
        fail_entry(value, k::roundup_power2_divisions, entry, "'>' must be the last entry");
      }
      std::fill(table.begin() + static_cast<std::ptrdiff_t>(last_index ? *last_index + 1 : 0),
                table.end(), divisions);
      continue;
    }
    const uint_literal interval = parse_uint(entry.interval);
    if (interval.error != literal_error::none || !std::has_single_bit(interval.value)) {
      fail_entry(value, k::roundup_power2_divisions, entry,
                 "interval " + quoted(entry.interval) + " is not a power of two (MiB) or '>'");
    }
    const std::size_t index = std::min<std::size_t>(
        static_cast<std::size_t>(std::bit_width(interval.value) - 1), table.size() - 1);
    if (!last_index) {
      std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(index), divisions);
    }
    table[index] = divisions;
    last_index = index;
  }
}

}  // namespace

void apply_roundup(allocator_config& config, config_key /*key*/, const config_value& value) {
  if (value.is_list) {
    apply_roundup_list(config, value);
    return;
  }
  // Single value: a power of two for every interval; 0 is rejected (docs/pytorch-compatibility.md §1.4).
  const std::uint64_t divisions = require_uint(value, k::roundup_power2_divisions, value.text);
  if (!std::has_single_bit(divisions)) {
    fail_value(value, k::roundup_power2_divisions,
               "value " + value.text + " is not a power of two");
  }
  check_divisions_bound(value, divisions);
  config.roundup_power2_divisions.fill(static_cast<std::size_t>(divisions));
}

double require_fraction(const config_value& value, config_key key, bool include_ends) {
  const double number = require_double(value, key);
  const bool ok = include_ends ? (number >= 0.0 && number <= 1.0) : (number > 0.0 && number < 1.0);
  if (!ok) {
    fail_range(value, key);
  }
  return number;
}

void apply_register_threads(allocator_config& config, config_key key, const config_value& value) {
  const std::uint64_t threads = require_uint(value, key, value.text);
  // PyTorch's own messages, after ours (spec of the key: a power of two <= 128).
  if (!std::has_single_bit(threads)) {
    fail_value(value, key,
               "value " + value.text + " is out of range (Number of register threads has to be power of 2)");
  }
  if (threads > 128) {
    fail_value(value, key,
               "value " + value.text +
                   " is out of range (Number of register threads should be less than or equal to 128)");
  }
  config.pinned_num_register_threads = static_cast<std::size_t>(threads);
}

void apply_pinned_reserve(allocator_config& config, config_key key, const config_value& value) {
  const std::uint64_t mb = require_uint(value, key, value.text);
  if (mb == 0) {
    fail_value(value, key,
               "value " + value.text + " is out of range (Pinned reserve segment size has to be greater than 0)");
  }
  if (mb > max_segment_mib) {  // Note [Upper bound of segment sizes]
    fail_too_large(value, key, std::to_string(max_segment_mib));
  }
  config.pinned_reserve_segment_size_mb = static_cast<std::size_t>(mb);
}

void apply_value(allocator_config& config, config_key key, const config_value& value) {
  if (key >= config_key::count_) {
    return;
  }
  const key_info& info = info_of(key);
  if (value.is_list && !info.value.takes_list) {
    std::string list_keys;  // the keys whose row takes a list
    for (std::size_t i = 0; i < config_key_count; ++i) {
      const key_info& other = info_of(static_cast<config_key>(i));
      if (other.value.takes_list) list_keys += (list_keys.empty() ? "" : ", ") + std::string(other.name);
    }
    fail_value(value, key, "a list is only allowed for " + list_keys);
  }
  info.value.apply(config, key, value);
}

}  // namespace config_impl

std::size_t allocator_config::roundup_interval(std::size_t bytes) noexcept {
  // docs/pytorch-compatibility.md §1.4: idx = clamp(floor(log2(bytes)) - 20, 0, 15); bytes < 2 MiB (and 0) -> 0.
  const auto log2 = static_cast<std::size_t>(std::bit_width(bytes));  // floor(log2) + 1
  return log2 <= 21 ? 0 : std::min(log2 - 21, roundup_intervals - 1);
}

std::size_t allocator_config::divisions_for(std::size_t bytes) const noexcept {
  return roundup_power2_divisions[roundup_interval(bytes)];
}

}  // namespace streampool
