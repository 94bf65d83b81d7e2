// cmd_tune.cpp — `streampool-bench tune --trace FILE`: replays the trace on a simulated device
// under candidate configs, ranks them by peak reserved memory and prints the recommended
// STREAMPOOL_ALLOC_CONF line. Configs whose backend fails (not implemented, OOM) are reported as
// such. Replays of different configs run in parallel (--jobs), each on its own simulated device.
#include <algorithm>
#include <future>
#include <thread>

#include "cli_common.hpp"
#include "commands.hpp"
#include "replay_run.hpp"
#include "report.hpp"
#include "sim_pool_estimate.hpp"
#include "size_parse.hpp"
#include "streampool/errors.hpp"

namespace streampool::bench {
namespace {

const std::vector<std::string> default_candidates = {
    "",
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:256",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:8",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "max_split_size_mb:256,roundup_power2_divisions:8",
    "backend:cudaMallocAsync",
};

struct candidate {
  std::size_t index = 0;
  std::string text;
  allocator_config config;
  replay_outcome outcome;
};

/// The shell line, quoted when the text holds characters a shell would interpret.
std::string env_line(const std::string& text) {
  const bool plain = text.find_first_of("[]>*?;&|<$ '\"") == std::string::npos;
  return "STREAMPOOL_ALLOC_CONF=" + (plain ? text : "'" + text + "'");
}

}  // namespace

int cmd_tune(const args_t& args) {
  common_options opts;
  opts.driver = "sim";
  std::vector<std::string> configs;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  po::options_description desc("tune options");
  std::string trace_path;
  desc.add_options()("trace", po::value(&trace_path)->value_name("FILE"), "trace file (CSV, or .gz)")
      ("config", po::value(&configs)->value_name("CONF")->composing(),
       "a candidate config (repeat the option); replaces the default candidates")
      ("jobs", po::value(&jobs)->default_value(jobs), "replays run in parallel");
  add_common_options(desc, opts, {.backends = false, .driver = false, .repeat = false, .seed = false});
  std::string help = "usage: streampool-bench tune --trace FILE [options]\n\n"
                     "Replays the trace on a simulated device under each candidate config and ranks them by\n"
                     "peak reserved memory. Default candidates:\n";
  for (const std::string& c : default_candidates) help += "  " + (c.empty() ? std::string("(default)") : c) + "\n";
  const auto vm = parse_command(args, help, desc, nullptr, &opts);
  if (!vm) return exit_ok;
  if (jobs < 1) throw usage_error("--jobs: must be at least 1");
  std::vector<candidate> candidates;
  for (const std::string& text : configs.empty() ? default_candidates : configs) {
    candidate c;
    c.index = candidates.size();
    c.text = text;
    try {
      c.config = parse_config(text);
    } catch (const config_error& e) {
      throw usage_error("--config '" + text + "': " + e.what());
    }
    candidates.push_back(std::move(c));
  }
  driver_choice choice = choose_driver(opts);
  choice.why = "tune replays on the sim driver";
  const std::vector<trace_event> events = load_trace(trace_path, opts);

  // Replays in parallel, at most `jobs` at a time; progress from this thread only.
  progress_line progress(opts.quiet);
  std::vector<std::future<void>> running;
  std::size_t next = 0, finished = 0;
  while (finished < candidates.size()) {
    while (next < candidates.size() && running.size() < jobs) {
      candidate& c = candidates[next++];
      running.push_back(std::async(std::launch::async, [&c, &choice, &events] {
        const driver_instance inst = make_driver(choice, true);
        c.outcome = run_replay([&c](const driver_instance& d) { return make_allocator(c.config, d.drv); }, inst,
                               events, 0, {});
      }));
    }
    for (auto it = running.begin(); it != running.end();) {
      if (it->wait_for(std::chrono::milliseconds(50)) == std::future_status::ready) {
        it->get();
        it = running.erase(it);
        ++finished;
      } else {
        ++it;
      }
    }
    progress.update("tune: " + std::to_string(finished) + "/" + std::to_string(candidates.size()) + " configs replayed");
  }
  progress.finish();

  std::vector<candidate*> ranked;
  for (candidate& c : candidates) ranked.push_back(&c);
  std::stable_sort(ranked.begin(), ranked.end(), [](const candidate* a, const candidate* b) {
    const bool a_ok = a->outcome.error.empty(), b_ok = b->outcome.error.empty();
    if (a_ok != b_ok) return a_ok;
    if (!a_ok) return false;
    if (a->outcome.result.peak_reserved != b->outcome.result.peak_reserved) {
      return a->outcome.result.peak_reserved < b->outcome.result.peak_reserved;
    }
    return a->outcome.result.device_mallocs < b->outcome.result.device_mallocs;
  });

  report out;
  out.command = "tune";
  add_run_meta(out, choice, opts);
  out.meta.emplace_back("trace", trace_path);
  out.meta.emplace_back("trace_events", static_cast<std::int64_t>(events.size()));
  table& t = out.tables.emplace_back();
  t.title = "candidate configs ranked by peak reserved (replayed on a simulated device)";
  t.columns = {{"rank", "rank", col_kind::count},
               {"config", "config", col_kind::text},
               {"backend", "backend", col_kind::text},
               {"peak_requested_bytes", "peak req", col_kind::bytes, false},
               {"peak_allocated_bytes", "peak alloc", col_kind::bytes},
               {"peak_reserved_bytes", "peak resv", col_kind::bytes},
               {"reserved_over_allocated", "resv/alloc", col_kind::ratio},
               {"device_mallocs", "dev mallocs", col_kind::count},
               {"seconds", "time", col_kind::seconds},
               {"status", "status", col_kind::text},
               estimate_column()};
  if (std::any_of(candidates.begin(), candidates.end(), [](const candidate& c) { return c.outcome.estimate; })) {
    out.notes.push_back(estimate_note());
  }
  std::int64_t rank = 0;
  for (const candidate* c : ranked) {
    const replay_outcome& o = c->outcome;
    const std::string label = c->text.empty() ? "(default)" : c->text;
    const std::string backend(to_string(c->config.backend));
    if (!o.error.empty()) {
      t.rows.push_back({cell(), label, backend, cell(), cell(), cell(), cell(), cell(), cell(), "failed: " + o.error});
      continue;
    }
    const replay_result& r = o.result;
    t.rows.push_back({++rank, label, backend, static_cast<std::int64_t>(r.peak_requested),
                      static_cast<std::int64_t>(r.peak_allocated), static_cast<std::int64_t>(r.peak_reserved),
                      r.peak_allocated > 0 ? static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated) : 0.0,
                      r.device_mallocs, r.seconds, o.leak == "ok" ? std::string("ok") : o.leak,
                      estimate_cell(o.estimate)});
  }
  int status = exit_ok;
  const candidate* best = ranked.front()->outcome.error.empty() ? ranked.front() : nullptr;
  if (best == nullptr) {
    out.footer.push_back("no candidate config replayed successfully");
    status = exit_failed;
  } else {
    const auto base = std::find_if(candidates.begin(), candidates.end(), [](const candidate& c) { return c.text.empty(); });
    std::string versus;
    if (base != candidates.end() && base->outcome.error.empty() && &*base != best) {
      const double saved = 1.0 - static_cast<double>(best->outcome.result.peak_reserved) /
                                     static_cast<double>(std::max<std::size_t>(1, base->outcome.result.peak_reserved));
      versus = " (peak reserved " + mib_text(static_cast<double>(best->outcome.result.peak_reserved)) + " MiB vs " +
               mib_text(static_cast<double>(base->outcome.result.peak_reserved)) + " MiB with the default: -" +
               fixed(saved * 100.0, 1) + "%)";
    }
    out.meta.emplace_back("recommended_config", best->text);
    out.meta.emplace_back("recommended_peak_reserved_error", estimate_cell(best->outcome.estimate));
    out.footer.push_back(best->text.empty() ? "recommended: the default config (leave STREAMPOOL_ALLOC_CONF unset)"
                                            : "recommended: " + env_line(best->text) + versus);
    std::vector<ranked_figure> figures;
    for (const candidate* c : ranked) {
      if (!c->outcome.error.empty()) continue;
      const std::string label = c->text.empty() ? "(default)" : c->text;
      figures.push_back({label, c->outcome.result.peak_reserved, c->outcome.estimate});
    }
    for (std::string& line : estimate_ranking_notes(figures)) out.footer.push_back(std::move(line));
  }
  emit(out, opts);
  return status;
}

}  // namespace streampool::bench
