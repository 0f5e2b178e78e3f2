// test_model_mpi.cpp — the transformer under tensor parallelism against t = 1: ParallelMLP (GeLU,
// SwiGLU), ParallelAttention (MHA, GQA), Norm (LayerNorm, RMSNorm), TransformerBlock with dropout,
// the whole Gpt (tied and untied), 50-step loss curves with AdamW, global-norm clipping, the
// collectives the ledger records per step, checkpoints (cross-t load, resume, bad files) and the
// configuration check.
// Runs under mpirun -np 1, 2, 3, 4.
//
// Pattern: in the same process the module is built twice from the same GptConfig and seed, once
// on the world (t = np) and once on a local SerialCommunicator (t = 1); the same input goes
// through both and every output, dX and gathered global gradient is compared with the t = 1 one
// of the same name. Sizes divide by 1, 2, 3 and 4 everywhere, so every test runs at every np.
// The vocabulary-parallel wte / lm_head hold V' = padded_vocab(t) rows (V = 64 → 66 at t = 3), so
// they are compared through gather_real (the real V rows, what the t = 1 model holds). Shared
// helpers (tolerances, comparisons, Trainer over tp::train_step): model_test_helpers.h.
//
// Tolerances (relative error ‖got − want‖ / ‖want‖), each stated again where used:
//   1e-5  one forward / backward: both sides compute in fp32; at t > 1 the row-parallel sums and
//         the dX sums are split into t partial sums added in another order.
//   1e-6  the Gpt loss: a mean of B·S per-token losses, each much less sensitive than a gradient.
//   1e-4  50-step loss curves: the fp32 rounding of the split sums feeds back through AdamW and
//         grows over the steps.
//   0     checkpoints (values are copied, not computed) and resume at the same t (same order of
//         every operation, so bitwise equal).
//
// Collectives: every rank runs every test and makes the same collective calls in the same order
// (gather_real / gather_global are all-gathers for split parameters). After the first collective
// of a test only EXPECT_* is used, so a failure on one rank never leaves the others blocked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "expect_bad_input.h"
#include "io/safetensors.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "model_test_helpers.h"
#include "parallel/param.h"
#include "test_util.h"

namespace {

using namespace tp;
using namespace tp::testing;  // test_util.h, model_test_helpers.h

// hidden 48, heads 12 (head_dim 4), kv_heads 12 (MHA), ffn 96: every size divides by 1, 2, 3, 4.
GptConfig base_config() { return tp::small_gpt(8); }

// Layer tests: every weight and bias (biases start at zero in a model) drawn from N(0, 0.3), so
// every term of the forward and backward is exercised with O(1) activations.
void randomize(ParamList& params) {
  for (Param& p : params) {
    p.init = Init::Normal;
    p.init_std = 0.3f;
  }
}

Tensor input(const std::string& name, int64_t rows, int64_t cols) {
  return Tensor::from_host(device(), Shape{rows, cols}, random_vector(name, rows * cols));
}

// A file name under TempDir() unique to this job (rank 0's pid, broadcast) and this np.
std::string temp_path(const std::string& tag) {
  Tensor pid =
      Tensor::from_host(device(), Shape{1}, {static_cast<float>(getpid())});  // exact below 2^24
  world().broadcast(pid, 0);
  return ::testing::TempDir() + "tp_test_model_" + tag + "_np" + std::to_string(world().size()) +
         "_" + std::to_string(static_cast<long>(pid.to_host()[0])) + ".safetensors";
}

// Rank 0 removes `path` once every rank is done with it.
void remove_file(const std::string& path) {
  world().barrier();
  if (world().rank() == 0) std::remove(path.c_str());
}

// ---- 1. ParallelMLP -----------------------------------------------------------------------------

class ModelMlp : public ::testing::TestWithParam<Activation> {};

TEST_P(ModelMlp, MatchesSingleDevice) {
  GptConfig cfg = base_config();
  cfg.act = GetParam();
  SerialCommunicator serial;
  const int64_t n = 10, h = cfg.hidden;  // N = S·B = 5·2 tokens
  ParallelMLP mlp(device(), world(), "mlp", cfg), ref(device(), serial, "mlp", cfg);
  ParamList ps, rs;
  mlp.collect_params(ps, 0.3f, 0.3f);
  ref.collect_params(rs, 0.3f, 0.3f);
  EXPECT_EQ(ps.size(),
            cfg.act == Activation::SwiGlu
                ? 6u
                : 4u);  // up (+ gate) weight and bias, down weight and bias
  randomize(ps);
  randomize(rs);
  init_params(device(), ps, kSeed);
  init_params(device(), rs, kSeed);
  expect_same_init(ps, rs);

  const Tensor x = input("x", n, h), dy = input("dy", n, h);
  const Tensor y = mlp.forward(x), y_ref = ref.forward(x);
  const Tensor dx = mlp.backward(dy), dx_ref = ref.backward(dy);
  // 1e-5: fp32 on both sides; at t > 1 the down projection and dX are sums of t partial sums.
  EXPECT_LE(rel_error(y.to_host(), y_ref.to_host()), kTol);
  EXPECT_LE(rel_error(dx.to_host(), dx_ref.to_host()), kTol);
  expect_grads_match(ps, rs, kTol);
}

INSTANTIATE_TEST_SUITE_P(Model, ModelMlp, ::testing::Values(Activation::Gelu, Activation::SwiGlu));

// ---- 2. ParallelAttention -----------------------------------------------------------------------

struct AttentionCase {
  int64_t hidden, heads, kv_heads;
};

class ModelAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(ModelAttention, MatchesSingleDevice) {
  const AttentionCase c = GetParam();
  GptConfig cfg = base_config();
  cfg.hidden = c.hidden;
  cfg.heads = c.heads;
  cfg.kv_heads = c.kv_heads;
  ASSERT_TRUE(cfg.problems(world().size()).empty()) << "the sizes must suit every t in 1..4";
  SerialCommunicator serial;
  const int64_t S = 5, B = 2, n = S * B, h = cfg.hidden;
  ParallelAttention attn(device(), world(), "attn", cfg), ref(device(), serial, "attn", cfg);
  ParamList ps, rs;
  attn.collect_params(ps, 0.3f, 0.3f);
  ref.collect_params(rs, 0.3f, 0.3f);
  EXPECT_EQ(ps.size(), 8u);  // q, k, v, c_proj: weight and bias each
  randomize(ps);
  randomize(rs);
  init_params(device(), ps, kSeed);
  init_params(device(), rs, kSeed);
  expect_same_init(ps, rs);

