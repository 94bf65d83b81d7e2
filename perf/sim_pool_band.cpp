// sim_pool_band.cpp — the comparisons of the sim pool with an H200 (sim_pool_band.hpp).
#include "sim_pool_band.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace streampool::bench {

// Note [Sim pool error band]
// sim_pool_peak_error is the bound the harness prints on every peak reserved that comes from the
// sim's model of CUDA's stream-ordered pool (cudaMallocAsync, async-raw on the sim driver), and
// what `tune` ranks such a figure by the top of. It was ±6%: the largest error on the five probed
// traces was -5.4%. Issue 31 then reported -6.5% on a ResNet-50 training trace replayed against
// the H200, outside the label. That trace was not kept, so the figure cannot be recomputed here;
// the replays below of the ResNet-50 trace we have give -1.6% against the H200's pool and -5.7%
// against PyTorch's own backend:cudaMallocAsync rerunning the training (where frees wait for real
// kernels, which `tune`'s prediction stands for). Every comparison we have is listed here; the
// bound is the largest |error| among them rounded up to a whole percent (7%), and the note above
// a table of estimates prints the measured ranges, not only the bound. perf/tests/sim_pool_band_test.cpp
// replays every trace of tests/data on the sim through the harness's path and requires the sim
// figures below (so a change of the model that moves one fails until this list and
// docs/benchmarks.md are updated), the H200 replay figures to be the probe's measured peaks
// (tests/data/driver/pool), every error to lie within the bound, and the bound to be no looser
// than the rounding.
//
// Sources: replay: tests/data/driver/pool/*.growth.txt (2026-12-01, H200; `replay --driver cuda
// --backends cudaMallocAsync,async-raw` gave the same peaks); rerun: PyTorch 2.11 on the H200,
// `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync record_training.py --model M --steps 12`
// (2026-12-01, docs/benchmarks-history.md, "four real trainings recorded"); reported: issue 31.
const std::vector<pool_comparison>& sim_pool_comparisons() {
  static const std::vector<pool_comparison> list = {
      {"encoder_varlen", pool_evidence::replay, 11680, 11360},
      {"gpt2_varlen", pool_evidence::replay, 9856, 9760},
      {"resnet50_varres", pool_evidence::replay, 5888, 5792},
      {"threestream_enc", pool_evidence::replay, 4768, 4512},
      {"twostream_cnn", pool_evidence::replay, 1568, 1632},
      {"resnet50_varres", pool_evidence::rerun, 6144, 5792},
      {"gpt2_varlen", pool_evidence::rerun, 9888, 9760},
      {"threestream_enc", pool_evidence::rerun, 4384, 4512},
      {"twostream_cnn", pool_evidence::rerun, 1664, 1632},
      {"a ResNet-50 training (issue 31)", pool_evidence::reported, 0, 0, -0.065},
  };
  return list;
}

error_range measured_range(pool_evidence against) {
  error_range r;
  for (const pool_comparison& c : sim_pool_comparisons()) {
    if (c.against != against) continue;
    const double e = c.error();
    r.low = r.count == 0 ? e : std::min(r.low, e);
    r.high = r.count == 0 ? e : std::max(r.high, e);
    ++r.count;
  }
  return r;
}

double largest_measured_error() {
  double largest = 0;
  for (const pool_comparison& c : sim_pool_comparisons()) largest = std::max(largest, std::fabs(c.error()));
  return largest;
}

namespace {

std::string percent(double e) {
  char text[16];
  std::snprintf(text, sizeof text, "%+.1f%%", e * 100.0);
  return text;
}

std::string range_text(const error_range& r) {
  return r.count == 1 || r.low == r.high ? percent(r.low) : percent(r.low) + " to " + percent(r.high);
}

}  // namespace

std::string measured_text() {
  const error_range replay = measured_range(pool_evidence::replay);
  const error_range rerun = measured_range(pool_evidence::rerun);
  const error_range reported = measured_range(pool_evidence::reported);
  std::string text = range_text(replay) + " replaying " + std::to_string(replay.count) +
                     " training traces on an H200, " + range_text(rerun) + " against PyTorch's own cudaMallocAsync rerunning " +
                     std::to_string(rerun.count) + " of the trainings";
  if (reported.count > 0) {
    text += ", " + range_text(reported) + " on " + (reported.count == 1 ? std::string("one more (a ResNet-50 training)")
                                                                          : std::to_string(reported.count) + " more");
  }
  return text;
}

}  // namespace streampool::bench
