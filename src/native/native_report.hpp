// native_report.hpp — the native backend's reports about its arenas (native_report.cpp): snapshot
// segments, the arena figures of an OOM message, the capture note of one. The caller holds the
// locks of the arenas it passes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/oom_message.hpp"
#include "native/stream_arena.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

/// The segments of arena `a` of `device` as a snapshot lists them (one per mapped run).
void append_arena_segments(int device, const stream_arena& a, std::vector<segment_info>& out);
/// Adds the arenas' allocated bytes, cached bytes per stream, private-pool free bytes and largest
/// free block to an OOM message's figures.
void add_arena_figures(const std::vector<std::unique_ptr<stream_arena>>& arenas, core::oom_figures& f);
/// The sentences an OOM message gets while a capture is underway (Note [OOM during capture]).
[[nodiscard]] std::string capture_oom_note(int device, const stream_arena& a);

}  // namespace streampool::native
