// Lesson 04 — the MLP under tensor parallelism: column-parallel, then the activation, then row-parallel.
//
// What it shows: fc1 (h → ffn) split by columns, fc2 (ffn → h) split by rows, and the activation in
// between applied to each rank's own columns:
//
//     Z = GeLU(X [A_0, …, A_{t−1}]) [B_0; …; B_{t−1}] = Σ_r GeLU(X A_r) B_r
//
// With X = [1, 2], A = [[1, 0, -2, 1], [0, 1, 1, -1]], B = [[1, 0], [0, 1], [1, 1], [2, -1]]:
// XA = [1, 2, 0, -1]; at t = 2 rank 0 holds the columns [1, 2] and rank 1 holds [0, -1]; each
// applies GeLU to its own columns and multiplies by its rows of B. Nothing moves between fc1 and
// fc2: one all-reduce forward (g, after fc2) and one backward (f, before fc1).
// The other order fails: row-parallel first leaves partial sums, and a nonlinearity of a sum is
// not the sum of the nonlinearity: ReLU(3 + (−2)) = 1, ReLU(3) + ReLU(−2) = 3.
// Then tp::ParallelMLP (GeLU and SwiGLU) against the same module at t = 1, and the per-rank shapes
// of a Qwen3-8B-sized MLP at t = 8.
//
// What is new since lesson 03: two layers chained with a nonlinearity between them, the f / g
// pair around a whole block, SwiGLU, and the model layer tp::ParallelMLP with its GptConfig.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_04_parallel_mlp [--step]   (also -np 1 or 4)
//
// On request, the bug this lesson's layers make easy: `--forget-allreduce` runs only one step, in
// which the last rank's fc2 "forgets" g's all-reduce, under the collective checker
// (core/checked_communicator.h, what --check-collectives and TP_CHECK_COLLECTIVES=1 turn on for a
// whole program). Without it the other ranks would wait in g forever; with it every rank stops at
// the next collective and the lesson prints the one line that names the mismatch.
#include <algorithm>
#include <cmath>

#include "core/checked_communicator.h"
#include "core/error.h"
#include "core/host.h"
#include "lesson.h"
#include "model/config.h"
#include "model/layers.h"
#include "parallel/linear.h"
#include "parallel/mappings.h"
#include "pictures.h"

using namespace tp;

