// byte_source.cpp — the inputs of the trace readers: memory, a plain file and a gzip file, each read
// in pieces so that a large file is never held whole; and open_trace_input(), which opens a path
// once and detects gzip from its first bytes, so that pipes read right.
//
// Note [Reading a pipe]
// A trace may come from a pipe (`--trace /dev/stdin`, `<(zcat big.csv.gz)`). A pipe can be read
// once: the reader used to open the path three times (to test for gzip, to test for a pickle, to
// read), so each opening lost what the previous one had read and the CSV header came out wrong, or
// the trace empty. open_trace_input() opens it once, peeks at the first two bytes and hands them
// back in front of the rest; gzip is inflated from that same stream (zlib's inflate, not gzopen,
// which would open the path again), concatenated gzip members included, as gzip -d reads them.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "replay/pickle_reader.hpp"
#include "streampool/errors.hpp"

#ifdef STREAMPOOL_HAVE_ZLIB
#include <zlib.h>
#endif

namespace streampool::replay_impl {
namespace {

class memory_bytes final : public byte_source {
 public:
  explicit memory_bytes(std::string_view bytes) : bytes_(bytes) {}
  std::size_t read(char* out, std::size_t size) override {
    const std::size_t n = std::min(size, bytes_.size() - pos_);
    bytes_.copy(out, n, pos_);
    pos_ += n;
    return n;
  }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

class file_bytes final : public byte_source {
 public:
  explicit file_bytes(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "rb")) {
    if (file_ == nullptr) throw error("trace " + path + ": cannot open the file (does it exist and is it readable?)");
  }
  ~file_bytes() override { std::fclose(file_); }
  file_bytes(const file_bytes&) = delete;
  file_bytes& operator=(const file_bytes&) = delete;
  std::size_t read(char* out, std::size_t size) override {
    const std::size_t n = std::fread(out, 1, size, file_);
    if (n < size && std::ferror(file_) != 0) throw error("trace " + path_ + ": read error");
    return n;
  }

 private:
  std::string path_;
  std::FILE* file_;
};

/// `prefix` (bytes already read from `rest`), then the rest.
class prefixed_bytes final : public byte_source {
 public:
  prefixed_bytes(std::string prefix, std::unique_ptr<byte_source> rest) : prefix_(std::move(prefix)), rest_(std::move(rest)) {}
  std::size_t read(char* out, std::size_t size) override {
    if (pos_ < prefix_.size()) {
      const std::size_t n = std::min(size, prefix_.size() - pos_);
      std::memcpy(out, prefix_.data() + pos_, n);
      pos_ += n;
      return n;
    }
    return rest_->read(out, size);
  }

 private:
  std::string prefix_;
  std::size_t pos_ = 0;
  std::unique_ptr<byte_source> rest_;
};

#ifdef STREAMPOOL_HAVE_ZLIB
/// Inflates a gzip stream read from another byte_source (Note [Reading a pipe]).
class inflate_bytes final : public byte_source {
 public:
  inflate_bytes(std::string path, std::unique_ptr<byte_source> in) : path_(std::move(path)), in_(std::move(in)) {
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw error("trace " + path_ + ": cannot start zlib");
  }
  ~inflate_bytes() override { inflateEnd(&z_); }
  inflate_bytes(const inflate_bytes&) = delete;
  inflate_bytes& operator=(const inflate_bytes&) = delete;
  std::size_t read(char* out, std::size_t size) override {
    const auto room = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = room;
    while (!done_ && z_.avail_out == room) {
      if (between_members_) {
        // After a member: another one (as `cat a.gz b.gz` makes), or the end. Bytes that do not
        // start a member are trailing garbage, ignored as gzip -d and zlib's gzread ignore them.
        if (z_.avail_in == 0 && !refill()) {
          done_ = true;
          break;
        }
        if (static_cast<unsigned char>(*z_.next_in) != 0x1f) {
          done_ = true;
          break;
        }
        if (inflateReset(&z_) != Z_OK) throw error("trace " + path_ + ": zlib failed");
        between_members_ = false;
      }
      if (z_.avail_in == 0 && !refill()) {
        throw error("trace " + path_ + ": not a valid gzip file (the compressed stream is truncated)");
      }
      const int code = inflate(&z_, Z_NO_FLUSH);
      if (code == Z_STREAM_END) {
        between_members_ = true;
      } else if (code != Z_OK && code != Z_BUF_ERROR) {
        throw error("trace " + path_ + ": not a valid gzip file (" + (z_.msg != nullptr ? z_.msg : "corrupt data") + ")");
      }
    }
    return room - z_.avail_out;
  }

 private:
  bool refill() {
    const std::size_t n = in_->read(buffer_, sizeof buffer_);
    z_.next_in = reinterpret_cast<Bytef*>(buffer_);
    z_.avail_in = static_cast<uInt>(n);
    return n != 0;
  }

  std::string path_;
  std::unique_ptr<byte_source> in_;
  z_stream z_{};
  char buffer_[1 << 16];
  bool between_members_ = false;
  bool done_ = false;
};

class gzip_bytes final : public byte_source {
 public:
  explicit gzip_bytes(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) throw error("trace " + path + ": cannot open the file (does it exist and is it readable?)");
  }
  ~gzip_bytes() override { gzclose(file_); }
  gzip_bytes(const gzip_bytes&) = delete;
  gzip_bytes& operator=(const gzip_bytes&) = delete;
  std::size_t read(char* out, std::size_t size) override {
    const int n = gzread(file_, out, static_cast<unsigned>(std::min<std::size_t>(size, 1u << 30)));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file_, &code);
      throw error("trace " + path_ + ": not a valid gzip file (" + (message != nullptr ? message : "") + ")");
    }
    return static_cast<std::size_t>(n);
  }

 private:
  std::string path_;
  gzFile file_;
};
#endif

}  // namespace

std::unique_ptr<byte_source> memory_source(std::string_view bytes) { return std::make_unique<memory_bytes>(bytes); }

std::unique_ptr<byte_source> file_source(const std::string& path, bool gzip) {
  if (!gzip) return std::make_unique<file_bytes>(path);
#ifdef STREAMPOOL_HAVE_ZLIB
  return std::make_unique<gzip_bytes>(path);
#else
  throw error("trace " + path + ": this build has no zlib; decompress it first (gunzip -k " + path + ")");
#endif
}

trace_input open_trace_input(const std::string& path) {
  auto file = std::make_unique<file_bytes>(path);
  std::string prefix(2, '\0');
  std::size_t got = 0;
  while (got < 2) {
    const std::size_t n = file->read(prefix.data() + got, 2 - got);
    if (n == 0) break;
    got += n;
  }
  prefix.resize(got);
  trace_input input;
  input.gzip = got == 2 && static_cast<unsigned char>(prefix[0]) == 0x1f && static_cast<unsigned char>(prefix[1]) == 0x8b;
  auto whole = std::make_unique<prefixed_bytes>(std::move(prefix), std::move(file));
  if (!input.gzip) {
    input.bytes = std::move(whole);
    return input;
  }
#ifdef STREAMPOOL_HAVE_ZLIB
  input.bytes = std::make_unique<inflate_bytes>(path, std::move(whole));
  return input;
#else
  throw error("trace " + path + ": this build has no zlib; decompress it first (gunzip -k " + path + ")");
#endif
}

std::unique_ptr<byte_source> prefixed_source(std::string prefix, std::unique_ptr<byte_source> rest) {
  return std::make_unique<prefixed_bytes>(std::move(prefix), std::move(rest));
}

}  // namespace streampool::replay_impl
