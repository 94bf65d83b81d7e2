// fuzz_test_support.hpp — helpers shared by the libFuzzer targets of tests/fuzz: a checked assertion
// that aborts (libFuzzer and the corpus replay both report an abort as a failure, with the input),
// and a reader that turns the fuzzer's bytes into numbers and choices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace streampool::fuzz {

/// Fails the run (libFuzzer saves the input as a crash) when `condition` is false.
inline void check(bool condition, const std::string& what) {
  if (condition) return;
  std::fprintf(stderr, "streampool fuzz check failed: %s\n", what.c_str());
  std::abort();
}

/// Consumes the input front to back; past the end every read returns 0.
class byte_reader {
 public:
  byte_reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] bool empty() const noexcept { return pos_ >= size_; }
  std::uint8_t u8() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(u16() | (std::uint32_t{u16()} << 16)); }
  std::uint64_t u64() noexcept { return u32() | (std::uint64_t{u32()} << 32); }
  /// A value in [0, n).
  std::size_t pick(std::size_t n) noexcept { return n == 0 ? 0 : u8() % n; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace streampool::fuzz
