// trace_reader.cpp — parse_trace/read_trace/read_trace_file: the CSV trace format, plain or
// gzip-compressed, read one bounded line at a time (Note [Bounded trace lines]), with errors that
// name the file, the line and the field; and the format detection that sends a pickle (a PyTorch
// memory snapshot) to snapshot_trace.cpp, from one opening of the file (pipes read right).
#include <algorithm>
#include <charconv>
#include <cstring>
#include <istream>
#include <memory>

#include "replay/snapshot_trace.hpp"
#include "streampool/errors.hpp"
#include "streampool/replay.hpp"

namespace streampool {
namespace {

constexpr std::string_view expected_header = "action,addr,size,stream,time_us";

bool parse_action(std::string_view text, trace_action* out) {
  for (int i = 0; i <= static_cast<int>(trace_action::snapshot); ++i) {
    const auto action = static_cast<trace_action>(i);
    if (to_string(action) == text) {
      *out = action;
      return true;
    }
  }
  return false;
}

[[noreturn]] void fail(std::string_view source, std::size_t line, const std::string& what) {
  throw error("trace " + std::string(source) + " line " + std::to_string(line) + ": " + what);
}

std::uint64_t parse_number(std::string_view field, std::string_view name, std::string_view source, std::size_t line) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || ec != std::errc() || end != field.data() + field.size()) {
    fail(source, line, "field '" + std::string(name) + "' is '" + std::string(field) +
                           "'; expected a non-negative decimal integer");
  }
  return value;
}

trace_event parse_line(std::string_view text, std::string_view source, std::size_t line) {
  std::string_view fields[5];
  std::size_t count = 0;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    if (count == 5) fail(source, line, "more than 5 fields; expected " + std::string(expected_header));
    fields[count++] = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (count != 5) {
    fail(source, line, std::to_string(count) + " field(s); expected 5: " + std::string(expected_header));
  }
  trace_event event;
  event.line = line;
  if (!parse_action(fields[0], &event.action)) {
    fail(source, line, "unknown action '" + std::string(fields[0]) +
                           "'; expected one of alloc, free_requested, free_completed, segment_alloc, "
                           "segment_free, segment_map, segment_unmap, oom, snapshot");
  }
  event.address = parse_number(fields[1], "addr", source, line);
  event.size = parse_number(fields[2], "size", source, line);
  event.stream = parse_number(fields[3], "stream", source, line);
  event.time_us = parse_number(fields[4], "time_us", source, line);
  return event;
}

// Note [Bounded trace lines]
// A CSV line is at most ~120 bytes (an action and four 64-bit numbers), so the reader holds one
// line of at most max_line_bytes, and refuses a longer one at that point, never reading the rest:
// a gzip bomb of one 2 GB line once took 6 GB (the whole file was inflated into one string, then
// split), and `--trace /dev/zero` read 4 GB before saying "empty trace". Blank lines hold nothing
// either: more than max_blank_lines of them in a row (a newline bomb) are refused too. Memory is
// one line whatever the file; the events are what the caller keeps.
constexpr std::size_t max_line_bytes = 4096;
constexpr std::size_t max_blank_lines = std::size_t{1} << 20;

bool is_binary(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r') || c == 0x7f;
  });
}

[[noreturn]] void fail_binary(std::string_view source, std::size_t line) {
  fail(source, line, "binary data: neither a CSV trace (header '" + std::string(expected_header) +
                         "') nor a PyTorch memory snapshot (a pickle of protocol 2 or newer, first byte 0x80)");
}

/// Splits a byte_source into lines of at most max_line_bytes (Note [Bounded trace lines]).
class line_reader {
 public:
  line_reader(replay_impl::byte_source& in, std::string_view source) : in_(in), source_(source) {}

