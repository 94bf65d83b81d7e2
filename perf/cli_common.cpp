// cli_common.cpp — common options, Boost.Program_options parsing, driver choice and the progress
// line (cli_common.hpp).
#include "cli_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "isolated_run.hpp"
#include "peer_torch.hpp"
#include "size_parse.hpp"
#include "streampool/allocator.hpp"
#include "svg_plot.hpp"

namespace streampool::bench {
namespace {

void check_writable(const std::string& path, std::string_view what) {
  std::ofstream file(path, std::ios::app);
  if (!file) throw usage_error(std::string(what) + ": cannot write '" + path + "'");
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

// Note [No abbreviated options]
// Boost.Program_options accepts by default any unambiguous prefix of a long option: `--backend
// native` for `--backends native`. The rows of latency, replay and compare run in child processes
// that get the parent's words with --backends replaced by one entry (Note [Rows in child
// processes], isolated_run.cpp); the abbreviation escaped that replacement, so every child saw
// --backends twice and every row failed. An abbreviation also changes meaning, or becomes
// ambiguous, when an option is added. So the parser takes whole option names only, and a word
// that is not one gets the names it may have meant: every word a child is given is then an
// option's own name, which the child runner can rely on.
std::string unknown_option_message(std::string_view given, const po::options_description& desc) {
  std::string name(given);
  const std::size_t eq = name.find('=');
  if (eq != std::string::npos) name.resize(eq);
  std::string bare = name;
  while (!bare.empty() && bare.front() == '-') bare.erase(bare.begin());
  std::vector<std::string> prefixed, close;
  for (const auto& option : desc.options()) {
    const std::string& known = option->long_name();
    if (known.empty() || bare.empty()) continue;
    if (known.rfind(bare, 0) == 0) prefixed.push_back("--" + known);
    else if (bare.size() >= 3 && edit_distance(bare, known) <= 2) close.push_back("--" + known);
  }
  const std::vector<std::string>& meant = prefixed.empty() ? close : prefixed;
  if (meant.empty()) return "unknown option '" + name + "' (see --help)";
  std::string text = "unknown option '" + name + "': ";
  if (!prefixed.empty()) text += "options are not abbreviated; ";
  text += "did you mean ";
  for (std::size_t i = 0; i < meant.size(); ++i) text += (i == 0 ? "" : i + 1 == meant.size() ? " or " : ", ") + meant[i];
  return text + "?";
}

void add_common_options(po::options_description& desc, common_options& opts, common_flags flags) {
  auto add = desc.add_options();
  if (flags.backends) {
    add("backends", po::value(&opts.backends)->value_name("LIST"),
        "comma list of backends and peers: native, cudaMallocAsync (each optionally =CONFIG), "
        "cuda, async-raw, cub (real GPU), torch-native or torch-async (real GPU and --torch-peer); "
        "default: all that can run here (torch-async only when named)");
    add("torch-peer", po::value(&opts.torch_peer)->value_name("PATH"),
        "the PyTorch peer plugin (libstreampool_torch_peer.so, perf/torch_peer/) for torch-native / "
        "torch-async; default: $STREAMPOOL_BENCH_TORCH_PEER");
  }
  if (flags.driver) {
    add("driver", po::value(&opts.driver)->value_name("sim|cuda|auto")->default_value("auto"),
        "device driver: the simulated device, the real one, or cuda when a device is present");
  }
  if (flags.sim_capacity) {
    add("sim-capacity", po::value(&opts.sim_capacity)->value_name("SIZE")->default_value("80GiB"),
        "memory of the simulated device");
  }
  add("format", po::value(&opts.format)->value_name("table|json|csv")->default_value("table"), "output format");
  add("out", po::value(&opts.out)->value_name("FILE"), "write the report to FILE instead of stdout");
  if (flags.plot) add("plot", po::value(&opts.plot)->value_name("FILE.svg"), "also draw an SVG chart");
  if (flags.seed) add("seed", po::value(&opts.seed)->default_value(42), "seed of the random workloads");
  if (flags.repeat) add("repeat", po::value(&opts.repeat)->value_name("N"), "repetitions; the median is reported");
  add("quiet,q", po::bool_switch(&opts.quiet), "no progress or notes on stderr");
  if (flags.in_process) {
    add("in-process", po::bool_switch(&opts.in_process),
        "run every backend in this process (by default each backend's row runs in a child process, "
        "so a backend that crashes costs only its row)");
  }
}

std::optional<po::variables_map> parse_command(const std::vector<std::string>& args, std::string_view usage,
                                              po::options_description& desc,
                                              const po::positional_options_description* positional,
                                              const common_options* opts) {
  if (desc.find_nothrow("help", false) == nullptr) desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    // Note [No abbreviated options]
    parser.style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing);
    if (positional != nullptr) {
      parser.positional(*positional);
    } else {
      parser.positional(po::positional_options_description{});  // stray words are errors
    }
    po::store(parser.run(), vm);
    if (vm.count("help") != 0) {
      std::cout << usage << "\n\n" << desc << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    throw usage_error(unknown_option_message(e.get_option_name(), desc));
  } catch (const po::error& e) {
    throw usage_error(std::string(e.what()) + " (see --help)");
  }
  if (opts != nullptr) {
    if (opts->format != "table" && opts->format != "json" && opts->format != "csv") {
      throw usage_error("--format: '" + opts->format + "' is not one of table, json, csv");
    }
    if (opts->driver != "sim" && opts->driver != "cuda" && opts->driver != "auto") {
      throw usage_error("--driver: '" + opts->driver + "' is not one of sim, cuda, auto");
    }
    if (vm.count("repeat") != 0 && opts->repeat < 1) throw usage_error("--repeat: must be at least 1");
    if (!opts->out.empty()) check_writable(opts->out, "--out");
    if (!opts->plot.empty()) check_plot_path(opts->plot);  // before creating the file: SVG only
    if (!opts->plot.empty()) check_writable(opts->plot, "--plot");
    if (!opts->torch_peer.empty()) set_torch_peer_path(opts->torch_peer);
    // --quiet also silences the library's warnings (config keys a backend ignores, fallbacks).
    // A row's child process (isolated_run.hpp) is quiet too: the parent speaks for the run.
    if (opts->quiet || is_row_child()) set_warning_handler([](std::string_view) {});
  }
  return vm;
}

driver_choice choose_driver(const common_options& opts) {
  driver_choice choice;
  choice.sim_capacity = parse_size(opts.sim_capacity, "--sim-capacity");
  if (opts.driver != "sim") {
    std::shared_ptr<driver> cuda = make_cuda_driver();
    int count = 0;
    const drv_result result = cuda->device_count(&count);
    if (result.ok() && count > 0) {
      choice.sim = false;
      choice.cuda = cuda;
      choice.why = (opts.driver == "auto" ? "auto: " : "--driver cuda: ") + std::to_string(count) + " CUDA device(s)";
    } else if (opts.driver == "cuda") {
      throw usage_error("--driver cuda: no usable CUDA device (" +
                        (result.ok() ? std::string("0 devices") : cuda->describe(result)) +
                        "); use --driver sim or --driver auto");
    } else {
      choice.why = "auto: no CUDA device (" + (result.ok() ? std::string("0 devices") : cuda->describe(result)) + ")";
    }
  } else {
    choice.why = "--driver sim";
  }
  const driver_instance probe = make_driver(choice);
  device_info info;
  if (probe.drv->get_device_info(0, &info).ok()) {
    choice.device_name = info.name;
    choice.device_memory = info.total_memory;
  } else {
    choice.device_name = "unknown";
  }
  return choice;
}

driver_instance make_driver(const driver_choice& choice, bool force_sim) {
  driver_instance instance;
  if (choice.sim || force_sim) {
    sim_options options;
    options.capacity = choice.sim_capacity;
    auto sim = std::make_shared<sim_driver>(options);
    instance.sim = sim.get();
    instance.drv = std::move(sim);
  } else {
    instance.drv = choice.cuda;
  }
  return instance;
}

std::vector<std::string> driver_notes(const driver_choice& choice) {
  std::vector<std::string> notes;
  notes.push_back("driver: " + std::string(choice.name()) + " (" + choice.why + "); device: " + choice.device_name +
                  ", " + size_label(choice.device_memory));
  if (choice.sim) {
    notes.push_back(std::string(choice.why.rfind("auto:", 0) == 0 ? "no GPU used: this run is on the simulated device; "
                                                                   : "simulated device: ") +
                    "times are host overhead of the allocator logic only, not device timings");
  }
  return notes;
}

progress_line::progress_line(bool quiet, double delay_seconds)
    : quiet_(quiet || is_row_child()), tty_(::isatty(STDERR_FILENO) == 1), delay_(delay_seconds),
      start_(std::chrono::steady_clock::now()) {}

progress_line::~progress_line() { finish(); }

double progress_line::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void progress_line::update(const std::string& text) {
  if (quiet_) return;
  const double now = elapsed();
  if (now < delay_) return;
  // A terminal gets a redrawn line 5 times a second; a log gets a line every 5 seconds.
  const double interval = tty_ ? 0.2 : 5.0;
  if (last_print_ >= 0.0 && now - last_print_ < interval) return;
  last_print_ = now;
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s [%.1f s]", text.c_str(), now);
  } else {
    std::fprintf(stderr, "%s [%.1f s]\n", text.c_str(), now);
  }
  std::fflush(stderr);
  shown_ = true;
}

void progress_line::finish() {
  if (shown_ && tty_) std::fputs("\r\033[K", stderr);
  shown_ = false;
}

void info(const common_options& opts, const std::string& text) {
  if (!opts.quiet && !is_row_child()) std::cerr << text << "\n";
}

}  // namespace streampool::bench
