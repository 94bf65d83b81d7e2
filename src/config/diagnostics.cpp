// src/config/diagnostics.cpp — the error messages of the config parser.
//
// One message shape for every error ("<context> at position P: <problem>; expected <range>"),
// did-you-mean suggestions by edit distance, and the specific answers to misconceptions that
// circulate in blog posts (keys that neither PyTorch nor streampool has).
#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "config/config_impl.hpp"
#include "streampool/errors.hpp"

namespace streampool::config_impl {
namespace {

char lower(char c) noexcept {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

bool starts_with_ci(std::string_view text, std::string_view prefix) noexcept {
  return prefix.size() <= text.size() &&
         std::equal(prefix.begin(), prefix.end(), text.begin(),
                    [](char a, char b) { return lower(a) == lower(b); });
}

struct misconception {
  std::string_view word;
  std::string_view answer;
};

// Note [Misconceptions]
// Popular articles recommend settings such as "caching_allocator:True", "pooled:True",
// "heuristic:..." or "nmalloc:..." in PYTORCH_CUDA_ALLOC_CONF, or a bare "native". None of
// these exist in PyTorch (docs/pytorch-compatibility.md §1.3) or here. A did-you-mean would point at an unrelated key, so
// each gets an answer saying what the writer probably wanted (docs/config.md "Errors").
constexpr std::array<misconception, 7> misconceptions{{
    {"caching_allocator",
     "not a PyTorch or streampool key: the caching allocator is the "
     "default backend (backend:native), so leave the key out or write backend:native; for CUDA's "
     "stream-ordered pools instead write backend:cudaMallocAsync"},
    {"pooled",
     "not a PyTorch or streampool key: both backends already pool memory; write "
     "backend:cudaMallocAsync for CUDA's stream-ordered memory pools, or expandable_segments:True "
     "to let the native allocator grow segments in place instead of fragmenting"},
    {"heuristic",
     "not a PyTorch or streampool key: there is no heuristic mode; tune the native "
     "allocator with max_split_size_mb, roundup_power2_divisions or garbage_collection_threshold, "
     "or reduce fragmentation with expandable_segments:True"},
    {"nmalloc",
     "not a PyTorch or streampool key: nothing limits the number of cudaMalloc "
     "calls; cap memory with per_process_memory_fraction, or cut cudaMalloc calls and "
     "fragmentation with expandable_segments:True or roundup_power2_divisions"},
    {"native", "not a key but a value of the backend key: write backend:native"},
    {"cudaMallocAsync", "not a key but a value of the backend key: write backend:cudaMallocAsync"},
    {"expandable_segments_reserve_by_class",
     "a PyTorch key that streampool does not support: "
     "write expandable_segments_reserve:<fraction> or expandable_segments_reserve:<n>G"},
}};

constexpr std::array<std::string_view, 3> env_variable_names{
    "STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};

}  // namespace

void fail(std::string key, std::string_view context, std::size_t position, std::string_view problem,
          std::string_view expected) {
  std::string message = "streampool config: ";
  message.append(context).append(" at position ").append(std::to_string(position));
  message.append(": ").append(problem);
  if (!expected.empty()) {
    message.append("; expected ").append(expected);
  }
  throw config_error(std::move(message), std::move(key), position);
}

// Note [Error positions]
// A bad value is reported at the position of its key ("max_split_size_mb:2 at position 0"): the
// context already shows the value, and the item is what the user has to find and edit. A bad
// list entry is reported at the entry, a bad separator at the unexpected token.
void fail_value(const config_value& value, config_key key, std::string_view problem) {
  const key_info& info = info_of(key);
  fail(std::string(info.name), value.key_text + ":" + value.text, value.key_position, problem,
       info.expected);
}

void fail_entry(const config_value& value, config_key key, const list_entry& entry,
                std::string_view problem) {
  const key_info& info = info_of(key);
  fail(std::string(info.name), value.key_text + " entry " + entry.interval + ":" + entry.divisions,
       entry.position, problem, info.expected);
}

void fail_unknown_key(const token& word) {
  const std::string context = "'" + word.text + "'";
  for (const misconception& m : misconceptions) {
    if (word.text == m.word) {
      fail(word.text, context, word.position, m.answer, "");
    }
  }
  if (word.text == "hipMallocAsync") {
    fail(word.text, context, word.position,
         "PyTorch's ROCm backend, and streampool is a CUDA library: "
         "write backend:cudaMallocAsync",
         "");
  }
  if (const std::size_t eq = word.text.find('='); eq != std::string::npos) {
    const std::string before = word.text.substr(0, eq);
    const bool is_variable = std::find(env_variable_names.begin(), env_variable_names.end(),
                                       before) != env_variable_names.end();
    fail(word.text, context, word.position,
         is_variable ? "the value must not repeat the variable name '" + before + "='"
                     : "'=' is not a separator: write key:value (e.g. " + before + ":" +
                           word.text.substr(eq + 1) + ")",
         "key:value items separated by ','");
  }
  std::array<std::string_view, config_key_count * 2> names{};
  std::size_t count = 0;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const key_info& info = info_of(static_cast<config_key>(i));
    names[count++] = info.name;
    if (!info.alias.empty()) {
      names[count++] = info.alias;
    }
  }
  fail(word.text, context, word.position,
       "unknown key" + did_you_mean(word.text, std::span(names.data(), count)),
       "one of " + valid_keys_text());
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1);
  std::vector<std::size_t> current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    previous[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

// Note [Did you mean]
// A candidate is suggested when it is within a quarter of its length in edits (at least one),
// which catches case slips ("true"), dropped suffixes ("max_split_size") and PyTorch's own
// misspelling "garbage_collect_threshold". Failing that, a shared prefix of >= 4 characters
// ("expandable" -> "expandable_segments") is suggested.
//
// Only a distance up to the largest threshold of all candidates (`limit`) can be accepted, and a
// distance is never below the difference of the lengths. So a candidate whose length differs from
// the word's by more than `limit` is not measured: if the closest candidate is within `limit` it
// is measured and no skipped one ties with it, and if none is, nothing is suggested by distance
// either way; the answer is the one of measuring them all. A huge unknown word (a 4 MB config
// string read from a snapshot) is then measured against nothing, where it cost an edit distance
// over the whole word per key (issue 31: 29 s for `tune`).
std::optional<std::string_view> closest_match(std::string_view word,
                                              std::span<const std::string_view> candidates) {
  std::size_t limit = 1;
  for (const std::string_view candidate : candidates) limit = std::max(limit, candidate.size() / 4);
  std::optional<std::string_view> best;
  std::size_t best_distance = 0;
  for (const std::string_view candidate : candidates) {
    const std::size_t length_gap =
        word.size() > candidate.size() ? word.size() - candidate.size() : candidate.size() - word.size();
    if (length_gap > limit) continue;
    const std::size_t distance = edit_distance(word, candidate);
    if (!best || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (best && best_distance <= std::max<std::size_t>(1, best->size() / 4)) {
    return best;
  }
  for (const std::string_view candidate : candidates) {
    if (word.size() >= 4 && (starts_with_ci(candidate, word) || starts_with_ci(word, candidate))) {
      return candidate;
    }
  }
  return std::nullopt;
}

std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
  const std::optional<std::string_view> match = closest_match(word, candidates);
  return match ? " (did you mean '" + std::string(*match) + "'?)" : std::string();
}

}  // namespace streampool::config_impl
