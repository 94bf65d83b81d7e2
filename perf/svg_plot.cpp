// svg_plot.cpp — rendering of the line and bar charts as SVG text (svg_plot.hpp): axes with
// "nice" ticks (1, 2, 5 x 10^k), a logarithmic y axis for bars spanning > 30x, a subtitle, and
// the legend in columns below the plot (Note [Legend layout]); the x axis of a line chart ends at
// the data, and series drawn under others are named in the legend (Note [Coincident series]).
//
// Note [Coincident series]
// A replay's chart draws reserved (solid) and allocated (dashed) for every backend, and backends
// often agree: on the sim, cudaMallocAsync's reserved is async-raw's exactly, and the cuda peer's
// reserved is its allocated, which is everyone's allocated. The later series is drawn over the
// earlier, so a chart with 8 legend entries showed 3 lines. Now a series that lies within half a
// pixel of a later-drawn one everywhere is marked in its legend entry: "cudaMallocAsync (= async-raw)"
// names the line it is hidden under; "cuda (reserved = allocated)" when its own two lines meet.
// The x axis ends at the last event (82,319, not a tick rounded up to 100,000).
//
// Note [Legend layout]
// A legend beside the plot fits five short names; compare and replay draw ten backends whose
// labels carry configs ("native[expandable_segments:True,max_split_size_mb:256]"). So the legend
// goes below the plot, in as many columns as the widest label allows, and the canvas grows by its
// rows: every entry is inside the canvas whatever the count. Labels longer than max_label_chars
// are cut with an ellipsis; the full text stays in a <title> (shown on hover).
#include "svg_plot.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "cli_common.hpp"

namespace streampool::bench {
namespace {

constexpr double width = 960, plot_height = 440;
constexpr double left = 80, right = 30, top_plain = 50, top_subtitle = 68, bottom = 60;
constexpr double legend_row = 20, legend_char = 7.0, legend_swatch = 58;
constexpr std::size_t max_label_chars = 70;
constexpr double log_scale_span = 30.0;  ///< bars spanning more than this factor get a log axis
constexpr const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string num(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", value);
  return buffer;
}

std::string tick_label(double value) {
  char buffer[32];
  if (value != 0.0 && (std::fabs(value) >= 1e6 || std::fabs(value) < 1e-2)) {
    std::snprintf(buffer, sizeof buffer, "%.0e", value);
  } else {
    std::snprintf(buffer, sizeof buffer, "%g", value);
  }
  return buffer;
}

std::string escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

/// Ticks from 0 (or lo) to >= hi with a step of 1, 2 or 5 x 10^k, about 6 of them.
std::vector<double> nice_ticks(double lo, double hi) {
  if (hi <= lo) hi = lo + 1.0;
  const double raw = (hi - lo) / 6.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t <= hi + step * 0.999; t += step) ticks.push_back(t);
  return ticks;
}

struct legend_item {
  std::string name;
  int color = 0;
  bool solid = true;   ///< draw a solid swatch
  bool dashed = false; ///< draw a dashed swatch
};

/// Where things go: the plot area, then the legend rows below it (Note [Legend layout]).
struct layout {
  double top = top_plain;
  double plot_bottom = 0;  ///< y of the x axis
  double legend_top = 0;
  double height = 0;
  std::size_t columns = 1;
  double column_width = 0;

