// Lesson 14 — the memory stack: fitting a model into a per-rank memory budget in the source
// articles' order, every row measured by the ledgers and checked against the formulas.
//
// What it shows:
//   1. One tiny GPT whose t = 1 peak per rank (weights + gradients + AdamW + activations, fp32)
//      does not fit the lesson's budget: half of that peak.
//   2. The articles' order ([A2] §5.3), one row each, stacked: t = 2 (TP shards weights,
//      gradients, AdamW and most activations), --precision bf16 (bf16 copies of the weights, bf16
//      activations and TP collectives over the fp32 master; every row after it is bf16),
//      --recompute selective (Korthikanti's recomputation of the attention core: nothing left to
//      drop here, attention keeps no S × S tensor), --recompute full (each block keeps its input
//      only), --micro-batches 2 (each forward holds half the batch), ZeRO-1 over dp = 2 (tp 2 × dp 2: AdamW's moments sharded over the
//      replicas), and a larger t last (t = 4: each step up in t adds communication; [A3]: the
//      smallest t that fits). Each row trains 5 steps on the same batches and prints its peak per rank split
//      into weights, gradients, optimizer state and activations, MEASURED (the parameters' and
//      AdamW's tensors, the memory ledger's kept activations plus the one block its backward
//      computes again) and by FORMULA (lib/model/memory.h), checked equal to the byte; the bytes
//      each rank sends per step (CommLedger); the extra compute of recomputation (FLOPs, formula);
//      the loss after 5 steps, unchanged within kFp32Tolerance relative in fp32 and within
//      kBf16Tolerance of fp32's in bf16 (a different rounding: tests/model/test_precision_mpi.cpp tracks bf16 within 1 % of fp32).
//   3. The articles' statements it can check: mixed precision does not halve the model states
//      (16 -> 18 B per parameter with the bf16 copy: weights 4 + 2, gradients 4, AdamW 8) but
//      halves the activations (but for the f32 statistics and masks) and the bytes on the wire (but
//      for the f32 statistics' all-reduces); recomputation changes no communication (true for
//      selective; full reruns the forward's collectives: measured and equal to the formula); each
//      doubling of t adds communication (why t = 2 + bf16, the first row that fits, beats t = 4
//      alone, which fits too); ZeRO inside a TP group would duplicate what TP already
//      shards (the TP ranks' AdamW state is disjoint but for the replicated parameters; tp_train
//      refuses --zero 1 at dp = 1).
//
// What is new since lesson 13: lib/model/recompute.h (GptConfig::recompute), GptConfig::precision
// (--precision bf16), StepOptions'
// micro-batches and ZeRO-1 (lib/model/train.h, lib/parallel/data_parallel.h), the peak per rank
// and the option search of tp_train --memory-budget (lib/model/memory.h, memory_budget.h).
//
// Run:  make lessons && mpirun -np 4 build/bin/lesson_14_memory_stack [--step]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/comm_ledger.h"
#include "core/error.h"
#include "lesson.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/memory_budget.h"
#include "model/presets.h"
#include "model/train.h"
#include "parallel/process_grid.h"
#include "pictures.h"

using namespace tp;

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 8;
constexpr uint64_t kSeed = 14;
constexpr double kFp32Tolerance = 1e-4;  // TP, micro-batches, ZeRO-1 move sums only
constexpr double kBf16Tolerance =
    1e-2;  // bf16 against fp32: tests/model/test_precision_mpi.cpp's 1 %

// L = 2, h = 48, 12 heads (hd 4), ffn 96, V = 64, S = 32: attention's S × S probabilities would
// be a visible part of the activations had it kept them (it keeps a log-sum-exp per query row, so
// selective recomputation keeps what none keeps), and every size divides by t = 1, 2, 4.
GptConfig lesson_config() {
  GptConfig c = small_gpt(32);  // the tests' small GPT (model/presets.h)
  c.init_std = 0.1f;
  return c;
}

struct Row {
  std::string name;
  MemoryChoice choice;
};

