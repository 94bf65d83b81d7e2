// warnings_scope.hpp — collects the library's warnings (set_warning_handler) for the lifetime of
// a scope and puts the previous handler back after; shared by every test that asserts on a
// warning. Collection is thread-safe: warnings may come from several allocating threads.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "streampool/allocator.hpp"

namespace streampool::testing {

class warnings_scope {
 public:
  warnings_scope() : previous_(set_warning_handler(&collect)) { messages().clear(); }
  ~warnings_scope() { set_warning_handler(previous_); }
  warnings_scope(const warnings_scope&) = delete;
  warnings_scope& operator=(const warnings_scope&) = delete;

  /// Everything collected since the newest scope began.
  static std::vector<std::string>& messages() {
    static std::vector<std::string> collected;
    return collected;
  }
  /// The collected warnings that contain `text`.
  static std::vector<std::string> containing(const std::string& text) {
    std::vector<std::string> out;
    for (const std::string& m : messages()) {
      if (m.find(text) != std::string::npos) out.push_back(m);
    }
    return out;
  }

 private:
  static void collect(std::string_view message) {
    static std::mutex mutex;
    const std::lock_guard lock(mutex);
    messages().emplace_back(message);
  }
  warning_handler previous_;
};

}  // namespace streampool::testing
