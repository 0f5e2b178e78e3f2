// test_generate_mpi.cpp — text generation under tensor parallelism: the key/value-cache path against
// the full forward, the vocabulary-parallel sampler against the same rule over the whole
// vocabulary, and generated tokens at t = np against t = 1.
// Runs under mpirun -np 1, 2, 3, 4 (sizes divide by 1, 2, 3 and 4; the runs are short, since np 3
// and 4 are oversubscribed on small machines).
//
// Tolerances:
//   1e-5  relative error of the logits, cache path against the full forward at the same t: the
//         same fp32 products, but the attention's GEMMs see other sizes (one query row against
//         the cached keys instead of the whole square), so the sums may be added in another order.
//   0     token ids: generated tokens at t = np equal those at t = 1, the sampler's choice equals
//         the whole-vocabulary rule (both are decisions on logits that differ by rounding only;
//         the models here keep the top logits far apart compared with that rounding).
//   0.03  Gumbel-max frequencies against softmax probabilities over 4000 draws (σ ≤ 0.008).
//
// Collectives: every rank runs every test and makes the same calls in the same order; after the
// first collective only EXPECT_* is used.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "model_test_helpers.h"
#include "parallel/vocab_sampling.h"
#include "test_util.h"

namespace {

using namespace tp;
using namespace tp::testing;  // test_util.h, model_test_helpers.h

constexpr uint64_t kSeed = 99;
constexpr double kLogitTol = 1e-5;

// L = 2, h = 48, nh = 12 (head_dim 4), ffn = 96, V = 64 (padded to 66 at t = 3): every size
// divides by 1, 2, 3, 4. init_std 0.1 so that attention and the logits are far from uniform.
GptConfig gen_config() {
  GptConfig c = tp::small_gpt(12);
  c.init_std = 0.1f;
  return c;
}

GptConfig gqa_config() {
  GptConfig c = gen_config();
  c.tied = false;
  c.act = Activation::SwiGlu;
  c.norm = NormKind::RmsNorm;
  c.heads = 24;  // head_dim 2, two query heads per key/value head
  return c;
}

std::vector<int32_t> random_ids(const std::string& name, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids;
  for (float u : random_vector(name, n)) {
    const int64_t id = static_cast<int64_t>(std::fabs(u) * 1000.0f) % vocab;
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// ---- 1. the key/value cache against the full forward ---------------------------------------------

class GenerateCache : public ::testing::TestWithParam<int> {};

// Prefill the first 5 positions of B = 2 sequences (every position's logits), then decode the
// rest one position at a time: each step's logits equal the full forward's at that position.
TEST_P(GenerateCache, CachedLogitsEqualFullForward) {
  const GptConfig cfg = GetParam() == 0 ? gen_config() : gqa_config();
  const int64_t S = cfg.seq, B = 2, prefill = 5;
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  Batch b;
  b.seq = S;
  b.batch = B;
  b.ids = random_ids("gen_cache_ids", S * B, cfg.vocab);
  const std::vector<float> full = model.forward_logits(b, kSeed, 0).to_host();  // (S·B, V'/t)
  const int64_t cols = model.padded_vocab() / world().size();
  auto rows_of = [&](int64_t s0, int64_t s1) {  // positions [s0, s1) of the full logits
    return std::vector<float>(full.begin() + s0 * B * cols, full.begin() + s1 * B * cols);
  };

  KvCache cache = model.make_kv_cache(B);
  EXPECT_EQ(cache.capacity, S);
  const int64_t hd = cfg.head_dim(), kv_cols = cfg.kv() / world().size() * hd;
  EXPECT_EQ(cache.bytes(), 2 * cfg.layers * S * B * kv_cols * 4);  // this rank's heads only
  const std::vector<int32_t> first(b.ids.begin(), b.ids.begin() + prefill * B);
  const Tensor pre = model.forward_cached(first, cache, /*all_positions=*/true);
  EXPECT_LE(rel_error(pre.to_host(), rows_of(0, prefill)), kLogitTol) << "prefill";
  EXPECT_EQ(cache.length, prefill);
  for (int64_t s = prefill; s < S; ++s) {
    const std::vector<int32_t> next(b.ids.begin() + s * B, b.ids.begin() + (s + 1) * B);
    const Tensor step = model.forward_cached(next, cache);  // (B, V'/t): position s
    EXPECT_LE(rel_error(step.to_host(), rows_of(s, s + 1)), kLogitTol) << "position " << s;
  }
  EXPECT_EQ(cache.length, S);
  // The cache is full: one more position is bad input, reported before any collective.
  EXPECT_THROW(model.forward_cached({1, 2}, cache), tp::Error);
}

INSTANTIATE_TEST_SUITE_P(Configs, GenerateCache, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) {
  return i.param == 0 ? std::string("TiedGeluLayerNorm") : std::string("UntiedSwigluRmsNormGqa");
});

// ---- 2. the sampler against the rule over the whole vocabulary -------------------------------------

// Global logits of V ids, and this rank's shard of them as the model would hold it: V'/t columns
// from first_vocab_id, padding columns (ids ≥ V) set to a huge value that must never win.
struct SplitLogits {
  VocabShard shard;
  Tensor mine;  // (1, V'/t)
};

SplitLogits split(const std::vector<float>& global) {
  const int64_t V = static_cast<int64_t>(global.size()), t = world().size();
  const int64_t cols = (V + t - 1) / t, first = world().rank() * cols;
  std::vector<float> row(static_cast<size_t>(cols), 1e30f);
  for (int64_t j = 0; j < cols && first + j < V; ++j) row[j] = global[first + j];
  return {{first, V}, Tensor::from_host(device(), Shape{1, cols}, row)};
}

// The rule on one device: the k largest logits (the lower id first on a tie), then the largest
// score (sampling_score), the lowest id on a tie.
int32_t whole_vocabulary_rule(const std::vector<float>& logits, const SamplingParams& p,
                              const RngKey& key) {
  std::vector<int64_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (p.temperature > 0 && p.top_k > 0 && p.top_k < static_cast<int64_t>(ids.size()))
    ids.resize(static_cast<size_t>(p.top_k));
  int64_t best = -1;
  float best_score = 0;
  for (int64_t id : ids) {
    const float s = sampling_score(logits[id], id, p, key);
    if (best < 0 || s > best_score || (s == best_score && id < best)) {
      best = id;
      best_score = s;
    }
  }
  return static_cast<int32_t>(best);
}

TEST(GenerateSampling, GreedyTieGoesToTheLowestIdAndPaddingNeverWins) {
  // V = 10: padded to 12 at t = 3 and 4, so the last shard holds padding columns.
  std::vector<float> logits = {0.5f, -1.0f, 2.0f, 5.0f, 1.0f, 0.0f, 3.0f, -2.0f, 5.0f, 4.0f};
  const RngKey key = RngKey::from(kSeed, "greedy");
  SplitLogits a = split(logits);
  EXPECT_EQ(vocab_parallel_sample(world(), a.mine, a.shard, SamplingParams{}, key), 3);
  logits[3] = 4.5f;  // now id 8 alone holds the maximum
  SplitLogits b = split(logits);
  EXPECT_EQ(vocab_parallel_sample(world(), b.mine, b.shard, SamplingParams{}, key), 8);
}

TEST(GenerateSampling, SameChoiceAsTheWholeVocabularyRule) {
  const int64_t V = 37;  // padded to 38 (t = 2), 39 (t = 3), 40 (t = 4)
  const std::vector<float> logits = random_vector("gen_sample_logits", V);
  const SamplingParams rules[] = {{0.7f, 0}, {1.3f, 3}, {1.0f, 10}, {1.0f, V}, {0.0f, 5}};
  int64_t differing = 0;
  for (const SamplingParams& p : rules)
    for (int draw = 0; draw < 5; ++draw) {
      const RngKey key = RngKey::from(kSeed, "draw/" + std::to_string(draw));
      const SplitLogits s = split(logits);
      const int32_t got = vocab_parallel_sample(world(), s.mine, s.shard, p, key);
      const int32_t want = whole_vocabulary_rule(logits, p, key);
      EXPECT_EQ(got, want) << "T=" << p.temperature << " k=" << p.top_k << " draw " << draw;
      differing += got != whole_vocabulary_rule(logits, SamplingParams{}, key);
    }
  EXPECT_GT(differing, 0) << "sampling never left the argmax: the draws are not random";
}

// Gumbel-max draws follow softmax(x / T), and top-k draws the softmax of the k largest only
// (at t = 1: host arithmetic, no collective).
TEST(GenerateSampling, GumbelMaxFrequenciesFollowTheSoftmax) {
  SerialCommunicator solo;
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 1.5f, 0.0f};
  const int64_t V = static_cast<int64_t>(logits.size());
  const Tensor row = Tensor::from_host(device(), Shape{1, V}, logits);
  for (const SamplingParams& p :
       {SamplingParams{1.0f, 0}, SamplingParams{0.5f, 0}, SamplingParams{1.0f, 2}}) {
    std::vector<double> want(V, 0.0);
    double z = 0;
    for (int64_t j = 0; j < V; ++j) {
      const bool in_top = p.top_k == 0 || j == 0 || j == 3;  // the two largest: ids 3 and 0
      want[j] = in_top ? std::exp(logits[j] / p.temperature) : 0.0;
      z += want[j];
    }
    std::vector<double> freq(V, 0.0);
    constexpr int kDraws = 4000;
    for (int d = 0; d < kDraws; ++d) {
      const RngKey key = RngKey::from(kSeed, "freq/" + std::to_string(d));
      freq[vocab_parallel_sample(solo, row, VocabShard{0, V}, p, key)] += 1.0 / kDraws;
    }
    for (int64_t j = 0; j < V; ++j)
      EXPECT_NEAR(freq[j], want[j] / z, 0.03)
          << "id " << j << " T=" << p.temperature << " k=" << p.top_k;
  }
}

// ---- 3. generated tokens: t = np against t = 1 -----------------------------------------------------

// The same prompt and seed through generate() at t = np and at t = 1 (a local SerialCommunicator,
// same weights): the same tokens, for greedy, sampling and top-k. 3 + 11 tokens overrun the
// position table of 12: token 10 is chosen from the logits of the window refill.
TEST(GenerateTokens, SameTokensForEveryT) {
  const GptConfig cfg = gen_config();
  Gpt model(device(), world(), cfg);
  model.init(kSeed);
  SerialCommunicator solo;
  Gpt reference(device(), solo, cfg);
  reference.init(kSeed);
  const std::vector<int32_t> prompt = {5, 17, 42};
  const SamplingParams rules[] = {{0.0f, 0}, {0.9f, 0}, {1.2f, 5}};
  std::vector<std::vector<int32_t>> outputs;
  for (const SamplingParams& p : rules) {
    GenerateOptions o;
    o.tokens = 11;
    o.sampling = p;
    o.seed = kSeed;
    GenerateStats st, ref_st;
    std::vector<int32_t> streamed;
    const std::vector<int32_t> got = generate(device(), world(), model, prompt, o, &st,
                                              [&](int32_t id) { streamed.push_back(id); });
    const std::vector<int32_t> want = generate(device(), solo, reference, prompt, o, &ref_st);
    EXPECT_EQ(got, want) << "T=" << p.temperature << " k=" << p.top_k;
    EXPECT_EQ(streamed, got);
    EXPECT_EQ(st.decode_tokens, 11);
    EXPECT_EQ(st.prompt_tokens, 3);
    EXPECT_EQ(st.refills, 1);  // prompt + tokens 0..8 fill the cache; token 9 starts a refill
    EXPECT_EQ(st.prefill_tokens, 3 + cfg.seq / 2);
    EXPECT_NEAR(st.nll, ref_st.nll, 1e-4 * std::max(1.0, ref_st.nll));
    for (int32_t id : got) EXPECT_TRUE(id >= 0 && id < cfg.vocab) << id;
    outputs.push_back(got);
  }
  EXPECT_NE(outputs[0], outputs[1]) << "temperature sampling gave the greedy tokens";
}

// A checkpoint saved at t = np carries its configuration (config_from_checkpoint): a t = 1 model
// built from it alone loads it and generates the tokens of the t = np model.
TEST(GenerateTokens, FromACheckpointSavedAtAnotherT) {
  const GptConfig cfg = gen_config();
  Gpt model(device(), world(), cfg);
  model.init(kSeed + 1);
  AdamW opt(device(), model.params(), AdamWParams{});
  Tensor pid = Tensor::from_host(device(), Shape{1}, {static_cast<float>(getpid())});
  world().broadcast(pid, 0);  // one file name for the job (exact below 2^24)
  const std::string path = ::testing::TempDir() + "tp_test_generate_np" +
                           std::to_string(world().size()) + "_" +
                           std::to_string(static_cast<long>(pid.to_host()[0])) + ".safetensors";
  save_checkpoint(path, world(), model, opt, 3);
  const GptConfig read = config_from_checkpoint(path);
  EXPECT_EQ(read.str(), cfg.str());
  SerialCommunicator solo;
  Gpt loaded(device(), solo, read);
  AdamW loaded_opt(device(), loaded.params(), AdamWParams{});
  load_checkpoint(path, solo, loaded, loaded_opt);
  GenerateOptions o;
  o.tokens = 6;
  o.sampling = {0.8f, 0};
  const std::vector<int32_t> prompt = {1, 2, 3};
  EXPECT_EQ(generate(device(), world(), model, prompt, o),
            generate(device(), solo, loaded, prompt, o));
  world().barrier();
  if (world().rank() == 0) std::remove(path.c_str());
}

}  // namespace
