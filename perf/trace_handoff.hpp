// trace_handoff.hpp — the parsed trace handed from `replay` to its rows' child processes: the
// parent writes the events once into an anonymous memory file that every child inherits, and a
// child takes them from there instead of reading --trace again (Note [Children get the parsed
// trace], trace_handoff.cpp).
#pragma once

#include <optional>
#include <vector>

#include "streampool/replay.hpp"

namespace streampool::bench {

/// An anonymous memory file holding `events`, for run_in_child's `shared_fd`; closed on
/// destruction. @throws usage_error when the file cannot be made or written
class shared_trace {
 public:
  explicit shared_trace(const std::vector<trace_event>& events);
  ~shared_trace();
  shared_trace(const shared_trace&) = delete;
  shared_trace& operator=(const shared_trace&) = delete;
  [[nodiscard]] int fd() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

/// In a row's child process started with a shared_trace: its events. Empty when there is none
/// (not a child, or started without one). @throws usage_error when the shared file is malformed
[[nodiscard]] std::optional<std::vector<trace_event>> inherited_trace_events();

}  // namespace streampool::bench
