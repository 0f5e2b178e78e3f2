#include "observe/svg_diagram.h"

#include <algorithm>
#include <cmath>

#include "observe/svg_plot.h"

namespace tp {

namespace {
std::string num(double v) { return svg_number(v); }
}  // namespace

SvgDiagram::SvgDiagram(double width, double height, const std::string& title)
    : width_(width), height_(height) {
  if (!title.empty()) text(width / 2, 22, title, "middle", 15);
}

void SvgDiagram::grow(double x, double y) {
  width_ = std::max(width_, x + 10);
  height_ = std::max(height_, y + 10);
}

void SvgDiagram::box(double x, double y, double w, double h, const std::string& fill,
                     const std::string& label) {
  body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
           num(h) + "\" fill=\"" + xml_escape(fill) + "\" stroke=\"#333\" stroke-width=\"0.8\"/>\n";
  grow(x + w, y + h);
  // The label's size follows the box, so that a narrow box still holds its two or three letters.
  if (!label.empty())
    text(x + w / 2, y + h / 2 + std::min(12.0, h * 0.6) * 0.35, label, "middle",
         std::min({12.0, h * 0.6, 1.6 * w / std::max<double>(1, label.size())}));
}

void SvgDiagram::text(double x, double y, const std::string& s, const std::string& anchor,
                      double size, const std::string& color) {
  body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor +
           "\" font-size=\"" + num(size) + "\" fill=\"" + xml_escape(color) + "\">" +
           xml_escape(s) + "</text>\n";
  grow(x, y);
}

void SvgDiagram::line(double x1, double y1, double x2, double y2, const std::string& color,
                      bool dashed) {
  body_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
           num(y2) + "\" stroke=\"" + xml_escape(color) + "\" stroke-width=\"1.2\"" +
           (dashed ? " stroke-dasharray=\"4 3\"" : "") + "/>\n";
  grow(std::max(x1, x2), std::max(y1, y2));
}

void SvgDiagram::arrow(double x1, double y1, double x2, double y2, const std::string& color) {
  line(x1, y1, x2, y2, color);
  // The head: two strokes 8 units long at ±25° from the shaft, drawn as one filled triangle.
  const double len = std::hypot(x2 - x1, y2 - y1);
  if (len <= 0) return;
  const double ux = (x2 - x1) / len, uy = (y2 - y1) / len, c = std::cos(0.44), s = std::sin(0.44);
  const double ax = x2 - 8 * (ux * c - uy * s), ay = y2 - 8 * (uy * c + ux * s);
  const double bx = x2 - 8 * (ux * c + uy * s), by = y2 - 8 * (uy * c - ux * s);
  body_ += "<polygon points=\"" + num(x2) + "," + num(y2) + " " + num(ax) + "," + num(ay) + " " +
           num(bx) + "," + num(by) + "\" fill=\"" + xml_escape(color) + "\"/>\n";
}

std::string SvgDiagram::str() const {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width_) + "\" height=\"" +
         num(height_) + "\" font-family=\"sans-serif\" font-size=\"12\">\n" +
         "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" + body_ + "</svg>\n";
}

void SvgDiagram::write(const std::string& path, const std::string& what) const {
  write_text_file(path, str(), what);
}

}  // namespace tp
