// byte_source.cpp — the inputs of the pickle reader: memory, a plain file and a gzip file, each read
// in pieces so that a large file is never held whole.
#include <cstdio>

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

#ifdef STREAMPOOL_HAVE_ZLIB
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

}  // namespace streampool::replay_impl
