// test_sp_vocab_mpi.cpp — sequence parallelism and the vocabulary-parallel embedding / LM head against
// t = 1: every SP × activation × norm × dropout combination (loss and every gradient), a 50-step
// loss curve with SP and dropout, padded vocabularies (V = 50257, V = 256), no (tokens, V) tensor
// anywhere at t > 1, the collectives of one SP step, the activation-memory ledger against the
// closed-form formula, the replicated-gradient audit on real SP bugs.
// Runs under mpirun -np 1, 2, 3, 4 (t = np).
//
// The reference is always a t = 1 model on a local SerialCommunicator, without SP and with the
// unpadded vocabulary (pad_vocab_multiple = 1, so V' = V), built from the same seed; t = np values
// are compared through gather_real (the real V rows of wte / lm_head).
//
// Tolerances (relative error ‖got − want‖ / ‖want‖), as in test_model_mpi.cpp:
//   1e-6  the loss of one step;  1e-5  gradients of one step (fp32 split sums in another order);
//   1e-4  per step of a 50-step loss curve (rounding fed back through AdamW);
//   0     padding rows (never looked up, excluded from the softmax: exactly zero), byte counts.
//
// Collectives: every rank makes the same calls in the same order; only EXPECT_* after the first.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/communicator.h"
#include "model/audit.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/train.h"
#include "model_test_helpers.h"
#include "parallel/param.h"
#include "test_util.h"

