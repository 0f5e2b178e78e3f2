// Lesson 13 — [A1]'s experiment: a 12-layer GPT (h = 512, MLP 2048) trained at t = 1, 2 and 4.
//
// What it shows:
//   1. The model of [A1]'s table, and the picture: its shape, and what each rank holds of one
//      block at the largest t (column-split, row-split and whole parameters, drawn to scale).
//   2. The model trained from the same initial weights on the same batches at t = 1, 2, 4
//      (1, 2, …, np), each on a sub-communicator of the world (world.split) while the ranks not in
//      it wait without spinning. Per t: wall time and tokens/s, and each rank's CPU time.
//   3. The peak device memory of each rank (and as % of t = 1), split into weights + gradients +
//      AdamW state, the activations kept for backward and the rest.
//   4. TP does not change the loss: the t = 2 and t = 4 curves equal t = 1 to fp32 rounding. The
//      table of [A1] reports 2.625 at t = 1 and 2.324 at t = 4; that difference cannot come from TP.
// [A1] §4's two designs of a TP region (plain TP against sequence parallelism) are lesson 13b.
//
// What is new since the earlier lessons: nothing in lib/. A whole training run per t in one
// program, on sub-communicators of the world (lessons/train_runs.h); the device's peak-memory
// counter (Device::memory().peak, reset_peak()); and ranks that wait by sleeping, not by polling
// a core (SleepingWaits, lessons/sleeping_waits.h; --spin for MPI's own blocking calls), which an
// oversubscribed laptop needs.
//
// Run:  make lessons && mpirun -np 4 build/bin/lesson_13_train_gpt [--steps 40] [--step]
//       [--precision bf16: one more run at the largest t in bf16, its curve beside fp32's]
//       (also -np 1, 2, 8: t = 1, 2, … up to np)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/format.h"
#include "core/kernel.h"
#include "lesson.h"
#include "model/data.h"
#include "model/gpt.h"
#include "observe/svg_plot.h"
#include "observe/timer.h"
#include "pictures.h"
#include "train_runs.h"

using namespace tp;
using lesson::Run;
using lesson::Setup;

