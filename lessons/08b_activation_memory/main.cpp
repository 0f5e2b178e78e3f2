// Lesson 08b — activation memory under sequence parallelism: what one block keeps for backward,
// measured, by formula, and in Korthikanti et al.'s table.
//
// What it shows:
//   1. What a block keeps for backward, per rank, measured by the MemoryLedger of a real Gpt with
//      SP off and on, against block_activation_bytes() (lib/model/memory.h), to the byte: plain TP
//      keeps the norms' inputs, the attention and MLP inputs and the dropout masks whole on every
//      rank; SP divides them by t too.
//   2. Korthikanti et al.'s coefficients for 16-bit training, summed item by item from the
//      activations a layer stores: 34 → 10 + 24/t → 34/t (× sbh bytes, with FlashAttention-style
//      recomputation); at t = 8 that is 34 → 13 → 4.25, or 1.14 → 0.44 → 0.14 GB per layer for
//      an 8B model at s = 8192.
//   3. The picture (--svg): step 1's bytes per block as stacked bars, one term per colour, for
//      t = 1 and for plain TP and TP + SP at this run's t.
//
// What is new since lesson 08: Gpt::memory() (the MemoryLedger of what forward kept) and
// block_activation_bytes() (lib/model/memory.h).
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_08b_activation_memory [--step] [--svg P]
//       (also -np 1, 4)
#include <cmath>
#include <string>
#include <vector>

#include "core/format.h"
#include "lesson.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/presets.h"
#include "pictures.h"
#include "sequence_parallel.h"

using namespace tp;

