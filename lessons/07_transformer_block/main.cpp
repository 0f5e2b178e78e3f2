// Lesson 07 — a transformer block under TP, what it costs to communicate, and a GPT that trains the
// same at every t.
//
// What it shows:
//   1. One pre-norm block = two f/g pairs (attention, then MLP). The ledger records exactly 2
//      all-reduces forward (g after attention and after the MLP) and 2 backward (f before each),
//      each of b·s·h elements, and each rank sends 2(t − 1)/t of that buffer (ring all-reduce).
//   2. The same formulas at a real size: b·s·h = 8192 · 4096 in bf16 is 64 MiB per all-reduce,
//      and a rank sends 64 / 96 / 112 MiB at t = 2 / 4 / 8 while its compute shrinks as 1/t, so
//      communication ÷ compute grows ×1 / ×3 / ×7. That is why TP stays inside one NVLink domain.
//   3. An all-reduce of bf16 partial sums (a row-parallel layer's output under mixed precision):
//      on the wire at t = np, and t = 2, 4, 8 simulated on one rank, against the exact sum and f32.
//      Each of the t − 1 combines rounds once, so the error grows with t; the ledger counts half
//      the bytes. Why the statistics (norms, softmax, the loss, the gradient norm) stay fp32.
//   4. A tiny GPT trained for a few dozen steps at t = np and at t = 1 in the same program: the two
//      loss curves agree to fp32 rounding, and an SVG plot of both is written (build/ by default).
//   5. A picture of the block (--svg): where f and g sit, what each does forward and backward.
//
// What is new since lesson 06: whole blocks and a whole model (lib/model/gpt.h), AdamW with sharded
// state (lib/model/adamw.h), and a training step (lib/model/train.h).
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_07_transformer_block [--step] [--svg P]
//       (also -np 1, 4)
#include <cmath>
#include <cstdio>

#include "core/format.h"
#include "lesson.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model/train.h"
#include "observe/svg_plot.h"
#include "pictures.h"

using namespace tp;

