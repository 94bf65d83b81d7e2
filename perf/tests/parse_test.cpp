// parse_test.cpp — unit tests of the harness's parsers: sizes with suffixes, comma lists, and
// --backends (configs after '=', continuation pieces, ';', brackets, unknown or unavailable names).
#include <gtest/gtest.h>

#include "tests/bench_test_support.hpp"

#include "backend_registry.hpp"
#include "cli_common.hpp"
#include "size_parse.hpp"

namespace streampool::bench {
namespace {

TEST(size_parse, AcceptsUnitsAndFractions) {
  EXPECT_EQ(parse_size("512"), 512u);
  EXPECT_EQ(parse_size("512B"), 512u);
  EXPECT_EQ(parse_size("4KiB"), 4096u);
  EXPECT_EQ(parse_size("4k"), 4096u);
  EXPECT_EQ(parse_size("1M"), std::size_t{1} << 20);
  EXPECT_EQ(parse_size("1.5MiB"), std::size_t{3} << 19);
  EXPECT_EQ(parse_size(" 80GiB "), std::size_t{80} << 30);
  EXPECT_EQ(parse_size("2gb"), std::size_t{2} << 30);
}

TEST(size_parse, RejectsBadText) {
  for (const char* bad : {"", "MiB", "12XB", "1.5.5M", "0", "0.3B", "-1", "1e3"}) {
    EXPECT_THROW((void)parse_size(bad), usage_error) << bad;
  }
  try {
    (void)parse_size("12XB", "--sizes");
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("--sizes: '12XB'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown unit 'XB'"), std::string::npos) << e.what();
  }
}

TEST(size_parse, Lists) {
  EXPECT_EQ(parse_size_list("512,1MiB,64MiB"), (std::vector<std::size_t>{512, 1 << 20, 64 << 20}));
  EXPECT_THROW((void)parse_size_list("512,,1M"), usage_error);
  EXPECT_EQ(parse_count_list("1,2,4,8", "--threads", 64), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_THROW((void)parse_count_list("1,0", "--threads", 64), usage_error);
  EXPECT_THROW((void)parse_count_list("1,x", "--threads", 64), usage_error);
  EXPECT_THROW((void)parse_count_list("65", "--threads", 64), usage_error);
}

TEST(size_parse, WholeNumbersInARange) {
  EXPECT_EQ(parse_whole("5", "--count", 1, 10), 5);
  for (const char* bad : {"-5", "0", "3000000000", "", "1.5", "5x", "+5", " 5", "99999999999999999999999"}) {
    try {
      (void)parse_whole(bad, "--count", 1, 10000000);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const usage_error& e) {
      EXPECT_EQ(std::string(e.what()), "--count: '" + std::string(bad) + "' is not a whole number in 1..10000000");
    }
  }
}

TEST(size_parse, BadInputIsQuotedUpTo200Characters) {
  EXPECT_EQ(quote_input("abc"), "'abc'");
  const std::string huge(100000, '7');
  const std::string quoted = quote_input(huge);
  EXPECT_EQ(quoted, "'" + huge.substr(0, 200) + "...' (100000 characters)");
  try {
    (void)parse_whole(huge, "--count", 1, 10);
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << "a 100000-character input is quoted in full";
  }
  try {
    (void)parse_size(huge + "XB", "--sizes");
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
  }
  // Messages built elsewhere (Boost, the library) are cut at main(): every quoted run.
  const std::string message = "the argument ('" + huge + "') for option '--x' is invalid";
  EXPECT_EQ(clip_quoted(message), "the argument (" + quote_input(huge) + ") for option '--x' is invalid");
  EXPECT_EQ(clip_quoted("--sizes: " + quote_input(huge) + " is bad"), "--sizes: " + quote_input(huge) + " is bad")
      << "a run cut by quote_input is not cut again";
  EXPECT_EQ(clip_quoted("no quotes"), "no quotes");
  EXPECT_EQ(clip_quoted("one ' quote"), "one ' quote");
  EXPECT_LT(clip_quoted(std::string(100000, 'z')).size(), 1000u) << "an unquoted flood is cut too";
}

TEST(size_parse, Labels) {
  EXPECT_EQ(size_label(512), "512B");
  EXPECT_EQ(size_label(1 << 20), "1MiB");
  EXPECT_EQ(size_label(3 << 19), "1.5MiB");
  EXPECT_EQ(size_label(std::size_t{80} << 30), "80GiB");
}

TEST(backend_list, NamesAndConfigs) {
  const auto specs = parse_backend_list("native,cudaMallocAsync,cuda,async-raw");
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].name, "native");
  EXPECT_EQ(specs[3].name, "async-raw");
  EXPECT_EQ(specs[0].config_label(), "default");
}