  const Tensor x = input("x", n, h), dy = input("dy", n, h);
  const Tensor y = attn.forward(x, S, B), y_ref = ref.forward(x, S, B);
  const Tensor dx = attn.backward(dy), dx_ref = ref.backward(dy);
  // 1e-5: fp32 on both sides; at t > 1 the output projection and dX are sums of t partial sums.
  EXPECT_LE(rel_error(y.to_host(), y_ref.to_host()), kTol);
  EXPECT_LE(rel_error(dx.to_host(), dx_ref.to_host()), kTol);
  expect_grads_match(ps, rs, kTol);
}

// MHA (12 heads of 4), GQA with 2 query heads per key/value head (24 / 12 of 2) and with 3 (36 / 12
// of 2): head counts divisible by t = 1..4, so each rank owns whole groups at every t.
INSTANTIATE_TEST_SUITE_P(Model, ModelAttention,
                         ::testing::Values(AttentionCase{48, 12, 12}, AttentionCase{48, 24, 12},
                                           AttentionCase{72, 36, 12}),
                         [](const ::testing::TestParamInfo<AttentionCase>& i) {
  return "h" + std::to_string(i.param.hidden) + "_nh" + std::to_string(i.param.heads) + "_nkv" +
         std::to_string(i.param.kv_heads);
});

// ---- 3. Norm ------------------------------------------------------------------------------------

// Single-device LayerNorm / RMSNorm and their gradients on the host, in double.
struct NormReference {
  std::vector<float> y, dx, dw, db;
  NormReference(const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>& b, const std::vector<float>& dy, int64_t n, int64_t h,
                bool rms, double eps)
      : y(x.size()),
        dx(x.size()),
        dw(static_cast<size_t>(h), 0.0f),
        db(static_cast<size_t>(h), 0.0f) {
    std::vector<double> dwd(static_cast<size_t>(h), 0.0), dbd(static_cast<size_t>(h), 0.0);
    for (int64_t r = 0; r < n; ++r) {
      const float* xr = &x[r * h];
      const float* dyr = &dy[r * h];
      double mean = 0, var = 0;
      if (!rms) {
        for (int64_t c = 0; c < h; ++c) mean += xr[c];
        mean /= static_cast<double>(h);
      }
      for (int64_t c = 0; c < h; ++c) var += (xr[c] - mean) * (xr[c] - mean);
      const double rstd = 1.0 / std::sqrt(var / static_cast<double>(h) + eps);
      double m1 = 0, m2 = 0;  // mean(dx̂), mean(dx̂ ⊙ x̂)
      for (int64_t c = 0; c < h; ++c) {
        const double xhat = (xr[c] - mean) * rstd, dxhat = dyr[c] * static_cast<double>(w[c]);
        y[r * h + c] = static_cast<float>(xhat * w[c] + (rms ? 0.0 : b[c]));
        m1 += dxhat;
        m2 += dxhat * xhat;
        dwd[c] += dyr[c] * xhat;
        dbd[c] += dyr[c];
      }
      m1 /= static_cast<double>(h);
      m2 /= static_cast<double>(h);
      for (int64_t c = 0; c < h; ++c) {
        const double xhat = (xr[c] - mean) * rstd, dxhat = dyr[c] * static_cast<double>(w[c]);
        dx[r * h + c] = static_cast<float>(rstd * (dxhat - (rms ? 0.0 : m1) - xhat * m2));
      }
    }
    for (int64_t c = 0; c < h; ++c) {
      dw[c] = static_cast<float>(dwd[c]);
      db[c] = static_cast<float>(dbd[c]);
    }
  }
};

class ModelNorm : public ::testing::TestWithParam<std::string> {};

// A norm is replicated under plain TP (it needs the statistics of the whole hidden vector), so the
// t = np run computes exactly what t = 1 does; the test pins that down, checks both against a
// double-precision host reference, and checks that every rank holds the same gradient.
TEST_P(ModelNorm, MatchesSingleDeviceAndIsReplicated) {
  const bool rms = GetParam() == "rmsnorm";
  const int64_t n = 10, h = 48;
  const float eps = 1e-5f;
  Norm norm(device(), "ln", h, parse_norm(GetParam()), eps),
      ref(device(), "ln", h, parse_norm(GetParam()), eps);
  ParamList ps, rs;
  norm.collect_params(ps);
  ref.collect_params(rs);
  ASSERT_EQ(ps.size(), rms ? 1u : 2u);  // weight (and bias)
  randomize(ps);
  randomize(rs);
  init_params(device(), ps, kSeed);
  init_params(device(), rs, kSeed);
  expect_same_init(ps, rs);

  const auto xv = random_vector("x", n * h), dyv = random_vector("dy", n * h);
  const Tensor x = Tensor::from_host(device(), Shape{n, h}, xv),
               dy = Tensor::from_host(device(), Shape{n, h}, dyv);
  const Tensor y = norm.forward(x), y_ref = ref.forward(x);
  const Tensor dx = norm.backward(dy), dx_ref = ref.backward(dy);
  const NormReference host(xv, norm.weight.to_host(),
                           rms ? std::vector<float>{} : norm.bias.to_host(), dyv, n, h, rms, eps);
  // Same code, same input, no communication: t = np and t = 1 agree bit for bit.
  EXPECT_EQ(y.to_host(), y_ref.to_host());
  EXPECT_EQ(dx.to_host(), dx_ref.to_host());
  EXPECT_EQ(norm.dweight.to_host(), ref.dweight.to_host());
  if (!rms) {
    EXPECT_EQ(norm.dbias.to_host(), ref.dbias.to_host());
  }
  // 1e-5 against the double reference: fp32 row statistics and sums over h = 48 or N = 10 terms.
  EXPECT_LE(rel_error(y.to_host(), host.y), kTol);
  EXPECT_LE(rel_error(dx.to_host(), host.dx), kTol);
  EXPECT_LE(rel_error(norm.dweight.to_host(), host.dw), kTol);
  if (!rms) {
    EXPECT_LE(rel_error(norm.dbias.to_host(), host.db), kTol);
  }
  // Replicated: every rank holds the same dweight, bit for bit (one all-gather).
  const int t = world().size();
  Tensor all(device(), Shape{t, h});
  world().all_gather(norm.dweight, all);
  const auto every = all.to_host();
  const auto mine = norm.dweight.to_host();
  for (int q = 0; q < t; ++q)
    EXPECT_EQ(std::vector<float>(every.begin() + q * h, every.begin() + (q + 1) * h), mine)
        << "rank " << q;
  expect_grads_match(ps, rs, 0.0, false);  // replicated parameters: no communication, exact
}

INSTANTIATE_TEST_SUITE_P(Model, ModelNorm, ::testing::Values("layernorm", "rmsnorm"));

// ---- 4. TransformerBlock with dropout -----------------------------------------------------------

TEST(ModelBlock, WithDropoutMatchesSingleDevice) {
  GptConfig cfg = base_config();
  cfg.dropout = 0.1f;
  SerialCommunicator serial;
  const int64_t S = 5, B = 2, n = S * B, h = cfg.hidden, step = 3;
  TransformerBlock block(device(), world(), cfg, 0), ref(device(), serial, cfg, 0);
  GptConfig no_drop = cfg;
  no_drop.dropout = 0.0f;
  TransformerBlock plain(device(), serial, no_drop, 0);  // to show dropout is really on
  ParamList ps, rs, qs;
  block.collect_params(ps, 0.3f, 0.3f);
  ref.collect_params(rs, 0.3f, 0.3f);
  plain.collect_params(qs, 0.3f, 0.3f);
  EXPECT_EQ(ps.size(), 16u);  // ln_1 (2), attn (8), ln_2 (2), mlp (4)
  randomize(ps);
  randomize(rs);
  randomize(qs);
  init_params(device(), ps, kSeed);
  init_params(device(), rs, kSeed);
  init_params(device(), qs, kSeed);
  expect_same_init(ps, rs);

  const Tensor x = input("x", n, h), dy = input("dy", n, h);
  const Tensor y = block.forward(x, S, B, kSeed, step), y_ref = ref.forward(x, S, B, kSeed, step);
  const Tensor dx = block.backward(dy), dx_ref = ref.backward(dy);
  // The masks depend on (seed, step, site, global position) only, so t = np drops what t = 1 drops.
  // 1e-5: fp32 on both sides; at t > 1 the projections and dX are sums of t partial sums.
  EXPECT_LE(rel_error(y.to_host(), y_ref.to_host()), kTol);
  EXPECT_LE(rel_error(dx.to_host(), dx_ref.to_host()), kTol);
  expect_grads_match(ps, rs, kTol);
  EXPECT_GT(rel_error(plain.forward(x, S, B, kSeed, step).to_host(), y_ref.to_host()), 1e-3)
      << "dropout p = 0.1 changed nothing";
  // Another step draws other masks.
  EXPECT_GT(rel_error(ref.forward(x, S, B, kSeed, step + 1).to_host(), y_ref.to_host()), 1e-3);
}

// ---- 5. Whole Gpt -------------------------------------------------------------------------------

void check_gpt(const GptConfig& cfg) {
  SerialCommunicator serial;
  Gpt model(device(), world(), cfg), ref(device(), serial, cfg);
  model.init(kSeed);
  ref.init(kSeed);
  expect_same_init(model.params(), ref.params());
  const Batch b = markov_batch(cfg.vocab, 0, 3, cfg.seq);
  const float loss = model.forward(b, kSeed, 0), loss_ref = ref.forward(b, kSeed, 0);
  model.backward();
  ref.backward();
  // 1e-6: a mean over B·S = 24 token losses; 1e-5 for gradients (split sums reordered over t).
  EXPECT_LE(std::abs(loss - loss_ref), kLossTol * std::abs(loss_ref)) << loss << " vs " << loss_ref;
  EXPECT_GT(loss_ref, 0.5f * std::log(static_cast<float>(cfg.vocab)));  // a sane cross-entropy
  expect_grads_match(model.params(), ref.params(), kTol);
}

GptConfig gpt_config() {
  GptConfig c = base_config();  // L = 2, h = 48, nh = 12, ffn = 96, V = 64, S = 8
  c.init_std = 0.1f;            // larger than 0.02 so that attention is far from uniform
  return c;
}

TEST(ModelGpt, TiedGeluLayerNormMatchesSingleDevice) {
  const GptConfig cfg = gpt_config();
  SerialCommunicator serial;
  Gpt probe(device(), serial, cfg);
  for (const Param& p : probe.params()) EXPECT_NE(p.name, "lm_head.weight");
  check_gpt(cfg);
}

TEST(ModelGpt, UntiedSwigluRmsNormGqaDropoutMatchesSingleDevice) {
  GptConfig cfg = gpt_config();
  cfg.tied = false;
  cfg.act = Activation::SwiGlu;
  cfg.norm = NormKind::RmsNorm;
  cfg.heads = 24;  // head_dim 2, two query heads per key/value head
  cfg.kv_heads = 12;
  cfg.dropout = 0.1f;
  SerialCommunicator serial;
  Gpt probe(device(), serial, cfg);
  bool has_head = false;
  for (const Param& p : probe.params()) has_head |= p.name == "lm_head.weight";
  EXPECT_TRUE(has_head);
  check_gpt(cfg);
}

// ---- 6. 50-step loss curves ---------------------------------------------------------------------

// The tiny GPT (model/presets.h) with one block and S = 8, at the default init_std.
GptConfig tiny_config() {
  GptConfig c = tiny_gpt(1);
  c.seq = 8;
  c.init_std = GptConfig{}.init_std;
  return c;
}

TEST(ModelTraining, FiftyStepLossCurveMatchesSingleDevice) {
  const GptConfig cfg = tiny_config();
  const MarkovSource data(cfg.vocab, kSeed);
  AdamWParams hp;
  hp.lr = 1e-2f;
  SerialCommunicator serial;
  Trainer tp_run(world(), cfg, hp, 1.0f, kSeed), ref_run(serial, cfg, hp, 1.0f, kSeed);
  const int steps = 50, batch = 2;
  std::vector<float> got, want;
  double worst = 0;
  for (int s = 0; s < steps; ++s) {
    got.push_back(tp_run.step(data, s, batch));
    want.push_back(ref_run.step(data, s, batch));
    worst = std::max(worst, std::abs(static_cast<double>(got[s]) - want[s]) / want[s]);
  }
  // 1e-4 per step: the fp32 rounding of the split sums (≈1e-7 relative in one step) feeds back
  // through 50 AdamW updates and grows.
  for (int s = 0; s < steps; ++s)
    EXPECT_LE(std::abs(got[s] - want[s]), 1e-4 * want[s])
        << "step " << s << ": " << got[s] << " vs " << want[s];
  // The curve is a real training curve: the mean of the last 10 losses is well below the first.
  double first = want[0], last = 0;
  for (int s = steps - 10; s < steps; ++s) last += want[s] / 10.0;
  EXPECT_LT(last, first - 0.3) << "the model did not learn: " << first << " -> " << last;
  RecordProperty("worst_relative_loss_difference", std::to_string(worst));
}

// ---- 7. Gradient clipping -----------------------------------------------------------------------

TEST(ModelClipping, GlobalNormCountsReplicatedOnceAndClippedStepMatches) {
  const GptConfig cfg = gpt_config();
  SerialCommunicator serial;
  AdamWParams hp;
  hp.lr = 1e-2f;
  // eps = 1e-3 (not 1e-8): with a tiny eps Adam's first step is lr·sign(g), which no gradient
  // scale changes, so clipping would be invisible; with eps comparable to |g| the update depends on
  // the clipped gradient, and the key-bias noise gradients (see is_key_bias) move nothing.
  hp.eps = 1e-3f;
  Gpt model(device(), world(), cfg), ref(device(), serial, cfg), unclipped(device(), serial, cfg);
  model.init(kSeed);
  ref.init(kSeed);
  unclipped.init(kSeed);
  AdamW opt(device(), model.params(), hp), opt_ref(device(), ref.params(), hp),
      opt_unclipped(device(), unclipped.params(), hp);
  const Batch b = markov_batch(cfg.vocab, 0, 3, cfg.seq);
  model.forward(b, kSeed, 0);
  ref.forward(b, kSeed, 0);
  unclipped.forward(b, kSeed, 0);
  model.backward();
  ref.backward();
  unclipped.backward();

  const double norm = global_grad_norm(world(), device(), model.params());
  const double norm_ref = global_grad_norm(serial, device(), ref.params());
  // On the host, from the gathered global gradients: every parameter once, whatever its split.
  double sq = 0, replicated_sq = 0;
  for (const Param& p : model.params()) {
    // Padding rows included: their gradient is zero, so they add nothing (and the norms agree).
    const auto g = gather_global(world(), p, p.grad);  // collective for split params
    double s = 0;
    for (float v : g) s += static_cast<double>(v) * v;
    sq += s;
    if (p.split == Split::Replicated) replicated_sq += s;
  }
  const double host = std::sqrt(sq);
  // 1e-5: squares summed in another order (per shard, then across ranks).
  EXPECT_LE(std::abs(norm - norm_ref), kTol * norm_ref) << norm << " vs " << norm_ref;
  EXPECT_LE(std::abs(norm - host), kTol * host) << norm << " vs host " << host;
  // Counting each replicated parameter t times instead of once would give a different norm.
  const int t = world().size();
  if (t > 1) {
    const double wrong = std::sqrt(sq + (t - 1) * replicated_sq);
    EXPECT_GT(std::abs(wrong - host), 100 * kTol * host)
        << "the test cannot tell once from t times";
  }

  // Clip to half the norm, so the factor is about 0.5 and the clipping really acts.
  const float max_norm = static_cast<float>(0.5 * norm_ref);
  const float factor = clip_factor(norm, max_norm), factor_ref = clip_factor(norm_ref, max_norm);
  EXPECT_LT(factor, 0.51f);
  EXPECT_GT(factor, 0.49f);
  EXPECT_LE(std::abs(factor - factor_ref), kTol * factor_ref);
  EXPECT_EQ(clip_factor(norm, 0.0f), 1.0f);                          // clipping off
  EXPECT_EQ(clip_factor(norm, static_cast<float>(2 * norm)), 1.0f);  // shorter than max: unchanged
  // The same factor on every rank, bit for bit (one all-gather).
  Tensor all(device(), Shape{t});
  world().all_gather(Tensor::from_host(device(), Shape{1}, {factor}), all);
  for (float f : all.to_host()) EXPECT_EQ(f, factor);

  opt.step(model.params(), hp.lr, factor);
  opt_ref.step(ref.params(), hp.lr, factor_ref);
  opt_unclipped.step(unclipped.params(), hp.lr, 1.0f);
  double moved = 0;  // how far clipping moved the t = 1 parameters away from the unclipped step
  for (size_t i = 0; i < model.params().size(); ++i) {
    const Param& p = model.params()[i];
    const auto got = gather_real(world(), p, p.value);  // collective for split params
    const auto want = ref.params()[i].value.to_host();
    if (is_key_bias(p.name)) {
      // Zero at the start, and its gradient is fp32 noise (see is_key_bias): it must stay ~0 on
      // both sides (a sign-like Adam update would move it by ~lr per element).
      EXPECT_LE(norm2(got), 1e-4 * hp.lr) << p.name;
      EXPECT_LE(norm2(want), 1e-4 * hp.lr) << p.name;
      continue;
    }
    // 1e-5: one update from gradients that agree to 1e-5.
    EXPECT_LE(rel_error(got, want), kTol) << p.name;
    moved = std::max(moved, rel_error(unclipped.params()[i].value.to_host(), want));
  }
  EXPECT_GT(moved, 1e-4) << "clipping did not change the update";
}

// ---- 8. The ledger of one step ------------------------------------------------------------------

class ModelLedger : public ::testing::TestWithParam<Activation> {};

// Per step with plain TP (N = S·B tokens): forward: the embedding's all-reduce (N·h), one per
// attention and MLP (2L of N·h), the cross-entropy's three of N (row max, Σ exp, target logit);
// backward: the head's dX (N·h), one per attention and MLP (2L of N·h) — the embedding's backward
// is g's identity; then the gradient norm's one number. 4L + 6 all-reduces.
TEST_P(ModelLedger, OneStepIsFourAllReducesPerLayerPlusEmbeddingHeadLossAndNorm) {
  GptConfig cfg = gpt_config();
  cfg.act = GetParam();  // SwiGLU adds the gate's dX term before the single backward all-reduce
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  const int64_t S = cfg.seq, B = 3, N = S * B, h = cfg.hidden, L = cfg.layers;
  const Batch b = markov_batch(cfg.vocab, 0, B, S);
  CommLedger& ledger = world().ledger();
  const size_t mark = ledger.size();
  model.forward(b, kSeed, 0);
  const size_t after_forward = ledger.size();
  model.backward();
  model.finish_gradients();  // nothing to sum without sequence parallelism
  const size_t after_backward = ledger.size();
  global_grad_norm(world(), device(), model.params());
  const std::vector<CommRecord> rec(ledger.records().begin() + mark, ledger.records().end());
  const int t = world().size();
  if (t == 1) {  // every region op is the identity at t = 1, and neither loss nor norm communicates
    EXPECT_TRUE(rec.empty()) << rec.size() << " records";
    return;
  }
  EXPECT_EQ(after_forward - mark,
            static_cast<size_t>(1 + 2 * L + 3));  // embedding, 2 per layer, loss
  EXPECT_EQ(after_backward - after_forward,
            static_cast<size_t>(1 + 2 * L));  // head dX, 2 per layer
  const std::string g = "reduce_from_tp_region.forward", f = "copy_to_tp_region.backward";
  std::vector<ExpectedCollective> want = {{"all_reduce", N * h, g}};  // the embedding
  for (int64_t l = 0; l < 2 * L; ++l) want.push_back({"all_reduce", N * h, g});
  want.push_back({"all_reduce_max", N, "cross_entropy"});  // row max
  want.push_back({"all_reduce", N, "cross_entropy"});      // Σ exp
  want.push_back({"all_reduce", N, "cross_entropy"});      // target logit
  want.push_back({"all_reduce", N * h, f});                // the head's dX
  for (int64_t l = 0; l < 2 * L; ++l) want.push_back({"all_reduce", N * h, f});
  want.push_back({"all_reduce", 1, "grad_norm"});
  ASSERT_EQ(want.size(), static_cast<size_t>(4 * L + 6));
  expect_collectives(rec, want, t);  // all collectives are done: its ASSERT is safe
}

INSTANTIATE_TEST_SUITE_P(Model, ModelLedger,
                         ::testing::Values(Activation::Gelu, Activation::SwiGlu));

// ---- 9. Checkpoints -----------------------------------------------------------------------------

GptConfig ckpt_config() {
  GptConfig c = gpt_config();
  c.layers = 1;
  c.heads = 24;  // GQA, so the q | k | v columns of c_attn have different widths
  c.kv_heads = 12;
  return c;
}

TEST(ModelCheckpoint, SavedAtNpLoadsAtOneAndAtNpBitForBit) {
  const GptConfig cfg = ckpt_config();
  const MarkovSource data(cfg.vocab, kSeed);
  AdamWParams hp;
  hp.lr = 1e-2f;
  Trainer run(world(), cfg, hp, 1.0f, kSeed);
  run.step(data, 0, 2);
  run.step(data, 1, 2);  // nonzero moments, two Adam steps
  const std::string path = temp_path("cross_t");
  save_checkpoint(path, world(), run.model, run.opt, 2);

  // Into t = 1 (every rank loads its own single-device model).
  SerialCommunicator serial;
  Gpt one(device(), serial, cfg);
  AdamW one_opt(device(), one.params(), hp);
  const LoadedCheckpoint l1 = load_checkpoint(path, serial, one, one_opt);
  EXPECT_EQ(l1.step, 2);
  EXPECT_TRUE(l1.optimizer_state);
  EXPECT_EQ(one_opt.steps(), 2);
  const ParamList& ps = run.model.params();
  EXPECT_EQ(ps.size(), one.params().size());
  for (size_t i = 0; i < ps.size() && i < one.params().size(); ++i) {
    const Param& p = ps[i];
    EXPECT_EQ(p.name, one.params()[i].name);
    // Copies, not computations: bit for bit (the real rows: the file holds the unpadded V). Three
    // all-gathers per split parameter.
    EXPECT_EQ(gather_real(world(), p, p.value), one.params()[i].value.to_host()) << p.name;
    const auto m = gather_real(world(), p, run.opt.exp_avg()[i]);
    EXPECT_EQ(m, one_opt.exp_avg()[i].to_host()) << p.name;
    EXPECT_EQ(gather_real(world(), p, run.opt.exp_avg_sq()[i]), one_opt.exp_avg_sq()[i].to_host())
        << p.name;
    if (!is_key_bias(p.name)) {
      EXPECT_GT(norm2(m), 0.0) << p.name << ": zero moments test nothing";
    }
  }

  // Into a fresh t = np model that started from other weights.
  Gpt again(device(), world(), cfg);
  again.init(kSeed + 1);
  AdamW again_opt(device(), again.params(), hp);
  const LoadedCheckpoint ln = load_checkpoint(path, world(), again, again_opt);
  EXPECT_EQ(ln.step, 2);
  EXPECT_TRUE(ln.optimizer_state);
  EXPECT_EQ(again_opt.steps(), 2);
  for (size_t i = 0; i < ps.size(); ++i) {  // same t: every rank's own shard, no communication
    EXPECT_EQ(again.params()[i].value.to_host(), ps[i].value.to_host()) << ps[i].name;
    EXPECT_EQ(again_opt.exp_avg()[i].to_host(), run.opt.exp_avg()[i].to_host()) << ps[i].name;
    EXPECT_EQ(again_opt.exp_avg_sq()[i].to_host(), run.opt.exp_avg_sq()[i].to_host()) << ps[i].name;
  }
  remove_file(path);
}

TEST(ModelCheckpoint, ResumeEqualsUninterrupted) {
  GptConfig cfg = tiny_config();
  cfg.dropout = 0.1f;  // the masks are keyed by the step, which the resumed run must continue
  const MarkovSource data(cfg.vocab, kSeed);
  AdamWParams hp;
  hp.lr = 1e-2f;
  const int batch = 2;
  Trainer straight(world(), cfg, hp, 1.0f, kSeed);
  std::vector<float> want;
  for (int s = 0; s < 6; ++s) want.push_back(straight.step(data, s, batch));

  const std::string path = temp_path("resume");
  std::vector<float> got;
  {
    Trainer first(world(), cfg, hp, 1.0f, kSeed);
    for (int s = 0; s < 3; ++s) got.push_back(first.step(data, s, batch));
    save_checkpoint(path, world(), first.model, first.opt, 3);
  }
  Trainer second(world(), cfg, hp, 1.0f, kSeed + 1);  // other weights until loaded
  const LoadedCheckpoint loaded = load_checkpoint(path, world(), second.model, second.opt);
  EXPECT_EQ(loaded.step, 3);
  for (int64_t s = loaded.step; s < 6; ++s) got.push_back(second.step(data, s, batch));
  // Same t, same order of every operation: bitwise equal.
  EXPECT_EQ(got, want);
  for (size_t i = 0; i < straight.model.params().size(); ++i)
    EXPECT_EQ(second.model.params()[i].value.to_host(), straight.model.params()[i].value.to_host())
        << straight.model.params()[i].name;
  remove_file(path);
}

TEST(ModelCheckpoint, TiedFileHasNoHeadAndMismatchesAreBadInput) {
  const GptConfig cfg = ckpt_config();  // tied, h = 48
  AdamWParams hp;
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  AdamW opt(device(), model.params(), hp);
  const std::string path = temp_path("tied"), bare = temp_path("bare");
  save_checkpoint(path, world(), model, opt, 0);

  // Exactly the stored tensors of the parameters and their two moments; c_attn holds q | k | v.
  const safetensors::File f = safetensors::File::open(path);
  std::set<std::string> want;
  for (const Param& p : model.params()) {
    const std::string name = p.ckpt_name.empty() ? p.name : p.ckpt_name;
    for (const char* prefix : {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."})
      want.insert(prefix + name);
  }
  const auto names = f.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want);
  EXPECT_FALSE(f.has("lm_head.weight"));
  const int64_t hd = cfg.head_dim();
  EXPECT_EQ(f.info("transformer.h.0.attn.c_attn.weight").shape,
            (std::vector<int64_t>{cfg.hidden, (cfg.heads + 2 * cfg.kv()) * hd}));
  EXPECT_EQ(f.metadata("hidden"), "48");

  // The same file, tensors only (no configuration metadata), so loading reaches the shape check.
  if (world().rank() == 0) {
    safetensors::Writer w;
    for (const auto& name : names) w.add_f32(name, f.info(name).shape, f.read_f32(name));
    w.write(bare);
  }
  world().barrier();

  GptConfig small = cfg;
  small.hidden = 24;  // heads 24 → head_dim 1
  Gpt other(device(), world(), small);
  AdamW other_opt(device(), other.params(), hp);
  // Every rank reads the same file, so every rank throws the same bad-input error (no collective
  // is pending). The message names the file, the first tensor of the wrong shape and both shapes.
  const std::string wte =
      "tensor transformer.wte.weight has shape [64, 48] but this model needs [64, 24]";
  for (const std::string& file : {path, bare}) {  // with and without the configuration metadata
    try {
      load_checkpoint(file, world(), other, other_opt);
      ADD_FAILURE() << "no error loading " << file;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.exit_code(), 2) << msg;
      EXPECT_NE(msg.find("checkpoint " + file), std::string::npos) << msg;
      EXPECT_NE(msg.find(wte), std::string::npos) << msg;
    }
  }
  remove_file(path);
  remove_file(bare);
}

TEST(ModelCheckpoint, NonFiniteValuesAreRefusedAtLoad) {
  const GptConfig cfg = ckpt_config();
  AdamWParams hp;
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  AdamW opt(device(), model.params(), hp);
  const std::string path = temp_path("nonfinite");
  save_checkpoint(path, world(), model, opt, 0);
  const std::string bad = "transformer.h.0.mlp.c_fc.weight";
  for (const float value : {std::nanf(""), -INFINITY}) {
    if (world().rank() == 0) {  // the same file with one element of `bad` replaced
      const safetensors::File f = safetensors::File::open(path);
      safetensors::Writer w;
      for (const auto& name : f.names()) {
        std::vector<float> v = f.read_f32(name);
        if (name == bad) v[7] = value;
        w.add_f32(name, f.info(name).shape, v);
      }
      for (const char* key : {"format", "step", "adam_steps"}) w.set_metadata(key, f.metadata(key));
      w.write(path);
    }
    world().barrier();
    try {
      load_checkpoint(path, world(), model, opt);
      ADD_FAILURE() << "no error loading a checkpoint with " << value;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.exit_code(), 2) << msg;
      EXPECT_NE(msg.find("tensor " + bad + " holds " + (std::isnan(value) ? "NaN" : "Inf") +
                         " (element 7)"),
                std::string::npos)
          << msg;
    }
    world().barrier();
  }
  remove_file(path);
}

