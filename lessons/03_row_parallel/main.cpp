// Lesson 03 — row-parallel linear, forward and backward, and where the bias goes.
//
// What it shows: Y = XW + b with X = [1, 2, 3, 4], W (4 × 2) = [[1, 2], [3, 4], [5, 6], [7, 8]],
// b = [10, 20], split over t ranks by the input dimension: rank r holds rows W_r (4/t × 2) and the
// matching slice X_r of the input.
//
//     [X_0, …, X_{t−1}] [W_0; …; W_{t−1}] = Σ_r X_r W_r
//
//   forward   P_r = X_r W_r: a full-shape partial sum         no communication
//             g (reduce_from_tp_region): all-reduce Σ_r P_r   one all-reduce
//             + b, once, after the all-reduce
//   backward  g's backward is the identity: every rank has the whole dY
//             dX_r = dY W_rᵀ, dW_r = X_rᵀ dY, db = Σ dY      no communication
// The pitfall: adding b on every rank before the all-reduce adds it t times (XW + t·b).
//
// What is new since lesson 02: the g operator, a layer that communicates in forward instead of
// backward, and a replicated parameter (the bias) next to a split one.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_03_row_parallel [--step] [--svg P]
//       (also -np 1 or 4)
#include "core/host.h"
#include "lesson.h"
#include "parallel/linear.h"
#include "parallel/mappings.h"
#include "pictures.h"