  /// The next line without its '\n' (and '\r'); false at the end of the input.
  bool next(std::string& line, bool header_seen) {
    line.clear();
    while (true) {
      if (pos_ == end_) {
        end_ = in_.read(buffer_, sizeof buffer_);
        pos_ = 0;
        if (end_ == 0) {
          if (line.empty() && !pending_) return false;
          ++number_;
          pending_ = false;
          strip(line);
          return true;
        }
      }
      pending_ = true;
      const char* start = buffer_ + pos_;
      const auto* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - pos_));
      const std::size_t take = newline != nullptr ? static_cast<std::size_t>(newline - start) : end_ - pos_;
      if (line.size() + take > max_line_bytes) {
        line.append(start, std::min(take, max_line_bytes - line.size()));
        ++number_;
        if (!header_seen && is_binary(line)) fail_binary(source_, number_);
        fail(source_, number_,
             "the line is longer than " + std::to_string(max_line_bytes) +
                 " bytes (a trace line is about 100): not a CSV trace, or a damaged one; refused without reading the rest");
      }
      line.append(start, take);
      pos_ += take;
      if (newline != nullptr) {
        ++pos_;
        ++number_;
        pending_ = false;
        strip(line);
        return true;
      }
    }
  }
  [[nodiscard]] std::size_t number() const noexcept { return number_; }

 private:
  static void strip(std::string& line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
  }

  replay_impl::byte_source& in_;
  std::string_view source_;
  char buffer_[1 << 16];
  std::size_t pos_ = 0, end_ = 0;
  std::size_t number_ = 0;
  bool pending_ = false;  ///< bytes of an unfinished line were read
};

/// A byte_source over an istream (parse_trace's input).
class istream_bytes final : public replay_impl::byte_source {
 public:
  explicit istream_bytes(std::istream& in) : in_(in) {}
  std::size_t read(char* out, std::size_t size) override {
    in_.read(out, static_cast<std::streamsize>(size));
    return static_cast<std::size_t>(in_.gcount());
  }

 private:
  std::istream& in_;
};

std::vector<trace_event> parse_csv(replay_impl::byte_source& in, std::string_view source) {
  std::vector<trace_event> events;
  line_reader lines(in, source);
  std::string line_text;
  bool header_seen = false;
  std::size_t blank = 0;
  while (lines.next(line_text, header_seen)) {
    const std::size_t line = lines.number();
    if (line_text.empty()) {
      if (++blank > max_blank_lines) {
        fail(source, line, "more than " + std::to_string(max_blank_lines) +
                               " blank lines in a row: not a CSV trace, or a damaged one; refused without reading the rest");
      }
      continue;
    }
    blank = 0;
    if (!header_seen) {
      if (is_binary(line_text)) fail_binary(source, line);
      if (line_text != expected_header) {
        fail(source, line, "header is '" + line_text + "'; expected '" + std::string(expected_header) + "'");
      }
      header_seen = true;
      continue;
    }
    events.push_back(parse_line(line_text, source, line));
  }
  if (!header_seen) {
    const std::size_t line = lines.number();
    fail(source, line == 0 ? 1 : line, "empty trace; expected the header " + std::string(expected_header));
  }
  return events;
}

}  // namespace

std::vector<trace_event> parse_trace(std::istream& in, std::string_view source) {
  istream_bytes bytes(in);
  return parse_csv(bytes, source);
}

std::vector<trace_event> read_trace(const std::string& path) { return read_trace_file(path).events; }

trace_file read_trace_file(const std::string& path, const trace_read_options& options) {
  // One opening, one stream (Note [Reading a pipe] in byte_source.cpp).
  replay_impl::trace_input input = replay_impl::open_trace_input(path);
  char first = 0;
  const std::size_t got = input.bytes->read(&first, 1);
  std::unique_ptr<replay_impl::byte_source> whole =
      replay_impl::prefixed_source(std::string(&first, got), std::move(input.bytes));
  if (got == 1 && static_cast<unsigned char>(first) == 0x80) {
    return replay_impl::read_snapshot(*whole, "trace " + path, options);
  }
  trace_file file;
  file.format = "csv";
  file.events = parse_csv(*whole, path);
  return file;
}

trace_file parse_snapshot(std::string_view bytes, std::string_view source, const trace_read_options& options) {
  const std::unique_ptr<replay_impl::byte_source> in = replay_impl::memory_source(bytes);
  return replay_impl::read_snapshot(*in, "trace " + std::string(source), options);
}

}  // namespace streampool