// A step whose loss or gradient norm is NaN/Inf changes nothing (no AdamW step, same weights) and
// says so, the same on every rank. lr = 1e30 blows the weights up within a few steps.
TEST(ModelTrain, NonFiniteStepMakesNoUpdate) {
  GptConfig cfg = ckpt_config();
  AdamWParams hp;
  hp.lr = 1e30f;
  const MarkovSource data(cfg.vocab, kSeed);
  Trainer tr(world(), cfg, hp, 0.0f, kSeed);
  int64_t s = 0;
  for (; s < 20; ++s) {
    std::vector<std::vector<float>> before;
    for (const Param& p : tr.model.params()) before.push_back(p.value.to_host());
    const int64_t adam_steps = tr.opt.steps();
    const Batch b = data.batch(s, 2, cfg.seq);
    const StepResult r = train_step(world(), device(), tr.model, tr.opt, b, kSeed, s, hp.lr, 0.0f);
    EXPECT_EQ(r.nonfinite.empty(), std::isfinite(r.loss) && std::isfinite(r.grad_norm));
    if (r.nonfinite.empty()) continue;
    EXPECT_TRUE(r.nonfinite == "loss" || r.nonfinite == "gradient norm" ||
                r.nonfinite.rfind("gradient of ", 0) == 0)
        << r.nonfinite;
    EXPECT_EQ(tr.opt.steps(), adam_steps);
    for (size_t i = 0; i < before.size(); ++i) {
      const std::vector<float> after = tr.model.params()[i].value.to_host();
      EXPECT_EQ(std::memcmp(after.data(), before[i].data(), after.size() * sizeof(float)), 0)
          << tr.model.params()[i].name;
    }
    // Every rank saw the same thing.
    Tensor mine = Tensor::from_host(device(), Shape{1}, {static_cast<float>(r.nonfinite.size())});
    world().all_reduce(mine, ReduceOp::Max);
    EXPECT_EQ(mine.to_host()[0], static_cast<float>(r.nonfinite.size()));
    break;
  }
  EXPECT_LT(s, 20) << "lr = 1e30 never produced a non-finite loss or norm";
}

