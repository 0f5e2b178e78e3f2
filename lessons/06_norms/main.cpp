// Lesson 06 — LayerNorm and RMSNorm under tensor parallelism: a norm needs the whole hidden vector.
//
// What it shows, with two tokens of hidden size h = 8, X = [[1, 2, 3, 4, 5, 6, 7, 8],
// [0, 0, 0, 0, 4, 4, 4, 4]], split by columns over t ranks:
//   (a) the mistake: each rank normalises its slice with the mean and variance (or mean square)
//       of the slice alone. Concatenated, that is not LayerNorm(X): at t = 2 token 0 becomes the
//       same four numbers twice, and token 1 (each half constant, variance 0) becomes all zeros.
//   (b) the layout of plain TP: a norm sits between g (the row-parallel output, all-reduced, whole
//       on every rank) and f (the next column-parallel input, which needs it whole). So the norm is
//       replicated: every rank runs the same Norm on the same whole X, and nothing is communicated.
//   (c) the alternative when the hidden dim is split: each rank sums Σx and Σx² over its slice,
//       one all-reduce of 2 floats per token gives the sums over the whole vector, and every rank
//       normalises its own slice with the true mean and variance (RMSNorm: Σx² only, 1 float per
//       token). Gathered, that is LayerNorm(X) (RMSNorm(X)) of one device.
//
// What is new since lesson 05: the norms (tp::Norm in lib/model/layers.h and the device kernels
// layernorm_forward / rmsnorm_forward), the first operation that is not linear in the split dim,
// and a collective on statistics instead of activations.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_06_norms [--step]   (also -np 1 or 4)
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/host.h"
#include "lesson.h"
#include "model/layers.h"
#include "parallel/linear.h"
#include "parallel/mappings.h"
#include "pictures.h"

using namespace tp;

namespace {

// Each row of x (rows × cols) normalised with the statistics of that row, in the order the CPU
// kernels use (statistics in double, then float): LayerNorm (x − μ)·rstd, or RMSNorm x·rstd.
// Weight 1 and bias 0, as a freshly initialised tp::Norm.
std::vector<float> host_norm(const std::vector<float>& x, int64_t rows, int64_t cols, bool rms,
                             float eps) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, ss = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    const double mu = rms ? 0.0 : s / cols;
    for (int64_t c = 0; c < cols; ++c) ss += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
    const float m = static_cast<float>(mu),
                rs = static_cast<float>(1.0 / std::sqrt(ss / cols + eps));
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = (x[r * cols + c] - m) * rs;
  }
  return y;
}

// Per row: {mean, variance (biased), mean square} of x (rows × cols).
std::vector<std::vector<float>> host_stats(const std::vector<float>& x, int64_t rows,
                                           int64_t cols) {
  std::vector<std::vector<float>> out(3);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, sq = 0;
    for (int64_t c = 0; c < cols; ++c)
      s += x[r * cols + c], sq += double(x[r * cols + c]) * x[r * cols + c];
    const double mu = s / cols;
    double var = 0;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
    out[0].push_back(static_cast<float>(mu));
    out[1].push_back(static_cast<float>(var / cols));
    out[2].push_back(static_cast<float>(sq / cols));
  }
  return out;
}

std::string fmt_rel(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", d);
  return buf;
}

// What the lesson's runs computed, for its picture.
struct NormPicture {
  int t = 1;
  int64_t n = 0, h = 0, k = 0;              // tokens, hidden size, hidden values per rank
  std::string comm_replicated, comm_stats;  // step 5's and step 6's communication
  double err_ln = 0, err_rms = 0;           // the slice-alone norms' relative errors (steps 3, 4)
};

