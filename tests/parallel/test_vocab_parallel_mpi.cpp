// test_vocab_parallel_mpi.cpp — the two units of lib/parallel/vocab_parallel.h at t = np against a
// single-device reference computed on the host in double:
//   VocabParallelEmbedding: the lookup (with and without sequence parallelism), the wte gradient,
//     the padding rows (zero, no gradient), its collectives, the ids it keeps, bad input;
//   vocab_parallel_cross_entropy_forward / _backward: the per-token loss and the three numbers it
//     is built from, the order of the stages and the collective each adds, and dlogits =
//     scale·(softmax − onehot) on this rank's columns with no collective (also in place).
// V = 11 pads at t = 2, 3, 4 (to 12, 12, 12); N = 12 tokens divide by every t.
// Runs under mpirun -np 1, 2, 3, 4 (t = np).
//
// Tolerance: relative error ‖got − want‖ / ‖want‖ ≤ 1e-6 (float against double: a lookup and a
// scatter-add of a few values, exp/log over 11 columns); 0 for lookups (copies plus zeros), the
// row max, the padding rows and columns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "core/host.h"
#include "expect_bad_input.h"
#include "observe/memory_ledger.h"
#include "parallel/param.h"
#include "parallel/vocab_parallel.h"
#include "test_util.h"

