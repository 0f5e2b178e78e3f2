// Lesson 05 — attention under tensor parallelism: split by heads.
//
// What it shows: every attention head is computed independently of the others, so the heads are the
// natural unit to split. W_Q, W_K and W_V are column-parallel with each rank's columns being whole
// heads; softmax attention then runs locally on those heads; the output projection W_O is
// row-parallel. Like the MLP, one all-reduce forward (g, after W_O) and one backward (f, where the
// dX terms of q, k and v are added first).
//
//   1. The shapes of a Qwen3-8B-like attention (h = 4096, 32 query heads, 8 key/value heads of
//      dim 128, grouped-query attention) at t = 8: 4 query heads and 1 KV head per rank, W_Q shard
//      [4096, 512], W_K and W_V shards [4096, 128], W_O shard [512, 4096]. The 4 query heads of a
//      rank are exactly the ones that read its KV head.
//   2. tp::ParallelAttention at t = np on a small config (h = 16, 4 heads of dim 4, S = 4), against
//      the same module at t = 1: output, dX and every parameter gradient.
//   3. The divisibility rule: a head count not divisible by t is refused by GptConfig::validate.
//
// What is new since lesson 04: heads as the unit of the split, grouped-query attention, and the
// configuration check (GptConfig::problems / validate).
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_05_parallel_attention [--step]   (also -np 1 or 4)
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "lesson.h"
#include "model/config.h"
#include "model/layers.h"
#include "pictures.h"

using namespace tp;

