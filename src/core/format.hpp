// format.hpp — small text helpers shared by the core and both backends: sizes, pointers, JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "streampool/stats.hpp"  // json_quote is public (users build JSON around to_json output)

namespace streampool::detail {

using streampool::json_quote;

/// "0x7f00deadbeef".
[[nodiscard]] std::string format_pointer(const void* ptr);
[[nodiscard]] std::string format_pointer(std::uintptr_t address);
/// Microseconds since the epoch (host clock), as in PyTorch's trace entries.
[[nodiscard]] std::uint64_t now_us() noexcept;

}  // namespace streampool::detail
