// warnings.cpp — the process-wide warning handler and warn() (declared in streampool/allocator.hpp
// and, for the layers that need only it, core/warnings.hpp). The default prints each distinct
// message once to stderr, so a warning repeated by every allocator a program (or the harness)
// builds is shown once.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "core/warnings.hpp"
#include "streampool/allocator.hpp"  // warning_handler, set_warning_handler

namespace streampool {
namespace {

void print_once(std::string_view message) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> printed;
  std::lock_guard lock(mutex);
  if (!printed.emplace(message).second) return;
  std::fprintf(stderr, "streampool: warning: %.*s\n", static_cast<int>(message.size()), message.data());
}

std::atomic<warning_handler> current_handler{&print_once};

}  // namespace

warning_handler set_warning_handler(warning_handler handler) noexcept {
  return current_handler.exchange(handler != nullptr ? handler : &print_once);
}

void warn(std::string_view message) { current_handler.load()(message); }

}  // namespace streampool
