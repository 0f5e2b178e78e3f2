#include "pictures.h"

#include <algorithm>
#include <cmath>

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

namespace {
// The grid picture's geometry, in SVG units.
constexpr double kRankW = 96, kRankH = 40;  // a rank's box
constexpr double kGapX = 48, kGapY = 36;    // between two ranks of a node
constexpr double kPad = 12, kNodeTop = 22;  // a node's margin, and its name above its ranks
constexpr double kNodeGap = 40;             // between two nodes
const char* kInside = "#2ca02c";            // a link between two ranks of one node
const char* kAcross = "#d62728";            // a link between nodes

// Which group a link belongs to: TP links are drawn solid, DP links dashed.
enum class Group { Tp, Dp };

struct Placed {
  int grid = 0;         // the grid rank
  double x = 0, y = 0;  // its box's top left
};

// Where every world rank's box goes, and each node's box: {x, y, w, h}.
std::vector<Placed> place_grid(const GridPicture& g, double x, double y,
                               std::vector<std::vector<double>>* nodes) {
  const int np = static_cast<int>(g.node.size());
  TP_CHECK(np > 0 && g.tp > 0 && np % g.tp == 0, "draw_grid: np must be a multiple of tp");
  TP_CHECK(g.grid_rank.empty() || static_cast<int>(g.grid_rank.size()) == np,
           "draw_grid: one grid rank per world rank");
  const int n_nodes = *std::max_element(g.node.begin(), g.node.end()) + 1;
  std::vector<Placed> at(static_cast<size_t>(np));
  double top = y + 18;  // below the heading
  for (int n = 0; n < n_nodes; ++n) {
    int k = 0;  // this node's ranks so far
    for (int r = 0; r < np; ++r) {
      if (g.node[static_cast<size_t>(r)] != n) continue;
      Placed& p = at[static_cast<size_t>(r)];
      p.grid = g.grid_rank.empty() ? r : g.grid_rank[static_cast<size_t>(r)];
      p.x = x + kPad + (k % g.tp) * (kRankW + kGapX);
      p.y = top + kNodeTop + (k / g.tp) * (kRankH + kGapY);
      ++k;
    }
    const int rows = std::max(1, (k + g.tp - 1) / g.tp);
    const double h = kNodeTop + rows * kRankH + (rows - 1) * kGapY + kPad;
    nodes->push_back({x, top, grid_width(g), h});
    top += h + kNodeGap;
  }
  return at;
}

// The name of a group's links.
const char* group_name(Group group) { return group == Group::Tp ? "TP" : "DP"; }

// A link drawn 3 strokes wide from (x1, y1) to (x2, y2), with `label` beside its middle.
void link(SvgDiagram& d, double x1, double y1, double x2, double y2, const std::string& color,
          Group group, const std::string& label) {
  const bool dashed = group == Group::Dp;
  const double len = std::max(1e-9, std::hypot(x2 - x1, y2 - y1));
  const double nx = -(y2 - y1) / len, ny = (x2 - x1) / len;  // the unit normal
  for (double o : {-1.2, 0.0, 1.2})
    d.line(x1 + o * nx, y1 + o * ny, x2 + o * nx, y2 + o * ny, color, dashed);
  const bool vertical = std::fabs(x2 - x1) < std::fabs(y2 - y1);
  d.text((x1 + x2) / 2 + (vertical ? 6 : 0), (y1 + y2) / 2 + (vertical ? 4 : -6), label,
         vertical ? "start" : "middle", 11, color);
}
}  // namespace

double grid_width(const GridPicture& g) { return 2 * kPad + g.tp * kRankW + (g.tp - 1) * kGapX; }

