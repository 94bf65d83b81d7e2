// cmd_replay.cpp — `streampool-bench replay --trace FILE`: replays a recorded allocation trace
// through each backend (replay_trace; on the sim driver delayed frees are replayed faithfully) and
// reports peak requested / allocated / reserved, reserved/allocated, device mallocs and time, next
// to what PyTorch's own allocator reserved in the recording. --plot draws reserved and allocated
// over the trace for every backend.
#include <algorithm>
#include <optional>

#include "backend_registry.hpp"
#include "cli_common.hpp"
#include "isolated_run.hpp"
#include "commands.hpp"
#include "replay_run.hpp"
#include "report.hpp"
#include "sim_pool_estimate.hpp"
#include "size_parse.hpp"
#include "svg_plot.hpp"
#include "trace_handoff.hpp"
#include "trace_input.hpp"

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
          {"cross_stream_reuses", "x-stream reuses", col_kind::count, false},
          {"cross_stream_waits", "x-stream waits", col_kind::count, false},
          {"moved_pages", "moved pages", col_kind::count, false},
          {"fence_host_waits", "fence host waits", col_kind::count, false},
          {"leak_check", "leak check", col_kind::text},
          {"error", "error", col_kind::text},
          estimate_column()};
}

std::vector<cell> replay_row(const std::string& backend, const std::string& config, const replay_outcome& o,
                             double seconds) {
  const replay_result& r = o.result;
  if (!o.error.empty()) {
    return {backend, config, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, o.leak, o.error, estimate_cell(false)};
  }
  const double ratio = r.peak_allocated > 0 ? static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated) : 0.0;
  return {backend, config, static_cast<std::int64_t>(r.peak_requested), static_cast<std::int64_t>(r.peak_allocated),
          static_cast<std::int64_t>(r.peak_reserved), ratio, r.device_mallocs, seconds,
          static_cast<std::int64_t>(r.replayed), static_cast<std::int64_t>(r.skipped_frees), r.cross_stream_reuses,
          r.cross_stream_waits, r.moved_pages, r.fence_host_waits, o.leak, o.error,
          estimate_cell(o.estimate)};
}

}  // namespace

