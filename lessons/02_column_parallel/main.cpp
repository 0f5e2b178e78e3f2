// Lesson 02 — column-parallel linear, forward and backward, at t = 3.
//
// What it shows: the worked example with X = [1, 2] and W = [c_0 | c_1 | c_2] = [[1, 2, 3], [4, 5, 6]].
// Rank i holds column c_i (ranks and columns both numbered from 0).
//   forward   Y_i = X c_i                   9, 12, 15         no communication
//   backward  dY_i (from dY = [1, 2, 3])    1, 2, 3           no communication
//             dW_i = Xᵀ dY_i                [1, 2], [2, 4], [3, 6]   local: only rank i used c_i
//             dX part = dY_i c_iᵀ           [1, 4], [4, 10], [9, 18]
//             all-reduce (f's backward)     [14, 32] on every rank
// X was used by all three ranks in forward, so its gradient is the sum of three parts. Each column
// of W was used on one rank only, so its gradient is complete there.
//
// Megatron wraps the two communications of a TP block in a pair of operators:
//   f (entry, copy_to_tp_region):     forward identity,   backward all-reduce
//   g (exit,  reduce_from_tp_region): forward all-reduce, backward identity
// A column-parallel layer sits right after f; this lesson shows f's backward at work.
//
// What is new since lesson 01: backward, the f operator, and ColumnParallelLinear from
// lib/parallel/linear.h, checked against the same layer run on a single device (t = 1).
//
// Run:  make lessons && mpirun -np 3 build/bin/lesson_02_column_parallel [--step] [--svg P]
#include "core/host.h"
#include "lesson.h"
#include "parallel/linear.h"
#include "parallel/mappings.h"
#include "pictures.h"

