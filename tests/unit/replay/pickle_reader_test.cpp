// pickle_reader_test.cpp — the pickle data-subset reader on hand-built byte sequences: every
// supported opcode, the memo, refusal of every opcode that would import or call code, truncation,
// and the skip/stream policies (skipped subtrees are not built, memo indices stay right).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "replay/pickle_reader.hpp"
#include "streampool/errors.hpp"

namespace streampool::replay_impl {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (const int v : values) out += static_cast<char>(v);
  return out;
}

/// Python-like text of a value: {'a': [1, 2.5], 'b': None}.
std::string show(const pickle_document& doc, const pickle_value& v) {
  switch (v.kind) {
    case pickle_kind::none: return "None";
    case pickle_kind::boolean: return v.integer != 0 ? "True" : "False";
    case pickle_kind::integer: return std::to_string(v.integer);
    case pickle_kind::big_integer: return "<big>";
    case pickle_kind::real: {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v.real);
      return text;
    }
    case pickle_kind::string: return "'" + std::string(doc.text(v)) + "'";
    case pickle_kind::bytes: return "b'" + std::string(doc.text(v)) + "'";
    case pickle_kind::skipped: return "<skipped>";
    case pickle_kind::repeat: return "<repeat " + std::to_string(v.index) + ">";
    default: break;
  }
  const auto items = doc.items(v);
  const bool dict = v.kind == pickle_kind::dict;
  std::string out = dict ? "{" : v.kind == pickle_kind::tuple ? "(" : v.kind == pickle_kind::set ? "set(" : "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += dict && i % 2 == 1 ? ": " : ", ";
    out += show(doc, items[i]);
  }
  return out + (dict ? "}" : v.kind == pickle_kind::tuple || v.kind == pickle_kind::set ? ")" : "]");
}

std::string parse_text(const std::string& data, const role_function& role = {}, const stream_function& stream = {}) {
  const auto in = memory_source(data);
  const pickle_document doc = parse_pickle(*in, "t.pickle", role, stream);
  return show(doc, doc.root());
}

std::string error_of(const std::string& data) {
  try {
    (void)parse_text(data);
  } catch (const error& e) {
    return e.what();
  }
  return "no error";
}

const std::string proto4 = bytes({0x80, 4});

