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

/// A round tick step for a span: 1, 2, 2.5 or 5 × 10ⁿ, the smallest such step that covers `span`
/// in at most `intervals` intervals (span > 0).
double nice_step(double span, int intervals);

/// Round tick values covering [lo, hi]: multiples of nice_step(hi − lo, intervals), from the
/// largest one ≤ lo to the smallest one ≥ hi (so the axis starts and ends on a tick).
std::vector<double> nice_ticks(double lo, double hi, int intervals = 5);

/// The SVG text of a line plot of `series` (axes on round ticks from nice_ticks() covering the
/// data, a legend).
std::string svg_line_plot(const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<PlotSeries>& series);

/// `v` as an SVG coordinate or size: 4 significant digits, no trailing zeros.
std::string svg_number(double v);

/// `s` as SVG / XML text or attribute value: < > & " as entities.
std::string xml_escape(const std::string& s);

/// A small SVG that shows one line of text: what a program writes to its --plot file when it
/// starts (so a file that cannot be written is found then, not after training), until the plot.
std::string svg_placeholder(const std::string& text);

/// Writes `text` to `path` (creating or replacing the file in place). Every step is checked: a
/// failure is a tp::Error (exit 1) headed by `what` (e.g. "--plot loss.svg"; empty: the path) with
/// errno's text and name (core/output_file.h).
void write_text_file(const std::string& path, const std::string& text,
                     const std::string& what = "");

}  // namespace tp