// ---- 10. Bad configuration ----------------------------------------------------------------------

TEST(ModelConfig, ValidateListsEveryProblem) {
  const int t = world().size();
  GptConfig c = base_config();
  c.hidden = 50;
  c.heads = 4;
  c.kv_heads = 3;
  c.ffn = 10;
  // What problems(t) must find at this t.
  std::vector<std::string> want = {"hidden=50 is not divisible by heads=4",
                                   "heads=4 is not divisible by kv_heads=3"};
  if (4 % t != 0) want.push_back("heads=4 is not divisible by t=" + std::to_string(t));
  if (3 % t != 0) want.push_back("kv_heads=3 is not divisible by t=" + std::to_string(t));
  if (10 % t != 0) want.push_back("ffn=10 is not divisible by t=" + std::to_string(t));
  EXPECT_EQ(c.problems(t).size(), want.size());
  for (auto* make : {+[](const GptConfig& g) { g.validate(world().size()); },
                     +[](const GptConfig& g) { Gpt model(device(), world(), g); }}) {
    try {
      make(c);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_EQ(
          msg.rfind(std::to_string(want.size()) + " problems with the model configuration: ", 0),
          0u)
          << msg;
      for (const auto& w : want)
        EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
    }
  }

  // Problems of the values themselves are all listed too (before any divisibility check). An
  // unknown --act or --norm is refused where the name is parsed (ConfigNames below).
  GptConfig d = base_config();
  d.layers = 0;
  d.vocab = 2;
  d.dropout = 1.0f;
  try {
    d.validate(t);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(msg.rfind("3 problems with the model configuration: ", 0), 0u) << msg;
    for (const char* w : {"--layers=0", "--vocab=2", "--dropout"})
      EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
  }
  EXPECT_NO_THROW(base_config().validate(t));
}

