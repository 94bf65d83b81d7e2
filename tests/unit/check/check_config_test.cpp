// check_config_test.cpp — the debug_checks key: off by default, True/False only (a clear error
// otherwise), used by both backends (no "ignored" warning), printed by the effective-config dump,
// and make_allocator honours it on either backend.
#include "check/checking_allocator.hpp"
#include "check_test_support.hpp"
#include "streampool/errors.hpp"

namespace streampool::testing {
namespace {

TEST(debug_checks_key, OffByDefault) {
  EXPECT_FALSE(allocator_config{}.debug_checks);
  EXPECT_FALSE(parse_config("").debug_checks);
  EXPECT_FALSE(parse_config("backend:cudaMallocAsync").debug_checks);
}

TEST(debug_checks_key, ParsesTrueAndFalse) {
  const allocator_config on = parse_config("debug_checks:True");
  EXPECT_TRUE(on.debug_checks);
  EXPECT_EQ(on.source_of(config_key::debug_checks), config_source::api);
  EXPECT_FALSE(parse_config("debug_checks:False").debug_checks);
  EXPECT_TRUE(parse_config("debug_checks:False,debug_checks:True").debug_checks);  // the last wins
}

TEST(debug_checks_key, BadValueIsAClearError) {
  for (const char* text : {"debug_checks:true", "debug_checks:1", "debug_checks:yes"}) {
    try {
      (void)parse_config(std::string("backend:native,") + text);
      ADD_FAILURE() << text << " parsed";
    } catch (const config_error& e) {
      EXPECT_EQ(e.key(), "debug_checks") << text;
      EXPECT_EQ(e.position(), 15u) << text;
      EXPECT_NE(std::string(e.what()).find("expected True or False"), std::string::npos) << e.what();
    }
  }
}

TEST(debug_checks_key, MisspellingSuggestsTheKey) {
  try {
    (void)parse_config("debug_check:True");
    ADD_FAILURE() << "parsed";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("debug_checks"), std::string::npos) << e.what();
  }
}

TEST(debug_checks_key, UsedByBothBackendsSoNeverWarned) {
  EXPECT_TRUE(key_used_by(config_key::debug_checks, backend_kind::native));
  EXPECT_TRUE(key_used_by(config_key::debug_checks, backend_kind::cuda_malloc_async));
  EXPECT_TRUE(parse_config("backend:cudaMallocAsync,debug_checks:True").warnings.empty());
  EXPECT_TRUE(parse_config("backend:native,debug_checks:True").warnings.empty());
}

TEST(debug_checks_key, EffectiveConfigPrintsItAndItParsesBack) {
  const std::string text = to_string(parse_config("debug_checks:True"));
  EXPECT_NE(text.find("debug_checks"), std::string::npos) << text;
  EXPECT_NE(text.find("True"), std::string::npos) << text;
  EXPECT_EQ(key_name(config_key::debug_checks), "debug_checks");
}

TEST(debug_checks_key, MakeAllocatorWrapsEitherBackendOnlyWhenOn) {
  for (const char* backend : {"native", "cudaMallocAsync"}) {
    auto sim = std::make_shared<sim_driver>();
    const auto on = make_allocator(parse_config(std::string("debug_checks:True,backend:") + backend), sim);
    EXPECT_NE(dynamic_cast<check_impl::checking_allocator*>(on.get()), nullptr) << backend;
    EXPECT_EQ(on->backend_name(), backend);
    const auto off = make_allocator(parse_config(std::string("backend:") + backend), sim);
    EXPECT_EQ(dynamic_cast<check_impl::checking_allocator*>(off.get()), nullptr) << backend;
  }
}

TEST(debug_checks_key, ReadFromTheEnvironmentLikeEveryKey) {
  const allocator_config config = parse_config("backend:cudaMallocAsync,debug_checks:True",
                                               config_source::env_streampool);
  EXPECT_TRUE(config.debug_checks);
  EXPECT_EQ(config.source_of(config_key::debug_checks), config_source::env_streampool);
}

}  // namespace
}  // namespace streampool::testing
