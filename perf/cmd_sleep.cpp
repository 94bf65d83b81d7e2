// cmd_sleep.cpp — `streampool-bench sleep`: how fast a pool sleeps and wakes (docs/sleep-wake.md),
// against the bound of the same bytes copied with plain cudaMemcpyAsync between a pinned buffer and
// the same device memory, in the same run. Per size: offload (GiB/s, % of the D2H bound), restore
// (GiB/s, % of the H2D bound), the first offload (which pins its backup), discard sleep and wake
// (ms, ms per GiB, driver calls of a wake on the sim), and how much of the pool's memory the
// device had back while it slept. Native backend, one sleepable private pool holding one
// allocation of SIZE; the median of --repeat cycles. --pipeline sets sleep_options::pipeline_bytes
// (a size at least the pool's turns the pipeline off: one window, copies then unmapping); --config
// the allocator's config (backend:native is forced); --page the pool's page (pool_options::page_bytes;
// a sleepable pool's default is 64 MiB, Note [Pages of a private pool]). The page and how many pages a
// discard wake maps (one cuMemCreate and one cuMemMap each) are reported with the figures.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "report.hpp"
#include "size_parse.hpp"
#include "streampool/allocator.hpp"
#include "streampool/errors.hpp"
#include "streampool/pools.hpp"

namespace streampool::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void must(driver& drv, drv_result r, const char* what) {
  if (!r.ok()) throw error(std::string("sleep workload: ") + what + " failed: " + drv.describe(r));
}

struct sleep_figures {
  double bound_d2h = 0, bound_h2d = 0;   // seconds
  double offload = 0, restore = 0;       // seconds (median, backup kept)
  double first_offload = 0;              // seconds, pinning the backup included
  double discard_sleep = 0, discard_wake = 0;
  double freed_fraction = 0;             // device memory back while asleep / pool reserved
  std::int64_t wake_calls = -1;          // driver calls of a discard wake (sim only)
  std::size_t page = 0;                  // the pool's large page (its segment's page_size)
  std::size_t wake_pages = 0;            // pages a discard wake maps (released while asleep / page)
};

/// The page size of the pool's segment that holds `p`.
std::size_t page_of(const allocator& alloc, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const segment_info& seg : alloc.snapshot().segments) {
    if (a >= seg.address && a < seg.address + seg.total_size) return seg.page_size;
  }
  return 0;
}

/// What one run of the workload sets.
struct sleep_setup {
  std::size_t pipeline = 0;  ///< sleep_options::pipeline_bytes (0: the default)
  std::size_t page = 0;      ///< pool_options::page_bytes (0: the default)
};

/// Timed copies of `bytes` between `dev` and a pinned buffer: the bound.
void measure_bound(driver& drv, void* dev, std::size_t bytes, stream_t s, int repeat, sleep_figures& f) {
  void* host = nullptr;
  must(drv, drv.host_alloc(bytes, &host), "cudaHostAlloc of the bound's buffer");
  std::vector<double> d2h, h2d;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = clock_type::now();
    must(drv, drv.memcpy_async(host, dev, bytes, s), "cudaMemcpyAsync D2H");
    must(drv, drv.stream_synchronize(0, s), "cudaStreamSynchronize");
    d2h.push_back(since(t0));
    t0 = clock_type::now();
    must(drv, drv.memcpy_async(dev, host, bytes, s), "cudaMemcpyAsync H2D");
    must(drv, drv.stream_synchronize(0, s), "cudaStreamSynchronize");
    h2d.push_back(since(t0));
  }
  must(drv, drv.host_free(host), "cudaFreeHost");
  f.bound_d2h = median(d2h);
  f.bound_h2d = median(h2d);
}

