// format.cpp — text helpers: format_size (docs/pytorch-compatibility.md §2.10), pointers, JSON quoting, the trace clock.
#include "core/format.hpp"

#include <chrono>
#include <cstdio>

#include "streampool/stats.hpp"

namespace streampool {

std::string format_size(std::size_t bytes) {
  char buffer[64];
  if (bytes <= 1024) {
    std::snprintf(buffer, sizeof buffer, "%zu bytes", bytes);
  } else if (bytes <= 1048576) {
    std::snprintf(buffer, sizeof buffer, "%.2f KiB", static_cast<double>(bytes) / 1024.0);
  } else if (bytes <= 1073741824) {
    std::snprintf(buffer, sizeof buffer, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f GiB", static_cast<double>(bytes) / 1073741824.0);
  }
  return buffer;
}

namespace core {

std::string format_pointer(std::uintptr_t address) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(address));
  return buffer;
}

std::string format_pointer(const void* ptr) { return format_pointer(reinterpret_cast<std::uintptr_t>(ptr)); }

std::string json_object(const std::map<std::string, std::int64_t>& values) {
  std::string out = "{";
  for (const auto& [key, value] : values) {
    if (out.size() > 1) out += ',';
    out += json_quote(key) + ':' + std::to_string(value);
  }
  return out + '}';
}

void put_stat(std::map<std::string, std::int64_t>& out, const std::string& prefix, const stat& s) {
  out[prefix + ".current"] = s.current;
  out[prefix + ".peak"] = s.peak;
  out[prefix + ".allocated"] = s.allocated;
  out[prefix + ".freed"] = s.freed;
}

std::uint64_t now_us() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace core
}  // namespace streampool

namespace streampool {

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buffer;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace streampool
