// cli_common.hpp — what every command shares: the bad-input exception (exit status 2), the common
// options (--backends, --driver, --format, ...), Boost.Program_options parsing with --help, the
// choice of driver (sim / cuda / auto, and why) and the progress line on stderr.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "streampool/driver.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::bench {

namespace po = boost::program_options;

/// Bad input: a flag, a value, a file. main() prints "streampool-bench: <what>" and exits 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;  ///< a leak check or a backend run failed
inline constexpr int exit_usage = 2;   ///< bad input (usage_error, config_error, trace errors)

struct common_options {
  std::string backends;            ///< "" = every available backend
  std::string torch_peer;          ///< --torch-peer: the PyTorch peer plugin ("" = env or none)
  std::string driver = "auto";     ///< sim | cuda | auto
  std::string sim_capacity = "80GiB";
  std::string format = "table";    ///< table | json | csv
  std::string out;                 ///< "" = stdout
  std::string plot;                ///< "" = no SVG
  std::uint64_t seed = 42;
  int repeat = 0;                  ///< 0 = the command's default
  bool quiet = false;
  bool in_process = false;         ///< --in-process: no child process per row (isolated_run.hpp)
};

/// What each command accepts beyond the always-present options.
struct common_flags {
  bool backends = true;
  bool driver = true;        ///< --driver
  bool sim_capacity = true;  ///< --sim-capacity
  bool plot = false;
  bool repeat = true;
  bool seed = true;
  bool in_process = false;   ///< --in-process (commands whose rows run in child processes)
};

/// Adds the common options to `desc`, bound to `opts`.
void add_common_options(po::options_description& desc, common_options& opts, common_flags flags);

/// Parses `args` (the words after the command name). Returns nothing when --help was asked for
/// (the help text has been printed to stdout). Validates --format, --driver, --repeat and checks
/// that --out / --plot can be written (before a long run, not after).
/// Options are taken by their whole name only (Note [No abbreviated options], cli_common.cpp).
/// @throws usage_error for an unknown flag, a missing or bad value, or a stray word
[[nodiscard]] std::optional<po::variables_map> parse_command(const std::vector<std::string>& args, std::string_view usage, po::options_description& desc,
                   const po::positional_options_description* positional, const common_options* opts);

/// The message for an option that is not one of `desc`'s: "unknown option '--backend': options
/// are not abbreviated; did you mean --backends?". Note [No abbreviated options]
[[nodiscard]] std::string unknown_option_message(std::string_view given, const po::options_description& desc);

/// The driver a run uses: fixed by --driver, or chosen by `auto`.
struct driver_choice {
  bool sim = true;
  std::string why;              ///< "--driver sim", "auto: 1 CUDA device", "auto: no GPU (cudaError...)"
  std::string device_name;
  std::size_t device_memory = 0;
  std::size_t sim_capacity = 0;
  std::shared_ptr<driver> cuda; ///< the real driver when !sim (shared by every run)

  /// "sim" or "cuda".
  [[nodiscard]] std::string_view name() const noexcept { return sim ? "sim" : "cuda"; }
};

/// One run's driver: a fresh sim_driver per run (so runs do not share memory or counters), or the
/// shared real driver.
struct driver_instance {
  std::shared_ptr<driver> drv;
  sim_driver* sim = nullptr;
};

/// @throws usage_error for --driver cuda on a machine without a usable device, or a bad --sim-capacity
[[nodiscard]] driver_choice choose_driver(const common_options& opts);
/// `force_sim`: a sim driver even when the choice is cuda (tune replays on the sim).
[[nodiscard]] driver_instance make_driver(const driver_choice& choice, bool force_sim = false);
/// "sim driver: times are host overhead of the allocator logic only, not device timings" etc.
[[nodiscard]] std::vector<std::string> driver_notes(const driver_choice& choice);

/// A rate-limited status line on stderr, shown only once a command has run for `delay` seconds
/// (so short runs stay silent) and never with --quiet. Uses \r on a terminal, lines otherwise.
class progress_line {
 public:
  explicit progress_line(bool quiet, double delay_seconds = 2.0);
  ~progress_line();
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;

  void update(const std::string& text);
  /// Ends the line if one was shown.
  void finish();
  [[nodiscard]] double elapsed() const;

 private:
  bool quiet_;
  bool tty_;
  double delay_;
  bool shown_ = false;
  double last_print_ = -1.0;
  std::chrono::steady_clock::time_point start_;
};

/// Prints `text` + newline to stderr unless quiet.
void info(const common_options& opts, const std::string& text);

}  // namespace streampool::bench
