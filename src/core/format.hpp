// format.hpp — small text helpers shared by the core and both backends: sizes, pointers, JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace streampool::detail {

/// "0x7f00deadbeef".
[[nodiscard]] std::string format_pointer(const void* ptr);
[[nodiscard]] std::string format_pointer(std::uintptr_t address);
/// `text` as a JSON string literal, quotes included.
[[nodiscard]] std::string json_quote(std::string_view text);
/// Microseconds since the epoch (host clock), as in PyTorch's trace entries.
[[nodiscard]] std::uint64_t now_us() noexcept;

}  // namespace streampool::detail
