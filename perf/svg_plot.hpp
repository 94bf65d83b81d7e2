// svg_plot.hpp — two hand-written SVG charts (no dependencies): a line chart (reserved vs
// allocated over a replay, per backend) and a grouped bar chart (latency per size, per backend),
// with the legend laid out inside the canvas below the plot (legible with ten and more series) and
// a subtitle for the caveat of the run (e.g. "simulated device"); series hidden under others are
// marked in the legend ("= async-raw"). SVG is the only format written.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace streampool::bench {

struct driver_choice;  // cli_common.hpp

struct line_series {
  std::string name;
  int color = 0;        ///< index into the palette; series of one backend share it
  bool dashed = false;  ///< e.g. allocated dashed, reserved solid
  std::vector<std::pair<double, double>> points;  ///< (x, y), x ascending
  bool in_legend = true;  ///< false: drawn, not listed (e.g. the dashed twin of a listed series)
};

struct line_chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<line_series> series;
  std::string subtitle;  ///< under the title, e.g. plot_caveat()
};

struct bar_chart {
  std::string title;
  std::string y_label;
  std::vector<std::string> groups;  ///< x categories (e.g. sizes)
  std::vector<std::string> series;  ///< bars within a group (e.g. backends)
  /// values[series][group]; NaN or <= 0 = no bar.
  std::vector<std::vector<double>> values;
  bool log_scale = false;           ///< forces a log axis; render uses one anyway when values span more than 30x
  std::string subtitle;             ///< under the title, e.g. plot_caveat()
};

/// @throws usage_error (exit status 2) unless `path` ends in ".svg" (any case): no other format is written
void check_plot_path(const std::string& path);
/// The caveat a chart of this run carries: what a simulated device's figures mean ("" on a real GPU
/// beyond naming it).
[[nodiscard]] std::string plot_caveat(const driver_choice& choice);

[[nodiscard]] std::string render_svg(const line_chart& chart);
[[nodiscard]] std::string render_svg(const bar_chart& chart);

/// Reduces `points` to at most `max_points` by keeping, per bucket of x, the point of largest y
/// (peaks must survive thinning).
[[nodiscard]] std::vector<std::pair<double, double>> thin_points(const std::vector<std::pair<double, double>>& points,
                                                                std::size_t max_points);

}  // namespace streampool::bench
