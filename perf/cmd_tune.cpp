// cmd_tune.cpp — `streampool-bench tune --trace FILE`: replays the trace (CSV or a PyTorch memory
// snapshot) on a simulated device under candidate configs, ranks them by peak reserved memory and
// answers the PyTorch user first: the PYTORCH_CUDA_ALLOC_CONF line to paste (with the oldest
// PyTorch that accepts it) and its predicted peak reserved against the user's current config (the
// snapshot's allocator_settings, or --current). A best config with streampool-only keys gives the
// STREAMPOOL_ALLOC_CONF line, says why, and names the best stock-PyTorch one too. Configs whose
// backend fails (not implemented, OOM) are reported as such. Replays run in parallel (--jobs),
// each on its own simulated device.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <future>
#include <thread>

#include "cli_common.hpp"
#include "commands.hpp"
#include "replay_run.hpp"
#include "report.hpp"
#include "sim_pool_estimate.hpp"
#include "size_parse.hpp"
#include "streampool/errors.hpp"
#include "trace_input.hpp"

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
    // streampool-only (stock PyTorch rejects cross_stream_reuse): labelled so in the table, and
    // the answer then names the best stock-PyTorch config too (docs/cross-stream-reuse.md).
    "expandable_segments:True,cross_stream_reuse:True",
};

struct candidate {
  std::size_t index = 0;
  std::string text;
  allocator_config config;
  pytorch_compatibility pytorch;
  bool current = false;  ///< the user's current config
  replay_outcome outcome;
  [[nodiscard]] bool ok() const { return outcome.error.empty(); }
  [[nodiscard]] std::size_t reserved() const { return outcome.result.peak_reserved; }
};

/// What a candidate is ranked by: its peak reserved, or for a sim pool estimate the top of its
/// error band (Note [Ranking estimates]).
double ranking_figure(const candidate& c) {
  const double reserved = static_cast<double>(c.outcome.result.peak_reserved);
  return c.outcome.estimate ? reserved * (1.0 + sim_pool_peak_error) : reserved;
}

/// The shell line, quoted when the text holds characters a shell would interpret.
std::string env_line(const std::string& variable, const std::string& text) {
  const bool plain = text.find_first_of("[]>*?;&|<$ '\"") == std::string::npos;
  return variable + "=" + (plain ? text : "'" + text + "'");
}

/// "PyTorch >= 2.1", "PyTorch newer than 2.9", "any PyTorch".
std::string version_text(const pytorch_compatibility& c) {
  if (c.since.empty()) return "any PyTorch";
  if (c.since == "main") return "PyTorch newer than 2.9";
  return "PyTorch >= " + c.since;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Note [Long config texts]
// The current config comes from the snapshot, and nothing bounds what a file says: a snapshot
// whose allocator_settings string was megabytes long (issue 31) was copied into the table's row,
// which pads every other row to its width, into each "with your current config (...)" line and,
// when it did not parse, twice into the note (the text and the parser's message quoting it), so
// the output grew with the string times the rows. Where tune shows a config text it shows at most
// shown_whole characters (else the first shown_kept and its length; a line to paste shows the
// user's own config so too, since they have it), and a parser message its quotes shortened so and
// at most shown_message characters (its head and its tail, which names what was expected). The
// comparisons and JSON's current_config use the text itself. perf/tests/tune_long_settings_test.cpp.
constexpr std::size_t shown_whole = 160;
constexpr std::size_t shown_kept = 120;
constexpr std::size_t shown_message = 1500;  // the parser's longest message lists every key: ~800

std::string shown_config(const std::string& text) {
  if (text.size() <= shown_whole) return text;
  return text.substr(0, shown_kept) + "... (" + std::to_string(text.size()) + " characters)";
}

std::string shown_error(const std::string& quoting) {
  if (quoting.size() <= shown_message) return quoting;
  // The parser quotes the text it refused ('...'): a long quote is shortened as a config text is.
  std::string text;
  for (std::size_t pos = 0; pos < quoting.size();) {
    const std::size_t open = quoting.find('\'', pos);
    const std::size_t close = open == std::string::npos ? open : quoting.find('\'', open + 1);
    if (close == std::string::npos) {
      text += quoting.substr(pos);
      break;
    }
    text += quoting.substr(pos, open + 1 - pos) + shown_config(quoting.substr(open + 1, close - open - 1)) + "'";
    pos = close + 1;
  }
  if (text.size() <= shown_message) return text;
  const std::size_t head = shown_message / 3, tail = shown_message - head;
  return text.substr(0, head) + " ... (" + std::to_string(text.size() - head - tail) + " characters left out) ... " +
         text.substr(text.size() - tail);
}

/// The text without whitespace, to recognise the current config among the candidates.
std::string squeezed(std::string text) {
  std::erase_if(text, [](unsigned char c) { return std::isspace(c) != 0; });
  return text;
}

/// "A MiB vs B MiB with your current config (...): -D MiB (-P%)".
std::string versus_current(const candidate& best, const candidate& current, const std::string& current_label) {
  const double a = static_cast<double>(best.reserved()), b = static_cast<double>(current.reserved());
  const double delta = a - b;
  const std::string sign = delta < 0 ? "-" : "+";
  return "predicted peak reserved " + mib_text(a) + " MiB vs " + mib_text(b) + " MiB with your current config (" +
         current_label + "): " + sign + mib_text(std::fabs(delta)) + " MiB (" + sign +
         fixed(b > 0 ? std::fabs(delta) / b * 100.0 : 0.0, 1) + "%)";
}

}  // namespace

