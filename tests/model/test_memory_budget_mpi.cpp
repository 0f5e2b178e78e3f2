// test_memory_budget_mpi.cpp — the peak per rank (model/memory.h memory_peak, the preflight's
// Preflight::peak) against what a real step holds, and the budget's option search
// (model/memory_budget.h).
//
//   - measured = formula, to the byte: one train_step of a real tp::Gpt on the world (t = np) for
//     every recompute mode, SP off and on, m = 1 and 2, dropout on where it may be: the memory
//     ledger's bytes outside the blocks equal head_activation_bytes, its total equals L blocks +
//     the head; the weights and gradients 4·P with P the model's local elements, the optimizer
//     opt.state_bytes(); the rerun a recompute mode adds equals none's block bytes less the mode's
//     (both measured).
//   - the search: the first valid change in the articles' order that fits is the answer (checked
//     against a brute force over the same order), a budget below every option is "no option
//     fits", a base that fits is left alone, and invalid candidates (t not dividing the world,
//     m not dividing the replica's batch, ZeRO-1 at dp 1) are never proposed.
// Runs under mpirun -np 1..4 (the search part is the same at every np).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/memory_budget.h"
#include "model/preflight.h"
#include "model/train.h"
#include "model_test_helpers.h"
#include "parallel/process_grid.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

// The tiny GPT of model/presets.h, two blocks (init_std 0.1).
GptConfig budget_config() { return tiny_gpt(2); }

int64_t local_elements(const ParamList& params) {
  int64_t n = 0;
  for (const Param& p : params) n += p.value.numel();
  return n;
}

}  // namespace

TEST(MemoryPeak, LedgerEqualsTheFormulaForEveryMode) {
  const int t = world().size();
  ProcessGrid grid(world(), 1);
  const int64_t B = 4;
  int64_t none_block[2] = {0, 0};  // measured, per SP setting
  for (bool sp : {false, true})
    for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full})
      for (int m : {1, 2}) {
        GptConfig g = budget_config();
        g.sp = sp;
        g.recompute = mode;
        g.dropout = m == 1 ? 0.1f : 0.0f;  // micro-batches refuse dropout
        AdamWParams hp;
        Gpt model(device(), grid.tp(), g);
        model.init(3);
        AdamW opt(device(), model.params(), hp);
        MarkovSource data(g.vocab, 3);
        StepOptions so;
        so.micro_batches = m;
        train_step(grid, device(), model, opt, data.batch(0, B, g.seq), 3, 0, 1e-3f, 1.0f, {}, so);
        const std::string what =
            std::string(recompute_name(mode)) + (sp ? " sp" : "") + " m " + std::to_string(m);
        const int64_t b = B / m;
        const int64_t head = head_activation_bytes(g, g.seq, b, t);
        EXPECT_EQ(model.memory().layer_bytes(-1), head) << what;
        const int64_t block = block_activation_bytes(g, g.seq, b, t);
        EXPECT_EQ(model.memory().total_bytes(), g.layers * block + head) << what;
        if (mode == Recompute::None && m == 1) {
          none_block[sp] = model.memory().layer_bytes(0);
        }
        if (m == 1 && mode != Recompute::None) {
          // The rerun holds what none keeps less what this mode keeps (both measured; same
          // dropout 0.1 at m = 1).
          EXPECT_EQ(recompute_rerun_bytes(g, g.seq, b, t),
                    none_block[sp] - model.memory().layer_bytes(0))
              << what;
        }
        const int64_t P = local_elements(model.params());
        const MemoryPeak peak = memory_peak(g, g.seq, b, t, P, 1);
        EXPECT_EQ(peak.weights, 4 * P);
        EXPECT_EQ(peak.grads, 4 * P);
        EXPECT_EQ(peak.optimizer, opt.state_bytes());
        EXPECT_EQ(peak.activations,
                  model.memory().total_bytes() + recompute_rerun_bytes(g, g.seq, b, t))
            << what;
        // The preflight says the same.
        PreflightInput in;
        in.model = g;
        in.batch = B;
        in.t = t;
        in.micro_batches = m;
        const Preflight p = preflight(in);
        ASSERT_TRUE(p.problems.empty()) << what;
        EXPECT_EQ(p.peak.total(), peak.total()) << what;
        EXPECT_EQ(p.params_per_rank, P) << what;
      }
}