// The picture: the replicated norm of plain TP (its input and weights whole on every rank, no
// communication), the slice-alone mistake, the statistics all-reduce where the hidden dim is
// split, and where the weight's gradient would need a sum.
SvgDiagram draw_norms(const NormPicture& p) {
  using lesson::ChainBox;
  const std::string whole = lesson::kWholeColor, fg = "#fff3b0", bad = "#f4a6a6";
  const std::string nh = std::to_string(p.n) + " × " + std::to_string(p.h),
                    nk = std::to_string(p.n) + " × " + std::to_string(p.k);
  const double left = 100, rh = 26;
  SvgDiagram d(900, 60,
               "A norm under TP at t = " + std::to_string(p.t) + ": " + std::to_string(p.n) +
                   " tokens, h = " + std::to_string(p.h));
  double y = lesson::draw_rank_legend(d, 30, 40, p.t) + 10;
  auto panel = [&](const std::string& heading, auto row_boxes) {
    d.text(30, y + 12, heading, "start", 13);
    y += 24;
    for (int r = 0; r < p.t; ++r, y += rh + 8) {
      d.text(left - 10, y + 17, "rank " + std::to_string(r), "end", 11);
      lesson::draw_chain(d, left, y, rh, row_boxes(r));
    }
  };
  panel("Plain TP (step 5): after g the input is whole on every rank; the norm is replicated",
        [&](int r) {
    return std::vector<ChainBox>{
        {"g", fg, 30},
        {"X  " + nh, whole, 90},
        {"Norm: w, b (" + std::to_string(p.h) + " each)", whole, 160},
        {"Y  " + nh, whole, 90},
        {"f", fg, 30},
        {"W_" + std::to_string(r) + " (column)", lesson::rank_color(r), 110}};
  });
  y = lesson::draw_notes(
          d, y + 6,
          {"Forward: the same numbers on every rank, so the same result bit for bit; "
           "communication: " +
               p.comm_replicated + ".",
           "Backward: f's all-reduce hands every rank the whole dY, so dw and db come out the same "
           "everywhere: no sum."}) +
      12;
  panel("The mistake (steps 3, 4): each rank normalises its slice with the slice's own statistics",
        [&](int r) {
    return std::vector<ChainBox>{{"X_" + std::to_string(r) + "  " + nk, lesson::rank_color(r), 90},
                                 {"Norm of the slice alone", bad, 170}};
  });
  y = lesson::draw_notes(d, y + 6,
                         {"Gathered, off by " + fmt_rel(p.err_ln) + " (LayerNorm) and " +
                          fmt_rel(p.err_rms) + " (RMSNorm) relative to one device."}) +
      12;
  panel(
      "A split hidden dim done right (steps 6, 7): all-reduce the statistics, normalise the slice",
      [&](int r) {
    return std::vector<ChainBox>{{"X_" + std::to_string(r) + "  " + nk, lesson::rank_color(r), 90},
                                 {"[Σx, Σx²] per token", lesson::rank_color(r), 190},
                                 {"all-reduce", fg, 80},
                                 {"normalise X_" + std::to_string(r), lesson::rank_color(r), 120}};
      });
  lesson::draw_notes(
      d, y + 6,
      {"Communication: " + p.comm_stats + " (RMSNorm: Σx² only, half of it).",
       "Where a gradient sum is needed: under sequence parallelism (lesson 08) each rank holds its "
       "own tokens,",
       "so its dw and db cover those tokens only, and the ranks' parts are summed (all-reduce); "
       "under plain TP, never."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_06_norms", "Lesson 06: LayerNorm and RMSNorm under tensor parallelism",
      {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn in step 8, its path checked now

    // 1. The numbers, and the single-device norms of the whole vectors (the device kernels).
    L.step("The numbers: two tokens with h = 8, and their LayerNorm and RMSNorm on one device.");
    const int64_t n = 2, h = 8, k = h / t;  // n tokens; k: hidden columns per rank
    const float eps = 1e-5f;
    const std::vector<float> x_host = {1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 4, 4, 4, 4};
    Tensor X = Tensor::from_host(dev, Shape{n, h}, x_host);
    Tensor w = Tensor::from_host(dev, Shape{h}, std::vector<float>(h, 1.0f));  // weight 1, bias 0
    Tensor b = Tensor::zeros(dev, Shape{h});
    Tensor ln_ref(dev, Shape{n, h}), mean_ref(dev, Shape{n}), rstd_ref(dev, Shape{n});
    dev.layernorm_forward(ln_ref, mean_ref, rstd_ref, X, w, b, eps);
    Tensor rms_ref(dev, Shape{n, h}), rms_rstd_ref(dev, Shape{n});
    dev.rmsnorm_forward(rms_ref, rms_rstd_ref, X, w, eps);
    const std::vector<float> ln_y = ln_ref.to_host(), rms_y = rms_ref.to_host();
    const auto st = host_stats(x_host, n, h);  // mean, variance, mean square per token
    for (int64_t i = 0; i < n; ++i)
      L.say("  token ", i, ": x = ", lesson::fmt(host_block(x_host, h, i, 1, 0, h)), ",  mean ",
            lesson::fmt(st[0][i]), ",  variance ", lesson::fmt(st[1][i]), ",  mean square ",
            lesson::fmt(st[2][i]));
    L.say(
        "  eps = 1e-5, weight 1, bias 0.  One device, on the whole vectors (layernorm_forward, "
        "rmsnorm_forward):");
    L.say("    LayerNorm(X) = (x − mean) / √(variance + eps) = ", lesson::fmt(ln_y, h));
    L.say("    RMSNorm(X)   = x / √(mean square + eps)       = ", lesson::fmt(rms_y, h));
    L.check("single-device mean", mean_ref.to_host(), st[0]);
    L.check("single-device LayerNorm rstd", rstd_ref.to_host(),
            {float(1 / std::sqrt(double(st[1][0]) + eps)),
             float(1 / std::sqrt(double(st[1][1]) + eps))});
    L.check("single-device RMSNorm rstd", rms_rstd_ref.to_host(),
            {float(1 / std::sqrt(double(st[2][0]) + eps)),
             float(1 / std::sqrt(double(st[2][1]) + eps))});
    L.check("single-device LayerNorm", ln_y, host_norm(x_host, n, h, false, eps));
    L.check("single-device RMSNorm", rms_y, host_norm(x_host, n, h, true, eps));

    std::vector<std::string> header = {"step"};
    for (int i = 0; i < t; ++i) header.push_back("rank " + std::to_string(i));
    header.push_back("communication");
    lesson::Table table(header);
    lesson::Table ways({"the norm at t = " + std::to_string(t), "communication",
                        "‖result − one device‖ / ‖one device‖"});

    // Rank i's columns of X, and the slice-statistics result a rank computes from them.
    auto x_slice = [&](int i) { return host_block(x_host, h, 0, n, i * k, k); };
    auto concat = [&](auto per_rank_fn) {  // rank slices side by side: (n × h)
      std::vector<float> full(n * h);
      for (int i = 0; i < t; ++i) {
        const std::vector<float> s = per_rank_fn(i);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < k; ++c) full[r * h + i * k + c] = s[r * k + c];
      }
      return full;
    };
    // Prints every rank's value like L.report, without a table row: "label:" and the ranks on one
    // line, or one rank per line (`stacked`) for values as wide as the whole X.
    auto show = [&](const std::string& label, const Tensor& value, size_t mark, bool stacked) {
      const std::vector<std::string> cells = L.gather_fmt(value);
      std::string line = "  " + label + ":" + (stacked ? "" : " ");
      for (size_t i = 0; i < cells.size(); ++i)
        line += stacked ? "\n    rank " + std::to_string(i) + ": " + cells[i]
                        : " rank " + std::to_string(i) + ": " + cells[i] + "  ";
      L.say(line, stacked ? "\n    communication: " : " communication: ", L.comm_since(mark));
    };

    // 2. Split X by columns (the hidden dim): rank r keeps columns [r·k, (r+1)·k).
    L.step("Split X by columns (scatter_to_tp_region): rank r holds X_r, " + std::to_string(n) +
           " tokens x " + std::to_string(k) + " hidden values.");
    size_t m = L.mark();
    Tensor X_r = scatter_to_tp_region_forward(world, X);  // (n, k)
    Tensor w_r = scatter_to_tp_region_forward(world, w),
           b_r = scatter_to_tp_region_forward(world, b);
    L.say(
        "  Every value below is per token: [token 0, token 1] for one number a token, and one row");
    L.say("  [ … ] per token, token 0 first, for vectors.");
    L.report(table, "holds X_r", X_r, m);
    L.check_ranks("X_r", X_r, lesson::per_rank(t, x_slice));

    // 3. (a) The mistake: LayerNorm of the slice alone, with the slice's own mean and variance.
    L.step(
        "The mistake: each rank runs LayerNorm on its slice, with the slice's own mean and "
        "variance.");
    m = L.mark();
    Tensor ya_r(dev, Shape{n, k}), mean_r(dev, Shape{n}), rstd_r(dev, Shape{n});
    dev.layernorm_forward(ya_r, mean_r, rstd_r, X_r, w_r, b_r, eps);
    const auto sst = host_stats(X_r.to_host(), n, k);  // this rank's slice statistics
    Tensor var_r = Tensor::from_host(dev, Shape{n}, sst[1]);
    L.say("  Per token: the slice mean, the slice variance, and LayerNorm of the slice with them:");
    L.report(table, "(a) slice mean (per token)", mean_r, m);
    L.report(table, "(a) slice variance (per token)", var_r, m);
    show("(a) LayerNorm of the slice", ya_r, m, false);
    L.check_ranks("slice mean", mean_r,
                  lesson::per_rank(t, [&](int i) { return host_stats(x_slice(i), n, k)[0]; }));
    L.check_ranks("slice variance", var_r,
                  lesson::per_rank(t, [&](int i) { return host_stats(x_slice(i), n, k)[1]; }));
    L.check_ranks("slice rstd = 1/√(slice variance + eps)", rstd_r, lesson::per_rank(t, [&](int i) {
                    const auto s = host_stats(x_slice(i), n, k)[1];
                    return std::vector<float>{float(1 / std::sqrt(double(s[0]) + eps)),
                                              float(1 / std::sqrt(double(s[1]) + eps))};
                  }));
    auto ln_slice = [&](int i) { return host_norm(x_slice(i), n, k, false, eps); };
    L.check_ranks("LayerNorm of the slice", ya_r, lesson::per_rank(t, ln_slice));

    // Concatenates a slice-wise result (all-gather), compares it with one device and checks both
    // the result and the size of the difference; `want_equal` at t = 1 (the slice is the whole).
    // Returns the relative difference (on rank 0).
    auto gather_and_compare = [&](const std::string& what, const Tensor& y_r,
                                  const std::vector<float>& expected,
                                  const std::vector<float>& one_device, bool want_equal) {
      const size_t mg = L.mark();
      Tensor y = gather_from_tp_region_forward(world, y_r);  // (n, h) on every rank
      const std::string comm = L.comm_since(mg);
      L.check_ranks(what + ", gathered", y, lesson::per_rank(t, [&](int) { return expected; }));
      const std::vector<std::vector<float>> got = L.gather(y);
      if (!L.is_root()) return 0.0;
      const double d = rel_error(got[0], one_device);
      L.say("  gathered (all-gather, the same on every rank): ", lesson::fmt(got[0], h),
            "   communication: ", comm);
      L.say("  one device:                                    ", lesson::fmt(one_device, h));
      L.say("  ‖gathered − one device‖ / ‖one device‖ = ", fmt_rel(d),
            want_equal ? (t == 1 ? "  (t = 1: the slice is the whole vector)" : "") : "");
      L.check_fact(what + ": relative difference", {float(d)},
                   {float(rel_error(expected, one_device))}, 1e-5);
      if (want_equal)
        L.check(what + " equals one device", got[0], one_device, 1e-6);
      else
        L.check_true(what + " differs from one device by more than 10%", d > 0.1);
      return d;
    };
    const double d_ln_slice =
        gather_and_compare("LayerNorm with slice statistics", ya_r, concat(ln_slice), ln_y, t == 1);

    // 4. (a) The same mistake with RMSNorm: the mean square of the slice is not that of the vector.
    L.step("The same with RMSNorm: each rank divides by the root mean square of its slice only.");
    m = L.mark();
    Tensor yr_r(dev, Shape{n, k}), rms_rstd_r(dev, Shape{n});
    dev.rmsnorm_forward(yr_r, rms_rstd_r, X_r, w_r, eps);
    Tensor ms_r = Tensor::from_host(dev, Shape{n}, sst[2]);
    L.say("  Per token: the slice mean square, and RMSNorm of the slice with it:");
    L.report(table, "(a) slice mean square", ms_r, m);
    show("(a) RMSNorm of the slice", yr_r, m, false);
    L.check_ranks("slice mean square", ms_r,
                  lesson::per_rank(t, [&](int i) { return host_stats(x_slice(i), n, k)[2]; }));
    auto rms_slice = [&](int i) { return host_norm(x_slice(i), n, k, true, eps); };
    L.check_ranks("RMSNorm of the slice", yr_r, lesson::per_rank(t, rms_slice));
    const double d_rms_slice =
        gather_and_compare("RMSNorm with slice statistics", yr_r, concat(rms_slice), rms_y, t == 1);
    ways.add({"(a) LayerNorm of each slice alone", "none", fmt_rel(d_ln_slice)});
    ways.add({"(a) RMSNorm of each slice alone", "none", fmt_rel(d_rms_slice)});

    // 5. (b) Plain TP: the norm sits after g, where every rank has the whole vector; it is replicated.
    L.step(
        "Plain TP: the norm sits after g (every rank has the whole X) and before f; every rank "
        "runs it.");
    // The row-parallel layer that ends the previous sublayer, with weight I so that its output is X:
    // rank r's partial sum X_r I_r, all-reduced by g.
    std::vector<float> eye(h * h, 0.0f);
    for (int64_t i = 0; i < h; ++i) eye[i * h + i] = 1.0f;
    RowParallelLinear proj(dev, world, "proj", h, h, Bias::Without, RowInput::Split);
    proj.load_global(eye);
    m = L.mark();
    Tensor X_whole = proj.forward(X_r);  // (n, h): g has all-reduced the partial sums
    L.say(
        "  The previous sublayer ends in a row-parallel layer (here W = I): g all-reduces its "
        "partial sums.");
    show("X after g (all-reduce)", X_whole, m, true);
    L.check_ranks("X after g", X_whole, lesson::per_rank(t, [&](int) { return x_host; }));
    Norm ln(dev, "ln", h, NormKind::LayerNorm, eps), rms(dev, "rms", h, NormKind::RmsNorm, eps);
    m = L.mark();
    Tensor y_ln = ln.forward(X_whole);
    const std::string comm_ln = L.comm_since(m);
    L.say(
        "  Every rank runs tp::Norm (LayerNorm) on the whole X, and gets the one-device result bit "
        "for bit:");
    show("tp::Norm (LayerNorm) of the whole X", y_ln, m, true);
    m = L.mark();
    Tensor y_rms = rms.forward(X_whole);
    const std::string comm_rms = L.comm_since(m);
    L.say("  Every rank runs tp::Norm (RMSNorm) on the whole X, the same way:");
    show("tp::Norm (RMSNorm) of the whole X", y_rms, m, true);
    // The same kernel on the same input: bit for bit the single-device result (tolerance 0).
    L.check_ranks("replicated LayerNorm", y_ln, lesson::per_rank(t, [&](int) { return ln_y; }),
                  0.0);
    L.check_ranks("replicated RMSNorm", y_rms, lesson::per_rank(t, [&](int) { return rms_y; }),
                  0.0);
    m = L.mark();
    Tensor next_in = copy_to_tp_region_forward(world, y_ln);  // f: the next column-parallel input
    L.say(
        "  f (copy_to_tp_region) passes the whole normalised X to the next column-parallel layer:  "
        "communication: ",
        L.comm_since(m));
    L.check_ranks("input of the next column-parallel layer", next_in,
                  lesson::per_rank(t, [&](int) { return ln_y; }));
    double d_ln_rep = 0, d_rms_rep = 0;  // the largest over the ranks
    const auto all_ln = L.gather(y_ln), all_rms = L.gather(y_rms);
    for (size_t i = 0; i < all_ln.size(); ++i) {
      d_ln_rep = std::max(d_ln_rep, rel_error(all_ln[i], ln_y));
      d_rms_rep = std::max(d_rms_rep, rel_error(all_rms[i], rms_y));
    }
    ways.add({"(b) LayerNorm replicated after g (tp::Norm)", comm_ln, fmt_rel(d_ln_rep)});
    ways.add({"(b) RMSNorm replicated after g (tp::Norm)", comm_rms, fmt_rel(d_rms_rep)});

    // 6. (c) Distributed statistics: all-reduce [Σx, Σx²] per token, normalise the own slice.
    L.step(
        "When X is split by columns: gather it whole (N·h floats), or all-reduce [Σx, Σx²] (2 "
        "floats a token).");
    // The direct fix: all-gather the slices, then the replicated norm of step 5.
    m = L.mark();
    Tensor X_gathered = gather_from_tp_region_forward(world, X_r);
    Tensor y_gathered = ln.forward(X_gathered);
    const std::string comm_gather = L.comm_since(m);
    L.say("  all-gather X, then tp::Norm (LayerNorm) on every rank:  communication: ", comm_gather);
    L.check_ranks("LayerNorm of the all-gathered X", y_gathered,
                  lesson::per_rank(t, [&](int) { return ln_y; }));
    const auto all_gathered = L.gather(y_gathered);
    double d_gathered = 0;
    for (const auto& v : all_gathered) d_gathered = std::max(d_gathered, rel_error(v, ln_y));
    ways.add({"all-gather X, then LayerNorm replicated", comm_gather, fmt_rel(d_gathered)});

    // Distributed statistics: partial sums over the slice, one all-reduce, then the slice.
    auto sums_of = [&](const std::vector<float>& x, int64_t cols) {  // per token: Σx, Σx²
      std::vector<float> v;
      for (int64_t i = 0; i < n; ++i) {
        double s = 0, sq = 0;
        for (int64_t c = 0; c < cols; ++c)
          s += x[i * cols + c], sq += double(x[i * cols + c]) * x[i * cols + c];
        v.push_back(float(s));
        v.push_back(float(sq));
      }
      return v;
    };
    const std::vector<float> xs = X_r.to_host(), sums_host = sums_of(xs, k);
    m = L.mark();
    Tensor sums = Tensor::from_host(dev, Shape{n, 2}, sums_host);
    L.say(
        "  Each rank: [Σx, Σx²] per token over its slice; the all-reduce; [mean, variance] from "
        "the sums;\n"
        "  its own slice normalised with them:");
    L.report(table, "(c) partial [Σx, Σx²] per token", sums, m);
    L.check_ranks("partial [Σx, Σx²]", sums,
                  lesson::per_rank(t, [&](int i) { return sums_of(x_slice(i), k); }));
    m = L.mark();
    world.all_reduce(sums);  // in place: every rank now has Σx and Σx² over all h columns
    const std::string comm_stats = L.comm_since(m);
    L.report(table, "(c) all-reduce: whole [Σx, Σx²]", sums, m);
    L.check_ranks("all-reduced [Σx, Σx²]", sums,
                  lesson::per_rank(t, [&](int) { return sums_of(x_host, h); }));

    // Every rank derives the true statistics from the sums and normalises its own columns.
    m = L.mark();
    const std::vector<float> tot = sums.to_host();
    std::vector<float> stats_host, yc_host(n * k);
    for (int64_t i = 0; i < n; ++i) {
      const double mu = double(tot[2 * i]) / h, var = double(tot[2 * i + 1]) / h - mu * mu;
      stats_host.push_back(float(mu));
      stats_host.push_back(float(var));
      const float mf = float(mu), rs = float(1.0 / std::sqrt(var + eps));
      for (int64_t c = 0; c < k; ++c)
        yc_host[i * k + c] = (xs[i * k + c] - mf) * rs;  // · w_r + b_r (1, 0)
    }
    Tensor stats = Tensor::from_host(dev, Shape{n, 2}, stats_host);
    L.report(table, "(c) [mean, variance] = [Σx/h, Σx²/h − mean²]", stats, m);
    std::vector<float> stats_want;
    for (int64_t i = 0; i < n; ++i) stats_want.push_back(st[0][i]), stats_want.push_back(st[1][i]);
    L.check_ranks("mean and variance from the sums", stats,
                  lesson::per_rank(t, [&](int) { return stats_want; }));
    Tensor yc_r = Tensor::from_host(dev, Shape{n, k}, yc_host);
    show("(c) my slice, normalised with the whole statistics", yc_r, m, false);
    L.check_ranks("LayerNorm slice, distributed statistics", yc_r,
                  lesson::per_rank(t, [&](int i) { return host_block(ln_y, h, 0, n, i * k, k); }));
    L.say(
        "  Side by side (all-gathered here only to compare), the slices are LayerNorm(X) (relative "
        "tolerance 1e-6):");
    const double d_ln_dist =
        gather_and_compare("LayerNorm with distributed statistics", yc_r, ln_y, ln_y, true);

    // 7. (c) RMSNorm needs only Σx²: one all-reduce of 1 float per token.
    L.step(
        "Distributed statistics for RMSNorm: only Σx² is needed, one all-reduce of 1 float per "
        "token.");
    std::vector<float> sq_host;
    for (int64_t i = 0; i < n; ++i) sq_host.push_back(sums_host[2 * i + 1]);
    m = L.mark();
    Tensor sq = Tensor::from_host(dev, Shape{n}, sq_host);
    L.say(
        "  Each rank: Σx² per token over its slice; the all-reduce; its slice times 1/√(Σx²/h + "
        "eps):");
    L.report(table, "(c) partial Σx² per token", sq, m);
    m = L.mark();
    world.all_reduce(sq);
    const std::string comm_sq = L.comm_since(m);
    L.report(table, "(c) all-reduce: whole Σx²", sq, m);
    L.check_ranks("all-reduced Σx²", sq, lesson::per_rank(t, [&](int) {
                    return std::vector<float>{float(st[2][0] * h), float(st[2][1] * h)};
                  }));
    m = L.mark();
    const std::vector<float> sq_tot = sq.to_host();
    std::vector<float> yr_host(n * k);
    for (int64_t i = 0; i < n; ++i) {
      const float rs = float(1.0 / std::sqrt(double(sq_tot[i]) / h + eps));
      for (int64_t c = 0; c < k; ++c) yr_host[i * k + c] = xs[i * k + c] * rs;  // · w_r (1)
    }
    Tensor yrc_r = Tensor::from_host(dev, Shape{n, k}, yr_host);
    show("(c) my slice times 1/√(Σx²/h + eps)", yrc_r, m, false);
    L.check_ranks("RMSNorm slice, distributed statistics", yrc_r,
                  lesson::per_rank(t, [&](int i) { return host_block(rms_y, h, 0, n, i * k, k); }));
    L.say(
        "  Side by side (all-gathered here only to compare), the slices are RMSNorm(X) (relative "
        "tolerance 1e-6):");
    const double d_rms_dist =
        gather_and_compare("RMSNorm with distributed statistics", yrc_r, rms_y, rms_y, true);
    ways.add({"(c) LayerNorm, distributed statistics", comm_stats, fmt_rel(d_ln_dist)});
    ways.add({"(c) RMSNorm, distributed statistics", comm_sq, fmt_rel(d_rms_dist)});

    // 8. Summary.
    L.step("Summary.");
    L.say(table.str());
    L.say(ways.str());
    lesson::write_picture(L, draw_norms({t, n, h, k, comm_ln, comm_stats, d_ln_slice, d_rms_slice}),
                          svg);
    L.say(
        "A norm divides by statistics of the whole hidden vector, so a rank that sees only its\n"
        "slice computes the wrong thing. Plain TP never asks it to: the norm comes after g, where\n"
        "every rank has the whole vector, and every rank runs the same norm with no "
        "communication.\n"
        "Where the hidden dim is split, all-reducing 2 floats per token (Σx, Σx²; RMSNorm: Σx²)\n"
        "gives every rank the true statistics for its own slice.\n"
        "\n"
        "[A4] §4.2 says LayerNorm computes its statistics on each rank and all-reduces them\n"
        "to keep them in sync. Under plain TP it needs neither: its input is whole on every rank\n"
        "(step 5, no communication), and a statistics all-reduce (steps 6-7) is only for a norm\n"
        "over a dimension that really is split. Its §6.3 broadcast before LayerNorm is not\n"
        "needed either: every rank computes the same result from the same numbers, bit for bit.");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_06_norms.svg",
                       "the norm under TP: replicated, the slice-alone mistake, the statistics "
                       "all-reduce");
  });
}
