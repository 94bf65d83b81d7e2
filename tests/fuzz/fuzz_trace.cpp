// fuzz_trace.cpp — libFuzzer target for the trace reader: parse_trace() on arbitrary bytes may only
// throw streampool::error (naming the source and a line); a trace it accepts prints back to CSV and
// parses to the same events, and replays on the simulated driver (either backend, picked by the
// input) with no exception other than streampool::error (an inconsistent trace) or out_of_memory,
// leaving nothing allocated. An input that starts with gzip's magic goes through read_trace_file()
// instead (the gzip path: one opening, inflated as a stream, CSV or pickle by content, lines
// bounded): it too may only throw streampool::error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "fuzz/fuzz_test_support.hpp"
#include "streampool/replay.hpp"
#include "streampool/sim_driver.hpp"

namespace {

using namespace streampool;

std::string to_csv(const std::vector<trace_event>& events) {
  std::string out = "action,addr,size,stream,time_us\n";
  for (const trace_event& e : events) {
    out += std::string(to_string(e.action)) + "," + std::to_string(e.address) + "," + std::to_string(e.size) + "," +
           std::to_string(e.stream) + "," + std::to_string(e.time_us) + "\n";
  }
  return out;
}

bool same(const trace_event& a, const trace_event& b) {
  return a.action == b.action && a.address == b.address && a.size == b.size && a.stream == b.stream &&
         a.time_us == b.time_us;
}

void replay(const std::vector<trace_event>& events, bool async) {
  sim_options options;
  options.capacity = 1 * gib;
  auto sim = std::make_shared<sim_driver>(options);
  auto alloc = make_allocator(parse_config(async ? "backend:cudaMallocAsync" : "backend:native"), sim);
  replay_options replay_opts;
  replay_opts.sim = sim.get();
  try {
    const replay_result result = replay_trace(*alloc, events, replay_opts);
    fuzz::check(result.events == events.size(), "replay_result.events differs from the trace");
    fuzz::check(alloc->stats(0).allocation[0].current == 0, "replay left allocations live");
  } catch (const error&) {
    // an inconsistent trace (alloc of a live address) or a driver refusal
  } catch (const out_of_memory&) {
    // sizes beyond the simulated device
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("replay_trace threw an unexpected exception: ") + e.what());
  }
}

/// The gzip path, through a file (read_trace_file reads paths only).
void read_gzip_file(const std::string& bytes) {
  static const std::string path = "/tmp/streampool_fuzz_trace_" + std::to_string(::getpid()) + ".gz";
  std::FILE* file = std::fopen(path.c_str(), "wb");
  fuzz::check(file != nullptr, "cannot write " + path);
  fuzz::check(std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size(), "cannot write " + path);
  std::fclose(file);
  try {
    (void)read_trace_file(path);
  } catch (const error& e) {
    fuzz::check(std::string(e.what()).rfind("trace " + path, 0) == 0,
                std::string("gzip trace error does not name the file: ") + e.what());
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("read_trace_file threw something other than streampool::error: ") + e.what());
  }
  std::remove(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    read_gzip_file(text);
    return 0;
  }
  std::vector<trace_event> events;
  try {
    std::istringstream in(text);
    events = parse_trace(in, "fuzz");
  } catch (const error& e) {
    fuzz::check(std::string(e.what()).rfind("trace fuzz line ", 0) == 0,
                std::string("trace error does not name the source and line: ") + e.what());
    return 0;
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("parse_trace threw something other than streampool::error: ") + e.what());
  }
  // Round trip: what was accepted prints back to an equivalent trace.
  std::istringstream again(to_csv(events));
  const std::vector<trace_event> reparsed = parse_trace(again, "fuzz-roundtrip");
  fuzz::check(reparsed.size() == events.size(), "round trip changed the number of events");
  for (std::size_t i = 0; i < events.size(); ++i) fuzz::check(same(events[i], reparsed[i]), "round trip changed an event");
  if (events.size() <= 256) replay(events, (size % 2) == 1);
  return 0;
}
