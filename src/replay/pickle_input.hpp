// src/replay/pickle_input.hpp — the byte side of the pickle reader: a window over a byte_source
// that reads opcodes and their arguments, peeks ahead a little (Note [Streaming a pickle]) and
// phrases errors with the source name and the offset of the current opcode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "replay/pickle_reader.hpp"

namespace streampool::replay_impl {

class pickle_input {
 public:
  static constexpr std::size_t buffer_size = 1 << 20;

  pickle_input(byte_source& in, std::string_view source);

  /// Remembers the offset of the opcode about to be read, for messages.
  void start_opcode() noexcept { op_offset_ = consumed_ + pos_; }
  /// @throws error "truncated pickle" at the end of the input
  std::uint8_t byte();
  /// Reads `n` bytes into `out`, or skips them when `out` is null. @throws error when truncated
  void read(char* out, std::size_t n);
  /// An unsigned little-endian integer of `n` <= 8 bytes.
  std::uint64_t little(std::size_t n);
  /// A text argument up to its newline (protocol-0 style opcodes), at most 256 bytes.
  std::string line();
  /// The next opcode after `skip` bytes (the rest of the value being read) and any memo stores,
  /// without consuming anything; nothing when the input ends or the window is too small.
  std::optional<std::uint8_t> peek_past_memo(std::size_t skip);
  /// LONG1/LONG4's argument: `n` bytes of little-endian two's complement; `big_integer` beyond 64 bits.
  pickle_value long_integer(std::uint64_t n);
  /// INT ('I': also "00"/"01" booleans), LONG ('L', optional trailing L) or FLOAT ('F') text.
  pickle_value text_number(const std::string& text, char opcode) const;
  /// BINFLOAT's argument: a big-endian IEEE 754 double.
  pickle_value binary_float();
  /// @throws error for an opcode that would import or call code (GLOBAL, REDUCE, BUILD, ...)
  void refuse_code(std::uint8_t op) const;
  /// @throws error "<source>: <what> (at byte N)"
  [[noreturn]] void fail(const std::string& what) const;

 private:
  bool fill(std::size_t want);

  byte_source& in_;
  std::string source_;
  std::unique_ptr<char[]> buffer_;
  std::size_t pos_ = 0, end_ = 0;
  std::uint64_t consumed_ = 0;  ///< bytes before buffer_[0]
  std::uint64_t op_offset_ = 0;
};

}  // namespace streampool::replay_impl
