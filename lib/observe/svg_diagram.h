// svg_diagram.h — a small canvas for the lessons' conceptual pictures (a schedule drawn from its
// formula, which rank holds which block of a matrix, a ring's steps): labelled boxes, text and
// arrows, written as a standalone SVG file like svg_plot.h's charts.
//
// Coordinates are SVG user units (pixels), origin at the top left. The canvas keeps the elements
// in the order they were added (later ones are drawn on top) and grows to hold them all.
#pragma once

#include <string>

namespace tp {

class SvgDiagram {
 public:
  /// A canvas at least `width` × `height`, white, with `title` centred at the top (none if empty).
  SvgDiagram(double width, double height, const std::string& title = "");

  /// A rectangle filled with `fill` (any SVG colour), outlined in dark grey, with `label` centred
  /// in it (none if empty).
  void box(double x, double y, double w, double h, const std::string& fill,
           const std::string& label = "");
  /// Text at (x, y), its baseline at y; `anchor`: "start", "middle" or "end".
  void text(double x, double y, const std::string& s, const std::string& anchor = "start",
            double size = 12, const std::string& color = "#222");
  /// A straight line; `dashed` draws it in dashes.
  void line(double x1, double y1, double x2, double y2, const std::string& color = "#444",
            bool dashed = false);
  /// A line with an arrowhead at (x2, y2).
  void arrow(double x1, double y1, double x2, double y2, const std::string& color = "#444");

  /// The SVG text of the canvas.
  std::string str() const;
  /// Writes str() to `path` (svg_plot.h's write_text_file: a failure names `what`).
  void write(const std::string& path, const std::string& what = "") const;

 private:
  void grow(double x, double y);
  double width_, height_;
  std::string body_;
};

}  // namespace tp
