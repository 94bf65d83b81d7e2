// format.hpp — small text helpers shared by the core and both backends: sizes, pointers, JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <map>
#include <string_view>

#include "streampool/stats.hpp"  // json_quote is public (users build JSON around to_json output)

namespace streampool::core {

using streampool::json_quote;
/// {"key":value,...} of a flat statistics map (to_map() of memory_stats and host_memory_stats).
[[nodiscard]] std::string json_object(const std::map<std::string, std::int64_t>& values);
/// Adds "<prefix>.current/.peak/.allocated/.freed" of `s` to a statistics map (PyTorch's names).
void put_stat(std::map<std::string, std::int64_t>& out, const std::string& prefix, const stat& s);

/// "0x7f00deadbeef".
[[nodiscard]] std::string format_pointer(const void* ptr);
[[nodiscard]] std::string format_pointer(std::uintptr_t address);
/// Microseconds since the epoch (host clock), as in PyTorch's trace entries.
[[nodiscard]] std::uint64_t now_us() noexcept;

}  // namespace streampool::core
