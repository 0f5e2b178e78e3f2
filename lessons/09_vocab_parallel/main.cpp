// Lesson 09 — the vocabulary split over the ranks: embedding lookup, LM head and cross-entropy.
//
// What it shows:
//   1. A vocabulary-parallel embedding: V = 7 token rows of h = 3 (integer values, row v is
//      [10v + 1, 10v + 2, 10v + 3]), padded to a multiple of t and split by rows. Each rank looks
//      up the ids it owns and writes zeros for the others; one all-reduce (g) sums the ranks'
//      outputs into the full lookup, because exactly one rank contributes each row.
//   2. The cross-entropy without ever assembling the logits: the head's logits are split by
//      vocabulary columns, and each token needs three numbers from the other ranks, each one
//      all-reduce of one float per token: the row max (MAX), Σ exp(x − max) (SUM), and the target
//      logit (SUM; only the owning rank contributes). loss = log Σ + max − target equals the
//      single-device log-softmax cross-entropy. The backward, softmax − one-hot on the rank's own
//      columns, needs no communication at all.
//   3. GPT-2's vocabulary, 50257, at t = np: padded to the next multiple of t (50259 at t = 3), the
//      padding invisible. A small Gpt with V = 50257 at t = np and at t = 1 (unpadded) gives the
//      same loss and the same wte gradient on the real rows; the padding rows' gradient is exactly
//      zero; and the largest tensor any rank allocates in a step is its logits shard, not the full
//      [tokens, V] logits.
//   4. At a real size: 8192 tokens × 151936 ids (Qwen3) in fp32 are 4.98 GB of logits on one
//      device, 0.62 GB per rank at t = 8.
//
// What is new since lesson 08c: lib/parallel/vocab_parallel.h, the two units the model uses:
// VocabParallelEmbedding (forward_partial, then forward = the same + g) and
// vocab_parallel_cross_entropy_forward / _backward, whose watcher shows every intermediate number;
// below them the kernels of lib/core/device.h (embedding_shard_forward, vocab_max,
// vocab_sum_exp_target, vocab_loss, vocab_softmax_backward) and all_reduce with ReduceOp::Max;
// GptConfig::padded_vocab, gather_real, and Device::memory().
//
// Run:  make lessons && mpirun -np 3 build/bin/lesson_09_vocab_parallel [--step]   (also -np 1, 2, 4)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/host.h"
#include "lesson.h"
#include "model/data.h"
#include "model/gpt.h"
#include "parallel/vocab_parallel.h"
#include "pictures.h"

using namespace tp;

namespace {

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}

float round2(double v) { return static_cast<float>(std::round(v * 100.0) / 100.0); }

const Param& param(const Gpt& model, const std::string& name) {
  for (const Param& p : model.params())
    if (p.name == name) return p;
  TP_CHECK(false, "no parameter ", name);
  return model.params().front();
}

// Step 2's numbers for the picture: the logits, who owns which columns, and per rank (rank 0's
// gather) the three local numbers; the all-reduced ones and the loss, the same on every rank.
struct CrossEntropyPicture {
  int t = 1;
  int64_t nt = 0, V = 0, Vp = 0, rows = 0;
  std::vector<float> logits;  // (nt × V)
  std::vector<int32_t> target;
  std::vector<std::vector<float>> local[3];  // per rank: local max, Σ exp(x − max), target logit
  std::vector<float> global[3], loss;        // after each all-reduce; the loss
};