namespace {

// Losses are printed to 5 decimals: fp32 sums in another order (another t, another BLAS kernel)
// move a loss of about 5 by a few 1e-7, so a sixth decimal would show that rounding, not the curve.
constexpr int kLossDecimals = 5;

// "ranks 1–3", "rank 1", "ranks 2–3".
std::string ranks_from(int first, int last) {
  if (first == last) return "rank " + std::to_string(first);
  return "ranks " + std::to_string(first) + "–" + std::to_string(last);
}

// The picture: the model's shape, and what each of t ranks holds of block 0's parameters, each
// drawn to scale (8 elements a unit), cut as it is split and coloured by the rank that holds it.
void draw_block_picture(lesson::Lesson& L, const std::string& path, const GptConfig& cfg,
                        const ParamList& params, int t) {
  SvgDiagram d(900, 60,
               "[A1]'s GPT and what each of t = " + std::to_string(t) +
                   " ranks holds of one block (to scale)");
  double y = lesson::draw_rank_legend(d, 30, 40, t);
  y = lesson::draw_notes(
      d, y + 8,
      {"model: wte (" + std::to_string(cfg.vocab) + " × " + std::to_string(cfg.hidden) +
           ") + wpe → " + std::to_string(cfg.layers) +
           " blocks (ln_1, attention, ln_2, MLP) → ln_f → head (tied to wte)",
       "block 0's parameters; every block holds the same:"});
  const double unit = 1.0 / 8, top = y + 6;
  const std::string block = "transformer.h.0.";
  double x = 30, row_h = 0;
  std::vector<const Param*> vectors;
  for (const Param& p : params) {
    if (p.name.rfind(block, 0) != 0) continue;
    if (p.shape.ndim() == 1) {
      vectors.push_back(&p);
      continue;
    }
    const double rows = static_cast<double>(p.shape[0]), cols = static_cast<double>(p.shape[1]);
    const double w = cols * unit, h = rows * unit;
    const std::string name = p.name.substr(block.size());
    d.text(x, top + 12, name, "start", 11);
    d.text(x, top + 26,
           fixed(rows, 0) + " × " + fixed(cols, 0) +
               (p.split == Split::Columns ? ", columns ÷ t"
                : p.split == Split::Rows  ? ", rows ÷ t"
                                          : ", whole"),
           "start", 10);
    for (int r = 0; r < t; ++r) {
      if (p.split == Split::Columns)
        d.box(x + r * w / t, top + 34, w / t, h, lesson::rank_color(r));
      else if (p.split == Split::Rows)
        d.box(x, top + 34 + r * h / t, w, h / t, lesson::rank_color(r));
    }
    if (p.split == Split::Replicated) d.box(x, top + 34, w, h, lesson::kWholeColor);
    x += std::max(w, 112.0) + 14;
    row_h = std::max(row_h, h + 34);
  }
  // The vectors (norms, biases): one bar each, cut as they are split.
  y = top + row_h + 20;
  for (const Param* p : vectors) {
    const double w = static_cast<double>(p->shape[0]) * unit;
    d.text(30, y + 9, p->name.substr(block.size()), "start", 10);
    if (p->split == Split::Columns)
      for (int r = 0; r < t; ++r) d.box(200 + r * w / t, y, w / t, 10, lesson::rank_color(r));
    else
      d.box(200, y, w, 10, lesson::kWholeColor);
    y += 14;
  }
  lesson::draw_notes(
      d, y + 10,
      {"Attention's q, k, v and the MLP's first layer are split by columns (heads, hidden units),",
       "the two output projections by rows; the norms and the row-parallel biases stay whole on",
       "every rank: that, and the activations around the regions, is why memory falls less than "
       "1/t."});
  lesson::write_picture(L, d, path);
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_13_train_gpt", "Lesson 13: [A1]'s 12-layer GPT trained at t = 1, 2, 4",
      {4, 1, 2, 8},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int np = L.size();
    const Options& o = L.options();
    const std::string svg = lesson::svg_path(L);
    Setup s = lesson::a1_setup(o);
    s.spin = o.get_flag("spin");
    std::vector<int> ts;
    for (int t = 1; t <= np; t *= 2) ts.push_back(t);
    const int T = ts.back();

    // Every flag and every t checked before anything communicates; all problems at once.
    std::vector<std::string> problems;
    if (s.batch < 1)
      problems.push_back("--batch=" + std::to_string(s.batch) + " must be 1 or more");
    for (const auto& p : s.cfg.problems(T)) problems.push_back(p);
    if (!problems.empty()) {
      std::string all;
      for (size_t i = 0; i < problems.size(); ++i) all += (i ? "; " : "") + problems[i];
      TP_CHECK_INPUT(false, all);
    }

    // --plot is written at the end; a placeholder now finds a file that cannot be written (a full
    // disk, a read-only folder) before the training, not after it.
    const std::string plot = o.get_text("plot");
    if (L.is_root())
      write_text_file(plot, svg_placeholder("lesson 13 writes its loss curves here when it ends"),
                      "--plot " + plot);

    // 1. The model and the plan.
    L.step("[A1]'s model: 12 layers, h = 512, MLP 2048, 8 heads; trained at t = 1 … " +
           std::to_string(T) + " on the same batches.");
    MarkovSource data(s.cfg.vocab, s.seed);
    int64_t n_params = 0, replicated = 0;
    {
      SerialCommunicator solo;
      Gpt probe(dev, solo, s.cfg);  // t = 1: every parameter whole (not initialised: shapes only)
      for (const Param& p : probe.params()) {
        n_params += p.shape.numel();
        if (p.split == Split::Replicated) replicated += p.shape.numel();
      }
      draw_block_picture(L, svg, s.cfg, probe.params(), T);
    }
    L.say("  model: ", s.cfg.str(), ", ", n_params, " parameters (", replicated,
          " of them replicated under TP: norms, row-parallel biases, wpe)");
    L.say("  data: ", data.describe());
    L.say("  ", s.steps, " steps of batch ", s.batch, " × seq ", s.cfg.seq, " = ",
          s.batch * s.cfg.seq, " tokens, AdamW lr ", s.lr, " (linear warm-up over ", s.warmup,
          " steps), gradients clipped to norm 1, seed ", s.seed);
    const double gflop = 6.0 * static_cast<double>(n_params * s.batch * s.cfg.seq) / 1e9;
    L.say("  one step ≈ 6 · parameters · tokens = ", fixed(gflop, 0),
          " GFLOP (forward 2, backward 4 per parameter and token).");
    L.say(
        "  [A1]'s runs took 39–68 minutes on GPUs. One CPU core does at most about a hundred\n"
        "  GFLOP/s, so a step takes most of a second here: the lesson trains ",
        s.steps, " steps at each t\n",
        s.steps >= 20 ? "  (--steps for more), enough for the loss to fall by more than a nat and "
                        "for every step\n"
                        "  to be compared across t."
                      : "  (--steps; the loss takes about 20 to fall by a nat), and compares every "
                        "step across t.");
    L.say("  Each t runs on ranks 0 … t − 1 (world.split); the other ranks wait without spinning.");

    // 2. Train at each t: plain TP (identity + all-reduce at each region's entry).
    L.step("Training at t = 1 … " + std::to_string(T) + ", each from the same weights.");
    std::vector<Run> runs;
    for (int t : ts) {
      runs.push_back(
          lesson::train_at(dev, world, *world.split(0, world.rank()), s, t, false, s.steps));
    }
    // --precision bf16 (off by default): the plain run at the largest t again in mixed precision,
    // on every rank here (the report below is rank 0's).
    const bool bf16 = parse_precision(o.get_text("precision")) == Precision::Bf16;
    Run bf;
    if (bf16) {
      Setup half = s;
      half.cfg.precision = Precision::Bf16;
      bf = lesson::train_at(dev, world, *world.split(0, world.rank()), half, T, false, s.steps);
    }

    // What each rank saw, to rank 0.
    struct Seen {
      std::vector<int64_t> peak, states, act, formula_ok;
      std::vector<double> idle_wall, idle_cpu;
    };
    auto seen = [&](const Run& r) {
      return Seen{L.gather_int64(r.peak),        L.gather_int64(r.states),
                  L.gather_int64(r.activations), L.gather_int64(r.block_formula_ok),
                  L.gather_double(r.idle_wall),  L.gather_double(r.idle_cpu)};
    };
    std::vector<Seen> per_t;
    for (const Run& r : runs) per_t.push_back(seen(r));
    if (!L.is_root()) return;  // everything below is rank 0's report (and checks)

    const double tokens = static_cast<double>(s.batch * s.cfg.seq);
    std::vector<const Run*> all_runs;
    std::vector<const Seen*> all_seen;
    for (size_t i = 0; i < runs.size(); ++i) {
      all_runs.push_back(&runs[i]);
      all_seen.push_back(&per_t[i]);
    }
    for (size_t i = 0; i < all_runs.size(); ++i) {
      const Run& r = *all_runs[i];
      const Seen& w = *all_seen[i];
      const double step = lesson::median_step(r);
      char line[200];
      std::snprintf(line, sizeof line,
                    "  t = %d%s: %lld steps in %.1f s, median step %.3f s, %.0f tok/s", r.t,
                    r.sp ? " + SP" : "", static_cast<long long>(r.loss.size()), r.wall, step,
                    tokens / step);
      L.say(line);
      std::snprintf(line, sizeof line, "         rank 0's CPU time: %.1f s in all, %.3f s per step",
                    r.cpu, r.cpu / static_cast<double>(r.loss.size()));
      L.say(line);
      if (r.t < np) {
        double wall = 0, cpu = 0;
        for (int k = r.t; k < np; ++k) {
          wall = std::max(wall, w.idle_wall[k]);
          cpu += w.idle_cpu[k];
        }
        std::snprintf(line, sizeof line,
                      "         %s waited %.1f s and used %.2f s of CPU time between them",
                      ranks_from(r.t, np - 1).c_str(), wall, cpu);
        L.say(line);
      }
    }

    // Memory per rank.
    L.step("Peak device memory per rank, and what it holds.");
    lesson::Table mem({"t", "parameters per rank", "weights + grads + AdamW", "activations kept",
                       "other (transient)", "peak per rank", "% of t = 1", "[A1]"});
    const char* seed_pct[] = {"100 %", "55 %", "—", "32 %"};
    const int64_t peak1 = per_t[0].peak[0];
    std::vector<int64_t> peaks;
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      const Seen& w = per_t[i];
      // Every rank of the group holds the same shard sizes here (V, h, heads, ffn divide by t).
      int64_t peak = 0;
      for (int k = 0; k < r.t; ++k) peak = std::max(peak, w.peak[k]);
      int64_t low = peak;
      for (int k = 0; k < r.t; ++k) low = std::min(low, w.peak[k]);
      L.check_fact("t = " + std::to_string(r.t) + ": every rank has the same peak",
                   {static_cast<float>(peak - low)}, {0}, 0);
      peaks.push_back(peak);
      // The parameters a rank holds: the split ones divided by t, the replicated ones whole.
      const int64_t expect_params = (n_params - replicated) / r.t + replicated;
      L.check_fact("t = " + std::to_string(r.t) + ": parameters per rank = split / t + replicated",
                   {static_cast<float>(r.local_params)}, {static_cast<float>(expect_params)}, 0);
      L.check_true(
          "t = " + std::to_string(r.t) + ": block 0's activations = the formula (memory.h)",
          w.formula_ok[0]);
      L.check_true("t = " + std::to_string(r.t) + ": peak ≥ weights + grads + AdamW + activations",
                   peak >= r.states + r.activations);
      mem.add({std::to_string(r.t), std::to_string(r.local_params), mib(r.states),
               mib(r.activations), mib(peak - r.states - r.activations), mib(peak),
               pct(static_cast<double>(peak) / peak1), r.t <= 4 ? seed_pct[r.t - 1] : "—"});
    }
    L.say(mem.str());
    for (size_t i = 1; i < peaks.size(); ++i)
      L.check_true("the peak falls from t = " + std::to_string(runs[i - 1].t) +
                       " to t = " + std::to_string(runs[i].t),
                   peaks[i] < peaks[i - 1]);
    L.say(
        "  peak = the device's own counter (Device::memory().peak, reset before each run): every\n"
        "  byte the rank's tensors held at the worst moment of a step. Weights, gradients and the\n"
        "  two AdamW moments are 16 B per parameter and shrink as 1/t, except the replicated "
        "ones;\n"
        "  the activations are divided by t only inside the TP regions (the norms' inputs, the\n"
        "  residual stream and the logits' gathered input stay whole: lesson 13b splits them "
        "too).");