  layout(const std::string& subtitle, const std::vector<legend_item>& items) {
    top = subtitle.empty() ? top_plain : top_subtitle;
    plot_bottom = top + plot_height;
    std::size_t longest = 1;
    for (const legend_item& item : items) longest = std::max(longest, std::min(item.name.size(), max_label_chars + 1));
    column_width = legend_swatch + legend_char * static_cast<double>(longest) + 20;
    const double usable = width - 2 * 20;
    columns = std::max<std::size_t>(1, static_cast<std::size_t>(usable / column_width));
    const std::size_t rows = (items.size() + columns - 1) / columns;
    legend_top = plot_bottom + bottom;
    height = legend_top + legend_row * static_cast<double>(rows) + 10;
  }
};

std::string header(const std::string& title, const std::string& subtitle, const layout& at) {
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(at.height) +
                    "\" viewBox=\"0 0 " + num(width) + " " + num(at.height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" +
                    "<text x=\"" + num(width / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" + escape(title) +
                    "</text>\n";
  if (!subtitle.empty()) {
    svg += "<text x=\"" + num(width / 2) + "\" y=\"44\" text-anchor=\"middle\" fill=\"#555\">" + escape(subtitle) +
           "</text>\n";
  }
  return svg;
}

std::string axes(const std::string& x_label, const std::string& y_label, const layout& at) {
  const double x0 = left, y0 = at.plot_bottom, x1 = width - right;
  return "<line x1=\"" + num(x0) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(x1) + "\" y2=\"" + num(y0) +
         "\" stroke=\"black\"/>\n<line x1=\"" + num(x0) + "\" y1=\"" + num(at.top) + "\" x2=\"" + num(x0) + "\" y2=\"" +
         num(y0) + "\" stroke=\"black\"/>\n<text x=\"" + num((x0 + x1) / 2) + "\" y=\"" + num(y0 + 40) +
         "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n<text transform=\"translate(18," +
         num((at.top + y0) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" + escape(y_label) + "</text>\n";
}

std::string swatch(double x, double y, int color, bool dashed) {
  return "<line x1=\"" + num(x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(x + 22) + "\" y2=\"" + num(y) +
         "\" stroke=\"" + palette[color % 10] + "\" stroke-width=\"3\"" + (dashed ? " stroke-dasharray=\"6,3\"" : "") +
         "/>\n";
}

std::string legend(const std::vector<legend_item>& items, const layout& at) {
  std::string svg;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const legend_item& item = items[i];
    const double x = 20 + at.column_width * static_cast<double>(i % at.columns);
    const double y = at.legend_top + legend_row * static_cast<double>(i / at.columns) + 6;
    if (item.solid) svg += swatch(x, y, item.color, false);
    if (item.dashed) svg += swatch(x + (item.solid ? 28 : 0), y, item.color, true);
    const bool cut = item.name.size() > max_label_chars;
    const std::string shown = cut ? item.name.substr(0, max_label_chars - 1) + "\xE2\x80\xA6" : item.name;
    svg += "<text x=\"" + num(x + legend_swatch) + "\" y=\"" + num(y + 4) + "\">" +
           (cut ? "<title>" + escape(item.name) + "</title>" : std::string()) + escape(shown) + "</text>\n";
  }
  return svg;
}

/// Whether `a` and `b` would be drawn as one line: the same x values, y within `tolerance`.
bool coincide(const line_series& a, const line_series& b, double tolerance) {
  if (a.points.size() != b.points.size() || a.points.empty()) return false;
  for (std::size_t i = 0; i < a.points.size(); ++i) {
    if (a.points[i].first != b.points[i].first || std::fabs(a.points[i].second - b.points[i].second) > tolerance) {
      return false;
    }
  }
  return true;
}

/// One legend entry per listed series; a listed series' unlisted dashed twin (same color) adds
/// its dashed swatch to the entry. Note [Coincident series]: a listed series hidden under a later
/// listed one says so ("= NAME"), as does one whose twin lies on it ("reserved = allocated").
std::vector<legend_item> line_legend(const line_chart& chart, double tolerance) {
  std::vector<legend_item> items;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const line_series& s = chart.series[i];
    if (!s.in_legend) continue;
    legend_item item{s.name, s.color, !s.dashed, s.dashed};
    std::vector<std::string> marks;
    for (const line_series& twin : chart.series) {
      if (!twin.in_legend && twin.color == s.color && twin.dashed != s.dashed) {
        item.solid = true;
        item.dashed = true;
        if (coincide(s, twin, tolerance)) marks.push_back(s.dashed ? "allocated = reserved" : "reserved = allocated");
      }
    }
    for (std::size_t j = chart.series.size(); j-- > i + 1;) {  // the last drawn over it is the one seen
      const line_series& over = chart.series[j];
      if (over.in_legend && over.dashed == s.dashed && coincide(s, over, tolerance)) {
        marks.push_back("= " + over.name);
        break;
      }
    }
    for (std::size_t m = 0; m < marks.size(); ++m) item.name += (m == 0 ? " (" : ", ") + marks[m];
    if (!marks.empty()) item.name += ")";
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace

void check_plot_path(const std::string& path) {
  std::string ext;
  const std::size_t dot = path.find_last_of('.');
  const std::size_t slash = path.find_last_of('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) ext = path.substr(dot);
  std::string lower = ext;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == ".svg") return;
  throw usage_error("--plot: '" + path + "' " + (ext.empty() ? "has no extension" : "has extension '" + ext + "'") +
                    "; streampool-bench writes SVG charts only: name the file *.svg (convert it afterwards if "
                    "you need another format, e.g. rsvg-convert -o chart.png chart.svg)");
}

std::string plot_caveat(const driver_choice& choice) {
  if (choice.sim) {
    return "simulated device: memory as the sim predicts it; times are host overhead of the allocator logic only";
  }
  return "measured on " + choice.device_name;
}

std::vector<std::pair<double, double>> thin_points(const std::vector<std::pair<double, double>>& points,
                                                  std::size_t max_points) {
  if (points.size() <= max_points || max_points < 2) return points;
  std::vector<std::pair<double, double>> out;
  const std::size_t per_bucket = (points.size() + max_points - 1) / max_points;
  for (std::size_t start = 0; start < points.size(); start += per_bucket) {
    const auto end = points.begin() + static_cast<std::ptrdiff_t>(std::min(points.size(), start + per_bucket));
    out.push_back(*std::max_element(points.begin() + static_cast<std::ptrdiff_t>(start), end,
                                    [](const auto& a, const auto& b) { return a.second < b.second; }));
  }
  return out;
}

std::string render_svg(const line_chart& chart) {
  double x_max = 1.0, y_max = 1.0;
  for (const line_series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, y);
    }
  }
  std::vector<double> x_ticks = nice_ticks(0.0, x_max);
  const std::vector<double> y_ticks = nice_ticks(0.0, y_max);
  y_max = y_ticks.back();
  // The x axis ends at the data (Note [Coincident series]): ticks beyond it are dropped.
  while (x_ticks.size() > 1 && x_ticks.back() > x_max) x_ticks.pop_back();
  const std::vector<legend_item> items = line_legend(chart, 0.5 * y_max / plot_height);  // half a pixel
  const layout at(chart.subtitle, items);
  const double plot_w = width - left - right;
  auto px = [&](double x) { return left + x / x_max * plot_w; };
  auto py = [&](double y) { return at.plot_bottom - y / y_max * plot_height; };

  std::string svg = header(chart.title, chart.subtitle, at) + axes(chart.x_label, chart.y_label, at);
  for (const double t : y_ticks) {
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(py(t)) + "\" x2=\"" + num(width - right) + "\" y2=\"" +
           num(py(t)) + "\" stroke=\"#ddd\"/>\n<text x=\"" + num(left - 6) + "\" y=\"" + num(py(t) + 4) +
           "\" text-anchor=\"end\">" + tick_label(t) + "</text>\n";
  }
  for (const double t : x_ticks) {
    svg += "<text x=\"" + num(px(t)) + "\" y=\"" + num(at.plot_bottom + 18) + "\" text-anchor=\"middle\">" +
           tick_label(t) + "</text>\n";
  }
  for (const line_series& s : chart.series) {
    std::string path;
    for (const auto& [x, y] : s.points) path += (path.empty() ? "M" : " L") + num(px(x)) + "," + num(py(y));
    if (!path.empty()) {
      svg += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + palette[s.color % 10] + "\" stroke-width=\"1.5\"" +
             (s.dashed ? " stroke-dasharray=\"6,3\"" : "") + "><title>" + escape(s.name) + "</title></path>\n";
    }
  }
  return svg + legend(items, at) + "</svg>\n";
}

std::string render_svg(const bar_chart& chart) {
  double lo = 0.0, hi = 0.0;
  for (const auto& row : chart.values) {
    for (const double v : row) {
      if (!(v > 0.0)) continue;
      lo = lo == 0.0 ? v : std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (hi == 0.0) hi = 1.0;
  std::vector<legend_item> items;
  for (std::size_t s = 0; s < chart.series.size(); ++s) items.push_back({chart.series[s], static_cast<int>(s), true, false});
  const layout at(chart.subtitle, items);
  const bool log_scale = chart.log_scale || (lo > 0.0 && hi / lo > log_scale_span);
  const double plot_w = width - left - right;
  std::vector<double> ticks;
  double y_lo = 0.0, y_hi = 0.0;
  if (log_scale) {
    y_lo = std::floor(std::log10(lo));
    y_hi = std::ceil(std::log10(hi));
    if (y_hi <= y_lo) y_hi = y_lo + 1;
    for (double e = y_lo; e <= y_hi; e += 1.0) ticks.push_back(e);
  } else {
    ticks = nice_ticks(0.0, hi);
    y_hi = ticks.back();
  }
  auto py = [&](double v) {
    const double f = log_scale ? (std::log10(v) - y_lo) / (y_hi - y_lo) : v / y_hi;
    return at.plot_bottom - f * plot_height;
  };
  std::string svg = header(chart.title, chart.subtitle, at) + axes("", chart.y_label + (log_scale ? " (log scale)" : ""), at);
  for (const double t : ticks) {
    const double value = log_scale ? std::pow(10.0, t) : t;
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(py(value)) + "\" x2=\"" + num(width - right) + "\" y2=\"" +
           num(py(value)) + "\" stroke=\"#ddd\"/>\n<text x=\"" + num(left - 6) + "\" y=\"" + num(py(value) + 4) +
           "\" text-anchor=\"end\">" + tick_label(value) + "</text>\n";
  }
  const double group_w = plot_w / static_cast<double>(std::max<std::size_t>(1, chart.groups.size()));
  const double bar_w = group_w * 0.8 / static_cast<double>(std::max<std::size_t>(1, chart.series.size()));
  for (std::size_t g = 0; g < chart.groups.size(); ++g) {
    const double gx = left + group_w * static_cast<double>(g);
    svg += "<text x=\"" + num(gx + group_w / 2) + "\" y=\"" + num(at.plot_bottom + 18) + "\" text-anchor=\"middle\">" +
           escape(chart.groups[g]) + "</text>\n";
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
      const double v = s < chart.values.size() && g < chart.values[s].size() ? chart.values[s][g] : 0.0;
      if (!(v > 0.0)) continue;
      const double x = gx + group_w * 0.1 + bar_w * static_cast<double>(s);
      const double y = std::min(py(v), at.plot_bottom - 1.0);
      svg += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(bar_w * 0.9) + "\" height=\"" +
             num(at.plot_bottom - y) + "\" fill=\"" + palette[s % 10] + "\"><title>" + escape(chart.series[s]) + " " +
             escape(chart.groups[g]) + ": " + tick_label(v) + "</title></rect>\n";
    }
  }
  return svg + legend(items, at) + "</svg>\n";
}

}  // namespace streampool::bench