// Under --precision bf16 (t = np, every recompute mode, SP off and on, dropout on): the weights
// are the fp32 master and its bf16 copy (6 B per parameter), the gradients fp32 (4 B), AdamW 8 B,
// and the activations what the ledger measured, by dtype: 2 B activations, 4 B statistics, masks
// and token ids. Exact, to the byte.
TEST(MemoryPeak, Bf16LedgerEqualsTheFormulaForEveryMode) {
  const int t = world().size();
  ProcessGrid grid(world(), 1);
  const int64_t B = 4;
  for (bool sp : {false, true})
    for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
      GptConfig g = budget_config();
      g.sp = sp;
      g.recompute = mode;
      g.precision = Precision::Bf16;
      g.dropout = 0.1f;
      Gpt model(device(), grid.tp(), g);
      model.init(3);
      AdamW opt(device(), model.params(), AdamWParams{});
      MarkovSource data(g.vocab, 3);
      train_step(grid, device(), model, opt, data.batch(0, B, g.seq), 3, 0, 1e-3f, 1.0f, {}, {});
      const std::string what = std::string(recompute_name(mode)) + (sp ? " sp" : "");
      const int64_t head = head_activation_bytes(g, g.seq, B, t);
      EXPECT_EQ(model.memory().layer_bytes(-1), head) << what;
      EXPECT_EQ(model.memory().total_bytes(),
                g.layers * block_activation_bytes(g, g.seq, B, t) + head)
          << what;
      int64_t P = 0, weights = 0, grads = 0;
      for (const Param& p : model.params()) {
        P += p.value.numel();
        weights += static_cast<int64_t>(p.value.bytes() + p.compute.bytes());
        grads += static_cast<int64_t>(p.grad.bytes());
      }
      const MemoryPeak peak = memory_peak(g, g.seq, B, t, P, 1);
      EXPECT_EQ(peak.weights, weights) << what;
      EXPECT_EQ(peak.weights, 6 * P) << what;
      EXPECT_EQ(peak.grads, grads) << what;
      EXPECT_EQ(peak.optimizer, opt.state_bytes()) << what;
      EXPECT_EQ(peak.activations,
                model.memory().total_bytes() + recompute_rerun_bytes(g, g.seq, B, t))
          << what;
      // The preflight at 2 bytes per value says the same.
      PreflightInput in;
      in.model = g;
      in.batch = B;
      in.t = t;
      in.dtype_bytes = 2;
      EXPECT_EQ(preflight(in).peak.total(), peak.total()) << what;
    }
}

// The budget search names --precision bf16 when it is the first change in the articles' order
// that fits (before recomputation and a larger t): one rank, activations the largest part.
TEST(MemoryBudget, NamesMixedPrecisionBeforeRecomputation) {
  GptConfig g = budget_config();
  const MemoryChoice base{1, 1, Recompute::None, 1, 0};
  MemoryChoice half = base;
  half.precision = Precision::Bf16;
  const MemoryEstimate b = estimate_memory(g, g.seq, 8, base),
                       h = estimate_memory(g, g.seq, 8, half);
  ASSERT_TRUE(b.problems.empty() && h.problems.empty());
  ASSERT_LT(h.peak.total(), b.peak.total()) << "the activations dominate this model";
  EXPECT_EQ(h.peak.weights, b.peak.weights / 4 * 6);
  EXPECT_EQ(h.peak.grads, b.peak.grads);
  EXPECT_EQ(h.peak.optimizer, b.peak.optimizer);
  const BudgetVerdict v = fit_memory_budget(g, g.seq, 8, 1, base, h.peak.total());
  ASSERT_TRUE(v.found) << v.message;
  EXPECT_EQ(v.best.choice.str(), half.str());
  EXPECT_NE(v.message.find("the cheapest option that fits: --precision bf16 ("), std::string::npos)
      << v.message;
  // A base already in bf16 is never offered bf16 again.
  const BudgetVerdict w = fit_memory_budget(g, g.seq, 8, 1, half, h.peak.total() - 1);
  EXPECT_EQ(w.message.find("--precision"), std::string::npos) << w.message;
}