using namespace tp;

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_03_row_parallel",
      "Lesson 03: row-parallel linear, forward and backward, and the bias", {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int r = L.rank(), t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn last, its path checked now

    // 1. The numbers, and the single-device reference: the same layer on one rank (t = 1).
    L.step("The numbers, and the answer from one device.");
    const int64_t in = 4, out = 2, k = in / t;  // k: input rows per rank
    const std::vector<float> x_host = {1, 2, 3, 4}, w_host = {1, 2, 3, 4, 5, 6, 7, 8};
    const std::vector<float> b_host = {10, 20}, dy_host = {2, 1};
    Tensor X = Tensor::from_host(dev, Shape{1, in}, x_host);
    Tensor dY = Tensor::from_host(dev, Shape{1, out}, dy_host);
    SerialCommunicator solo;
    RowParallelLinear single(dev, solo, "W", in, out, Bias::With, RowInput::Split);
    single.load_global(w_host, b_host);
    const std::vector<float> y_ref = single.forward(X).to_host();
    const std::vector<float> dx_ref = single.backward(dY).to_host();
    const std::vector<float> dw_ref = single.dweight.to_host(), db_ref = single.dbias.to_host();
    const std::vector<float> xw = host_matmul(x_host, w_host, 1, in, out);
    L.say("  X = [1, 2, 3, 4],  W = [[1, 2], [3, 4], [5, 6], [7, 8]],  b = [10, 20],  dY = [2, 1]");
    L.say("  one device: Y = XW + b = ", lesson::fmt(y_ref),
          ",  dX = dY Wᵀ = ", lesson::fmt(dx_ref), ",  dW = Xᵀ dY = ", lesson::fmt(dw_ref, out),
          ",  db = ", lesson::fmt(db_ref));
    L.check("single-device Y", y_ref, {xw[0] + b_host[0], xw[1] + b_host[1]});

    lesson::Table table = L.rank_table();

    // 2. Split: rank r keeps rows [r·k, (r+1)·k) of W and the same slice of X.
    L.step("Split W by rows and X by columns: rank r holds W_r (" + std::to_string(k) +
           "x2) and X_r.");
    size_t m = L.mark();
    Tensor X_r = scatter_to_tp_region_forward(world, X);  // (1, k)
    Tensor W_r = Tensor::from_host(dev, Shape{in, out}, w_host).view(r * k, (r + 1) * k);
    L.report(table, "holds X_r", X_r, m);
    L.check_ranks("X_r", X_r, lesson::per_rank(t, [&](int i) {
                    return host_block(x_host, in, 0, 1, i * k, k);
                  }));

    // 3. Partial sums: full shape, part of the value.
    L.step("Forward: P_r = X_r W_r, a partial sum of the full shape (no communication).");
    m = L.mark();
    Tensor P_r(dev, Shape{1, out});
    dev.gemm(false, false, 1.0f, X_r, W_r, 0.0f, P_r);
    const Tensor P_keep = P_r.clone();  // for step 5; the all-reduce below works in place
    L.report(table, "forward: P_i = X_i W_i", P_r, m);
    auto partial = [&](int i) {
      return host_matmul(host_block(x_host, in, 0, 1, i * k, k),
                         host_block(w_host, out, i * k, k, 0, out), 1, k, out);
    };
    L.check_ranks("P_r", P_r, lesson::per_rank(t, partial));

    // 4. g: all-reduce the partial sums, then add the bias once.
    L.step("g (reduce_from_tp_region): all-reduce the partial sums, then add b once.");
    m = L.mark();
    Tensor Y = reduce_from_tp_region_forward(world, P_r);
    L.report(table, "all-reduce (g forward)", Y, m);
    L.check_ranks("Σ P_r", Y, lesson::per_rank(t, [&](int) { return xw; }));
    m = L.mark();
    dev.add_bias(Y, Tensor::from_host(dev, Shape{out}, b_host));
    L.report(table, "+ b after the all-reduce", Y, m);
    L.check_ranks("Y", Y, lesson::per_rank(t, [&](int) { return y_ref; }));

    // 5. The pitfall: bias added on every rank before the all-reduce.
    L.step("The pitfall: add b on every rank before the all-reduce, and b is added t = " +
           std::to_string(t) + " times.");
    m = L.mark();
    Tensor wrong = P_keep.clone();
    dev.add_bias(wrong, Tensor::from_host(dev, Shape{out}, b_host));
    reduce_from_tp_region_forward(world, wrong);
    L.report(table, "wrong: all-reduce(P_i + b)", wrong, m);
    const std::vector<float> xw_tb = {xw[0] + t * b_host[0], xw[1] + t * b_host[1]};
    L.say("  XW + t·b = ", lesson::fmt(xw_tb), (t > 1 ? ", not " : ", which at t = 1 equals "),
          lesson::fmt(y_ref));
    L.check_ranks("all-reduce(P_r + b) = XW + t·b", wrong,
                  lesson::per_rank(t, [&](int) { return xw_tb; }));

    // 6. Backward: g's backward is the identity, so every rank has the whole dY and nothing moves.
    L.step(
        "Backward: g's backward is the identity; every rank has all of dY, so every gradient is "
        "local.");
    m = L.mark();
    const size_t m_backward = m;
    Tensor dY_in = reduce_from_tp_region_backward(world, dY);
    Tensor dX_r(dev, Shape{1, k});
    dev.gemm(false, true, 1.0f, dY_in, W_r, 0.0f, dX_r);
    L.report(table, "dX_i = dY W_iᵀ", dX_r, m);
    L.check_ranks("dX_r", dX_r, lesson::per_rank(t, [&](int i) {
                    return host_block(dx_ref, in, 0, 1, i * k, k);
                  }));
    m = L.mark();
    Tensor dW_r(dev, Shape{k, out});
    dev.gemm(true, false, 1.0f, X_r, dY_in, 0.0f, dW_r);
    L.report(table, "dW_i = X_iᵀ dY", dW_r, m);
    L.check_ranks("dW_r", dW_r, lesson::per_rank(t, [&](int i) {
                    return host_block(dw_ref, out, i * k, k, 0, out);
                  }));
    m = L.mark();
    Tensor db = Tensor::zeros(dev, Shape{out});
    dev.add_bias_backward(db, dY_in);
    L.report(table, "db = Σ dY (same everywhere)", db, m);
    L.check_ranks("db", db, lesson::per_rank(t, [&](int) { return db_ref; }));
    L.check_fact("collectives in backward", {static_cast<float>(L.mark() - m_backward)}, {0});

    // 7. The library layer, both ways of receiving the input.
    L.step("The same with RowParallelLinear (lib/parallel/linear.h), compared with one device.");
    m = L.mark();
    RowParallelLinear layer(dev, world, "W", in, out, Bias::With, RowInput::Split);
    layer.load_global(w_host, b_host);
    Tensor y_layer = layer.forward(X_r);
    Tensor dx_layer = layer.backward(dY);
    L.say("  input already split:  forward + backward: ", L.comm_since(m));
    L.check_ranks("layer Y", y_layer, lesson::per_rank(t, [&](int) { return y_ref; }));
    L.check_ranks("layer dX_r", dx_layer, lesson::per_rank(t, [&](int i) {
                    return host_block(dx_ref, in, 0, 1, i * k, k);
                  }));
    L.check_ranks("layer dW_r", layer.dweight, lesson::per_rank(t, [&](int i) {
                    return host_block(dw_ref, out, i * k, k, 0, out);
                  }));
    L.check_ranks("layer db", layer.dbias, lesson::per_rank(t, [&](int) { return db_ref; }));
    m = L.mark();
    RowParallelLinear whole(dev, world, "W", in, out, Bias::With, RowInput::Whole);
    whole.load_global(w_host, b_host);
    Tensor y_whole = whole.forward(X);
    Tensor dx_whole = whole.backward(dY);
    L.say("  input whole (split on entry, dX all-gathered):  forward + backward: ",
          L.comm_since(m));
    L.check_ranks("layer Y (whole input)", y_whole,
                  lesson::per_rank(t, [&](int) { return y_ref; }));
    L.check_ranks("layer dX (whole input)", dx_whole,
                  lesson::per_rank(t, [&](int) { return dx_ref; }));

    // 8. Summary.
    L.step("Summary.");
    L.say(table.str());
    L.say(
        "A row-parallel layer communicates in forward (g: one all-reduce of the output) and not "
        "in\n"
        "backward. The bias is not split: it is added once, after the all-reduce, and its "
        "gradient\n"
        "db = Σ dY comes out the same on every rank.\n"
        "\n"
        "Where the sources go wrong: [A4] §2.1 puts this all-reduce after a *column* split of W\n"
        "with X whole; the sum of partial products belongs to the row split shown here, with X\n"
        "split along the same inner dimension (the column split concatenates, lesson 02). Its\n"
        "§3.1 writes this layer's input gradient as dY Wᵀ: rank r computes only its slice\n"
        "dX_r = dY W_rᵀ. [A2] §4.1 says the backward all-reduces dX as well: it issues no\n"
        "collective at all (step 6, checked).");
    lesson::write_split_picture(
        L, svg, 560, "Row-parallel Y = XW + b over t = " + std::to_string(t) + " ranks",
        {lesson::SplitBy::Rows, t, 4, 2, "W"},
        "Forward: rank r holds rows W_r and X_r; g all-reduces the partial sums",
        {"Then + b once, on the whole Y (b on every rank before the sum adds it t times).",
         "Backward: g passes the whole dY to every rank; dX_r = dY W_rᵀ and",
         "dW_r = X_rᵀ dY need no collective."});
      },
      [](Options& o) { lesson::svg_option(o, "lesson_03_row_split.svg", "the split"); });
}
