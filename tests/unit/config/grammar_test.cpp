// tests/unit/config/grammar_test.cpp — the config-string grammar (docs/pytorch-compatibility.md §1.2) and its messages.
//
// Empty strings, whitespace, separators, trailing/empty items, duplicate keys, positions,
// unknown keys with did-you-mean, and the misconception messages.
#include "config_test_support.hpp"

namespace streampool::test {
namespace {

TEST(config_grammar, EmptyAndBlankStringsGiveDefaults) {
  for (const std::string_view text : {"", "   ", " \t\n\r\v\f"}) {
    const allocator_config config = parse_config(text);
    EXPECT_EQ(config.backend, backend_kind::native);
    EXPECT_EQ(config.max_split_size, allocator_config::unlimited);
    EXPECT_EQ(config.max_non_split_rounding, 20 * mib);
    EXPECT_TRUE(config.warnings.empty());
    EXPECT_EQ(config.text, text);
    for (std::size_t i = 0; i < config_key_count; ++i) {
      EXPECT_EQ(config.sources[i], config_source::default_value) << key_name(config_key(i));
    }
  }
}

TEST(config_grammar, WhitespaceIsDroppedEvenInsideWords) {
  const allocator_config config =
      parse_config(" max_split_size_mb : 2 0 ,\texpandable_segments:\nTrue , backend: native ");
  EXPECT_EQ(config.max_split_size, 20 * mib);
  EXPECT_TRUE(config.expandable_segments);
  // Without a ',' the next item glues onto the value (docs/pytorch-compatibility.md §1.2: whitespace does not separate).
  expect_config_error("max_split_size_mb:20 expandable_segments:True", "max_split_size_mb", 0,
                      {"'20expandable_segments' is not an integer"});
}

TEST(config_grammar, PositionsCountTheWhitespace) {
  expect_config_error("   max_split_size_mb:2", "max_split_size_mb", 3,
                      {"value 2 is out of range"});
  expect_config_error("expandable_segments:True,  max_split_size_mb:2", "max_split_size_mb", 27,
                      {"max_split_size_mb:2"});
}

TEST(config_grammar, SeparatorAfterAnItemIsEnforced) {
  expect_config_error("max_split_size_mb:20:30", "max_split_size_mb", 20,
                      {"max_split_size_mb:20", "found ':' after the value",
                       "expected ',' or the end of the string"});
  expect_config_error("max_split_size_mb:20]", "max_split_size_mb", 20, {"found ']'"});
  expect_config_error("expandable_segments:True[", "expandable_segments", 24, {"found '['"});
}

TEST(config_grammar, OneTrailingCommaIsAccepted) {
  const allocator_config config = parse_config("expandable_segments:True,");
  EXPECT_TRUE(config.expandable_segments);
  EXPECT_EQ(parse_config("max_split_size_mb:64 , ").max_split_size, 64 * mib);
  // A comma alone is not a trailing comma: there is no item before it.
  expect_config_error(" ,", "", 1, {"empty item"});
}

TEST(config_grammar, EmptyItemsAreErrors) {
  expect_config_error(",expandable_segments:True", "", 0, {"empty item", "expected key:value"});
  expect_config_error("expandable_segments:True,,backend:native", "", 25, {"empty item"});
  expect_config_error("expandable_segments:True,,", "", 25, {"empty item"});
}

TEST(config_grammar, MissingColonOrValue) {
  expect_config_error("max_split_size_mb", "max_split_size_mb", 0,
                      {"missing ':' and value", "expected an integer >= 20 (MiB)"});
  expect_config_error("backend:native,max_split_size_mb", "max_split_size_mb", 15, {"missing ':'"});
  expect_config_error("max_split_size_mb:", "max_split_size_mb", 0,
                      {"max_split_size_mb:", "missing value", "expected an integer >= 20 (MiB)"});
  expect_config_error("expandable_segments:,backend:native", "expandable_segments", 0,
                      {"missing value", "expected True or False"});
  expect_config_error("max_split_size_mb::20", "max_split_size_mb", 18,
                      {"found ':' where the value should be"});
}

TEST(config_grammar, PunctuationWhereAKeyShouldBe) {
  expect_config_error(":20", "", 0, {"found ':' where a key should be"});
  expect_config_error("[1:2]", "", 0, {"found '['"});
}

TEST(config_grammar, ListOnlyForRoundupDivisions) {
  expect_config_error(
      "max_split_size_mb:[1:2]", "max_split_size_mb", 0,
      {"max_split_size_mb:[1:2]", "a list is only allowed for roundup_power2_divisions"});
}

TEST(config_grammar, DuplicateKeysLastWins) {
  const allocator_config config = parse_config(
      "max_split_size_mb:100,expandable_segments:True,max_split_size_mb:200,expandable_segments:"
      "False");
  EXPECT_EQ(config.max_split_size, 200 * mib);
  EXPECT_FALSE(config.expandable_segments);
  // Except backend: a second one must name the same backend (Note [A second backend key]).
  EXPECT_EQ(parse_config("backend:cudaMallocAsync,backend:cudaMallocAsync").backend, backend_kind::cuda_malloc_async);
  EXPECT_THROW((void)parse_config("backend:cudaMallocAsync,backend:native"), config_error);
}

TEST(config_grammar, ValuesAndKeysAreCaseSensitive) {
  expect_config_error("Backend:native", "Backend", 0, {"unknown key", "did you mean 'backend'?"});
  expect_config_error("backend:Native", "backend", 0,
                      {"unknown value 'Native'", "did you mean 'native'?"});
}

TEST(config_grammar, UnknownKeyListsValidKeysAndSuggests) {
  const std::string message = expect_config_error(
      "backend:native,max_split_size:20", "max_split_size", 15,
      {"'max_split_size'", "unknown key", "did you mean 'max_split_size_mb'?",
       "expected one of backend, max_split_size_mb, max_non_split_rounding_mb",
       "pinned_reserve_segment_size_mb", "release_lock_on_hipmalloc = release_lock_on_cudamalloc"});
  for (std::size_t i = 0; i < config_key_count; ++i) {
    EXPECT_TRUE(contains(message, key_name(config_key(i))));
  }
  // PyTorch's own messages spell it "garbage_collect_threshold".
  expect_config_error("garbage_collect_threshold:0.5", "garbage_collect_threshold", 0,
                      {"did you mean 'garbage_collection_threshold'?"});
  expect_config_error("roundup_power_2_divisions:4", "roundup_power_2_divisions", 0,
                      {"did you mean 'roundup_power2_divisions'?"});
  expect_config_error("expandable:True", "expandable", 0, {"did you mean 'expandable_segments'?"});
  expect_config_error("release_lock_on_hipmaloc:True", "release_lock_on_hipmaloc", 0,
                      {"did you mean 'release_lock_on_hipmalloc'?"});
  const std::string unrelated = expect_config_error("zzz:1", "zzz", 0, {"unknown key"});
  EXPECT_FALSE(contains(unrelated, "did you mean"));
}

TEST(config_grammar, EqualsSignInsteadOfColon) {
  expect_config_error("max_split_size_mb=20", "max_split_size_mb=20", 0,
                      {"'=' is not a separator", "max_split_size_mb:20"});
  expect_config_error("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:20",
                      "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb", 0,
                      {"must not repeat the variable name 'PYTORCH_CUDA_ALLOC_CONF='"});
}

TEST(config_grammar, MisconceptionKeysGetSpecificAnswers) {
  struct misconception_case {
    std::string_view text;
    std::string_view key;
    std::initializer_list<std::string_view> parts;
  };
  const misconception_case cases[] = {
      {"caching_allocator:True",
       "caching_allocator",
       {"not a PyTorch or streampool key", "backend:native"}},
      {"pooled:True",
       "pooled",
       {"not a PyTorch or streampool key", "backend:cudaMallocAsync", "expandable_segments:True"}},
      {"heuristic:auto", "heuristic", {"not a PyTorch or streampool key", "max_split_size_mb"}},
      {"nmalloc:4", "nmalloc", {"not a PyTorch or streampool key", "per_process_memory_fraction"}},
      {"pooled", "pooled", {"not a PyTorch or streampool key"}},
  };
  for (const misconception_case& c : cases) {
    const std::string message = expect_config_error(c.text, c.key, 0, c.parts);
    EXPECT_FALSE(contains(message, "did you mean"));
  }
  expect_config_error("max_split_size_mb:64,nmalloc:4", "nmalloc", 21, {"'nmalloc'"});
}

TEST(config_grammar, BareBackendValuesSayWriteBackendColon) {
  expect_config_error("native", "native", 0, {"value of the backend key", "write backend:native"});
  expect_config_error("expandable_segments:True,cudaMallocAsync", "cudaMallocAsync", 25,
                      {"write backend:cudaMallocAsync"});
  expect_config_error("native:True", "native", 0, {"write backend:native"});
  expect_config_error("hipMallocAsync", "hipMallocAsync", 0, {"CUDA library"});
  expect_config_error("expandable_segments_reserve_by_class:[0:1]",
                      "expandable_segments_reserve_by_class", 0, {"does not support"});
}

TEST(config_grammar, SourceIsRecordedOnlyForKeysThatWereSet) {
  const allocator_config api = parse_config("max_split_size_mb:64");
  EXPECT_EQ(api.source_of(config_key::max_split_size_mb), config_source::api);
  EXPECT_EQ(api.source_of(config_key::backend), config_source::default_value);
  EXPECT_EQ(api.source_variable, "");
  const allocator_config env =
      parse_config("release_lock_on_hipmalloc:True", config_source::env_pytorch_cuda);
  EXPECT_EQ(env.source_of(config_key::release_lock_on_cudamalloc), config_source::env_pytorch_cuda);
  EXPECT_EQ(env.source_of(config_key::max_split_size_mb), config_source::default_value);
}

TEST(config_grammar, KeyNamesAreCanonicalAndParse) {
  EXPECT_EQ(key_name(config_key::backend), "backend");
  EXPECT_EQ(key_name(config_key::pinned_reserve_segment_size_mb), "pinned_reserve_segment_size_mb");
  for (std::size_t i = 0; i < config_key_count; ++i) {
    for (std::size_t j = i + 1; j < config_key_count; ++j) {
      EXPECT_NE(key_name(config_key(i)), key_name(config_key(j)));
    }
    // Every name is a key the parser knows: it reports a bad value, not an unknown key.
    const std::optional<config_error> error =
        parse_error(std::string(key_name(config_key(i))) + ":@");
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->key(), key_name(config_key(i)));
    EXPECT_FALSE(contains(error->what(), "unknown key"));
  }
}

TEST(config_grammar, ConfigErrorIsAStreampoolError) {
  EXPECT_THROW((void)parse_config("max_split_size_mb:2"), error);
  EXPECT_THROW((void)parse_config("max_split_size_mb:2"), std::runtime_error);
}

}  // namespace
}  // namespace streampool::test
