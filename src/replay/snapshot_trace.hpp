// src/replay/snapshot_trace.hpp — turning a PyTorch memory snapshot (the pickle written by
// torch.cuda.memory._dump_snapshot()) into trace events: the internal entry point that
// read_trace_file() calls once it has seen a pickle.
#pragma once

#include <string_view>

#include "replay/pickle_reader.hpp"
#include "streampool/replay.hpp"

namespace streampool::replay_impl {

/// Reads the snapshot from `in` (`source` names it in messages). @throws error, see read_trace_file()
[[nodiscard]] trace_file read_snapshot(byte_source& in, std::string_view source, const trace_read_options& options);

}  // namespace streampool::replay_impl
