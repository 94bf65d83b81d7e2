// trace_input.hpp — reading --trace for `replay` and `tune`: either format (CSV or a PyTorch
// memory snapshot pickle, by content), the --device of a snapshot, and bad input as exit status 2.
#pragma once

#include <string>
#include <vector>

#include "cli_common.hpp"
#include "streampool/replay.hpp"

namespace streampool::bench {

/// Reads the trace (one line on stderr unless --quiet) and checks it (check_trace_events). Warnings
/// of the reader (a recording that starts mid-run) are returned in the trace_file for the report's
/// notes. In a row's child process the events are the parent's (trace_handoff.hpp), not read again.
/// @throws usage_error for no --trace, a directory or device (Note [What --trace may name]), a
///         missing, malformed, empty or inconsistent file, or an absent --device
[[nodiscard]] trace_file load_trace_input(const std::string& path, int device, const common_options& opts);

/// What replay_trace would refuse, found before any replay: an alloc of an address that is still
/// live. @throws usage_error naming `path`, the line and the line of the earlier alloc
void check_trace_events(const std::vector<trace_event>& events, const std::string& path);

/// "--trace FILE" help text shared by the commands (FILE may also be the first word after the command).
inline constexpr const char* trace_option_help =
    "trace file: CSV (action,addr,size,stream,time_us) or a PyTorch memory snapshot pickle from "
    "torch.cuda.memory._dump_snapshot() / streampool.record(); plain or gzip, detected by content";
inline constexpr const char* device_option_help = "PyTorch snapshots: the device whose trace is replayed";

}  // namespace streampool::bench
