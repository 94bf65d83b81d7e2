// trace_handoff.cpp — shared_trace and inherited_trace_events (trace_handoff.hpp).
//
// Note [Children get the parsed trace]
// `replay` runs each backend's row in a child process (Note [Rows in child processes],
// isolated_run.cpp). The children used to read --trace again: 11 s per backend for a 1.48 M
// event snapshot, a trace from a pipe (`/dev/stdin`, `<(zcat ...)`) that the parent had already
// drained read as empty, and bad input in the file was found once per child. Now the parent reads
// and checks the trace once and writes the parsed events, as they lie in memory, into a memfd
// (an anonymous file in RAM); run_in_child gives every child that file as a fixed descriptor
// named by STREAMPOOL_BENCH_DATA_FD, and the child reads it with pread from offset 0 (the
// children share the file's offset). Parent and child are the same executable, so the raw bytes
// of the trivially copyable trace_event are the encoding; a header with a magic word, the
// record size and the count guards against anything else in that descriptor.
#include "trace_handoff.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cli_common.hpp"
#include "isolated_run.hpp"

namespace streampool::bench {
namespace {

static_assert(std::is_trivially_copyable_v<trace_event>, "Note [Children get the parsed trace]: raw bytes");

constexpr std::uint64_t magic = 0x3145434152545053ULL;  // "SPTRACE1"

struct header {
  std::uint64_t magic;
  std::uint64_t record_size;
  std::uint64_t count;
};

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw usage_error(std::string("replay: cannot hand the trace to the rows' processes: ") + std::strerror(errno));
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void read_all_at(int fd, char* data, std::size_t size, off_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw usage_error("replay: the trace handed over by the parent process is truncated");
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
}

}  // namespace

shared_trace::shared_trace(const std::vector<trace_event>& events) {
  fd_ = ::memfd_create("streampool-bench-trace", MFD_CLOEXEC);
  if (fd_ < 0) throw usage_error(std::string("replay: cannot make a memory file for the trace: ") + std::strerror(errno));
  const header h{magic, sizeof(trace_event), events.size()};
  try {
    write_all(fd_, reinterpret_cast<const char*>(&h), sizeof h);
    write_all(fd_, reinterpret_cast<const char*>(events.data()), events.size() * sizeof(trace_event));
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

shared_trace::~shared_trace() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::vector<trace_event>> inherited_trace_events() {
  if (!is_row_child()) return std::nullopt;
  const int fd = inherited_data_fd();
  if (fd < 0) return std::nullopt;
  header h{};
  read_all_at(fd, reinterpret_cast<char*>(&h), sizeof h, 0);
  if (h.magic != magic || h.record_size != sizeof(trace_event) || h.count > (std::uint64_t{1} << 40) / sizeof(trace_event)) {
    throw usage_error("replay: the trace handed over by the parent process is not one (bad header)");
  }
  std::vector<trace_event> events(static_cast<std::size_t>(h.count));
  read_all_at(fd, reinterpret_cast<char*>(events.data()), events.size() * sizeof(trace_event), sizeof h);
  return events;
}

}  // namespace streampool::bench