namespace {

// What steps 1 and 2 computed, for the picture.
struct HeadsPicture {
  // Step 2's small attention at the run's t: per rank (gathered) its first query head, their
  // count, its first KV head, their count; the shard shapes; the sizes.
  int t = 1;
  std::vector<std::vector<float>> held;
  std::string wq, wk, wo;
  int64_t h = 0, d = 0, heads = 0, kv = 0;
  // Step 1's Qwen3-8B-like attention at tb ranks: query heads, KV heads, per rank, and shards.
  int tb = 8;
  int64_t big_heads = 0, big_kv = 0, nq = 0, nkv = 0, remote = 0;
  std::string big_wq, big_wk, big_wo;
};

std::string head_range(const std::string& what, float first, float n) {
  const int a = static_cast<int>(first), k = static_cast<int>(n);
  return what + (k == 1 ? " " + std::to_string(a)
                        : "s " + std::to_string(a) + "–" + std::to_string(a + k - 1));
}

// Each rank's path through the layer (its query and KV heads, local attention, its rows of W_O,
// g), then the heads of the big configuration coloured by rank, each query head joined to the KV
// head it reads.
SvgDiagram draw_heads(const HeadsPicture& p) {
  using lesson::ChainBox;
  const std::string fg = "#fff3b0";
  SvgDiagram d(900, 60,
               "Attention split by heads at t = " + std::to_string(p.t) +
                   ": column-parallel q, k, v, local attention, row-parallel W_O");
  double y = lesson::draw_rank_legend(d, 30, 40, p.t) + 4;
  d.text(30, y + 12,
         "Step 2: h = " + std::to_string(p.h) + ", " + std::to_string(p.heads) + " query heads, " +
             std::to_string(p.kv) + " KV heads of dim " + std::to_string(p.d),
         "start", 13);
  y += 24;
  for (int r = 0; r < p.t; ++r, y += 40) {
    const std::vector<float>& h = p.held[r];
    const std::string c = lesson::rank_color(r);
    d.text(90, y + 19, "rank " + std::to_string(r), "end", 11);
    lesson::draw_chain(d, 100, y, 28,
                       {{"x whole", lesson::kWholeColor, 60},
                        {"f", fg, 26},
                        {head_range("query head", h[0], h[1]) + ", W_Q " + p.wq, c, 215},
                        {head_range("KV head", h[2], h[3]) + ", W_K, W_V " + p.wk, c, 205},
                        {"attention, local", c, 100},
                        {"W_O rows " + p.wo, c, 100},
                        {"g", fg, 26}},
                       14);
  }
  y = lesson::draw_notes(
          d, y + 4,
          {"f: identity forward, all-reduce of the q, k, v dX terms backward; g: all-reduce of "
           "W_O's partial sums forward.",
           "Attention itself moves nothing: a rank's query heads read only KV heads it holds."}) +
      16;

  // The big configuration: query heads in a row, KV heads under them, each line a "reads".
  const int64_t group = p.big_heads / p.big_kv;
  const double qw = 24, left = 30;
  d.text(left, y + 12,
         "Step 1: Qwen3-8B-like, " + std::to_string(p.big_heads) + " query heads and " +
             std::to_string(p.big_kv) + " KV heads (GQA, " + std::to_string(group) +
             " query heads per KV head) at t = " + std::to_string(p.tb),
         "start", 13);
  y = lesson::draw_rank_legend(d, left, y + 22, p.tb) + 4;
  const double ky = y + 70;
  for (int64_t j = 0; j < p.big_heads; ++j) {
    const double x = left + 60 + j * qw;
    const int64_t kv = j / group;
    const double kx = left + 60 + (kv + 0.5) * group * qw;
    d.line(x + qw / 2, y + 20, kx, ky, "#888");
    d.box(x, y, qw, 20, lesson::rank_color(static_cast<int>(j / p.nq)), std::to_string(j));
  }
  for (int64_t k = 0; k < p.big_kv; ++k)
    d.box(left + 60 + k * group * qw + 4, ky, group * qw - 8, 20,
          lesson::rank_color(static_cast<int>(k / p.nkv)), "KV " + std::to_string(k));
  d.text(left + 50, y + 14, "query", "end", 11);
  d.text(left + 50, ky + 14, "KV", "end", 11);
  lesson::draw_notes(d, ky + 40,
                     {"Per rank: " + std::to_string(p.nq) + " query heads and " +
                          std::to_string(p.nkv) + " KV head; W_Q " + p.big_wq + ", W_K and W_V " +
                          p.big_wk + ", W_O " + p.big_wo + " (its query heads' rows).",
                      "Query heads reading a KV head on another rank: " + std::to_string(p.remote) +
                          ". Both head counts must divide by t."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_05_parallel_attention", "Lesson 05: parallel attention, split by heads",
      {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn in step 4, its path checked now
    HeadsPicture pic;
    auto f = [](int64_t v) { return static_cast<float>(v); };
    auto norm = [](const std::vector<float>& v) {  // ‖v‖₂
      double s = 0;
      for (float x : v) s += static_cast<double>(x) * x;
      return std::sqrt(s);
    };
    auto range = [](int64_t first, int64_t n) {  // "[4, 8)" or "3" for one
      return n == 1 ? std::to_string(first)
                    : "[" + std::to_string(first) + ", " + std::to_string(first + n) + ")";
    };

    // 1. Shapes at t = 8, from the numbers of a Qwen3-8B-like configuration.
    L.step("The shapes of a Qwen3-8B-like attention (GQA: 32 query heads, 8 KV heads) at t = 8.");
    GptConfig big;
    big.hidden = 4096;
    big.heads = 32;
    big.kv_heads = 8;
    big.ffn = 12288;
    big.act = Activation::SwiGlu;
    const int tb = 8;
    const int64_t H = big.hidden, hd = big.head_dim(), nq = big.heads / tb, nkv = big.kv() / tb;
    const int64_t group = big.heads / big.kv();  // query heads that share one KV head
    L.check_fact("config valid at t = 8", {f(big.problems(tb).size())}, {0});
    L.say("  h = ", H, ", head_dim = h / heads = ", hd, ";  per rank: ", big.heads, " / ", tb,
          " = ", nq, " query heads and ", big.kv(), " / ", tb, " = ", nkv, " KV head",
          nkv == 1 ? "" : "s");
    lesson::Table shapes(
        {"matrix", "full [in, out]", "split by", "shard on each rank", "rank r holds"});
    shapes.add({"W_Q (column-parallel)", Shape{H, big.heads * hd}.str(), "columns",
                Shape{H, nq * hd}.str(),
                "query heads [" + std::to_string(nq) + "r, " + std::to_string(nq) + "(r+1))"});
    for (const char* name : {"W_K (column-parallel)", "W_V (column-parallel)"})
      shapes.add(
          {name, Shape{H, big.kv() * hd}.str(), "columns", Shape{H, nkv * hd}.str(), "KV head r"});
    shapes.add({"W_O (row-parallel)", Shape{big.heads * hd, H}.str(), "rows",
                Shape{nq * hd, H}.str(), "the rows of its query heads"});
    L.say(shapes.str(), "  ", tb, " shards of ", Shape{H, nq * hd}.str(),
          " tile W_Q; a W_O shard has one row per", " column of the W_Q shard");
    // Query head j reads KV head j / group. Count the heads whose KV head sits on another rank.
    int64_t remote = 0;
    for (int64_t j = 0; j < big.heads; ++j) remote += (j / nq) != (j / group) / nkv;
    L.say("  query head j reads KV head j / ", group, ": rank r's query heads [", nq, "r, ", nq,
          "(r+1)) all read KV head r, so attention needs nothing from another rank (", remote,
          " of ", big.heads, " heads read a remote KV head)");
    L.check_fact("query heads whose KV head is on another rank", {f(remote)}, {0});
    pic.tb = tb;
    pic.big_heads = big.heads;
    pic.big_kv = big.kv();
    pic.nq = nq;
    pic.nkv = nkv;
    pic.remote = remote;
    pic.big_wq = Shape{H, nq * hd}.str();
    pic.big_wk = Shape{H, nkv * hd}.str();
    pic.big_wo = Shape{nq * hd, H}.str();
    // (The shard shapes above are not counted as facts: nq·hd against heads·hd/t restates the
    // division that produced nq; step 2 runs the real module against t = 1.)

    // 2. A small computed example at t = np against t = 1.
    GptConfig cfg;
    cfg.hidden = 16;
    cfg.heads = 4;
    cfg.kv_heads = t == 4 ? 4 : 2;  // KV heads must split over t too
    cfg.seq = 4;
    cfg.validate(t);
    const int64_t S = 4, B = 1, h = cfg.hidden, d = cfg.head_dim();
    const int64_t q_r = cfg.heads / t, kv_r = cfg.kv() / t;
    L.step("tp::ParallelAttention at t = " + std::to_string(t) + ": h = " + std::to_string(h) +
           ", " + std::to_string(cfg.heads) + " query heads, " + std::to_string(cfg.kv()) +
           " KV heads of dim " + std::to_string(d) + ", S = " + std::to_string(S) +
           ", B = " + std::to_string(B) + "; against t = 1.");
    SerialCommunicator solo;
    ParallelAttention attn(dev, world, "attn", cfg), single(dev, solo, "attn", cfg);
    ParamList tp_params, one_params;
    attn.collect_params(tp_params, 0.3f, 0.3f);
    single.collect_params(one_params, 0.3f, 0.3f);
    for (ParamList* ps : {&tp_params, &one_params}) {
      for (Param& p : *ps) p.init = Init::Normal;  // biases too, so none of them hides
      init_params(dev, *ps, 11);
    }
    Tensor x(dev, Shape{S * B, h}), dy(dev, Shape{S * B, h});
    dev.fill_random(x, RngKey::from(11, "x"), GlobalIndex::whole(h), Distribution::normal(0, 1));
    dev.fill_random(dy, RngKey::from(11, "dy"), GlobalIndex::whole(h), Distribution::normal(0, 1));

    // Which heads this rank holds, read from its shards: the first column of W_Q / W_K divided by d.
    auto param = [](const ParamList& ps, const std::string& name) -> const Param& {
      for (const Param& p : ps)
        if (p.name == name) return p;
      throw Error("no parameter " + name);
    };
    const Param& wq = param(tp_params, "attn.q.weight");
    const Param& wk = param(tp_params, "attn.k.weight");
    Tensor owned = Tensor::from_host(
        dev, Shape{4},
        {f(wq.offset / d), f(wq.value.cols() / d), f(wk.offset / d), f(wk.value.cols() / d)});
    const auto held = L.gather(owned);
    lesson::Table heads(
        {"rank", "query heads", "KV heads", "W_Q shard", "W_K, W_V shard", "W_O shard"});
    for (size_t r = 0; r < held.size(); ++r)
      heads.add({std::to_string(r), range(held[r][0], held[r][1]), range(held[r][2], held[r][3]),
                 wq.value.shape().str(), wk.value.shape().str(),
                 param(tp_params, "attn.c_proj.weight").value.shape().str()});
    pic.t = t;
    pic.held = held;
    pic.wq = wq.value.shape().str();
    pic.wk = wk.value.shape().str();
    pic.wo = param(tp_params, "attn.c_proj.weight").value.shape().str();
    pic.h = h;
    pic.d = d;
    pic.heads = cfg.heads;
    pic.kv = cfg.kv();
    int64_t remote_small = 0;
    for (int64_t j = 0; j < cfg.heads; ++j)
      remote_small += (j / q_r) != (j / (cfg.heads / cfg.kv())) / kv_r;
    L.say(heads.str(), "  query head j reads KV head j / ", cfg.heads / cfg.kv(),
          ", always on its own rank (", remote_small, " remote)");
    L.check_fact("query heads whose KV head is on another rank (small config)", {f(remote_small)},
                 {0});
    L.check_fact_ranks("heads held", owned, lesson::per_rank(t, [&](int r) {
                         return std::vector<float>{f(r * q_r), f(q_r), f(r * kv_r), f(kv_r)};
                       }));

    const double rtol = 1e-5;  // float sums in another order at t > 1
    std::vector<std::string> header = {"step"};
    for (int i = 0; i < t; ++i) header.push_back("rank " + std::to_string(i));
    header.push_back("communication");
    lesson::Table table(header);
    auto last_row = [&](const Tensor& v) {  // the last token's first 4 features, for display
      Tensor out(dev, Shape{1, 4});
      dev.copy_columns(v.view(S * B - 1, S * B), 0, out, 0, 4);
      return out;
    };
    L.say(
        "  y and dx are (S·B, h) and whole on every rank; shown: the last token's first 4 "
        "features.");
    size_t m = L.mark();
    Tensor y = attn.forward(x, S, B);
    L.report(table, "forward: y[last token, :4]", last_row(y), m);
    const size_t fwd = L.mark() - m;
    int all_gathers = 0;  // [A4] says attention needs one; count them
    for (size_t i = m; i < m + fwd; ++i)
      all_gathers += world.ledger().records()[i].op == "all_gather";
    m = L.mark();
    Tensor dx = attn.backward(dy);
    L.report(table, "backward: dx[last token, :4]", last_row(dx), m);
    const size_t bwd = L.mark() - m;
    const std::vector<float> y_one = single.forward(x, S, B).to_host(),
                             dx_one = single.backward(dy).to_host();
    L.check_fact("collectives in forward", {f(fwd)}, {t > 1 ? 1.0f : 0.0f});
    L.check_fact("collectives in backward", {f(bwd)}, {t > 1 ? 1.0f : 0.0f});
    L.check_fact("all-gathers in forward", {f(all_gathers)}, {0});
    L.check_ranks("y", y, lesson::per_rank(t, [&](int) { return y_one; }), rtol);
    L.check_ranks("dx", dx, lesson::per_rank(t, [&](int) { return dx_one; }), rtol);
    // The key bias moves every score of a query row by the same q·b_k, which softmax ignores: its
    // gradient is zero in exact arithmetic and float noise here, on both sides, in whatever order
    // each GEMM summed. It is checked against the scale of the q and v bias gradients instead.
    double bias_scale = 0;
    for (const Param& p : one_params)
      if (p.name == "attn.q.bias" || p.name == "attn.v.bias")
        bias_scale = std::max(bias_scale, norm(p.grad.to_host()));
    for (size_t i = 0; i < tp_params.size(); ++i) {
      const std::vector<float> got = gather_global(world, tp_params[i], tp_params[i].grad),
                               want = one_params[i].grad.to_host();
      if (tp_params[i].name == "attn.k.bias")
        L.check("attn.k.bias gradient: float noise, ≤ 1e-5 of the q and v bias gradients",
                {static_cast<float>(std::max(norm(got), norm(want)) / bias_scale)}, {0}, 1e-5);
      else
        L.check(tp_params[i].name + " gradient", got, want, rtol);
    }
    L.say("  t = 1 gives y[last token, :4] = ",
          lesson::fmt(std::vector<float>(y_one.end() - h, y_one.end() - h + 4)),
          ";  y, dx and the ", tp_params.size(),
          " parameter gradients (q, k, v, c_proj: weight and bias) agree with", " t = 1 (rtol ",
          rtol, ")");

    // 3. The rule: every rank must own whole heads, query and KV alike.
    L.step(
        "The divisibility rule: heads and KV heads must both divide by t (GptConfig::problems / "
        "validate).");
    const int tbad = 4;
    GptConfig six;  // 6 heads of dim 4
    six.hidden = 24;
    six.heads = 6;
    GptConfig gqa;  // 8 query heads, 2 KV heads
    gqa.hidden = 16;
    gqa.heads = 8;
    gqa.kv_heads = 2;
    const float cols_per_rank = f(six.hidden) / tbad;  // the W_Q split alone would be legal...
    L.say("  heads = 6 at t = 4: W_Q's ", six.hidden, " columns split as ", cols_per_rank,
          " per rank, which is ", cols_per_rank / six.head_dim(), " heads of dim ", six.head_dim(),
          ": a head would straddle two ranks");
    L.check_fact("heads per rank for heads = 6, t = 4", {cols_per_rank / six.head_dim()}, {1.5f});
    for (const GptConfig* c : {&six, &gqa}) {
      const std::vector<std::string> problems = c->problems(tbad);
      L.say("  ", c->str(), ", t = ", tbad, ": ", problems.size(), " problem",
            problems.size() == 1 ? "" : "s");
      std::string message;
      int exit_code = 0;
      try {
        c->validate(tbad);
      } catch (const Error& e) {
        message = e.what();
        exit_code = e.exit_code();
      }
      L.say("    tp::Error (exit code ", exit_code, "): ", message);
      const std::string bad = c == &six ? "heads=6" : "kv_heads=2";
      const bool names_values =
          message.find(bad) != std::string::npos && message.find("t=4") != std::string::npos;
      L.check_fact("validate refuses " + bad + " at t = 4 as bad input", {f(exit_code)}, {2});
      L.check_true("the message names " + bad + " and t=4", names_values);
      L.check_fact("problems for " + bad, {f(problems.size())}, {c == &six ? 2.0f : 1.0f});
    }

    // 4. Summary.
    L.step("Summary.");
    L.say(table.str());
    if (L.is_root()) lesson::write_picture(L, draw_heads(pic), svg);  // rank 0 has the gather
    L.say(
        "Attention splits by heads: q, k and v are column-parallel with whole heads on each rank "
        "(with GQA,\n"
        "a rank's query heads are the ones that read its KV heads), softmax attention is local, "
        "and the\n"
        "output projection is row-parallel. One all-reduce forward (g, after W_O) and one backward "
        "(f, after\n"
        "adding the dX terms of q, k and v). Both heads and KV heads must be divisible by t.\n"
        "\n"
        "[A4] §4.2 says the attention scores need an all-gather. Under TP they need none: each "
        "rank\n"
        "holds q, k and v of its own whole heads, and the forward's only collective is g's "
        "all-reduce\n"
        "after W_O (checked: " +
        std::to_string(all_gathers) +
        " all-gathers). An all-gather appears only with sequence parallelism (lesson 08),\n"
        "in front of the q, k, v projection, where it gathers the sequence-split input, not the "
        "scores.");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_05_parallel_attention.svg",
                       "the heads split over the ranks, GQA's KV heads and W_O's row split");
  });
}