namespace {

using namespace tp;
using namespace tp::testing;  // test_util.h, model_test_helpers.h

// L = 1 of the tiny model (model_test_helpers.h): every split divides by t = 1, 2, 3, 4.
GptConfig small_config() { return tp::tiny_gpt(1); }
constexpr int64_t kBatch = 2;  // N = S·B = 24 tokens

// The t = 1 reference of `cfg`: no SP, unpadded vocabulary.
GptConfig reference_of(GptConfig cfg) {
  cfg.sp = false;
  cfg.pad_vocab_multiple = 1;
  return cfg;
}

// ---- a. SP on/off × GeLU/SwiGLU × LayerNorm/RMSNorm × dropout 0/0.1 ---------------------------

using SpCase = std::tuple<bool, Activation, NormKind, float>;  // sp, act, norm, dropout

class SpVocabEquivalence : public ::testing::TestWithParam<SpCase> {};

TEST_P(SpVocabEquivalence, LossAndEveryGradientMatchSingleDevice) {
  GptConfig cfg = small_config();
  std::tie(cfg.sp, cfg.act, cfg.norm, cfg.dropout) = GetParam();
  ASSERT_TRUE(cfg.problems(world().size()).empty()) << "the sizes must suit every t in 1..4";
  SerialCommunicator serial;
  Gpt model(device(), world(), cfg), ref(device(), serial, reference_of(cfg));
  model.init(kSeed);
  ref.init(kSeed);
  expect_same_init(model.params(), ref.params());
  // Exactly the replicated parameters see only this rank's tokens under SP (norms, row-parallel
  // biases, wpe); they and only they are summed by finish_gradients.
  for (const Param& p : model.params())
    EXPECT_EQ(p.sequence_parallel_grad, cfg.sp && p.split == Split::Replicated) << p.name;

  const int64_t step = 2;  // the dropout masks are keyed by the step
  const Batch b = markov_batch(cfg.vocab, step, kBatch, cfg.seq);
  const float loss = model.forward(b, kSeed, step), loss_ref = ref.forward(b, kSeed, step);
  model.backward();
  model.finish_gradients();
  ref.backward();
  ref.finish_gradients();
  // 1e-6: a mean over N = 24 token losses; 1e-5 for gradients (split sums reordered over t).
  EXPECT_LE(std::abs(loss - loss_ref), kLossTol * std::abs(loss_ref)) << loss << " vs " << loss_ref;
  EXPECT_GT(loss_ref, 0.5f * std::log(static_cast<float>(cfg.vocab)));  // a sane cross-entropy
  expect_grads_match(model.params(), ref.params(), kTol);
}

INSTANTIATE_TEST_SUITE_P(
    SpVocab, SpVocabEquivalence,
    ::testing::Combine(::testing::Bool(), ::testing::Values(Activation::Gelu, Activation::SwiGlu),
                       ::testing::Values(NormKind::LayerNorm, NormKind::RmsNorm),
                       ::testing::Values(0.0f, 0.1f)),
    [](const ::testing::TestParamInfo<SpCase>& i) {
  return std::string(std::get<0>(i.param) ? "sp" : "nosp") + "_" +
         activation_name(std::get<1>(i.param)) + "_" + norm_name(std::get<2>(i.param)) +
         (std::get<3>(i.param) > 0 ? "_dropout" : "_nodropout");
    });

// ---- b. 50-step loss curve with SP and dropout --------------------------------------------------

TEST(SpVocabTraining, FiftyStepLossCurveWithSpAndDropoutMatchesSingleDevice) {
  GptConfig cfg = small_config();
  cfg.sp = true;
  cfg.dropout = 0.1f;
  const MarkovSource data(cfg.vocab, kSeed);
  AdamWParams hp;
  hp.lr = 1e-2f;
  SerialCommunicator serial;
  // Both through tp::train_step (which calls finish_gradients before the norm).
  Trainer tp_run(world(), cfg, hp, 1.0f, kSeed),
      ref_run(serial, reference_of(cfg), hp, 1.0f, kSeed);
  const int steps = 50;
  std::vector<float> got, want;
  for (int s = 0; s < steps; ++s) {
    got.push_back(tp_run.step(data, s, kBatch));
    want.push_back(ref_run.step(data, s, kBatch));
  }
  // 1e-4 per step: the fp32 rounding of the split sums feeds back through 50 AdamW updates.
  for (int s = 0; s < steps; ++s)
    EXPECT_LE(std::abs(got[s] - want[s]), 1e-4 * want[s])
        << "step " << s << ": " << got[s] << " vs " << want[s];
  double last = 0;  // a real training curve: the last 10 losses well below the first
  for (int s = steps - 10; s < steps; ++s) last += want[s] / 10.0;
  EXPECT_LT(last, want[0] - 0.3) << "the model did not learn: " << want[0] << " -> " << last;
}

// ---- c. Padded vocabularies ---------------------------------------------------------------------

struct VocabCase {
  int64_t vocab, pad_multiple;
  bool tied, sp;
};

class SpVocabPadding : public ::testing::TestWithParam<VocabCase> {};

// GPT-2's V = 50257 is prime: it pads at every t > 1 (to 50258, 50259, 50260 at t = 2, 3, 4).
// V = 256 pads at t = 3 (to 258). With pad_vocab_multiple = 128 (Megatron's default) V pads at
// every t, t = 1 included, by up to 127·t rows. The reference holds exactly V rows.
TEST_P(SpVocabPadding, PaddedModelMatchesUnpaddedSingleDevice) {
  const VocabCase c = GetParam();
  GptConfig cfg = small_config();
  cfg.vocab = c.vocab;
  cfg.pad_vocab_multiple = c.pad_multiple;
  cfg.tied = c.tied;
  cfg.sp = c.sp;
  const int t = world().size(), r = world().rank();
  SerialCommunicator serial;
  Gpt model(device(), world(), cfg), ref(device(), serial, reference_of(cfg));
  const int64_t m = c.pad_multiple * t, vpad = (c.vocab + m - 1) / m * m;  // V rounded up to m·t
  EXPECT_EQ(model.padded_vocab(), vpad);
  EXPECT_EQ(model.first_vocab_id(), r * vpad / t);
  EXPECT_EQ(ref.padded_vocab(), c.vocab);
  model.init(kSeed);
  ref.init(kSeed);
  expect_same_init(model.params(), ref.params());  // padding rows start at zero
  int vocab_params = 0;
  for (const Param& p : model.params()) {
    if (p.name != "transformer.wte.weight" && p.name != "lm_head.weight") continue;
    ++vocab_params;
    EXPECT_EQ(p.split, Split::Rows) << p.name;
    EXPECT_EQ(p.shape[0], vpad) << p.name;
    EXPECT_EQ(p.real_rows(), c.vocab) << p.name;
    EXPECT_EQ(p.value.rows(), vpad / t) << p.name;
  }
  EXPECT_EQ(vocab_params, c.tied ? 1 : 2);

  const Batch b = markov_batch(cfg.vocab, 0, kBatch, cfg.seq);
  const float loss = model.forward(b, kSeed, 0), loss_ref = ref.forward(b, kSeed, 0);
  model.backward();
  model.finish_gradients();
  ref.backward();
  // 1e-6 for the loss, 1e-5 for every gradient (wte / lm_head: the real rows).
  EXPECT_LE(std::abs(loss - loss_ref), kLossTol * std::abs(loss_ref)) << loss << " vs " << loss_ref;
  EXPECT_GT(loss_ref, 0.5f * std::log(static_cast<float>(cfg.vocab)));
  expect_grads_match(model.params(), ref.params(), kTol);

  // The padding rows of the gathered value and gradient: exactly zero. gather_real is the first V
  // rows of gather_global. Collective: three all-gathers per vocabulary parameter.
  for (const Param& p : model.params()) {
    if (p.real_rows() == p.rows()) continue;
    const int64_t real = p.real_rows() * p.cols();
    const std::vector<float> value = gather_global(world(), p, p.value),
                             grad = gather_global(world(), p, p.grad);
    const std::vector<float> grad_real = gather_real(world(), p, p.grad);
    EXPECT_EQ(static_cast<int64_t>(value.size()), vpad * p.cols()) << p.name;
    EXPECT_EQ(grad_real, std::vector<float>(grad.begin(), grad.begin() + real)) << p.name;
    int64_t nonzero_value = 0, nonzero_grad = 0;
    for (int64_t i = real; i < static_cast<int64_t>(grad.size()); ++i) {
      nonzero_value += value[i] != 0.0f;
      nonzero_grad += grad[i] != 0.0f;
    }
    EXPECT_EQ(nonzero_value, 0) << p.name << ": padding rows of the value";
    EXPECT_EQ(nonzero_grad, 0) << p.name << ": padding rows of the gradient";
  }
}

INSTANTIATE_TEST_SUITE_P(SpVocab, SpVocabPadding,
                         ::testing::Values(VocabCase{50257, 1, true, false},
                                           VocabCase{256, 1, false, true},
                                           VocabCase{256, 1, true, false},
                                           VocabCase{50257, 128, false, true}),
                         [](const ::testing::TestParamInfo<VocabCase>& i) {
  return "V" + std::to_string(i.param.vocab) + "_pad" + std::to_string(i.param.pad_multiple) +
         (i.param.tied ? "_tied" : "_untied") + (i.param.sp ? "_sp" : "_nosp");
});

// ---- d. No (tokens, V) tensor -------------------------------------------------------------------

class SpVocabMemory : public ::testing::TestWithParam<bool> {};

// The full logits of N tokens over V = 50257 would be N·V·4 bytes; with the vocabulary split no
// rank allocates anything that large in forward or backward (the largest tensors are the (N, V'/t)
// logits shard and the (V'/t, h) wte shard).
TEST_P(SpVocabMemory, NoRankAllocatesATokensByVocabTensor) {
  GptConfig cfg = small_config();
  cfg.vocab = 50257;
  cfg.sp = GetParam();
  const int t = world().size();
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  const int64_t B = 3, N = cfg.seq * B, full_logits = N * cfg.vocab * 4;  // N = 36 > h = 24
  const Batch b = markov_batch(cfg.vocab, 0, B, cfg.seq);
  // The check means something: every parameter shard (wte's is the largest) is below N·V·4.
  for (const Param& p : model.params())
    EXPECT_LT(static_cast<int64_t>(p.value.bytes()), full_logits) << p.name;

  device().reset_peak();
  model.forward(b, kSeed, 0);
  model.backward();
  model.finish_gradients();
  const MemoryStats mem = device().memory();
  const int64_t logits_shard = N * model.padded_vocab() / t * 4;
  EXPECT_GE(mem.largest, logits_shard) << "the window saw the logits shard being allocated";
  if (t > 1) {
    EXPECT_LT(mem.largest, full_logits)
        << "some rank allocated " << mem.largest << " bytes at once";
  } else {
    // t = 1: the one rank owns the whole vocabulary, so its logits are (N, V) by definition; the
    // measurement sees them (this is what the t > 1 assertion would catch).
    EXPECT_GE(mem.largest, full_logits);
  }
}

INSTANTIATE_TEST_SUITE_P(SpVocab, SpVocabMemory, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
  return i.param ? "sp" : "nosp";
});

