// cmd_workload.cpp — `streampool-bench workload NAME`: runs a synthetic workload (random,
// multistream, trainloop, graphloop) on each backend and reports time, peak requested / allocated /
// reserved, their ratio and device mallocs (graphloop also replays and time per replay). A backend
// the workload does not support gets a row saying why, which is not a failure.
#include <algorithm>

#include "cli_common.hpp"
#include "commands.hpp"
#include "report.hpp"
#include "sim_pool_estimate.hpp"
#include "size_parse.hpp"
#include "workloads.hpp"

namespace streampool::bench {
namespace {

std::string workload_help() {
  std::string text = "usage: streampool-bench workload NAME [options]\n\nworkloads:\n";
  for (const workload_def& def : workload_list()) {
    text += "  " + def.name + ": " + (def.run != nullptr ? def.description : def.unavailable_reason) + "\n";
  }
  return text + "Times are the median of --repeat runs (default 1); memory figures are the last run's.";
}

std::vector<column> workload_columns(bool graphloop) {
  std::vector<column> columns = {{"backend", "backend", col_kind::text},
          {"config", "config", col_kind::text},
          {"workload", "workload", col_kind::text},
          {"seconds", "time", col_kind::seconds},
          {"ops", "ops", col_kind::count},
          {"ns_per_op", "per op", col_kind::ns},
          {"peak_requested_bytes", "peak req", col_kind::bytes},
          {"peak_allocated_bytes", "peak alloc", col_kind::bytes},
          {"peak_reserved_bytes", "peak resv", col_kind::bytes},
          {"reserved_over_allocated", "resv/alloc", col_kind::ratio},
          {"device_mallocs", "dev mallocs", col_kind::count},
          {"leak_check", "leak check", col_kind::text},
          {"error", "error", col_kind::text}};
  if (graphloop) {
    columns.insert(columns.begin() + 6, {{"replays", "replays", col_kind::count},
                                         {"ns_per_replay", "per replay", col_kind::ns}});
  }
  return columns;
}

std::vector<cell> workload_row(const backend_spec& spec, const std::string& name, const workload_result& r, bool graphloop) {
  std::vector<cell> row;
  if (!r.unsupported.empty() || !r.error.empty()) {
    row = {spec.name, spec.config_label(), name, {}, {}, {}, {}, {}, {}, {}, {}, r.leak,
           r.unsupported.empty() ? r.error : "unsupported for " + name + ": " + r.unsupported};
  } else {
    const double ratio = r.peak_allocated > 0 ? static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated) : 0.0;
    row = {spec.name,
           spec.config_label(),
           name,
           r.seconds,
           r.ops,
           r.ops > 0 ? r.seconds * 1e9 / static_cast<double>(r.ops) : 0.0,
           static_cast<std::int64_t>(r.peak_requested),
           static_cast<std::int64_t>(r.peak_allocated),
           static_cast<std::int64_t>(r.peak_reserved),
           ratio,
           r.device_mallocs,
           r.leak,
           r.error};
  }
  if (graphloop) {
    const bool ran = r.unsupported.empty() && r.error.empty();
    row.insert(row.begin() + 6, {ran ? cell(r.replays) : cell(), ran ? cell(r.seconds_per_replay * 1e9) : cell()});
  }
  return row;
}

}  // namespace

