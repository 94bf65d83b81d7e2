// pickle_bounds_test.cpp — issue 31: the pickle reader reads what Python's unpickler reads (an
// event referenced twice through the memo, the last of duplicate dict keys; Note [Values
// referenced twice]) and its memory is bounded by what it holds (Note [Bounded by what it holds]):
// small generated bombs are refused early, each with one clear message, never std::bad_alloc.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "replay/pickle_reader.hpp"
#include "streampool/errors.hpp"
#include "streampool/replay.hpp"

namespace streampool::replay_impl {
namespace {

const std::string proto4("\x80\x04", 2);

/// Appends pickle opcodes; memoize() returns the memo index it stored at.
struct pickle_writer {
  std::string p = proto4;
  std::uint32_t next_memo = 0;
  void text(const std::string& s) {
    p += static_cast<char>(0x8c);
    p += static_cast<char>(s.size());
    p += s;
  }
  void integer(std::uint32_t v) {
    p += 'J';
    for (int i = 0; i < 4; ++i) p += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::uint32_t memoize() {
    p += static_cast<char>(0x94);
    return next_memo++;
  }
  void get(std::uint32_t index) {
    p += 'j';
    for (int i = 0; i < 4; ++i) p += static_cast<char>((index >> (8 * i)) & 0xff);
  }
  /// An event dict {action, addr, size}; `size_twice` writes the key 'size' twice (last: 512).
  std::uint32_t event(const char* action, std::uint32_t addr, bool size_twice = false) {
    p += "}";
    const std::uint32_t memo = memoize();
    p += "(";
    text("action");
    text(action);
    text("addr");
    integer(addr);
    text("size");
    integer(size_twice ? 1 : 512);
    if (size_twice) {
      text("size");
      integer(512);
    }
    p += "u";
    return memo;
  }
};

std::string message_of(const std::string& data, const pickle_limits& limits = {}) {
  const auto in = memory_source(data);
  try {
    (void)parse_pickle(*in, "bomb.pickle", {}, {}, limits);
  } catch (const error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a streampool::error: ") + e.what();
  }
  return "no error";
}

std::string snapshot_message(const std::string& data) {
  try {
    (void)parse_snapshot(data, "snap");
  } catch (const error& e) {
    return e.what();
  }
  return "no error";
}

// An event referenced twice through the memo is two events for Python; it used to be dropped
// the second time (the first had been handed over and released). Both within one APPENDS batch
// and in a later batch, as Python's pickler writes lists in batches of 1000.
TEST(pickle_bounds, EventReferencedTwiceThroughTheMemoIsReadTwice) {
  for (const bool same_batch : {true, false}) {
    pickle_writer w;
    w.p += "}(";
    w.text("device_traces");
    w.p += "](](";
    const std::uint32_t first = w.event("alloc", 4096);
    w.event("free_requested", 4096);
    if (!same_batch) w.p += "e(";
    w.get(first);  // the alloc again
    w.p += "ee";
    w.p += "u.";
    const trace_file file = parse_snapshot(w.p, "snap");
    ASSERT_EQ(file.events.size(), 3u) << (same_batch ? "same batch" : "later batch");
    EXPECT_EQ(file.events[0].action, trace_action::alloc);
    EXPECT_EQ(file.events[1].action, trace_action::free_requested);
    EXPECT_EQ(file.events[2].action, trace_action::alloc);
    EXPECT_EQ(file.events[2].address, 4096u);
    EXPECT_EQ(file.events[2].size, 512u);
    EXPECT_EQ(file.events[2].line, 3u);
  }
}

// Python's dict keeps the last value of a key given twice; the reader kept the first.
TEST(pickle_bounds, DuplicateDictKeysKeepTheLastValue) {
  const std::string bytes = proto4 + "}(" + "\x8c\x01" "aK\x01" "\x8c\x01" "aK\x02" "u.";
  const auto in = memory_source(bytes);  // keeps a view: `bytes` must outlive it
  const pickle_document doc = parse_pickle(*in, "t");
  const pickle_value* a = doc.find(doc.root(), "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->integer, 2);

  pickle_writer w;
  w.p += "}(";
  w.text("device_traces");
  w.p += "](](";
  w.event("alloc", 4096, true);
  w.p += "ee";
  w.p += "u.";
  const trace_file file = parse_snapshot(w.p, "snap");
  ASSERT_EQ(file.events.size(), 1u);
  EXPECT_EQ(file.events[0].size, 512u);
}

// A text PUT/GET index beyond 2^64 ended in "failed: stoull".
TEST(pickle_bounds, MemoIndexOverflowGetsAClearMessage) {
  for (const char* op : {"p", "g"}) {
    const std::string message = message_of(proto4 + "N" + std::string(op) + "99999999999999999999999\n.");
    EXPECT_NE(message.find("memo index '99999999999999999999999'"), std::string::npos) << message;
    EXPECT_NE(message.find("not a decimal integer below 2^64"), std::string::npos) << message;
    EXPECT_NE(message.find("bomb.pickle"), std::string::npos) << message;
    EXPECT_EQ(message.find("stoull"), std::string::npos) << message;
  }
  EXPECT_NE(message_of(proto4 + "Np12x\n.").find("memo index '12x'"), std::string::npos);
}

// 300,000 DUPs (300 KB) held 300,000 stack entries; refused at the default stack bound.
TEST(pickle_bounds, DupBombIsRefusedAtTheStackBound) {
  const std::string message = message_of(proto4 + "N" + std::string(300000, '2') + ".");
  EXPECT_NE(message.find("refused: the stack holds more than 262144 values"), std::string::npos) << message;
  EXPECT_NE(message.find("built to exhaust memory"), std::string::npos) << message;
}

TEST(pickle_bounds, MarkBombIsRefusedAtTheStackBound) {
  const std::string message = message_of(proto4 + std::string(300000, '(') + ".");
  EXPECT_NE(message.find("refused: more than 262144 MARKs are open at once"), std::string::npos) << message;
}

// Empty lists appended to a kept list, and empty lists popped (but alive for the memo): the
// containers and items built are bounded by the events handed over.
TEST(pickle_bounds, ContainerBombsAreRefusedRelativeToTheEventsHandedOver) {
  pickle_limits small;
  small.base_items = 1000;
  std::string appended = proto4 + "]";
  for (int i = 0; i < 5000; ++i) appended += "]a";
  std::string message = message_of(appended + ".", small);
  EXPECT_NE(message.find("refused: it builds containers holding more than 1000 values while it has handed over 0 events"),
            std::string::npos)
      << message;
  std::string popped = proto4;
  for (int i = 0; i < 5000; ++i) popped += "]0";
  message = message_of(popped + "N.", small);
  EXPECT_NE(message.find("refused: it builds containers holding more than 1000 values"), std::string::npos) << message;
  // The default budget holds a kept list of 100,000 items.
  std::string fine = proto4 + "](";
  for (int i = 0; i < 100000; ++i) fine += "N";
  EXPECT_EQ(message_of(fine + "e."), "no error");
}

TEST(pickle_bounds, MemoBombIsRefused) {
  const std::string message = message_of(proto4 + "N" + std::string(5000, '\x94') + "0N.");
  EXPECT_NE(message.find("refused: the memo would hold more entries (1026) than the 1 values built so far plus 1024"),
            std::string::npos)
      << message;
}

// A kept string claiming 1 TiB is refused before anything is read or reserved.
TEST(pickle_bounds, HugeKeptStringIsRefusedBeforeReading) {
  const std::string message = message_of(proto4 + std::string("\x8d\x00\x00\x00\x00\x00\x01\x00\x00", 9) + "x");
  EXPECT_NE(message.find("refused: it keeps strings of more than 67108864 bytes in all (this one claims 1099511627776)"),
            std::string::npos)
      << message;
}

// The same bombs through the snapshot reader: one message naming the file.
TEST(pickle_bounds, SnapshotBombsGetOneMessage) {
  const std::string message = snapshot_message(proto4 + "}(" + "\x8c\x0d" "device_traces" + "]" +
                                               std::string(300000, '2') + ".");
  EXPECT_EQ(message.rfind("trace snap: refused: the stack holds more than", 0), 0u) << message;
}

}  // namespace
}  // namespace streampool::replay_impl
