// trace_reader.cpp — parse_trace/read_trace/read_trace_file: the CSV trace format, plain or
// gzip-compressed, with errors that name the file, the line and the field; and the format
// detection that sends a pickle (a PyTorch memory snapshot) to snapshot_trace.cpp.
#include <algorithm>
#include <charconv>
#include <memory>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "replay/snapshot_trace.hpp"
#include "streampool/errors.hpp"
#include "streampool/replay.hpp"

#ifdef STREAMPOOL_HAVE_ZLIB
#include <zlib.h>
#endif

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

std::string read_gzip(const std::string& path) {
#ifdef STREAMPOOL_HAVE_ZLIB
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw error("trace " + path + ": cannot open the file (does it exist and is it readable?)");
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<std::size_t>(n));
  int code = 0;
  const char* message = gzerror(file, &code);
  const std::string reason = message != nullptr ? message : "";
  gzclose(file);
  if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) {
    throw error("trace " + path + ": not a valid gzip file (" + reason + ")");
  }
  return text;
#else
  throw error("trace " + path + ": this build has no zlib; decompress it first (gunzip -k " + path + ")");
#endif
}

}  // namespace

std::vector<trace_event> parse_trace(std::istream& in, std::string_view source) {
  std::vector<trace_event> events;
  std::string line_text;
  std::size_t line = 0;
  bool header_seen = false;
  while (std::getline(in, line_text)) {
    ++line;
    if (!line_text.empty() && line_text.back() == '\r') line_text.pop_back();
    if (line_text.empty()) continue;
    if (!header_seen) {
      const bool binary = std::any_of(line_text.begin(), line_text.end(), [](char c) {
        return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
      });
      if (binary) {
        fail(source, line, "binary data: neither a CSV trace (header '" + std::string(expected_header) +
                               "') nor a PyTorch memory snapshot (a pickle of protocol 2 or newer, first byte 0x80)");
      }
      if (line_text != expected_header) {
        fail(source, line, "header is '" + line_text + "'; expected '" + std::string(expected_header) + "'");
      }
      header_seen = true;
      continue;
    }
    events.push_back(parse_line(line_text, source, line));
  }
  if (!header_seen) fail(source, line == 0 ? 1 : line, "empty trace; expected the header " + std::string(expected_header));
  return events;
}

namespace {

/// The bytes of `rest` after `first`, which was read to detect the format.
class prefixed_source final : public replay_impl::byte_source {
 public:
  prefixed_source(char first, std::unique_ptr<replay_impl::byte_source> rest) : first_(first), rest_(std::move(rest)) {}
  std::size_t read(char* out, std::size_t size) override {
    if (size == 0) return 0;
    if (!first_used_) {
      first_used_ = true;
      out[0] = first_;
      return 1;
    }
    return rest_->read(out, size);
  }

 private:
  char first_;
  bool first_used_ = false;
  std::unique_ptr<replay_impl::byte_source> rest_;
};

bool is_gzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("trace " + path + ": cannot open the file (does it exist and is it readable?)");
  char magic[2] = {};
  in.read(magic, 2);
  return in.gcount() == 2 && static_cast<unsigned char>(magic[0]) == 0x1f && static_cast<unsigned char>(magic[1]) == 0x8b;
}

}  // namespace

std::vector<trace_event> read_trace(const std::string& path) { return read_trace_file(path).events; }

trace_file read_trace_file(const std::string& path, const trace_read_options& options) {
  const bool gz = is_gzip(path);
  std::unique_ptr<replay_impl::byte_source> source = replay_impl::file_source(path, gz);
  char first = 0;
  if (source->read(&first, 1) == 1 && static_cast<unsigned char>(first) == 0x80) {
    prefixed_source whole(first, std::move(source));
    return replay_impl::read_snapshot(whole, "trace " + path, options);
  }
  source.reset();
  trace_file file;
  file.format = "csv";
  if (gz) {
    std::istringstream in(read_gzip(path));
    file.events = parse_trace(in, path);
  } else {
    std::ifstream in(path);
    if (!in) throw error("trace " + path + ": cannot open the file (does it exist and is it readable?)");
    file.events = parse_trace(in, path);
  }
  return file;
}

trace_file parse_snapshot(std::string_view bytes, std::string_view source, const trace_read_options& options) {
  const std::unique_ptr<replay_impl::byte_source> in = replay_impl::memory_source(bytes);
  return replay_impl::read_snapshot(*in, "trace " + std::string(source), options);
}

}  // namespace streampool