sleep_figures run_size(const driver_choice& choice, const allocator_config& config, std::size_t bytes, int repeat,
                       const sleep_setup& setup) {
  driver_instance inst = make_driver(choice);
  driver& drv = *inst.drv;
  sleep_figures f;
  stream_t s = nullptr;
  must(drv, drv.stream_create(0, &s), "cudaStreamCreate");
  {
    auto alloc = make_allocator(config, inst.drv);
    const mempool_id pool = allocator::create_pool_id();
    alloc->begin_allocate_to_pool(pool, [s](stream_t x) { return x == s; });
    pool_options o;
    o.sleepable = true;
    o.page_bytes = setup.page;
    alloc->set_pool_options(pool, o);
    void* p = alloc->allocate(bytes, s);
    alloc->end_allocate_to_pool(pool);
    f.page = page_of(*alloc, p);
    must(drv, drv.memset_async(0, p, 0x5A, bytes, s), "cudaMemsetAsync");
    must(drv, drv.stream_synchronize(0, s), "cudaStreamSynchronize");
    measure_bound(drv, p, bytes, s, repeat, f);
    device_pools& pools = alloc->pools(0);

    sleep_options keep;
    keep.keep_backup = true;
    keep.pipeline_bytes = setup.pipeline;
    std::size_t free_awake = 0, free_asleep = 0, total = 0;
    must(drv, drv.mem_get_info(0, &free_awake, &total), "cudaMemGetInfo");
    const auto reserved = static_cast<double>(alloc->stats(0).reserved_bytes[0].current);
    auto t0 = clock_type::now();
    pools.sleep(pool, keep);
    f.first_offload = since(t0);
    must(drv, drv.mem_get_info(0, &free_asleep, &total), "cudaMemGetInfo");
    f.freed_fraction = reserved > 0 ? static_cast<double>(free_asleep - free_awake) / reserved : 0.0;
    pools.wake(pool);
    std::vector<double> off, on, dsleep, dwake;
    for (int i = 0; i < repeat; ++i) {
      t0 = clock_type::now();
      pools.sleep(pool, keep);
      off.push_back(since(t0));
      t0 = clock_type::now();
      pools.wake(pool);
      on.push_back(since(t0));
    }
    sleep_options discard;
    discard.mode = sleep_mode::discard;
    discard.pipeline_bytes = setup.pipeline;
    for (int i = 0; i < repeat; ++i) {
      t0 = clock_type::now();
      pools.sleep(pool, discard);
      dsleep.push_back(since(t0));
      if (f.page != 0) f.wake_pages = pools.sleep_state(pool).released_bytes / f.page;
      std::uint64_t before = 0;
      if (inst.sim != nullptr) {
        for (std::size_t c = 0; c < driver_call_count; ++c) before += inst.sim->calls(static_cast<driver_call>(c));
      }
      t0 = clock_type::now();
      pools.wake(pool);
      dwake.push_back(since(t0));
      if (inst.sim != nullptr) {
        std::uint64_t after = 0;
        for (std::size_t c = 0; c < driver_call_count; ++c) after += inst.sim->calls(static_cast<driver_call>(c));
        f.wake_calls = static_cast<std::int64_t>(after - before);
      }
    }
    f.offload = median(off);
    f.restore = median(on);
    f.discard_sleep = median(dsleep);
    f.discard_wake = median(dwake);
    alloc->deallocate(p);
    alloc->release_pool(pool);
    alloc->empty_cache();
  }
  (void)drv.stream_destroy(0, s);
  return f;
}

}  // namespace

