// generate.h — text generation under tensor parallelism: prefill the prompt into every rank's
// key/value cache, then decode one token at a time, each chosen from the vocabulary-parallel
// logits without gathering them.
//
//   prefill:  the P prompt positions through the blocks at once (Gpt::forward_cached); each rank
//             caches k and v of its own heads; the head gives this rank's V'/t logits of the last
//             position.
//   decode:   choose a token (parallel/vocab_sampling.h: the same id on every rank, for every t),
//             then run that one position through the blocks against the cache; repeat.
//
// Per decoded token the collectives are those of training's forward on one row — one all-reduce
// of h floats for the embedding and two per block (attention, MLP) — plus the sampler's two
// all-reduces of one float (top-k: one all-gather of 2k floats) and the three one-float
// all-reduces that score the chosen token (its log-probability, for the perplexity report).
//
// When the cache is full (position table S) and more tokens are wanted, the last S/2 tokens are
// prefilled again into an empty cache (a sliding window; counted as prefill work). Every choice
// is keyed by (seed, index of the generated token), so a run is reproducible and the same for
// every t up to the rounding of the logits.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "model/gpt.h"
#include "parallel/vocab_sampling.h"

namespace tp {

struct GenerateOptions {
  int64_t tokens = 32;      ///< how many tokens to generate
  SamplingParams sampling;  ///< greedy, temperature, top-k
  uint64_t seed = 1234;     ///< keys the draws: token i uses RngKey::from(seed, "sample/<i>")
};

/// What a generation did and how long it took (seconds of wall time, the device synchronised).
struct GenerateStats {
  int64_t prompt_tokens = 0;   ///< prompt positions prefilled (after truncation to S)
  int64_t prompt_dropped = 0;  ///< prompt tokens dropped from the front: it was longer than S
  int64_t prefill_tokens = 0;  ///< positions prefilled, the prompt and every window refill
  double prefill_seconds = 0;  ///< time in those prefills
  int64_t decode_tokens = 0;   ///< tokens generated
  double decode_seconds = 0;   ///< time choosing them and running each through the blocks
  int64_t refills = 0;         ///< times the full cache was refilled with the last S/2 tokens
  double nll = 0;           ///< Σ −log p(token) of the generated tokens under the model (T = 1)
  int64_t cache_bytes = 0;  ///< this rank's key/value cache
};

/// Generates options.tokens tokens after `prompt` (at least one id). Calls on_token(id) on every
/// rank as each token is chosen. Returns the generated ids (the same on every rank). A collective:
/// every rank of `comm` calls it with the same arguments.
std::vector<int32_t> generate(Device& device, Communicator& comm, Gpt& model,
                              const std::vector<int32_t>& prompt, const GenerateOptions& options,
                              GenerateStats* stats = nullptr,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace tp
