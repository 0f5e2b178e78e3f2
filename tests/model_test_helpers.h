// model_test_helpers.h — what the model tests (test_model_mpi.cpp, test_sp_vocab_mpi.cpp) share: the
// tolerances, the t = np against t = 1 comparisons of parameters and gradients, the Markov batch
// and a training loop over tp::train_step.
//
// Comparisons go through gather_real: the vocabulary-parallel wte / lm_head of a t = np model hold
// V' = GptConfig::padded_vocab(t) rows, of which the first V are real; a t = 1 model with
// pad_vocab_multiple = 1 has V' = V, so the real rows are what it holds.
//
// Collectives: gather_real / gather_global are all-gathers for split parameters; every helper
// calls them for every parameter in ParamList order on every rank, and uses only EXPECT_* after
// the first one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/comm_ledger.h"
#include "core/communicator.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model/train.h"
#include "parallel/param.h"
#include "test_util.h"

namespace tp::testing {

constexpr double kTol = 1e-5;      // one forward/backward in fp32, split sums reordered over t
constexpr double kLossTol = 1e-6;  // the mean loss of one step
constexpr uint64_t kSeed = 77;

// The model shapes the tests share are named in lib/model/presets.h: tp::tiny_gpt (L, h = 24,
// S = 12), tp::small_gpt (L = 2, h = 48, S given), tp::mini_gpt (L = 1, h = 16, S = 4).

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The bias of the attention keys has zero gradient in exact arithmetic: it adds q·b_k to every
// score of a query row, and softmax ignores a constant added to a row. In fp32 its gradient is
// rounding noise, so it is compared to the scale of the other attention-bias gradients instead.
inline bool is_key_bias(const std::string& name) { return ends_with(name, ".k.bias"); }

inline double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// A t = 1 global tensor (real rows only) extended by zero rows to p's padded global shape.
inline std::vector<float> with_padding_rows(const Param& p, std::vector<float> real) {
  real.resize(static_cast<size_t>(p.rows() * p.cols()), 0.0f);
  return real;
}

// Every parameter of the t = np module holds its shard of the t = 1 module's weights, bit for bit
// (counter-based initialisation); vocabulary padding rows are zero. Local: no communication.
inline void expect_same_init(const ParamList& got, const ParamList& want) {
  ASSERT_EQ(got.size(), want.size());  // before any collective of the caller
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].value.to_host(),
              shard_of(got[i], with_padding_rows(got[i], want[i].value.to_host()), world().size()))
        << got[i].name;
  }
}

// Every gathered global gradient (real rows) of the t = np module against the t = 1 gradient of
// the same name. Collective: one all-gather per split parameter, in the same order on every rank.
inline void expect_grads_match(const ParamList& got, const ParamList& want, double tol,
                               bool some_split = true) {
  EXPECT_EQ(got.size(), want.size());
  std::map<std::string, const Param*> ref;
  for (const Param& p : want) ref[p.name] = &p;
  // ‖grad‖ of the largest q / v bias: the scale the key-bias noise is measured by.
  double bias_scale = 0;
  for (const Param& p : want)
    if (ends_with(p.name, ".q.bias") || ends_with(p.name, ".v.bias"))
      bias_scale = std::max(bias_scale, norm2(p.grad.to_host()));
  int split = 0;
  for (const Param& p : got) {
    const std::vector<float> g = gather_real(world(), p, p.grad);  // collective for split params
    split += p.split != Split::Replicated;
    const auto it = ref.find(p.name);
    if (it == ref.end()) {
      ADD_FAILURE() << p.name << " has no t = 1 counterpart";
      continue;
    }
    const std::vector<float> w = it->second->grad.to_host();
    EXPECT_EQ(g.size(), w.size()) << p.name;
    if (is_key_bias(p.name)) {
      // Zero up to fp32 noise on both sides (see is_key_bias).
      EXPECT_LE(norm2(g), 1e-5 * bias_scale) << p.name;
      EXPECT_LE(norm2(w), 1e-5 * bias_scale) << p.name;
      continue;
    }
    EXPECT_GT(norm2(w), 0.0) << p.name << ": a zero gradient tests nothing";
    EXPECT_LE(rel_error(g, w), tol) << p.name;
  }
  if (some_split && world().size() > 1) {
    EXPECT_GT(split, 0) << "nothing is split at t > 1";
  }
}

// ids and targets from the Markov source: the same on every rank.
inline Batch markov_batch(int64_t vocab, int64_t step, int64_t batch, int64_t seq) {
  return MarkovSource(vocab, kSeed).batch(step, batch, seq);
}

// A model and its optimizer, trained with tp::train_step (zero_grad → forward → backward →
// finish_gradients → global norm → clip → AdamW), the loop of tp_train.
struct Trainer {
  Gpt model;
  AdamW opt;
  Communicator& comm;
  float clip;
  Trainer(Communicator& c, const GptConfig& cfg, const AdamWParams& hp, float clip_norm,
          uint64_t seed)
      : model(device(), c, cfg), opt(device(), model.params(), hp), comm(c), clip(clip_norm) {
    model.init(seed);
  }
  // One training step on batch `step` of `data`; returns the loss.
  float step(const TokenSource& data, int64_t step, int64_t batch) {
    const Batch b = data.batch(step, batch, model.config().seq);
    return train_step(comm, device(), model, opt, b, kSeed, step, opt.hyper().lr, clip).loss;
  }
};

// One collective a step should issue: op, elements of the logical buffer (for an all-gather the
// gathered buffer, for a reduce-scatter the buffer before scattering) and the exact ledger label.
struct ExpectedCollective {
  std::string op;
  int64_t elements;
  std::string label;
};

// The ring-model bytes one rank sends, written out independently of lib/core/comm_ledger.cpp:
// all-reduce (sum or max) 2(t − 1)/t · 4N, all-gather and reduce-scatter (t − 1)/t · 4N.
inline double expected_wire_bytes(const std::string& op, int t, int64_t elements) {
  const double share = static_cast<double>(t - 1) / t, bytes = 4.0 * static_cast<double>(elements);
  return (op == "all_reduce" || op == "all_reduce_max" ? 2.0 : 1.0) * share * bytes;
}

// rec (this rank's ledger records of one step) against want, record by record. Local: call it
// after the last collective of the step.
inline void expect_collectives(const std::vector<CommRecord>& rec,
                               const std::vector<ExpectedCollective>& want, int t) {
  ASSERT_EQ(rec.size(), want.size());
  for (size_t i = 0; i < rec.size(); ++i) {
    const CommRecord& r = rec[i];
    const ExpectedCollective& w = want[i];
    EXPECT_EQ(r.op, w.op) << "record " << i << " (" << w.label << ")";
    EXPECT_EQ(r.group_size, t) << i;
    EXPECT_EQ(r.elements, w.elements) << "record " << i << " (" << w.label << ")";
    EXPECT_EQ(r.bytes, 4 * w.elements) << i;
    EXPECT_DOUBLE_EQ(r.wire_bytes, expected_wire_bytes(w.op, t, w.elements)) << i;
    EXPECT_FALSE(r.async) << i;
    EXPECT_EQ(r.label, w.label) << "record " << i;
  }
}

}  // namespace tp::testing