using namespace tp;

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_02_column_parallel",
      "Lesson 02: column-parallel linear, forward and backward", {3},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn last, its path checked now

    // 1. The numbers, and the single-device reference: the same layer on one rank (t = 1).
    L.step("The numbers, and the answer from one device.");
    const int64_t in = 2, out = 3;
    const std::vector<float> x_host = {1, 2}, w_host = {1, 2, 3, 4, 5, 6}, dy_host = {1, 2, 3};
    Tensor X = Tensor::from_host(dev, Shape{1, in}, x_host);
    SerialCommunicator solo;
    ColumnParallelLinear single(dev, solo, "W", in, out, Bias::Without, ColumnOutput::Split);
    single.load_global(w_host);
    const std::vector<float> y_ref = single.forward(X).to_host();
    const std::vector<float> dx_ref =
        single.backward(Tensor::from_host(dev, Shape{1, out}, dy_host)).to_host();
    const std::vector<float> dw_ref = single.dweight.to_host();  // (2, 3)
    L.say("  X = [1, 2],  W = [[1, 2, 3], [4, 5, 6]],  dY = [1, 2, 3]");
    L.say("  one device: Y = XW = ", lesson::fmt(y_ref), ",  dX = dY Wᵀ = ", lesson::fmt(dx_ref),
          ",  dW = Xᵀ dY = ", lesson::fmt(dw_ref, out));
    L.check("single-device Y", y_ref, host_matmul(x_host, w_host, 1, in, out));
    L.check("single-device dX", dx_ref,
            host_matmul(dy_host, host_transpose(w_host, in, out), 1, out, in));

    lesson::Table table({"step", "rank 0", "rank 1", "rank 2", "communication"});
    auto column = [&](int i) { return host_block(w_host, out, 0, in, i, 1); };  // c_i, (2, 1)

    // 2. Split W by columns: rank r keeps c_r (no communication: every rank can read its own).
    L.step("Split W by columns: rank r holds c_r = W[:, r].");
    size_t m = L.mark();
    Tensor W = Tensor::from_host(dev, Shape{in, out}, w_host);
    Tensor c_r = scatter_to_tp_region_forward(world, W);  // (2, 1)
    L.report(table, "holds c_r", c_r, m);
    L.check_ranks("c_r", c_r, lesson::per_rank(t, column));

    // 3. Forward: Y_r = X c_r. X entered through f, whose forward is the identity.
    L.step("Forward: Y_r = X c_r. X entered through f (forward: identity), so nothing moves.");
    m = L.mark();
    Tensor X_in = copy_to_tp_region_forward(world, X);
    Tensor Y_r(dev, Shape{1, 1});
    dev.gemm(false, false, 1.0f, X_in, c_r, 0.0f, Y_r);
    L.report(table, "forward: Y_i = X c_i", Y_r, m);
    L.check_ranks("Y_r", Y_r,
                  lesson::per_rank(t, [&](int i) { return std::vector<float>{y_ref[i]}; }));

    // 4. Backward receives dY_r: the gradient of rank r's output column, already local.
    L.step("Backward receives dY_r, the gradient of this rank's output column.");
    m = L.mark();
    Tensor dY = Tensor::from_host(dev, Shape{1, out}, dy_host);
    Tensor dY_r = scatter_to_tp_region_forward(world, dY);  // (1, 1)
    L.report(table, "backward receives dY_i", dY_r, m);
    L.check_ranks("dY_r", dY_r,
                  lesson::per_rank(t, [&](int i) { return std::vector<float>{dy_host[i]}; }));

    // 5. dW_r = Xᵀ dY_r: complete on this rank, because only this rank used c_r.
    L.step("dW_r = Xᵀ dY_r: complete here, because only this rank used column c_r.");
    m = L.mark();
    Tensor dW_r = Tensor::zeros(dev, Shape{in, 1});
    dev.gemm(true, false, 1.0f, X_in, dY_r, 0.0f, dW_r);
    L.report(table, "dW_i = Xᵀ dY_i", dW_r, m);
    L.check_ranks("dW_r", dW_r,
                  lesson::per_rank(t, [&](int i) { return host_block(dw_ref, out, 0, in, i, 1); }));

    // 6. dY_r c_rᵀ: this rank's part of dX. Only a part: X fed all three columns.
    L.step("dY_r c_rᵀ: this rank's part of dX. Only a part, because X fed all " +
           std::to_string(t) + " columns.");
    m = L.mark();
    Tensor dX_part(dev, Shape{1, in});
    dev.gemm(false, true, 1.0f, dY_r, c_r, 0.0f, dX_part);
    L.report(table, "dX part = dY_i c_iᵀ", dX_part, m);
    L.check_ranks("dX part", dX_part, lesson::per_rank(t, [&](int i) {
                    return host_matmul({dy_host[i]}, host_transpose(column(i), in, 1), 1, 1, in);
                  }));

    // 7. f's backward: all-reduce the parts. Every rank gets the whole dX.
    L.step("f's backward: all-reduce the parts; every rank gets the whole dX.");
    m = L.mark();
    Tensor dX = copy_to_tp_region_backward(world, dX_part);
    L.report(table, "all-reduce (f backward)", dX, m);
    L.check_ranks("dX", dX, lesson::per_rank(t, [&](int) { return dx_ref; }));

    // 8. The same through the library layer: ColumnParallelLinear does steps 2-7.
    L.step("The same with ColumnParallelLinear (lib/parallel/linear.h), compared with one device.");
    m = L.mark();
    ColumnParallelLinear layer(dev, world, "W", in, out, Bias::Without, ColumnOutput::Split);
    layer.load_global(w_host);
    Tensor y_layer = layer.forward(X);
    Tensor dx_layer = layer.backward(dY_r);
    L.say("  forward + backward: ", L.comm_since(m));
    L.check_ranks("layer Y_r", y_layer,
                  lesson::per_rank(t, [&](int i) { return std::vector<float>{y_ref[i]}; }));
    L.check_ranks("layer dW_r", layer.dweight,
                  lesson::per_rank(t, [&](int i) { return host_block(dw_ref, out, 0, in, i, 1); }));
    L.check_ranks("layer dX", dx_layer, lesson::per_rank(t, [&](int) { return dx_ref; }));
    // With gather_output the layer hands back the whole Y (an all-gather forward, a split backward).
    ColumnParallelLinear gathered(dev, world, "W", in, out, Bias::Without, ColumnOutput::Gathered);
    gathered.load_global(w_host);
    L.check_ranks("gathered Y", gathered.forward(X),
                  lesson::per_rank(t, [&](int) { return y_ref; }));

    // 9. [A4] §2.1's recipe, tried: column split, then an all-reduce (sum) of the outputs.
    L.step("[A4] §2.1 says: split W by columns, then add the outputs with an all-reduce. Tried:");
    m = L.mark();
    Tensor summed(dev, Shape{1, 1});
    summed.copy_from(Y_r);
    world.all_reduce(summed);
    lesson::Table tried = L.rank_table();
    L.report(tried, "all-reduce of Y_r", summed, m);
    float y_sum = 0;
    for (float v : y_ref) y_sum += v;
    L.check_fact("[A4]'s all-reduce of the column outputs = Y_0 + … + Y_{t−1}", summed.to_host(),
                 {y_sum});
    L.say("  ", lesson::fmt(y_sum), " = ", lesson::fmt(y_ref[0]), " + ", lesson::fmt(y_ref[1]),
          " + ", lesson::fmt(y_ref[2]), ": one number, where XW = ", lesson::fmt(y_ref), " has ",
          out, ".");
    L.say(
        "  The Y_i are different columns of Y: they are put side by side (an all-gather, when the\n"
        "  whole Y is needed), never added. Adding is the row-parallel pattern (lesson 03), where "
        "X\n"
        "  is split too and every rank's product is a full-shape partial sum. [A4]'s\n"
        "  XW = X(W_1 + … + W_n) treats W as the sum of its column blocks; it is their\n"
        "  concatenation. The correct statement: a column-parallel layer needs no collective in\n"
        "  forward; its one all-reduce is of dX, in backward (step 7).");

    // 10. Summary.
    L.step("Summary.");
    L.say(table.str());
    L.say(
        "f and g, the two operators around a TP block:\n"
        "  f (copy_to_tp_region):     forward identity,   backward all-reduce  (entry; X feeds "
        "every rank)\n"
        "  g (reduce_from_tp_region): forward all-reduce, backward identity    (exit; sums partial "
        "outputs)\n"
        "A column-parallel layer communicates only in backward, through f: one all-reduce of dX.");
    lesson::write_split_picture(
        L, svg, 460, "Column-parallel Y = XW over t = " + std::to_string(t) + " ranks",
        {lesson::SplitBy::Columns, t, 2, 3, "W", false},
        "Forward: rank r holds column W_r = c_r and computes Y_r = X c_r",
        {"No communication forward: the Y_r stay split (a row-parallel layer takes them).",
         "Backward: dW_r = Xᵀ dY_r is complete on rank r, but X fed every column:",
         "dX = Σ_r dY_r c_rᵀ, so f all-reduces the parts of dX."});
      },
      [](Options& o) { lesson::svg_option(o, "lesson_02_column_split.svg", "the split"); });
}
