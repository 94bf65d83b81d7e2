// cmd_compare.cpp — `streampool-bench compare`, the README's main command: a short run (a few
// seconds) of every backend and peer available — pair latency at a few sizes, aggregate pairs/s
// with several threads, and the random workload — in one table; peers that cannot run here (not
// built, not on this driver, no --torch-peer) are named in one line, by reason (unavailable_summary).
// --plot draws the latency bar chart.
//
// Note [The first screen]
// `compare` is the README's first command (scripts/bench), so its text output is what a new user
// reads first. It was a 152-column table in which 6 of 10 rows said "unavailable (see notes)",
// below six notes of up to 221 characters each. Now the entries that cannot run here are one note
// grouped by reason (the reasons in full: JSON meta `unavailable`), the table has the rows that ran
// and fits about 110 columns (the random workload's time is in JSON/CSV only), and notes are
// wrapped at 110 columns (report.hpp, text_width).
#include "backend_registry.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "isolated_run.hpp"
#include "latency.hpp"
#include "report.hpp"
#include "sim_pool_estimate.hpp"
#include "size_parse.hpp"
#include "svg_plot.hpp"
#include "workloads.hpp"

namespace streampool::bench {

int cmd_compare(const args_t& args) {
  common_options opts;
  std::string sizes_text = "512,1MiB,64MiB";
  bool quick = false;
  int threads = 4;
  po::options_description desc("compare options");
  desc.add_options()("sizes", po::value(&sizes_text)->value_name("LIST")->default_value(sizes_text),
                     "latency sizes")("threads", po::value(&threads)->default_value(threads),
                                      "threads of the aggregate pairs/s column (1 MiB pairs)")
      ("quick", po::bool_switch(&quick), "smallest run (a smoke test: well under a second per backend)");
  add_common_options(desc, opts, {.plot = true, .in_process = true});
  const auto vm = parse_command(args, "usage: streampool-bench compare [options]\n\n"
                                      "A short comparison of every backend and peer available: latency per size, "
                                      "aggregate\npairs/s with --threads threads, and the random workload. Each backend runs in a child "
                                      "process\n(a crash costs its row only) unless --in-process is given.",
                                desc, nullptr, &opts);
  if (!vm) return exit_ok;
  const std::vector<std::size_t> sizes = parse_size_list(sizes_text);
  if (threads < 1 || threads > 256) throw usage_error("--threads: must be in 1..256");
  const driver_choice choice = choose_driver(opts);
  const std::vector<backend_spec> backends = selected_backends(opts.backends, choice);

  latency_params lat;
  lat.depth = 8;
  lat.iterations = quick ? 200 : 5000;
  lat.repeat = opts.repeat != 0 ? opts.repeat : (quick ? 1 : 3);
  lat.batch_budget = quick ? 0.01 : 0.1;
  workload_params work;
  work.seed = opts.seed;
  work.count = quick ? 300 : 3000;
  const workload_def& random = find_workload("random");

  report out;
  out.command = "compare";
  add_run_meta(out, choice, opts);
  table& t = out.tables.emplace_back();
  t.columns = {{"backend", "backend", col_kind::text}, {"config", "config", col_kind::text}};
  for (const std::size_t size : sizes) {
    t.columns.push_back({"ns_per_pair_" + size_label(size), size_label(size), col_kind::ns});
  }
  t.columns.push_back({"pairs_per_second_1MiB_x" + std::to_string(threads), "1MiB x" + std::to_string(threads),
                       col_kind::rate});
  // Note [The first screen]: the workload's time is in JSON/CSV only; the titles stay short.
  t.columns.push_back({"random_seconds", "random", col_kind::seconds, /*in_table=*/false});
  t.columns.push_back({"random_peak_allocated_bytes", "alloc", col_kind::bytes});
  t.columns.push_back({"random_peak_reserved_bytes", "resv", col_kind::bytes});
  t.columns.push_back({"random_device_mallocs", "mallocs", col_kind::count});
  t.columns.push_back({"status", "status", col_kind::text});
  bar_chart chart{"alloc+free pair latency, 1 thread (" + std::string(choice.name()) + " driver)", "ns per pair", {}, {}, {}, false, plot_caveat(choice)};
  for (const std::size_t size : sizes) chart.groups.push_back(size_label(size));

  int exit_status = exit_ok;
  progress_line progress(opts.quiet);
  const bool children = child_rows_enabled() && !opts.in_process;  // Note [Rows in child processes]
  for (const backend_spec& spec : backends) {
    if (children) {
      progress.update("compare: " + spec.label());
      child_outcome child = run_in_child("compare", args, backend_argument(spec.name, spec.config_text));
      std::vector<double> bars(sizes.size(), 0.0);
      if (!child.failure.empty()) {
        std::vector<cell> row = {spec.name, spec.config_label()};
        row.resize(t.columns.size() - 1);
        row.push_back(child.failure);
        t.rows.push_back(std::move(row));
        exit_status = exit_failed;
      } else {
        if (child.got.status != exit_ok) exit_status = exit_failed;
        for (auto& row : child.got.rows) t.rows.push_back(std::move(row));
        for (const line_series& s : child.got.series) {
          for (const auto& [group, value] : s.points) {
            if (group >= 0 && static_cast<std::size_t>(group) < bars.size()) bars[static_cast<std::size_t>(group)] = value;
          }
        }
      }
      chart.series.push_back(spec.label());
      chart.values.push_back(bars);
      continue;
    }
    crash_if_asked(spec.name);  // the harness's own test of Note [Rows in child processes]
    std::vector<cell> row = {spec.name, spec.config_label()};
    std::string status = "ok";
    auto note_failure = [&](const std::string& what, const std::string& leak, const std::string& error) {
      if (!error.empty() && status == "ok") status = what + ": " + error;
      if (error.empty() && leak != "ok" && status == "ok") status = what + ": " + leak;
    };
    std::vector<double> bars;
    for (const std::size_t size : sizes) {
      progress.update("compare: " + spec.label() + " latency " + size_label(size));
      lat.size = size;
      lat.threads = 1;
      const latency_result r = measure_latency(spec, choice, lat);
      note_failure("latency " + size_label(size), r.leak, r.error);
      row.push_back(r.error.empty() ? cell(r.ns_per_pair) : cell());
      bars.push_back(r.error.empty() ? r.ns_per_pair : 0.0);
    }
    progress.update("compare: " + spec.label() + " threads");
    lat.size = std::size_t{1} << 20;
    lat.threads = threads;
    const latency_result mt = measure_latency(spec, choice, lat);
    note_failure("threads", mt.leak, mt.error);
    row.push_back(mt.error.empty() ? cell(mt.pairs_per_second) : cell());
    progress.update("compare: " + spec.label() + " random workload");
    const workload_result w = run_workload(random, spec, choice, work);
    note_failure("random", w.leak, w.error);
    if (w.error.empty()) {
      row.insert(row.end(), {w.seconds, static_cast<std::int64_t>(w.peak_allocated),
                             static_cast<std::int64_t>(w.peak_reserved), w.device_mallocs});
    } else {
      row.insert(row.end(), {cell(), cell(), cell(), cell()});
    }
    if (status != "ok") exit_status = exit_failed;
    row.push_back(status);
    t.rows.push_back(std::move(row));
    chart.series.push_back(spec.label());
    chart.values.push_back(bars);
  }
  progress.finish();
  if (is_row_child()) {  // a row's child process: the parent prints the report
    child_rows rows{std::move(t.rows), {}, exit_status};
    for (const std::vector<double>& bars : chart.values) {
      line_series& s = rows.series.emplace_back();
      for (std::size_t g = 0; g < bars.size(); ++g) s.points.emplace_back(static_cast<double>(g), bars[g]);
    }
    send_to_parent(rows);
    return exit_status;
  }
  out.notes.push_back("columns: ns per alloc+free pair (1 thread, depth " + std::to_string(lat.depth) + ", median of " +
                      std::to_string(lat.repeat) + " batches), 1 MiB pairs/s with " + std::to_string(threads) +
                      " threads; the random workload's peak allocated (alloc), reserved (resv) and device mallocs (" +
                      std::to_string(work.count) + " allocations up to 64 MiB, seed " + std::to_string(opts.seed) + ")");
  if (opts.backends.empty()) {
    const auto missing = unavailable_backends(choice);
    if (!missing.empty()) {
      out.notes.push_back(unavailable_summary(missing));
      std::string full;
      for (const auto& [name, why] : missing) full += (full.empty() ? "" : " | ") + name + ": " + why;
      out.meta.emplace_back("unavailable", full);
    }
  }
  if (!opts.plot.empty()) write_file(opts.plot, render_svg(chart), "--plot");
  mark_sim_pool_rows(out, t, choice);
  emit(out, opts);
  return exit_status;
}

}  // namespace streampool::bench