int cmd_workload(const args_t& args) {
  common_options opts;
  std::string name, max_size_text, live_cap_text = "16000MiB";
  workload_params params;
  // Whole numbers are read as text and checked here: Boost would take "-5" for an unsigned
  // option as 2^64 - 5, and report an out-of-range value with the whole input quoted.
  std::string count_text, steps_text, streams_text = std::to_string(params.streams);
  std::string layers_text = std::to_string(params.layers), hidden_text = std::to_string(params.hidden);
  std::string graphs_text = std::to_string(params.graphs);
  po::options_description desc("workload options");
  desc.add_options()
      ("name", po::value(&name), "workload (positional)")
      ("count", po::value(&count_text)->value_name("N"),
       "random: allocations (10000); multistream: buffers per step (16); graphloop: buffers per step (8); "
       "1..10000000")
      ("max-size", po::value(&max_size_text)->value_name("SIZE"), "largest request (random 64MiB, multistream 16MiB, graphloop 64MiB)")
      ("live-cap", po::value(&live_cap_text)->value_name("SIZE")->default_value(live_cap_text),
       "random: cap on live bytes")
      ("steps", po::value(&steps_text)->value_name("N"),
       "multistream: steps (200); trainloop: training steps (20); graphloop: replays (100); 1..10000000")
      ("streams", po::value(&streams_text)->value_name("N")->default_value(streams_text),
       "multistream: 1 producer + consumers; 2..1024")
      ("layers", po::value(&layers_text)->value_name("N")->default_value(layers_text), "trainloop: layers; 1..1024")
      ("hidden", po::value(&hidden_text)->value_name("N")->default_value(hidden_text),
       "trainloop: model width; 16..65536")
      ("graphs", po::value(&graphs_text)->value_name("N")->default_value(graphs_text),
       "graphloop: graphs captured (shape buckets) sharing one pool; 1..64");
  add_common_options(desc, opts, {});
  po::positional_options_description positional;
  positional.add("name", 1);
  const auto vm = parse_command(args, workload_help(), desc, &positional, &opts);
  if (!vm) return exit_ok;
  if (name.empty()) throw usage_error("name a workload (see --help): random, multistream, trainloop, graphloop");
  const workload_def& def = find_workload(name);
  if (!max_size_text.empty()) params.max_size = parse_size(max_size_text, "--max-size");
  params.live_cap = parse_size(live_cap_text, "--live-cap");
  if (!count_text.empty()) params.count = static_cast<std::size_t>(parse_whole(count_text, "--count", 1, 10000000));
  if (!steps_text.empty()) params.steps = static_cast<int>(parse_whole(steps_text, "--steps", 1, 10000000));
  params.streams = static_cast<int>(parse_whole(streams_text, "--streams", 2, 1024));
  params.layers = static_cast<int>(parse_whole(layers_text, "--layers", 1, 1024));
  params.hidden = static_cast<int>(parse_whole(hidden_text, "--hidden", 16, 65536));
  params.graphs = static_cast<int>(parse_whole(graphs_text, "--graphs", 1, 64));
  params.seed = opts.seed;
  validate_workload(def, params);  // once, before any backend runs
  const int repeat = opts.repeat != 0 ? opts.repeat : 1;
  const driver_choice choice = choose_driver(opts);
  const std::vector<backend_spec> backends = selected_backends(opts.backends, choice);

  report out;
  out.command = "workload";
  add_run_meta(out, choice, opts);
  out.meta.emplace_back("workload", name);
  table& t = out.tables.emplace_back();
  const bool graphloop = name == "graphloop";
  t.columns = workload_columns(graphloop);
  int status = exit_ok;
  progress_line progress(opts.quiet);
  for (const backend_spec& spec : backends) {
    std::vector<double> times;
    workload_result r;
    for (int i = 0; i < repeat && r.error.empty() && r.unsupported.empty(); ++i) {
      progress.update("workload " + name + ": " + spec.label() + " run " + std::to_string(i + 1) + "/" +
                      std::to_string(repeat));
      r = run_workload(def, spec, choice, params);
      times.push_back(r.seconds);
    }
    std::sort(times.begin(), times.end());
    r.seconds = times[times.size() / 2];
    if (r.unsupported.empty() && (!r.error.empty() || r.leak != "ok")) status = exit_failed;
    t.rows.push_back(workload_row(spec, name, r, graphloop));
  }
  progress.finish();
  mark_sim_pool_rows(out, t, choice);
  emit(out, opts);
  return status;
}

}  // namespace streampool::bench
