// tests/unit/config/config_test_support.hpp — helpers shared by the config unit tests.
//
// contains() is a readable substring assertion; expect_config_error() parses a string that must
// fail and checks the error's key, position and message fragments in one place.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "streampool/config.hpp"
#include "streampool/errors.hpp"

namespace streampool::test {

inline ::testing::AssertionResult contains(std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "\"" << text << "\"\n  does not contain \"" << part << "\"";
}

/// The config_error that parsing `text` throws, or nullopt (after a test failure) when it parses.
inline std::optional<config_error> parse_error(std::string_view text) {
  try {
    (void)parse_config(text);
  } catch (const config_error& e) {
    return e;
  }
  ADD_FAILURE() << "parse_config(\"" << text << "\") did not throw config_error";
  return std::nullopt;
}

/// Parsing `text` must fail with key() == `key`, position() == `position`, a message containing
/// "at position <position>" and every fragment of `parts`. Returns the message ("" on failure).
inline std::string expect_config_error(std::string_view text, std::string_view key,
                                       std::size_t position,
                                       std::initializer_list<std::string_view> parts) {
  SCOPED_TRACE("config string: \"" + std::string(text) + "\"");
  const std::optional<config_error> error = parse_error(text);
  if (!error) {
    return "";
  }
  const std::string message = error->what();
  EXPECT_EQ(error->key(), key) << message;
  EXPECT_EQ(error->position(), position) << message;
  EXPECT_TRUE(contains(message, "streampool config: "));
  EXPECT_TRUE(contains(message, "at position " + std::to_string(position)));
  for (const std::string_view part : parts) {
    EXPECT_TRUE(contains(message, part));
  }
  return message;
}

inline std::size_t index_of(config_key key) { return static_cast<std::size_t>(key); }

}  // namespace streampool::test
