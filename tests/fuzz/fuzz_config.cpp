// fuzz_config.cpp — libFuzzer target for the config parser: parse_config() on arbitrary bytes may
// only throw config_error (never crash, never another exception), and every string it accepts
// must hold valid values, print (to_string), and build an allocator on the simulated driver that
// runs a short allocation sequence under it (two streams, reuse, record_stream, empty_cache)
// without a signal, and leaks nothing.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_test_support.hpp"
#include "streampool/allocator.hpp"
#include "streampool/sim_driver.hpp"

namespace {

using namespace streampool;

void check_accepted(const allocator_config& config) {
  fuzz::check(config.per_process_memory_fraction >= 0.0 && config.per_process_memory_fraction <= 1.0,
              "accepted per_process_memory_fraction outside [0, 1]");
  fuzz::check(config.garbage_collection_threshold >= 0.0 && config.garbage_collection_threshold < 1.0,
              "accepted garbage_collection_threshold outside [0, 1)");
  fuzz::check(config.max_split_size == allocator_config::unlimited || config.max_split_size >= 20 * mib,
              "accepted max_split_size below 20 MiB");
  for (const std::size_t d : config.roundup_power2_divisions) {
    fuzz::check(d == 0 || (d & (d - 1)) == 0, "accepted a roundup_power2_divisions value that is not a power of two");
  }
  (void)to_string(config);

  // Any accepted config gives a working allocator: a short allocation sequence on the simulated
  // driver (two streams, small/large/oversize requests, a cross-stream use, frees out of order,
  // empty_cache). A signal here (issue 31: large_segment_size_mb:17592186044415 parsed, then the
  // first allocation divided by 0) kills the run, which libFuzzer and the corpus replay report.
  sim_options options;
  options.capacity = 1 * gib;
  options.eager_completion = false;
  auto sim = std::make_shared<sim_driver>(options);
  std::unique_ptr<allocator> alloc;
  try {
    alloc = make_allocator(config, sim);
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("make_allocator refused an accepted config: ") + e.what());
  }
  stream_t side = nullptr;
  fuzz::check(sim->stream_create(0, &side).ok(), "sim stream_create failed");
  // What the sequence can hold at once: its requests (rounded up to a power of two at worst) plus
  // a segment per request of large_segment_size. A cap or a segment size beyond it may refuse.
  const double cap = config.per_process_memory_fraction * static_cast<double>(options.capacity);
  const bool may_refuse = cap < static_cast<double>(4 * config.large_segment_size + 256 * mib) ||
                          config.large_segment_size > 128 * mib;
  struct step {
    std::size_t bytes;
    bool on_side;
  };
  constexpr step steps[] = {{1000, false},       {3 * mib, false},       {600 * kib, true}, {12 * mib, false},
                            {25 * mib, true},    {1 * mib + 1, false},   {45 * mib, false}, {512, true}};
  std::vector<void*> live;
  for (const step& s : steps) {
    try {
      void* p = alloc->allocate(s.bytes, s.on_side ? side : nullptr);
      fuzz::check(p != nullptr, "allocate returned nullptr");
      live.push_back(p);
    } catch (const out_of_memory& e) {
      fuzz::check(may_refuse, std::string("out_of_memory for a small request with a config that allows it: ") +
                                  e.what());
    } catch (const std::exception& e) {
      fuzz::check(false, std::string("allocation with an accepted config threw: ") + e.what());
    }
  }
  try {
    if (!live.empty()) alloc->record_stream(live.front(), side);
    for (std::size_t i = 1; i < live.size(); i += 2) alloc->deallocate(live[i]);  // every other one first
    // Reuse of what was just freed, on both streams, before the side stream's work completes.
    for (const std::size_t bytes : {std::size_t{2000}, 3 * mib, 20 * mib}) {
      try {
        alloc->deallocate(alloc->allocate(bytes, side));
      } catch (const out_of_memory&) {
        fuzz::check(may_refuse, "out_of_memory on reuse with a config that allows it");
      }
    }
    for (std::size_t i = 0; i < live.size(); i += 2) alloc->deallocate(live[i]);
    sim->complete_all();
    alloc->empty_cache();
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("freeing with an accepted config threw: ") + e.what());
  }
  fuzz::check(alloc->stats(0).allocated_bytes[0].current == 0, "allocated memory after freeing everything");
  fuzz::check(alloc->stats(0).reserved_bytes[0].current == 0, "reserved memory after empty_cache");
  alloc.reset();
  (void)sim->stream_destroy(0, side);
  fuzz::check(sim->bytes_in_use(0) == 0, "device memory leaked");
}

void quiet(std::string_view) {}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool silenced = (set_warning_handler(&quiet), true);
  (void)silenced;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  allocator_config config;
  try {
    config = parse_config(text);
  } catch (const config_error& e) {
    fuzz::check(std::string_view(e.what()).find("streampool config") != std::string_view::npos,
                std::string("config_error message does not say it is about the config: ") + e.what());
    fuzz::check(e.position() <= size, "config_error position beyond the input");
    return 0;
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("parse_config threw something other than config_error: ") + e.what());
  }
  check_accepted(config);
  return 0;
}
