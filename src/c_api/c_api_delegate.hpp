// c_api_delegate.hpp — the C API's delegate (streampool_set_delegate in c_api.h): another copy of
// streampool in the process (the PyTorch extension) that serves the C API's allocation calls, so that
// every library of the process shares the allocator PyTorch uses (Note [C API delegate] in
// c_api_delegate.cpp). For the C API's files only.
#pragma once

#include <atomic>
#include <string>

#include "streampool/c_api.h"
#include "streampool/errors.hpp"

namespace streampool::c_api_impl {

/// A failure the delegate reported: its status and message pass through unchanged.
struct delegated_error : error {
  delegated_error(int code, const std::string& message) : error(message), status(code) {}
  int status;
};

/// The delegate, or nullptr (set_delegate_locked writes it). Inline: a C call checks it with one
/// relaxed load and no function call (Note [C API delegate]).
inline std::atomic<const streampool_delegate*> current_delegate{nullptr};

/// One call that goes to the delegate, if one is set: holds it for the call, so that clearing it
/// waits (Note [C API delegate]). Costs one relaxed load when none is set.
class delegate_call {
 public:
  delegate_call() noexcept {
    if (current_delegate.load(std::memory_order_relaxed) != nullptr) [[unlikely]] enter();
  }
  ~delegate_call() {
    if (d_ != nullptr) [[unlikely]] leave();
  }
  delegate_call(const delegate_call&) = delete;
  delegate_call& operator=(const delegate_call&) = delete;

  explicit operator bool() const noexcept { return d_ != nullptr; }
  const streampool_delegate* operator->() const noexcept { return d_; }
  /// Throws delegated_error with the delegate's message when `status` is not STREAMPOOL_OK.
  void check(int status) const;
  /// The delegate's text result, or delegated_error when it returned NULL.
  const char* check_text(const char* text) const;
  /// Allocates through the delegate and records the pointer (a live delegated allocation).
  void* allocate(std::size_t size, int device, void* stream) const;
  /// Frees a pointer allocate() recorded. @throws error for any other pointer (nothing freed)
  void free(void* ptr) const;

 private:
  void enter() noexcept;
  void leave() noexcept;

  const streampool_delegate* d_ = nullptr;
};

/// True while a delegate is set (relaxed).
[[nodiscard]] inline bool delegated() noexcept { return current_delegate.load(std::memory_order_relaxed) != nullptr; }
/// The refusal of a call the delegate does not serve (`what`: the call's name).
[[noreturn]] void refuse_delegated(const char* what);
/// Sets or clears the delegate (the C API's creation mutex held by the caller, and its own
/// allocator known absent when setting). @throws error / state_error as streampool_set_delegate says
void set_delegate_locked(const streampool_delegate* delegate);
/// The delegate's name, or nullptr.
[[nodiscard]] const char* delegate_name() noexcept;

}  // namespace streampool::c_api_impl