TEST(MemoryPeak, ZeroOneShardsTheOptimizerOnly) {
  const GptConfig g = budget_config();
  const MemoryEstimate plain = estimate_memory(g, g.seq, 8, {1, 4, Recompute::None, 1, 0});
  const MemoryEstimate zero = estimate_memory(g, g.seq, 8, {1, 4, Recompute::None, 1, 1});
  ASSERT_TRUE(plain.problems.empty() && zero.problems.empty());
  EXPECT_EQ(zero.peak.weights, plain.peak.weights);
  EXPECT_EQ(zero.peak.grads, plain.peak.grads);
  EXPECT_EQ(zero.peak.activations, plain.peak.activations);
  EXPECT_EQ(zero.peak.optimizer, 8 * ((plain.peak.weights / 4 + 3) / 4));
  // ZeRO-1 at dp 1, m not dividing the replica's batch, t not dividing the heads: invalid.
  EXPECT_FALSE(estimate_memory(g, g.seq, 8, {4, 1, Recompute::None, 1, 1}).problems.empty());
  EXPECT_FALSE(estimate_memory(g, g.seq, 8, {1, 4, Recompute::None, 3, 0}).problems.empty());
  GptConfig odd = g;
  odd.heads = 3;
  odd.hidden = 24;
  EXPECT_FALSE(estimate_memory(odd, g.seq, 8, {2, 1, Recompute::None, 1, 0}).problems.empty());
}

namespace {

// The articles' order ([A2] §5.3: mixed precision, recomputation, then a larger t last), one
// change from `base`, by brute force (the search's first phase).
std::vector<MemoryChoice> single_changes(const MemoryChoice& base, int world, int64_t batch) {
  std::vector<MemoryChoice> out;
  if (base.precision == Precision::Fp32) {
    MemoryChoice c = base;
    c.precision = Precision::Bf16;
    out.push_back(c);
  }
  for (Recompute r : {Recompute::Selective, Recompute::Full}) {
    MemoryChoice c = base;
    c.recompute = r;
    out.push_back(c);
  }
  for (int m = 2; m <= batch; ++m) {
    MemoryChoice c = base;
    c.micro_batches = m;
    out.push_back(c);
  }
  MemoryChoice z = base;
  z.zero = 1;
  out.push_back(z);
  for (int t = base.t + 1; t <= world; ++t)  // a larger t, last
    if (world % t == 0) {
      MemoryChoice c = base;
      c.t = t;
      c.dp = world / t;
      out.push_back(c);
    }
  return out;
}

}  // namespace

TEST(MemoryBudget, TheFirstFittingChangeInTheArticlesOrder) {
  GptConfig g = budget_config();
  g.seq = 12;
  const int64_t B = 8;
  for (int world_size : {1, 2, 4}) {
    const MemoryChoice base{1, world_size, Recompute::None, 1, 0};
    const MemoryEstimate e = estimate_memory(g, g.seq, B, base);
    ASSERT_TRUE(e.problems.empty());
    const int64_t full = e.peak.total();
    // Budgets from just under the base down to a tenth of it.
    for (double f : {0.99, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.1}) {
      const int64_t budget = static_cast<int64_t>(f * full);
      const BudgetVerdict v = fit_memory_budget(g, g.seq, B, world_size, base, budget);
      EXPECT_FALSE(v.fits);
      EXPECT_FALSE(v.message.empty());
      EXPECT_EQ(v.message.find('\n'), std::string::npos);
      MemoryChoice want;
      bool any = false;
      for (const MemoryChoice& c : single_changes(base, world_size, B)) {
        const MemoryEstimate x = estimate_memory(g, g.seq, B, c);
        if (x.problems.empty() && x.peak.total() <= budget) {
          want = c;
          any = true;
          break;
        }
      }
      const std::string what = "world " + std::to_string(world_size) + " f " + std::to_string(f);
      if (any) {
        ASSERT_TRUE(v.found) << what;
        EXPECT_EQ(v.best.choice.str(), want.str()) << what;
        EXPECT_NE(v.message.find("the cheapest option that fits: " + want.flags_from(base)),
                  std::string::npos)
            << v.message;
      }
      if (v.found) {
        EXPECT_LE(v.best.peak.total(), budget) << what;
        EXPECT_TRUE(v.best.problems.empty()) << what;
        EXPECT_TRUE(v.best.choice.zero == 0 || v.best.choice.dp > 1) << what;
        EXPECT_EQ(B % (v.best.choice.dp * v.best.choice.micro_batches), 0) << what;
      } else {
        EXPECT_NE(v.message.find("no option fits"), std::string::npos) << v.message;
      }
    }
  }
}

