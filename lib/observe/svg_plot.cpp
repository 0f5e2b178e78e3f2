#include "observe/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/output_file.h"

namespace tp {

std::string svg_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

namespace {
std::string num(double v) { return svg_number(v); }
}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

double nice_step(double span, int intervals) {
  TP_CHECK(span > 0 && std::isfinite(span) && intervals > 0, "nice_step(", span, ", ", intervals,
           ")");
  const double raw = span / intervals, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * mag >= raw * (1 - 1e-12)) return m * mag;
  return 10 * mag;
}

std::vector<double> nice_ticks(double lo, double hi, int intervals) {
  if (!(hi > lo)) hi = lo + 1;
  const double step = nice_step(hi - lo, intervals);
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last; ++k) {
    const double v = k * step;
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

std::string svg_line_plot(const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<PlotSeries>& series) {
  const double W = 640, H = 400, left = 70, right = 20, top = 40, bottom = 50;
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;  // no data
  const std::vector<double> xt = nice_ticks(x0, x1), yt = nice_ticks(y0, y1);
  x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return H - bottom - (y - y0) / (y1 - y0) * (H - top - bottom); };

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" +
                  num(H) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(W / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" +
       xml_escape(title) + "</text>\n";
  s += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(W - left - right) +
       "\" height=\"" + num(H - top - bottom) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (double xv : xt)
    s += "<text x=\"" + num(px(xv)) + "\" y=\"" + num(H - bottom + 18) +
         "\" text-anchor=\"middle\">" + num(xv) + "</text>\n";
  for (double yv : yt) {
    s += "<text x=\"" + num(left - 6) + "\" y=\"" + num(py(yv) + 4) + "\" text-anchor=\"end\">" +
         num(yv) + "</text>\n";
    s += "<line x1=\"" + num(left) + "\" x2=\"" + num(W - right) + "\" y1=\"" + num(py(yv)) +
         "\" y2=\"" + num(py(yv)) + "\" stroke=\"#ddd\"/>\n";
  }
  s += "<text x=\"" + num(W / 2) + "\" y=\"" + num(H - 10) + "\" text-anchor=\"middle\">" +
       xml_escape(x_label) + "</text>\n";
  s += "<text x=\"16\" y=\"" + num(H / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " +
       num(H / 2) + ")\">" + xml_escape(y_label) + "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& ser = series[k];
    std::string pts;
    for (size_t i = 0; i < ser.x.size() && i < ser.y.size(); ++i)
      pts += num(px(ser.x[i])) + "," + num(py(ser.y[i])) + " ";
    s += "<polyline fill=\"none\" stroke=\"" + ser.color + "\" stroke-width=\"2\"" +
         (ser.dashed ? " stroke-dasharray=\"6,4\"" : "") + " points=\"" + pts + "\"/>\n";
    const double ly = top + 16 + 18 * static_cast<double>(k);
    s += "<line x1=\"" + num(W - right - 170) + "\" x2=\"" + num(W - right - 140) + "\" y1=\"" +
         num(ly) + "\" y2=\"" + num(ly) + "\" stroke=\"" + ser.color + "\" stroke-width=\"2\"" +
         (ser.dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
    s += "<text x=\"" + num(W - right - 134) + "\" y=\"" + num(ly + 4) + "\">" +
         xml_escape(ser.name) + "</text>\n";
  }
  return s + "</svg>\n";
}

std::string svg_placeholder(const std::string& text) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"40\"><text x=\"8\" "
         "y=\"24\" font-family=\"sans-serif\" font-size=\"14\">" +
         xml_escape(text) + "</text></svg>\n";
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  write_file(path, text, what);
}

}  // namespace tp
