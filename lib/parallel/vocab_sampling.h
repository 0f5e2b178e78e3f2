// vocab_sampling.h — choosing the next token from logits split by vocabulary columns, with no
// rank holding all V logits: every rank ends with the same token, and the choice is the same for
// every t (it depends on the logits and global token ids only, never on the split).
//
// Rank r holds the logits of ids [r·V'/t, (r+1)·V'/t) (parallel/vocab_parallel.h); ids ≥ V are
// padding and never chosen. Three rules, each a max over the ranks of a per-rank candidate:
//
//   greedy (temperature 0):  argmax_j x_j                      the lowest id wins a tie
//   sampling (temperature T): argmax_j (x_j / T + G_j)          Gumbel-max: the winner is a draw
//                                                               from softmax(x / T)
//   top-k (k > 0):            the same over the k largest x_j only
//
// G_j = −log(−log u_j) with u_j uniform in (0, 1) from the counter-based RNG keyed by (the
// draw's key, global id j) (core/rng.h), so each rank makes the noise of its own ids and a token
// gets the same noise whichever rank owns it. The Gumbel-max trick: the argmax of x_j/T + G_j is
// distributed as softmax(x/T) — no normalisation, so no Σ exp over the vocabulary is needed.
//
// Communication (labelled "sampling" in the CommLedger; none at t = 1):
//   greedy and sampling: ① all-reduce MAX of the best score (one float); ② all-reduce MAX of
//                        −id over the ranks whose best equals it (one float: the lowest id)
//   top-k:               one all-gather of each rank's k best (logit, id) pairs (2k floats per
//                        rank, never the vocabulary); every rank then picks the same k of the
//                        t·k and draws among them locally
//
// Shape legend: V' = padded vocabulary, t = comm.size().
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace tp {

/// How the next token is chosen.
struct SamplingParams {
  float temperature = 0.0f;  ///< 0: greedy (argmax); > 0: divide the logits by it and sample
  int64_t top_k = 0;         ///< > 0: only the k most likely tokens take part; 0: all V
};

/// Gumbel noise of token `id` in the draw keyed by `key`: −log(−log u), u in (0, 1) from (key, id).
double gumbel_noise(const RngKey& key, int64_t id);

/// The score the rule maximises for a token of logit x: x when greedy, x / T + G_id otherwise
/// (computed in f64, rounded to f32: the type the all-reduce compares).
float sampling_score(float logit, int64_t id, const SamplingParams& params, const RngKey& key);

/// Chooses one token from the logits of one position split by vocabulary columns: this rank's
/// `logits` (1, V'/t), the columns of global ids [shard.first, …), real below shard.vocab. `key`
/// keys the draw (e.g. RngKey::from(seed, "sample/<position>")). Returns the same global id on
/// every rank; a collective, every rank of `comm` must call it.
int32_t vocab_parallel_sample(Communicator& comm, const Tensor& logits, const VocabShard& shard,
                              const SamplingParams& params, const RngKey& key);

}  // namespace tp