int cmd_tune(const args_t& args) {
  common_options opts;
  opts.driver = "sim";
  std::vector<std::string> configs;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  po::options_description desc("tune options");
  std::string trace_path;
  std::string current_text;
  int device = 0;
  desc.add_options()("trace", po::value(&trace_path)->value_name("FILE"), trace_option_help)
      ("device", po::value(&device)->value_name("N")->default_value(0), device_option_help)
      ("current", po::value(&current_text)->value_name("CONFIG"),
       "the config the traced run used (PYTORCH_CUDA_ALLOC_CONF syntax; \"\" = defaults); default: the "
       "snapshot's allocator_settings, else PyTorch's defaults")
      ("config", po::value(&configs)->value_name("CONF")->composing(),
       "a candidate config (repeat the option); replaces the default candidates")
      ("jobs", po::value(&jobs)->default_value(jobs), "replays run in parallel");
  add_common_options(desc, opts, {.backends = false, .driver = false, .repeat = false, .seed = false});
  std::string help = "usage: streampool-bench tune [--trace] FILE [options]\n\n"
                     "Replays the trace on a simulated device under each candidate config, ranks them by\n"
                     "peak reserved memory and prints the PYTORCH_CUDA_ALLOC_CONF line to paste (or the\n"
                     "STREAMPOOL_ALLOC_CONF one when the best needs streampool's own keys), against the\n"
                     "config the run used. The trace: CSV, or torch.cuda.memory._dump_snapshot()'s pickle.\n"
                     "Default candidates:\n";
  for (const std::string& c : default_candidates) help += "  " + (c.empty() ? std::string("(default)") : c) + "\n";
  po::positional_options_description positional;  // `tune FILE` is `tune --trace FILE`
  positional.add("trace", 1);
  const auto vm = parse_command(args, help, desc, &positional, &opts);
  if (!vm) return exit_ok;
  if (jobs < 1) throw usage_error("--jobs: must be at least 1");
  std::vector<candidate> candidates;
  const auto add_candidate = [&candidates](const std::string& text, const std::string& what) {
    candidate c;
    c.index = candidates.size();
    c.text = text;
    try {
      c.config = parse_config(text);
    } catch (const config_error& e) {
      throw usage_error(what + " '" + text + "': " + e.what());
    }
    c.pytorch = pytorch_compatibility_of(c.config);
    candidates.push_back(std::move(c));
  };
  for (const std::string& text : configs.empty() ? default_candidates : configs) add_candidate(text, "--config");
  driver_choice choice = choose_driver(opts);
  choice.why = "tune replays on the sim driver";
  const trace_file input = load_trace_input(trace_path, device, opts);
  const std::vector<trace_event>& events = input.events;

  // The user's current config: --current, else what the snapshot recorded, else the defaults.
  std::string current_source;
  std::vector<std::string> notes;
  if (vm->count("current") != 0) {
    current_source = "--current";
  } else if (input.has_allocator_settings) {
    current_text = input.allocator_settings;
    current_source = "recorded in the snapshot";
    try {
      (void)parse_config(current_text);
    } catch (const config_error& e) {
      notes.push_back("the snapshot's config '" + shown_config(current_text) + "' does not parse here (" +
                      shown_error(e.what()) + "); compared with PyTorch's defaults instead (pass --current)");
      current_text.clear();
      current_source = "PyTorch's defaults";
    }
  } else {
    current_source = "assumed: the trace does not say; pass --current";
  }
  const std::string current_squeezed = squeezed(current_text);
  const auto is_current = [&](const candidate& c) { return squeezed(c.text) == current_squeezed; };
  if (std::find_if(candidates.begin(), candidates.end(), is_current) == candidates.end()) {
    add_candidate(current_text, "--current");
  }
  std::find_if(candidates.begin(), candidates.end(), is_current)->current = true;
  const std::string current_label =
      (current_text.empty() ? std::string("defaults") : shown_config(current_text)) + ", " + current_source;

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
    // Note [Ranking estimates]: a sim pool figure is an estimate within sim_pool_peak_error; it is
    // ranked by the top of its band, so an exact figure it might not beat on the device stays
    // ahead (gpt2_varlen: cudaMallocAsync 9760 MiB on the sim, 9856 on the H200, against
    // expandable segments' exact 9816). The table still shows the estimate itself.
    const double a_rank = ranking_figure(*a), b_rank = ranking_figure(*b);
    if (a_rank != b_rank) return a_rank < b_rank;
    if (a->current != b->current) return a->current;  // no change recommended for nothing
    return a->outcome.result.device_mallocs < b->outcome.result.device_mallocs;
  });

  report out;
  out.command = "tune";
  add_run_meta(out, choice, opts);
  out.meta.emplace_back("trace", trace_path);
  out.meta.emplace_back("trace_events", static_cast<std::int64_t>(events.size()));
  out.meta.emplace_back("trace_format", input.format);
  if (input.format != "csv") out.meta.emplace_back("trace_device", static_cast<std::int64_t>(device));
  out.meta.emplace_back("current_config", current_text);
  out.meta.emplace_back("current_config_source", current_source);
  for (const std::string& warning : input.warnings) out.notes.push_back("warning: " + warning);
  for (const std::string& note : notes) out.notes.push_back(note);
  table& t = out.tables.emplace_back();
  t.title = "candidate configs ranked by peak reserved (replayed on a simulated device)";
  t.columns = {{"rank", "rank", col_kind::count},
               {"config", "config", col_kind::text},
               {"backend", "backend", col_kind::text},
               {"stock_pytorch", "stock PyTorch", col_kind::text},
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
    const std::string label = (c->text.empty() ? "(default)" : shown_config(c->text)) + (c->current ? " (current)" : "");
    const std::string backend(to_string(c->config.backend));
    const std::string stock = c->pytorch.stock ? (c->pytorch.since.empty() ? std::string("any") : ">= " + c->pytorch.since)
                                               : std::string("no: ") + join(c->pytorch.streampool_only);
    if (!o.error.empty()) {
      t.rows.push_back({cell(), label, backend, stock, cell(), cell(), cell(), cell(), cell(), cell(), "failed: " + o.error});
      continue;
    }
    const replay_result& r = o.result;
    t.rows.push_back({++rank, label, backend, stock, static_cast<std::int64_t>(r.peak_requested),
                      static_cast<std::int64_t>(r.peak_allocated), static_cast<std::int64_t>(r.peak_reserved),
                      r.peak_allocated > 0 ? static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated) : 0.0,
                      r.device_mallocs, r.seconds, o.leak == "ok" ? std::string("ok") : o.leak,
                      estimate_cell(o.estimate)});
  }
  int status = exit_ok;
  const candidate* best = ranked.front()->ok() ? ranked.front() : nullptr;
  const candidate* current = nullptr;
  for (const candidate& c : candidates) {
    if (c.current) current = &c;
  }
  if (best == nullptr) {
    out.footer.push_back("no candidate config replayed successfully");
    status = exit_failed;
  } else {
    const auto versus = [&](const candidate& c) {
      if (current == nullptr || !current->ok()) return std::string("(your current config failed to replay)");
      if (&c == current) return "your current config (" + current_label + ") is already the best of these: " +
                                mib_text(static_cast<double>(c.reserved())) + " MiB peak reserved";
      return versus_current(c, *current, current_label);
    };
    // Note [Long config texts]: a line to paste is whole, except the user's own config, which they have.
    const auto paste_line = [](const std::string& variable, const candidate& c) {
      if (c.current && c.text.size() > shown_whole) return variable + "=" + shown_config(c.text) + " (your current config)";
      return env_line(variable, c.text);
    };
    const auto pytorch_line = [&paste_line](const candidate& c) {
      return c.text.empty() ? std::string("PyTorch: leave PYTORCH_CUDA_ALLOC_CONF unset (PyTorch's defaults)")
                            : paste_line("PYTORCH_CUDA_ALLOC_CONF", c) + "   # " + version_text(c.pytorch);
    };
    out.meta.emplace_back("recommended_config", best->text);
    out.meta.emplace_back("predicted_peak_reserved_bytes", static_cast<std::int64_t>(best->reserved()));
    if (current != nullptr && current->ok()) {
      out.meta.emplace_back("current_peak_reserved_bytes", static_cast<std::int64_t>(current->reserved()));
    }
    if (best->pytorch.stock) {
      out.meta.emplace_back("recommended_variable", std::string("PYTORCH_CUDA_ALLOC_CONF"));
      out.meta.emplace_back("pytorch_min_version", best->pytorch.since);
      out.footer.push_back(pytorch_line(*best));
      out.footer.push_back(versus(*best));
      if (!best->text.empty()) {
        out.footer.push_back("with streampool the same string works as " + paste_line("STREAMPOOL_ALLOC_CONF", *best));
      }
    } else {
      out.meta.emplace_back("recommended_variable", std::string("STREAMPOOL_ALLOC_CONF"));
      out.footer.push_back(paste_line("STREAMPOOL_ALLOC_CONF", *best) + "   # streampool only: " +
                           join(best->pytorch.streampool_only) + (best->pytorch.streampool_only.size() == 1 ? " is" : " are") +
                           " not a stock PyTorch key (PyTorch rejects it)");
      out.footer.push_back(versus(*best));
      const auto stock = std::find_if(ranked.begin(), ranked.end(), [](const candidate* c) { return c->ok() && c->pytorch.stock; });
      if (stock != ranked.end()) {
        out.footer.push_back("best stock PyTorch config: " + pytorch_line(**stock));
        out.footer.push_back("  " + versus(**stock));
        out.meta.emplace_back("pytorch_config", (*stock)->text);
        out.meta.emplace_back("pytorch_min_version", (*stock)->pytorch.since);
      }
    }
    out.meta.emplace_back("recommended_peak_reserved_error", estimate_cell(best->outcome.estimate));
    std::vector<ranked_figure> figures;
    for (const candidate* c : ranked) {
      if (!c->outcome.error.empty()) continue;
      const std::string label = c->text.empty() ? "(default)" : shown_config(c->text);
      figures.push_back({label, c->outcome.result.peak_reserved, c->outcome.estimate});
    }
    for (std::string& line : estimate_ranking_notes(figures)) out.footer.push_back(std::move(line));
  }
  emit(out, opts);
  return status;
}

}  // namespace streampool::bench