int cmd_replay(const args_t& args) {
  common_options opts;
  std::string trace_path;
  std::size_t points = 2000;
  int device = 0;
  po::options_description desc("replay options");
  desc.add_options()("trace", po::value(&trace_path)->value_name("FILE"), trace_option_help)
      ("device", po::value(&device)->value_name("N")->default_value(0), device_option_help)
      ("plot-points", po::value(&points)->default_value(points), "stats samples per backend for --plot");
  add_common_options(desc, opts, {.plot = true, .in_process = true});
  po::positional_options_description positional;  // `replay FILE` is `replay --trace FILE`
  positional.add("trace", 1);
  const auto vm = parse_command(args, "usage: streampool-bench replay [--trace] FILE [options]\n\n"
                                      "Replays an allocation trace (CSV or a PyTorch memory snapshot; docs/trace-format.md) "
                                      "through each\nbackend. Times are the median of --repeat replays (default 1). Each "
                                      "backend runs in a child process\n(a crash costs its row only) unless "
                                      "--in-process is given.",
                                desc, &positional, &opts);
  if (!vm) return exit_ok;
  const driver_choice choice = choose_driver(opts);
  const std::vector<backend_spec> backends = selected_backends(opts.backends, choice);
  const trace_file input = load_trace_input(trace_path, device, opts);  // checked here, once
  const std::vector<trace_event>& events = input.events;
  const int repeat = opts.repeat != 0 ? opts.repeat : 1;

  report out;
  out.command = "replay";
  add_run_meta(out, choice, opts);
  out.meta.emplace_back("trace", trace_path);
  out.meta.emplace_back("trace_events", static_cast<std::int64_t>(events.size()));
  out.meta.emplace_back("trace_format", input.format);
  if (input.format != "csv") out.meta.emplace_back("trace_device", static_cast<std::int64_t>(device));
  for (const std::string& warning : input.warnings) out.notes.push_back("warning: " + warning);
  table& t = out.tables.emplace_back();
  t.columns = replay_columns();
  line_chart chart{"reserved (solid) and allocated (dashed) during " + trace_path, "trace event", "MiB", {},
                   plot_caveat(choice)};

  int status = exit_ok;
  progress_line progress(opts.quiet);
  const bool children = child_rows_enabled() && !opts.in_process;  // Note [Rows in child processes]
  std::optional<shared_trace> shared;  // Note [Children get the parsed trace]
  if (children) shared.emplace(events);
  bool estimates_noted = false;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const backend_spec& spec = backends[b];
    if (children) {
      progress.update("replay: " + spec.label() + " (" + std::to_string(b + 1) + "/" + std::to_string(backends.size()) + ")");
      child_outcome child = run_in_child("replay", args, backend_argument(spec.name, spec.config_text), shared->fd());
      if (!child.failure.empty()) {
        replay_outcome failed;
        failed.leak = "-";
        failed.error = child.failure;
        t.rows.push_back(replay_row(spec.name, spec.config_label(), failed, 0.0));
        status = exit_failed;
        continue;
      }
      if (child.got.status != exit_ok) status = exit_failed;
      for (auto& row : child.got.rows) t.rows.push_back(std::move(row));
      // The child marked its rows; the note above the table is the parent's (sim pool rows only).
      const bool estimate = choice.sim && (spec.name == "cudaMallocAsync" || spec.name == "async-raw");
      if (estimate && !estimates_noted) out.notes.push_back(estimate_note());
      estimates_noted = estimates_noted || estimate;
      for (line_series& series : child.got.series) {
        series.color = static_cast<int>(b);
        chart.series.push_back(std::move(series));
      }
      continue;
    }
    crash_if_asked(spec.name);  // the harness's own test of Note [Rows in child processes]
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
        line_series reserved{spec.label(), static_cast<int>(b), false, {}, true};  // one legend entry per backend
        line_series allocated{spec.label() + " allocated", static_cast<int>(b), true, {}, /*in_legend=*/false};
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
    t.rows.push_back(replay_row(spec.name, spec.config_label(), o, times[times.size() / 2]));
    if (o.estimate && !estimates_noted) out.notes.push_back(estimate_note());
    estimates_noted = estimates_noted || o.estimate;
  }
  progress.finish();
  if (is_row_child()) {  // a row's child process: the parent prints the report
    send_to_parent({std::move(t.rows), std::move(chart.series), status});
    return status;
  }

  // What PyTorch itself held in the recorded run: Note [PyTorch's recorded peak reserved] (replay_run.cpp).
  const recorded_run recorded = recorded_figures(events);
  if (recorded.has_segments()) {
    t.rows.push_back({std::string("pytorch (recorded)"), std::string("recorded peak"),
                      static_cast<std::int64_t>(recorded.peak_requested), cell(),
                      static_cast<std::int64_t>(recorded.peak_reserved), cell(),
                      static_cast<std::int64_t>(recorded.segment_allocs), cell(), cell(), cell(), cell(),
                      cell(), cell(), cell(), std::string("-"), std::string()});
    out.meta.emplace_back("recorded_peak_reserved_bytes", static_cast<std::int64_t>(recorded.peak_reserved));
    out.meta.emplace_back("recorded_segment_bytes", static_cast<std::int64_t>(recorded.segment_bytes));
    std::string how = std::to_string(recorded.segment_allocs) + " segment allocations";
    if (recorded.segment_frees > 0) how += ", " + std::to_string(recorded.segment_frees) + " frees";
    if (recorded.segment_maps > 0) {
      how += ", " + std::to_string(recorded.segment_maps) + " page maps, " + std::to_string(recorded.segment_unmaps) +
             " unmaps";
    }
    out.notes.push_back("trace: " + trace_path + ", " + std::to_string(events.size()) +
                        " events; PyTorch's recorded peak reserved: " +
                        mib_text(static_cast<double>(recorded.peak_reserved)) + " MiB (running total over " + how +
                        "; row 'pytorch (recorded)')");
  }
  if (!opts.plot.empty()) write_file(opts.plot, render_svg(chart), "--plot");
  emit(out, opts);
  return status;
}

}  // namespace streampool::bench