namespace {

using namespace tp;
using namespace tp::testing;  // test_util.h, model_test_helpers.h

constexpr double kTol = 1e-6;
constexpr int64_t kV = 11, kH = 5, kN = 12;
// Both ends of the vocabulary, repeats (their gradients add), in an order no rank owns as a block.
const std::vector<int32_t> kIds = {10, 0, 3, 3, 7, 10, 1, 5, 9, 2, 6, 3};

int64_t padded(int t) { return (kV + t - 1) / t * t; }
std::vector<float> as_float(const std::vector<int32_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

std::vector<CommRecord> since(size_t mark) {
  const auto& r = world().ledger().records();
  return std::vector<CommRecord>(r.begin() + static_cast<std::ptrdiff_t>(mark), r.end());
}

// ---- VocabParallelEmbedding ---------------------------------------------------------------------

class VocabEmbedding : public ::testing::TestWithParam<bool> {};  // sequence parallelism off / on

TEST_P(VocabEmbedding, LookupAndGradientMatchSingleDevice) {
  const bool sp = GetParam();
  const int t = world().size(), r = world().rank();
  VocabParallelEmbedding emb(device(), world(), "wte", kV, padded(t), kH, sp);
  ASSERT_EQ(emb.padded_vocab(), padded(t));
  ASSERT_EQ(emb.local_rows(), padded(t) / t);
  ASSERT_EQ(emb.first_id(), r * padded(t) / t);
  EXPECT_EQ(emb.padding_rows(), std::max<int64_t>(0, emb.first_id() + emb.local_rows() - kV));
  const VocabShard shard = emb.shard();
  EXPECT_EQ(shard.first, emb.first_id());
  EXPECT_EQ(shard.vocab, kV);

  const std::vector<float> table = random_vector("vocab.table", kV * kH);
  emb.load_global(table);
  MemoryLedger memory;
  emb.observe(&memory, -1);

  // The single-device lookup, its gradient for a random dE, both in double.
  const std::vector<float> dy = random_vector("vocab.dy", kN * kH);
  std::vector<float> want_e(kN * kH);
  std::vector<double> want_dw(kV * kH, 0.0);
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t c = 0; c < kH; ++c) {
      want_e[i * kH + c] = table[kIds[i] * kH + c];
      want_dw[kIds[i] * kH + c] += dy[i * kH + c];
    }

  const Tensor ids = Tensor::from_host(device(), Shape{kN}, as_float(kIds));
  const size_t mark = world().ledger().size();
  const Tensor e = emb.forward(ids);
  const size_t after_forward = world().ledger().size();
  // SP: this rank's N/t tokens of E and of dE; without: all of them.
  const int64_t n = sp ? kN / t : kN, row0 = sp ? r * n : 0;
  emb.backward(Tensor::from_host(device(), Shape{n, kH}, host_block(dy, kH, row0, n, 0, kH)));

  ParamList params;
  emb.collect_params(params, 0.02f);
  ASSERT_EQ(params.size(), 1u);
  const Param& p = params[0];
  const std::vector<float> dw_real = gather_real(world(), p, p.grad);  // collectives: last ones
  const std::vector<float> dw_all = gather_global(world(), p, p.grad);
  const std::vector<float> w_all = gather_global(world(), p, p.value);

  EXPECT_EQ(p.name, "wte.weight");
  EXPECT_EQ(p.shape, (Shape{padded(t), kH}));
  EXPECT_EQ(p.split, Split::Rows);
  EXPECT_EQ(p.offset, emb.first_id());
  EXPECT_EQ(p.ckpt_rows, kV);
  EXPECT_EQ(e.shape(), (Shape{n, kH}));
  EXPECT_EQ(e.to_host(), host_block(want_e, kH, row0, n, 0, kH))
      << "a lookup is copies and zeros: exact";
  EXPECT_LE(rel_error(dw_real, std::vector<float>(want_dw.begin(), want_dw.end())), kTol);
  const std::vector<float> pad_grad(dw_all.begin() + kV * kH, dw_all.end());
  const std::vector<float> pad_rows(w_all.begin() + kV * kH, w_all.end());
  EXPECT_EQ(pad_grad, std::vector<float>(pad_grad.size(), 0.0f)) << "padding rows get no gradient";
  EXPECT_EQ(pad_rows, std::vector<float>(pad_rows.size(), 0.0f)) << "padding rows hold zeros";

  // Forward: one all-reduce (SP: one reduce-scatter) of N·h (the backward's: the next test).
  const std::vector<CommRecord> fwd = since(mark);
  if (t == 1) {
    EXPECT_EQ(after_forward - mark, 0u);
  } else {
    ASSERT_EQ(after_forward - mark, 1u);
    EXPECT_EQ(fwd[0].op, sp ? "reduce_scatter" : "all_reduce");
    EXPECT_EQ(fwd[0].elements, kN * kH);
  }

  // What forward kept for backward: the ids, recorded once.
  ASSERT_EQ(memory.records().size(), 1u);
  EXPECT_EQ(memory.records()[0].name, "wte.ids");
  EXPECT_EQ(memory.records()[0].shape, (Shape{kN}));
}

TEST_P(VocabEmbedding, BackwardCommunicatesOnlyUnderSequenceParallelism) {
  const bool sp = GetParam();
  const int t = world().size();
  VocabParallelEmbedding emb(device(), world(), "wte", kV, padded(t), kH, sp);
  const Tensor ids = Tensor::from_host(device(), Shape{kN}, as_float(kIds));
  emb.forward(ids);
  const size_t mark = world().ledger().size();
  emb.backward(Tensor::zeros(device(), Shape{sp ? kN / t : kN, kH}));
  const std::vector<CommRecord> bwd = since(mark);
  if (!sp || t == 1) {
    EXPECT_TRUE(bwd.empty()) << bwd.size() << " collectives";
  } else {
    ASSERT_EQ(bwd.size(), 1u);
    EXPECT_EQ(bwd[0].op, "all_gather");
    EXPECT_EQ(bwd[0].elements, kN * kH);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabEmbedding, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
  return i.param ? "sp" : "nosp";
});

TEST(VocabEmbeddingInput, PaddedVocabularyMustBeAMultipleOfTAndCoverV) {
  const int t = world().size();
  auto make = [&](int64_t padded_vocab) {
    VocabParallelEmbedding(device(), world(), "wte", kV, padded_vocab, kH);
  };
  expect_bad_input([&] { make(kV - 1); }, "padded vocabulary",
                   "a padded vocabulary smaller than V");
  if (t > 1) {
    EXPECT_THROW(make(padded(t) + 1), Error);  // not a multiple of t
  }
  VocabParallelEmbedding ok(device(), world(), "wte", kV, padded(t) + 2 * t,
                            kH);  // more padding is fine
  EXPECT_EQ(ok.local_rows(), (padded(t) + 2 * t) / t);
}

TEST(VocabEmbeddingInput, ZeroPaddingClearsOnlyThePaddingRows) {
  const int t = world().size();
  VocabParallelEmbedding emb(device(), world(), "wte", kV, padded(t), kH);
  Tensor w = Tensor::from_host(device(), Shape{emb.local_rows(), kH},
                               std::vector<float>(emb.local_rows() * kH, 1.0f));
  emb.zero_padding(w);
  const std::vector<float> got = w.to_host();
  const int64_t real = emb.local_rows() - emb.padding_rows();
  for (int64_t i = 0; i < emb.local_rows(); ++i)
    EXPECT_EQ(got[i * kH], i < real ? 1.0f : 0.0f)
        << "row " << i << " (id " << emb.first_id() + i << ")";
}

// ---- vocab_parallel_cross_entropy ---------------------------------------------------------------

struct LossReference {
  std::vector<float> row_max, sum_exp, target_logit, loss,
      dlogits;  // dlogits: (N, V'), 0 on padding
};

// log-softmax cross-entropy over the V real columns, in double; dlogits scaled by `scale`.
LossReference loss_reference(const std::vector<float>& x, const std::vector<int32_t>& y, int64_t n,
                             int64_t vp, float scale) {
  LossReference ref;
  ref.dlogits.assign(static_cast<size_t>(n * vp), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    double m = -1e300, se = 0;
    for (int64_t j = 0; j < kV; ++j) m = std::max(m, static_cast<double>(x[i * kV + j]));
    for (int64_t j = 0; j < kV; ++j) se += std::exp(x[i * kV + j] - m);
    ref.row_max.push_back(static_cast<float>(m));
    ref.sum_exp.push_back(static_cast<float>(se));
    ref.target_logit.push_back(x[i * kV + y[i]]);
    ref.loss.push_back(static_cast<float>(std::log(se) + m - x[i * kV + y[i]]));
    for (int64_t j = 0; j < kV; ++j)
      ref.dlogits[i * vp + j] =
          static_cast<float>(scale * (std::exp(x[i * kV + j] - m) / se - (j == y[i] ? 1 : 0)));
  }
  return ref;
}

TEST(VocabCrossEntropy, LossStagesAndGradientMatchSingleDevice) {
  const int t = world().size(), r = world().rank();
  const int64_t n = 6, vp = padded(t), cols = vp / t, first = r * cols;
  const std::vector<int32_t> y = {0, 10, 4, 10, 7, 2};  // both ends of the vocabulary
  std::vector<float> x = random_vector("vocab.logits", n * kV);
  for (float& v : x) v *= 8.0f;  // far from uniform: the max matters
  const float scale = 1.0f / static_cast<float>(n);
  const LossReference ref = loss_reference(x, y, n, vp, scale);

  // My columns of the padded logits; the padding columns hold a huge value that must be skipped.
  std::vector<float> x_padded(n * vp, 1e4f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kV; ++j) x_padded[i * vp + j] = x[i * kV + j];
  const Tensor logits =
      Tensor::from_host(device(), Shape{n, cols}, host_block(x_padded, vp, 0, n, first, cols));
  const Tensor targets = Tensor::from_host(device(), Shape{n}, as_float(y));
  const VocabShard shard{first, kV};

  // The watcher sees the six stages in order, and the collectives issued so far at each.
  std::vector<CrossEntropyStage> stages;
  std::vector<size_t> collectives;
  std::vector<float> local_max;
  const size_t mark = world().ledger().size();
  const CrossEntropyStats st =
      vocab_parallel_cross_entropy_forward(device(), world(), logits, targets, shard,
                                           [&](CrossEntropyStage s, const CrossEntropyStats& now) {
    stages.push_back(s);
    collectives.push_back(world().ledger().size() - mark);
    if (s == CrossEntropyStage::LocalMax) local_max = now.row_max.to_host();
      });
  const std::vector<CommRecord> fwd = since(mark);

  Tensor dlogits(device(), logits.shape());
  const size_t bwd_mark = world().ledger().size();
  vocab_parallel_cross_entropy_backward(device(), dlogits, logits, targets, st, shard, scale);
  Tensor in_place = logits.clone();
  vocab_parallel_cross_entropy_backward(device(), in_place, in_place, targets, st, shard, scale);
  EXPECT_EQ(world().ledger().size(), bwd_mark) << "the backward communicates nothing";

  using S = CrossEntropyStage;
  EXPECT_EQ(stages, (std::vector<S>{S::LocalMax, S::Max, S::LocalSums, S::SumExp, S::TargetLogit,
                                    S::Loss}));
  const size_t k = t > 1 ? 1 : 0;
  EXPECT_EQ(collectives, (std::vector<size_t>{0, k, k, 2 * k, 3 * k, 3 * k}));
  ASSERT_EQ(fwd.size(), 3 * k);
  for (size_t i = 0; i < fwd.size(); ++i) {
    EXPECT_EQ(fwd[i].op, i == 0 ? "all_reduce_max" : "all_reduce");
    EXPECT_EQ(fwd[i].elements, n);
    EXPECT_EQ(fwd[i].label, "cross_entropy");
  }

  // Before its all-reduce the max covers my real columns only (−inf if I hold none).
  std::vector<float> want_local(n, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = first; j < std::min(first + cols, kV); ++j)
      want_local[i] = std::max(want_local[i], x[i * kV + j]);
  EXPECT_EQ(local_max, want_local);
  EXPECT_EQ(st.row_max.to_host(), ref.row_max);
  EXPECT_EQ(st.target_logit.to_host(), ref.target_logit) << "one rank's logit plus zeros: exact";
  EXPECT_LE(rel_error(st.sum_exp.to_host(), ref.sum_exp), kTol);
  EXPECT_LE(rel_error(st.loss.to_host(), ref.loss), kTol);
  const std::vector<float> want_d = host_block(ref.dlogits, vp, 0, n, first, cols);
  EXPECT_LE(rel_error(dlogits.to_host(), want_d), kTol);
  EXPECT_EQ(in_place.to_host(), dlogits.to_host()) << "in place equals out of place";
  const std::vector<float> got_d = dlogits.to_host();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c)
      if (first + c >= kV) {
        EXPECT_EQ(got_d[i * cols + c], 0.0f) << "padding column " << first + c;
      }
}

}  // namespace
