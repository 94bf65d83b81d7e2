// sim_pool_estimate.hpp — which replay figures come from the sim's model of CUDA's stream-ordered
// pool (the cudaMallocAsync backend and the async-raw peer on the sim driver), and how the reports
// mark them: an estimate within sim_pool_peak_error of the real pool (Note [Sim pool model]).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "report.hpp"
#include "streampool/allocator.hpp"

namespace streampool::bench {

/// True for allocators whose device memory is a stream-ordered pool (cudaMallocAsync, async-raw).
[[nodiscard]] bool uses_stream_ordered_pool(const allocator& alloc);

/// The column that carries the mark: "peak_reserved_error", the relative bound of the peak
/// reserved figure (sim_pool_peak_error for a sim pool estimate, 0 for a figure that is not one),
/// shown "±7%" / "-".
[[nodiscard]] column estimate_column();
/// Its cell for a figure that is (or is not) a sim pool estimate.
[[nodiscard]] cell estimate_cell(bool estimate);
/// The note printed above a table holding sim pool estimates: the bound and the measured ranges
/// (Note [Sim pool error band], sim_pool_band.cpp).
[[nodiscard]] std::string estimate_note();

/// For tables with one row per backend (backend name in the first cell): on the sim driver, appends
/// the estimate column (the sim pool's bound for cudaMallocAsync / async-raw rows, 0 for the others)
/// and, when a row is an estimate, the note. Does nothing on a real device.
void mark_sim_pool_rows(report& out, table& t, const driver_choice& choice);

/// One ranked candidate's figure, best (lowest peak reserved) first.
struct ranked_figure {
  std::string label;
  std::size_t peak_reserved = 0;
  bool estimate = false;
};

/// Note [Ranking on estimates]: footer notes for a ranking whose first entry is the recommendation.
/// An estimate's true figure lies within ±sim_pool_peak_error; each candidate whose band overlaps
/// the recommendation's gets a note that their order is not certain, and a recommendation that is
/// itself an estimate gets one saying how to confirm it.
[[nodiscard]] std::vector<std::string> estimate_ranking_notes(const std::vector<ranked_figure>& ranked);

}  // namespace streampool::bench
