// svg_plot.cpp — rendering of the line and bar charts as SVG text (svg_plot.hpp): axes with
// "nice" ticks (1, 2, 5 x 10^k), a legend, and a logarithmic y axis for bars spanning > 100x.
#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace streampool::bench {
namespace {

constexpr double width = 900, height = 520;
constexpr double left = 80, right = 220, top = 50, bottom = 60;  // margins; legend on the right
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

std::string header(const std::string& title) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n" +
         "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" + "<text x=\"" + num(width / 2) +
         "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" + escape(title) + "</text>\n";
}

std::string axes(const std::string& x_label, const std::string& y_label) {
  const double x0 = left, y0 = height - bottom, x1 = width - right;
  return "<line x1=\"" + num(x0) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(x1) + "\" y2=\"" + num(y0) +
         "\" stroke=\"black\"/>\n<line x1=\"" + num(x0) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x0) + "\" y2=\"" +
         num(y0) + "\" stroke=\"black\"/>\n<text x=\"" + num((x0 + x1) / 2) + "\" y=\"" + num(height - 15) +
         "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n<text transform=\"translate(18," +
         num((top + y0) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" + escape(y_label) + "</text>\n";
}

std::string legend_entry(std::size_t index, const std::string& name, int color, bool dashed) {
  const double y = top + 10 + 20.0 * static_cast<double>(index);
  const double x = width - right + 15;
  return "<line x1=\"" + num(x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(x + 25) + "\" y2=\"" + num(y) +
         "\" stroke=\"" + palette[color % 10] + "\" stroke-width=\"3\"" +
         (dashed ? " stroke-dasharray=\"6,3\"" : "") + "/>\n<text x=\"" + num(x + 32) + "\" y=\"" + num(y + 4) + "\">" +
         escape(name) + "</text>\n";
}

}  // namespace

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
  const std::vector<double> x_ticks = nice_ticks(0.0, x_max), y_ticks = nice_ticks(0.0, y_max);
  x_max = x_ticks.back();
  y_max = y_ticks.back();
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  auto px = [&](double x) { return left + x / x_max * plot_w; };
  auto py = [&](double y) { return height - bottom - y / y_max * plot_h; };

  std::string svg = header(chart.title) + axes(chart.x_label, chart.y_label);
  for (const double t : y_ticks) {
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(py(t)) + "\" x2=\"" + num(width - right) + "\" y2=\"" +
           num(py(t)) + "\" stroke=\"#ddd\"/>\n<text x=\"" + num(left - 6) + "\" y=\"" + num(py(t) + 4) +
           "\" text-anchor=\"end\">" + tick_label(t) + "</text>\n";
  }
  for (const double t : x_ticks) {
    svg += "<text x=\"" + num(px(t)) + "\" y=\"" + num(height - bottom + 18) + "\" text-anchor=\"middle\">" +
           tick_label(t) + "</text>\n";
  }
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const line_series& s = chart.series[i];
    std::string path;
    for (const auto& [x, y] : s.points) path += (path.empty() ? "M" : " L") + num(px(x)) + "," + num(py(y));
    if (!path.empty()) {
      svg += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + palette[s.color % 10] + "\" stroke-width=\"1.5\"" +
             (s.dashed ? " stroke-dasharray=\"6,3\"" : "") + "/>\n";
    }
    svg += legend_entry(i, s.name, s.color, s.dashed);
  }
  return svg + "</svg>\n";
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
  const bool log_scale = chart.log_scale || (lo > 0.0 && hi / lo > 100.0);
  const double plot_w = width - left - right, plot_h = height - top - bottom;
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
    return height - bottom - f * plot_h;
  };
  std::string svg = header(chart.title) + axes("", chart.y_label + (log_scale ? " (log scale)" : ""));
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
    svg += "<text x=\"" + num(gx + group_w / 2) + "\" y=\"" + num(height - bottom + 18) + "\" text-anchor=\"middle\">" +
           escape(chart.groups[g]) + "</text>\n";
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
      const double v = s < chart.values.size() && g < chart.values[s].size() ? chart.values[s][g] : 0.0;
      if (!(v > 0.0)) continue;
      const double x = gx + group_w * 0.1 + bar_w * static_cast<double>(s);
      const double y = std::min(py(v), height - bottom - 1.0);
      svg += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(bar_w * 0.9) + "\" height=\"" +
             num(height - bottom - y) + "\" fill=\"" + palette[s % 10] + "\"><title>" + escape(chart.series[s]) + " " +
             escape(chart.groups[g]) + ": " + tick_label(v) + "</title></rect>\n";
    }
  }
  for (std::size_t s = 0; s < chart.series.size(); ++s) svg += legend_entry(s, chart.series[s], static_cast<int>(s), false);
  return svg + "</svg>\n";
}

}  // namespace streampool::bench
