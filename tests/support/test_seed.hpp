// test_seed.hpp — the seed of a randomised unit test: STREAMPOOL_TEST_SEED when set (to replay a
// run), otherwise a fresh random one. It is printed either way, so a failing run can be replayed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace streampool::testing {

inline std::uint64_t test_seed() {
  const char* text = std::getenv("STREAMPOOL_TEST_SEED");
  const std::uint64_t seed = text != nullptr ? std::stoull(text) : std::random_device{}();
  std::printf("seed %llu (set STREAMPOOL_TEST_SEED=%llu to reproduce)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace streampool::testing
