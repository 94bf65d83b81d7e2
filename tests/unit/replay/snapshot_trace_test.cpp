// snapshot_trace_test.cpp — PyTorch memory snapshots as traces: the committed fixture pickles of
// tests/data/snapshots (protocols 2, 4, 5, gzip, any file name), the allocator settings, several
// devices, a recording that starts mid-run, every bad-input message, the CSV path still working,
// and memory that follows the events rather than the skipped stack frames.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "replay/pickle_reader.hpp"
#include "streampool/errors.hpp"
#include "streampool/replay.hpp"

namespace streampool {
namespace {

std::string data(const std::string& name) { return std::string(STREAMPOOL_TEST_DATA_DIR) + "/snapshots/" + name; }

std::string error_of(const std::string& name, int device = 0) {
  try {
    (void)read_trace_file(data(name), {device});
  } catch (const error& e) {
    return e.what();
  }
  return "no error";
}

constexpr std::uint64_t seg = 0x7F0000000000;
constexpr std::uint64_t mib_bytes = 1 << 20;

void expect_base_trace(const trace_file& file) {
  EXPECT_EQ(file.format, "pytorch-snapshot");
  ASSERT_EQ(file.events.size(), 15u);  // 16 entries, one user_defined annotation left out
  EXPECT_EQ(file.events[0].action, trace_action::segment_alloc);
  EXPECT_EQ(file.events[0].address, seg);
  EXPECT_EQ(file.events[0].size, 20 * mib_bytes);
  EXPECT_EQ(file.events[1].action, trace_action::alloc);
  EXPECT_EQ(file.events[3].stream, 94000000000000u);
  EXPECT_EQ(file.events[3].time_us, 4u);
  EXPECT_EQ(file.events[7].action, trace_action::alloc);
  EXPECT_EQ(file.events[7].line, 9u);  // index in the device trace, counting the skipped annotation
  EXPECT_EQ(file.events[13].action, trace_action::oom);
  EXPECT_EQ(file.events[13].address, 123 * mib_bytes);  // device_free
  EXPECT_EQ(file.events[14].action, trace_action::snapshot);
  EXPECT_TRUE(file.warnings.empty());
  EXPECT_TRUE(file.has_allocator_settings);
  EXPECT_EQ(file.allocator_settings, "expandable_segments:True,max_split_size_mb:256");
}

TEST(snapshot_trace, ReadsEveryProtocolAndGzipByContent) {
  expect_base_trace(read_trace_file(data("snapshot_p4.pickle")));
  expect_base_trace(read_trace_file(data("snapshot_p2.pickle")));
  expect_base_trace(read_trace_file(data("snapshot_p5.pickle.gz")));
  EXPECT_EQ(read_trace(data("snapshot_p4.pickle")).size(), 15u);
}

TEST(snapshot_trace, ParsesFromMemoryToo) {
  std::ifstream in(data("snapshot_p4.pickle"), std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  expect_base_trace(parse_snapshot(bytes.str(), "memory"));
}

TEST(snapshot_trace, PicksTheDeviceAndRejectsAnAbsentOne) {
  // Device 0 recorded nothing, device 1 the trace; the extension says nothing.
  const trace_file file = read_trace_file(data("snapshot_two_devices.snap"), {1});
  EXPECT_EQ(file.devices, 2);
  expect_base_trace(file);
  EXPECT_NE(error_of("snapshot_two_devices.snap", 0).find("device 0 recorded no events; pick one with --device: 1 (16 events)"),
            std::string::npos);
  EXPECT_NE(error_of("snapshot_two_devices.snap", 2).find("--device 2 is not in the snapshot, which has 2 device(s)"),
            std::string::npos);
  EXPECT_NE(error_of("snapshot_p4.pickle", -1).find("negative"), std::string::npos);
}

TEST(snapshot_trace, RebuildsTheConfigOfOlderSnapshots) {
  const trace_file file = read_trace_file(data("snapshot_old_settings.pickle"));
  EXPECT_TRUE(file.has_allocator_settings);
  EXPECT_EQ(file.allocator_settings,
            "expandable_segments:True,roundup_power2_divisions:[1:0,2:0,4:0,8:0,16:0,32:0,64:0,128:0,256:4,512:0,"
            "1024:0,2048:0,4096:0,8192:0,16384:0,32768:0]");
  const std::vector<trace_event> csv_like = file.events;
  EXPECT_EQ(csv_like.size(), 15u);
}

TEST(snapshot_trace, WarnsWhenTheRecordingStartsMidRun) {
  const trace_file file = read_trace_file(data("snapshot_wrapped.pickle"));
  ASSERT_EQ(file.warnings.size(), 1u);
  EXPECT_NE(file.warnings[0].find("1 of its 5 frees name blocks allocated before its first event"), std::string::npos);
  EXPECT_NE(file.warnings[0].find("ring buffer of max_entries events wrapped"), std::string::npos);
  EXPECT_NE(file.warnings[0].find("_record_memory_history(max_entries=N)"), std::string::npos);
  EXPECT_EQ(file.events.size(), 17u);
}

TEST(snapshot_trace, BadSnapshotsGetOneClearMessage) {
  EXPECT_NE(error_of("snapshot_truncated.pickle").find("truncated pickle"), std::string::npos);
  EXPECT_NE(error_of("snapshot_no_history.pickle").find("allocation trace is empty on every device: memory history recording was off"),
            std::string::npos);
  EXPECT_NE(error_of("snapshot_no_history.pickle").find("_record_memory_history(max_entries="), std::string::npos);
  EXPECT_NE(error_of("snapshot_async_no_history.pickle").find("backend:cudaMallocAsync, which records no history"),
            std::string::npos);
  EXPECT_NE(error_of("snapshot_no_device_traces.pickle").find("no allocation trace ('device_traces')"), std::string::npos);
  const std::string code = error_of("code.pickle");
  EXPECT_NE(code.find("which would import or call code"), std::string::npos) << code;
  EXPECT_NE(code.find("code.pickle"), std::string::npos) << code;
  const std::string newer = error_of("snapshot_unknown_action.pickle");
  EXPECT_NE(newer.find("device_traces[0] event 4 has action 'segment_teleport'"), std::string::npos) << newer;
  EXPECT_NE(newer.find("newer PyTorch"), std::string::npos) << newer;
  // Every message names the file.
  for (const char* name : {"snapshot_truncated.pickle", "snapshot_no_history.pickle", "snapshot_unknown_action.pickle"}) {
    EXPECT_EQ(error_of(name).rfind("trace " + data(name), 0), 0u) << error_of(name);
  }
}

TEST(snapshot_trace, BinaryThatIsNotAPickleIsNamedAsSuch) {
  const std::string path = ::testing::TempDir() + "/not_a_trace.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string("\x01\x02\x03garbage\n", 11);
  }
  try {
    (void)read_trace_file(path);
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("binary data: neither a CSV trace"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(snapshot_trace, CsvStillReadsByContent) {
  const std::string path = ::testing::TempDir() + "/trace.pickle";  // a CSV with a misleading name
  {
    std::ofstream out(path);
    out << "action,addr,size,stream,time_us\nalloc,4096,100,0,1\nfree_requested,4096,100,0,2\n";
  }
  const trace_file file = read_trace_file(path);
  EXPECT_EQ(file.format, "csv");
  EXPECT_EQ(file.events.size(), 2u);
  EXPECT_FALSE(file.has_allocator_settings);
  std::remove(path.c_str());
}

// A snapshot of 4000 events, each with its own 20-frame stack: the reader streams the events and
// skips the frames, so the containers alive after reading are a handful, not one per frame.
TEST(snapshot_trace, MemoryFollowsEventsNotFrames) {
  std::string p = std::string("\x80\x04}(", 4);
  const auto text = [&p](const std::string& s) {
    p += static_cast<char>(0x8c);
    p += static_cast<char>(s.size());
    p += s;
  };
  const auto integer = [&p](std::uint32_t v) {
    p += 'J';
    for (int i = 0; i < 4; ++i) p += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  text("segments");
  p += "]";
  text("device_traces");
  p += "](](";
  constexpr int events = 4000;
  for (int i = 0; i < events; ++i) {
    p += "}(";
    text("action");
    text(i % 2 == 0 ? "alloc" : "free_requested");
    text("addr");
    integer(4096u * static_cast<std::uint32_t>(i / 2 + 1));
    text("size");
    integer(512);
    text("frames");
    p += "](";
    for (int f = 0; f < 20; ++f) {
      p += "}(";
      text("filename");
      text("/a/long/path/to/some/python/module/that/is/deep/file.py");
      text("line");
      integer(static_cast<std::uint32_t>(f));
      p += "u";
    }
    p += "eu";
  }
  p += "ee";
  p += "u.";
  const auto in = replay_impl::memory_source(p);
  std::size_t seen = 0;
  const replay_impl::pickle_document doc = replay_impl::parse_pickle(
      *in, "big", [](const replay_impl::value_place& place) -> replay_impl::value_role {
        using replay_impl::value_policy;
        if (place.parent_tag == replay_impl::value_place::root_tag) return {value_policy::keep, 1};
        if (place.parent_tag == 1) return {place.key == "device_traces" ? value_policy::keep : value_policy::skip, 2};
        if (place.parent_tag == 2) return {value_policy::stream, 3};
        if (place.parent_tag == 3) return {value_policy::keep, 4};
        return {place.key == "frames" ? value_policy::skip : value_policy::keep, 5};
      },
      [&seen](const replay_impl::pickle_document&, int, std::size_t, const replay_impl::pickle_value&) { ++seen; });
  EXPECT_EQ(seen, static_cast<std::size_t>(events));
  EXPECT_LE(doc.containers_in_use(), 8u);
  EXPECT_LE(doc.strings_kept(), 16u);  // keys and actions; the long file names were skipped
  // The same through the snapshot reader.
  const trace_file file = parse_snapshot(p, "big");
  EXPECT_EQ(file.events.size(), static_cast<std::size_t>(events));
}

}  // namespace
}  // namespace streampool