struct Measured {
  MemoryPeak peak;     // measured
  MemoryPeak formula;  // memory_peak
  double comm = 0;     // bytes each rank sends in the last step (TP + DP groups)
  int collectives = 0;
  float loss = 0;      // the last step's
  int64_t params = 0;  // this rank's parameter elements P
};

std::string num(double v, const char* format) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
std::string kib(int64_t bytes) { return num(static_cast<double>(bytes) / 1024.0, "%.1f KiB"); }

// Trains one row's 5 steps on `group` (its ranks: one replica or a tp × dp grid) and measures.
Measured run_row(Device& dev, Communicator& group, const Row& row) {
  GptConfig cfg = lesson_config();
  cfg.recompute = row.choice.recompute;
  cfg.precision = row.choice.precision;
  ProcessGrid grid(group, row.choice.dp);
  Gpt model(dev, grid.tp(), cfg);
  model.init(kSeed);
  AdamW opt(dev, model.params(), AdamWParams{});
  if (row.choice.zero == 1) opt.shard_over(grid.dp(), model.params());
  StepOptions so;
  so.micro_batches = row.choice.micro_batches;
  so.zero = row.choice.zero;
  MarkovSource data(cfg.vocab, kSeed);
  Measured m;
  for (int64_t s = 0; s < kSteps; ++s) {
    const size_t mark = grid.tp().ledger().size(), dp_mark = grid.dp().ledger().size();
    const StepResult r = train_step(grid, dev, model, opt, data.batch(s, kBatch, cfg.seq), kSeed, s,
                                    1e-2f, 1.0f, {}, so);
    m.loss = r.loss;
    m.comm =
        grid.tp().ledger().wire_bytes_since(mark) + grid.dp().ledger().wire_bytes_since(dp_mark);
    m.collectives =
        static_cast<int>(grid.tp().ledger().size() - mark + grid.dp().ledger().size() - dp_mark);
  }
  const int t = grid.tp_size();
  const int64_t micro = kBatch / row.choice.dp / row.choice.micro_batches;
  int64_t P = 0;
  for (const Param& p : model.params()) {
    m.peak.weights += static_cast<int64_t>(p.value.bytes());
    if (p.compute.defined()) m.peak.weights += static_cast<int64_t>(p.compute.bytes());  // bf16
    m.peak.grads += static_cast<int64_t>(p.grad.bytes());
    P += p.value.numel();
  }
  m.peak.optimizer = opt.state_bytes();
  // The rerun one block's backward holds: what `none` keeps per block less what this mode keeps,
  // both measured (a `none` model's forward on the same micro-batch).
  int64_t rerun = 0;
  if (row.choice.recompute != Recompute::None) {
    GptConfig none = cfg;
    none.recompute = Recompute::None;
    Gpt probe(dev, grid.tp(), none);
    probe.init(kSeed);
    const Batch b = data.batch(0, micro, cfg.seq);
    probe.forward(b, kSeed, 0);
    rerun = probe.memory().layer_bytes(0) - model.memory().layer_bytes(0);
  }
  m.peak.activations = model.memory().total_bytes() + rerun;
  m.params = P;
  m.formula = memory_peak(cfg, cfg.seq, micro, t, P, row.choice.zero == 1 ? row.choice.dp : 1);
  return m;
}

