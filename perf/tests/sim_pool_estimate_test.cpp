// sim_pool_estimate_test.cpp — the marking of the sim pool's figures: a replay through the
// cudaMallocAsync backend or the async-raw peer on the sim driver is an estimate (its peak
// reserved carries sim_pool_peak_error in the table and JSON), the native backend's is not; a
// delayed free is replayed on the pool as on a real device (deferred to its free_completed).
#include <gtest/gtest.h>

#include <sstream>

#include "backend_registry.hpp"
#include "replay_run.hpp"
#include "report.hpp"
#include "sim_pool_estimate.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::bench {
namespace {

// Two 20 MiB blocks on stream 0; the first is in use on stream 7 until the second is allocated.
const char* trace_text =
    "action,addr,size,stream,time_us\n"
    "alloc,4096,20971520,0,1\n"
    "free_requested,4096,20971520,0,2\n"
    "alloc,8192,20971520,0,3\n"
    "free_completed,4096,20971520,0,4\n"
    "free_requested,8192,20971520,0,5\n"
    "free_completed,8192,20971520,0,6\n";

replay_outcome replay_on_sim(const char* backend) {
  driver_choice choice;
  choice.sim = true;
  choice.why = "test";
  choice.sim_capacity = std::size_t{8} << 30;
  std::istringstream in(trace_text);
  const std::vector<trace_event> events = parse_trace(in, "test");
  const driver_instance inst = make_driver(choice);
  return run_replay([&](const driver_instance& d) { return make_backend({backend, ""}, d.drv); }, inst, events, 0,
                    {});
}

TEST(sim_pool_estimate, PoolBackendsOnTheSimAreEstimates) {
  for (const char* backend : {"cudaMallocAsync", "async-raw"}) {
    const replay_outcome o = replay_on_sim(backend);
    ASSERT_TRUE(o.error.empty()) << backend << ": " << o.error;
    EXPECT_TRUE(o.estimate) << backend;
    // Deferred to its free_completed, the first block cannot be reused by the second: 40 MiB
    // straddle two 32 MiB granules, as on a device.
    EXPECT_EQ(o.result.peak_reserved, std::size_t{64} << 20) << backend;
  }
  const replay_outcome native = replay_on_sim("native");
  ASSERT_TRUE(native.error.empty()) << native.error;
  EXPECT_FALSE(native.estimate);
}

TEST(sim_pool_estimate, TableAndJsonCarryTheBound) {
  report r;
  table& t = r.tables.emplace_back();
  t.columns = {{"backend", "backend", col_kind::text}, estimate_column()};
  t.rows.push_back({std::string("cudaMallocAsync"), estimate_cell(true)});
  t.rows.push_back({std::string("native"), estimate_cell(false)});
  r.notes.push_back(estimate_note());
  const std::string text = render_table(r);
  const std::string percent = "±" + std::to_string(static_cast<int>(sim_pool_peak_error * 100.0 + 0.5)) + "%";
  // Right-aligned under "resv error" (10 columns wide; "±" is one column).
  EXPECT_NE(text.find("cudaMallocAsync" + std::string(2 + 10 - 3, ' ') + percent + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("native" + std::string(9 + 2 + 9, ' ') + "-\n"), std::string::npos) << text;
  EXPECT_NE(text.find("estimates"), std::string::npos) << text;
  const std::string json = render_json(r);
  std::ostringstream bound;
  bound << "\"peak_reserved_error\": " << sim_pool_peak_error;
  EXPECT_NE(json.find(bound.str()), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_reserved_error\": 0}"), std::string::npos) << json;
}

TEST(sim_pool_estimate, BackendRowsAreMarkedOnTheSimOnly) {
  for (const bool sim : {true, false}) {
    report r;
    table& t = r.tables.emplace_back();
    t.columns = {{"backend", "backend", col_kind::text}, {"status", "status", col_kind::text}};
    t.rows = {{std::string("native"), std::string("ok")},
              {std::string("cudaMallocAsync"), std::string("ok")},
              {std::string("async-raw"), std::string("ok")},
              {std::string("cub"), cell(), std::string("unavailable")}};
    driver_choice choice;
    choice.sim = sim;
    mark_sim_pool_rows(r, t, choice);
    if (!sim) {
      EXPECT_EQ(t.columns.size(), 2u) << "a real device's figures are measured, not estimated";
      EXPECT_TRUE(r.notes.empty());
      continue;
    }
    ASSERT_EQ(t.columns.size(), 3u);
    EXPECT_EQ(t.columns.back().key, "peak_reserved_error");
    for (const auto& row : t.rows) ASSERT_EQ(row.size(), 3u);
    EXPECT_EQ(std::get<double>(t.rows[0][2]), 0.0);
    EXPECT_EQ(std::get<double>(t.rows[1][2]), sim_pool_peak_error);
    EXPECT_EQ(std::get<double>(t.rows[2][2]), sim_pool_peak_error);
    EXPECT_EQ(std::get<double>(t.rows[3][2]), 0.0);
    ASSERT_EQ(r.notes.size(), 1u);
  }
}

TEST(sim_pool_estimate, RankingNotesWhereAnEstimateOverlapsTheRecommendation) {
  const std::size_t mib = std::size_t{1} << 20;
  const std::size_t near = static_cast<std::size_t>(1000.0 * (1.0 + sim_pool_peak_error / 2)) * mib;
  const std::size_t far = static_cast<std::size_t>(1000.0 * (1.0 + sim_pool_peak_error * 3)) * mib;
  auto notes = estimate_ranking_notes({{"A", 1000 * mib, false}, {"pool", near, true}, {"B", near, false}});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("pool and the recommendation A"), std::string::npos) << notes[0];
  EXPECT_TRUE(estimate_ranking_notes({{"A", 1000 * mib, false}, {"pool", far, true}}).empty())
      << "an estimate well behind the recommendation changes nothing";
  notes = estimate_ranking_notes({{"pool", 1000 * mib, true}, {"A", near, false}, {"B", far, false}});
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("A and the recommendation pool"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("confirm it on the device"), std::string::npos) << notes[1];
  EXPECT_TRUE(estimate_ranking_notes({{"A", 1000 * mib, false}, {"B", 1001 * mib, false}}).empty());
  EXPECT_TRUE(estimate_ranking_notes({}).empty());
}

}  // namespace
}  // namespace streampool::bench
