// tests/unit/config/roundup_test.cpp — roundup_power2_divisions in both forms and
// allocator_config::divisions_for(), with the exact table semantics of docs/pytorch-compatibility.md §1.4 (newest).
//
// Tables are written out index by index: index k covers [2^k MiB, 2^(k+1) MiB), 0 also < 1 MiB.
#include <array>

#include "config_test_support.hpp"

namespace streampool::test {
namespace {

using table = std::array<std::size_t, allocator_config::roundup_intervals>;

table roundup(std::string_view value) {
  return parse_config("roundup_power2_divisions:" + std::string(value)).roundup_power2_divisions;
}

TEST(config_roundup, DefaultIsOffEverywhere) {
  EXPECT_EQ(allocator_config{}.roundup_power2_divisions, table{});
  EXPECT_EQ(allocator_config{}.divisions_for(100 * mib), 0u);
}

TEST(config_roundup, SingleValueSetsEveryInterval) {
  table four;
  four.fill(4);
  EXPECT_EQ(roundup("4"), four);
  table one;
  one.fill(1);
  EXPECT_EQ(roundup("1"), one);
  expect_config_error("roundup_power2_divisions:0", "roundup_power2_divisions", 0,
                      {"roundup_power2_divisions:0", "value 0 is not a power of two"});
  expect_config_error("roundup_power2_divisions:3", "roundup_power2_divisions", 0,
                      {"value 3 is not a power of two", "a power of two, or a list [K:D,...,>:D]"});
  expect_config_error("roundup_power2_divisions:4x", "roundup_power2_divisions", 0,
                      {"'4x' is not an integer"});
}

TEST(config_roundup, DocsExampleIsOneIntervalOffFromTheProse) {
  // docs/pytorch-compatibility.md §1.4: K is the lower bound of the interval it sets; the first entry back-fills below.
  EXPECT_EQ(roundup("[256:1,512:2,1024:4,>:8]"),
            (table{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8}));
}

TEST(config_roundup, ListWithRepeatedValues) {
  EXPECT_EQ(roundup("[64:8,128:2,256:2,512:2,1024:1,>:1]"),
            (table{8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 1, 1, 1, 1, 1, 1}));
  // PyTorch's test_allocator_settings: 84 MiB -> 8 divisions, 400 MiB -> 2 (docs/pytorch-compatibility.md §1.4, §6).
  const allocator_config config =
      parse_config("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
  EXPECT_EQ(config.divisions_for(84 * mib), 8u);
  EXPECT_EQ(config.divisions_for(400 * mib), 2u);
}

TEST(config_roundup, GreaterThanFillsOnlyAfterTheLastExplicitEntry) {
  // Newest semantics: the 256 MiB entry (index 8) keeps its value (v2.1–2.8 overwrote it).
  EXPECT_EQ(roundup("[256:1,>:8]"), (table{1, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8, 8, 8, 8}));
  // Alone, it fills the whole table.
  table four;
  four.fill(4);
  EXPECT_EQ(roundup("[>:4]"), four);
}

TEST(config_roundup, GapsBetweenEntriesStayZero) {
  EXPECT_EQ(roundup("[1:4,1024:2]"), (table{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0}));
  EXPECT_EQ(roundup("[256:0,>:4]"), (table{0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4}));
}

TEST(config_roundup, IntervalsBeyondTheTableClampToTheLastIndex) {
  EXPECT_EQ(roundup("[65536:2]"), (table{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(roundup("[1:4,65536:2]"), (table{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}));
}

TEST(config_roundup, WhitespaceInsideTheList) {
  EXPECT_EQ(roundup("[ 256 : 1 , > : 8 ]"), roundup("[256:1,>:8]"));
}

TEST(config_roundup, RepeatedKeyReplacesTheWholeTable) {
  EXPECT_EQ(parse_config("roundup_power2_divisions:4,roundup_power2_divisions:[256:1]")
                .roundup_power2_divisions,
            (table{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0}));
  table two;
  two.fill(2);
  EXPECT_EQ(parse_config("roundup_power2_divisions:[256:1],roundup_power2_divisions:2")
                .roundup_power2_divisions,
            two);
}

TEST(config_roundup, BadEntriesNameTheEntryAndItsPosition) {
  // "roundup_power2_divisions:[" is 26 characters.
  expect_config_error("roundup_power2_divisions:[256:1,3:2]", "roundup_power2_divisions", 32,
                      {"roundup_power2_divisions entry 3:2", "interval '3' is not a power of two"});
  expect_config_error("roundup_power2_divisions:[0:2]", "roundup_power2_divisions", 26,
                      {"interval '0' is not a power of two"});
  expect_config_error("roundup_power2_divisions:[abc:2]", "roundup_power2_divisions", 26,
                      {"interval 'abc'"});
  expect_config_error("roundup_power2_divisions:[256:3]", "roundup_power2_divisions", 26,
                      {"entry 256:3", "divisions 3 is neither 0 nor a power of two"});
  expect_config_error("roundup_power2_divisions:[256:-1]", "roundup_power2_divisions", 26,
                      {"divisions '-1' is not a non-negative integer"});
  expect_config_error("roundup_power2_divisions:[>:8,256:1]", "roundup_power2_divisions", 26,
                      {"'>' must be the last entry"});
}

TEST(config_roundup, MalformedLists) {
  expect_config_error("roundup_power2_divisions:[]", "roundup_power2_divisions", 0,
                      {"roundup_power2_divisions:[]", "the list is empty"});
  expect_config_error("roundup_power2_divisions:[256:1", "roundup_power2_divisions", 25,
                      {"the list is not closed", "expected ',' or ']'"});
  expect_config_error("roundup_power2_divisions:[256:1,", "roundup_power2_divisions", 25,
                      {"the list is not closed", "expected ']'"});
  expect_config_error("roundup_power2_divisions:[256]", "roundup_power2_divisions", 26,
                      {"list entry '256' has no ':D' part"});
  expect_config_error("roundup_power2_divisions:[256:]", "roundup_power2_divisions", 26,
                      {"has no divisions after ':'"});
  expect_config_error("roundup_power2_divisions:[256:1:2]", "roundup_power2_divisions", 31,
                      {"found ':' after a list entry", "expected ',' or ']'"});
  expect_config_error("roundup_power2_divisions:[,256:1]", "roundup_power2_divisions", 26,
                      {"found ',' in the list"});
  expect_config_error("roundup_power2_divisions:[256:1]x", "roundup_power2_divisions", 32,
                      {"roundup_power2_divisions:[256:1]", "found 'x' after the value"});
}

TEST(config_roundup, DivisionsForUsesTheIntervalIndex) {
  // Distinct values per index: interval k (lower bound 2^k MiB) gets 2^k divisions.
  const allocator_config config = parse_config(
      "roundup_power2_divisions:[1:1,2:2,4:4,8:8,16:16,32:32,64:64,128:128,256:256,512:512,"
      "1024:1024,2048:2048,4096:4096,8192:8192,16384:16384,32768:32768]");
  EXPECT_EQ(config.divisions_for(0), 1u);
  EXPECT_EQ(config.divisions_for(512), 1u);
  EXPECT_EQ(config.divisions_for(mib), 1u);
  EXPECT_EQ(config.divisions_for(2 * mib - 1), 1u);
  EXPECT_EQ(config.divisions_for(2 * mib), 2u);
  EXPECT_EQ(config.divisions_for(4 * mib - 1), 2u);
  EXPECT_EQ(config.divisions_for(4 * mib), 4u);
  EXPECT_EQ(config.divisions_for(256 * mib), 256u);
  EXPECT_EQ(config.divisions_for(512 * mib - 1), 256u);
  EXPECT_EQ(config.divisions_for(512 * mib), 512u);
  EXPECT_EQ(config.divisions_for(gib), 1024u);
  EXPECT_EQ(config.divisions_for(32 * gib - 1), 16384u);
  EXPECT_EQ(config.divisions_for(32 * gib), 32768u);
  EXPECT_EQ(config.divisions_for(allocator_config::unlimited), 32768u);
}

TEST(config_roundup, DivisionsForTheDocsExample) {
  const allocator_config config = parse_config("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_EQ(config.divisions_for(100 * mib), 1u);
  EXPECT_EQ(config.divisions_for(300 * mib), 1u);  // [256, 512) MiB: index 8
  EXPECT_EQ(config.divisions_for(600 * mib), 2u);  // [512, 1024) MiB: index 9
  EXPECT_EQ(config.divisions_for(gib + 1), 4u);
  EXPECT_EQ(config.divisions_for(3 * gib), 8u);
}

}  // namespace
}  // namespace streampool::test