// ---- e. The collectives of one SP step ----------------------------------------------------------

// L = 2, h = 48, nh = 12, ffn 96, V = 64, S = 12.
GptConfig ledger_config() {
  GptConfig c = small_config();
  c.layers = 2;
  c.hidden = 48;
  c.ffn = 96;
  c.vocab = 64;
  return c;
}

class SpVocabLedger : public ::testing::TestWithParam<Activation> {};

// Per step under SP (N = S·B tokens; an all-gather records the gathered N·h, a reduce-scatter the
// N·h before scattering), from gpt.cpp / layers.cpp / linear.cpp:
//   forward   embedding: 1 reduce-scatter; per layer, attention then MLP: all-gather on entry,
//             reduce-scatter of the row-parallel output; ln_f's output: 1 all-gather; the loss:
//             3 all-reduces of N (max, Σ exp, target logit)
//   backward  head: 1 reduce-scatter; per layer, MLP then attention: all-gather of dY (the
//             reduce-scatter's backward), all-gather of the kept input shard again (labelled
//             gather_from_sp_region.forward: it is that op's forward, recomputed), reduce-scatter
//             of dX; embedding: 1 all-gather
//   then      finish_gradients: 1 all-reduce of every sequence_parallel_grad parameter packed;
//             the gradient norm: 1 all-reduce of one number.
// And the same bytes as plain TP (an all-reduce moves what a reduce-scatter plus an all-gather
// move) apart from the 2 re-gathers per layer.
TEST_P(SpVocabLedger, OneSpStepIsTheDocumentedCollectives) {
  GptConfig cfg = ledger_config();
  cfg.act = GetParam();
  cfg.sp = true;
  GptConfig plain_cfg = cfg;
  plain_cfg.sp = false;
  const int t = world().size();
  const int64_t S = cfg.seq, B = kBatch, N = S * B, h = cfg.hidden, L = cfg.layers;
  Gpt model(device(), world(), cfg), plain(device(), world(), plain_cfg);
  model.init(kSeed);
  plain.init(kSeed);
  const Batch b = markov_batch(cfg.vocab, 0, B, S);
  CommLedger& ledger = world().ledger();

  auto one_step = [&](Gpt& m, size_t* after_forward, size_t* after_backward) {
    const size_t mark = ledger.size();
    m.zero_grad();
    m.forward(b, kSeed, 0);
    *after_forward = ledger.size() - mark;
    m.backward();
    *after_backward = ledger.size() - mark;
    m.finish_gradients();
    global_grad_norm(world(), device(), m.params());
    return std::vector<CommRecord>(ledger.records().begin() + mark, ledger.records().end());
  };
  size_t fwd = 0, bwd = 0, plain_fwd = 0, plain_bwd = 0;
  const std::vector<CommRecord> rec = one_step(model, &fwd, &bwd);
  const std::vector<CommRecord> plain_rec = one_step(plain, &plain_fwd, &plain_bwd);
  // All collectives are done: ASSERT_* is safe from here on.
  if (t == 1) {  // every region op is the identity, and there is nothing to sum
    EXPECT_TRUE(rec.empty()) << rec.size() << " records";
    return;
  }

  int64_t partial = 0;  // the packed all-reduce: every sequence_parallel_grad parameter
  for (const Param& p : model.params())
    if (p.sequence_parallel_grad) partial += p.value.numel();
  // Which are: wpe (S·h), per layer ln_1 and ln_2 (weight and bias for LayerNorm) and the biases
  // of attn.c_proj and mlp.c_proj (h each), ln_f.
  const int64_t norm_vectors = cfg.norm == NormKind::LayerNorm ? 2 : 1;
  EXPECT_EQ(partial, S * h + L * (2 * norm_vectors + 2) * h + norm_vectors * h);

  const std::string ag = "all_gather", rs = "reduce_scatter", ce = "cross_entropy";
  const std::string gather_fwd = "gather_from_sp_region.forward",
                    gather_bwd = "gather_from_sp_region.backward";
  const std::string rs_fwd = "reduce_scatter_to_sp_region.forward",
                    rs_bwd = "reduce_scatter_to_sp_region.backward";
  const int64_t Nh = N * h;
  std::vector<ExpectedCollective> want = {{rs, Nh, rs_fwd}};  // the embedding
  for (int64_t l = 0; l < L; ++l)
    for (int region = 0; region < 2; ++region) {  // attention, MLP
      want.push_back({ag, Nh, gather_fwd});
      want.push_back({rs, Nh, rs_fwd});
    }
  want.push_back({ag, Nh, gather_fwd});  // ln_f's output, for the head
  want.push_back({"all_reduce_max", N, ce});
  want.push_back({"all_reduce", N, ce});
  want.push_back({"all_reduce", N, ce});
  EXPECT_EQ(fwd, want.size());
  want.push_back({rs, Nh, gather_bwd});  // the head's dX
  for (int64_t l = 0; l < L; ++l)
    for (int region = 0; region < 2; ++region) {  // MLP, attention
      want.push_back({ag, Nh, rs_bwd});           // dY of the row-parallel output
      want.push_back({ag, Nh, gather_fwd});       // the kept input shard, gathered again
      want.push_back({rs, Nh, gather_bwd});       // dX
    }
  want.push_back({ag, Nh, rs_bwd});  // the embedding's backward
  EXPECT_EQ(bwd, want.size());
  want.push_back({"all_reduce", partial, "sequence_parallel_grads"});
  want.push_back({"all_reduce", 1, "grad_norm"});
  EXPECT_EQ(want.size(), static_cast<size_t>(1 + 4 * L + 1 + 3 + 1 + 6 * L + 1 + 2));
  expect_collectives(rec, want, t);

  // Bytes. Each all-gather / reduce-scatter of N·h moves (t − 1)/t · 4·N·h (checked per record
  // above). The region collectives (all but the loss, finish_gradients and the norm) of SP move
  // exactly what plain TP's move plus the 2L re-gathers.
  const double unit = static_cast<double>(t - 1) / t * 4.0 * static_cast<double>(Nh);
  auto region_bytes =
      [&](const std::vector<CommRecord>& records, size_t backward_from, double* regather) {
    double sum = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      const std::string& l = records[i].label;
      if (l == ce || l == "grad_norm" || l == "sequence_parallel_grads") continue;
      sum += records[i].wire_bytes;
      if (regather && i >= backward_from && l == gather_fwd) *regather += records[i].wire_bytes;
    }
    return sum;
  };
  double regather = 0;
  const double sp_bytes = region_bytes(rec, fwd, &regather),
               plain_bytes = region_bytes(plain_rec, plain_fwd, nullptr);
  EXPECT_DOUBLE_EQ(regather, 2.0 * L * unit);
  EXPECT_DOUBLE_EQ(sp_bytes - regather, plain_bytes);
  // Plain TP: per layer 4 all-reduces (2 units each), the embedding's and the head's all-reduce.
  EXPECT_DOUBLE_EQ(plain_bytes, (8.0 * L + 4.0) * unit);
  EXPECT_EQ(plain_rec.size(),
            static_cast<size_t>(4 * L + 6));  // see test_model_mpi.cpp's ModelLedger
}