// The logits split by vocabulary columns over the ranks (the target's cell outlined in red), and
// under each rank's columns the three numbers it computes, then the all-reduce that combines them.
SvgDiagram draw_cross_entropy(const CrossEntropyPicture& p) {
  const double cw = 44, ch = 26, left = 150, top = 100;
  SvgDiagram d(800, 60,
               "Cross-entropy over logits split by vocabulary columns, t = " + std::to_string(p.t) +
                   ": " + std::to_string(p.nt) + " tokens × V' = " + std::to_string(p.Vp));
  lesson::draw_rank_legend(d, 30, 40, p.t);
  for (int r = 0; r < p.t; ++r) {
    const int64_t a = r * p.rows, b = std::min((r + 1) * p.rows, p.Vp) - 1;
    d.text(left + (r + 0.5) * p.rows * cw, top - 8,
           "rank " + std::to_string(r) + ": ids " + std::to_string(a) + "–" + std::to_string(b),
           "middle", 11);
  }
  for (int64_t k = 0; k < p.nt; ++k) {
    const double y = top + k * ch;
    d.text(left - 8, y + 17,
           "token " + std::to_string(k) + " (target " + std::to_string(p.target[k]) + ")", "end",
           11);
    for (int64_t j = 0; j < p.Vp; ++j) {
      const double x = left + j * cw;
      if (j < p.V)
        d.box(x, y, cw, ch, lesson::rank_color(static_cast<int>(j / p.rows)),
              lesson::fmt(p.logits[k * p.V + j]));
      else
        d.box(x, y, cw, ch, "white", "pad");
      if (j == p.target[k]) {  // the target's logit: outlined
        d.line(x + 1, y + 1, x + cw - 1, y + 1, "#c0392b");
        d.line(x + 1, y + ch - 1, x + cw - 1, y + ch - 1, "#c0392b");
        d.line(x + 1, y + 1, x + 1, y + ch - 1, "#c0392b");
        d.line(x + cw - 1, y + 1, x + cw - 1, y + ch - 1, "#c0392b");
      }
    }
  }
  const double right = left + p.Vp * cw;
  const char* what[3] = {"① max of my columns", "② Σ exp(x − max), mine", "③ target logit, or 0"};
  const char* how[3] = {"all-reduce MAX", "all-reduce SUM", "all-reduce SUM"};
  double y = top + p.nt * ch + 24;
  d.text(left, y, "per token [token 0, token 1]: each rank's number, then the all-reduce", "start",
         11, "#555");
  y += 10;
  for (int q = 0; q < 3; ++q, y += 34) {
    d.text(left - 8, y + 17, what[q], "end", 11);
    for (int r = 0; r < p.t; ++r)
      d.box(left + r * p.rows * cw + 4, y, p.rows * cw - 8, ch, lesson::rank_color(r),
            lesson::fmt(p.local[q][r]));
    d.arrow(right + 6, y + ch / 2, right + 116, y + ch / 2);
    d.text(right + 60, y + ch / 2 - 5, how[q], "middle", 10);
    d.box(right + 120, y, 130, ch, lesson::kWholeColor, lesson::fmt(p.global[q]));
  }
  lesson::draw_notes(
      d, y + 14,
      {"On every rank: loss = log ② + ① − ③ = " + lesson::fmt(p.loss) +
           "; the whole row of logits is never assembled.",
       "Backward: softmax − one-hot of my columns needs only ① and ②, which every rank already "
       "has: no communication.",
       "The padding columns (V' − V = " + std::to_string(p.Vp - p.V) +
           ") are skipped: they win no max and add nothing to the sum."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_09_vocab_parallel",
      "Lesson 09: the vocabulary split over the ranks: embedding, LM head, cross-entropy",
      {3, 1, 2, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn in step 5, its path checked now
    SerialCommunicator solo;

    lesson::Table table = L.rank_table();

    // 1. The embedding lookup, split by vocabulary rows.
    L.step(
        "Embedding split by vocabulary rows: look up the ids I own, zeros for the rest, then "
        "all-reduce.");
    GptConfig tiny;
    tiny.vocab = 7;
    const int64_t V = tiny.vocab, h = 3;
    VocabParallelEmbedding embedding(dev, world, "wte", V, tiny.padded_vocab(t), h);
    const int64_t Vp = embedding.padded_vocab(), rows = embedding.local_rows(),
                  first = embedding.first_id();
    std::vector<float> wte(Vp * h, 0.0f);  // row v = [10v + 1, 10v + 2, 10v + 3]; padding rows 0
    for (int64_t v = 0; v < V; ++v)
      for (int64_t j = 0; j < h; ++j) wte[v * h + j] = static_cast<float>(10 * v + j + 1);
    embedding.load_global(std::vector<float>(wte.begin(), wte.begin() + V * h));  // takes my rows
    const std::vector<int32_t> ids = {5, 1, 6, 2};
    const int64_t n = static_cast<int64_t>(ids.size());
    L.say("  V = ", V, ", h = ", h,
          ": wte row v = [10v + 1, 10v + 2, 10v + 3];  ids = [5, 1, 6, 2]");
    L.say("  padded to V' = ", Vp, " (a multiple of t = ", t, "): rank r owns ids [", rows, "r, ",
          rows, "(r + 1))", Vp > V ? ", and the padding rows are zero and never looked up" : "");
    L.check_true("V' is a multiple of t, at most t − 1 rows of padding",
                 Vp % t == 0 && Vp >= V && Vp - V < t);
    size_t m = L.mark();
    L.say(
        "  Below, a rank's wte shard has one row per id it owns (lowest first), and a lookup one "
        "row");
    L.say("  per entry of ids, in order.");
    L.report(table, "holds wte rows", embedding.weight, m);
    L.check_ranks("wte shard", embedding.weight, lesson::per_rank(t, [&](int i) {
                    return host_block(wte, h, i * rows, rows, 0, h);
                  }));

    std::vector<float> ids_f(ids.begin(), ids.end()),
        lookup;  // lookup: the plain single-device wte[ids]
    for (int32_t id : ids)
      lookup.insert(lookup.end(), wte.begin() + id * h, wte.begin() + (id + 1) * h);
    auto masked = [&](int i) {  // rank i's output: its own rows, zeros for ids it does not own
      std::vector<float> out(n * h, 0.0f);
      for (int64_t k = 0; k < n; ++k)
        if (ids[k] >= i * rows && ids[k] < (i + 1) * rows)
          std::copy(lookup.begin() + k * h, lookup.begin() + (k + 1) * h, out.begin() + k * h);
      return out;
    };
    Tensor id_t = Tensor::from_host(dev, Shape{n}, ids_f);
    m = L.mark();
    Tensor emb = embedding.forward_partial(id_t);  // what forward computes before its all-reduce
    L.report(table, "masked lookup", emb, m);
    L.check_ranks("masked lookup", emb, lesson::per_rank(t, masked));
    m = L.mark();
    Tensor full = embedding.forward(id_t);  // the masked lookup again, then g: the all-reduce
    L.report(table, "all-reduce (g)", full, m);
    L.check_ranks("all-reduced lookup = wte[ids]", full,
                  lesson::per_rank(t, [&](int) { return lookup; }));
    L.say(
        "  Each id is owned by exactly one rank, so the sum over ranks is that rank's row: "
        "wte[ids] = ",
        lesson::fmt(lookup, h));

    // 2. The cross-entropy from three all-reduced numbers per token.
    L.step(
        "Cross-entropy over logits split by vocabulary columns: three all-reduces of one number "
        "per token.");
    const std::vector<float> logits = {2, 1, 0, -1, 3,  0.5f, 1,   // token 0, target 4
                                       0, 2, 1, 1,  -2, 1,    4};  // token 1, target 1
    const std::vector<int32_t> target = {4, 1};
    const int64_t nt = 2;
    L.say("  logits (2 tokens × V = ", V, ") = ", lesson::fmt(logits, V), ",  targets = [4, 1]");
    // The single-device reference, in double: log Σ_j exp(x_j) − x_target, and softmax − one-hot.
    std::vector<float> loss_ref, grad_ref(nt * Vp, 0.0f), max_ref, sum_ref, tgt_ref;
    for (int64_t i = 0; i < nt; ++i) {
      double lse = 0, mx = -1e30;
      for (int64_t j = 0; j < V; ++j)
        lse += std::exp(double(logits[i * V + j])), mx = std::max(mx, double(logits[i * V + j]));
      lse = std::log(lse);
      double se = 0;
      for (int64_t j = 0; j < V; ++j) se += std::exp(double(logits[i * V + j]) - mx);
      loss_ref.push_back(static_cast<float>(lse - logits[i * V + target[i]]));
      max_ref.push_back(static_cast<float>(mx));
      sum_ref.push_back(static_cast<float>(se));
      tgt_ref.push_back(logits[i * V + target[i]]);
      for (int64_t j = 0; j < V; ++j)
        grad_ref[i * Vp + j] = static_cast<float>(std::exp(double(logits[i * V + j]) - lse) -
                                                  (j == target[i] ? 1 : 0));
    }
    L.say("  one device: loss = log Σ_j exp(x_j) − x_target = ", lesson::fmt(loss_ref), ",  mean ",
          lesson::fmt((loss_ref[0] + loss_ref[1]) / 2));
    std::vector<float> padded(nt * Vp,
                              0.0f);  // the padding columns hold 0 (zero wte rows) and are skipped
    for (int64_t i = 0; i < nt; ++i)
      for (int64_t j = 0; j < V; ++j) padded[i * Vp + j] = logits[i * V + j];
    Tensor x_r =
        Tensor::from_host(dev, Shape{nt, rows}, host_block(padded, Vp, 0, nt, first, rows));
    Tensor tgt_t =
        Tensor::from_host(dev, Shape{nt}, std::vector<float>(target.begin(), target.end()));
    const VocabShard vs = embedding.shard();  // the head's columns are the embedding's rows
    L.say(
        "  my columns of the logits (the head's output, column-parallel; padding columns are "
        "skipped),\n"
        "  one row per token; below, one number per token is [token 0, token 1]:");
    m = L.mark();
    L.report(table, "logits: my columns", x_r, m);
    L.check_ranks("logits shard", x_r, lesson::per_rank(t, [&](int i) {
                    return host_block(padded, Vp, 0, nt, i * rows, rows);
                  }));

    auto over_cols = [&](int i, auto f) {  // f(token, global column) summed/maxed by the caller
      std::vector<float> out;
      for (int64_t k = 0; k < nt; ++k) out.push_back(f(k, i * rows, std::min((i + 1) * rows, V)));
      return out;
    };
    // vocab_parallel_cross_entropy_forward runs the stages below in this order and calls `watch`
    // after each one: the lesson prints and checks every intermediate number as it is formed.
    CrossEntropyPicture pic{t, nt, V, Vp, rows, logits, target, {}, {}, {}};
    auto watch = [&](CrossEntropyStage stage, const CrossEntropyStats& st) {
      // For the picture: each rank's local numbers (gathered on rank 0), the all-reduced ones.
      if (stage == CrossEntropyStage::LocalMax) pic.local[0] = L.gather(st.row_max);
      if (stage == CrossEntropyStage::LocalSums) {
        pic.local[1] = L.gather(st.sum_exp);
        pic.local[2] = L.gather(st.target_logit);
      }
      if (stage == CrossEntropyStage::Max) pic.global[0] = st.row_max.to_host();
      if (stage == CrossEntropyStage::SumExp) pic.global[1] = st.sum_exp.to_host();
      if (stage == CrossEntropyStage::TargetLogit) pic.global[2] = st.target_logit.to_host();
      if (stage == CrossEntropyStage::Loss) pic.loss = st.loss.to_host();
      switch (stage) {
        case CrossEntropyStage::LocalMax:
          L.report(table, "local max", st.row_max, m);
          L.check_ranks("local max", st.row_max, lesson::per_rank(t, [&](int i) {
                          return over_cols(i, [&](int64_t k, int64_t a, int64_t b) {
                            float mx = -std::numeric_limits<float>::infinity();
                            for (int64_t j = a; j < b; ++j) mx = std::max(mx, logits[k * V + j]);
                            return mx;
                          });
                        }));
          break;
        case CrossEntropyStage::Max:
          L.report(table, "① all-reduce MAX: max", st.row_max, m);
          L.check_ranks("global max", st.row_max,
                        lesson::per_rank(t, [&](int) { return max_ref; }));
          L.say(
              "  ② Σ exp(x − max) over my columns, and ③ the target's logit if I own the target "
              "(else 0);\n"
              "  then two all-reduces SUM:");
          break;
        case CrossEntropyStage::LocalSums:
          L.report(table, "local Σ exp(x − max)", st.sum_exp, m);
          L.check_ranks("local Σ exp(x − max)", st.sum_exp,
                        lesson::per_rank(
                            t,
                            [&](int i) {
            return over_cols(i, [&](int64_t k, int64_t a, int64_t b) {
              double se = 0;
              for (int64_t j = a; j < b; ++j)
                se += std::exp(double(logits[k * V + j]) - max_ref[k]);
              return static_cast<float>(se);
            });
                            }),
                        1e-6);
          L.report(table, "local target logit", st.target_logit, m);
          L.check_ranks("local target logit (0 unless I own the target)", st.target_logit,
                        lesson::per_rank(t, [&](int i) {
                          return over_cols(i, [&](int64_t k, int64_t a, int64_t b) {
                            return target[k] >= a && target[k] < b ? logits[k * V + target[k]]
                                                                   : 0.0f;
                          });
                        }));
          break;
        case CrossEntropyStage::SumExp:
          L.report(table, "② all-reduce SUM: Σ exp", st.sum_exp, m);
          L.check_ranks("Σ exp(x − max) over V", st.sum_exp,
                        lesson::per_rank(t, [&](int) { return sum_ref; }), 1e-6);
          break;
        case CrossEntropyStage::TargetLogit:
          L.report(table, "③ all-reduce SUM: target", st.target_logit, m);
          L.check_ranks("target logit", st.target_logit,
                        lesson::per_rank(t, [&](int) { return tgt_ref; }));
          L.say(
              "  loss = log Σ + max − target on every rank; then the backward, softmax − one-hot "
              "on my columns:");
          break;
        case CrossEntropyStage::Loss:
          L.report(table, "loss = log Σ + max − target", st.loss, m);
          L.check_ranks("loss vs single-device log-softmax cross-entropy", st.loss,
                        lesson::per_rank(t, [&](int) { return loss_ref; }), 1e-6);
          break;
      }
      m = L.mark();  // the next stage's communication starts here
    };
    L.say(
        "  ① the max over my real columns, then all-reduce MAX (subtracted before exp, for "
        "stability):");
    m = L.mark();
    const CrossEntropyStats stats =
        vocab_parallel_cross_entropy_forward(dev, world, x_r, tgt_t, vs, watch);

    Tensor dlogits(dev, Shape{nt, rows});
    m = L.mark();
    vocab_parallel_cross_entropy_backward(dev, dlogits, x_r, tgt_t, stats, vs, 1.0f);
    L.report(table, "backward: softmax − one-hot", dlogits, m);
    L.check_ranks(
        "dlogits on my columns", dlogits,
        lesson::per_rank(t, [&](int i) { return host_block(grad_ref, Vp, 0, nt, i * rows, rows); }),
        1e-6);
    L.check_fact("backward communication (collectives)",
                 {static_cast<float>(world.ledger().size() - m)}, {0});
    const auto parts = L.gather(dlogits);
    if (L.is_root()) {
      std::vector<float> concat(nt * Vp);  // side by side: (nt × V')
      for (int i = 0; i < t; ++i)
        for (int64_t k = 0; k < nt; ++k)
          for (int64_t c = 0; c < rows; ++c) concat[k * Vp + i * rows + c] = parts[i][k * rows + c];
      std::vector<float> real;
      for (int64_t k = 0; k < nt; ++k)
        real.insert(real.end(), concat.begin() + k * Vp, concat.begin() + k * Vp + V);
      L.say("  the ranks' gradients side by side (first V columns) = ", lesson::fmt(real, V));
      L.check("concatenated dlogits = single-device softmax − one-hot", concat, grad_ref, 1e-6);
    }
    L.say(
        "  Each rank needs only max and Σ exp, already all-reduced in forward, to turn its own\n"
        "  logits into softmax − one-hot: the backward moves nothing.");

    // [A2] §6.2: each rank computes "the loss of its vocabulary shard", then all-reduce.
    std::vector<float> shard_losses(nt, 0.0f);
    for (int i = 0; i < t; ++i) {
      const std::vector<float> part = over_cols(i, [&](int64_t k, int64_t a, int64_t b) {
        double se = 0;
        for (int64_t j = a; j < b; ++j) se += std::exp(double(logits[k * V + j]));
        const double tgt = target[k] >= a && target[k] < b ? logits[k * V + target[k]] : 0.0;
        return a < b ? static_cast<float>(std::log(se) - tgt) : 0.0f;
      });
      for (int64_t k = 0; k < nt; ++k) shard_losses[k] += part[k];
    }
    const bool differs = rel_error(shard_losses, loss_ref) > 1e-3;
    L.check_true("per-shard losses, summed, differ from the loss (t > 1)", differs == (t > 1));
    L.say(
        "  [A2] §6.2 has each rank compute the loss over its own vocabulary columns and then\n"
        "  all-reduce those losses. Summed over the ranks, log Σ_(my columns) exp(x) − (my target\n"
        "  logit or 0) gives ",
        lesson::fmt(shard_losses),
        t > 1 ? ", not the loss " + lesson::fmt(loss_ref) +
                    ": a log of a sum is not a\n"
                    "  sum of logs. What adds up over the ranks is Σ exp(x − max) and the target "
                    "logit, as above."
              : ", the loss itself only because at t = 1\n  one rank has every column.");

    // 3. GPT-2's vocabulary in a real model, padded to a multiple of t.
    L.step("V = 50257 (GPT-2) at t = " + std::to_string(t) +
           ": padded, and the padding invisible.");
    GptConfig cfg;
    cfg.layers = 1;
    cfg.hidden = 24;
    cfg.heads = 12;
    cfg.vocab = 50257;
    cfg.seq = 16;
    const int64_t S = cfg.seq, B = 4, N = S * B;
    const int64_t vp = cfg.padded_vocab(t), vrows = vp / t;
    MarkovSource data(cfg.vocab, 9);
    const Batch batch = data.batch(0, B, S);
    L.say("  model: ", cfg.str(), ";  ", N, " tokens (s = ", S, ", b = ", B, ")");
    if (vp > cfg.vocab)
      L.say("  padded_vocab(", t, ") = ", vp, ": ", vrows, " ids per rank, ", vp - cfg.vocab,
            " padding row", vp - cfg.vocab == 1 ? "" : "s",
            " on the last rank (zero, never looked up, never in the softmax)");
    else
      L.say("  padded_vocab(", t, ") = ", vp, ": no padding at t = 1 (run with -np 3 to see it)");
    L.check_true("padded vocabulary: a multiple of t, fewer than t padding rows",
                 vp % t == 0 && vp >= cfg.vocab && vp - cfg.vocab < t);
    Gpt model(dev, world, cfg), one(dev, solo, cfg);
    model.init(9);
    one.init(9);
    const int64_t my_first = model.first_vocab_id(),
                  my_pad = std::max<int64_t>(0, my_first + vrows - cfg.vocab);
    Tensor owns =
        Tensor::from_host(dev, Shape{3},
                          {static_cast<float>(my_first), static_cast<float>(my_first + vrows - 1),
                           static_cast<float>(my_pad)});
    lesson::Table own_table = L.rank_table();
    m = L.mark();
    L.report(own_table, "[first id, last id, padding rows]", owns, m);
    L.check_fact_ranks("ids owned", owns, lesson::per_rank(t, [&](int i) {
                         const int64_t f = i * vrows;
                         return std::vector<float>{
                             float(f), float(f + vrows - 1),
                             float(std::max<int64_t>(0, f + vrows - cfg.vocab))};
                       }));

    model.zero_grad();
    one.zero_grad();
    dev.reset_peak();
    m = L.mark();
    const float loss_t = model.forward(batch, 9, 0);
    model.backward();
    const int64_t largest = dev.memory().largest;
    std::vector<CommRecord> ce;
    for (size_t i = m; i < world.ledger().size(); ++i)
      if (world.ledger().records()[i].label == "cross_entropy")
        ce.push_back(world.ledger().records()[i]);
    const float loss_1 = one.forward(batch, 9, 0);
    one.backward();
    L.say("  loss at t = ", t, ": ", lesson::fmt(loss_t),
          ",  at t = 1 (V = 50257, no padding): ", lesson::fmt(loss_1));
    L.check("loss, padded at t vs unpadded at t = 1", {loss_t}, {loss_1}, 1e-5);
    std::string ce_ops;
    for (const auto& rec : ce) {
      std::string op = rec.op;
      std::replace(op.begin(), op.end(), '_', '-');
      ce_ops += (ce_ops.empty() ? "" : ", ") + op + " of " + std::to_string(rec.elements);
    }
    L.say("  the cross-entropy's collectives in this step: ",
          ce.empty() ? "none (t = 1)" : ce_ops + " floats (one per token)");
    L.check_fact("cross-entropy collectives", {static_cast<float>(ce.size())},
                 {static_cast<float>(t > 1 ? 3 : 0)});
    for (const auto& rec : ce)
      L.check_fact("floats per cross-entropy all-reduce = tokens", {float(rec.elements)},
                   {float(N)});

    const Param& w = param(model, "transformer.wte.weight");
    const Param& w1 = param(one, "transformer.wte.weight");
    const std::vector<float> g_real = gather_real(world, w, w.grad),
                             g_one = gather_global(solo, w1, w1.grad);
    const std::vector<float> g_all = gather_global(world, w, w.grad),
                             v_all = gather_global(world, w, w.value);
    const std::vector<float> g_pad(g_all.begin() + cfg.vocab * cfg.hidden, g_all.end());
    const std::vector<float> v_pad(v_all.begin() + cfg.vocab * cfg.hidden, v_all.end());
    double gnorm = 0;
    for (float x : g_one) gnorm += double(x) * x;
    L.say("  wte gradient: ", cfg.vocab,
          " real rows (‖·‖ = ", lesson::fmt(static_cast<float>(std::sqrt(gnorm))),
          ") equal to t = 1's",
          g_pad.empty() ? ""
                        : ";  " + std::to_string(g_pad.size() / cfg.hidden) +
                              " padding rows: gradient exactly 0");
    L.check("wte gradient, real rows, vs t = 1", g_real, g_one, 1e-5);
    L.check_fact("wte gradient, padding rows, exactly 0", g_pad,
                 std::vector<float>(g_pad.size(), 0.0f), 0);
    L.check_fact("wte values, padding rows, exactly 0", v_pad,
                 std::vector<float>(v_pad.size(), 0.0f), 0);

    const int64_t full_logits = N * cfg.vocab * 4, shard_logits = N * vrows * 4;
    L.say("  largest allocation in the step (memory().largest): ", largest, " B = ", N, " × ",
          vrows, " × 4, my logits shard;  the full [", N, ", ", cfg.vocab, "] logits ",
          t > 1 ? "would be " : "are ", full_logits, " B");
    L.check_fact("largest allocation = tokens × V'/t × 4", {static_cast<float>(largest)},
                 {static_cast<float>(shard_logits)}, 0);
    L.check_true("largest allocation ≤ full logits (< at t > 1)",
                 t > 1 ? largest < full_logits : largest <= full_logits);

    // 4. At a real size.
    L.step("Logits at a real size: 8192 tokens × 151936 ids (Qwen3), fp32 (GB = 1e9 B).");
    GptConfig qwen;
    qwen.vocab = 151936;
    const double tokens = 8192;
    lesson::Table big({"t", "padded V'", "ids per rank", "logits per rank"});
    std::vector<float> per_rank_gb;
    for (int tt : {1, 2, 4, 8}) {
      const int64_t p = qwen.padded_vocab(tt);
      L.check_fact("151936 needs no padding at t = " + std::to_string(tt), {static_cast<float>(p)},
                   {151936});
      per_rank_gb.push_back(round2(tokens * (p / tt) * 4 / 1e9));
      big.add({std::to_string(tt), std::to_string(p), std::to_string(p / tt),
               gb(tokens * (p / tt) * 4)});
    }
    L.say(big.str());
    L.check_fact("ids per rank at t = 8", {static_cast<float>(qwen.padded_vocab(8) / 8)}, {18992});
    L.check_fact("logits per rank at t = 1 and 8: 4.98, 0.62 GB",
                 {per_rank_gb.front(), per_rank_gb.back()}, {4.98f, 0.62f});
    L.say("  One 8K-token sequence's fp32 logits: ", gb(tokens * 151936 * 4), " on one device, ",
          gb(tokens * 151936 / 8 * 4),
          " per rank at t = 8;\n"
          "  the loss all-reduces only three floats per token. The embedding, 151936 × 4096 = ",
          lesson::fmt(round2(151936.0 * 4096 / 1e9)), " B parameters,\n  splits the same way.");
    L.check_fact("embedding parameters, billions", {round2(151936.0 * 4096 / 1e9)}, {0.62f});

    // 5. Summary.
    L.step("Summary.");
    L.say(table.str());
    if (L.is_root()) lesson::write_picture(L, draw_cross_entropy(pic), svg);  // rank 0's gathers
    L.say(
        "The embedding and the LM head are split by vocabulary rows, like any other weight. The "
        "lookup\n"
        "costs one all-reduce of the activations; the loss three all-reduces of one float per "
        "token;\n"
        "the backward of the loss nothing. Padding V to a multiple of t changes no number.");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_09_vocab_parallel.svg",
                       "the logits split by vocabulary columns and the loss's three all-reduces");
  });
}