// act and norm: every name parses to its enum and prints back as the same name (flags, checkpoint
// metadata and printing use the names); any other name is bad input naming the choices.
TEST(ConfigNames, ActivationAndNormRoundTripAndRejectUnknownNames) {
  for (const Activation a : {Activation::Gelu, Activation::SwiGlu})
    EXPECT_EQ(parse_activation(activation_name(a)), a);
  for (const NormKind n : {NormKind::LayerNorm, NormKind::RmsNorm})
    EXPECT_EQ(parse_norm(norm_name(n)), n);
  EXPECT_STREQ(activation_name(Activation::SwiGlu), "swiglu");
  EXPECT_STREQ(norm_name(NormKind::RmsNorm), "rmsnorm");
  GptConfig cfg;
  cfg.act = Activation::SwiGlu;
  cfg.norm = NormKind::RmsNorm;
  EXPECT_EQ(cfg.activation(), Activation::SwiGlu);
  EXPECT_EQ(cfg.norm_kind(), NormKind::RmsNorm);
  expect_bad_input([&] { parse_norm("batchnorm"); },
                   "--norm=batchnorm: expected layernorm or rmsnorm", "parse_norm(\"batchnorm\")");
  EXPECT_THROW(parse_activation("relu"), Error);
  EXPECT_NE(cfg.str().find(" swiglu rmsnorm "), std::string::npos) << cfg.str();  // by name
}

}  // namespace
