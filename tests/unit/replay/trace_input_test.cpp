// trace_input_test.cpp — issue 31: trace files read once and bounded by what they hold. Pipes
// (/dev/stdin, process substitution) read right, plain, gzip and pickle alike (Note [Reading a
// pipe]); a gzip bomb of one huge line, a newline bomb and /dev/zero are refused at the line
// bound without reading the rest (Note [Bounded trace lines]). The bombs are generated here with
// zlib, small and fast: the refusal comes at the bound, so the test never inflates them whole.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "streampool/errors.hpp"
#include "streampool/replay.hpp"

namespace streampool {
namespace {

const std::string csv =
    "action,addr,size,stream,time_us\n"
    "alloc,4096,512,0,1\n"
    "free_requested,4096,512,0,2\n"
    "free_completed,4096,512,0,3\n";

/// gzip-compresses `pieces` x `piece` after `head` (one gzip member).
std::string gzip(const std::string& head, const std::string& piece = "", std::size_t pieces = 0) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out;
  char buffer[1 << 16];
  const auto feed = [&](const std::string& in, int flush) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    do {
      z.next_out = reinterpret_cast<Bytef*>(buffer);
      z.avail_out = sizeof buffer;
      deflate(&z, flush);
      out.append(buffer, sizeof buffer - z.avail_out);
    } while (z.avail_out == 0);
  };
  feed(head, Z_NO_FLUSH);
  for (std::size_t i = 0; i < pieces; ++i) feed(piece, Z_NO_FLUSH);
  feed("", Z_FINISH);
  deflateEnd(&z);
  return out;
}

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string error_of(const std::string& path) {
  try {
    (void)read_trace_file(path);
  } catch (const error& e) {
    return e.what();
  }
  return "no error";
}

/// Reads `bytes` as a trace through a pipe, /dev/fd/N, as `<(zcat ...)` and /dev/stdin present it.
trace_file read_through_pipe(const std::string& bytes) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fds[1], bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;  // the reader gave up
      done += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
  });
  trace_file file;
  try {
    file = read_trace_file("/dev/fd/" + std::to_string(fds[0]));
  } catch (...) {
    ::close(fds[0]);
    writer.join();
    throw;
  }
  ::close(fds[0]);
  writer.join();
  return file;
}

TEST(trace_input, PipesReadLikeFiles) {
  const trace_file plain = read_through_pipe(csv);
  EXPECT_EQ(plain.format, "csv");
  ASSERT_EQ(plain.events.size(), 3u);
  EXPECT_EQ(plain.events[2].action, trace_action::free_completed);
  const trace_file gz = read_through_pipe(gzip(csv));
  ASSERT_EQ(gz.events.size(), 3u);
  EXPECT_EQ(gz.events[0].address, 4096u);
  // A snapshot pickle through a pipe, plain and gzipped.
  std::ifstream in(std::string(STREAMPOOL_TEST_DATA_DIR) + "/snapshots/snapshot_p4.pickle", std::ios::binary);
  const std::string pickle((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(pickle.empty());
  EXPECT_EQ(read_through_pipe(pickle).events.size(), 15u);
  EXPECT_EQ(read_through_pipe(gzip(pickle)).events.size(), 15u);
}

TEST(trace_input, ConcatenatedGzipMembersReadWhole) {
  const std::string path = write_file("two_members.csv.gz", gzip(csv) + gzip("alloc,8192,512,0,4\n"));
  EXPECT_EQ(read_trace_file(path).events.size(), 4u);
  std::remove(path.c_str());
}

// About 100 KB of gzip expanding to one 64 MiB line: refused at the line bound, at once.
TEST(trace_input, GzipBombOfOneLineIsRefusedAtTheLineBound) {
  const std::string path =
      write_file("bomb.csv.gz", gzip("action,addr,size,stream,time_us\nalloc,", std::string(1 << 20, '7'), 64));
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of(path);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(message.find("line 2: the line is longer than 4096 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("refused without reading the rest"), std::string::npos) << message;
  EXPECT_LT(took, std::chrono::seconds(5)) << "the bomb was inflated, not refused at the bound";
  std::remove(path.c_str());
}

TEST(trace_input, NewlineBombIsRefused) {
  const std::string path = write_file("newlines.csv.gz", gzip("action,addr,size,stream,time_us\n", std::string(1 << 20, '\n'), 8));
  const std::string message = error_of(path);
  EXPECT_NE(message.find("more than 1048576 blank lines in a row"), std::string::npos) << message;
  std::remove(path.c_str());
}

TEST(trace_input, DevZeroIsRefusedWithoutReadingIt) {
  const std::string message = error_of("/dev/zero");
  EXPECT_NE(message.find("trace /dev/zero line 1: binary data"), std::string::npos) << message;
}

TEST(trace_input, EmptyPipeIsAnEmptyTrace) {
  try {
    (void)read_through_pipe("");
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("empty trace"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace streampool