    // Losses.
    L.step("The loss at every t: TP must not change it.");
    std::vector<std::string> head = {"step"};
    for (const Run& r : runs) head.push_back("loss at t = " + std::to_string(r.t));
    lesson::Table curve(head);
    for (int64_t i = 0; i < s.steps; ++i) {
      if (i % 5 != 0 && i + 1 != s.steps) continue;
      std::vector<std::string> row = {std::to_string(i + 1)};
      for (const Run& r : runs) row.push_back(fixed(r.loss[static_cast<size_t>(i)], kLossDecimals));
      curve.add(row);
    }
    L.say(curve.str());
    const double rtol = 1e-4;
    for (size_t i = 1; i < runs.size(); ++i) {
      const double w = lesson::worst_rel(runs[i].loss, runs[0].loss);
      L.say("  t = ", runs[i].t, " against t = 1: largest relative difference over ", s.steps,
            " steps ", sci(w), " (tolerance ", sci(rtol), ")");
      const auto [got, want] = lesson::common_steps(runs[i].loss, runs[0].loss);
      L.check("loss curve at t = " + std::to_string(runs[i].t) + " vs t = 1", got, want, rtol);
    }
    if (s.steps >= 20)
      L.check_true("the loss fell by more than 1 nat in 20 steps or more",
                   runs[0].loss.front() - runs[0].loss.back() > 1.0);
    L.say(
        "  The curves differ only by fp32 rounding: a row-parallel layer adds t partial sums "
        "where\n"
        "  one device adds one, so the last bits differ, and training amplifies them a little.");
    L.say(
        "  [A1]'s table gives a final loss of 2.625 at t = 1 and t = 2 but 2.324 at t = 4. TP\n"
        "  cannot do that: it computes the same function with the same gradients, as the curves\n"
        "  above show to ",
        sci(rtol),
        ". A difference that large comes from something else: a\n"
        "  different batch or data order at t = 4, a different seed (initial weights, dropout\n"
        "  masks), a different number of steps or learning-rate schedule, an evaluation on other\n"
        "  data, or a bug (a missing all-reduce of the replicated gradients, ranks drawing\n"
        "  different batches). Compare loss curves step by step, as here, to find which.");