INSTANTIATE_TEST_SUITE_P(SpVocab, SpVocabLedger,
                         ::testing::Values(Activation::Gelu, Activation::SwiGlu));

// ---- f. The activation-memory ledger against the formula ----------------------------------------

using MemoryCase =
    std::tuple<bool, Activation, NormKind, float, bool>;  // sp, act, norm, dropout, gqa

class SpVocabMemoryLedger : public ::testing::TestWithParam<MemoryCase> {};

// What the blocks record in Gpt::memory() during forward equals block_activation_bytes() exactly,
// for every layer; and the formula's SP value is the no-SP value with its n·h-terms divided by t.
TEST_P(SpVocabMemoryLedger, EveryLayerEqualsTheFormula) {
  GptConfig cfg = ledger_config();  // L = 2, h = 48, S = 12
  bool gqa = false;
  std::tie(cfg.sp, cfg.act, cfg.norm, cfg.dropout, gqa) = GetParam();
  if (gqa) {
    cfg.heads = 24;  // hd 2, two query heads per key/value head
    cfg.kv_heads = 12;
  }
  const int t = world().size();
  const int64_t S = cfg.seq, B = kBatch, N = S * B, h = cfg.hidden;
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  model.forward(markov_batch(cfg.vocab, 0, B, S), kSeed, 0);  // the last collective of the test

  const int64_t formula = block_activation_bytes(cfg, S, B, t);
  for (int64_t l = 0; l < cfg.layers; ++l)
    EXPECT_EQ(model.memory().layer_bytes(l), formula) << "layer " << l;
  // The activations TP alone leaves replicated (norm inputs and statistics, attention and MLP
  // inputs, dropout masks) hold N/t tokens under SP, N without.
  int64_t replicated_kind = 0;
  for (const MemoryRecord& r : model.memory().records()) {
    if (r.layer < 0) continue;  // outside the blocks: below
    bool n_rows = false;
    for (const char* suffix : {"ln_1.input", "ln_2.input", ".mean", ".rstd", "attn.q.input",
                               "mlp.c_fc.input", ".input_shard", ".dropout_mask"})
      n_rows |= tp::testing::ends_with(r.name, suffix);
    if (!n_rows) continue;
    ++replicated_kind;
    EXPECT_EQ(r.shape[0], cfg.sp ? N / t : N) << r.name << " " << r.shape.str();
  }
  const int64_t stats = cfg.norm == NormKind::LayerNorm ? 2 : 1, masks = cfg.dropout > 0 ? 2 : 0;
  EXPECT_EQ(replicated_kind,
            cfg.layers * (2 + 2 * stats + 2 + masks));  // norm inputs, stats, inputs, masks

  // Outside the blocks (layer −1): the embedding's ids, its dropout mask, ln_f's input and
  // statistics (N/t tokens under SP), the head's input (all tokens) and the loss gradient on this
  // rank's logits. Nothing else, and each once.
  const int64_t n = cfg.sp ? N / t : N;
  std::map<std::string, std::string> outside,
      want = {{"transformer.wte.ids", Shape{N}.str()},
              {"transformer.ln_f.input", Shape{n, h}.str()},
              {"transformer.ln_f.rstd", Shape{n}.str()},
              {"lm_head.input", Shape{N, h}.str()},
              {"lm_head.dlogits", Shape{N, model.padded_vocab() / t}.str()}};
  if (cfg.norm == NormKind::LayerNorm) want["transformer.ln_f.mean"] = Shape{n}.str();
  if (cfg.dropout > 0) want["embd.dropout_mask"] = Shape{n, h}.str();
  int64_t outside_bytes = 0, outside_records = 0;
  for (const MemoryRecord& r : model.memory().records())
    if (r.layer < 0) {
      outside[r.name] = r.shape.str();
      outside_bytes += r.bytes;
      ++outside_records;
    }
  EXPECT_EQ(outside, want);
  EXPECT_EQ(outside_records, static_cast<int64_t>(want.size()));
  EXPECT_EQ(model.memory().total_bytes(), cfg.layers * formula + outside_bytes);

  // SP divides exactly the n·h terms by t: per token, ln_1 and ln_2 inputs with their statistics,
  // the attention and MLP inputs and the two dropout masks.
  GptConfig on = cfg, off = cfg;
  on.sp = true;
  off.sp = false;
  const int64_t per_token = 4 * (4 * h + 2 * stats + masks * h);
  EXPECT_EQ(block_activation_bytes(off, S, B, t) - block_activation_bytes(on, S, B, t),
            per_token * (N - N / t));
  if (t > 1) {
    EXPECT_LT(block_activation_bytes(on, S, B, t), block_activation_bytes(off, S, B, t));
  }
}

