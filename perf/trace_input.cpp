// trace_input.cpp — load_trace_input(): read_trace_file() with the harness's bad-input handling:
// what --trace names is checked before it is read, and the events are checked once, in the parent,
// before any row replays them (Note [Bad input stops the run once], isolated_run.cpp).
#include "trace_input.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "size_parse.hpp"
#include "streampool/errors.hpp"
#include "trace_handoff.hpp"

namespace streampool::bench {
namespace {

// Note [What --trace may name]
// A regular file, or a pipe (`/dev/stdin` fed by a pipe, `<(zcat run.csv.gz)`). A directory used
// to fail as "read error"; a character device such as /dev/zero was read 4 GB deep before "empty
// trace", and /dev/urandom would never end. Those are refused by what they are, before a byte is
// read. A name that does not exist is left to the reader, whose message names it.
void check_trace_path(const std::string& path) {
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    throw usage_error("--trace: " + quote_input(path) +
                      " is a directory; name a trace file in it (CSV or a PyTorch memory snapshot, docs/trace-format.md)");
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    const char* what = S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file";
    throw usage_error("--trace: " + quote_input(path) + " is " + what +
                      ", not a trace file; give a regular file or a pipe (e.g. --trace <(zcat run.csv.gz))");
  }
}

}  // namespace

void check_trace_events(const std::vector<trace_event>& events, const std::string& path) {
  // The rule of replay_trace (src/replay/trace_replay.cpp): an address is allocated again only
  // after its free_requested; a zero-size alloc is checked too but holds nothing.
  std::unordered_map<std::uint64_t, std::size_t> live;  // address -> line of its alloc
  for (const trace_event& e : events) {
    if (e.action == trace_action::alloc) {
      if (const auto it = live.find(e.address); it != live.end()) {
        throw usage_error("--trace: " + quote_input(path) + " line " + std::to_string(e.line) + ": alloc of address " +
                          std::to_string(e.address) + " which is still live (allocated at line " +
                          std::to_string(it->second) + " and not freed since); the trace is inconsistent");
      }
      if (e.size != 0) live.emplace(e.address, e.line);
    } else if (e.action == trace_action::free_requested) {
      live.erase(e.address);
    }
  }
}

trace_file load_trace_input(const std::string& path, int device, const common_options& opts) {
  if (path.empty()) throw usage_error("--trace FILE is required (or give FILE as the first word after the command)");
  trace_file file;
  // Note [Children get the parsed trace] (trace_handoff.cpp): a row's child takes the parent's events.
  if (std::optional<std::vector<trace_event>> events = inherited_trace_events()) {
    file.events = std::move(*events);
    return file;
  }
  check_trace_path(path);
  info(opts, "reading " + path);
  try {
    file = read_trace_file(path, {device});
  } catch (const error& e) {
    throw usage_error(std::string("--trace: ") + e.what());
  }
  if (file.events.empty()) throw usage_error("--trace: '" + path + "' holds no events");
  if (file.format == "csv" && device != 0) {
    throw usage_error("--device " + std::to_string(device) + ": '" + path +
                      "' is a CSV trace, which holds one device; --device applies to PyTorch snapshots");
  }
  check_trace_events(file.events, path);
  for (const std::string& warning : file.warnings) info(opts, "warning: " + warning);
  return file;
}

}  // namespace streampool::bench
