// fuzz_pickle.cpp — libFuzzer target for the pickle reader and the snapshot trace reader: on
// arbitrary bytes parse_pickle() (keeping everything, and with the snapshot's skip/stream roles
// through parse_snapshot()) may only throw streampool::error, naming the source; never crash, leak,
// recurse without bound or run code. A snapshot it accepts has events of known actions only.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_test_support.hpp"
#include "replay/pickle_reader.hpp"
#include "streampool/errors.hpp"
#include "streampool/replay.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace streampool;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto in = replay_impl::memory_source(bytes);
    const replay_impl::pickle_document doc = replay_impl::parse_pickle(*in, "fuzz");
    (void)doc.root();
  } catch (const error& e) {
    fuzz::check(std::string(e.what()).rfind("fuzz: ", 0) == 0, std::string("pickle error does not name the source: ") + e.what());
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("parse_pickle threw something other than streampool::error: ") + e.what());
  }
  try {
    const trace_file file = parse_snapshot(bytes, "fuzz", {static_cast<int>(size % 3)});
    fuzz::check(file.format == "pytorch-snapshot", "parse_snapshot returned another format");
    for (const trace_event& e : file.events) {
      fuzz::check(static_cast<int>(e.action) <= static_cast<int>(trace_action::snapshot), "event with an unknown action");
    }
  } catch (const error& e) {
    fuzz::check(std::string(e.what()).rfind("trace fuzz: ", 0) == 0,
                std::string("snapshot error does not name the source: ") + e.what());
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("parse_snapshot threw something other than streampool::error: ") + e.what());
  }
  return 0;
}
