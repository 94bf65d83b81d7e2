// text_builder.hpp — string building without iostreams, for the JSON, CSV and OOM text the library
// produces.
//
// Note [No iostreams in the library]
// libstreampool.so is loaded into processes that bring their own C++ runtime (Python + PyTorch).
// On the GPU machine, formatting an integer through std::ostringstream inside the library crashed
// in the locale's num_put facet under PyTorch (a SEGV in ostream::_M_insert<long>, found by the
// PyTorch acceptance run), while the same code ran fine in our own binaries. Plain appends and
// std::to_chars need no locale, so the text the C API returns is built with this instead.
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>

namespace streampool::core {

class text_builder {
 public:
  text_builder& operator<<(std::string_view text) {
    out_.append(text);
    return *this;
  }
  text_builder& operator<<(const char* text) { return *this << std::string_view(text); }
  text_builder& operator<<(const std::string& text) { return *this << std::string_view(text); }
  text_builder& operator<<(char c) {
    out_.push_back(c);
    return *this;
  }
  template <std::integral T>
    requires(!std::same_as<T, char> && !std::same_as<T, bool>)
  text_builder& operator<<(T value) {
    char buffer[24];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out_.append(buffer, result.ptr);
    return *this;
  }
  [[nodiscard]] const std::string& str() const& noexcept { return out_; }
  [[nodiscard]] std::string str() && noexcept { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace streampool::core
