// isolated_run.hpp — one row of a harness table (one backend or peer) run in a child process, so
// that a backend or peer that crashes (a segfault in PyTorch's allocator, an abort) costs its own
// row, reported as "crashed (signal N)", and the rest of the table is still printed. The child is
// this same binary, re-executed with the same command and options but one backend (`replay` also
// hands it the parsed trace: trace_handoff.hpp); it sends its
// rows (and chart series) back through a pipe instead of printing a report. See Note [Rows in
// child processes] in isolated_run.cpp.
#pragma once

#include <string>
#include <vector>

#include "commands.hpp"
#include "report.hpp"
#include "svg_plot.hpp"

namespace streampool::bench {

/// What a child sends back: its table rows, the chart series it drew, and its exit status.
struct child_rows {
  std::vector<std::vector<cell>> rows;
  std::vector<line_series> series;  ///< for bar charts: one series, points (group index, value)
  int status = 0;
};

/// The outcome of run_in_child: `failure` is empty when the child ran to the end and sent its
/// rows; otherwise it says what happened ("crashed (signal 11: Segmentation fault)", "exited with
/// status 2 without a result").
struct child_outcome {
  std::string failure;
  child_rows got;
};

/// main() records the binary to re-execute (argv[0] is not enough: /proc/self/exe is used when
/// it exists). Without this call (e.g. in the harness's unit tests) every row runs in-process.
void enable_child_rows(const char* argv0);
/// True when rows run in children: enable_child_rows was called and this is not a child already.
[[nodiscard]] bool child_rows_enabled();
/// True in a child started by run_in_child (it reports through send_to_parent, quietly).
[[nodiscard]] bool is_row_child();

/// A child found bad input, printed the message and exited with status 2: main exits with status 2
/// and prints nothing more (Note [Bad input stops the run once], isolated_run.cpp).
class child_bad_input : public usage_error {
 public:
  child_bad_input() : usage_error("a row's child process stopped on bad input (its message is above)") {}
};

/// Runs `command` with `args`, its --backends replaced by `backend` (a --backends entry), in a
/// child process, and collects what it sends. `shared_fd` >= 0 (a shared_trace, trace_handoff.hpp)
/// is given to the child, which finds it with inherited_data_fd().
/// @throws usage_error when the child cannot be started (fork or pipe failed)
/// @throws child_bad_input when the child exited with status 2 without rows
[[nodiscard]] child_outcome run_in_child(const std::string& command, const args_t& args, const std::string& backend,
                                         int shared_fd = -1);
/// In a child: the descriptor the parent passed as run_in_child's `shared_fd`, else -1.
[[nodiscard]] int inherited_data_fd();

/// In a child: sends `rows`, `series` and `status` to the parent. @throws nothing (best effort)
void send_to_parent(const child_rows& rows) noexcept;

/// In a child, for the harness's own tests: when STREAMPOOL_BENCH_TEST_CRASH names `backend`,
/// the process kills itself with SIGSEGV (what a crashing peer does). Does nothing otherwise.
void crash_if_asked(const std::string& backend) noexcept;

/// The --backends text of `name` with `config` (';' for ',' so the list parser keeps it whole).
[[nodiscard]] std::string backend_argument(const std::string& name, const std::string& config);

/// Encoding of child_rows on the pipe (exposed for the unit tests): one record per line.
[[nodiscard]] std::string encode_child_rows(const child_rows& rows);
/// @throws usage_error for text that encode_child_rows did not write
[[nodiscard]] child_rows decode_child_rows(const std::string& text);

}  // namespace streampool::bench
