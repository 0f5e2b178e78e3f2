// Lesson 08 — sequence parallelism: the activations that TP leaves whole, split along the sequence.
//
// What it shows:
//   1. all-reduce = reduce-scatter + all-gather. On a [s, h] = [4, 3] tensor of partial sums, the
//      two halves give the same numbers as one all-reduce and send the same bytes (under the ring
//      model, (t − 1)/t of the buffer each, 2(t − 1)/t together). So SP can replace g's all-reduce
//      by a reduce-scatter (each rank keeps s/t tokens of the sum) and f's identity by an
//      all-gather (the next column-parallel layer gets the whole sequence back): the same bytes at
//      each region boundary (backward adds more: step 6).
//   2. Between those two, LayerNorm, dropout and the residual add work token by token, so each
//      rank runs them on its own s/t tokens. Gathered, the result is the LayerNorm of all tokens;
//      but the norm's weight gradient is now a partial sum over this rank's tokens and must be
//      summed over the ranks.
//   3. What a block keeps for backward, per rank, measured by the MemoryLedger of a real Gpt with
//      SP off and on, against block_activation_bytes() (lib/model/memory.h), to the byte.
//   4. Korthikanti et al.'s coefficients for 16-bit training, summed item by item from the
//      activations a layer stores: 34 → 10 + 24/t → 34/t (× sbh bytes, with FlashAttention-style
//      recomputation); at t = 8 that is 34 → 13 → 4.25, or 1.14 → 0.44 → 0.14 GB per layer for
//      an 8B model at s = 8192.
//   5. The bug SP invites: backward() without finish_gradients() leaves every replicated
//      parameter (norms, row-parallel biases, wpe) with a partial gradient; the audit against
//      t = 1 names each one as a missing all-reduce, and passes once the gradients are finished.
//   6. What SP costs in communication, from the CommLedger of one training step: forward the same
//      bytes as plain TP, backward more — attention and the MLP keep only their input's shard and
//      gather it again for the weight gradients, so a layer sends 10 half-collectives (reduce-
//      scatters or all-gathers of N·h) instead of plain TP's 8 (two all-reduces each way); for
//      Qwen3-8B at t = 8 ([A3]'s model) that is 560 instead of 448 MiB per layer and rank.
//
// What is new since lesson 07: the sequence-dimension region ops (scatter / gather /
// reduce_scatter_to_sp_region in lib/parallel/mappings.h), GptConfig::sp, Gpt::memory() and
// block_activation_bytes() (lib/model/memory.h), Gpt::finish_gradients() and
// audit_replicated_gradients() (lib/model/audit.h).
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_08_sequence_parallel [--step]   (also -np 1, 4)
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/comm_ledger.h"
#include "core/host.h"
#include "lesson.h"
#include "model/audit.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "model/memory.h"
#include "model/preflight.h"
#include "model/presets.h"
#include "parallel/mappings.h"

using namespace tp;