// The stack as bars: one per row, its peak per rank split into weights, gradients, optimizer
// state and activations (measured, step 2), against the budget's line.
SvgDiagram draw_stack(const std::vector<Row>& rows, const std::vector<Measured>& got,
                      int64_t budget) {
  const char* fills[4] = {"#6baed6", "#fd8d3c", "#74c476", "#9e9ac8"};
  const double left = 220, bh = 22, width = 520;
  int64_t most = budget;
  for (const Measured& m : got) most = std::max(most, m.peak.total());
  const double scale = width / static_cast<double>(most);
  SvgDiagram d(900, 60, "Peak bytes per rank, row by row, against a budget of " + kib(budget));
  double y = lesson::draw_swatches(d, 30, 40,
                                   {{fills[0], "weights"},
                                    {fills[1], "gradients"},
                                    {fills[2], "optimizer state (AdamW)"},
                                    {fills[3], "activations"}}) +
             10;
  // The budget's line first, under the bars.
  const double bx = left + static_cast<double>(budget) * scale,
               bottom = y + static_cast<double>(rows.size()) * (bh + 10);
  d.line(bx, y - 6, bx, bottom, "#c0392b", true);
  for (size_t i = 0; i < rows.size(); ++i, y += bh + 10) {
    const MemoryPeak& p = got[i].peak;
    d.text(left - 8, y + 15, rows[i].name, "end", 11);
    std::vector<lesson::BarPart> parts;
    int64_t values[4] = {p.weights, p.grads, p.optimizer, p.activations};
    for (int k = 0; k < 4; ++k) {
      const double v = static_cast<double>(values[k]);
      parts.push_back({v, fills[k], v * scale >= 64 ? kib(values[k]) : ""});
    }
    const double end = lesson::draw_bar(d, left, y, bh, scale, parts);
    d.text(end + 6, y + 15, kib(p.total()) + (p.total() <= budget ? ", fits" : ""), "start", 11,
           p.total() <= budget ? "#2c7a2c" : "#222");
  }
  d.text(bx, y + 14, "budget " + kib(budget) + " (half of t = 1's peak)", "middle", 11, "#c0392b");
  lesson::draw_notes(
      d, y + 36,
      {"Every bar is measured (ledgers) and equals lib/model/memory.h's formula to the byte.",
       "TP splits all four parts; bf16 grows the weights (a 2-byte copy beside the fp32 master) "
       "and halves the activations;",
       "recomputation and micro-batches shrink only the activations, ZeRO-1 only the optimizer "
       "state."});
  return d;
}

// The FLOPs one rank computes in a step's forward on its replica's `batch` sequences (kBatch /
// dp): the GEMMs (2 per weight and token) and the attention core (QKᵀ and PV over the full s × s
// square as the kernel computes it: 4·B·s²·h/t).
double forward_flops(const GptConfig& c, int t, int64_t batch) {
  const double N = static_cast<double>(batch * c.seq), h = static_cast<double>(c.hidden);
  const double block_weights = h * h * 4 + 2 * h * static_cast<double>(c.inner());
  const double attention = 4.0 * static_cast<double>(batch * c.seq * c.seq) * h;
  return c.layers * (2.0 * N * block_weights + attention) / t +
         2.0 * N * h * static_cast<double>(c.padded_vocab(t)) / t;
}

