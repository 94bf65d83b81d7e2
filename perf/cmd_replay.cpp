// cmd_replay.cpp — `streampool-bench replay --trace FILE`: replays a recorded allocation trace
// through each backend (replay_trace; on the sim driver delayed frees are replayed faithfully) and
// reports peak requested / allocated / reserved, reserved/allocated, device mallocs and time, next
// to what PyTorch's own allocator reserved in the recording. --plot draws reserved and allocated
// over the trace for every backend.
#include <algorithm>

#include "backend_registry.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "replay_run.hpp"
#include "report.hpp"
#include "sim_pool_estimate.hpp"
#include "size_parse.hpp"
#include "svg_plot.hpp"

namespace streampool::bench {

namespace {

std::vector<column> replay_columns() {
  return {{"backend", "backend", col_kind::text},
          {"config", "config", col_kind::text},
          {"peak_requested_bytes", "peak req", col_kind::bytes},
          {"peak_allocated_bytes", "peak alloc", col_kind::bytes},
          {"peak_reserved_bytes", "peak resv", col_kind::bytes},
          {"reserved_over_allocated", "resv/alloc", col_kind::ratio},
          {"device_mallocs", "dev mallocs", col_kind::count},
          {"seconds", "time", col_kind::seconds},
          {"replayed", "replayed", col_kind::count, false},
          {"skipped_frees", "skipped frees", col_kind::count, false},
          {"leak_check", "leak check", col_kind::text},
          {"error", "error", col_kind::text},
          estimate_column()};
}

std::vector<cell> replay_row(const std::string& backend, const std::string& config, const replay_outcome& o,
                             double seconds) {
  const replay_result& r = o.result;
  if (!o.error.empty()) return {backend, config, {}, {}, {}, {}, {}, {}, {}, {}, o.leak, o.error};
  const double ratio = r.peak_allocated > 0 ? static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated) : 0.0;
  return {backend, config, static_cast<std::int64_t>(r.peak_requested), static_cast<std::int64_t>(r.peak_allocated),
          static_cast<std::int64_t>(r.peak_reserved), ratio, r.device_mallocs, seconds,
          static_cast<std::int64_t>(r.replayed), static_cast<std::int64_t>(r.skipped_frees), o.leak, o.error,
          estimate_cell(o.estimate)};
}

}  // namespace

int cmd_replay(const args_t& args) {
  common_options opts;
  std::string trace_path;
  std::size_t points = 2000;
  po::options_description desc("replay options");
  desc.add_options()("trace", po::value(&trace_path)->value_name("FILE"), "trace file (CSV, or .gz)")
      ("plot-points", po::value(&points)->default_value(points), "stats samples per backend for --plot");
  add_common_options(desc, opts, {.plot = true});
  const auto vm = parse_command(args, "usage: streampool-bench replay --trace FILE [options]\n\n"
                                      "Replays an allocation trace (format: shared/traces/README.md) through each "
                                      "backend.\nTimes are the median of --repeat replays (default 1).",
                                desc, nullptr, &opts);
  if (!vm) return exit_ok;
  const driver_choice choice = choose_driver(opts);
  const std::vector<backend_spec> backends = selected_backends(opts.backends, choice);
  const std::vector<trace_event> events = load_trace(trace_path, opts);
  const int repeat = opts.repeat != 0 ? opts.repeat : 1;

  report out;
  out.command = "replay";
  add_run_meta(out, choice, opts);
  out.meta.emplace_back("trace", trace_path);
  out.meta.emplace_back("trace_events", static_cast<std::int64_t>(events.size()));
  table& t = out.tables.emplace_back();
  t.columns = replay_columns();
  line_chart chart{"reserved (solid) and allocated (dashed) during " + trace_path, "trace event", "MiB", {}};

  int status = exit_ok;
  progress_line progress(opts.quiet);
  replay_result recorded;
  bool estimates_noted = false;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const backend_spec& spec = backends[b];
    std::vector<double> times;
    replay_outcome o;
    for (int i = 0; i < repeat && o.error.empty(); ++i) {
      const driver_instance inst = make_driver(choice);
      const std::string label = "replay: " + spec.label() + " (" + std::to_string(b + 1) + "/" +
                                std::to_string(backends.size()) + ")";
      o = run_replay([&](const driver_instance& d) { return make_backend(spec, d.drv); }, inst,
                     events, opts.plot.empty() || i > 0 ? 0 : points, [&](std::size_t done, std::size_t all) {
                       progress.update(label + " " + std::to_string(done * 100 / std::max<std::size_t>(all, 1)) + "%");
                     });
      times.push_back(o.result.seconds);
      if (i == 0 && !o.samples.empty()) {
        line_series reserved{spec.label() + " reserved", static_cast<int>(b), false, {}};
        line_series allocated{spec.label() + " allocated", static_cast<int>(b), true, {}};
        for (const replay_sample& s : o.samples) {
          reserved.points.emplace_back(s.event, s.reserved / 1048576.0);
          allocated.points.emplace_back(s.event, s.allocated / 1048576.0);
        }
        chart.series.push_back(std::move(reserved));
        chart.series.push_back(std::move(allocated));
      }
    }
    std::sort(times.begin(), times.end());
    if (!o.error.empty() || o.leak != "ok") status = exit_failed;
    if (o.error.empty()) recorded = o.result;
    t.rows.push_back(replay_row(spec.name, spec.config_label(), o, times[times.size() / 2]));
    if (o.estimate && !estimates_noted) out.notes.push_back(estimate_note());
    estimates_noted = estimates_noted || o.estimate;
  }
  progress.finish();

  // What PyTorch itself reserved in the recorded run: the sum of the trace's segment_alloc sizes.
  if (recorded.recorded_segment_events > 0) {
    t.rows.push_back({std::string("pytorch (recorded)"), std::string("as recorded"),
                      static_cast<std::int64_t>(recorded.peak_requested), cell(),
                      static_cast<std::int64_t>(recorded.recorded_segment_bytes), cell(),
                      static_cast<std::int64_t>(recorded.recorded_segment_events), cell(), cell(), cell(),
                      std::string("-"), std::string()});
    out.meta.emplace_back("recorded_segment_bytes", static_cast<std::int64_t>(recorded.recorded_segment_bytes));
    out.notes.push_back("trace: " + trace_path + ", " + std::to_string(events.size()) + " events; PyTorch reserved " +
                        mib_text(static_cast<double>(recorded.recorded_segment_bytes)) + " MiB in " +
                        std::to_string(recorded.recorded_segment_events) +
                        " segment allocations while recording (row 'pytorch (recorded)')");
  }
  if (!opts.plot.empty()) write_file(opts.plot, render_svg(chart), "--plot");
  emit(out, opts);
  return status;
}

}  // namespace streampool::bench
