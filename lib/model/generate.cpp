#include "model/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "observe/timer.h"
#include "parallel/vocab_parallel.h"

namespace tp {

namespace {

// −log p(id) under softmax(logits) of one position, from the split logits: the vocabulary-parallel
// cross-entropy with the chosen token as target (three all-reduces of one float).
double negative_log_prob(Device& device, Communicator& comm, const Tensor& logits,
                         const VocabShard& shard, int32_t id) {
  const Tensor target = Tensor::from_host(device, Shape{1}, {static_cast<float>(id)});
  return vocab_parallel_cross_entropy_forward(device, comm, logits, target, shard)
      .loss.to_host()[0];
}

}  // namespace

std::vector<int32_t> generate(Device& device, Communicator& comm, Gpt& model,
                              const std::vector<int32_t>& prompt, const GenerateOptions& options,
                              GenerateStats* stats, const std::function<void(int32_t)>& on_token) {
  TP_CHECK_INPUT(!prompt.empty(), "the prompt is empty; give at least one token");
  TP_CHECK_INPUT(options.tokens >= 0, "cannot generate ", options.tokens, " tokens");
  GenerateStats local;
  GenerateStats& st = stats ? *stats : local;
  st = GenerateStats{};
  const VocabShard shard{model.first_vocab_id(), model.config().vocab};
  KvCache cache = model.make_kv_cache(1);
  const int64_t S = cache.capacity;
  st.cache_bytes = cache.bytes();

  // The history of tokens, for refills; a prompt longer than the cache keeps its last S tokens.
  std::vector<int32_t> history(prompt.end() - std::min<int64_t>(S, prompt.size()), prompt.end());
  st.prompt_dropped = static_cast<int64_t>(prompt.size() - history.size());
  st.prompt_tokens = static_cast<int64_t>(history.size());

  auto prefill = [&](const std::vector<int32_t>& ids) {
    const double t0 = now();
    cache.length = 0;
    Tensor logits = model.forward_cached(ids, cache);  // (1, V'/t): the last position
    device.synchronize();
    st.prefill_seconds += now() - t0;
    st.prefill_tokens += static_cast<int64_t>(ids.size());
    return logits;
  };

  // 1. Prefill the prompt.
  Tensor logits = prefill(history);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < options.tokens; ++i) {
    // 2. Choose the next token from the split logits: the same id on every rank.
    double t0 = now();
    const RngKey key = RngKey::from(options.seed, "sample/" + std::to_string(i));
    const int32_t id = vocab_parallel_sample(comm, logits, shard, options.sampling, key);
    st.nll += negative_log_prob(device, comm, logits, shard, id);
    out.push_back(id);
    history.push_back(id);
    if (on_token) on_token(id);
    if (i + 1 == options.tokens) {
      st.decode_seconds += now() - t0;
      break;
    }
    // 3. Run it through the blocks against the cache; a full cache starts again from the last S/2.
    if (cache.length == S) {
      st.decode_seconds += now() - t0;
      ++st.refills;
      const int64_t keep = std::max<int64_t>(1, S / 2);
      logits = prefill(std::vector<int32_t>(history.end() - keep, history.end()));
      continue;
    }
    logits = model.forward_cached({id}, cache);
    device.synchronize();
    st.decode_seconds += now() - t0;
  }
  st.decode_tokens = static_cast<int64_t>(out.size());
  return out;
}

}  // namespace tp
