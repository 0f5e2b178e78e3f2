// Lesson 01 — block matrix multiplication: the whole math of tensor parallelism.
//
// What it shows: a matrix product XA can be cut two ways across t = 2 ranks.
//   - By columns of A:  X [A_0, A_1] = [X A_0, X A_1]       each rank computes some output columns;
//                                                            concatenating them (all-gather) is XA.
//   - By rows of A:     [X_0, X_1] [A_0; A_1] = X_0 A_0 + X_1 A_1
//                                                            each rank computes a full-shape partial
//                                                            sum; adding them (all-reduce) is XA.
// With X = [1, 2] and A = [[1, 2], [3, 4]], XA = [7, 10]:
//   column split: rank 0 computes 1·1 + 2·3 = 7, rank 1 computes 1·2 + 2·4 = 10 → [7, 10]
//   row split:    rank 0 computes 1·[1, 2] = [1, 2], rank 1 computes 2·[3, 4] = [6, 8] → [7, 10]
//
// What is new: everything (this is the first lesson): the Tensor, the Device that computes, the
// Communicator that moves numbers, and two region ops from lib/parallel/mappings.h.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_01_block_matmul [--step] [--svg P]
#include "core/host.h"
#include "lesson.h"
#include "parallel/mappings.h"
#include "pictures.h"

using namespace tp;

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_01_block_matmul", "Lesson 01: block matrix multiplication", {2},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int r = L.rank();
    const std::string svg = lesson::svg_path(L);  // drawn last, its path checked now

    // 1. The numbers, and the single-device answer.
    L.step("The numbers. Every rank builds X (1x2) and A (2x2); one device computes XA.");
    const std::vector<float> x_host = {1, 2}, a_host = {1, 2, 3, 4};
    Tensor X = Tensor::from_host(dev, Shape{1, 2}, x_host);
    Tensor A = Tensor::from_host(dev, Shape{2, 2}, a_host);
    Tensor XA(dev, Shape{1, 2});
    dev.gemm(false, false, 1.0f, X, A, 0.0f, XA);
    const std::vector<float> reference = host_matmul(x_host, a_host, 1, 2, 2);
    L.say("  X = ", lesson::fmt(x_host),
          ",  A = [[1, 2], [3, 4]],  XA = ", lesson::fmt(XA.to_host()));
    L.check("single-device XA", XA.to_host(), reference);

    lesson::Table table({"step", "rank 0", "rank 1", "communication"});

    // 2. Column split: rank r keeps column r of A (a split of the last dim, no communication).
    L.step("Column split: rank r holds column r of A and computes Y_r = X A_r.");
    size_t m = L.mark();
    Tensor A_col = scatter_to_tp_region_forward(world, A);  // (2, 1)
    Tensor Y_r(dev, Shape{1, 1});
    dev.gemm(false, false, 1.0f, X, A_col, 0.0f, Y_r);
    auto cells = L.gather_fmt(Y_r);
    if (L.is_root()) table.add({"column: Y_r = X A_r", cells[0], cells[1], L.comm_since(m)});
    L.say("  rank 0: 1·1 + 2·3 = ", cells.empty() ? "" : cells[0],
          "    rank 1: 1·2 + 2·4 = ", cells.empty() ? "" : cells[1],
          "    communication: ", L.comm_since(m));
    L.check_ranks("Y_r", Y_r, {{reference[0]}, {reference[1]}});

    // 3. Concatenate the columns: all-gather along the last dim.
    L.step("Concatenate: all-gather the columns (gather_from_tp_region) gives XA on every rank.");
    m = L.mark();
    Tensor Y = gather_from_tp_region_forward(world, Y_r);  // (1, 2)
    cells = L.gather_fmt(Y);
    if (L.is_root()) table.add({"all-gather columns", cells[0], cells[1], L.comm_since(m)});
    L.say("  every rank now has ", cells.empty() ? "" : cells[0],
          "    communication: ", L.comm_since(m));
    L.check_ranks("concatenated Y", Y, {reference, reference});

    // 4. Row split: rank r keeps row r of A and element r of X; its product is a partial sum.
    L.step(
        "Row split: rank r holds row r of A and X_r = X[r]; it computes the partial sum X_r A_r.");
    m = L.mark();
    Tensor X_r = scatter_to_tp_region_forward(world, X);  // (1, 1): column r of X
    Tensor A_row = A.view(r, r + 1);                      // (1, 2): row r of A
    Tensor P_r(dev, Shape{1, 2});
    dev.gemm(false, false, 1.0f, X_r, A_row, 0.0f, P_r);
    cells = L.gather_fmt(P_r);
    if (L.is_root()) table.add({"row: P_r = X_r A_r", cells[0], cells[1], L.comm_since(m)});
    L.say("  rank 0: 1·[1, 2] = ", cells.empty() ? "" : cells[0],
          "    rank 1: 2·[3, 4] = ", cells.empty() ? "" : cells[1],
          "    (full shape, only part of the value)");
    std::vector<std::vector<float>> partial_ref;
    for (int i = 0; i < L.size(); ++i)
      partial_ref.push_back(host_matmul({x_host[i]}, host_block(a_host, 2, i, 1, 0, 2), 1, 1, 2));
    L.check_ranks("partial sum P_r", P_r, partial_ref);

    // 5. Sum the partial sums: all-reduce.
    L.step("Sum: all-reduce the partial sums (reduce_from_tp_region) gives XA on every rank.");
    m = L.mark();
    Tensor Z = reduce_from_tp_region_forward(world, P_r);  // in place: P_r now holds the sum
    cells = L.gather_fmt(Z);
    if (L.is_root()) table.add({"all-reduce partial sums", cells[0], cells[1], L.comm_since(m)});
    L.say("  [1, 2] + [6, 8] = ", cells.empty() ? "" : cells[0],
          "    communication: ", L.comm_since(m));
    L.check_ranks("summed Y", Z, {reference, reference});

    // 6. Summary.
    L.step("Summary: both splits give the single-device XA = " + lesson::fmt(reference) + ".");
    L.say(table.str());
    L.say(
        "Column split: no communication to compute, one all-gather to concatenate.\n"
        "Row split: each rank needs only its slice of X, and one all-reduce to sum.");
    SvgDiagram d(540, 60, "Y = XA over t = 2 ranks: who holds which block");
    double y = lesson::draw_rank_legend(d, 30, 40, L.size());
    y = lesson::draw_split(d, y, {lesson::SplitBy::Columns, L.size(), 2, 2, "A"},
                           "By columns of A: X whole, each rank some columns of Y");
    lesson::draw_split(d, y, {lesson::SplitBy::Rows, L.size(), 2, 2, "A"},
                       "By rows of A: each rank a slice of X and a partial sum of all of Y");
    lesson::write_picture(L, d, svg);
      },
      [](Options& o) { lesson::svg_option(o, "lesson_01_splits.svg", "both splits"); });
}