int cmd_sleep(const args_t& args) {
  common_options opts;
  std::string sizes_text;
  std::string pipeline_text;
  std::string config_text;
  std::string page_text;
  po::options_description desc("sleep options");
  desc.add_options()("sizes", po::value(&sizes_text)->value_name("LIST"),
                     "pool sizes (default 1GiB,8GiB,40GiB on a GPU, 64MiB,256MiB on the sim)")(
      "pipeline", po::value(&pipeline_text)->value_name("SIZE"),
      "bytes of pages per pipeline window (sleep_options::pipeline_bytes; default 256MiB); a size at least "
      "the pool's turns the pipeline off")("config", po::value(&config_text)->value_name("STRING"),
                                          "the allocator's config (native backend), e.g. large_segment_size_mb:64 "
                                          "(bigger pages: fewer driver calls per wake)")(
      "page", po::value(&page_text)->value_name("SIZE"),
      "the pool's page (pool_options::page_bytes, rounded up to the mapping unit, at most 16TiB; default "
      "64MiB for a sleepable pool, or large_segment_size_mb when larger)");
  common_flags flags;
  flags.backends = false;
  flags.seed = false;
  add_common_options(desc, opts, flags);
  const auto vm = parse_command(args,
                                "usage: streampool-bench sleep [--sizes LIST] [--repeat N] [--pipeline SIZE] [--page SIZE] "
                                "[--config STRING]\n\n"
                                "Sleep and wake of a pool of each size (native backend, a sleepable private pool "
                                "holding one allocation):\noffload and restore against the same bytes copied with "
                                "plain cudaMemcpyAsync (the bound), discard sleep and wake,\nand how much of the "
                                "pool's memory the device had back while it slept. Medians of --repeat cycles (3).",
                                desc, nullptr, &opts);
  if (!vm) return exit_ok;
  allocator_config config = parse_config(config_text.empty() ? "backend:native" : config_text);
  if (config.backend != backend_kind::native) {
    throw usage_error("--config: the sleep workload runs the native backend (cudaMallocAsync pools cannot sleep); "
                      "drop the backend key");
  }
  const driver_choice choice = choose_driver(opts);
  std::vector<std::size_t> sizes = parse_size_list(
      sizes_text.empty() ? (choice.sim ? "64MiB,256MiB" : "1GiB,8GiB,40GiB") : sizes_text, "--sizes");
  const std::size_t device = choice.sim ? choice.sim_capacity : choice.device_memory;
  for (const std::size_t size : sizes) {
    if (size == 0 || (device != 0 && size > device / 10 * 9)) {
      throw usage_error("--sizes: " + format_size(size) + " does not fit the device (" + format_size(device) +
                        "): give sizes above 0 and below 90% of it");
    }
  }
  const int repeat = opts.repeat != 0 ? opts.repeat : 3;
  sleep_setup setup;
  if (!pipeline_text.empty()) {
    const std::vector<std::size_t> one = parse_size_list(pipeline_text, "--pipeline");
    if (one.size() != 1 || one[0] == 0) {
      throw usage_error("--pipeline: give one size above 0 (e.g. 256MiB), not '" + pipeline_text + "'");
    }
    setup.pipeline = one[0];
  }
  if (!page_text.empty()) {
    const std::vector<std::size_t> one = parse_size_list(page_text, "--page");
    if (one.size() != 1 || one[0] == 0 || one[0] > (std::size_t{16} << 40)) {
      throw usage_error("--page: give one size above 0 and at most 16TiB (e.g. 64MiB), not '" + page_text + "'");
    }
    setup.page = one[0];
  }

  report out;
  out.command = "sleep";
  add_run_meta(out, choice, opts);
  table& t = out.tables.emplace_back();
  t.columns = {{"size", "size", col_kind::text},
               {"size_bytes", "size bytes", col_kind::bytes, false},
               {"offload_gib_s", "offload GiB/s", col_kind::ratio},
               {"offload_vs_bound", "of bound", col_kind::ratio},
               {"restore_gib_s", "restore GiB/s", col_kind::ratio},
               {"restore_vs_bound", "of bound", col_kind::ratio},
               {"bound_d2h_gib_s", "bound D2H GiB/s", col_kind::ratio},
               {"bound_h2d_gib_s", "bound H2D GiB/s", col_kind::ratio},
               {"first_offload_seconds", "first offload", col_kind::seconds},
               {"discard_sleep_ms", "discard sleep ms", col_kind::ratio},
               {"discard_wake_ms", "discard wake ms", col_kind::ratio},
               {"discard_wake_ms_per_gib", "wake ms/GiB", col_kind::ratio},
               {"freed_while_asleep", "freed asleep", col_kind::ratio},
               {"wake_driver_calls", "wake calls", col_kind::count},
               {"page_bytes", "page", col_kind::bytes},
               {"wake_pages", "wake pages", col_kind::count},
               {"error", "error", col_kind::text}};
  out.notes.push_back("offload/restore: the backup kept between cycles (keep_backup); first offload: pins it too. "
                      "'of bound': time of plain cudaMemcpyAsync of the same bytes / time of the sleep or wake. "
                      "wake calls: driver calls of a discard wake (sim only); wake pages: pages it maps (one "
                      "cuMemCreate and one cuMemMap each, one cuMemSetAccess per run of them). Pipeline window: " +
                      (setup.pipeline == 0 ? std::string("256 MiB (the default)") : format_size(setup.pipeline)) +
                      ". Config: " + (config_text.empty() ? std::string("backend:native") : config_text) +
                      ". Page: " + (setup.page == 0 ? std::string("the default") : format_size(setup.page)) + ".");
  int status = exit_ok;
  progress_line progress(opts.quiet);
  for (const std::size_t size : sizes) {
    progress.update("sleep: " + format_size(size) + ", " + std::to_string(repeat) + " cycles");
    const double gib = static_cast<double>(size) / static_cast<double>(std::size_t{1} << 30);
    try {
      const sleep_figures f = run_size(choice, config, size, repeat, setup);
      t.rows.push_back({format_size(size), static_cast<std::int64_t>(size), gib / f.offload, f.bound_d2h / f.offload,
                        gib / f.restore, f.bound_h2d / f.restore, gib / f.bound_d2h, gib / f.bound_h2d,
                        f.first_offload, f.discard_sleep * 1e3, f.discard_wake * 1e3, f.discard_wake * 1e3 / gib,
                        f.freed_fraction, f.wake_calls >= 0 ? cell(f.wake_calls) : cell(),
                        static_cast<std::int64_t>(f.page), static_cast<std::int64_t>(f.wake_pages), std::string()});
    } catch (const std::exception& e) {
      status = exit_failed;
      t.rows.push_back({format_size(size), static_cast<std::int64_t>(size), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {},
                        {}, {}, {}, std::string(e.what())});
    }
  }
  progress.finish();
  emit(out, opts);
  return status;
}

}  // namespace streampool::bench
