#include "parallel/vocab_sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tp {

namespace {

constexpr float kNone = -std::numeric_limits<float>::infinity();

// A candidate token: its logit, its score under the rule (rounded to f32, the type the
// all-reduce compares, so that a rank and the group rank candidates alike), its global id.
struct Candidate {
  float logit = kNone;
  float score = kNone;
  int64_t id = -1;
};

// Larger logit first, the lower id on a tie: the order that defines "the k largest".
bool by_logit(const Candidate& a, const Candidate& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// The winner of a list: the largest score, the lowest id on a tie.
Candidate best_score(const std::vector<Candidate>& cands) {
  Candidate best;
  for (const Candidate& c : cands)
    if (c.id >= 0 &&
        (best.id < 0 || c.score > best.score || (c.score == best.score && c.id < best.id)))
      best = c;
  return best;
}

// The largest score over the ranks and the lowest id that has it:
//   ① all-reduce MAX of the score; ② all-reduce MAX of −id where a rank's best equals it.
int64_t all_reduce_argmax(Communicator& comm, Device& dev, const Candidate& mine) {
  if (comm.size() == 1) return mine.id;
  Tensor score = Tensor::from_host(dev, Shape{1}, {mine.score});
  comm.all_reduce(score, ReduceOp::Max);  // ①
  const float top = score.to_host()[0];
  const bool mine_wins = mine.id >= 0 && mine.score == top;
  Tensor neg_id =
      Tensor::from_host(dev, Shape{1}, {mine_wins ? -static_cast<float>(mine.id) : kNone});
  comm.all_reduce(neg_id, ReduceOp::Max);  // ②
  return static_cast<int64_t>(-neg_id.to_host()[0]);
}

}  // namespace

double gumbel_noise(const RngKey& key, int64_t id) {
  // random_value's uniform is a multiple of 2^-24 in [0, 1); the half step keeps u inside (0, 1).
  const double u = random_value(key, id, Distribution::uniform(0.0f, 1.0f)) + 0.5 / 16777216.0;
  return -std::log(-std::log(u));
}

float sampling_score(float logit, int64_t id, const SamplingParams& params, const RngKey& key) {
  if (params.temperature <= 0.0f) return logit;
  return static_cast<float>(static_cast<double>(logit) / params.temperature +
                            gumbel_noise(key, id));
}

int32_t vocab_parallel_sample(Communicator& comm, const Tensor& logits, const VocabShard& shard,
                              const SamplingParams& params, const RngKey& key) {
  TP_CHECK(logits.rows() == 1, "vocab_parallel_sample: logits ", logits.shape().str(),
           " should be one row (1, V'/t)");
  TP_CHECK(params.temperature >= 0.0f && std::isfinite(params.temperature) && params.top_k >= 0,
           "vocab_parallel_sample: temperature ", params.temperature, " and top_k ", params.top_k,
           " must be ≥ 0");
  CommLedger::Scope scope(comm.ledger(), "sampling");
  const std::vector<float> row = logits.to_host();  // this rank's V'/t logits
  const int64_t real = std::clamp<int64_t>(shard.vocab - shard.first, 0, logits.cols());
  std::vector<Candidate> mine(static_cast<size_t>(real));
  for (int64_t j = 0; j < real; ++j)
    mine[j] = {row[j], sampling_score(row[j], shard.first + j, params, key), shard.first + j};

  const bool greedy = params.temperature <= 0.0f;
  if (greedy || params.top_k == 0 || params.top_k >= shard.vocab) {
    // The whole vocabulary takes part: the best of each rank, then the best of the ranks.
    const int64_t id = all_reduce_argmax(comm, logits.device(), best_score(mine));
    return static_cast<int32_t>(id);
  }

  // Top-k: my k largest logits (fewer when I hold fewer real ids; padded with id −1), gathered
  // from every rank as (logit, id) pairs: t·k candidates, among them the global k largest.
  const int64_t k = params.top_k, t = comm.size();
  const int64_t have = std::min<int64_t>(k, real);
  std::partial_sort(mine.begin(), mine.begin() + have, mine.end(), by_logit);
  std::vector<float> pairs(static_cast<size_t>(2 * k), kNone);
  for (int64_t i = 0; i < k; ++i) {
    pairs[2 * i] = i < have ? mine[i].logit : kNone;
    pairs[2 * i + 1] = i < have ? static_cast<float>(mine[i].id) : -1.0f;
  }
  std::vector<float> all = pairs;
  if (t > 1) {
    Tensor shard_pairs = Tensor::from_host(logits.device(), Shape{k, 2}, pairs);
    Tensor gathered(logits.device(), Shape{t * k, 2});
    comm.all_gather(shard_pairs, gathered);
    all = gathered.to_host();
  }
  std::vector<Candidate> cands;
  for (int64_t i = 0; i < t * k; ++i) {
    const int64_t id = static_cast<int64_t>(all[2 * i + 1]);
    if (id >= 0) cands.push_back({all[2 * i], kNone, id});
  }
  std::sort(cands.begin(), cands.end(), by_logit);  // the same order on every rank
  if (static_cast<int64_t>(cands.size()) > k) cands.resize(static_cast<size_t>(k));
  for (Candidate& c : cands) c.score = sampling_score(c.logit, c.id, params, key);
  return static_cast<int32_t>(best_score(cands).id);
}

}  // namespace tp
