// stress_test_support.hpp — shared helpers of the reliability suites (tests/stress): the backend
// configurations they run, seeds and sequence counts from the environment, the work scale under
// sanitizers, and small helpers to read statistics and classify exceptions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <typeinfo>
#include <vector>

#include "streampool/allocator.hpp"
#include "streampool/sim_driver.hpp"

// Sanitized builds run the same tests on a smaller amount of work (scripts/test runs every `sim`
// test under ASan+UBSan and under TSan on CI).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STREAMPOOL_STRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STREAMPOOL_STRESS_SANITIZED 1
#endif
#endif
#ifndef STREAMPOOL_STRESS_SANITIZED
#define STREAMPOOL_STRESS_SANITIZED 0
#endif
#if defined(__SANITIZE_THREAD__)
#define STREAMPOOL_STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STREAMPOOL_STRESS_TSAN 1
#endif
#endif
#ifndef STREAMPOOL_STRESS_TSAN
#define STREAMPOOL_STRESS_TSAN 0
#endif

namespace streampool::stress {

inline constexpr bool sanitized = STREAMPOOL_STRESS_SANITIZED != 0;
/// ThreadSanitizer is the slowest; single-threaded suites run less under it.
inline constexpr bool thread_sanitized = STREAMPOOL_STRESS_TSAN != 0;

/// A backend and config string the suites are run with.
struct stress_case {
  std::string name;
  std::string config;
  bool async = false;
  /// The config lets the allocator hand memory freed on one stream to another after an event
  /// wait, before that stream's work completed; the sim's hazard checker judges those reuses.
  [[nodiscard]] bool reuses_across_streams() const { return config.find("cross_stream_reuse:True") != std::string::npos; }
};

/// The configurations of Issue 9: native default, native with split limits and power-of-two
/// rounding, native with garbage collection under a fraction cap, native with expandable
/// segments (VMM), and cudaMallocAsync.
inline std::vector<stress_case> stress_cases() {
  return {
      {"native_default", "backend:native", false},
      {"native_split_roundup", "backend:native,max_split_size_mb:40,roundup_power2_divisions:4", false},
      {"native_gc_fraction", "backend:native,garbage_collection_threshold:0.6,per_process_memory_fraction:0.7", false},
      {"native_expandable", "backend:native,expandable_segments:True", false},
      {"async", "backend:cudaMallocAsync", true},
  };
}

/// The configurations run through the sim's stream-ordering hazard checker on multi-stream
/// programs (hazard_stress_test.cpp, fault_injection_test.cpp; Note [Sim hazard checker]): the
/// native defaults, expandable segments, the cross-stream reuse policy with and without them, reuse
/// within a capture, and cudaMallocAsync. The one list to extend when a reuse policy is added.
inline std::vector<stress_case> hazard_cases() {
  return {
      {"native_default", "backend:native", false},
      {"native_expandable", "backend:native,expandable_segments:True", false},
      {"native_cross_stream", "backend:native,cross_stream_reuse:True", false},
      {"native_cross_stream_expandable", "backend:native,cross_stream_reuse:True,expandable_segments:True", false},
      // Blocks freed during a capture reused within it (Note [Reuse within a capture]).
      {"native_capture_reuse", "backend:native,graph_capture_record_stream_reuse:True", false},
      {"async", "backend:cudaMallocAsync", true},
  };
}

/// `cases` followed by the hazard_cases() whose config it does not list yet.
inline std::vector<stress_case> with_hazard_cases(std::vector<stress_case> cases) {
  for (const stress_case& c : hazard_cases()) {
    const bool listed = std::any_of(cases.begin(), cases.end(), [&](const stress_case& x) { return x.config == c.config; });
    if (!listed) cases.push_back(c);
  }
  return cases;
}

/// Readable test parameters in gtest's output.
inline void PrintTo(const stress_case& c, std::ostream* out) { *out << c.name << " (" << c.config << ")"; }

inline std::string stress_case_name(const ::testing::TestParamInfo<stress_case>& info) { return info.param.name; }

/// An unsigned integer from the environment, or `fallback` when unset or unparsable.
inline std::optional<std::uint64_t> env_u64(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 0);
  if (end == text || *end != '\0') return std::nullopt;
  return static_cast<std::uint64_t>(value);
}

inline std::uint64_t env_u64_or(const char* name, std::uint64_t fallback) { return env_u64(name).value_or(fallback); }

/// Seeds of the sequences to run: STREAMPOOL_TEST_SEED alone when set (replay), otherwise
/// STREAMPOOL_STRESS_SEQUENCES seeds (default `ci_default`, an eighth of it under ASan, a
/// sixteenth under TSan)
/// starting at STREAMPOOL_STRESS_SEED_BASE (default 1).
inline std::vector<std::uint64_t> sequence_seeds(std::uint64_t ci_default) {
  if (const auto seed = env_u64("STREAMPOOL_TEST_SEED")) return {*seed};
  const std::uint64_t divisor = thread_sanitized ? 16 : sanitized ? 8 : 1;
  const std::uint64_t fallback = std::max<std::uint64_t>(ci_default / divisor, 1);
  const std::uint64_t count = env_u64_or("STREAMPOOL_STRESS_SEQUENCES", fallback);
  const std::uint64_t base = env_u64_or("STREAMPOOL_STRESS_SEED_BASE", 1);
  std::vector<std::uint64_t> seeds;
  seeds.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) seeds.push_back(base + i);
  return seeds;
}

/// One statistic of `stats` by PyTorch key ("allocated_bytes.all.current").
inline std::int64_t stat_of(const std::map<std::string, std::int64_t>& stats, const std::string& key) {
  const auto it = stats.find(key);
  if (it == stats.end()) {
    ADD_FAILURE() << "no statistic named " << key;
    return 0;
  }
  return it->second;
}

/// Which streampool exception an operation threw.
enum class thrown : std::uint8_t { nothing, out_of_memory, cuda_error, config_error, error, other };

inline const char* to_string(thrown kind) {
  switch (kind) {
    case thrown::nothing: return "nothing";
    case thrown::out_of_memory: return "out_of_memory";
    case thrown::cuda_error: return "cuda_error";
    case thrown::config_error: return "config_error";
    case thrown::error: return "error";
    case thrown::other: return "another exception";
  }
  return "?";
}

struct outcome {
  thrown kind = thrown::nothing;
  std::string message;
  [[nodiscard]] bool ok() const noexcept { return kind == thrown::nothing; }
};

/// Runs `body` and reports what it threw, most derived streampool type first.
template <class F>
outcome run_op(F&& body) {
  try {
    body();
    return {};
  } catch (const out_of_memory& e) {
    return {thrown::out_of_memory, e.what()};
  } catch (const cuda_error& e) {
    return {thrown::cuda_error, e.what()};
  } catch (const config_error& e) {
    return {thrown::config_error, e.what()};
  } catch (const error& e) {
    return {thrown::error, e.what()};
  } catch (const std::exception& e) {
    return {thrown::other, std::string(typeid(e).name()) + ": " + e.what()};
  } catch (...) {
    return {thrown::other, "unknown exception"};
  }
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace streampool::stress
