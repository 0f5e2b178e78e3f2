// Lesson 08 — sequence parallelism: the activations that TP leaves whole, split along the sequence.
//
// What it shows:
//   1. all-reduce = reduce-scatter + all-gather. On a [s, h] = [4, 3] tensor of partial sums, the
//      two halves give the same numbers as one all-reduce and send the same bytes (under the ring
//      model, (t − 1)/t of the buffer each, 2(t − 1)/t together). So SP can replace g's all-reduce
//      by a reduce-scatter (each rank keeps s/t tokens of the sum) and f's identity by an
//      all-gather (the next column-parallel layer gets the whole sequence back): the same bytes at
//      each region boundary in forward (backward adds more: lesson 08c).
//   2. Between those two, LayerNorm, dropout and the residual add work token by token, so each
//      rank runs them on its own s/t tokens. Gathered, the result is the LayerNorm of all tokens;
//      but the norm's weight gradient is now a partial sum over this rank's tokens and must be
//      summed over the ranks.
//   3. The picture (--svg): one block's regions under SP, forward and backward — where the
//      sequence is split ([s/t, h] per rank), where it is whole and the hidden dimension split
//      ([s, h/t]), the all-gather entering and the reduce-scatter leaving each TP region, and what
//      each does in backward.
// What one block then keeps for backward is lesson 08b; the gradient audit and what SP sends over
// a whole training step, lesson 08c.
//
// What is new since lesson 07: the sequence-dimension region ops (scatter / gather /
// reduce_scatter_to_sp_region in lib/parallel/mappings.h) and Norm's sequence_parallel mode.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_08_sequence_parallel [--step] [--svg P]
//       (also -np 1, 4)
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/host.h"
#include "lesson.h"
#include "model/layers.h"
#include "parallel/mappings.h"
#include "pictures.h"

using namespace tp;

