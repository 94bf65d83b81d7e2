// cmd_latency.cpp — `streampool-bench latency`: alloc+free pair latency (median ns per pair) and
// aggregate pairs/s for every backend x size x thread count, each thread on its own stream, with a
// live set of --depth blocks per thread (see Note [Timing alloc+free pairs] in latency.cpp). The
// pinned host allocators (pinned, cudaHostAlloc, torch-pinned) get the same pair rows plus a second
// table: their cold first allocation and the copy loop (Note [Host latency runs], host_latency.cpp).
#include "cli_common.hpp"
#include "commands.hpp"
#include "host_latency.hpp"
#include "host_peers.hpp"
#include "isolated_run.hpp"
#include "latency.hpp"
#include "report.hpp"
#include "size_parse.hpp"
#include "svg_plot.hpp"

#include <algorithm>

namespace streampool::bench {

int cmd_latency(const args_t& args) {
  common_options opts;
  std::string sizes_text = "512,1MiB,64MiB", threads_text = "1,2,4,8";
  latency_params params;
  bool no_copy_loop = false;
  po::options_description desc("latency options");
  desc.add_options()
      ("sizes", po::value(&sizes_text)->value_name("LIST")->default_value(sizes_text), "request sizes (B/KiB/MiB/GiB)")
      ("depth", po::value(&params.depth)->default_value(params.depth), "blocks each thread keeps live while pairs run")
      ("threads", po::value(&threads_text)->value_name("LIST")->default_value(threads_text),
       "thread counts; each thread allocates on its own stream")
      ("iterations", po::value(&params.iterations)->default_value(params.iterations),
       "pairs per thread per repeat (fewer when one batch would exceed --batch-seconds)")
      ("batch-seconds", po::value(&params.batch_budget)->default_value(params.batch_budget),
       "time budget of one timed batch")
      ("streams-per-thread", po::value(&params.streams_per_thread)->default_value(params.streams_per_thread),
       "streams each thread cycles through, one pair each (> 1: every pair reuses a block freed on another "
       "stream; with cross_stream_reuse:True that is the cost of a cross-stream reuse)")
      ("no-copy-loop", po::bool_switch(&no_copy_loop),
       "pinned host allocators: skip the copy loop (cold allocation and pairs only)");
  add_common_options(desc, opts, {.plot = true, .in_process = true});
  const auto vm = parse_command(args, "usage: streampool-bench latency [options]\n\n"
                                      "Cache-hit alloc+free pair latency (median over --repeat batches, default 5) and\n"
                                      "aggregate pairs/s, per backend x size x threads. Pinned host allocators\n"
                                      "(--backends pinned[=CONFIG],cudaHostAlloc,torch-pinned) also report their\n"
                                      "cold first allocation and a host-to-device copy loop.",
                                desc, nullptr, &opts);
  if (!vm) return exit_ok;
  const std::vector<std::size_t> sizes = parse_size_list(sizes_text);
  const std::vector<int> thread_counts = parse_count_list(threads_text, "--threads", 256);
  if (params.depth < 0 || params.depth > 100000) throw usage_error("--depth: must be in 0..100000");
  if (params.iterations < 1) throw usage_error("--iterations: must be at least 1");
  if (params.streams_per_thread < 1 || params.streams_per_thread > 64) {
    throw usage_error("--streams-per-thread: must be in 1..64");
  }
  if (!(params.batch_budget > 0.0)) throw usage_error("--batch-seconds: must be positive");
  params.repeat = opts.repeat != 0 ? opts.repeat : 5;
  const driver_choice choice = choose_driver(opts);
  const std::vector<backend_spec> backends = selected_backends(opts.backends, choice, /*host_backends=*/true);

  report out;
  out.command = "latency";
  add_run_meta(out, choice, opts);
  out.tables.reserve(2);  // t and host_table below are references into it
  table& t = out.tables.emplace_back();
  t.columns = {{"backend", "backend", col_kind::text},       {"config", "config", col_kind::text},
               {"size", "size", col_kind::text},             {"size_bytes", "size_bytes", col_kind::count, false},
               {"threads", "threads", col_kind::count},      {"depth", "depth", col_kind::count},
               {"iterations", "iters", col_kind::count},     {"ns_per_pair", "per pair", col_kind::ns},
               {"pairs_per_second", "pairs", col_kind::rate}, {"timed_device_mallocs", "dev mallocs", col_kind::count},
               {"leak_check", "leak check", col_kind::text}, {"error", "error", col_kind::text}};
  table& host_table = out.tables.emplace_back();
  host_table.name = "pinned_host";
  host_table.title = "pinned host allocators: cold first allocation, and the copy loop (alloc, cudaMemcpyAsync "
                     "host-to-device, record_stream, free while the copy is in flight)";
  host_table.columns = {{"backend", "backend", col_kind::text},
                        {"config", "config", col_kind::text},
                        {"size", "size", col_kind::text},
                        {"size_bytes", "size_bytes", col_kind::count, false},
                        {"threads", "threads", col_kind::count},
                        {"cold_alloc_us", "cold alloc us", col_kind::count},
                        {"copy_ns_per_iteration", "copy loop/iter", col_kind::ns},
                        {"copy_gb_per_s", "copy GB/s", col_kind::ratio},
                        {"copy_driver_allocations", "pinned allocs", col_kind::count},
                        {"error", "error", col_kind::text}};
  bar_chart chart{"alloc+free pair latency (" + std::string(choice.name()) + " driver)", "ns per pair", {}, {}, {}, false, plot_caveat(choice)};
  for (const backend_spec& spec : backends) chart.series.push_back(spec.label());
  chart.values.assign(backends.size(), {});

  int status = exit_ok;
  progress_line progress(opts.quiet);
  // Pinned host backends fill a second table that child rows do not carry back: a run that names
  // one measures every row in this process.
  const bool any_host = std::any_of(backends.begin(), backends.end(),
                                    [](const backend_spec& spec) { return is_host_backend(spec.name); });
  if (child_rows_enabled() && !opts.in_process && !any_host) {  // Note [Rows in child processes]
    // One child per backend measures every size x thread count; its rows are interleaved back
    // into the table's order (size, threads, backend).
    const std::size_t cases = sizes.size() * thread_counts.size();
    std::vector<std::vector<std::vector<cell>>> rows(backends.size());
    for (std::size_t b = 0; b < backends.size(); ++b) {
      progress.update("latency: " + backends[b].label() + " (" + std::to_string(b + 1) + "/" +
                      std::to_string(backends.size()) + ")");
      child_outcome child = run_in_child("latency", args, backend_argument(backends[b].name, backends[b].config_text));
      chart.values[b].assign(cases, 0.0);
      if (child.failure.empty() && child.got.rows.size() == cases) {
        if (child.got.status != exit_ok) status = exit_failed;
        rows[b] = std::move(child.got.rows);
        for (const line_series& s : child.got.series) {
          for (const auto& [k, value] : s.points) {
            if (k >= 0 && static_cast<std::size_t>(k) < cases) chart.values[b][static_cast<std::size_t>(k)] = value;
          }
        }
        continue;
      }
      status = exit_failed;
      const std::string why = child.failure.empty() ? "the child sent no rows" : child.failure;
      for (const std::size_t size : sizes) {
        for (const int threads : thread_counts) {
          rows[b].push_back({backends[b].name, backends[b].config_label(), size_label(size),
                             static_cast<std::int64_t>(size), std::int64_t{threads}, std::int64_t{params.depth}, cell(),
                             cell(), cell(), cell(), std::string("-"), why});
        }
      }
    }
    for (const std::size_t size : sizes) {
      for (const int threads : thread_counts) {
        chart.groups.push_back(size_label(size) + (thread_counts.size() > 1 ? " x" + std::to_string(threads) : ""));
      }
    }
    for (std::size_t k = 0; k < cases; ++k) {
      for (std::size_t b = 0; b < backends.size(); ++b) t.rows.push_back(std::move(rows[b][k]));
    }
    progress.finish();
    out.tables.pop_back();  // no host backend: the pinned_host table stays empty
    if (!opts.plot.empty()) write_file(opts.plot, render_svg(chart), "--plot");
    emit(out, opts);
    return status;
  }
  const std::size_t total = backends.size() * sizes.size() * thread_counts.size();
  std::size_t done = 0;
  for (const std::size_t size : sizes) {
    for (const int threads : thread_counts) {
      chart.groups.push_back(size_label(size) + (thread_counts.size() > 1 ? " x" + std::to_string(threads) : ""));
      for (std::size_t b = 0; b < backends.size(); ++b) {
        crash_if_asked(backends[b].name);  // the harness's own test of Note [Rows in child processes]
        progress.update("latency: " + backends[b].label() + " " + size_label(size) + " x" + std::to_string(threads) +
                        " (" + std::to_string(++done) + "/" + std::to_string(total) + ")");
        params.size = size;
        params.threads = threads;
        const bool host = is_host_backend(backends[b].name);
        host_latency_result h;
        if (host) h = measure_host_latency(backends[b], choice, params, !no_copy_loop);
        const latency_result r = host ? h.pairs : measure_latency(backends[b], choice, params);
        if (host) {
          const bool copy_ok = h.copy_error.empty() && r.error.empty();
          if (!copy_ok) status = exit_failed;
          host_table.rows.push_back({backends[b].name, backends[b].config_label(), size_label(size),
                                     static_cast<std::int64_t>(size), std::int64_t{threads},
                                     r.error.empty() ? cell(static_cast<std::int64_t>(h.cold_alloc_us)) : cell(),
                                     copy_ok && !no_copy_loop ? cell(h.copy_ns_per_iter) : cell(),
                                     copy_ok && !no_copy_loop ? cell(h.copy_gb_per_s) : cell(),
                                     copy_ok && !no_copy_loop ? cell(h.copy_driver_allocations) : cell(),
                                     h.copy_error.empty() ? r.error : h.copy_error});
        }
        const bool ok = r.error.empty();
        if (!ok || r.leak != "ok") status = exit_failed;
        t.rows.push_back({backends[b].name, backends[b].config_label(), size_label(size),
                          static_cast<std::int64_t>(size), std::int64_t{threads}, std::int64_t{params.depth},
                          std::int64_t{r.iterations}, ok ? cell(r.ns_per_pair) : cell(),
                          ok ? cell(r.pairs_per_second) : cell(), r.timed_device_mallocs, r.leak, r.error});
        chart.values[b].push_back(ok ? r.ns_per_pair : 0.0);
      }
    }
  }
  progress.finish();
  if (is_row_child()) {  // a row's child process: the parent prints the report
    child_rows sent{std::move(t.rows), {}, status};
    line_series& bars = sent.series.emplace_back();
    for (std::size_t k = 0; k < chart.values[0].size(); ++k) bars.points.emplace_back(static_cast<double>(k), chart.values[0][k]);
    send_to_parent(sent);
    return status;
  }
  if (host_table.rows.empty()) out.tables.pop_back();
  if (!opts.plot.empty()) write_file(opts.plot, render_svg(chart), "--plot");
  emit(out, opts);
  return status;
}

}  // namespace streampool::bench