INSTANTIATE_TEST_SUITE_P(
    SpVocab, SpVocabMemoryLedger,
    ::testing::Combine(::testing::Bool(), ::testing::Values(Activation::Gelu, Activation::SwiGlu),
                       ::testing::Values(NormKind::LayerNorm, NormKind::RmsNorm),
                       ::testing::Values(0.0f, 0.1f), ::testing::Bool()),
    [](const ::testing::TestParamInfo<MemoryCase>& i) {
  return std::string(std::get<0>(i.param) ? "sp" : "nosp") + "_" +
         activation_name(std::get<1>(i.param)) + "_" + norm_name(std::get<2>(i.param)) +
         (std::get<3>(i.param) > 0 ? "_dropout" : "_nodropout") +
         (std::get<4>(i.param) ? "_gqa" : "_mha");
    });

// memory.h's closed forms for GPT-2's shape (nkv = nh, ffn = 4h, GeLU, LayerNorm, dropout on):
//   TP only: sbh(24 + 48/t) + 16sb + 4·nh·sb/t;   TP + SP: sbh·72/t + 16sb/t + 4·nh·sb/t
// (the last term attention's f32 log-sum-exp; no term in s²).
TEST(SpVocabMemoryFormula, Gpt2ShapeMatchesTheClosedForms) {
  GptConfig cfg = ledger_config();
  cfg.ffn = 4 * cfg.hidden;
  cfg.dropout = 0.1f;
  const int64_t s = 24, b = 4, h = cfg.hidden, nh = cfg.heads;  // every divisor of 12 divides s·b
  for (int t : {1, 2, 3, 4}) {
    cfg.sp = false;
    EXPECT_EQ(block_activation_bytes(cfg, s, b, t),
              s * b * h * 24 + s * b * h * 48 / t + 16 * s * b + 4 * nh * s * b / t)
        << "t = " << t;
    cfg.sp = true;
    EXPECT_EQ(block_activation_bytes(cfg, s, b, t),
              s * b * h * 72 / t + 16 * s * b / t + 4 * nh * s * b / t)
        << "t = " << t;
  }
}

