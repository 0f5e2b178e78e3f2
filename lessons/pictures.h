// pictures.h — the lessons' conceptual pictures that more than one lesson draws: a colour per rank,
// its legend, Y = XW split over t ranks by the columns or the rows of W (lessons 01–03), and a
// tp × dp grid of ranks on nodes (lessons 12 and 16), drawn on observe/svg_diagram.h's canvas. A lesson's own picture (the ring's steps, f and g in a block)
// sits in its main.cpp and uses the same colours.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lesson.h"
#include "observe/svg_diagram.h"

namespace tp::lesson {

/// Declares --svg: where the lesson writes its picture, `file` in build/ by default
/// (default_output); `what` says what the picture shows, for --help.
void svg_option(Options& o, const std::string& file, const std::string& what);
/// --svg's path, checked on every rank up front (check_output_paths): a place the picture cannot
/// go is found before the lesson runs, not after.
std::string svg_path(Lesson& L);
/// Writes `d` to `path` on rank 0 and prints "  picture: <path>".
void write_picture(Lesson& L, const SvgDiagram& d, const std::string& path);

/// The fill of rank r's blocks (a palette of eight, repeated beyond).
std::string rank_color(int r);
/// The fill of a block every rank holds whole (replicated).
inline const char* kWholeColor = "#e0e0e0";

/// Lines of text from the left margin, the first with its baseline at y, 16 apart; returns the y
/// below them.
double draw_notes(SvgDiagram& d, double y, const std::vector<std::string>& lines);

/// A row of swatches at height y from x: "rank 0", …, "rank t−1", then "every rank (whole)".
/// Returns the y below it.
double draw_rank_legend(SvgDiagram& d, double x, double y, int t);

/// One part of a bar: `value` (ms, bytes, …) drawn value·scale wide, filled `fill`, `label` inside.
struct BarPart {
  double value;
  std::string fill;
  std::string label;
};
/// Boxes side by side from x at height y, each `h` high and its value·scale wide (a time line's
/// row, a stack of byte counts); returns the x after the last.
double draw_bar(SvgDiagram& d, double x, double y, double h, double scale,
                const std::vector<BarPart>& parts);
/// Swatches with their names in a row from x at height y; returns the y below them.
double draw_swatches(SvgDiagram& d, double x, double y,
                     const std::vector<std::pair<std::string, std::string>>& fill_name);

/// One box of a chain: its label, fill and width.
struct ChainBox {
  std::string label;
  std::string fill;
  double w;
};
/// Boxes left to right from x at height y, each `h` high, `gap` apart and joined by arrows (a
/// rank's path through a layer); returns the x after the last.
double draw_chain(SvgDiagram& d, double x, double y, double h, const std::vector<ChainBox>& boxes,
                  double gap = 22);

/// How W is cut in a split matmul picture.
enum class SplitBy { Columns, Rows };

/// Y = XW with X (1 × in), W (in × out), cut over t ranks: a box per block, coloured by the rank
/// that holds it.
struct SplitPicture {
  SplitBy by = SplitBy::Columns;
  int t = 2;
  int in = 2, out = 2;       // W's shape; the cut dimension must divide by t
  std::string weight = "W";  // the weight's name: its blocks are W_0 … W_{t−1}
  /// Also draw the collective that makes Y whole: the all-gather of the columns Y_r (column
  /// split), the all-reduce of the partial sums P_r (row split: g).
  bool combine = true;
};

/// Draws `s` with its heading at height y; returns the y below it.
double draw_split(SvgDiagram& d, double y, const SplitPicture& s, const std::string& heading);

/// One split as a whole picture (lessons 02 and 03): a canvas `width` wide with `title`, the rank
/// legend, `s` under `heading`, then `notes`; written to `path` (write_picture).
void write_split_picture(Lesson& L, const std::string& path, double width, const std::string& title,
                         const SplitPicture& s, const std::string& heading,
                         const std::vector<std::string>& notes);

/// A tp × dp grid of ranks placed on nodes (lessons 12 and 16). A box per world rank inside the box
/// of its node (nodes stacked, a node's ranks in world order, tp to a row), filled by its tp_rank
/// (a DP group holds one shard: one colour) and labelled with its (tp_rank, dp_rank); each TP group
/// and each DP group drawn as links between its members, solid (TP) or dashed (DP), green where the
/// two ranks share a node and red where the link crosses nodes.
struct GridPicture {
  int tp = 2;
  std::vector<int> node;       // the node of each world rank
  std::vector<int> grid_rank;  // the grid rank of each world rank (empty: the world rank itself)
  std::string heading;         // one line above the panel
  std::string note;            // one line below it (empty: none)
};

/// The width a panel of `g` takes.
double grid_width(const GridPicture& g);
/// Draws `g` with its top left at (x, y); returns the y below it.
double draw_grid(SvgDiagram& d, double x, double y, const GridPicture& g);

/// Grid panels side by side under `title` and the links' legend, then `notes`; written to `path`
/// (write_picture).
void write_grid_picture(Lesson& L, const std::string& path, const std::string& title,
                        const std::vector<GridPicture>& panels,
                        const std::vector<std::string>& notes);

}  // namespace tp::lesson