TEST(backend_list, ConfigContinuationSemicolonAndBrackets) {
  const auto a = parse_backend_list("native=expandable_segments:True,max_split_size_mb:256,cuda");
  const auto b = parse_backend_list("native=expandable_segments:True;max_split_size_mb:256,cuda");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0].config_text, "expandable_segments:True,max_split_size_mb:256");
  EXPECT_EQ(b[0].config_text, a[0].config_text);
  EXPECT_EQ(a[1].name, "cuda");
  EXPECT_EQ(a[0].label(), "native[expandable_segments:True,max_split_size_mb:256]");
  const auto c = parse_backend_list("native=roundup_power2_divisions:[256:1,512:2,1024:4,>:8],cudaMallocAsync");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].config_text, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_EQ(config_for(c[1]).backend, backend_kind::cuda_malloc_async);
}

TEST(backend_list, Errors) {
  EXPECT_THROW((void)parse_backend_list("nativ"), usage_error);
  EXPECT_THROW((void)parse_backend_list("cuda=x:1"), usage_error);     // peers take no config
  EXPECT_THROW((void)parse_backend_list("cub=x:1"), usage_error);
  EXPECT_THROW((void)parse_backend_list("max_split_size_mb:256"), usage_error);  // continuation of nothing
  EXPECT_THROW((void)parse_backend_list("native=max_split_size_mb:banana"), usage_error);
  EXPECT_THROW((void)parse_backend_list("native=backend:cudaMallocAsync"), usage_error);
  EXPECT_THROW((void)parse_backend_list("native,,cuda"), usage_error);
}

TEST(backend_list, DefaultsOnTheSimLeaveOutTheRealGpuPeers) {
  const auto specs = default_backends(sim_choice());
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].name, "native");
  EXPECT_EQ(specs[1].name, "cudaMallocAsync");
  EXPECT_EQ(specs[2].name, "cuda");
  EXPECT_EQ(specs[3].name, "async-raw");
  const auto missing = unavailable_backends(sim_choice());
  // Name order: cub, cudaHostAlloc, pinned, torch-async, torch-native, torch-pinned.
  ASSERT_EQ(missing.size(), 6u);
  EXPECT_EQ(missing[0].first, "cub");
  EXPECT_NE(missing[0].second.find("needs a real GPU"), std::string::npos) << missing[0].second;
  for (const std::size_t i : {1u, 2u}) {  // the pinned host allocators: `latency` only
    EXPECT_NE(missing[i].second.find("streampool-bench latency"), std::string::npos) << missing[i].second;
  }
  for (std::size_t i = 3; i < 6; ++i) {
    EXPECT_NE(missing[i].second.find("--torch-peer"), std::string::npos) << missing[i].second;
  }
}

TEST(backend_list, UnavailableEntriesInOneLineByReason) {
  const std::string line = unavailable_summary(unavailable_backends(sim_choice()));
  EXPECT_EQ(line.rfind("not run here: cub (needs a real GPU); cudaHostAlloc, pinned (a pinned host allocator); "
                       "torch-async, torch-native, torch-pinned (needs the PyTorch peer plugin and a real GPU).", 0),
            0u)
      << line;
}

// Note [No abbreviated options]: an abbreviation is refused, naming the option meant; a word close
// to one option (a typo) is answered likewise.
TEST(options, AbbreviationsAreRefusedWithTheOptionMeant) {
  common_options opts;
  po::options_description desc("test options");
  add_common_options(desc, opts, {.plot = true, .in_process = true});
  const auto message_of = [&](const std::vector<std::string>& args) -> std::string {
    common_options fresh;
    po::options_description d("test options");
    add_common_options(d, fresh, {.plot = true, .in_process = true});
    try {
      (void)parse_command(args, "usage", d, nullptr, &fresh);
    } catch (const usage_error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message_of({"--backend", "native"}),
            "unknown option '--backend': options are not abbreviated; did you mean --backends?");
  EXPECT_EQ(message_of({"--backend=native"}),
            "unknown option '--backend': options are not abbreviated; did you mean --backends?");
  EXPECT_EQ(message_of({"--bakends", "native"}), "unknown option '--bakends': did you mean --backends?");
  EXPECT_EQ(message_of({"--no-such-flag"}), "unknown option '--no-such-flag' (see --help)");
  EXPECT_EQ(message_of({"--backends", "native"}), "accepted");
  EXPECT_EQ(unknown_option_message("--s", desc), "unknown option '--s': options are not abbreviated; did you mean "
                                                 "--sim-capacity or --seed?");
}

}  // namespace
}  // namespace streampool::bench