namespace {

// One element of the block's picture: a layer every rank computes whole, a layer split over the
// ranks (its heads or columns), f, g, or the residual add.
enum class Part { Whole, Split, F, G, Add };

// The picture of one pre-norm block: its two halves, attention and MLP, each a row of parts from
// left to right, with f where a half's input enters the split layers and g where their partial
// sums leave; under each f and g what it does forward and backward.
SvgDiagram draw_block(int t) {
  const double h = 34, gap = 22, left = 30;
  SvgDiagram d(900, 60,
               "One transformer block at t = " + std::to_string(t) +
                   ": where f and g sit, forward and backward");
  const std::vector<std::vector<std::pair<std::string, Part>>> rows = {
      {{"x", Part::Whole},
       {"ln_1", Part::Whole},
       {"f", Part::F},
       {"QKV (column)", Part::Split},
       {"attention, heads/t", Part::Split},
       {"proj (row)", Part::Split},
       {"g", Part::G},
       {"+", Part::Add}},
      {{"", Part::Whole},
       {"ln_2", Part::Whole},
       {"f", Part::F},
       {"fc1 (column)", Part::Split},
       {"GeLU", Part::Split},
       {"fc2 (row)", Part::Split},
       {"g", Part::G},
       {"+", Part::Add}}};
  double y = 70;
  for (size_t i = 0; i < rows.size(); ++i) {
    d.text(left, y - 16, i == 0 ? "Attention half: x + attn(ln_1(x))" : "MLP half: + mlp(ln_2(x))",
           "start", 13);
    double x = left, residual_from = left;
    for (size_t j = 0; j < rows[i].size(); ++j) {
      const auto& [label, part] = rows[i][j];
      const double w = part == Part::F || part == Part::G || part == Part::Add ? 30
                       : part == Part::Split                                   ? 118
                                                                               : 64;
      if (j > 0) d.arrow(x - gap + 2, y + h / 2, x - 2, y + h / 2);
      if (part == Part::Split) {
        // A split layer: under its name a band per rank, each holding its heads or columns.
        d.box(x, y, w, h, "white");
        d.text(x + w / 2, y + 15, label, "middle", 11);
        for (int r = 0; r < t; ++r)
          d.box(x + r * w / t, y + h - 11, w / t, 11, lesson::rank_color(r));
      } else if (part == Part::Whole && label.empty()) {
        d.text(x + w / 2, y + h / 2 + 4, "from above", "middle", 10);
      } else {
        const bool fg = part == Part::F || part == Part::G;
        d.box(x, y, w, h, fg ? "#fff3b0" : lesson::kWholeColor, label);
      }
      if (part == Part::F || part == Part::G) {
        const bool f = part == Part::F;
        d.text(x + w / 2, y + h + 14, f ? "fwd: identity" : "fwd: all-reduce", "middle", 10,
               f ? "#555" : "#c0392b");
        d.text(x + w / 2, y + h + 27, f ? "bwd: all-reduce" : "bwd: identity", "middle", 10,
               f ? "#c0392b" : "#555");
      }
      if (part == Part::Add) {
        // The residual: the half's input, around the half, into the add.
        d.line(residual_from + 32, y, residual_from + 32, y - 8, "#888");
        d.line(residual_from + 32, y - 8, x + w / 2, y - 8, "#888");
        d.arrow(x + w / 2, y - 8, x + w / 2, y - 1, "#888");
      }
      x += w + gap;
    }
    y += h + 80;
  }
  const double ly = y - 40;
  lesson::draw_rank_legend(d, left, ly, t);
  lesson::draw_notes(
      d, ly + 32,
      {"f (copy_to_tp_region) before each half's first split layer: x feeds every rank, so in "
       "backward the",
       "ranks' parts of dx are added (all-reduce). g (reduce_from_tp_region) after its last: the "
       "partial sums",
       "are added in forward (all-reduce); every rank already has the whole dY in backward.",
       "Per block: 2 all-reduces forward (g), 2 backward (f), each of b·s·h elements (step 2's "
       "ledger)."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_07_transformer_block",
      "Lesson 07: a transformer block under TP, its communication, and a GPT that trains the same",
      {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn in step 2, its path checked now

    // 1. One block at t = np against the same block at t = 1.
    L.step("One transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)), at t = " +
           std::to_string(t) + ".");
    GptConfig cfg;
    cfg.hidden = 16;
    cfg.heads = 4;
    cfg.ffn = 64;
    cfg.seq = 4;
    const int64_t S = 4, B = 2, h = cfg.hidden, N = S * B;
    L.say("  h = ", h, ", heads = ", cfg.heads, " (", cfg.heads / t, " per rank), ffn = ", cfg.ffn,
          " (", cfg.ffn / t, " columns per rank), s = ", S, ", b = ", B);
    SerialCommunicator solo;
    TransformerBlock block(dev, world, cfg, 0), single(dev, solo, cfg, 0);
    ParamList bp, sp;
    block.collect_params(bp, 0.2f, 0.2f);
    single.collect_params(sp, 0.2f, 0.2f);
    init_params(dev, bp, 7);
    init_params(dev, sp, 7);
    Tensor x(dev, Shape{N, h}), dy(dev, Shape{N, h});
    dev.fill_random(x, RngKey::from(7, "x"), GlobalIndex::whole(h), Distribution::normal(0, 1));
    dev.fill_random(dy, RngKey::from(7, "dy"), GlobalIndex::whole(h), Distribution::normal(0, 1));

    size_t m = L.mark();
    Tensor y = block.forward(x, S, B, 7, 0);
    const auto fwd = std::vector<CommRecord>(world.ledger().records().begin() + m,
                                             world.ledger().records().end());
    m = L.mark();
    Tensor dx = block.backward(dy);
    const auto bwd = std::vector<CommRecord>(world.ledger().records().begin() + m,
                                             world.ledger().records().end());
    Tensor y1 = single.forward(x, S, B, 7, 0), dx1 = single.backward(dy);
    L.check("block output vs t = 1", y.to_host(), y1.to_host(), 1e-5);
    L.check("block dX vs t = 1", dx.to_host(), dx1.to_host(), 1e-5);
    L.check("every parameter gradient vs t = 1", gathered(world, bp, ParamField::Grad),
            gathered(solo, sp, ParamField::Grad), 1e-5);

    // 2. What the ledger saw, against the formula.
    L.step("The ledger: 2 all-reduces forward (g), 2 backward (f), each of b·s·h elements.");
    const double elems = static_cast<double>(N * h), bytes = 4 * elems;
    lesson::Table ledger({"pass", "collective", "elements", "bytes", "sent per rank",
                          "formula 2(t-1)/t · bytes", "where"});
    auto show = [&](const char* pass, const std::vector<CommRecord>& recs) {
      for (const auto& r : recs)
        ledger.add({pass, r.op, std::to_string(r.elements), std::to_string(r.bytes),
                    lesson::fmt(static_cast<float>(r.wire_bytes)),
                    lesson::fmt(static_cast<float>(
                        ring_wire_bytes("all_reduce", t, static_cast<int64_t>(bytes)))),
                    r.label});
    };
    show("forward", fwd);
    show("backward", bwd);
    if (t == 1)
      L.say("  t = 1: the region ops bypass communication, so the ledger is empty.");
    else
      L.say(ledger.str());
    const size_t expected = t == 1 ? 0 : 2;
    L.check_fact("forward all-reduce count", {static_cast<float>(fwd.size())},
                 {static_cast<float>(expected)});
    L.check_fact("backward all-reduce count", {static_cast<float>(bwd.size())},
                 {static_cast<float>(expected)});
    for (const auto& r : fwd)
      L.check_fact("forward elements = b·s·h", {static_cast<float>(r.elements)},
                   {static_cast<float>(elems)});
    for (const auto& r : bwd)
      L.check_fact("backward elements = b·s·h", {static_cast<float>(r.elements)},
                   {static_cast<float>(elems)});
    for (const auto& r : bwd)
      L.check_fact("bytes sent = 2(t-1)/t · 4·b·s·h", {static_cast<float>(r.wire_bytes)},
                   {static_cast<float>(2.0 * (t - 1) / t * bytes)});
    int others = 0;  // collectives that are not all-reduces
    for (const auto* recs : {&fwd, &bwd})
      for (const auto& r : *recs) others += r.op != "all_reduce";
    L.check_fact("collectives other than all-reduce", {static_cast<float>(others)}, {0});
    L.say("  ", others,
          " collectives besides these all-reduces: none of the \"several all-gathers\" per layer",
          " that [A2] §4.2\n  adds to them, and no all-to-all ([A1] §6).");
    lesson::write_picture(L, draw_block(t), svg);

    // 3. The same formulas at a real size.
    L.step("At a real size: b·s·h = 8192 · 4096 in bf16 (2 bytes), per all-reduce and rank.");
    const double big = 8192.0 * 4096.0 * 2.0;
    L.say("  one all-reduce buffer: 8192 · 4096 · 2 B = ", mib(big, 0));
    lesson::Table seed(
        {"t", "compute per rank", "sent per rank per all-reduce", "comm ÷ compute (t = 2 is 1×)"});
    const double base = ring_wire_bytes("all_reduce", 2, static_cast<int64_t>(big)) / (1.0 / 2);
    std::vector<float> sent, ratio;
    for (int tt : {2, 4, 8}) {
      const double w = ring_wire_bytes("all_reduce", tt, static_cast<int64_t>(big));
      const double r = (w / (1.0 / tt)) / base;  // communication over compute, relative to t = 2
      sent.push_back(static_cast<float>(w / (1024.0 * 1024.0)));
      ratio.push_back(static_cast<float>(r));
      seed.add({std::to_string(tt), "1/" + std::to_string(tt), mib(w, 0),
                lesson::fmt(static_cast<float>(r)) + "×"});
    }
    L.say(seed.str());
    L.say(
        "  Doubling t halves each rank's compute but hardly changes what it sends (2(t-1)/t → 2):\n"
        "  keep t small, and inside one machine's NVLink.");
    L.check_fact("MiB sent per rank at t = 2, 4, 8", sent, {64, 96, 112});
    L.check_fact("comm ÷ compute at t = 2, 4, 8", ratio, {1, 3, 7});

    // 4. bf16 partial sums: what a bf16 all-reduce does to a row-parallel layer's output.
    L.step("An all-reduce of bf16 partial sums: at t = " + std::to_string(t) +
           " on the wire, at t = 2, 4, 8 on one rank, against the exact sum and f32.");
    {
      const int64_t n = 4096;
      // Rank q's partial sums: normal(0, 1), rounded to bf16 by the convert kernel.
      auto partial = [&](int q) {
        Tensor p32(dev, Shape{n}), p16(dev, Shape{n}, Dtype::bf16);
        dev.fill_random(p32, RngKey::from(7, "bf16 partial " + std::to_string(q)),
                        GlobalIndex::whole(n), Distribution::normal(0, 1));
        dev.convert(p32, p16);
        return p16;
      };
      // γ_k = k u / (1 − k u), u = 2^−8: the bound of k combines that each round once, relative to
      // Σ|p| (any order of pairwise sums).
      auto gamma = [](int k) { return k * std::ldexp(1.0, -8) / (1.0 - k * std::ldexp(1.0, -8)); };
      // max over elements of |sum − exact| / Σ|p|, for a sum of the partials of ranks 0..tt−1
      // computed on the host in ring order (a reduce-scatter's chain of t − 1 combines, as in
      // NCCL's ring): f32, or bf16 rounded after every combine.
      lesson::Table err({"t", "combines", "bf16 max |err| / Σ|p|", "bound γ(t-1)",
                         "f32 max |err| / Σ|p|", "where"});
      bool within = true;  // every t of the simulation
      std::string worst;
      for (int tt : {2, 4, 8}) {
        std::vector<std::vector<float>> p;
        for (int q = 0; q < tt; ++q) p.push_back(partial(q).to_host());
        double e16 = 0, e32 = 0;
        for (int64_t i = 0; i < n; ++i) {
          double exact = 0, abs_sum = 0;
          float f32 = 0, b16 = 0;
          for (int q = 0; q < tt; ++q) {
            exact += p[q][i];
            abs_sum += std::fabs(p[q][i]);
            f32 += p[q][i];
            b16 = round_to_bf16(b16 + p[q][i]);  // one ring step: add in f32, store bf16
          }
          e16 = std::max(e16, std::fabs(b16 - exact) / abs_sum);
          e32 = std::max(e32, std::fabs(f32 - exact) / abs_sum);
        }
        if (!(e16 <= gamma(tt - 1))) {
          within = false;
          worst += " t = " + std::to_string(tt) + ": " + lesson::fmt(float(e16)) + " > " +
                   lesson::fmt(float(gamma(tt - 1)));
        }
        char a[32], b[32], c[32];
        std::snprintf(a, sizeof a, "%.2e", e16);
        std::snprintf(b, sizeof b, "%.2e", gamma(tt - 1));
        std::snprintf(c, sizeof c, "%.2e", e32);
        err.add({std::to_string(tt), std::to_string(tt - 1), a, b, c, "one rank (simulated)"});
      }
      // The real thing at t = np: the communicator's bf16 all-reduce (MPI: a user-defined op that
      // adds in f32 and rounds once per combine) next to the f32 one on the same values.
      Tensor mine = partial(L.rank()), mine32(dev, Shape{n});
      dev.convert(mine, mine32);
      const size_t m = L.mark();
      world.all_reduce(mine);
      world.all_reduce(mine32);
      const CommRecord r16 = world.ledger().records()[m], r32 = world.ledger().records()[m + 1];
      std::vector<std::vector<float>> all;
      for (int q = 0; q < t; ++q) all.push_back(partial(q).to_host());
      const std::vector<float> got = mine.to_host(), got32 = mine32.to_host();
      double e16 = 0, e32 = 0;
      for (int64_t i = 0; i < n; ++i) {
        double exact = 0, abs_sum = 0;
        for (int q = 0; q < t; ++q) {
          exact += all[q][i];
          abs_sum += std::fabs(all[q][i]);
        }
        e16 = std::max(e16, std::fabs(got[i] - exact) / abs_sum);
        e32 = std::max(e32, std::fabs(got32[i] - exact) / abs_sum);
      }
      char a[32], b[32], c[32];
      std::snprintf(a, sizeof a, "%.2e", e16);
      std::snprintf(b, sizeof b, "%.2e", gamma(t - 1));
      std::snprintf(c, sizeof c, "%.2e", e32);
      err.add({std::to_string(t), std::to_string(t - 1), a, b, c, "on the wire, " + world.name()});
      L.say(err.str());
      L.say("  The ledger: the bf16 all-reduce of ", n, " elements is ", r16.bytes, " B (",
            lesson::fmt(static_cast<float>(r16.wire_bytes)), " B sent per rank), the f32 one ",
            r32.bytes, " B (", lesson::fmt(static_cast<float>(r32.wire_bytes)), " B).");
      L.say(
          "  Each combine rounds to bf16 (8 significant bits), so the error grows with the number\n"
          "  of partial sums, up to 2^-8 of Σ|p| per combine; f32 holds them exactly or to 2^-24. "
          "Fine for\n"
          "  activations, whose next layer rounds them to bf16 anyway, and it is why everything "
          "that\n"
          "  sums many terms or needs range stays f32 under mixed precision: LayerNorm/RMSNorm "
          "mean\n"
          "  and variance, the softmax's max and Σ e^x (in attention and in the "
          "vocabulary-parallel\n"
          "  cross-entropy, whose three all-reduces are f32), the loss, and the gradient norm.");
      L.check_true("bf16 sums within γ(t-1) Σ|p| at t = 2, 4, 8 (simulated)", within, worst);
      L.check_true("bf16 all-reduce on the wire within γ(t-1) Σ|p|", e16 <= gamma(t - 1),
                   lesson::fmt(float(e16)) + " vs " + lesson::fmt(float(gamma(t - 1))));
      L.check_fact("bf16 ledger bytes = half of f32's", {static_cast<float>(2 * r16.bytes)},
                   {static_cast<float>(r32.bytes)});
    }

    // 5. A tiny GPT at t = np and at t = 1, trained side by side.
    const int64_t steps = 40;
    L.step("A tiny GPT, trained " + std::to_string(steps) + " steps at t = " + std::to_string(t) +
           " and at t = 1 in this same program.");
    const GptConfig g = lesson_gpt(/*layers=*/2, /*hidden=*/32, /*vocab=*/32, /*seq=*/16);
    MarkovSource data(g.vocab, 11);
    L.say("  model: ", g.str(), "; data: ", data.describe());
    Gpt tp_model(dev, world, g), one(dev, solo, g);
    tp_model.init(11);
    one.init(11);
    AdamWParams hp;
    hp.lr = 3e-3f;
    AdamW tp_opt(dev, tp_model.params(), hp), one_opt(dev, one.params(), hp);
    std::vector<double> xs, loss_tp, loss_one;
    lesson::Table curve(
        {"step", "loss at t = " + std::to_string(t), "loss at t = 1", "relative difference"});
    double worst = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const Batch b = data.batch(s, 4, g.seq);
      const StepResult a = train_step(world, dev, tp_model, tp_opt, b, 11, s, hp.lr, 1.0f);
      const StepResult c = train_step(solo, dev, one, one_opt, b, 11, s, hp.lr, 1.0f);
      const double rel = std::fabs(a.loss - c.loss) / std::fabs(c.loss);
      worst = std::max(worst, rel);
      xs.push_back(static_cast<double>(s + 1));
      loss_tp.push_back(a.loss);
      loss_one.push_back(c.loss);
      if (s % 8 == 0 || s + 1 == steps) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2e", rel);
        curve.add({std::to_string(s + 1), lesson::fmt(a.loss), lesson::fmt(c.loss), buf});
      }
    }
    L.say(curve.str());
    char worst_s[64];
    std::snprintf(worst_s, sizeof worst_s, "%.2e", worst);
    L.say("  largest relative difference over ", steps, " steps: ", worst_s,
          " (fp32 rounding: a row-parallel sum is added in a different order at t > 1)");
    L.say("  Both runs use the same learning rate, ", lesson::fmt(hp.lr),
          ": TP computes the same function as one device, so it needs\n"
          "  none of the 2-4× learning-rate increase [A4] §4.1 recommends, and no rank needs "
          "\"the full\n"
          "  gradient\": each rank's gradient of its own shard is complete (lesson 02).");
    L.check("loss curve at t = np vs t = 1", std::vector<float>(loss_tp.begin(), loss_tp.end()),
            std::vector<float>(loss_one.begin(), loss_one.end()), 1e-4);
    L.check_true("the loss went down", loss_tp.back() < loss_tp.front() - 0.1);

    // 6. The plot.
    L.step("Both curves in one picture.");
    const std::string plot = L.options().get_text("plot");
    if (L.is_root()) {
      write_text_file(plot,
                      svg_line_plot("Training loss: t = " + std::to_string(t) + " vs t = 1", "step",
                                    "loss (nats)",
                                    {{"t = " + std::to_string(t), xs, loss_tp, "#1f77b4", false},
                                     {"t = 1", xs, loss_one, "#d62728", true}}));
    }
    L.say("  wrote ", plot, " (the dashed t = 1 curve lies on the solid one)");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_07_fg.svg", "the block's f and g");
    o.path("plot", lesson::default_output("lesson_07_loss.svg"),
           "where to write the SVG plot of both loss curves (default: build/ when run from the "
           "repository, else the folder it is run from)");
  });
}
