// test_recompute_mpi.cpp — activation recomputation (GptConfig::recompute, model/recompute.h) against
// keeping everything: for selective and full, SP on and off, GeLU and SwiGLU, every overlap mode
// (none, async, ring; ring with SP only), with dropout on, the
// loss and every gradient shard are BITWISE those of recompute = none at the same t (the rerun
// uses the same kernels, inputs and counter-keyed dropout masks); and what each block records in
// the MemoryLedger equals block_activation_bytes() to the byte, with the closed forms: selective
// = none − 4·B·(nh/t)·S² (the s²-term), full = 4·n·h (the block's input, n = N/t under SP).
// Runs under mpirun -np 1, 2, 3, 4 (t = np). Tolerance: 0 (bitwise), byte counts exact.
//
// Collectives: every rank builds and runs the same models in the same order; comparisons are local.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/recompute.h"
#include "model_test_helpers.h"
#include "parallel/collective_matmul.h"
#include "test_util.h"

namespace {

using namespace tp;
using namespace tp::testing;  // test_util.h, model_test_helpers.h

// L = 2 of the tiny model (model_test_helpers.h: every split divides by t = 1, 2, 3, 4), with
// dropout 0.1 everywhere.
GptConfig recompute_config() {
  GptConfig c = tp::tiny_gpt(2);
  c.dropout = 0.1f;
  return c;
}
constexpr int64_t kBatch = 2;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using RecomputeCase = std::tuple<Recompute, bool, Activation, Overlap>;  // mode, sp, act, overlap

class RecomputeModes : public ::testing::TestWithParam<RecomputeCase> {};

// Two steps of `cfg` against the same model with recompute = none: loss and every gradient shard
// bitwise equal.
void expect_bitwise_those_of_none(const GptConfig& cfg) {
  GptConfig plain = cfg;
  plain.recompute = Recompute::None;
  Gpt model(device(), world(), cfg), ref(device(), world(), plain);
  model.init(kSeed);
  ref.init(kSeed);
  for (int64_t step = 0; step < 2; ++step) {  // two steps: the masks change with the step
    const Batch b = markov_batch(cfg.vocab, step, kBatch, cfg.seq);
    ref.zero_grad();
    model.zero_grad();
    const float want = ref.forward(b, kSeed, step);
    ref.backward();
    ref.finish_gradients();
    const float got = model.forward(b, kSeed, step);
    model.backward();
    model.finish_gradients();
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "loss " << got << " vs " << want;
    ASSERT_EQ(model.params().size(), ref.params().size());
    for (size_t i = 0; i < ref.params().size(); ++i)
      EXPECT_TRUE(same_bits(model.params()[i].grad.to_host(), ref.params()[i].grad.to_host()))
          << ref.params()[i].name << " at step " << step;
  }
}

TEST_P(RecomputeModes, GradientsAreBitwiseThoseOfKeepingEverything) {
  GptConfig cfg = recompute_config();
  std::tie(cfg.recompute, cfg.sp, cfg.act, cfg.overlap) = GetParam();
  if (cfg.overlap == Overlap::Ring && !cfg.sp) GTEST_SKIP() << "the ring needs SP";
  if (cfg.overlap == Overlap::Chunked && cfg.sp) GTEST_SKIP() << "chunked: no SP";
  expect_bitwise_those_of_none(cfg);
}

TEST_P(RecomputeModes, LedgerEqualsTheFormulaToTheByte) {
  GptConfig cfg = recompute_config();
  std::tie(cfg.recompute, cfg.sp, cfg.act, cfg.overlap) = GetParam();
  if (cfg.overlap == Overlap::Ring && !cfg.sp) GTEST_SKIP() << "the ring needs SP";
  if (cfg.overlap == Overlap::Chunked && cfg.sp) GTEST_SKIP() << "chunked: no SP";
  const int t = world().size();
  const int64_t S = cfg.seq, B = kBatch, N = S * B, n = cfg.sp ? N / t : N, h = cfg.hidden;
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  model.forward(markov_batch(cfg.vocab, 0, B, S), kSeed, 0);

  const int64_t formula = block_activation_bytes(cfg, S, B, t);
  for (int64_t l = 0; l < cfg.layers; ++l)
    EXPECT_EQ(model.memory().layer_bytes(l), formula) << "layer " << l;
  GptConfig none = cfg;
  none.recompute = Recompute::None;
  if (cfg.recompute == Recompute::Selective) {
    // Attention keeps its log-sum-exp, never the S × S probabilities: selective has nothing left
    // to drop, and keeps what none keeps.
    EXPECT_EQ(formula, block_activation_bytes(none, S, B, t));
    for (const MemoryRecord& r : model.memory().records())
      EXPECT_FALSE(r.shape.ndim() == 4 && r.shape.numel() % (S * S) == 0) << r.name;
  } else {
    EXPECT_EQ(formula, 4 * n * h);
    int64_t records = 0;
    for (const MemoryRecord& r : model.memory().records())
      if (r.layer >= 0) {
        ++records;
        EXPECT_EQ(r.name, "transformer.h." + std::to_string(r.layer) + ".input");
        EXPECT_EQ(r.shape.str(), (Shape{n, h}.str()));
      }
    EXPECT_EQ(records, cfg.layers);
  }
  model.backward();  // and backward still runs from what was kept
}

INSTANTIATE_TEST_SUITE_P(
    Recompute, RecomputeModes,
    ::testing::Combine(::testing::Values(Recompute::Selective, Recompute::Full), ::testing::Bool(),
                       ::testing::Values(Activation::Gelu, Activation::SwiGlu),
                       ::testing::Values(Overlap::None, Overlap::Async, Overlap::Ring,
                                         Overlap::Chunked)),
    [](const ::testing::TestParamInfo<RecomputeCase>& i) {
  return recompute_name(std::get<0>(i.param)) +
         std::string(std::get<1>(i.param) ? "_sp_" : "_nosp_") +
         activation_name(std::get<2>(i.param)) + "_overlap_" + overlap_name(std::get<3>(i.param));
    });

// Under --precision bf16 (bf16 copies of the weights, bf16 activations and TP collectives): the
// rerun rounds at the same points as the first forward, so the gradients are still BITWISE those
// of keeping everything, with dropout on; and the ledger, by dtype, equals the formula per mode:
// selective drops the bf16 probabilities (2·B·(nh/t)·S² bytes), full keeps the bf16 block input
// only (2·n·h bytes, nothing in f32).
using Bf16Case = std::tuple<Recompute, bool, Overlap>;  // mode, sp, overlap

class RecomputeBf16 : public ::testing::TestWithParam<Bf16Case> {};

GptConfig bf16_config(const Bf16Case& param) {
  GptConfig cfg = recompute_config();
  std::tie(cfg.recompute, cfg.sp, cfg.overlap) = param;
  cfg.precision = Precision::Bf16;
  return cfg;
}

TEST_P(RecomputeBf16, GradientsAreBitwiseThoseOfKeepingEverything) {
  const GptConfig cfg = bf16_config(GetParam());
  if (cfg.overlap == Overlap::Ring && !cfg.sp) GTEST_SKIP() << "the ring needs SP";
  expect_bitwise_those_of_none(cfg);
}

TEST_P(RecomputeBf16, LedgerByDtypeEqualsTheFormula) {
  const GptConfig cfg = bf16_config(GetParam());
  if (cfg.overlap == Overlap::Ring && !cfg.sp) GTEST_SKIP() << "the ring needs SP";
  const int t = world().size();
  const int64_t S = cfg.seq, B = kBatch, N = S * B, n = cfg.sp ? N / t : N, h = cfg.hidden;
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  model.forward(markov_batch(cfg.vocab, 0, B, S), kSeed, 0);
  for (Dtype d : {Dtype::f32, Dtype::bf16})
    for (int64_t l = 0; l < cfg.layers; ++l)
      EXPECT_EQ(model.memory().layer_bytes(l, d), block_activation_bytes(cfg, S, B, t, d))
          << "layer " << l << " " << dtype_name(d);
  GptConfig none = cfg;
  none.recompute = Recompute::None;
  const int64_t formula = block_activation_bytes(cfg, S, B, t);
  if (cfg.recompute == Recompute::Selective)
    EXPECT_EQ(formula, block_activation_bytes(none, S, B, t));  // nothing of S × S to drop
  else
    EXPECT_EQ(formula, 2 * n * h);
  // Half of fp32's kept values, but for the f32 statistics and masks.
  GptConfig fp32 = cfg;
  fp32.precision = Precision::Fp32;
  const int64_t f32_part = block_activation_bytes(cfg, S, B, t, Dtype::f32);
  EXPECT_EQ(2 * (formula - f32_part) + f32_part, block_activation_bytes(fp32, S, B, t));
  model.backward();
}

INSTANTIATE_TEST_SUITE_P(
    Recompute, RecomputeBf16,
    ::testing::Combine(::testing::Values(Recompute::Selective, Recompute::Full), ::testing::Bool(),
                       ::testing::Values(Overlap::None, Overlap::Async, Overlap::Ring)),
    [](const ::testing::TestParamInfo<Bf16Case>& i) {
  return recompute_name(std::get<0>(i.param)) +
         std::string(std::get<1>(i.param) ? "_sp_" : "_nosp_") + "bf16_overlap_" +
         overlap_name(std::get<2>(i.param));
    });

// An unknown mode is bad input, named with the choices; every name parses back to its mode.
TEST(RecomputeConfig, UnknownModeIsBadInput) {
  try {
    parse_recompute("partial");
    ADD_FAILURE() << "parse_recompute(\"partial\") did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("none, selective or full"), std::string::npos) << e.what();
  }
  for (Recompute m : {Recompute::None, Recompute::Selective, Recompute::Full})
    EXPECT_EQ(parse_recompute(recompute_name(m)), m);
  EXPECT_STREQ(recompute_name(Recompute::Full), "full");
}

}  // namespace
