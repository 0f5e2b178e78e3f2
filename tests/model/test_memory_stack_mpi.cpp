// test_memory_stack_mpi.cpp — gradient accumulation (StepOptions::micro_batches) and ZeRO-1
// (StepOptions::zero, AdamW::shard_over) in tp::train_step, against the plain step on the same
// grid (lib/model/train.h, lib/parallel/data_parallel.h).
//
//   micro-batches  m = 2 and 3 against m = 1, at dp 1 (t = np) and dp 2 (even np: t = np/2), 3
//                  steps with clipping active: loss, gradient norm, the last gradients and the
//                  weights within a relative 1e-5 (the accumulated gradient adds the micro-batches'
//                  partial sums in another order: not bitwise; the keys' bias, pure rounding noise,
//                  is left out of the weights and gradients compared); the DP all-reduce once per step; the activations the last
//                  forward kept per block are exactly 1/m of m = 1's (the ledger) and equal
//                  block_activation_bytes at the micro-batch size. The same under bf16 within
//                  the rounding bound derived at that test (gradients 0.05, loss u/4).
//   ZeRO-1         against plain DP at dp = dp_for(np), 3 steps: with dp = 2 every sum has two
//                  terms (a + b = b + a), so without clipping loss, weights and moments are BITWISE
//                  equal; with clipping the global norm is summed in another order (relative 1e-6
//                  on the norm, 1e-5 on the weights); optimizer bytes per rank = 2·4·⌈P/dp⌉ (P:
//                  this TP rank's parameter elements) against 2·4·P; the collectives per step;
//                  unshard() gives back per-parameter moments equal to plain DP's (what a
//                  checkpoint saves), and a plain optimizer sharded mid-run continues unchanged.
//
// Collectives: both runs of a comparison use the same grid in the same order on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "expect_bad_input.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/presets.h"
#include "model/train.h"
#include "parallel/data_parallel.h"
#include "parallel/process_grid.h"
#include "test_util.h"

using namespace tp;
using tp::testing::device;
using tp::testing::expect_bad_input;
using tp::testing::world;

