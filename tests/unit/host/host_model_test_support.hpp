// host_model_test_support.hpp — a reference model of the host allocator's reuse rule for the randomised and
// fault-injection tests: it remembers, per freed block, how much work each recorded stream had
// been given before the free, and checks on every handout that the block is not live, does not
// overlap a live block, and that those streams have completed that work. Live blocks carry a
// byte pattern that must survive until they are freed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "host_test_support.hpp"

// Sanitized builds run the randomised and fault-injection tests on less work (scripts/test runs
// every `sim` test under ASan+UBSan and TSan).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STREAMPOOL_HOST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STREAMPOOL_HOST_SANITIZED 1
#endif
#endif
#ifndef STREAMPOOL_HOST_SANITIZED
#define STREAMPOOL_HOST_SANITIZED 0
#endif

namespace streampool::test {

/// Work scale of the randomised tests: 1, or 1/4 under a sanitizer.
inline constexpr int host_work_divisor = STREAMPOOL_HOST_SANITIZED ? 4 : 1;

class host_model {
 public:
  explicit host_model(host_env& env) : env_(env) {}

  /// A stream the model uses (the sim says what its copies have completed).
  stream_t add_stream() {
    const stream_t s = env_.make_stream();
    streams_.push_back(s);
    return s;
  }
  [[nodiscard]] std::vector<stream_t> streams() const {
    return streams_;
  }

  /// allocate() through the model; checks the handout. Returns nullptr when it threw.
  void* allocate(std::size_t bytes) {
    void* p = env_.alloc->allocate(bytes);
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    EXPECT_EQ(live_.count(addr), 0u) << "handed out twice";
    auto next = live_.lower_bound(addr);
    if (next != live_.end()) {
      EXPECT_GE(next->first, addr + bytes) << "overlaps a live block";
    }
    if (next != live_.begin()) {
      const auto before = std::prev(next);
      EXPECT_LE(before->first + before->second.bytes, addr) << "overlaps a live block";
    }
    if (const auto freed = freed_.find(addr); freed != freed_.end()) {
      for (const auto& [stream, submitted] : freed->second) {
        EXPECT_GE(env_.sim->completed_work(stream), submitted) << "reused before the copies on a stream completed";
      }
      freed_.erase(freed);
    }
    const auto pattern = static_cast<std::uint8_t>(++serial_);
    std::memset(p, pattern, std::min<std::size_t>(bytes, pattern_bytes));
    live_[addr] = {bytes, pattern, {}};
    return p;
  }

  /// A copy reading `p` on `stream`, recorded on the block.
  void copy(void* p, stream_t stream) {
    live_rec& rec = live_.at(reinterpret_cast<std::uintptr_t>(p));
    check(*env_.sim, env_.sim->memcpy_async(device_, p, 1, stream), "memcpy_async");
    env_.alloc->record_stream(p, stream);
    rec.streams[stream] = env_.sim->submitted_work(stream);  // the copy is this item
  }

  void deallocate(void* p) {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    const live_rec rec = live_.at(addr);
    const auto* bytes = static_cast<const std::uint8_t*>(p);
    for (std::size_t i = 0; i < std::min<std::size_t>(rec.bytes, pattern_bytes); i += 61) {
      ASSERT_EQ(bytes[i], rec.pattern) << "a live block was overwritten";
    }
    env_.alloc->deallocate(p);
    live_.erase(addr);
    freed_[addr] = rec.streams;
  }

  void complete(stream_t stream) { env_.sim->complete(stream); }
  void complete_all() {
    for (const stream_t s : streams_) complete(s);
  }

  [[nodiscard]] std::vector<void*> live() const {
    std::vector<void*> out;
    for (const auto& [addr, rec] : live_) out.push_back(reinterpret_cast<void*>(addr));
    return out;
  }
  /// Statistics agree with the model: every live block is counted; pending ones may be too.
  void check_stats() const {
    const host_memory_stats s = env_.alloc->stats();
    EXPECT_GE(s.allocation.current, static_cast<std::int64_t>(live_.size()));
    EXPECT_LE(s.allocation.current, static_cast<std::int64_t>(live_.size() + freed_.size()));
    EXPECT_GE(s.reserved_bytes.current, s.allocated_bytes.current);
    EXPECT_EQ(s.num_host_alloc - s.num_host_free, s.segment.current);
  }
  void free_all() {
    for (void* p : live()) deallocate(p);
  }

  void set_device_buffer(void* device) { device_ = device; }

 private:
  struct live_rec {
    std::size_t bytes = 0;
    std::uint8_t pattern = 0;
    std::map<stream_t, std::uint64_t> streams;  ///< stream -> its work item of the last copy
  };
  /// Bytes of each block that carry the pattern (the head is where an overlap would show first;
  /// filling whole 2 MiB blocks would dominate the run time).
  static constexpr std::size_t pattern_bytes = 64 * 1024;
  host_env& env_;
  void* device_ = nullptr;
  std::uint64_t serial_ = 0;
  std::vector<stream_t> streams_;
  std::map<std::uintptr_t, live_rec> live_;
  std::map<std::uintptr_t, std::map<stream_t, std::uint64_t>> freed_;
};

}  // namespace streampool::test