// ---- g. The replicated-gradient audit on real SP bugs -------------------------------------------

TEST(SpVocabAudit, NamesMissingAndAveragedSequenceParallelReductions) {
  GptConfig cfg = small_config();  // LayerNorm: weights and biases
  cfg.sp = true;
  const int t = world().size();
  SerialCommunicator serial;
  Gpt model(device(), world(), cfg), ref(device(), serial, reference_of(cfg));
  model.init(kSeed);
  ref.init(kSeed);
  const Batch b = markov_batch(cfg.vocab, 0, kBatch, cfg.seq);
  model.forward(b, kSeed, 0);
  ref.forward(b, kSeed, 0);
  model.backward();
  ref.backward();
  std::set<std::string> partial;  // the parameters finish_gradients sums
  for (const Param& p : model.params())
    if (p.sequence_parallel_grad) partial.insert(p.name);
  for (const char* name :
       {"transformer.h.0.ln_1.weight", "transformer.h.0.ln_2.weight", "transformer.ln_f.weight",
        "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_proj.bias",
        "transformer.h.0.mlp.c_proj.bias", "transformer.wpe.weight"})
    EXPECT_EQ(partial.count(name), 1u) << name;

  // Every problem line names one of `partial` and contains `verdict`; every one of `partial` has one.
  auto expect_verdict = [&](const std::vector<std::string>& problems, const std::string& verdict) {
    EXPECT_EQ(problems.size(), partial.size());
    std::set<std::string> named;
    for (const std::string& line : problems) {
      const std::string name = line.substr(0, line.find(':'));
      EXPECT_EQ(partial.count(name), 1u) << line;
      named.insert(name);
      EXPECT_NE(line.find(verdict), std::string::npos) << line;
    }
    EXPECT_EQ(named, partial);
  };

  // 1. finish_gradients forgotten: each rank holds the gradient of its own tokens.
  const std::vector<std::string> missing = audit_replicated_gradients(world(), model, ref);
  if (t > 1) {
    expect_verdict(missing, "missing all-reduce");
  } else {
    EXPECT_TRUE(missing.empty()) << missing.size() << " problems";  // t = 1: nothing is partial
  }
  // 2. The real step: no problems at any t.
  model.finish_gradients();
  const std::vector<std::string> none = audit_replicated_gradients(world(), model, ref);
  EXPECT_TRUE(none.empty()) << none.size()
                            << " problems, the first: " << (none.empty() ? "" : none.front());
  // 3. Averaged instead of summed: the complete gradient divided by t.
  if (t > 1) {
    for (Param& p : model.params())
      if (p.sequence_parallel_grad) device().scale(p.grad, 1.0f / static_cast<float>(t));
    expect_verdict(audit_replicated_gradients(world(), model, ref), "averaged instead of summed");
  }
}

}  // namespace