namespace {

float round_to(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return static_cast<float>(std::round(v * scale) / scale);
}

// One stored activation of a transformer layer in Korthikanti et al. (2022), 16-bit training:
// bytes = sbh_coef · s·b·h + as2b_coef · a·s²·b; `tp_split`: divided by t under plain TP.
// Under TP + SP every item is divided by t.
struct Item {
  const char* what;
  double sbh_coef;
  double as2b_coef;
  bool tp_split;
};

const Item kItems[] = {
    {"attention input (ln_1 output)", 2, 0, false},
    {"Q and K (for QKᵀ)", 4, 0, true},
    {"softmax output", 0, 2, true},
    {"softmax dropout mask (1 byte)", 0, 1, true},
    {"dropout output and V (for ·V)", 2, 2, true},
    {"output projection input", 2, 0, true},
    {"attention dropout mask (1 byte)", 1, 0, false},
    {"MLP input (ln_2 output)", 2, 0, false},
    {"fc1 output (GeLU input, 4h)", 8, 0, true},
    {"GeLU output (fc2 input, 4h)", 8, 0, true},
    {"MLP dropout mask (1 byte)", 1, 0, false},
    {"ln_1 and ln_2 inputs", 4, 0, false},
};

// The per-layer coefficient c in bytes = c · s·b·h, summed from the items. mode: 0 no TP, 1 TP,
// 2 TP + SP. attention_term = a·s/h (0 when the a·s²·b terms are recomputed, as FlashAttention does).
double summed_coef(int mode, double t, double attention_term) {
  double c = 0;
  for (const Item& it : kItems) {
    const double per_item = it.sbh_coef + it.as2b_coef * attention_term;
    const bool split = mode == 2 || (mode == 1 && it.tp_split);
    c += split ? per_item / t : per_item;
  }
  return c;
}

// The closed forms of the paper: sbh(34 + 5as/h), sbh(10 + 24/t + 5as/(ht)), sbh(34/t + 5as/(ht)).
double closed_coef(int mode, double t, double attention_term) {
  if (mode == 0) return 34 + 5 * attention_term;
  if (mode == 1) return 10 + 24 / t + 5 * attention_term / t;
  return 34 / t + 5 * attention_term / t;
}

// The terms of step 1's table, by what SP does to them: the first three are what plain TP keeps
// whole on every rank (SP divides them by t), the last two what TP already splits.
const char* const kTerms[] = {"norm inputs, mean, rstd", "attention and MLP inputs",
                              "dropout masks", "attention: q, k, v, lse, output",
                              "MLP hidden (fc1 out, fc2 in)"};
const char* const kTermColors[] = {"#6baed6", "#fd8d3c", "#bdbdbd", "#74c476", "#9e9ac8"};

// Which term a kept tensor of layer 0 belongs to ("ln_1.mean" → 0, "attn.input_shard" → 1, …).
int term_of(const std::string& name) {
  if (name.compare(0, 3, "ln_") == 0) return 0;
  if (name.find("dropout_mask") != std::string::npos) return 2;
  if (name == "attn.q.input" || name.find("input_shard") != std::string::npos ||
      name == "mlp.c_fc.input")
    return 1;
  return name.compare(0, 5, "attn.") == 0 ? 3 : 4;
}

// One bar of the picture: its label and the kept tensors of layer 0 it stacks.
struct Bar {
  std::string label;
  std::vector<MemoryRecord> records;
};

// The bytes per block as horizontal stacked bars, one segment per term, each labelled with its
// bytes where it is wide enough, the total at the bar's end.
SvgDiagram draw_memory_bars(const std::vector<Bar>& bars, int t) {
  const double left = 30, label_w = 130, bar_h = 30, scale_w = 600;
  SvgDiagram d(860, 60,
               "What one block keeps for backward, per rank (bytes, layer 0 of step 1's model), "
               "t = " +
                   std::to_string(t));
  int64_t widest = 1;
  std::vector<std::vector<int64_t>> per_term;
  for (const Bar& b : bars) {
    std::vector<int64_t> terms(std::size(kTerms), 0);
    for (const MemoryRecord& rec : b.records)
      terms[term_of(lesson::layer0_name(rec.name))] += rec.bytes;
    int64_t total = 0;
    for (int64_t v : terms) total += v;
    widest = std::max(widest, total);
    per_term.push_back(terms);
  }
  double y = 60;
  for (size_t i = 0; i < bars.size(); ++i) {
    d.text(left, y + bar_h / 2 + 4, bars[i].label, "start", 12);
    double x = left + label_w;
    int64_t total = 0;
    for (size_t k = 0; k < per_term[i].size(); ++k) {
      const double w = scale_w * static_cast<double>(per_term[i][k]) / static_cast<double>(widest);
      if (w <= 0) continue;
      d.box(x, y, w, bar_h, kTermColors[k], w > 30 ? std::to_string(per_term[i][k]) : "");
      x += w;
      total += per_term[i][k];
    }
    d.text(x + 8, y + bar_h / 2 + 4, std::to_string(total) + " B", "start", 12);
    y += bar_h + 18;
  }
  y += 6;
  for (size_t k = 0; k < std::size(kTerms); ++k) {
    const double x = left + (k % 3) * 270, yy = y + (k / 3) * 20;
    d.box(x, yy, 14, 12, kTermColors[k]);
    d.text(x + 20, yy + 10, kTerms[k]);
  }
  lesson::draw_notes(
      d, y + 62,
      {"The first three terms are per-token tensors that plain TP keeps whole on every rank: SP "
       "divides them by t.",
       "The last two lie inside the TP regions: TP already divides them by t, with or without SP.",
       "Every segment is summed from the MemoryLedger records of this run (step 1's table)."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_08b_activation_memory",
      "Lesson 08b: activation memory, what sequence parallelism saves", {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn in step 3, its path checked now
    SerialCommunicator solo;

    // 1. Activation memory of one block, measured and by formula.
    L.step(
        "What one block keeps for backward, per rank: the MemoryLedger of a real Gpt, and the "
        "formula.");
    GptConfig base = lesson_gpt(/*layers=*/1, /*hidden=*/32, /*vocab=*/64, /*seq=*/8);
    base.dropout = 0.1f;
    const lesson::SpPair pair = lesson::sp_pair(base);
    const GptConfig &cfg = pair.tp, &cfg_sp = pair.sp;
    const int64_t S = cfg.seq, B = 2, N = S * B;
    L.say("  model: ", cfg.str(), ";  s = ", S, ", b = ", B, " (", N,
          " tokens), fp32, GeLU, dropout masks stored as fp32");
    MarkovSource data(cfg.vocab, 3);
    const Batch batch = data.batch(0, B, S);
    auto measure = [&](Communicator& comm, const GptConfig& c, std::vector<MemoryRecord>* records) {
      Gpt model(dev, comm, c);
      model.init(3);
      model.forward(batch, 3, 0);
      if (records)
        for (const MemoryRecord& rec : model.memory().records())
          if (rec.layer == 0) records->push_back(rec);
      return model.memory().layer_bytes(0);
    };
    std::vector<MemoryRecord> recs_tp, recs_sp, recs_one;
    const int64_t tp_here = measure(world, cfg, &recs_tp),
                  sp_here = measure(world, cfg_sp, &recs_sp);
    const int64_t tp_one = measure(solo, cfg, &recs_one), sp_one = measure(solo, cfg_sp, nullptr);

    lesson::Table kept(
        {"kept for backward (layer 0)", "TP: shape", "TP + SP: shape", "TP + SP: bytes"});
    for (size_t i = 0; i < recs_tp.size() && i < recs_sp.size(); ++i) {
      const bool same_name = recs_tp[i].name == recs_sp[i].name;
      kept.add({lesson::layer0_name(recs_tp[i].name) +
                    (same_name ? "" : " / " + lesson::layer0_name(recs_sp[i].name)),
                recs_tp[i].shape.str(), recs_sp[i].shape.str(), std::to_string(recs_sp[i].bytes)});
    }
    L.say("  at t = ", t,
          " (rows: tokens; under SP the attention and MLP keep their input shard and re-gather it "
          "in backward):");
    L.say(kept.str());
    L.check_fact("records kept, TP vs TP + SP", {static_cast<float>(recs_sp.size())},
                 {static_cast<float>(recs_tp.size())});

    lesson::Table mem({"t", "TP: formula", "TP: measured", "TP + SP: formula", "TP + SP: measured",
                       "TP − (TP + SP)"});
    for (int tt : {1, 2, 4}) {
      const int64_t f_tp = block_activation_bytes(cfg, S, B, tt),
                    f_sp = block_activation_bytes(cfg_sp, S, B, tt);
      const bool here = tt == t, one = tt == 1;
      const int64_t m_tp = one ? tp_one : tp_here, m_sp = one ? sp_one : sp_here;
      mem.add({std::to_string(tt), std::to_string(f_tp), here || one ? std::to_string(m_tp) : "—",
               std::to_string(f_sp), here || one ? std::to_string(m_sp) : "—",
               std::to_string(f_tp - f_sp)});
      if (here || one) {
        L.check_fact("measured = formula, TP, t = " + std::to_string(tt),
                     {static_cast<float>(m_tp)}, {static_cast<float>(f_tp)}, 0);
        L.check_fact("measured = formula, TP + SP, t = " + std::to_string(tt),
                     {static_cast<float>(m_sp)}, {static_cast<float>(f_sp)}, 0);
      }
      // The difference is exactly the per-token tensors that SP divides by t: ln_1 / ln_2 inputs
      // (h + 2 statistics each), attention and MLP inputs (h each), two dropout masks (h each).
      const double shrunk = 4.0 * (N - N / tt) * (6 * cfg.hidden + 4);
      L.check_fact("TP − (TP + SP) = 4·(N − N/t)·(6h + 4) at t = " + std::to_string(tt),
                   {static_cast<float>(f_tp - f_sp)}, {static_cast<float>(shrunk)}, 0);
      // lib/model/memory.h's closed form for GPT-2's shape (ffn = 4h, GeLU, LayerNorm, dropout).
      const double sbh = static_cast<double>(S) * B * cfg.hidden, sb = static_cast<double>(S) * B;
      // attention keeps one f32 log-sum-exp per query row of its nh/t heads, not the S × S scores
      const double lse = 4.0 * cfg.heads * S * B / tt;
      L.check_fact("TP = sbh(24 + 48/t) + 16sb + 4·nh·sb/t at t = " + std::to_string(tt),
                   {static_cast<float>(f_tp)},
                   {static_cast<float>(sbh * (24 + 48.0 / tt) + 16 * sb + lse)}, 0);
      L.check_fact("TP + SP = sbh·72/t + 16sb/t + 4·nh·sb/t at t = " + std::to_string(tt),
                   {static_cast<float>(f_sp)},
                   {static_cast<float>(sbh * 72.0 / tt + 16 * sb / tt + lse)}, 0);
    }
    L.say(
        "  bytes per rank for layer 0 (measured: this run's t, and t = 1 on a one-rank "
        "communicator):");
    L.say(mem.str());
    L.say(
        "  The last column is 4·(N − N/t)·(6h + 4) bytes: the six per-token tensors that SP "
        "divides by t\n"
        "  (ln_1 and ln_2 inputs with their mean and rstd, attention and MLP inputs, two dropout "
        "masks).");
    L.say(
        "  In fp32 with fp32 masks the closed forms are TP: sbh(24 + 48/t) + 16sb + 4·nh·sb/t "
        "and\n"
        "  TP + SP: sbh·72/t + 16sb/t + 4·nh·sb/t (the 16sb: two LayerNorms' mean and rstd; the "
        "4·nh·sb/t:\n"
        "  attention's log-sum-exp, one per query row, kept instead of the s × s probabilities). "
        "The 24 is\n"
        "  four fp32 per-token tensors and two fp32 masks that plain TP keeps whole on every "
        "rank.");

    // 2. Korthikanti et al.'s coefficients, summed item by item.
    L.step(
        "Korthikanti et al. (16-bit activations, 1-byte masks): the coefficient c in c · s·b·h "
        "bytes per layer.");
    lesson::Table items({"stored for backward", "bytes", "TP", "TP + SP"});
    for (const Item& it : kItems) {
      std::string b;
      if (it.sbh_coef > 0) b = lesson::fmt(static_cast<float>(it.sbh_coef)) + "sbh";
      if (it.as2b_coef > 0)
        b += (b.empty() ? "" : " + ") + lesson::fmt(static_cast<float>(it.as2b_coef)) + "as²b";
      items.add({it.what, b, it.tp_split ? "/ t" : "whole", "/ t"});
    }
    L.say(items.str());
    const double a8 = 32, s8 = 8192, h8 = 4096,
                 b8 = 1;                // an 8B model: 32 heads, h = 4096, s = 8192
    const double attn8 = a8 * s8 / h8;  // a·s/h = 64: the attention scores' weight
    lesson::Table coef({"t", "no TP", "TP", "TP + SP", "no TP (scores stored)",
                        "TP (scores stored)", "TP + SP (scores stored)"});
    std::vector<float> got, want;
    for (int tt : {1, 2, 4, 8}) {
      std::vector<std::string> row = {std::to_string(tt)};
      for (double attn : {0.0, attn8})
        for (int mode : {0, 1, 2}) {
          const double c = summed_coef(mode, tt, attn);
          got.push_back(static_cast<float>(c));
          want.push_back(static_cast<float>(closed_coef(mode, tt, attn)));
          row.push_back(lesson::fmt(static_cast<float>(c)));
        }
      coef.add(row);
    }
    L.say("  summed from the items above; \"scores stored\": a = 32 heads, a·s/h = ", attn8,
          " (s = 8192, h = 4096), so 5as/h = ", 5 * attn8, ":");
    L.say(coef.str());
    L.check_fact("item sums = sbh(34 + 5as/h), sbh(10 + 24/t + 5as/(ht)), sbh(34/t + 5as/(ht))",
                 got, want);
    const double c0 = summed_coef(0, 8, 0), c1 = summed_coef(1, 8, 0), c2 = summed_coef(2, 8, 0);
    L.check_fact("coefficients at t = 8 with recomputation: 34, 13, 4.25",
                 {float(c0), float(c1), float(c2)}, {34, 13, 4.25f});
    const double sbh8 = s8 * b8 * h8, GB = 1e9;
    lesson::Table big(
        {"8B model, s = 8192, b = 1, h = 4096", "c", "GB per layer", "GB for 36 layers"});
    const char* names[] = {"no TP", "TP, t = 8", "TP + SP, t = 8"};
    std::vector<float> per_layer, all_layers;
    int i = 0;
    for (double c : {c0, c1, c2}) {
      per_layer.push_back(round_to(c * sbh8 / GB, 2));
      all_layers.push_back(round_to(36 * c * sbh8 / GB, 1));
      big.add({names[i++], lesson::fmt(static_cast<float>(c)), fixed(c * sbh8 / GB, 2),
               fixed(36 * c * sbh8 / GB, 1)});
    }
    L.say(
        "  With FlashAttention the a·s²·b terms are recomputed, not stored, as this library's "
        "attention does\n  (step 1 has no s² term). c · s·b·h bytes (GB = 1e9 B):");
    L.say(big.str());
    L.check_fact("GB per layer: 1.14, 0.44, 0.14", per_layer, {1.14f, 0.44f, 0.14f});
    L.check_fact("GB for 36 layers: 41.1, 15.7, 5.1", all_layers, {41.1f, 15.7f, 5.1f});
    L.say(
        "  TP alone stops at the 10 that does not shrink (norm inputs, attention and MLP inputs, "
        "dropout\n"
        "  masks); SP divides those by t too, so the whole layer scales as 1/t.");

    // 3. The picture: step 1's bytes per block, by term.
    L.step("The bytes per block by term, plain TP and TP + SP: the picture.");
    std::vector<Bar> bars = {{"t = 1 (both)", recs_one}};
    if (t > 1) {
      bars.push_back({"TP, t = " + std::to_string(t), recs_tp});
      bars.push_back({"TP + SP, t = " + std::to_string(t), recs_sp});
    }
    lesson::write_picture(L, draw_memory_bars(bars, t), svg);

    // 4. Summary.
    L.step("Summary.");
    L.say(
        "Plain TP splits what lies inside the attention and MLP regions; the norms' inputs, the\n"
        "regions' inputs and the dropout masks stay whole on every rank, the 10 in Korthikanti's\n"
        "sbh(10 + 24/t). Sequence parallelism splits those by tokens too, so every activation a\n"
        "layer keeps is divided by t: sbh·34/t, measured here to the byte against the formula.");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_08b_activation_memory.svg", "the bytes per block by term");
  });
}
