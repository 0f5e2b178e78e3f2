// svg_plot.h — a small line plot written as a standalone SVG file (no dependencies), for loss
// curves in lessons and tools.
#pragma once

#include <string>
#include <vector>

namespace tp {

struct PlotSeries {
  std::string name;  ///< legend text
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  bool dashed = false;
};

/// The SVG text of a line plot of `series` (axes from the data's range, 5 ticks each, a legend).
std::string svg_line_plot(const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<PlotSeries>& series);

/// `s` as SVG / XML text or attribute value: < > & " as entities.
std::string xml_escape(const std::string& s);

/// Writes `svg` to `path` (creating the file; a failure is a tp::Error naming the path).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace tp