TEST(pickle_reader, ScalarsOfEveryEncoding) {
  EXPECT_EQ(parse_text(proto4 + "N."), "None");
  EXPECT_EQ(parse_text(proto4 + bytes({0x88, '.'})), "True");
  EXPECT_EQ(parse_text(proto4 + bytes({0x89, '.'})), "False");
  EXPECT_EQ(parse_text(proto4 + bytes({'K', 200, '.'})), "200");                           // BININT1
  EXPECT_EQ(parse_text(proto4 + bytes({'M', 0x34, 0x12, '.'})), "4660");                   // BININT2
  EXPECT_EQ(parse_text(proto4 + bytes({'J', 0xff, 0xff, 0xff, 0xff, '.'})), "-1");          // BININT
  EXPECT_EQ(parse_text(proto4 + bytes({0x8a, 0, '.'})), "0");                               // LONG1, empty
  EXPECT_EQ(parse_text(proto4 + bytes({0x8a, 2, 0xff, 0x7f, '.'})), "32767");
  EXPECT_EQ(parse_text(proto4 + bytes({0x8a, 1, 0xff, '.'})), "-1");
  // 2^63 needs 9 bytes (sign byte): too large for 64 bits, kept as such.
  EXPECT_EQ(parse_text(proto4 + bytes({0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, '.'})), "<big>");
  // 2^62 written with a redundant sign-extension byte still fits.
  EXPECT_EQ(parse_text(proto4 + bytes({0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, '.'})), "4611686018427387904");
  EXPECT_EQ(parse_text(proto4 + bytes({0x8b, 3, 0, 0, 0, 1, 0, 1, '.'})), "65537");       // LONG4
  EXPECT_EQ(parse_text(proto4 + "I01\n."), "True");
  EXPECT_EQ(parse_text(proto4 + "I-42\n."), "-42");
  EXPECT_EQ(parse_text(proto4 + "L12345L\n."), "12345");
  EXPECT_EQ(parse_text(proto4 + bytes({'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, '.'})), "1.5");  // BINFLOAT
  EXPECT_EQ(parse_text(proto4 + "F0.25\n."), "0.25");
}

TEST(pickle_reader, StringsAndBytesOfEveryEncoding) {
  EXPECT_EQ(parse_text(proto4 + bytes({0x8c, 2}) + "hi."), "'hi'");               // SHORT_BINUNICODE
  EXPECT_EQ(parse_text(proto4 + bytes({'X', 3, 0, 0, 0}) + "abc."), "'abc'");     // BINUNICODE
  EXPECT_EQ(parse_text(proto4 + bytes({0x8d, 1, 0, 0, 0, 0, 0, 0, 0}) + "z."), "'z'");  // BINUNICODE8
  EXPECT_EQ(parse_text(proto4 + bytes({'C', 2}) + "xy."), "b'xy'");               // SHORT_BINBYTES
  EXPECT_EQ(parse_text(proto4 + bytes({'B', 1, 0, 0, 0}) + "q."), "b'q'");        // BINBYTES
  EXPECT_EQ(parse_text(proto4 + bytes({0x8e, 1, 0, 0, 0, 0, 0, 0, 0}) + "w."), "b'w'");  // BINBYTES8
  EXPECT_EQ(parse_text(proto4 + bytes({0x96, 1, 0, 0, 0, 0, 0, 0, 0}) + "v."), "b'v'");  // BYTEARRAY8
  EXPECT_EQ(parse_text(proto4 + bytes({'U', 1}) + "s."), "b's'");                 // SHORT_BINSTRING
  EXPECT_EQ(parse_text(proto4 + bytes({'T', 1, 0, 0, 0}) + "t."), "b't'");        // BINSTRING
}

TEST(pickle_reader, ContainersOfEveryForm) {
  // [1, 2] with MARK/APPENDS; {'a': 1} with SETITEM; (1, 2, 3) with TUPLE3.
  EXPECT_EQ(parse_text(proto4 + "](K" + bytes({1}) + "K" + bytes({2}) + "e."), "[1, 2]");
  EXPECT_EQ(parse_text(proto4 + "]K" + bytes({7}) + "a."), "[7]");
  EXPECT_EQ(parse_text(proto4 + "}" + bytes({0x8c, 1}) + "aK" + bytes({1}) + "s."), "{'a': 1}");
  EXPECT_EQ(parse_text(proto4 + "}(" + bytes({0x8c, 1}) + "aK" + bytes({1, 0x8c, 1}) + "bNu."), "{'a': 1, 'b': None}");
  EXPECT_EQ(parse_text(proto4 + "K" + bytes({1, 'K', 2, 'K', 3, 0x87, '.'})), "(1, 2, 3)");
  EXPECT_EQ(parse_text(proto4 + "K" + bytes({1, 0x85, '.'})), "(1)");
  EXPECT_EQ(parse_text(proto4 + "K" + bytes({1, 'K', 2, 0x86, '.'})), "(1, 2)");
  EXPECT_EQ(parse_text(proto4 + ")."), "()");
  EXPECT_EQ(parse_text(proto4 + "(K" + bytes({1, 'K', 2, 'K', 3, 'K', 4, 't', '.'})), "(1, 2, 3, 4)");  // TUPLE
  EXPECT_EQ(parse_text(proto4 + "(K" + bytes({1}) + "l."), "[1]");                                       // LIST
  EXPECT_EQ(parse_text(proto4 + "(" + bytes({0x8c, 1}) + "kK" + bytes({5}) + "d."), "{'k': 5}");       // DICT
  EXPECT_EQ(parse_text(proto4 + bytes({0x8f}) + "(K" + bytes({1, 0x90, '.'})), "set(1)");             // EMPTY_SET, ADDITEMS
  EXPECT_EQ(parse_text(proto4 + "(K" + bytes({1, 0x91, '.'})), "set(1)");                              // FROZENSET
}

TEST(pickle_reader, MemoAndStackOpcodes) {
  // s = 'ab'; [s, s] through MEMOIZE/BINGET, BINPUT/BINGET, LONG_BINPUT/LONG_BINGET, PUT/GET.
  EXPECT_EQ(parse_text(proto4 + "](" + bytes({0x8c, 2}) + "ab" + bytes({0x94, 'h', 0, 'e', '.'})), "['ab', 'ab']");
  EXPECT_EQ(parse_text(proto4 + "](" + bytes({0x8c, 2}) + "abq" + bytes({5, 'h', 5, 'e', '.'})), "['ab', 'ab']");
  EXPECT_EQ(parse_text(proto4 + "](" + bytes({0x8c, 2}) + "abr" + bytes({9, 0, 0, 0, 'j', 9, 0, 0, 0, 'e', '.'})),
            "['ab', 'ab']");
  EXPECT_EQ(parse_text(proto4 + "](" + bytes({0x8c, 2}) + "abp3\ng3\ne."), "['ab', 'ab']");
  // A memoized list filled after it was stored: the memo sees the same object.
  EXPECT_EQ(parse_text(proto4 + "(]" + bytes({0x94, 'h', 0}) + "t."), "([], [])");
  EXPECT_EQ(parse_text(proto4 + "]2" + bytes({0x86, '.'})), "([], [])");     // DUP
  EXPECT_EQ(parse_text(proto4 + "NK" + bytes({1}) + "0."), "None");         // POP
  EXPECT_EQ(parse_text(proto4 + "N(K" + bytes({1}) + "1."), "None");        // POP_MARK
  // FRAME is a size hint and is skipped.
  EXPECT_EQ(parse_text(proto4 + bytes({0x95, 1, 0, 0, 0, 0, 0, 0, 0}) + "N."), "None");
  EXPECT_NE(error_of(proto4 + "h" + bytes({3}) + "."), "no error");
  EXPECT_NE(error_of(proto4 + "h" + bytes({3}) + ".").find("memo entry 3 is read before it is stored"), std::string::npos);
}

TEST(pickle_reader, RefusesEveryOpcodeThatWouldRunCode) {
  const std::vector<std::pair<int, std::string>> code = {
      {'c', "GLOBAL"},  {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"},    {'b', "BUILD"}, {'i', "INST"},
      {'o', "OBJ"},     {0x81, "NEWOBJ"},       {0x92, "NEWOBJ_EX"}, {0x82, "EXT1"}, {0x83, "EXT2"},
      {0x84, "EXT4"},   {'P', "PERSID"},        {'Q', "BINPERSID"}};
  for (const auto& [op, name] : code) {
    const std::string message = error_of(proto4 + "N" + bytes({op}) + "builtins\neval\n.");
    EXPECT_NE(message.find("opcode " + name + ", which would import or call code"), std::string::npos) << message;
    EXPECT_NE(message.find("never executed"), std::string::npos) << message;
    EXPECT_NE(message.find("t.pickle"), std::string::npos) << message;
  }
}

TEST(pickle_reader, BadInputGetsOneClearMessage) {
  EXPECT_NE(error_of(proto4 + "](K").find("truncated pickle"), std::string::npos);
  EXPECT_NE(error_of(proto4 + bytes({0x8c, 10}) + "abc").find("truncated pickle"), std::string::npos);
  EXPECT_NE(error_of(proto4 + "]").find("truncated pickle"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 6}) + "N.").find("protocol 6 is newer"), std::string::npos);
  EXPECT_NE(error_of(proto4 + bytes({0xfe})).find("unknown pickle opcode 0xfe"), std::string::npos);
  EXPECT_NE(error_of(proto4 + "NN.").find("ends with 2 values"), std::string::npos);
  EXPECT_NE(error_of(proto4 + "e.").find("APPENDS without a MARK"), std::string::npos);
  EXPECT_NE(error_of(proto4 + "Na.").find("APPEND needs a value"), std::string::npos);
  EXPECT_NE(error_of(proto4 + "N").find("truncated"), std::string::npos);
  EXPECT_NE(error_of(proto4 + "K" + bytes({1}) + "K" + bytes({2}) + "a.").find("APPEND applied to a value"),
            std::string::npos);
  EXPECT_NE(error_of(proto4 + "S'a'\n.").find("protocol-0 text strings"), std::string::npos);
  EXPECT_NE(error_of(proto4 + bytes({0x97})).find("out-of-band buffers"), std::string::npos);
  // A huge declared length fails before any allocation of that size: refused by the bound on
  // kept strings (pickle_bounds_test.cpp), or, where it would fit the bound, as truncation.
  EXPECT_NE(error_of(proto4 + bytes({0x8d, 0, 0, 0, 0, 0, 0, 0, 0x40}) + "x").find("refused: it keeps strings"),
            std::string::npos);
  EXPECT_NE(error_of(proto4 + bytes({0x8d, 0, 0, 0, 1, 0, 0, 0, 0}) + "x").find("truncated"), std::string::npos);
  EXPECT_NE(error_of(proto4 + "]").find("at byte"), std::string::npos);
}

// {'keep': [1, 2], 'drop': [[big string], 3]}, the skipped list memoized and read back by the kept one.
TEST(pickle_reader, SkippedSubtreesAreNotBuiltAndMemoIndicesStayRight) {
  const std::string long_text(100, 'x');
  const std::string data = proto4 + "}" + bytes({0x94}) + "(" +                        // memo 0: root
                           bytes({0x8c, 4}) + "drop" + bytes({0x94}) +                  // memo 1
                           "]" + bytes({0x94}) + "(" +                                   // memo 2: the dropped list
                           bytes({0x8c, 100}) + long_text + bytes({0x94}) +              // memo 3: skipped string
                           bytes({0x8c, 2}) + "ok" + bytes({0x94}) +                     // memo 4: short: kept
                           "e" + bytes({0x8c, 4}) + "keep" + bytes({0x94}) +             // memo 5
                           "](" + bytes({'h', 4, 'h', 3, 'h', 2}) + "e" + "u.";
  const role_function role = [](const value_place& p) -> value_role {
    if (p.parent_tag == value_place::root_tag) return {value_policy::keep, 1};
    if (p.parent_tag == 1 && p.key == "drop") return {value_policy::skip, 0};
    return {value_policy::keep, 2};
  };
  EXPECT_EQ(parse_text(data, role), "{'drop': <skipped>, 'keep': ['ok', <skipped>, <skipped>]}");
  EXPECT_EQ(parse_text(data), "{'drop': ['" + long_text + "', 'ok'], 'keep': ['ok', '" + long_text + "', ['" +
                                  long_text + "', 'ok']]}");
}

// A streamed list hands over each item once it is attached, and keeps none of them.
TEST(pickle_reader, StreamedItemsAreHandedOverInOrder) {
  // An empty list right before a full one (the undecided case) and the single-item APPEND forms,
  // exactly as Python's pickler writes them:
  // pickle.dumps({'l': [[], [{'a': 1}, {'a': 2}]], 'm': [[{'a': 3}]]}, protocol=4)
  const std::string python = bytes({0x80, 0x04, 0x95, 0x34, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d, 0x94,
                                    0x28, 0x8c, 0x01, 0x6c, 0x94, 0x5d, 0x94, 0x28, 0x5d, 0x94, 0x5d, 0x94, 0x28,
                                    0x7d, 0x94, 0x8c, 0x01, 0x61, 0x94, 0x4b, 0x01, 0x73, 0x7d, 0x94, 0x68, 0x06,
                                    0x4b, 0x02, 0x73, 0x65, 0x65, 0x8c, 0x01, 0x6d, 0x94, 0x5d, 0x94, 0x5d, 0x94,
                                    0x7d, 0x94, 0x68, 0x06, 0x4b, 0x03, 0x73, 0x61, 0x61, 0x75, 0x2e});
  std::vector<std::string> seen;
  const role_function role = [](const value_place& p) -> value_role {
    if (p.parent_tag == value_place::root_tag) return {value_policy::keep, 1};
    if (p.parent_tag == 1) return {value_policy::keep, 2};
    if (p.parent_tag == 2) return {value_policy::stream, 10 + static_cast<int>(p.index)};
    return {value_policy::keep, 3};
  };
  const stream_function stream = [&seen](const pickle_document& doc, int tag, std::size_t index, const pickle_value& v) {
    seen.push_back(std::to_string(tag) + "/" + std::to_string(index) + "=" + show(doc, v));
  };
  EXPECT_EQ(parse_text(python, role, stream), "{'l': [[], []], 'm': [[]]}");
  EXPECT_EQ(seen, (std::vector<std::string>{"11/0={'a': 1}", "11/1={'a': 2}", "10/0={'a': 3}"}));
}

}  // namespace
}  // namespace streampool::replay_impl
