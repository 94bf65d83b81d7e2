// fuzz_config.cpp — libFuzzer target for the config parser: parse_config() on arbitrary bytes may
// only throw config_error (never crash, never another exception), and every string it accepts
// must hold valid values, print (to_string), and build an allocator on the simulated driver that
// serves and frees a request and leaks nothing.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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

  // Any accepted config gives a working allocator.
  sim_options options;
  options.capacity = 1 * gib;
  auto sim = std::make_shared<sim_driver>(options);
  std::unique_ptr<allocator> alloc;
  try {
    alloc = make_allocator(config, sim);
  } catch (const std::exception& e) {
    fuzz::check(false, std::string("make_allocator refused an accepted config: ") + e.what());
  }
  for (const std::size_t bytes : {std::size_t{1000}, 3 * mib}) {
    try {
      void* p = alloc->allocate(bytes);
      fuzz::check(p != nullptr, "allocate returned nullptr");
      alloc->deallocate(p);
    } catch (const out_of_memory&) {
      // A tiny fraction cap, or a segment size beyond the 1 GiB device, legitimately cannot serve.
      fuzz::check(config.per_process_memory_fraction < 0.05 || config.large_segment_size > 256 * mib,
                  "out_of_memory for a small request with a config that allows it");
    } catch (const std::exception& e) {
      fuzz::check(false, std::string("allocation with an accepted config threw: ") + e.what());
    }
  }
  alloc->empty_cache();
  fuzz::check(alloc->stats(0).reserved_bytes[0].current == 0, "reserved memory after empty_cache");
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