// [A2] §5.3 raises t last (each step up in t adds communication): with a budget both a larger t
// and --precision bf16 meet, the search names bf16. Lesson 14's model, on 2 and 4 ranks.
TEST(MemoryBudget, RaisesTLast) {
  const GptConfig g = small_gpt(32);  // lesson 14's model
  const int64_t B = 8;
  for (int world_size : {2, 4}) {
    const MemoryChoice base{1, world_size};
    MemoryChoice half = base;
    half.precision = Precision::Bf16;
    const MemoryEstimate b = estimate_memory(g, g.seq, B, half),
                         t2 = estimate_memory(g, g.seq, B, {2, world_size / 2});
    ASSERT_TRUE(b.problems.empty() && t2.problems.empty());
    const int64_t budget = std::max(b.peak.total(), t2.peak.total());
    const BudgetVerdict v = fit_memory_budget(g, g.seq, B, world_size, base, budget);
    ASSERT_TRUE(v.found) << v.message;
    EXPECT_EQ(v.best.choice.str(), half.str()) << "world " << world_size;
    EXPECT_NE(v.message.find("the cheapest option that fits: --precision bf16 ("),
              std::string::npos)
        << v.message;
  }
  // Lesson 14's numbers: half of t = 1's peak is met by t = 2 + bf16 as by t = 4 alone.
  const int64_t budget = estimate_memory(g, g.seq, B, {1, 1}).peak.total() / 2;
  EXPECT_LE(
      estimate_memory(g, g.seq, B, {2, 1, Recompute::None, 1, 0, Precision::Bf16}).peak.total(),
      budget);
  EXPECT_LE(estimate_memory(g, g.seq, B, {4, 1}).peak.total(), budget);
  EXPECT_GT(estimate_memory(g, g.seq, B, {2, 1}).peak.total(), budget);
}

TEST(MemoryBudget, StackedWhenNoSingleChangeFits) {
  GptConfig g = budget_config();
  g.seq = 12;
  const MemoryChoice base{1, 2, Recompute::None, 1, 0};
  const int64_t B = 8;
  const int64_t full = estimate_memory(g, g.seq, B, base).peak.total();
  // Smallest single change:
  int64_t smallest = full;
  for (const MemoryChoice& c : single_changes(base, 2, B)) {
    const MemoryEstimate x = estimate_memory(g, g.seq, B, c);
    if (x.problems.empty()) smallest = std::min(smallest, x.peak.total());
  }
  const BudgetVerdict v = fit_memory_budget(g, g.seq, B, 2, base, smallest - 1);
  ASSERT_TRUE(v.found) << v.message;
  EXPECT_LT(v.best.peak.total(), smallest);
  // More than one flag changed.
  EXPECT_NE(v.best.choice.flags_from(base).find(' ', v.best.choice.flags_from(base).find(' ') + 1),
            std::string::npos)
      << v.best.choice.flags_from(base);
}

TEST(MemoryBudget, TooSmallForAnyOptionAndAFittingBase) {
  const GptConfig g = budget_config();
  const MemoryChoice base{1, 1, Recompute::None, 1, 0};
  const BudgetVerdict none = fit_memory_budget(g, g.seq, 4, 1, base, 1024);
  EXPECT_FALSE(none.fits);
  EXPECT_FALSE(none.found);
  EXPECT_NE(none.message.find("no option fits"), std::string::npos) << none.message;
  EXPECT_NE(none.message.find("the largest"), std::string::npos) << none.message;
  const BudgetVerdict ok = fit_memory_budget(g, g.seq, 4, 1, base, int64_t{1} << 40);
  EXPECT_TRUE(ok.fits);
  EXPECT_TRUE(ok.message.empty());
}