namespace {

// L = 2, h = 24, nh = 12 (hd 2), ffn 48, V = 16 (padded at t = 3), S = 8: every split size
// divides by t = 1..4.
GptConfig stack_config() {
  GptConfig g = tiny_gpt(2);  // model/presets.h
  g.vocab = 16;
  g.seq = 8;
  return g;
}

// dp 2 where np is even, else all ranks DP (tp 1).
int dp_for(int np) { return np % 2 == 0 ? 2 : np; }

// This rank's values (or gradients) of every parameter, in order. The attention keys' bias is left
// out where `skip_key_bias`: its gradient is zero in exact arithmetic (softmax ignores a constant
// per row) and rounding noise in fp32, so AdamW (m/√v) moves it by ±lr in a direction that depends
// on the noise's sign, which any change of summation order flips.
std::vector<float> local(const ParamList& params, bool grads, bool skip_key_bias = false) {
  std::vector<float> all;
  for (const Param& p : params) {
    const std::string& n = p.name;
    if (skip_key_bias && n.size() >= 7 && n.compare(n.size() - 7, 7, ".k.bias") == 0) continue;
    const std::vector<float> v = (grads ? p.grad : p.value).to_host();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

std::vector<float> moments(const AdamW& opt) {
  std::vector<float> all;
  for (const auto* list : {&opt.exp_avg(), &opt.exp_avg_sq()})
    for (const Tensor& t : *list) {
      const std::vector<float> v = t.to_host();
      all.insert(all.end(), v.begin(), v.end());
    }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Replica {
  Gpt model;
  AdamW opt;
  Replica(Communicator& tp, const GptConfig& g, const AdamWParams& hp)
      : model(device(), tp, g), opt(device(), model.params(), hp) {
    model.init(5);
  }
};

}  // namespace

TEST(MicroBatches, AccumulatedStepEqualsTheWholeBatch) {
  const int np = world().size();
  std::vector<int> dps = {1};
  if (np % 2 == 0) dps.push_back(2);
  for (int dp : dps) {
    ProcessGrid grid(world(), dp);
    const GptConfig g = stack_config();
    AdamWParams hp;
    hp.lr = 1e-2f;
    MarkovSource data(g.vocab, 5);
    const int64_t B = 6 * dp;  // 6 sequences per replica: m = 2 and 3 divide it
    for (int m : {2, 3}) {
      Replica whole(grid.tp(), g, hp), micro(grid.tp(), g, hp);
      StepOptions opts;
      opts.micro_batches = m;
      for (int64_t s = 0; s < 3; ++s) {
        const Batch b = data.batch(s, B, g.seq);
        // max_grad_norm 0.5: clipping is active.
        const StepResult want =
            train_step(grid, device(), whole.model, whole.opt, b, 5, s, hp.lr, 0.5f);
        const size_t mark = grid.dp().ledger().size();
        const StepResult got =
            train_step(grid, device(), micro.model, micro.opt, b, 5, s, hp.lr, 0.5f, {}, opts);
        EXPECT_LE(std::fabs(got.loss - want.loss), 1e-5 * std::fabs(want.loss))
            << "dp " << dp << " m " << m << " step " << s;
        EXPECT_LE(std::fabs(got.grad_norm - want.grad_norm), 1e-5 * want.grad_norm)
            << "dp " << dp << " m " << m << " step " << s;
        EXPECT_LT(got.clip, 1.0f) << "clipping must be active to test the norm";
        // One DP all-reduce per step, after the last micro-batch.
        EXPECT_EQ(grid.dp().ledger().size() - mark, dp == 1 ? 0u : 1u);
        // What the last forward kept: one micro-batch of B/(dp·m) sequences.
        const int t = grid.tp_size();
        for (int64_t l = 0; l < g.layers; ++l) {
          EXPECT_EQ(micro.model.memory().layer_bytes(l),
                    block_activation_bytes(g, g.seq, B / dp / m, t));
          EXPECT_EQ(whole.model.memory().layer_bytes(l), m * micro.model.memory().layer_bytes(l));
        }
      }
      for (bool grads : {true, false})
        EXPECT_LE(rel_error(local(micro.model.params(), grads, true),
                            local(whole.model.params(), grads, true)),
                  1e-5)
            << (grads ? "gradients" : "weights") << ", dp " << dp << " m " << m;
    }
  }
}

// Under --precision bf16, m = 2 and 3 against m = 1 (dp 1 and 2, 3 steps, clipping active). The
// accumulated gradient stays fp32, but the micro-batches change where bf16 rounds: each micro-
// batch's activation gradients carry the loss scale 1/(N/m)·(1/m) instead of 1/N (m = 3: not a
// power of two, so every bf16 rounding of a dY lands differently), and the weight gradients are m
// partial GEMMs added in f32. Each such rounding is independent noise of rms u/√12 (u = 2^−8) per
// element; behind the ~18 roundings per pass that lie between the loss and a weight gradient at
// L = 2 (as in test_precision_mpi.cpp's bound), ‖Δg‖/‖g‖ ≈ √18 · u/√12 · (a few of the layers'
// amplification) ≈ 0.005-0.02: kBf16GradBound = 0.05 on every step's gradients and on the weights
// after 3 steps (Adam moves a weight by ≈ lr per step whatever its gradient's rounding, so the
// weights differ relatively less). The loss, a mean whose rounding errors cancel: u/4 at the
// first step (the same weights: only the forward's roundings differ); from the second step on it
// follows the weights, which differ by the first update's rounding: u (measured np 1-4: step 1
// at most 8e-8, later steps 1.3e-3; gradients 2.8e-2, weights 6.7e-3). A
// different batch split in fp32 stays within 1e-5 (the test above), so bf16's bound is the
// rounding's, not a hidden bug: it also asserts bf16 really ran (it differs from fp32 by > 1e-4).
TEST(MicroBatches, Bf16AccumulatedStepEqualsTheWholeBatchWithinTheRoundingBound) {
  constexpr double kU = 1.0 / 256, kBf16GradBound = 0.05, kBf16LossBound = kU / 4;
  const int np = world().size();
  std::vector<int> dps = {1};
  if (np % 2 == 0) dps.push_back(2);
  double worst_grad = 0, first_loss = 0, worst_loss = 0, worst_weight = 0, off_fp32 = 0;
  for (int dp : dps) {
    ProcessGrid grid(world(), dp);
    GptConfig g = stack_config();
    g.precision = Precision::Bf16;
    GptConfig g32 = stack_config();
    AdamWParams hp;
    hp.lr = 1e-2f;
    MarkovSource data(g.vocab, 5);
    const int64_t B = 6 * dp;
    for (int m : {2, 3}) {
      Replica whole(grid.tp(), g, hp), micro(grid.tp(), g, hp), fp32(grid.tp(), g32, hp);
      StepOptions opts;
      opts.micro_batches = m;
      for (int64_t s = 0; s < 3; ++s) {
        const Batch b = data.batch(s, B, g.seq);
        const StepResult want =
            train_step(grid, device(), whole.model, whole.opt, b, 5, s, hp.lr, 0.5f);
        const StepResult got =
            train_step(grid, device(), micro.model, micro.opt, b, 5, s, hp.lr, 0.5f, {}, opts);
        train_step(grid, device(), fp32.model, fp32.opt, b, 5, s, hp.lr, 0.5f);
        const std::string what =
            "dp " + std::to_string(dp) + " m " + std::to_string(m) + " step " + std::to_string(s);
        const double loss = std::fabs(got.loss - want.loss) / std::fabs(want.loss);
        const double grad = rel_error(local(micro.model.params(), true, true),
                                      local(whole.model.params(), true, true));
        EXPECT_LE(loss, s == 0 ? kBf16LossBound : kU) << what;
        EXPECT_LE(grad, kBf16GradBound) << what;
        EXPECT_LT(got.clip, 1.0f) << "clipping must be active to test the norm";
        (s == 0 ? first_loss : worst_loss) = std::max(s == 0 ? first_loss : worst_loss, loss);
        worst_grad = std::max(worst_grad, grad);
        if (s == 0)
          off_fp32 = std::max(off_fp32, rel_error(local(whole.model.params(), true, true),
                                                  local(fp32.model.params(), true, true)));
        for (int64_t l = 0; l < g.layers; ++l)  // bf16's ledger, 1/m of the whole batch's
          EXPECT_EQ(micro.model.memory().layer_bytes(l),
                    block_activation_bytes(g, g.seq, B / dp / m, grid.tp_size()));
      }
      const double weights = rel_error(local(micro.model.params(), false, true),
                                       local(whole.model.params(), false, true));
      EXPECT_LE(weights, kBf16GradBound) << "weights, dp " << dp << " m " << m;
      worst_weight = std::max(worst_weight, weights);
    }
  }
  EXPECT_GT(off_fp32, 1e-4) << "bf16 is in effect";
  if (world().rank() == 0)
    std::printf(
        "[ np %d ] bf16 micro-batches vs whole: loss step 1 %.1e, later %.1e, gradient "
        "%.1e, weights %.1e (bf16 vs fp32 gradients %.1e)\n",
        np, first_loss, worst_loss, worst_grad, worst_weight, off_fp32);
}

TEST(MicroBatches, RefusesAnMThatDoesNotDivideTheReplicaBatch) {
  ProcessGrid grid(world(), 1);
  const GptConfig g = stack_config();
  Replica run(grid.tp(), g, AdamWParams{});
  MarkovSource data(g.vocab, 5);
  StepOptions opts;
  opts.micro_batches = 4;
  expect_bad_input(
      [&] {
    train_step(grid, device(), run.model, run.opt, data.batch(0, 6, g.seq), 5, 0, 1e-3f, 1.0f, {},
               opts);
      },
      "choose one of {1,2,3,6}", "m = 4 of 6 sequences");
  EXPECT_FALSE(step_option_problems(StepOptions{1, 1}, 1, 6, 0.0f).empty());  // zero 1, dp 1
  EXPECT_FALSE(step_option_problems(StepOptions{2, 0}, 1, 6, 0.1f).empty());  // m 2 + dropout
  EXPECT_TRUE(step_option_problems(StepOptions{2, 1}, 2, 8, 0.0f).empty());
}

class Zero1 : public ::testing::TestWithParam<float> {};  // max_grad_norm: 0 (off) or 0.5

TEST_P(Zero1, TrainsLikePlainDataParallel) {
  const int np = world().size(), dp = dp_for(np);
  if (dp == 1) GTEST_SKIP() << "needs dp > 1";
  const float clip = GetParam();
  ProcessGrid grid(world(), dp);
  const GptConfig g = stack_config();
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  Replica plain(grid.tp(), g, hp), zero(grid.tp(), g, hp);
  int64_t P = 0;  // this TP rank's parameter elements
  for (const Param& p : zero.model.params()) P += p.value.numel();
  EXPECT_EQ(zero.opt.state_bytes(), 2 * 4 * P);
  zero.opt.shard_over(grid.dp(), zero.model.params());
  EXPECT_EQ(zero.opt.state_bytes(), 2 * 4 * ((P + dp - 1) / dp));
  StepOptions opts;
  opts.zero = 1;
  MarkovSource data(g.vocab, 5);
  const int64_t B = 2 * dp;
  // Bitwise where every sum has two terms (dp 2) and no norm enters the update (no clipping).
  const bool bitwise = dp == 2 && clip == 0.0f;
  // The two replicas' weights agree: bit for bit, or within 1e-5 (relative, summed in double).
  auto expect_same_weights = [&] {
    if (bitwise)
      EXPECT_TRUE(same_bits(local(zero.model.params(), false), local(plain.model.params(), false)));
    else
      EXPECT_LE(rel_error(local(zero.model.params(), false, true),
                          local(plain.model.params(), false, true)),
                1e-5);
  };
  for (int64_t s = 0; s < 3; ++s) {
    const Batch b = data.batch(s, B, g.seq);
    const StepResult want =
        train_step(grid, device(), plain.model, plain.opt, b, 5, s, hp.lr, clip);
    const size_t mark = grid.dp().ledger().size();
    const StepResult got =
        train_step(grid, device(), zero.model, zero.opt, b, 5, s, hp.lr, clip, {}, opts);
    // reduce-scatter of the gradients, the loss, the norm's two sums, all-gather of the values.
    const auto& recs = grid.dp().ledger().records();
    ASSERT_EQ(recs.size() - mark, 4u);
    EXPECT_EQ(recs[mark].op, "reduce_scatter");
    EXPECT_EQ(recs[mark].label, "zero_grads");
    EXPECT_EQ(recs[mark].elements, (P + dp - 1) / dp * dp);
    EXPECT_EQ(recs[mark + 3].op, "all_gather");
    EXPECT_EQ(recs[mark + 3].label, "zero_params");
    EXPECT_LE(std::fabs(got.grad_norm - want.grad_norm), 1e-6 * want.grad_norm) << "step " << s;
    if (bitwise) {
      EXPECT_EQ(std::memcmp(&got.loss, &want.loss, sizeof got.loss), 0) << "step " << s;
    } else {
      EXPECT_LE(std::fabs(got.loss - want.loss), 1e-6 * std::fabs(want.loss)) << "step " << s;
    }
    if (clip > 0) {
      EXPECT_LT(want.clip, 1.0f) << "clipping must be active to test the norm";
    }
  }
  expect_same_weights();
  // Checkpoints hold global tensors: unshard gathers the moments back (per parameter, this TP
  // rank's shard, as plain DP holds them), and the optimizer goes on sharded or not.
  zero.opt.unshard(zero.model.params());
  EXPECT_EQ(zero.opt.state_bytes(), 2 * 4 * P);
  if (bitwise)
    EXPECT_TRUE(same_bits(moments(zero.opt), moments(plain.opt)));
  else
    EXPECT_LE(rel_error(moments(zero.opt), moments(plain.opt)), 1e-4);
  // The other way round: the plain run switches to ZeRO-1, the ZeRO run goes on without it.
  plain.opt.shard_over(grid.dp(), plain.model.params());
  const Batch b = data.batch(3, B, g.seq);
  train_step(grid, device(), plain.model, plain.opt, b, 5, 3, hp.lr, clip, {}, opts);
  train_step(grid, device(), zero.model, zero.opt, b, 5, 3, hp.lr, clip);
  expect_same_weights();
}

INSTANTIATE_TEST_SUITE_P(Zero1, Zero1, ::testing::Values(0.0f, 0.5f),
                         [](const ::testing::TestParamInfo<float>& i) {
  return std::string(i.param > 0 ? "clipped" : "unclipped");
});