namespace {

// --forget-allreduce: the MLP of steps 2-5 on a checked copy of the world, where the last rank's
// fc2 is a plain local layer (a RowParallelLinear on a one-rank communicator, holding B_r): its
// forward is G_r B_r without g. Its next collective is f's all-reduce in fc1's backward, of the
// same 2 floats as g's: the op and the size agree, the ledger labels (the region ops') do not.
void forget_allreduce(lesson::Lesson& L) {
  Device& dev = L.device();
  const int t = L.size();
  L.step("One rank's fc2 forgets g's all-reduce; the collective checker names it.");
  if (t == 1) {
    L.say("  one rank: g is the identity, there is nothing to forget; run with -np 2 or more");
    return;
  }
  const int64_t h = 2, ffn = 4, k = ffn / t;
  const std::vector<float> b_host = {1, 0, 0, 1, 1, 1, 2, -1};  // B, ffn x h
  CheckedCommunicator checked(L.world().split(0, L.rank()), dev);
  SerialCommunicator solo;
  const bool forgets = L.rank() == t - 1;
  ColumnParallelLinear fc1(dev, checked, "fc1", h, ffn, Bias::Without, ColumnOutput::Split);
  RowParallelLinear fc2(dev, forgets ? static_cast<Communicator&>(solo) : checked, "fc2",
                        forgets ? k : ffn, h, Bias::Without, RowInput::Split);
  fc1.load_global({1, 0, -2, 1, 0, 1, 1, -1});
  fc2.load_global(forgets ? std::vector<float>(b_host.begin() + L.rank() * k * h,
                                               b_host.begin() + (L.rank() + 1) * k * h)
                          : b_host);
  const Tensor X = Tensor::from_host(dev, Shape{1, h}, {1, 2});
  const Tensor dZ = Tensor::from_host(dev, Shape{1, h}, {1, 1});
  std::string caught;
  try {
    Tensor H = fc1.forward(X), G(dev, H.shape()), dH(dev, H.shape());
    dev.gelu_forward(G, H);
    fc2.forward(G);  // g on every rank but the last
    Tensor dG = fc2.backward(dZ);
    dev.gelu_backward(dH, dG, H);
    fc1.backward(dH);  // f: the last rank's first collective
  } catch (const Error& e) {
    caught = e.what();
  }
  L.say("  rank ", t - 1,
        "'s fc2 has no g; every rank stops at its next collective with one line:");
  L.say("  ", caught);
  L.check_fact("the checker caught the forgotten all-reduce",
               {caught.find("called all_reduce(2 floats, 'reduce_from_tp_region.forward')") !=
                        std::string::npos
                    ? 1.0f
                    : 0.0f},
               {1.0f});
}

// The shapes the run met, for the picture: X, A_r, H_r = X A_r (and GeLU of it), B_r, the term,
// Z; and what the forward and the backward communicated.
struct MlpPicture {
  int t = 1;
  int64_t h = 0, ffn = 0;
  std::string x, a, hr, b, term, z;
  std::string forward_comm, backward_comm;
};

// Each rank's path through the MLP with the shape at every point (f, fc1's columns, GeLU on its
// own columns, fc2's rows, the partial term, g), then fc1's column split and fc2's row split drawn
// as in lessons 02 and 03.
SvgDiagram draw_mlp(const MlpPicture& p) {
  const std::string fg = "#fff3b0", whole = lesson::kWholeColor;
  SvgDiagram d(900, 60,
               "The parallel MLP at t = " + std::to_string(p.t) +
                   ": column-parallel fc1, GeLU on each rank's own columns, "
                   "row-parallel fc2");
  double y = lesson::draw_rank_legend(d, 30, 40, p.t) + 8;
  for (int r = 0; r < p.t; ++r, y += 38) {
    const std::string c = lesson::rank_color(r), i = std::to_string(r);
    d.text(84, y + 18, "rank " + i, "end", 11);
    lesson::draw_chain(d, 90, y, 26,
                       {{"X " + p.x, whole, 62},
                        {"f", fg, 24},
                        {"A_" + i + " " + p.a, c, 66},
                        {"X A_" + i + " " + p.hr, c, 84},
                        {"GeLU", c, 46},
                        {"B_" + i + " " + p.b, c, 66},
                        {"term " + p.term, c, 82},
                        {"g", fg, 24},
                        {"Z " + p.z, whole, 62}},
                       16);
  }
  y = lesson::draw_notes(
          d, y + 6,
          {"Forward: f is the identity, fc1 and GeLU and fc2 are local, g all-reduces the terms: " +
               p.forward_comm + ".",
           "Backward: g is the identity, fc2 and GeLU' are local, f all-reduces the dX terms: " +
               p.backward_comm + "."}) +
      8;
  lesson::SplitPicture fc1;
  fc1.by = lesson::SplitBy::Columns;
  fc1.t = p.t;
  fc1.in = static_cast<int>(p.h);
  fc1.out = static_cast<int>(p.ffn);
  fc1.weight = "A";
  fc1.combine = false;  // the columns stay split: GeLU and fc2 use them where they are
  y = lesson::draw_split(d, y, fc1, "fc1 by columns: each rank a few whole columns of X A");
  lesson::SplitPicture fc2 = fc1;
  fc2.by = lesson::SplitBy::Rows;
  fc2.in = static_cast<int>(p.ffn);
  fc2.out = static_cast<int>(p.h);
  fc2.weight = "B";
  fc2.combine = true;
  y = lesson::draw_split(d, y, fc2,
                         "fc2 by the same rows: its input X_r is GeLU(X A_r), already on rank r");
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_04_parallel_mlp", "Lesson 04: the parallel MLP (column, activation, row)",
      {2, 1, 4},
      [](lesson::Lesson& L) {
    if (L.options().get_flag("forget-allreduce")) return forget_allreduce(L);
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const float one_if_tp = t > 1 ? 1.0f : 0.0f;  // collectives per pass: none at t = 1
    const std::string svg = lesson::svg_path(L);  // drawn in step 10, its path checked now
    auto count_since = [&](size_t m) { return static_cast<float>(L.mark() - m); };
    auto dims = [](const Shape& s) {
      std::vector<float> d;
      for (int i = 0; i < s.ndim(); ++i) d.push_back(static_cast<float>(s[i]));
      return d;
    };

    // 1. The numbers, and the single-device reference: fc1, GeLU, fc2 on one rank (t = 1).
    L.step("The numbers, and the answer from one device.");
    const int64_t h = 2, ffn = 4, k = ffn / t;  // k: fc1 columns (= fc2 rows) per rank
    const std::vector<float> x_host = {1, 2}, a_host = {1, 0, -2, 1, 0, 1, 1, -1};
    const std::vector<float> b_host = {1, 0, 0, 1, 1, 1, 2, -1}, dz_host = {1, 1};
    Tensor X = Tensor::from_host(dev, Shape{1, h}, x_host);
    Tensor dZ = Tensor::from_host(dev, Shape{1, h}, dz_host);
    SerialCommunicator solo;
    ColumnParallelLinear fc1_one(dev, solo, "fc1", h, ffn, Bias::Without, ColumnOutput::Split);
    RowParallelLinear fc2_one(dev, solo, "fc2", ffn, h, Bias::Without, RowInput::Split);
    fc1_one.load_global(a_host);
    fc2_one.load_global(b_host);
    Tensor H1 = fc1_one.forward(X), G1(dev, H1.shape()), dH1(dev, H1.shape());
    dev.gelu_forward(G1, H1);
    const std::vector<float> h_ref = H1.to_host(), g_ref = G1.to_host(),
                             z_ref = fc2_one.forward(G1).to_host();
    Tensor dG1 = fc2_one.backward(dZ);
    dev.gelu_backward(dH1, dG1, H1);
    const std::vector<float> dg_ref = dG1.to_host(), dh_ref = dH1.to_host(),
                             dx_ref = fc1_one.backward(dH1).to_host();
    const std::vector<float> da_ref = fc1_one.dweight.to_host(), db_ref = fc2_one.dweight.to_host();
    auto gelu = [](float v) {
      return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    };
    std::vector<float> g_host = host_matmul(x_host, a_host, 1, h, ffn);
    std::transform(g_host.begin(), g_host.end(), g_host.begin(), gelu);
    L.say("  X = ", lesson::fmt(x_host), ",  A (fc1) = ", lesson::fmt(a_host, ffn),
          ",  B (fc2) = ", lesson::fmt(b_host, h), ",  dZ = ", lesson::fmt(dz_host));
    L.say("  one device: XA = ", lesson::fmt(h_ref), ",  GeLU(XA) = ", lesson::fmt(g_ref),
          ",  Z = GeLU(XA) B = ", lesson::fmt(z_ref), ",  dX = ", lesson::fmt(dx_ref));
    L.check("single-device GeLU(XA)", g_ref, g_host, 1e-6);
    L.check("single-device Z", z_ref, host_matmul(g_host, b_host, 1, ffn, h), 1e-6);

    std::vector<std::string> header = {"step"};
    for (int i = 0; i < t; ++i) header.push_back("rank " + std::to_string(i));
    header.push_back("communication");
    lesson::Table table(header);
    auto my_cols = [&](const std::vector<float>& v, int64_t rows, int i) {
      return host_block(v, ffn, 0, rows, i * k, k);
    };
    auto my_rows = [&](const std::vector<float>& v, int i) {
      return host_block(v, h, i * k, k, 0, h);
    };

    // 2. Split: fc1 by columns (rank r holds A_r, h × k), fc2 by rows (B_r, k × h).
    L.step("Split: rank r holds A_r = columns of fc1 (" + std::to_string(h) + "x" +
           std::to_string(k) + ") and B_r = the same rows of fc2 (" + std::to_string(k) + "x" +
           std::to_string(h) + ").");
    size_t m = L.mark();
    ColumnParallelLinear fc1(dev, world, "fc1", h, ffn, Bias::Without, ColumnOutput::Split);
    RowParallelLinear fc2(dev, world, "fc2", ffn, h, Bias::Without, RowInput::Split);
    fc1.load_global(a_host);
    fc2.load_global(b_host);
    L.say(
        "  (row by row: A_r's rows are the h inputs and its columns this rank's fc1 columns; "
        "B_r's");
    L.say("  rows are the same columns of the intermediate and its columns the h outputs)");
    L.report(table, "holds A_r (fc1 columns)", fc1.weight, m);
    L.report(table, "holds B_r (fc2 rows)", fc2.weight, m);
    L.check_ranks("A_r", fc1.weight,
                  lesson::per_rank(t, [&](int i) { return my_cols(a_host, h, i); }));
    L.check_ranks("B_r", fc2.weight,
                  lesson::per_rank(t, [&](int i) { return my_rows(b_host, i); }));

    // 3. Forward. fc1 needs no communication (X entered through f); GeLU is elementwise, so it
    //    works on this rank's columns alone; GeLU(X A_r) is exactly the input slice fc2 needs.
    L.step("Forward: X A_r, then GeLU on this rank's own columns, then the term GeLU(X A_r) B_r.");
    const size_t m_fwd = L.mark();
    m = L.mark();
    Tensor H = fc1.forward(X);
    L.report(table, "fc1: H_r = X A_r", H, m);
    L.check_ranks("H_r", H, lesson::per_rank(t, [&](int i) { return my_cols(h_ref, 1, i); }));
    const size_t m_between = L.mark();
    Tensor G(dev, H.shape());
    dev.gelu_forward(G, H);
    L.report(table, "GeLU(H_r), local", G, m_between);
    L.check_ranks("GeLU(H_r)", G, lesson::per_rank(t, [&](int i) { return my_cols(g_ref, 1, i); }));
    m = L.mark();
    Tensor term(dev, Shape{1, h});
    dev.gemm(false, false, 1.0f, G, fc2.weight, 0.0f, term);
    L.report(table, "term GeLU(X A_r) B_r", term, m);
    L.check_ranks("GeLU(X A_r) B_r", term, lesson::per_rank(t, [&](int i) {
                    return host_matmul(my_cols(g_ref, 1, i), my_rows(b_host, i), 1, k, h);
                  }));
    L.check_fact("collectives between fc1 and fc2", {count_since(m_between)}, {0});

    // 4. fc2 and g: the all-reduce sums the terms. The only collective of the forward pass.
    L.step("fc2 + g: all-reduce the terms; Z = Σ_r GeLU(X A_r) B_r on every rank.");
    m = L.mark();
    Tensor Z = fc2.forward(G);
    L.report(table, "fc2 + g: Z = Σ terms", Z, m);
    L.check_ranks("Z", Z, lesson::per_rank(t, [&](int) { return z_ref; }));
    MlpPicture pic{t,
                   h,
                   ffn,
                   X.shape().str(),
                   fc1.weight.shape().str(),
                   H.shape().str(),
                   fc2.weight.shape().str(),
                   term.shape().str(),
                   Z.shape().str(),
                   L.comm_since(m_fwd),
                   ""};
    L.say("  the whole forward: ", pic.forward_comm);
    L.check_fact("collectives in forward", {count_since(m_fwd)}, {one_if_tp});

    // 5. Backward mirrors it: g's backward is the identity, GeLU' is local, f all-reduces dX.
    L.step(
        "Backward: fc2 (g backward: identity), GeLU' on own columns, fc1 (f backward: "
        "all-reduce).");
    const size_t m_bwd = L.mark();
    m = L.mark();
    Tensor dG = fc2.backward(dZ);
    L.report(table, "fc2: dG_r = dZ B_rᵀ", dG, m);
    L.check_ranks("dG_r", dG, lesson::per_rank(t, [&](int i) { return my_cols(dg_ref, 1, i); }));
    m = L.mark();
    Tensor dH(dev, H.shape());
    dev.gelu_backward(dH, dG, H);
    L.report(table, "dH_r = dG_r ⊙ GeLU'(H_r)", dH, m);
    L.check_ranks("dH_r", dH, lesson::per_rank(t, [&](int i) { return my_cols(dh_ref, 1, i); }));
    m = L.mark();
    Tensor dX = fc1.backward(dH);
    L.report(table, "fc1 + f: dX = Σ dH_r A_rᵀ", dX, m);
    L.check_ranks("dX", dX, lesson::per_rank(t, [&](int) { return dx_ref; }));
    L.check_ranks("dA_r", fc1.dweight,
                  lesson::per_rank(t, [&](int i) { return my_cols(da_ref, h, i); }));
    L.check_ranks("dB_r", fc2.dweight,
                  lesson::per_rank(t, [&](int i) { return my_rows(db_ref, i); }));
    pic.backward_comm = L.comm_since(m_bwd);
    L.say("  the whole backward: ", pic.backward_comm, "  (dA_r, dB_r: local, checked)");
    L.check_fact("collectives in backward", {count_since(m_bwd)}, {one_if_tp});

    // 6. The wrong order: row-parallel first. Its outputs are partial sums, and ReLU of a sum is
    //    not the sum of ReLUs. ReLU runs on the host here: it is a two-number demonstration.
    L.step(
        "The wrong order: row-parallel first gives partial sums, and ReLU(Σ p_r) ≠ Σ ReLU(p_r).");
    const std::vector<float> u_host = {1, 1, -1, -1}, w_host = {1, 2, 1, 1};  // (1x4) · (4x1)
    const int64_t kr = 4 / t;
    auto relu = [](std::vector<float> v) {
      for (float& e : v) e = std::max(e, 0.0f);
      return v;
    };
    m = L.mark();
    Tensor U_r = scatter_to_tp_region_forward(world, Tensor::from_host(dev, Shape{1, 4}, u_host));
    Tensor W_r =
        Tensor::from_host(dev, Shape{4, 1}, w_host).view(L.rank() * kr, (L.rank() + 1) * kr);
    Tensor p(dev, Shape{1, 1});
    dev.gemm(false, false, 1.0f, U_r, W_r, 0.0f, p);
    L.report(table, "row first: p_r = U_r W_r", p, m);
    std::vector<float> partials(t, 0.0f);  // rank i: Σ u_j w_j over its rows j
    for (int j = 0; j < 4; ++j) partials[j / kr] += u_host[j] * w_host[j];
    L.check_ranks("p_r", p,
                  lesson::per_rank(t, [&](int i) { return std::vector<float>{partials[i]}; }));
    m = L.mark();
    Tensor wrong = Tensor::from_host(dev, Shape{1, 1}, relu(p.to_host()));
    reduce_from_tp_region_forward(world, wrong);
    L.report(table, "wrong: Σ ReLU(p_r)", wrong, m);
    m = L.mark();
    Tensor right = reduce_from_tp_region_forward(world, p.clone());
    right.copy_from_host(relu(right.to_host()));
    L.report(table, "right: ReLU(Σ p_r)", right, m);
    const float uw = host_matmul(u_host, w_host, 1, 4, 1)[0];
    float sum_relu = 0;
    for (float q : partials) sum_relu += std::max(q, 0.0f);
    L.say("  U = [1, 1, -1, -1], W = [1, 2, 1, 1]ᵀ: UW = ", lesson::fmt(uw), ", partial sums ",
          lesson::fmt(partials), ": ReLU of the sum = ", lesson::fmt(relu({uw})),
          ", sum of the ReLUs = ", lesson::fmt(sum_relu),
          t > 1 ? "" : "  (one rank: one partial, so they agree)");
    L.check_ranks("Σ ReLU(p_r)", wrong,
                  lesson::per_rank(t, [&](int) { return std::vector<float>{sum_relu}; }));
    L.check_ranks("ReLU(Σ p_r)", right, lesson::per_rank(t, [&](int) { return relu({uw}); }));

    // 7. The library's ParallelMLP (GeLU, then SwiGLU) at t ranks against the same module at t = 1:
    //    the same weights from the counter-based RNG, so output, dX and every gradient must agree.
    const double rtol = 1e-5;  // float sums in another order at t > 1
    const int64_t tokens = 3;
    auto compare_mlp = [&](GptConfig cfg) {
      const std::string act = activation_name(cfg.act);
      cfg.validate(t);
      Tensor x(dev, Shape{tokens, cfg.hidden}), dz(dev, Shape{tokens, cfg.hidden});
      dev.fill_random(x, RngKey::from(7, "x"), GlobalIndex::whole(cfg.hidden),
                      Distribution::normal(0, 1));
      dev.fill_random(dz, RngKey::from(7, "dz"), GlobalIndex::whole(cfg.hidden),
                      Distribution::normal(0, 1));
      ParallelMLP tp_mlp(dev, world, "mlp", cfg), one_mlp(dev, solo, "mlp", cfg);
      ParamList tp_params, one_params;
      tp_mlp.collect_params(tp_params, 0.5f, 0.5f);
      one_mlp.collect_params(one_params, 0.5f, 0.5f);
      for (ParamList* ps : {&tp_params, &one_params}) {
        for (Param& q : *ps)
          q.init = Init::Normal;  // biases too, so a bias added t times would show
        init_params(dev, *ps, 7);
      }
      size_t mk = L.mark();
      Tensor z = tp_mlp.forward(x);
      L.say("  forward:  ", L.comm_since(mk));
      L.check_fact("collectives in " + act + " forward", {count_since(mk)}, {one_if_tp});
      mk = L.mark();
      Tensor dx = tp_mlp.backward(dz);
      L.say("  backward: ", L.comm_since(mk));
      L.check_fact("collectives in " + act + " backward", {count_since(mk)}, {one_if_tp});
      const std::vector<float> z_one = one_mlp.forward(x).to_host(),
                               dx_one = one_mlp.backward(dz).to_host();
      L.check_ranks(act + " Z", z, lesson::per_rank(t, [&](int) { return z_one; }), rtol);
      L.check_ranks(act + " dX", dx, lesson::per_rank(t, [&](int) { return dx_one; }), rtol);
      lesson::Table shapes({"parameter", "global", "split", "shard on each rank"});
      for (size_t i = 0; i < tp_params.size(); ++i) {
        const Param& q = tp_params[i];
        const char* split = q.split == Split::Columns ? "columns"
                            : q.split == Split::Rows  ? "rows"
                                                      : "replicated";
        shapes.add({q.name, q.shape.str(), split, q.value.shape().str()});
        const int split_dim = q.split == Split::Rows ? 0 : q.shape.ndim() - 1;
        const Shape shard = q.split == Split::Replicated
                                ? q.shape
                                : q.shape.with(split_dim, q.shape[split_dim] / t);
        L.check_fact(act + " " + q.name + " shard shape", dims(q.value.shape()), dims(shard));
        L.check(act + " " + q.name + " gradient", gather_global(world, q, q.grad),
                one_params[i].grad.to_host(), rtol);
      }
      L.say(shapes.str(), "  output, dX and the ", tp_params.size(),
            " parameter gradients agree with t = 1 (rtol ", rtol, ")");
    };
    L.step("tp::ParallelMLP (lib/model/layers.h), GeLU, at t = " + std::to_string(t) +
           " against the same module at t = 1.");
    GptConfig cfg;
    cfg.hidden = 8;  // ffn = 4h = 32
    compare_mlp(cfg);

    // 8. SwiGLU: gate and up are both column-parallel; silu(X G_r) ⊙ (X U_r) is elementwise, so
    //    local. Backward adds the dX terms of gate and up before the one all-reduce.
    L.step(
        "SwiGLU: gate and up both split by columns, silu(X G_r) ⊙ (X U_r) local; still one "
        "all-reduce each way.");
    cfg.act = Activation::SwiGlu;
    cfg.ffn = 24;
    compare_mlp(cfg);

    // 9. A Qwen3-8B-sized MLP at t = 8: the shapes, from the numbers.
    L.step("The shapes of a Qwen3-8B-sized MLP (SwiGLU, h = 4096, ffn = 12288) at t = 8.");
    GptConfig big;
    big.hidden = 4096;
    big.ffn = 12288;
    big.heads = 32;
    big.kv_heads = 8;
    big.act = Activation::SwiGlu;
    const int tb = 8;
    const int64_t H_ = big.hidden, F = big.inner(), kb = F / tb;
    L.check_fact("Qwen3-8B-sized config valid at t = 8",
                 {static_cast<float>(big.problems(tb).size())}, {0});
    lesson::Table qt(
        {"matrix", "full [in, out]", "split by", "shard on each rank", "rank r holds"});
    const std::string range = " [" + std::to_string(kb) + "·r, " + std::to_string(kb) + "·(r+1))";
    qt.add({"gate W_G (column-parallel)", Shape{H_, F}.str(), "columns", Shape{H_, kb}.str(),
            "columns" + range});
    qt.add({"up W_U (column-parallel)", Shape{H_, F}.str(), "columns", Shape{H_, kb}.str(),
            "columns" + range});
    qt.add({"down W_D (row-parallel)", Shape{F, H_}.str(), "rows", Shape{kb, H_}.str(),
            "rows" + range});
    L.say(qt.str(), "  ", F, " / ", tb, " = ", kb, " columns per rank; per rank ", 3 * H_ * kb,
          " of the ", 3 * H_ * F, " MLP weights (1/", tb, ")");
    // (That the t shards of ffn/t columns tile [0, ffn) is not checked here: with kb = ffn/t it
    // restates the division; "config valid at t = 8" above checks that t divides ffn.)
    L.say("  per token, g all-reduces h = ", H_, " floats; row-first would all-reduce the ", F,
          "-wide intermediate before the activation: ", F / H_,
          "x as many, and every rank would hold all of it.");

    // 10. Summary.
    L.step("Summary.");
    L.say(table.str());
    lesson::write_picture(L, draw_mlp(pic), svg);
    L.say(
        "Column first, row second: the activation (GeLU, SwiGLU) is elementwise, so each rank "
        "applies it to\n"
        "its own columns, and nothing moves between fc1 and fc2. The block costs one all-reduce "
        "forward (g,\n"
        "after fc2) and one backward (f, before fc1). Row first would leave partial sums in front "
        "of the\n"
        "nonlinearity, and those must be summed before it.");
      },
      [](Options& o) {
    lesson::svg_option(
        o, "lesson_04_parallel_mlp.svg",
        "the MLP's f, column-parallel fc1, GeLU, row-parallel fc2 and g with shapes");
    o.flag("forget-allreduce",
           "only show the bug: the last rank's fc2 skips g's all-reduce, under the collective "
           "checker");
  });
}