// Recomputation's extra forward work per rank and step on its replica's `batch` sequences: full
// every block's forward; selective none (attention keeps no S × S tensor for it to drop: its
// backward recomputes the probabilities from the kept log-sum-exp in every mode).
double extra_flops(const GptConfig& c, Recompute mode, int t, int64_t batch) {
  const double h = static_cast<double>(c.hidden), N = static_cast<double>(batch * c.seq);
  const double attention = 4.0 * static_cast<double>(batch * c.seq * c.seq) * h / t;
  const double block = 2.0 * N * (h * h * 4 + 2 * h * static_cast<double>(c.inner())) / t;
  if (mode == Recompute::Full) return c.layers * (attention + block);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_14_memory_stack",
      "Lesson 14: the memory stack: TP, mixed precision, recomputation, micro-batches and ZeRO-1 "
      "against a per-rank budget",
      {4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const GptConfig cfg = lesson_config();
    const std::string svg = lesson::svg_path(L);  // drawn in step 2, its path checked now

    // 1. The rows, in the articles' order ([A2] §5.3: TP, mixed precision, recomputation, a
    //    larger t last) and stacked (bf16 from its row on).
    const Precision bf16 = Precision::Bf16;
    const std::vector<Row> rows = {
        {"t = 1", {1, 1}},
        {"t = 2", {2, 1}},
        {"+ --precision bf16", {2, 1, Recompute::None, 1, 0, bf16}},
        {"+ --recompute selective", {2, 1, Recompute::Selective, 1, 0, bf16}},
        {"+ --recompute full", {2, 1, Recompute::Full, 1, 0, bf16}},
        {"+ --micro-batches 2", {2, 1, Recompute::Full, 2, 0, bf16}},
        {"+ --zero 1, tp 2 x dp 2", {2, 2, Recompute::Full, 2, 1, bf16}},
        {"t = 4 (dp 1: no ZeRO), last", {4, 1, Recompute::Full, 2, 0, bf16}},
    };
    L.step("The model, " + cfg.str() + ", batch " + std::to_string(kBatch) + ", " +
           std::to_string(kSteps) + " AdamW steps per row; fp32, then bf16 from its row on.");
    L.say(
        "  t = 1 and t = 2 run on every group of 1 and 2 ranks (world.split): the same numbers "
        "on each.");

    // 2. Every row: train, measure, compare with the formula.
    std::vector<Measured> got;
    for (const Row& r : rows) {
      const int members = r.choice.t * r.choice.dp;
      std::unique_ptr<Communicator> group = world.split(world.rank() / members, world.rank());
      got.push_back(run_row(dev, *group, r));
    }
    const int64_t budget = got[0].peak.total() / 2;
    L.step("The peak per rank of each row, measured (ledgers) = formula, against a budget of " +
           kib(budget) + " (half of t = 1's).");
    lesson::Table table({"row", "t x dp", "weights", "gradients", "optimizer", "activations",
                         "peak", "fits", "sent per step", "recompute FLOPs", "loss, step 5"});
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const Measured& m = got[i];
      const int64_t replica_batch = kBatch / r.choice.dp;  // each replica its share
      const double extra = extra_flops(cfg, r.choice.recompute, r.choice.t, replica_batch);
      const double step_flops = 3.0 * forward_flops(cfg, r.choice.t, replica_batch);
      table.add({r.name, std::to_string(r.choice.t) + " x " + std::to_string(r.choice.dp),
                 kib(m.peak.weights), kib(m.peak.grads), kib(m.peak.optimizer),
                 kib(m.peak.activations), kib(m.peak.total()),
                 m.peak.total() <= budget ? "yes" : "no", kib(static_cast<int64_t>(m.comm)),
                 extra > 0
                     ? num(extra / 1e6, "%.2f M") + num(100.0 * extra / step_flops, " (+%.0f%%)")
                     : "0",
                 // bf16 rows to 3 decimals: bf16's rounding carries the GEMMs' order of summation
                 // into the 4th (which CPU's bf16 GEMMs ran decides it).
                 num(m.loss, r.choice.precision == bf16 ? "%.3f" : "%.5f")});
      for (const auto& [part, a, b] :
           {std::tuple{"weights", m.peak.weights, m.formula.weights},
            std::tuple{"gradients", m.peak.grads, m.formula.grads},
            std::tuple{"optimizer state", m.peak.optimizer, m.formula.optimizer},
            std::tuple{"activations", m.peak.activations, m.formula.activations}})
        L.check_value(r.name + ": " + part + " measured = formula", static_cast<double>(a),
                      static_cast<double>(b), 0.0);
      if (i > 0)
        L.check(r.name + ": loss after " + std::to_string(kSteps) + " steps", {m.loss},
                {got[0].loss}, r.choice.precision == bf16 ? kBf16Tolerance : kFp32Tolerance);
    }
    L.say(table.str());
    L.say(
        "  measured: the parameters' and gradients' tensors, AdamW's moments (state_bytes), the "
        "memory ledger's kept activations + the block its backward computes again (a `none` "
        "forward's block less this mode's); formula: memory_peak (lib/model/memory.h). Sent per "
        "step: the ring model's bytes on the wire of the last step (CommLedger). Recompute "
        "FLOPs: the extra forward work per rank and step on its replica's batch / dp sequences, "
        "and its share of the step (3 x forward). Loss: checked within ",
        num(kFp32Tolerance, "%g"), " relative of t = 1's in fp32, within ",
        num(kBf16Tolerance, "%g"), " in bf16 (another rounding).");
    size_t first_fit = rows.size();
    for (size_t i = 0; i < rows.size() && first_fit == rows.size(); ++i)
      if (got[i].peak.total() <= budget) first_fit = i;
    L.check_true("t = 1 does not fit the budget", got[0].peak.total() > budget);
    L.check_true("some row fits the budget", first_fit < rows.size());
    if (first_fit < rows.size())
      L.say("  The first row within ", kib(budget), ": ", rows[first_fit].name, " (",
            kib(got[first_fit].peak.total()), ").");
    // Every row lowers the peak but selective recomputation's, which keeps what the row before
    // keeps (checked in step 3).
    for (size_t i = 1; i < rows.size(); ++i)
      if (rows[i].choice.recompute != Recompute::Selective)
        L.check_true(rows[i].name + ": the peak per rank falls",
                     got[i].peak.total() < got[i - 1].peak.total());
    // The ZeRO-1 row changes the grid too (tp 2 x dp 2): it falls against the same grid without
    // ZeRO-1 (formula) as well.
    const size_t zero_row = rows.size() - 2;
    MemoryChoice no_zero = rows[zero_row].choice;
    no_zero.zero = 0;
    const MemoryEstimate plain_dp = estimate_memory(cfg, cfg.seq, kBatch, no_zero);
    L.check_true(rows[zero_row].name +
                     ": the peak per rank falls against tp 2 x dp 2 without it (" +
                     kib(plain_dp.peak.total()) + ")",
                 plain_dp.problems.empty() && got[zero_row].peak.total() < plain_dp.peak.total());
    // Raising t first (t = 4 alone, fp32) would fit too, for more bytes on the wire every step.
    const Measured t4 = run_row(dev, world, {"t = 4", {4, 1}});
    const Measured& fit = got[std::min(first_fit, rows.size() - 1)];
    L.check_true("t = 4 alone fits the budget too", t4.peak.total() <= budget);
    L.check_true("the first row that fits sends less than t = 4 alone", fit.comm < t4.comm);
    L.say("  t = 4 alone (fp32) fits too (", kib(t4.peak.total()), ") but sends ",
          kib(static_cast<int64_t>(t4.comm)), " per rank and step against ",
          kib(static_cast<int64_t>(fit.comm)), ": why the articles raise t last.");
    lesson::write_picture(L, draw_stack(rows, got, budget), svg);

    // 3. The articles' statements.
    L.step("What the articles say, checked.");
    const Measured &t1 = got[0], &t2 = got[1], &half = got[2], &sel = got[3], &full = got[4],
                   &zero = got[zero_row];
    L.check_true("each doubling of t adds communication: t = 2 sends more than t = 1",
                 t2.comm > t1.comm);
    L.check_true("each doubling of t adds communication: t = 4 sends more than t = 2",
                 t4.comm > t2.comm);
    L.say("  each doubling of t adds communication: ", kib(static_cast<int64_t>(t1.comm)), " -> ",
          kib(static_cast<int64_t>(t2.comm)), " -> ", kib(static_cast<int64_t>(t4.comm)),
          " per rank and step at t = 1, 2, 4 (each all-reduce sends 2(t-1)/t of its buffer).");
    // Mixed precision: the model states grow from 16 to 18 B per parameter (the bf16 copy); the
    // activations and the bytes on the wire halve but for what stays f32.
    const auto states = [](const MemoryPeak& p) { return p.weights + p.grads + p.optimizer; };
    L.check_value("mixed precision does not halve the model states: 18 B per parameter",
                  static_cast<double>(states(half.peak)), 18.0 * static_cast<double>(half.params),
                  0.0);
    L.check_value("fp32's model states: 16 B per parameter", static_cast<double>(states(t2.peak)),
                  16.0 * static_cast<double>(t2.params), 0.0);
    const double act_ratio = static_cast<double>(half.peak.activations) /
                             static_cast<double>(t2.peak.activations),
                 comm_ratio = half.comm / t2.comm;
    L.check_true("mixed precision halves the activations but for the f32 statistics and masks",
                 act_ratio >= 0.5 && act_ratio < 0.6);
    L.check_true("mixed precision halves the bytes on the wire but for the f32 statistics",
                 comm_ratio >= 0.5 && comm_ratio < 0.6);
    L.say("  mixed precision does not halve the model states: ", kib(states(t2.peak)), " -> ",
          kib(states(half.peak)),
          " per rank (16 -> 18 B per parameter: the fp32 master, its bf16 "
          "copy, fp32 gradients, AdamW); it halves the activations (x",
          num(act_ratio, "%.3f"),
          ": the norms' statistics, the dropout masks and the token ids "
          "stay f32) and the bytes on the wire (x",
          num(comm_ratio, "%.3f"), ": the cross-entropy's statistics stay f32).");
    L.check_value("selective recomputation changes no communication", sel.comm, half.comm, 0.0);
    // Selective recomputation drops the attention core's S × S tensors; this attention keeps none
    // (only a log-sum-exp per query row, from which its backward recomputes the probabilities).
    L.check_value("selective recomputation keeps what none keeps",
                  static_cast<double>(sel.peak.activations),
                  static_cast<double>(half.peak.activations), 0.0);
    L.say("  selective recomputation keeps what none keeps, ", kib(sel.peak.activations),
          ": it drops attention's S x S probabilities, and this attention never keeps them (a "
          "log-sum-exp per\n  query row instead, from which every backward recomputes them).");
    // Full recomputation reruns each block's forward, whose two all-reduces of N·h bf16 values
    // (after attention and after the MLP) run again in backward.
    const int64_t nh_bytes = kBatch * cfg.seq * cfg.hidden * dtype_size(Dtype::bf16);
    const double rerun_comm = cfg.layers * 2 * ring_wire_bytes("all_reduce", 2, nh_bytes);
    L.check_value("full recomputation adds its forward's all-reduces", full.comm - half.comm,
                  rerun_comm, 1e-9);
    L.say("  recomputation changes no communication: selective sends ",
          kib(static_cast<int64_t>(sel.comm)), " as none does; full sends ",
          kib(static_cast<int64_t>(full.comm - half.comm)),
          " more: its rerun forward repeats 2 all-reduces per block (Megatron's full "
          "recomputation does too). The statement holds for selective recomputation only.");
    // ZeRO inside the TP group: what the TP ranks' AdamW states have in common.
    GptConfig c4 = cfg;
    int64_t replicated = 0, total = 0;
    {
      Gpt model(dev, world, c4);
      for (const Param& p : model.params()) {
        total += p.value.numel();
        if (p.split == Split::Replicated) replicated += p.value.numel();
      }
    }
    const int64_t t1_elements = got[0].peak.weights / 4;
    L.check_value("t = 4: the TP ranks' parameters overlap only in the replicated ones",
                  static_cast<double>(4 * total - t1_elements -
                                      (cfg.padded_vocab(4) - cfg.vocab) * cfg.hidden),
                  static_cast<double>(3 * replicated), 0.0);
    L.say(
        "  ZeRO inside a TP group would duplicate what TP already shards: at t = 4 the 4 ranks "
        "hold disjoint shards but for ",
        replicated, " replicated elements (norms, biases of the row-parallel layers, wpe), ",
        num(100.0 * replicated / total, "%.0f%%"),
        " of a rank's parameters: all a ZeRO over the TP group could still split. Over dp = 2 "
        "(the ZeRO row) it halves AdamW's state: ",
        kib(zero.peak.optimizer), " per rank instead of ", kib(8 * zero.params), ".");
    std::string refused;
    const std::vector<std::string> p = step_option_problems({1, 1}, 1, kBatch, 0.0f);
    if (!p.empty()) refused = p.front();
    L.check_true("--zero 1 at dp = 1 (inside the TP group only) is refused",
                 refused.find("ZeRO-1 shards the optimizer state over the data-parallel") !=
                     std::string::npos);
    L.say("  tp_train --zero 1 at dp = 1 says: ", refused);
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_14_memory_stack.svg",
                       "the peak bytes per rank of each row, by part, against the budget");
  });
}