double draw_grid(SvgDiagram& d, double x, double y, const GridPicture& g) {
  d.text(x, y + 12, g.heading, "start", 13);
  std::vector<std::vector<double>> nodes;
  const std::vector<Placed> at = place_grid(g, x, y, &nodes);
  for (size_t n = 0; n < nodes.size(); ++n) {
    d.box(nodes[n][0], nodes[n][1], nodes[n][2], nodes[n][3], "#f7f7f7");
    d.text(nodes[n][0] + 6, nodes[n][1] + 15, "node " + std::to_string(n), "start", 11);
  }
  const int np = static_cast<int>(at.size());
  std::vector<int> world(static_cast<size_t>(np));  // the world rank of each grid rank
  for (int r = 0; r < np; ++r) {
    const Placed& p = at[static_cast<size_t>(r)];
    world[static_cast<size_t>(p.grid)] = r;
    d.box(p.x, p.y, kRankW, kRankH, rank_color(p.grid % g.tp));
    d.text(p.x + kRankW / 2, p.y + 16, "rank " + std::to_string(r), "middle", 12);
    d.text(p.x + kRankW / 2, p.y + 31,
           "tp " + std::to_string(p.grid % g.tp) + ", dp " + std::to_string(p.grid / g.tp),
           "middle", 10);
  }
  // A link between grid ranks a and b: edge to edge along the longer axis between their boxes.
  auto join = [&](int a, int b, Group group) {
    const int wa = world[static_cast<size_t>(a)], wb = world[static_cast<size_t>(b)];
    const Placed &p = at[static_cast<size_t>(wa)], &q = at[static_cast<size_t>(wb)];
    const bool inside = g.node[static_cast<size_t>(wa)] == g.node[static_cast<size_t>(wb)];
    const double ax = p.x + kRankW / 2, ay = p.y + kRankH / 2;
    const double bx = q.x + kRankW / 2, by = q.y + kRankH / 2;
    const double sx = bx > ax ? 1 : -1, sy = by > ay ? 1 : -1;
    if (std::fabs(by - ay) < 1)  // one row: right edge to left edge
      link(d, ax + sx * kRankW / 2, ay, bx - sx * kRankW / 2, by, inside ? kInside : kAcross, group,
           group_name(group));
    else  // another row or node: bottom edge to top edge
      link(d, ax, ay + sy * kRankH / 2, bx, by - sy * kRankH / 2, inside ? kInside : kAcross, group,
           group_name(group));
  };
  const int dp = np / g.tp;
  for (int dr = 0; dr < dp; ++dr)
    for (int i = 0; i + 1 < g.tp; ++i) join(dr * g.tp + i, dr * g.tp + i + 1, Group::Tp);
  for (int i = 0; i < g.tp; ++i)
    for (int dr = 0; dr + 1 < dp; ++dr) join(dr * g.tp + i, (dr + 1) * g.tp + i, Group::Dp);
  const double bottom = nodes.back()[1] + nodes.back()[3];
  if (g.note.empty()) return bottom + 20;
  d.text(x, bottom + 18, g.note, "start", 11);
  return bottom + 36;
}

void write_grid_picture(Lesson& L, const std::string& path, const std::string& title,
                        const std::vector<GridPicture>& panels,
                        const std::vector<std::string>& notes) {
  // Each panel as wide as its boxes or its text, whichever is wider (about 7 units a character).
  std::vector<double> widths;
  double width = kLeft;
  for (const GridPicture& g : panels) {
    const size_t chars = std::max(g.heading.size(), g.note.size());
    widths.push_back(std::max(grid_width(g), 6.5 * static_cast<double>(chars)) + 40);
    width += widths.back();
  }
  SvgDiagram d(std::max(760.0, width), 60, title);
  // The legend: the links' two kinds and two colours.
  double x = kLeft;
  for (const Group group : {Group::Tp, Group::Dp}) {
    link(d, x, 46, x + 30, 46, "#444", group, "");
    d.text(x + 36, 50, std::string(group_name(group)) + " group");
    x += 110;
  }
  for (const auto& [what, color] : {std::pair<const char*, const char*>{"inside a node", kInside},
                                    std::pair<const char*, const char*>{"across nodes", kAcross}}) {
    d.box(x, 40, 14, 12, color);
    d.text(x + 20, 50, what);
    x += 120;
  }
  d.text(x, 50, "fill: tp_rank (the shard a rank holds)");
  double y = 64, bottom = y;
  x = kLeft;
  for (size_t i = 0; i < panels.size(); ++i) {
    bottom = std::max(bottom, draw_grid(d, x, y, panels[i]));
    x += widths[i];
  }
  draw_notes(d, bottom + 4, notes);
  write_picture(L, d, path);
}

}  // namespace tp::lesson
