// sim_pool_estimate.cpp — marking of the sim pool's figures as estimates (sim_pool_estimate.hpp).
#include "sim_pool_estimate.hpp"

#include <utility>

#include "peer_allocators.hpp"
#include "sim_pool_band.hpp"
#include "size_parse.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::bench {

bool uses_stream_ordered_pool(const allocator& alloc) {
  return alloc.backend_name() == "cudaMallocAsync" || is_raw_async_peer(alloc);
}

void mark_sim_pool_rows(report& out, table& t, const driver_choice& choice) {
  if (!choice.sim) return;
  bool any = false;
  t.columns.push_back(estimate_column());
  for (std::vector<cell>& row : t.rows) {
    const auto* name = row.empty() ? nullptr : std::get_if<std::string>(&row.front());
    const bool estimate = name != nullptr && (*name == "cudaMallocAsync" || *name == "async-raw");
    row.resize(t.columns.size() - 1);
    row.push_back(estimate_cell(estimate));
    any = any || estimate;
  }
  if (any) out.notes.push_back(estimate_note());
}

column estimate_column() { return {"peak_reserved_error", "resv error", col_kind::error}; }

cell estimate_cell(bool estimate) { return estimate ? sim_pool_peak_error : 0.0; }

std::string estimate_note() {
  // Note [Sim pool error band] (sim_pool_band.cpp): the bound, and what was measured.
  return "sim pool figures (cudaMallocAsync, async-raw on the sim driver) are estimates within ±" +
         fixed(sim_pool_peak_error * 100.0, 0) + "% (column 'resv error'): the sim's model of CUDA's stream-ordered pool was " +
         measured_text() + " (docs/benchmarks.md)";
}

std::vector<std::string> estimate_ranking_notes(const std::vector<ranked_figure>& ranked) {
  std::vector<std::string> lines;
  if (ranked.empty()) return lines;
  const auto band = [](const ranked_figure& f) {
    const double peak = static_cast<double>(f.peak_reserved);
    const double error = f.estimate ? sim_pool_peak_error : 0.0;
    return std::pair{peak * (1.0 - error), peak * (1.0 + error)};
  };
  const std::string bound = "±" + fixed(sim_pool_peak_error * 100.0, 0) + "%";
  const ranked_figure& best = ranked.front();
  const auto [best_low, best_high] = band(best);
  for (std::size_t i = 1; i < ranked.size(); ++i) {
    const ranked_figure& f = ranked[i];
    if (!f.estimate && !best.estimate) continue;
    const auto [low, high] = band(f);
    if (low <= best_high && best_low <= high) {
      lines.push_back("note: " + f.label + " and the recommendation " + best.label +
                      " are within the sim pool's estimate error (" + bound +
                      "): which of the two reserves less is not certain");
    }
  }
  if (best.estimate) {
    lines.push_back("note: the recommended config's peak reserved is a sim pool estimate (" + bound +
                    "); confirm it on the device with replay --driver cuda");
  }
  return lines;
}

}  // namespace streampool::bench
