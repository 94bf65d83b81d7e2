// isolated_run.cpp — rows of a harness table in child processes (isolated_run.hpp): fork + exec of
// this binary with one backend, a pipe for the rows, and the child's fate (exit or signal).
//
// Note [Rows in child processes]
// A peer can crash the process: PyTorch's allocator segfaulted on an H200 when the replay's
// streams were destroyed under it (Note [Replay stream lifetime]), and with it went every other
// row of the table. So `latency`, `replay` and `compare` run each backend's rows in a child process and the
// parent assembles the table; a child killed by a signal becomes a row "crashed (signal N: name)"
// and the run's exit status is 1. The child is this binary re-executed (fork + exec), not a bare
// fork: by the time rows run, the parent has initialised CUDA (choosing the driver asks the device
// count), and CUDA cannot be used in a forked child of a process that initialised it. The child
// gets the same command and options with `--backends` replaced by its one entry and the
// environment variable STREAMPOOL_BENCH_ROW_FD naming the pipe; it runs quietly and, instead of
// printing its report, writes its rows with encode_child_rows. A child that exits without the
// final record ("X") failed before reporting: its exit status is shown instead of rows. The words
// the parent passes on are option names in full (Note [No abbreviated options], cli_common.cpp),
// so `--backends X` and `--backends=X` are the only forms to replace. `--in-process` runs every
// row in the parent (for a debugger, or to measure without exec).
//
// Note [Bad input stops the run once]
// Bad input is found in the parent, before any row runs, and answered with one line and exit
// status 2 (docs/harness.md, "Exit status"). Whatever only a child finds (its own reading of an
// option, say) must not become a message per row, each child printing it and every row showing
// "exited with status 2": a child that exits with status 2 without rows has printed its message
// to the shared stderr, and run_in_child throws child_bad_input, which main turns into status 2
// without printing a second line. The rows already collected are not printed.
#include "isolated_run.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cli_common.hpp"

extern char** environ;

namespace streampool::bench {
namespace {

constexpr const char* row_fd_variable = "STREAMPOOL_BENCH_ROW_FD";
constexpr const char* data_fd_variable = "STREAMPOOL_BENCH_DATA_FD";  // Note [Children get the parsed trace]
std::string& exe_path() {
  static std::string path;
  return path;
}

std::string to_hex(const std::string& text) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() * 2 + 1);
  out += 'x';  // never empty, so a line always has the field
  for (const unsigned char c : text) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string from_hex(const std::string& text) {
  if (text.empty() || text[0] != 'x' || text.size() % 2 != 1) throw usage_error("child rows: bad text field");
  std::string out;
  for (std::size_t i = 1; i + 1 < text.size(); i += 2) {
    out += static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16));
  }
  return out;
}

std::string real_text(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a", value);
  return buffer;
}

double parse_real(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') throw usage_error("child rows: bad number '" + text + "'");
  return value;
}

}  // namespace

void enable_child_rows(const char* argv0) {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  exe_path() = n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string(argv0 != nullptr ? argv0 : "");
}

bool is_row_child() { return std::getenv(row_fd_variable) != nullptr; }

int inherited_data_fd() {
  const char* text = std::getenv(data_fd_variable);
  return text != nullptr && is_row_child() ? std::atoi(text) : -1;
}

bool child_rows_enabled() { return !exe_path().empty() && !is_row_child(); }

std::string backend_argument(const std::string& name, const std::string& config) {
  if (config.empty()) return name;
  std::string text = name + "=" + config;
  for (char& c : text) {
    if (c == ',') c = ';';
  }
  return text;
}

std::string encode_child_rows(const child_rows& rows) {
  std::ostringstream out;
  for (const std::vector<cell>& row : rows.rows) {
    out << "R " << row.size() << '\n';
    for (const cell& c : row) {
      if (std::holds_alternative<std::monostate>(c)) out << "-\n";
      else if (const auto* s = std::get_if<std::string>(&c)) out << 's' << to_hex(*s) << '\n';
      else if (const auto* i = std::get_if<std::int64_t>(&c)) out << 'i' << *i << '\n';
      else out << 'd' << real_text(std::get<double>(c)) << '\n';
    }
  }
  for (const line_series& s : rows.series) {
    out << "S " << to_hex(s.name) << ' ' << s.color << ' ' << (s.dashed ? 1 : 0) << ' ' << (s.in_legend ? 1 : 0) << ' '
        << s.points.size() << '\n';
    for (const auto& [x, y] : s.points) out << "P " << real_text(x) << ' ' << real_text(y) << '\n';
  }
  out << "X " << rows.status << '\n';
  return out.str();
}

