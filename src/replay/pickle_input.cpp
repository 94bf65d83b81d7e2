// pickle_input.cpp — the pickle reader's input window over a byte_source (pickle_input.hpp).
#include "replay/pickle_input.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "streampool/errors.hpp"

namespace streampool::replay_impl {
namespace {

// Opcodes that would import a name, call something or fetch an external object.
struct code_opcode {
  std::uint8_t op;
  const char* name;
};
constexpr code_opcode code_opcodes[] = {
    {'c', "GLOBAL"},  {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"}, {'b', "BUILD"},     {'i', "INST"},
    {'o', "OBJ"},     {0x81, "NEWOBJ"},       {0x92, "NEWOBJ_EX"}, {0x82, "EXT1"},  {0x83, "EXT2"},
    {0x84, "EXT4"},   {'P', "PERSID"},        {'Q', "BINPERSID"},
};

}  // namespace

pickle_input::pickle_input(byte_source& in, std::string_view source)
    : in_(in), source_(source), buffer_(new char[buffer_size]) {}

bool pickle_input::fill(std::size_t want) {
  if (end_ - pos_ >= want) return true;
  std::memmove(buffer_.get(), buffer_.get() + pos_, end_ - pos_);
  consumed_ += pos_;
  end_ -= pos_;
  pos_ = 0;
  while (end_ < want) {
    const std::size_t n = in_.read(buffer_.get() + end_, buffer_size - end_);
    if (n == 0) return false;
    end_ += n;
  }
  return true;
}

std::uint8_t pickle_input::byte() {
  if (!fill(1)) fail("truncated pickle: the input ends before the STOP opcode");
  return static_cast<std::uint8_t>(buffer_[pos_++]);
}

void pickle_input::read(char* out, std::size_t n) {
  while (n > 0) {
    if (!fill(1)) fail("truncated pickle: the input ends inside a value");
    const std::size_t take = std::min(n, end_ - pos_);
    if (out != nullptr) {
      std::memcpy(out, buffer_.get() + pos_, take);
      out += take;
    }
    pos_ += take;
    n -= take;
  }
}

std::uint64_t pickle_input::little(std::size_t n) {
  unsigned char bytes[8] = {};
  read(reinterpret_cast<char*>(bytes), n);
  std::uint64_t value = 0;
  for (std::size_t i = n; i-- > 0;) value = (value << 8) | bytes[i];
  return value;
}

std::string pickle_input::line() {
  std::string text;
  for (std::uint8_t c = byte(); c != '\n'; c = byte()) {
    if (text.size() >= 256) fail("a text argument is longer than 256 bytes");
    text += static_cast<char>(c);
  }
  return text;
}

std::optional<std::uint8_t> pickle_input::peek_past_memo(std::size_t skip) {
  if (skip + 64 > buffer_size) return std::nullopt;
  fill(skip + 64);  // best effort: a short input simply has fewer bytes
  std::size_t at = pos_ + skip;
  while (at < end_) {
    const auto op = static_cast<std::uint8_t>(buffer_[at]);
    const std::size_t length = op == 0x94 ? 1 : op == 'q' ? 2 : op == 'r' ? 5 : op == 0x95 ? 9 : 0;
    if (length == 0) return op;
    at += length;
  }
  return std::nullopt;
}

void pickle_input::fail(const std::string& what) const {
  throw error(source_ + ": " + what + " (at byte " + std::to_string(op_offset_) + ")");
}

pickle_value pickle_input::long_integer(std::uint64_t n) {
  // It fits 64 bits when every byte past the 8th is the sign extension and bit 63 agrees with the sign.
  std::uint64_t low = 0;
  bool negative = false;
  bool extension_ok = true;
  unsigned char extension = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const unsigned char b = byte();
    if (i < 8) low |= std::uint64_t{b} << (8 * i);
    if (i == 8) extension = b;
    if (i >= 8 && b != extension) extension_ok = false;
    if (i + 1 == n) negative = (b & 0x80) != 0;
  }
  if (n > 0 && n < 8 && negative) low |= ~std::uint64_t{0} << (8 * n);
  bool fits = true;
  if (n >= 8) fits = ((low >> 63) != 0) == negative;
  if (n > 8) fits = fits && extension_ok && extension == (negative ? 0xff : 0x00);
  pickle_value v;
  v.kind = fits ? pickle_kind::integer : pickle_kind::big_integer;
  v.integer = fits ? static_cast<std::int64_t>(low) : 0;
  return v;
}

pickle_value pickle_input::text_number(const std::string& text, char opcode) const {
  pickle_value v;
  if (opcode == 'I' && (text == "00" || text == "01")) {
    v.kind = pickle_kind::boolean;
    v.integer = text == "01" ? 1 : 0;
    return v;
  }
  char* end = nullptr;
  errno = 0;
  if (opcode == 'F') {
    v.kind = pickle_kind::real;
    v.real = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size()) fail("bad float text '" + text + "'");
    return v;
  }
  std::string digits = text;
  if (opcode == 'L' && !digits.empty() && digits.back() == 'L') digits.pop_back();
  const long long value = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || end != digits.c_str() + digits.size()) fail("bad integer text '" + text + "'");
  v.kind = errno == ERANGE ? pickle_kind::big_integer : pickle_kind::integer;
  v.integer = value;
  return v;
}

pickle_value pickle_input::binary_float() {
  unsigned char bytes[8];
  read(reinterpret_cast<char*>(bytes), 8);
  std::uint64_t bits = 0;
  for (const unsigned char b : bytes) bits = (bits << 8) | b;
  pickle_value v;
  v.kind = pickle_kind::real;
  std::memcpy(&v.real, &bits, sizeof bits);
  return v;
}

void pickle_input::refuse_code(std::uint8_t op) const {
  for (const code_opcode& code : code_opcodes) {
    if (code.op == op) {
      fail(std::string("the pickle holds opcode ") + code.name +
           ", which would import or call code; a trace is read as data only and never executed, so this "
           "file is refused (is it really a memory snapshot from torch.cuda.memory._dump_snapshot()?)");
    }
  }
}

}  // namespace streampool::replay_impl