namespace {

// "attn.q" from "transformer.h.0.attn.q" (or from "h.0.attn.q"): the name inside layer 0.
std::string layer0_name(std::string name) {
  for (const std::string prefix : {"transformer.", "h.0."})
    if (name.compare(0, prefix.size(), prefix) == 0) name = name.substr(prefix.size());
  return name;
}

std::string num(double v, const char* format) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

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

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_08_sequence_parallel",
      "Lesson 08: sequence parallelism, the activations TP leaves whole split by tokens", {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int r = L.rank(), t = L.size();
    SerialCommunicator solo;

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
        "  backward SP adds a re-gather of each region's input: step 6).\n"
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

    // 3. Activation memory of one block, measured and by formula.
    L.step(
        "What one block keeps for backward, per rank: the MemoryLedger of a real Gpt, and the "
        "formula.");
    GptConfig cfg = lesson_gpt(/*layers=*/1, /*hidden=*/32, /*vocab=*/64, /*seq=*/8);
    cfg.dropout = 0.1f;
    const int64_t S = cfg.seq, B = 2, N = S * B;
    GptConfig cfg_sp = cfg;
    cfg_sp.sp = true;
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
    std::vector<MemoryRecord> recs_tp, recs_sp;
    const int64_t tp_here = measure(world, cfg, &recs_tp),
                  sp_here = measure(world, cfg_sp, &recs_sp);
    const int64_t tp_one = measure(solo, cfg, nullptr), sp_one = measure(solo, cfg_sp, nullptr);

    lesson::Table kept(
        {"kept for backward (layer 0)", "TP: shape", "TP + SP: shape", "TP + SP: bytes"});
    for (size_t i = 0; i < recs_tp.size() && i < recs_sp.size(); ++i) {
      const bool same_name = recs_tp[i].name == recs_sp[i].name;
      kept.add(
          {layer0_name(recs_tp[i].name) + (same_name ? "" : " / " + layer0_name(recs_sp[i].name)),
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
      const double probs = 4.0 * cfg.heads * S * S * B / tt;
      L.check_fact("TP = sbh(24 + 48/t) + 16sb + 4·nh·s²b/t at t = " + std::to_string(tt),
                   {static_cast<float>(f_tp)},
                   {static_cast<float>(sbh * (24 + 48.0 / tt) + 16 * sb + probs)}, 0);
      L.check_fact("TP + SP = sbh·72/t + 16sb/t + 4·nh·s²b/t at t = " + std::to_string(tt),
                   {static_cast<float>(f_sp)},
                   {static_cast<float>(sbh * 72.0 / tt + 16 * sb / tt + probs)}, 0);
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
        "  In fp32 with fp32 masks the closed forms are TP: sbh(24 + 48/t) + 16sb + 4·nh·s²b/t "
        "and\n"
        "  TP + SP: sbh·72/t + 16sb/t + 4·nh·s²b/t (the 16sb: two LayerNorms' mean and rstd). The "
        "24 is\n"
        "  four fp32 per-token tensors and two fp32 masks that plain TP keeps whole on every "
        "rank.");

    // 4. Korthikanti et al.'s coefficients, summed item by item.
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
      big.add({names[i++], lesson::fmt(static_cast<float>(c)), num(c * sbh8 / GB, "%.2f"),
               num(36 * c * sbh8 / GB, "%.1f")});
    }
    L.say(
        "  With FlashAttention the a·s²·b terms are recomputed, not stored. c · s·b·h bytes (GB = "
        "1e9 B):");
    L.say(big.str());
    L.check_fact("GB per layer: 1.14, 0.44, 0.14", per_layer, {1.14f, 0.44f, 0.14f});
    L.check_fact("GB for 36 layers: 41.1, 15.7, 5.1", all_layers, {41.1f, 15.7f, 5.1f});
    L.say(
        "  TP alone stops at the 10 that does not shrink (norm inputs, attention and MLP inputs, "
        "dropout\n"
        "  masks); SP divides those by t too, so the whole layer scales as 1/t.");

    // 5. The bug SP invites, and the audit that catches it.
    L.step(
        "Forget finish_gradients(): partial gradients of the replicated parameters, caught by the "
        "audit.");
    const GptConfig small = lesson_gpt(/*layers=*/1, /*hidden=*/16, /*vocab=*/32, /*seq=*/8);
    GptConfig small_sp = small;
    small_sp.sp = true;
    const Batch b5 = MarkovSource(small.vocab, 5).batch(0, 2, small.seq);
    L.say("  model: ", small_sp.str(), ";  s = ", small.seq, ", b = 2: each rank holds ",
          small.seq / t, " positions of each sequence between the TP regions");
    Gpt sp_model(dev, world, small_sp), tp_model(dev, world, small), reference(dev, solo, small);
    for (Gpt* g : {&sp_model, &tp_model, &reference}) {
      g->init(5);
      g->zero_grad();
    }
    const float loss_sp = sp_model.forward(b5, 5, 0), loss_tp = tp_model.forward(b5, 5, 0);
    const float loss_one = reference.forward(b5, 5, 0);
    sp_model.backward();
    tp_model.backward();
    reference.backward();
    tp_model.finish_gradients();  // nothing to do without SP
    reference.finish_gradients();
    L.say("  loss: TP + SP at t = ", t, ": ", lesson::fmt(loss_sp), ",  TP at t = ", t, ": ",
          lesson::fmt(loss_tp), ",  t = 1: ", lesson::fmt(loss_one));
    L.check("loss TP + SP vs t = 1", {loss_sp}, {loss_one}, 1e-5);
    L.check("loss TP vs t = 1", {loss_tp}, {loss_one}, 1e-5);

    int partial_params = 0;
    int64_t partial_elems = 0;
    for (const Param& p : sp_model.params())
      if (p.sequence_parallel_grad) ++partial_params, partial_elems += p.grad.numel();
    const std::vector<std::string> broken = audit_replicated_gradients(world, sp_model, reference);
    L.say("  backward() without finish_gradients(), audited against t = 1 (lib/model/audit.h): ",
          broken.size(), " finding", broken.size() == 1 ? "" : "s");
    for (const auto& line : broken) L.say("    ", line);
    int missing = 0;
    for (const auto& line : broken) missing += line.find("missing all-reduce") != std::string::npos;
    const int expect_broken = t > 1 ? partial_params : 0;
    L.check_fact("findings without finish_gradients", {static_cast<float>(broken.size())},
                 {static_cast<float>(expect_broken)});
    L.check_fact("findings that say missing all-reduce", {static_cast<float>(missing)},
                 {static_cast<float>(expect_broken)});
    if (t == 1)
      L.say(
          "  At t = 1 the one rank sees every token, so its gradients are already whole: the "
          "variant\n"
          "  without finish_gradients() is not broken, and the audit finds nothing.");

    m = L.mark();
    sp_model.finish_gradients();
    L.say("  finish_gradients(): ", L.comm_since(m), " (", partial_params,
          " parameters packed together)");
    const std::vector<std::string> fixed = audit_replicated_gradients(world, sp_model, reference);
    L.say("  audited again: ", fixed.size(), " finding", fixed.size() == 1 ? "" : "s");
    for (const auto& line : fixed) L.say("    ", line);
    L.check_fact("findings after finish_gradients", {static_cast<float>(fixed.size())}, {0});
    L.check_fact("elements all-reduced by finish_gradients",
                 {static_cast<float>(t > 1 ? world.ledger().records()[m].elements : partial_elems)},
                 {static_cast<float>(partial_elems)});
    L.check("every gradient, TP + SP vs t = 1",
            gathered(world, sp_model.params(), ParamField::Grad),
            gathered(solo, reference.params(), ParamField::Grad), 1e-5);
    L.check("every gradient, TP vs t = 1", gathered(world, tp_model.params(), ParamField::Grad),
            gathered(solo, reference.params(), ParamField::Grad), 1e-5);

    // 6. What SP sends: one training step of a 2-layer model, plain TP and TP + SP, from the
    // ledger. Forward, the two designs move the same bytes; backward, SP gathers each region's
    // kept input shard again (attention and the MLP need the whole sequence for dW = Xᵀ dY).
    L.step("What SP sends: one training step's collectives from the ledger, plain TP vs TP + SP.");
    GptConfig two = small;
    two.layers = 2;
    GptConfig two_sp = two;
    two_sp.sp = true;
    const int64_t Lyr = two.layers, Nh = two.seq * 2 * two.hidden;
    L.say("  model: ", two_sp.str(), ";  s = ", two.seq, ", b = 2 (N = ", two.seq * 2,
          " tokens)\n  counted: the collectives of N·h = ", Nh,
          " floats, the activations (not the loss's and the gradient norm's few numbers)");
    // Halves: an all-reduce is a reduce-scatter plus an all-gather, so it counts two.
    struct Pass {
      int halves = 0;
      double bytes = 0;
    };
    auto count_since = [&](size_t from, size_t to) {
      Pass p;
      const auto& recs = world.ledger().records();
      for (size_t k = from; k < to; ++k) {
        if (recs[k].elements != Nh) continue;
        p.halves += recs[k].op == "all_reduce" ? 2 : 1;
        p.bytes += recs[k].wire_bytes;
      }
      return p;
    };
    // One step of `c`: forward, backward and finish_gradients(), each pass's collectives; the
    // backward's by op and label (a label names the region op that issued it).
    std::map<std::string, int> sp_backward_ops;
    auto one_step = [&](const GptConfig& c, Pass& fwd, Pass& bwd, double& after) {
      Gpt g(dev, world, c);
      g.init(5);
      g.zero_grad();
      const size_t m0 = L.mark();
      g.forward(b5, 5, 0);
      const size_t m1 = L.mark();
      g.backward();
      const size_t m2 = L.mark();
      g.finish_gradients();
      fwd = count_since(m0, m1);
      bwd = count_since(m1, m2);
      after = world.ledger().wire_bytes_since(m2);
      if (c.sp)
        for (size_t k = m1; k < m2; ++k) {
          const CommRecord& rec = world.ledger().records()[k];
          if (rec.elements == Nh) ++sp_backward_ops[rec.op + " (" + rec.label + ")"];
        }
    };
    Pass tp_fwd, tp_bwd, sp_fwd, sp_bwd;
    double tp_after = 0, sp_after = 0;
    one_step(two, tp_fwd, tp_bwd, tp_after);
    one_step(two_sp, sp_fwd, sp_bwd, sp_after);
    auto bytes_str = [](double b) { return num(b, "%.0f") + " B"; };
    lesson::Table passes({"pass", "plain TP: halves", "plain TP: sent per rank", "TP + SP: halves",
                          "TP + SP: sent per rank"});
    passes.add({"forward", std::to_string(tp_fwd.halves), bytes_str(tp_fwd.bytes),
                std::to_string(sp_fwd.halves), bytes_str(sp_fwd.bytes)});
    passes.add({"backward", std::to_string(tp_bwd.halves), bytes_str(tp_bwd.bytes),
                std::to_string(sp_bwd.halves), bytes_str(sp_bwd.bytes)});
    passes.add({"whole step", std::to_string(tp_fwd.halves + tp_bwd.halves),
                bytes_str(tp_fwd.bytes + tp_bwd.bytes),
                std::to_string(sp_fwd.halves + sp_bwd.halves),
                bytes_str(sp_fwd.bytes + sp_bwd.bytes)});
    L.say("  half-collectives of N·h (an all-reduce counts 2: a reduce-scatter + an all-gather):");
    L.say(passes.str());
    lesson::Table ops({"TP + SP backward: collective (CommLedger label)", "calls"});
    for (const auto& kv : sp_backward_ops) ops.add({kv.first, std::to_string(kv.second)});
    if (t > 1) L.say(ops.str());
    // Per layer: plain TP 2 all-reduces each way (8 halves); SP 2 all-gathers + 2 reduce-scatters
    // forward, and backward 2 all-gathers of dY, 2 reduce-scatters of dX and 2 re-gathers of the
    // kept input (10 halves). Once per step: the embedding and the head, 2 halves each way.
    const float on = t > 1 ? 1.0f : 0.0f;  // at t = 1 the region ops move nothing
    const double half_bytes = (t - 1.0) / t * 4.0 * Nh;
    L.check_fact("forward halves, plain TP and TP + SP = 4L + 2",
                 {float(tp_fwd.halves), float(sp_fwd.halves)},
                 {on * (4 * Lyr + 2), on * (4 * Lyr + 2)}, 0);
    L.check_fact("backward halves: plain TP = 4L + 2, TP + SP = 6L + 2",
                 {float(tp_bwd.halves), float(sp_bwd.halves)},
                 {on * (4 * Lyr + 2), on * (6 * Lyr + 2)}, 0);
    L.check_fact("bytes per rank = halves · (t − 1)/t · 4·N·h",
                 {float(tp_fwd.bytes + tp_bwd.bytes), float(sp_fwd.bytes + sp_bwd.bytes)},
                 {float((tp_fwd.halves + tp_bwd.halves) * half_bytes),
                  float((sp_fwd.halves + sp_bwd.halves) * half_bytes)});
    L.check_true("SP sends more than plain TP in backward, the same in forward",
                 (sp_bwd.bytes > tp_bwd.bytes) == (on > 0) && sp_fwd.bytes == tp_fwd.bytes);
    L.say(
        "  per layer: plain TP 4 halves forward + 4 backward = 8; TP + SP 4 + 6 = 10 (the 2\n"
        "  re-gathers of the kept input shard, labelled gather_from_sp_region.forward above, run\n"
        "  in backward): 1.25× the bytes of plain TP per layer, (10L + 4)/(8L + 4) for the step.");
    if (t == 1) L.say("  (t = 1: nothing moves; run with -np 2 or 4 to see the counts.)");
    L.say("  after backward, SP also all-reduces the partial gradients (finish_gradients): ",
          bytes_str(sp_after), " per rank here (plain TP: ", bytes_str(tp_after), ").");
    // The same count for [A3]'s model: Qwen3-8B, one 8K sequence, bf16, t = 8: 56 MiB per half.
    {
      const GptConfig qwen = model_preset("qwen3-8b");
      auto per_layer = [&](bool sp) {
        GptConfig c = qwen;
        c.sp = sp;
        double w = 0;
        for (const PlannedCollective& k : step_collectives(c, 1, 8, 2))
          if (k.per_layer) w += k.count * ring_wire_bytes(k.op, 8, k.bytes);
        return w / 1048576.0;
      };
      const double plain_mib = per_layer(false), sp_mib = per_layer(true);
      L.say(
          "  [A3]'s model (Qwen3-8B, s = 8192, b = 1, bf16, t = 8; lib/model/preflight.h): one "
          "half is\n  7/8 · 64 MiB = 56 MiB, so a layer sends ",
          num(plain_mib, "%.0f"), " MiB per rank under plain TP and ", num(sp_mib, "%.0f"),
          " MiB under TP + SP.");
      L.check_fact("Qwen3-8B at t = 8, MiB per layer: plain TP 8 · 56, TP + SP 10 · 56",
                   {float(plain_mib), float(sp_mib)}, {8 * 56, 10 * 56});
    }
    L.say(
        "  So SP does not leave the communication unchanged: forward it moves the same bytes,\n"
        "  backward half as much again (6 halves per layer instead of 4), a quarter more for the\n"
        "  layer as a whole. [A1] (§2, §6) is right that SP adds communication; what SP buys with\n"
        "  it is activation memory (steps 3 and 4).");

    // 7. Summary.
    L.step("Summary.");
    L.say(table.str());
    L.say(norms.str());
    L.say(
        "Sequence parallelism splits the token-wise work between the TP regions (norms, dropout,\n"
        "residual adds) along the sequence. At each region boundary the communication is the same\n"
        "all-reduce cut in two halves; backward adds the re-gather of each region's input, so a\n"
        "layer sends 10 half-collectives instead of 8, and once per step an all-reduce of the\n"
        "replicated parameters' partial gradients. What it buys: activation memory per layer "
        "falls\n"
        "from sbh(10 + 24/t) to sbh·34/t.");
      });
}