child_rows decode_child_rows(const std::string& text) {
  child_rows got;
  std::istringstream in(text);
  std::string line;
  bool finished = false;
  auto next_line = [&]() -> std::string {
    if (!std::getline(in, line)) throw usage_error("child rows: truncated");
    return line;
  };
  while (std::getline(in, line)) {
    if (finished) throw usage_error("child rows: data after the end record");
    std::istringstream fields(line);
    std::string tag;
    fields >> tag;
    if (tag == "R") {
      std::size_t count = 0;
      if (!(fields >> count) || count > 10000) throw usage_error("child rows: bad row record");
      std::vector<cell>& row = got.rows.emplace_back();
      for (std::size_t i = 0; i < count; ++i) {
        const std::string c = next_line();
        if (c == "-") row.emplace_back();
        else if (!c.empty() && c[0] == 's') row.emplace_back(from_hex(c.substr(1)));
        else if (!c.empty() && c[0] == 'i') row.emplace_back(static_cast<std::int64_t>(std::stoll(c.substr(1))));
        else if (!c.empty() && c[0] == 'd') row.emplace_back(parse_real(c.substr(1)));
        else throw usage_error("child rows: bad cell");
      }
    } else if (tag == "S") {
      line_series s;
      std::string name;
      int dashed = 0, in_legend = 1;
      std::size_t count = 0;
      if (!(fields >> name >> s.color >> dashed >> in_legend >> count)) throw usage_error("child rows: bad series record");
      s.name = from_hex(name);
      s.dashed = dashed != 0;
      s.in_legend = in_legend != 0;  // the dashed twin of a listed series is drawn, not listed
      for (std::size_t i = 0; i < count; ++i) {
        std::istringstream point(next_line());
        std::string p, x, y;
        if (!(point >> p >> x >> y) || p != "P") throw usage_error("child rows: bad point");
        s.points.emplace_back(parse_real(x), parse_real(y));
      }
      got.series.push_back(std::move(s));
    } else if (tag == "X") {
      if (!(fields >> got.status)) throw usage_error("child rows: bad end record");
      finished = true;
    } else {
      throw usage_error("child rows: unknown record");
    }
  }
  if (!finished) throw usage_error("child rows: no end record");
  return got;
}

void crash_if_asked(const std::string& backend) noexcept {
  const char* name = std::getenv("STREAMPOOL_BENCH_TEST_CRASH");
  if (name != nullptr && is_row_child() && backend == name) {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
}

void send_to_parent(const child_rows& rows) noexcept {
  try {
    const char* fd_text = std::getenv(row_fd_variable);
    if (fd_text == nullptr) return;
    const int fd = std::atoi(fd_text);
    const std::string text = encode_child_rows(rows);
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  } catch (...) {
  }
}

child_outcome run_in_child(const std::string& command, const args_t& args, const std::string& backend, int shared_fd) {
  // Everything the child needs is built before fork: between fork and exec only exec and _exit.
  std::vector<std::string> words = {exe_path(), command};
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--backends") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--backends=", 0) == 0) continue;
    words.push_back(args[i]);
  }
  words.push_back("--backends");
  words.push_back(backend);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw usage_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  const int child_fd = 3;       // the write end, moved to a fixed number in the child
  const int child_data_fd = 4;  // shared_fd, moved likewise
  std::vector<std::string> env_words;
  auto is_ours = [](const char* entry, const char* name) {
    const std::size_t n = std::strlen(name);
    return std::strncmp(entry, name, n) == 0 && entry[n] == '=';
  };
  for (char** e = environ; *e != nullptr; ++e) {
    if (!is_ours(*e, row_fd_variable) && !is_ours(*e, data_fd_variable)) env_words.emplace_back(*e);
  }
  env_words.push_back(std::string(row_fd_variable) + "=" + std::to_string(child_fd));
  if (shared_fd >= 0) env_words.push_back(std::string(data_fd_variable) + "=" + std::to_string(child_data_fd));
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& w : env_words) envp.push_back(w.data());
  envp.push_back(nullptr);

  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw usage_error(std::string("cannot start a child process: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // First out of the way (either may be 3 or 4 now), then to the fixed numbers; dup2 clears
    // FD_CLOEXEC on the copies, the F_DUPFD_CLOEXEC ones close at exec.
    const int pipe_copy = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
    const int data_copy = shared_fd >= 0 ? ::fcntl(shared_fd, F_DUPFD_CLOEXEC, 10) : -1;
    if (pipe_copy < 0 || (shared_fd >= 0 && data_copy < 0)) ::_exit(127);
    if (::dup2(pipe_copy, child_fd) < 0) ::_exit(127);
    if (data_copy >= 0 && ::dup2(data_copy, child_data_fd) < 0) ::_exit(127);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  child_outcome outcome;
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = ::strsignal(sig);
    outcome.failure = "crashed (signal " + std::to_string(sig) + (name != nullptr ? std::string(": ") + name : "") + ")";
    return outcome;
  }
  try {
    outcome.got = decode_child_rows(text);
  } catch (const usage_error&) {
    const int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
    if (code == exit_usage) throw child_bad_input();  // Note [Bad input stops the run once]
    outcome.failure = code == 127 && text.empty() ? "could not run " + exe_path()
                                                  : "exited with status " + std::to_string(code) + " without a result";
  }
  return outcome;
}

}  // namespace streampool::bench
