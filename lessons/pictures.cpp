#include "pictures.h"

#include <algorithm>

#include "core/error.h"

namespace tp::lesson {

namespace {
constexpr double kCell = 30;  // one matrix element, in SVG units
constexpr double kLeft = 30;  // the picture's left margin

// The name of block r of `m`: "W_0".
std::string block(const std::string& m, int r) { return m + "_" + std::to_string(r); }

// A sign ("×", "=", "+") centred at (x, y).
void sign(SvgDiagram& d, double x, double y, const std::string& s) {
  d.text(x, y + 6, s, "middle", 18);
}
}  // namespace

void svg_option(Options& o, const std::string& file, const std::string& what) {
  o.path("svg", default_output(file),
         "where to write the picture of " + what +
             " (default: build/ when run from the repository, else the folder it is run from)");
}

std::string svg_path(Lesson& L) {
  const std::string path = L.options().get_text("svg");
  check_output_paths({{"--svg", path}});
  return path;
}

void write_picture(Lesson& L, const SvgDiagram& d, const std::string& path) {
  if (L.is_root()) d.write(path, "--svg " + path);
  L.say("  picture: ", path);
}

double draw_notes(SvgDiagram& d, double y, const std::vector<std::string>& lines) {
  for (const auto& s : lines) {
    d.text(kLeft, y, s);
    y += 16;
  }
  return y;
}

std::string rank_color(int r) {
  static const char* palette[] = {"#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc",
                                  "#fc9272", "#fdd0a2", "#c7e9c0", "#dadaeb"};
  return palette[static_cast<size_t>(r) % 8];
}

double draw_rank_legend(SvgDiagram& d, double x, double y, int t) {
  for (int r = 0; r < t; ++r, x += 80) {
    d.box(x, y, 14, 12, rank_color(r));
    d.text(x + 20, y + 10, "rank " + std::to_string(r));
  }
  d.box(x, y, 14, 12, kWholeColor);
  d.text(x + 20, y + 10, "every rank (whole)");
  return y + 24;
}

double draw_bar(SvgDiagram& d, double x, double y, double h, double scale,
                const std::vector<BarPart>& parts) {
  for (const BarPart& p : parts) {
    const double w = p.value * scale;
    if (w > 0) d.box(x, y, w, h, p.fill, p.label);
    x += w;
  }
  return x;
}

double draw_swatches(SvgDiagram& d, double x, double y,
                     const std::vector<std::pair<std::string, std::string>>& fill_name) {
  for (const auto& [fill, name] : fill_name) {
    d.box(x, y, 14, 12, fill);
    d.text(x + 20, y + 10, name);
    x += 36 + 6.0 * name.size();
  }
  return y + 24;
}

double draw_chain(SvgDiagram& d, double x, double y, double h, const std::vector<ChainBox>& boxes,
                  double gap) {
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (i > 0) d.arrow(x - gap + 2, y + h / 2, x - 2, y + h / 2);
    d.box(x, y, boxes[i].w, h, boxes[i].fill, boxes[i].label);
    x += boxes[i].w + gap;
  }
  return x - gap;
}

double draw_split(SvgDiagram& d, double y, const SplitPicture& s, const std::string& heading) {
  const bool cols = s.by == SplitBy::Columns;
  TP_CHECK((cols ? s.out : s.in) % s.t == 0, "draw_split: the cut dimension must divide by t");
  const int k = (cols ? s.out : s.in) / s.t;  // columns (or rows) of W per rank
  const std::string& w = s.weight;
  d.text(kLeft, y + 14, heading, "start", 14);
  y += 30;
  // Every shape hangs from one middle line: W is `in` cells high, the stack of partial sums t.
  const double height = std::max(s.in, cols ? 1 : 2 * s.t - 1) * kCell;
  const double mid = y + height / 2;
  double x = kLeft;

  // X: whole on every rank (column split), or its slice X_r beside the matching rows of W (row).
  if (cols) {
    d.box(x, mid - kCell / 2, s.in * kCell, kCell, kWholeColor, "X");
  } else {
    for (int r = 0; r < s.t; ++r)
      d.box(x + r * k * kCell, mid - kCell / 2, k * kCell, kCell, rank_color(r), block("X", r));
  }
  x += s.in * kCell + 20;
  sign(d, x, mid, "×");
  x += 20;
  // W: t strips of k columns, or t bands of k rows.
  const double top = mid - s.in * kCell / 2;
  for (int r = 0; r < s.t; ++r) {
    if (cols)
      d.box(x + r * k * kCell, top, k * kCell, s.in * kCell, rank_color(r), block(w, r));
    else
      d.box(x, top + r * k * kCell, s.out * kCell, k * kCell, rank_color(r), block(w, r));
  }
  x += s.out * kCell + 20;
  sign(d, x, mid, "=");
  x += 20;
  const double after = x + s.out * kCell;
  if (cols) {
    // The output's columns, each on the rank that holds its column of W: side by side, not added.
    for (int r = 0; r < s.t; ++r)
      d.box(x + r * k * kCell, mid - kCell / 2, k * kCell, kCell, rank_color(r), block("Y", r));
    d.text(x + s.out * kCell / 2, mid + kCell / 2 + 16, "Y_r = X " + w + "_r", "middle", 11);
  } else {
    // The partial sums: full shape on every rank, only part of the value, to be added.
    const double first = mid - (2 * s.t - 1) * kCell / 2;
    for (int r = 0; r < s.t; ++r) {
      const double py = first + 2 * r * kCell;
      d.box(x, py, s.out * kCell, kCell, rank_color(r), block("P", r));
      if (r + 1 < s.t) sign(d, x + s.out * kCell / 2, py + 1.5 * kCell, "+");
    }
    d.text(x + s.out * kCell / 2, first + (2 * s.t - 1) * kCell + 16, "P_r = X_r " + w + "_r",
           "middle", 11);
  }
  if (s.combine) {
    const std::string how = cols ? "all-gather (concatenate)" : "all-reduce (sum)";
    d.arrow(after + 10, mid, after + 170, mid);
    d.text(after + 90, mid - 8, how, "middle", 11);
    d.box(after + 180, mid - kCell / 2, s.out * kCell, kCell, kWholeColor, "Y");
  }
  return y + height + 46;
}

void write_split_picture(Lesson& L, const std::string& path, double width, const std::string& title,
                         const SplitPicture& s, const std::string& heading,
                         const std::vector<std::string>& notes) {
  SvgDiagram d(width, 60, title);
  double y = draw_rank_legend(d, 30, 40, s.t);
  y = draw_split(d, y, s, heading);
  draw_notes(d, y, notes);
  write_picture(L, d, path);
}

}  // namespace tp::lesson
