// report_test.cpp — unit tests of the report renderings (table, JSON, CSV) and the SVG charts.
#include <gtest/gtest.h>

#include <cmath>

#include "report.hpp"
#include "svg_plot.hpp"

namespace streampool::bench {
namespace {

report sample_report() {
  report r;
  r.command = "replay";
  r.meta.emplace_back("tool", std::string("streampool-bench"));
  r.meta.emplace_back("trace_events", std::int64_t{42});
  r.notes.push_back("driver: sim");
  table& t = r.tables.emplace_back();
  t.columns = {{"backend", "backend", col_kind::text},
               {"peak_reserved_bytes", "peak resv", col_kind::bytes},
               {"hidden", "hidden", col_kind::count, false},
               {"seconds", "time", col_kind::seconds},
               {"error", "error", col_kind::text}};
  t.rows.push_back({std::string("native"), std::int64_t{3} << 20, std::int64_t{7}, 0.25, std::string()});
  t.rows.push_back({std::string("a \"b\", c"), cell(), cell(), std::nan(""), std::string("x\ny")});
  r.footer.push_back("recommended: X");
  return r;
}

TEST(report, TableShowsMiBAndHidesColumns) {
  const std::string text = render_table(sample_report());
  EXPECT_NE(text.find("peak resv MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("3.0"), std::string::npos) << text;
  EXPECT_NE(text.find("0.250"), std::string::npos) << text;
  EXPECT_EQ(text.find("hidden"), std::string::npos) << text;
  EXPECT_NE(text.find("recommended: X"), std::string::npos) << text;
}

TEST(report, JsonHasRawValuesAndEscapes) {
  const std::string json = render_json(sample_report());
  EXPECT_NE(json.find("\"trace_events\": 42"), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_reserved_bytes\": 3145728"), std::string::npos) << json;
  EXPECT_NE(json.find("\"hidden\": 7"), std::string::npos) << json;
  EXPECT_NE(json.find("\"a \\\"b\\\", c\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"seconds\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"x\\ny\""), std::string::npos) << json;
}

TEST(report, CsvQuotesAndComments) {
  const std::string csv = render_csv(sample_report());
  EXPECT_NE(csv.find("# tool: streampool-bench\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("backend,peak_reserved_bytes,hidden,seconds,error\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("native,3145728,7,0.25,\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\"a \"\"b\"\", c\",,,,\"x\ny\""), std::string::npos) << csv;
}

TEST(report, LongNotesAreWrappedAtSpaces) {
  const std::string note = "not run here: cub (needs a real GPU); cudaHostAlloc, pinned (a pinned host allocator); "
                           "torch-async, torch-native, torch-pinned (needs the PyTorch peer plugin and a real GPU)";
  const std::string wrapped = wrap_text(note, 60);
  std::size_t start = 0, lines = 0;
  std::string joined;
  while (start <= wrapped.size()) {
    std::size_t end = wrapped.find('\n', start);
    if (end == std::string::npos) end = wrapped.size();
    const std::string line = wrapped.substr(start, end - start);
    EXPECT_LE(line.size(), 60u) << line;
    if (lines > 0) {
      EXPECT_EQ(line.rfind("  ", 0), 0u) << "continuation lines are indented: " << line;
    }
    joined += (lines > 0 ? " " + line.substr(2) : line);
    ++lines;
    start = end + 1;
  }
  EXPECT_EQ(lines, 4u) << wrapped;
  EXPECT_EQ(joined, note) << "no word lost or cut";
  EXPECT_EQ(wrap_text("short", 60), "short");
  report r = sample_report();
  r.notes.push_back(note);
  EXPECT_NE(render_table(r).find("torch-async,\n  torch-native"), std::string::npos) << render_table(r);
}

TEST(report, Iso8601Date) {
  const std::string date = utc_now_iso8601();
  ASSERT_EQ(date.size(), 20u) << date;
  EXPECT_EQ(date[4], '-');
  EXPECT_EQ(date[10], 'T');
  EXPECT_EQ(date.back(), 'Z');
}

TEST(svg, LineChart) {
  line_chart chart{"t<1>", "event", "MiB", {}, ""};
  chart.series.push_back({"native reserved", 0, false, {{0, 1}, {10, 5}, {20, 3}}, true});
  chart.series.push_back({"native allocated", 0, true, {{0, 1}, {10, 4}, {20, 2}}, true});
  const std::string svg = render_svg(chart);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("t&lt;1&gt;"), std::string::npos);
  EXPECT_NE(svg.find("native allocated"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(svg, BarChartSwitchesToLogScale) {
  bar_chart chart{"latency", "ns", {"512B", "64MiB"}, {"native", "cuda"}, {{50.0, 60.0}, {2000.0, 150000.0}}, false, ""};
  const std::string svg = render_svg(chart);
  EXPECT_NE(svg.find("log scale"), std::string::npos);
  EXPECT_NE(svg.find("<rect x="), std::string::npos);
}

// Note [Coincident series]: the latency plot of issue 31 spanned 90x on a linear axis.
TEST(svg, BarChartSpanningMoreThan30xIsLogScale) {
  bar_chart chart{"latency", "ns", {"512B", "64MiB"}, {"native", "cuda"}, {{50.0, 60.0}, {100.0, 4500.0}}, false, ""};
  EXPECT_NE(render_svg(chart).find("log scale"), std::string::npos) << "90x";
  chart.values = {{50.0, 60.0}, {100.0, 1000.0}};
  EXPECT_EQ(render_svg(chart).find("log scale"), std::string::npos) << "20x stays linear";
}

TEST(svg, CoincidentSeriesAreNamedInTheLegend) {
  line_chart chart{"replay", "trace event", "MiB", {}, ""};
  const std::vector<std::pair<double, double>> pool = {{0, 1}, {41000, 9}, {82319, 4}};
  const std::vector<std::pair<double, double>> used = {{0, 1}, {41000, 6}, {82319, 2}};
  chart.series.push_back({"native", 0, false, {{0, 1}, {41000, 8}, {82319, 3}}, true});
  chart.series.push_back({"native allocated", 0, true, used, false});
  chart.series.push_back({"cudaMallocAsync", 1, false, pool, true});
  chart.series.push_back({"cudaMallocAsync allocated", 1, true, used, false});
  chart.series.push_back({"cuda", 2, false, used, true});
  chart.series.push_back({"cuda allocated", 2, true, used, false});
  chart.series.push_back({"async-raw", 3, false, pool, true});
  chart.series.push_back({"async-raw allocated", 3, true, used, false});
  const std::string svg = render_svg(chart);
  EXPECT_NE(svg.find(">cudaMallocAsync (= async-raw)</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">cuda (reserved = allocated)</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">native</text>"), std::string::npos) << "a line of its own is not marked";
  EXPECT_NE(svg.find(">async-raw</text>"), std::string::npos) << "the line on top is not marked";
  // The x axis ends at the data: the last event is at the right end, no tick past it.
  EXPECT_NE(svg.find(" L930.0,"), std::string::npos) << "82319 is drawn at the axis end";
  EXPECT_NE(svg.find(">80000</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">1e+05</text>"), std::string::npos) << "no tick rounded up to 100,000";
}

/// The numbers after `attribute="` in every occurrence, e.g. every y of the legend's text.
std::vector<double> attribute_values(const std::string& svg, const std::string& element, const std::string& attribute) {
  std::vector<double> values;
  for (std::size_t at = svg.find("<" + element + " "); at != std::string::npos; at = svg.find("<" + element + " ", at + 1)) {
    const std::size_t end = svg.find('>', at);
    const std::size_t key = svg.find(" " + attribute + "=\"", at);
    if (key == std::string::npos || key > end) continue;
    values.push_back(std::stod(svg.substr(key + attribute.size() + 3)));
  }
  return values;
}

// Ten backends with long config labels: every legend entry lies inside the canvas, the long label
// is cut with its full text kept in a <title>, and the subtitle carries the caveat.
TEST(svg, TenSeriesKeepTheLegendInsideTheCanvas) {
  line_chart chart{"replay", "event", "MiB", {}, "simulated device: memory as the sim predicts it"};
  for (int b = 0; b < 10; ++b) {
    const std::string label = "native[expandable_segments:True,max_split_size_mb:" + std::to_string(256 + b) +
                              ",roundup_power2_divisions:[256:1,512:2,1024:4,>:8]]";
    chart.series.push_back({label, b, false, {{0, 1.0 * b}, {100, 2.0 * b}}, true});
    chart.series.push_back({label + " allocated", b, true, {{0, 0.5 * b}, {100, 1.0 * b}}, false});
  }
  const std::string svg = render_svg(chart);
  const double height = attribute_values(svg, "svg", "height").at(0);
  const double width = attribute_values(svg, "svg", "width").at(0);
  const std::vector<double> ys = attribute_values(svg, "text", "y");
  const std::vector<double> xs = attribute_values(svg, "text", "x");
  ASSERT_FALSE(ys.empty());
  for (const double y : ys) EXPECT_LT(y, height);
  for (const double x : xs) EXPECT_LT(x, width);
  EXPECT_NE(svg.find("simulated device: memory as the sim predicts it"), std::string::npos);
  EXPECT_NE(svg.find("<title>native[expandable_segments:True,max_split_size_mb:256,roundup_power2_divisions:"
                     "[256:1,512:2,1024:4,&gt;:8]]</title>"), std::string::npos);
  // One legend entry per backend (the dashed twin is not listed again).
  EXPECT_EQ(svg.find("max_split_size_mb:256,roundup_power2_divisions:[256:1,512:2,1024:4,&gt;:8]] allocated</text>"),
            std::string::npos);
}

TEST(svg, PlotRefusesExtensionsItDoesNotWrite) {
  EXPECT_NO_THROW(check_plot_path("out/chart.svg"));
  EXPECT_NO_THROW(check_plot_path("CHART.SVG"));
  for (const char* path : {"chart.png", "chart.pdf", "chart", "dir.svg/chart"}) {
    try {
      check_plot_path(path);
      ADD_FAILURE() << path << " accepted";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("writes SVG charts only"), std::string::npos) << e.what();
    }
  }
}

TEST(svg, ThinningKeepsPeaks) {
  std::vector<std::pair<double, double>> points;
  for (int i = 0; i < 1000; ++i) points.emplace_back(i, i == 567 ? 1e6 : 1.0);
  const auto thin = thin_points(points, 50);
  EXPECT_LE(thin.size(), 50u);
  bool peak = false;
  for (const auto& p : thin) peak = peak || p.second == 1e6;
  EXPECT_TRUE(peak);
}

}  // namespace
}  // namespace streampool::bench