namespace {

// One element of the SP block's picture: a token-wise layer on s/t tokens per rank (rows split),
// a TP layer on all tokens with the hidden dimension split (columns), or a region boundary.
enum class Part { Tokens, Hidden, Gather, Scatter };

struct Element {
  std::string label, shape;  // shape: what it outputs, per rank
  Part part;
};

// A box of width w: its label at the top and, below it, a band per rank: horizontal stripes
// (rows: tokens) for Tokens, vertical stripes (columns: features) for Hidden.
void draw_split_box(SvgDiagram& d, double x, double y, double w, double h, const Element& e,
                    int t) {
  d.box(x, y, w, h, "white");
  d.text(x + w / 2, y + 14, e.label, "middle", 11);
  const double top = y + 19, band = h - 19;
  for (int r = 0; r < t; ++r) {
    if (e.part == Part::Tokens)
      d.box(x, top + r * band / t, w, band / t, lesson::rank_color(r));
    else
      d.box(x + r * w / t, top, w / t, band, lesson::rank_color(r));
  }
}

// One pre-norm block under TP + SP: its two halves, each a row from left to right; the TP region
// of each (all-gather … reduce-scatter) framed; under each boundary what it does in forward and
// in backward; above each part the shape it outputs on one rank.
SvgDiagram draw_sp_block(int t) {
  const double h = 46, gap = 24, left = 30;
  SvgDiagram d(880, 60,
               "One block under TP + SP at t = " + std::to_string(t) +
                   ": where the sequence is split, where it is whole");
  const std::vector<std::vector<Element>> rows = {{{"ln_1", "[s/t, h]", Part::Tokens},
                                                   {"all-gather", "[s, h]", Part::Gather},
                                                   {"QKV (column)", "[s, 3h/t]", Part::Hidden},
                                                   {"attention", "[s, h/t]", Part::Hidden},
                                                   {"proj (row)", "[s, h] partial", Part::Hidden},
                                                   {"reduce-scatter", "[s/t, h]", Part::Scatter},
                                                   {"dropout, +", "[s/t, h]", Part::Tokens}},
                                                  {{"ln_2", "[s/t, h]", Part::Tokens},
                                                   {"all-gather", "[s, h]", Part::Gather},
                                                   {"fc1 (column)", "[s, 4h/t]", Part::Hidden},
                                                   {"GeLU", "[s, 4h/t]", Part::Hidden},
                                                   {"fc2 (row)", "[s, h] partial", Part::Hidden},
                                                   {"reduce-scatter", "[s/t, h]", Part::Scatter},
                                                   {"dropout, +", "[s/t, h]", Part::Tokens}}};
  double y = 104;
  for (size_t i = 0; i < rows.size(); ++i) {
    d.text(
        left, y - 62,
        i == 0 ? "Attention half: x + dropout(attn(ln_1(x)))" : "MLP half: + dropout(mlp(ln_2(x)))",
        "start", 13);
    double x = left, region_from = 0;
    for (size_t j = 0; j < rows[i].size(); ++j) {
      const Element& e = rows[i][j];
      const bool boundary = e.part == Part::Gather || e.part == Part::Scatter;
      const double w = boundary ? 96 : e.part == Part::Tokens ? 76 : 92;
      if (j > 0) d.arrow(x - gap + 2, y + h / 2, x - 2, y + h / 2);
      if (boundary)
        d.box(x, y, w, h, "#fff3b0", e.label);
      else
        draw_split_box(d, x, y, w, h, e, t);
      d.text(x + w / 2, y - 6, e.shape, "middle", 10, "#1f4e79");
      if (e.part == Part::Gather) {
        region_from = x - 8;
        d.text(x + w / 2, y + h + 14, "fwd: all-gather", "middle", 10, "#c0392b");
        d.text(x + w / 2, y + h + 27, "bwd: reduce-scatter dX", "middle", 10, "#c0392b");
        d.text(x + w / 2, y + h + 40, "bwd: all-gather again", "middle", 10, "#c0392b");
        d.text(x + w / 2, y + h + 53, "(kept [s/t, h], for dW)", "middle", 10, "#555");
      }
      if (e.part == Part::Scatter) {
        // The TP region: from the all-gather to the reduce-scatter, the whole sequence.
        const double x0 = region_from, x1 = x + w + 8;
        d.line(x0, y - 22, x1, y - 22, "#888", true);
        d.line(x0, y + h + 4, x1, y + h + 4, "#888", true);
        d.line(x0, y - 22, x0, y + h + 4, "#888", true);
        d.line(x1, y - 22, x1, y + h + 4, "#888", true);
        d.text((x0 + x1) / 2, y - 27, "TP region: all s tokens, features split over the ranks",
               "middle", 11, "#555");
        d.text(x + w / 2, y + h + 14, "fwd: reduce-scatter", "middle", 10, "#c0392b");
        d.text(x + w / 2, y + h + 27, "bwd: all-gather dY", "middle", 10, "#c0392b");
      }
      x += w + gap;
    }
    d.text(left + 38, y - 27, "SP: s/t tokens", "middle", 11, "#555");
    d.text(x - gap - 38, y - 27, "SP: s/t tokens", "middle", 11, "#555");
    y += h + 150;
  }
  const double ly = y - 80;
  lesson::draw_rank_legend(d, left, ly, t);
  lesson::draw_notes(
      d, ly + 32,
      {"s: the tokens of the batch (s·b). Horizontal stripes: rank r holds tokens [r·s/t, "
       "(r+1)·s/t) "
       "of [s, h];",
       "vertical stripes: every rank holds all s tokens and h/t of the features (its heads, its "
       "columns).",
       "Forward: the all-gather and the reduce-scatter are one all-reduce cut in two (step 1): "
       "the same bytes.",
       "Backward runs right to left: the reduce-scatter's backward all-gathers dY, the "
       "all-gather's",
       "reduce-scatters dX, and the region gathers its kept input shard again for dW = Xᵀ dY.",
       "The norms see s/t tokens: their weight gradients are partial sums, added once per step "
       "(step 2)."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_08_sequence_parallel",
      "Lesson 08: sequence parallelism, the token-wise work split along the sequence", {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int r = L.rank(), t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn in step 3, its path checked now

    lesson::Table table = L.rank_table();
    lesson::Table norms = L.rank_table();

    // 1. all-reduce = reduce-scatter + all-gather.
    L.step(
        "all-reduce = reduce-scatter + all-gather, on an [s, h] = [4, 3] tensor of partial sums.");
    const int64_t s = 4, h = 3, mine = s / t;  // mine: the rows (tokens) each rank keeps
    auto partial = [&](int i) {                // rank i's partial sum: (i + 1) · [1, 2, …, 12]
      std::vector<float> v(s * h);
      for (int64_t k = 0; k < s * h; ++k) v[k] = static_cast<float>((i + 1) * (k + 1));
      return v;
    };
    std::vector<float> total(s * h, 0.0f);  // Σ_i partial(i), on the host
    for (int i = 0; i < t; ++i)
      for (int64_t k = 0; k < s * h; ++k) total[k] += partial(i)[k];
    L.say(
        "  rank r holds P_r = (r + 1) · [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]] (a "
        "row-parallel\n"
        "  layer's partial sums: rows are tokens, columns hidden features); the sum is ",
        t * (t + 1) / 2, " · [[1, 2, 3], …]");
    Tensor P = Tensor::from_host(dev, Shape{s, h}, partial(r));
    size_t m = L.mark();
    L.report(table, "holds P_r", P, m);
    L.check_ranks("P_r", P, lesson::per_rank(t, partial));

    m = L.mark();
    Tensor all_reduced = reduce_from_tp_region_forward(world, P.clone());
    const double ar_bytes = world.ledger().wire_bytes_since(m);
    L.report(table, "all-reduce: Σ P_r", all_reduced, m);
    L.check_ranks("all-reduce", all_reduced, lesson::per_rank(t, [&](int) { return total; }));

    m = L.mark();
    Tensor scattered = reduce_scatter_to_sp_region_forward(world, P);
    const double rs_bytes = world.ledger().wire_bytes_since(m);
    L.report(table, "reduce-scatter: my rows of Σ", scattered, m);
    L.check_ranks("reduce-scatter", scattered, lesson::per_rank(t, [&](int i) {
                    return host_block(total, h, i * mine, mine, 0, h);
                  }));

    m = L.mark();
    Tensor regathered = gather_from_sp_region_forward(world, scattered);
    const double ag_bytes = world.ledger().wire_bytes_since(m);
    L.report(table, "all-gather of those rows", regathered, m);
    L.check_ranks("reduce-scatter then all-gather", regathered,
                  lesson::per_rank(t, [&](int) { return total; }));

    const double buffer = 4.0 * s * h;
    L.say("  bytes each rank sends (ring model, from the ledger): all-reduce ", ar_bytes,
          " B = reduce-scatter ", rs_bytes, " B + all-gather ", ag_bytes, " B;  2(t − 1)/t · ",
          buffer, " B = ", 2.0 * (t - 1) / t * buffer, " B");
    if (t == 1) L.say("  (t = 1: the region ops return their argument and nothing moves.)");
    L.check_fact("reduce-scatter + all-gather bytes = all-reduce bytes",
                 {static_cast<float>(rs_bytes + ag_bytes)}, {static_cast<float>(ar_bytes)});
    L.check_fact("all-reduce bytes = 2(t − 1)/t · 4sh", {static_cast<float>(ar_bytes)},
                 {static_cast<float>(2.0 * (t - 1) / t * buffer)});
    L.say(
        "  So SP replaces g's all-reduce by a reduce-scatter and f's identity by an all-gather: "
        "same\n"
        "  bytes at the region's boundary, and in between every rank holds only s/t tokens (in\n"
        "  backward SP adds a re-gather of each region's input: lesson 08c).\n"
        "  [A2] §4.3 says SP makes the communication smaller (each rank reduces only its own\n"
        "  segment): the bytes are the same, as above; what SP saves is activation memory. This\n"
        "  all-gather, in front of the q, k, v projection (and of fc1), is where attention meets "
        "an\n"
        "  all-gather ([A4] §4.2), and only under SP. [A1] §2 calls it an all-gather of K\n"
        "  and V: what is gathered is the layer's input, from which each rank then computes q, k\n"
        "  and v of the whole sequence for its own heads.");

    // 2. LayerNorm on my tokens only.
    L.step(
        "LayerNorm on s/t tokens: each rank normalises its own rows; the weight gradient is a "
        "partial sum.");
    const int64_t n_tok = 4, hid = 4, rows = n_tok / t;
    const float eps = 1e-5f;
    const std::vector<float> x_host = {1, 2, 3, 4, 2, 4, 6, 8, 0, 0, 4, 4, 3, 1, 4, 1};
    std::vector<float> dy_host(n_tok * hid);  // dY[i, j] = (i + 1)(j + 1)
    for (int64_t i = 0; i < n_tok; ++i)
      for (int64_t j = 0; j < hid; ++j)
        dy_host[i * hid + j] = static_cast<float>((i + 1) * (j + 1));
    L.say("  X = ", lesson::fmt(x_host, hid), " (4 tokens, h = 4),  dY[i, j] = (i + 1)(j + 1)");
    // One device: the whole X through a Norm (the device's layernorm kernels), weight 1, bias 0.
    Norm whole(dev, "ln", hid, NormKind::LayerNorm, eps);
    Tensor X = Tensor::from_host(dev, Shape{n_tok, hid}, x_host);
    Tensor dY = Tensor::from_host(dev, Shape{n_tok, hid}, dy_host);
    const std::vector<float> y_ref = whole.forward(X).to_host();
    const std::vector<float> dx_ref = whole.backward(dY).to_host();
    const std::vector<float> dw_ref = whole.dweight.to_host(), db_ref = whole.dbias.to_host();
    L.say("  one device: LayerNorm(X) = ", lesson::fmt(y_ref, hid));
    L.say("              dweight = Σ_tokens dY ⊙ x̂ = ", lesson::fmt(dw_ref),
          ",  dbias = Σ_tokens dY = ", lesson::fmt(db_ref));
    std::vector<float> y_host(n_tok * hid), dw_host(hid, 0.0f),
        db_host(hid, 0.0f);  // in double, on the host
    for (int64_t i = 0; i < n_tok; ++i) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < hid; ++j) mu += x_host[i * hid + j] / double(hid);
      for (int64_t j = 0; j < hid; ++j)
        var += (x_host[i * hid + j] - mu) * (x_host[i * hid + j] - mu) / double(hid);
      for (int64_t j = 0; j < hid; ++j) {
        const double xhat = (x_host[i * hid + j] - mu) / std::sqrt(var + eps);
        y_host[i * hid + j] = static_cast<float>(xhat);
        dw_host[j] += static_cast<float>(dy_host[i * hid + j] * xhat);
        db_host[j] += dy_host[i * hid + j];
      }
    }
    L.check("single-device LayerNorm", y_ref, y_host, 1e-6);
    L.check("single-device dweight = Σ dY ⊙ x̂", dw_ref, dw_host, 1e-5);
    L.check("single-device dbias = Σ dY", db_ref, db_host);

    L.say("  tokens per rank (scatter_to_sp_region: a view of my rows, nothing moves):");
    m = L.mark();
    Tensor X_r = scatter_to_sp_region_forward(world, X);  // my rows: a view, nothing moves
    Tensor count = Tensor::from_host(dev, Shape{1}, {static_cast<float>(X_r.rows())});
    L.report(norms, "tokens held (of 4)", count, m);
    L.check_fact_ranks("tokens per rank = s/t", count,
                       lesson::per_rank(t, [&](int) { return std::vector<float>{float(rows)}; }));

    Norm local(dev, "ln", hid, NormKind::LayerNorm, eps, /*sequence_parallel=*/true);
    L.say(
        "  LayerNorm of my tokens only (each token's statistics are its own; one row per token,\n"
        "  rank r's rows are tokens [r·s/t, (r+1)·s/t)):");
    m = L.mark();
    Tensor Y_r = local.forward(X_r);
    L.report(norms, "LayerNorm of my tokens", Y_r, m);
    L.check_ranks("LayerNorm of my tokens", Y_r, lesson::per_rank(t, [&](int i) {
                    return host_block(y_ref, hid, i * rows, rows, 0, hid);
                  }));
    m = L.mark();
    Tensor Y = gather_from_sp_region_forward(world, Y_r);
    L.say("  gathered (the all-gather that enters the next column-parallel layer): ",
          L.comm_since(m));
    L.check_ranks("gathered LayerNorm = LayerNorm(X)", Y,
                  lesson::per_rank(t, [&](int) { return y_ref; }));

    L.say("  backward on my tokens: dX of my rows, and dbias = Σ dY over my rows only:");
    m = L.mark();
    Tensor dY_r = scatter_to_sp_region_forward(world, dY);
    Tensor dX_r = local.backward(dY_r);
    L.check_ranks("dX of my tokens", dX_r, lesson::per_rank(t, [&](int i) {
                    return host_block(dx_ref, hid, i * rows, rows, 0, hid);
                  }));
    L.report(norms, "dbias: Σ dY over my tokens", local.dbias, m);
    auto partial_sums =
        [&](int i, bool weight) {  // Σ over rank i's rows of dY (⊙ x̂ for the weight)
      std::vector<float> v(hid, 0.0f);
      for (int64_t row = i * rows; row < (i + 1) * rows; ++row)
        for (int64_t j = 0; j < hid; ++j)
          v[j] += dy_host[row * hid + j] * (weight ? y_ref[row * hid + j] : 1.0f);
      return v;
    };
    L.check_ranks("partial dbias", local.dbias,
                  lesson::per_rank(t, [&](int i) { return partial_sums(i, false); }));
    L.check_ranks("partial dweight", local.dweight,
                  lesson::per_rank(t, [&](int i) { return partial_sums(i, true); }), 1e-5);
    if (t > 1)
      L.say(
          "  Each rank's dbias covers only its own tokens: a partial sum, not the gradient of the "
          "layer.");
    else
      L.say(
          "  At t = 1 the one rank's tokens are all the tokens: its sum is already the whole "
          "gradient.");
    L.say("  summed over the ranks (Gpt::finish_gradients() does this for every such parameter):");
    m = L.mark();
    reduce_from_tp_region_forward(world, local.dweight);  // in place
    reduce_from_tp_region_forward(world, local.dbias);
    L.report(norms, "dweight, dbias: all-reduce", local.dbias, m);
    L.check_ranks("dweight summed over ranks", local.dweight,
                  lesson::per_rank(t, [&](int) { return dw_ref; }), 1e-5);
    L.check_ranks("dbias summed over ranks", local.dbias,
                  lesson::per_rank(t, [&](int) { return db_ref; }));

    // 3. The picture: one block's regions under SP.
    L.step("One block under TP + SP, forward and backward: the picture.");
    lesson::write_picture(L, draw_sp_block(t), svg);

    // 4. Summary.
    L.step("Summary.");
    L.say(table.str());
    L.say(norms.str());
    L.say(
        "Sequence parallelism splits the token-wise work between the TP regions (norms, dropout,\n"
        "residual adds) along the sequence. At each region boundary forward sends the same bytes\n"
        "as TP's all-reduce, cut in two halves: an all-gather in, a reduce-scatter out. The\n"
        "replicated norms now see s/t tokens, so their gradients are partial sums to be added\n"
        "over the ranks. What SP saves is lesson 08b; what it costs in backward, lesson 08c.");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_08_sp_regions.svg", "one block's SP regions");
  });
}