    {
      const char* colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd"};
      std::vector<PlotSeries> series;
      for (size_t i = runs.size(); i-- > 0;) {  // t = 1 last: its dashes drawn over the others
        PlotSeries p;
        p.name = "t = " + std::to_string(runs[i].t);
        for (int64_t k = 0; k < s.steps; ++k) p.x.push_back(static_cast<double>(k + 1));
        p.y = runs[i].loss;
        p.color = colors[i % 4];
        p.dashed = i == 0;
        series.push_back(p);
      }
      if (L.is_root())  // one writer (every rank has the same curves)
        write_text_file(
            plot,
            svg_line_plot("[A1]'s 12-layer GPT: training loss at t = 1 … " + std::to_string(T),
                          "step", "loss (nats)", series),
            "--plot " + plot);
    }
    L.say("  wrote ", plot, " (the curves of every t in one picture; they lie on each other)");

    // --precision bf16 (off by default): the same run at the largest t in mixed precision.
    if (bf16) {
      L.step("--precision bf16 at t = " + std::to_string(T) +
             ": bf16 weight copies, activations and TP collectives over fp32 masters.");
      const Run& fp = runs.back();
      lesson::Table beside({"step", "fp32 loss", "bf16 loss", "relative difference"});
      for (int64_t i = 0; i < s.steps; ++i) {
        if (i % 5 != 0 && i + 1 != s.steps) continue;
        const size_t k = static_cast<size_t>(i);
        beside.add({std::to_string(i + 1), fixed(fp.loss[k], kLossDecimals),
                    fixed(bf.loss[k], kLossDecimals),
                    sci(std::fabs(bf.loss[k] - fp.loss[k]) / fp.loss[k])});
      }
      L.say(beside.str());
      // The bound: bf16 rounds each stored value by at most u = 2^−8 (0.4 %) and these errors are
      // independent, so the loss, a mean over tokens and logits, moves far less; over the steps
      // AdamW's fp32 masters keep the two runs on one path. tests/model/test_precision_mpi.cpp holds 1 %
      // over 200 steps at L = 2 (measured 3.1e-3); the same 1 % here.
      const double bf16_tol = 0.01;
      const double w = lesson::worst_rel(bf.loss, fp.loss);
      const double step_fp = lesson::median_step(fp);
      const double step_bf = lesson::median_step(bf);
      L.say("  bf16 against fp32 at t = ", T, ": largest relative difference over ", s.steps,
            " steps ", sci(w), " (tolerance ", sci(bf16_tol), "); activations kept by one forward ",
            kib_mib(static_cast<double>(bf.activations)), " against ",
            kib_mib(static_cast<double>(fp.activations)), "; median step ", fixed(step_bf, 3),
            " s against ", fixed(step_fp, 3), " s");
      L.check_true("bf16 loss curve within 1 % of fp32's at t = " + std::to_string(T),
                   w <= bf16_tol);
      L.check_true("bf16 differs from fp32 (the rounding is in effect)", w > 0);
      // What the step time can gain depends on the GEMM this device runs in bf16.
      if (L.device().native_bf16(Kernel::gemm))
        L.say(
            "  This device's GEMMs take bf16 themselves (on the CPU: oneDNN where the CPU has "
            "bf16\n"
            "  instructions, docs/model.md), so bf16 saves GEMM time besides memory and bytes on "
            "the wire.");
      else
        L.say(
            "  This device has no bf16 GEMM (docs/model.md): its bf16 GEMMs widen to fp32 and "
            "round\n"
            "  their output once, so bf16 here saves memory and bytes on the wire, not time.");
    }
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_13_block.svg", "what each rank holds of one block");
    lesson::a1_options(
        o, 20, "training steps at each t (the step times are the median of all but the first)");
    o.flag("spin", "wait in MPI's blocking calls (they poll the core) instead of sleeping")
        .text("precision", "fp32",
              "fp32; or bf16: one more run at the largest t in mixed precision, its loss curve "
              "beside fp32's",
              {"fp32", "bf16"})
        .path("plot", lesson::default_output("lesson_13_loss.svg"),
              "where to write the SVG of the loss curves (default: build/ when run from the "
              "repository, else the folder it is run from)");
  });
}
