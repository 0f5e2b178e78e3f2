// test_kernels_embedding.cpp — the CPU embeddings (cpu_backend/kernels/embedding.cpp): the
// vocabulary-parallel token lookup (owned ids, shards summing to the whole, the backward) and the
// position embedding on a sequence shard, against references and finite differences
// (kernel_test_util.h), thread independence (serial).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

// ---- vocabulary-parallel embedding ------------------------------------------------------------

// out[i] = wte_shard[ids[i] − first] if owned, else 0 (wte_shard: (rows, h)).
Vec embedding_shard_ref(const std::vector<float>& ids, const Vec& wte_shard, int64_t first,
                        int64_t h) {
  const int64_t rows = static_cast<int64_t>(wte_shard.size()) / h;
  Vec out(ids.size() * h, 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = static_cast<int64_t>(ids[i]) - first;
    if (row < 0 || row >= rows) continue;
    for (int64_t c = 0; c < h; ++c) out[i * h + c] = wte_shard[row * h + c];
  }
  return out;
}

// Rows [r0, r0 + n) of a (·, h) matrix.
std::vector<float> row_slice(const std::vector<float>& m, int64_t r0, int64_t n, int64_t h) {
  return std::vector<float>(m.begin() + r0 * h, m.begin() + (r0 + n) * h);
}

// Token ids of V = 10 with repeats, both ends and every id at least once.
const std::vector<float> kVocabIds = {3, 0, 9, 3, 3, 1, 5, 0, 2, 9, 6, 4, 7, 8, 8, 4};

TEST(KernelEmbeddingShard, ForwardLooksUpOwnedIdsAndZerosTheRest) {
  const int64_t h = 5, first = 4,
                rows = 4;  // shard 1 of t = 3 over V = 10 padded to 12: ids [4, 8)
  const int64_t n = static_cast<int64_t>(kVocabIds.size());
  const auto wte = random_vector("es_wte", rows * h);
  Tensor Ids = on_device(Shape{n}, kVocabIds), Wte = on_device(Shape{rows, h}, wte);
  Tensor Out = filled(Shape{n, h}, kNaN);
  device().embedding_shard_forward(Out, Ids, Wte, first);
  const auto got = Out.to_host();
  EXPECT_EQ(got, to_f(embedding_shard_ref(kVocabIds, to_d(wte), first, h)));  // copies: exact
  int64_t owned = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool mine = kVocabIds[i] >= first && kVocabIds[i] < first + rows;
    owned += mine ? 1 : 0;
    for (int64_t c = 0; c < h && !mine; ++c)
      EXPECT_EQ(got[i * h + c], 0.0f) << "id " << kVocabIds[i] << " belongs to another shard";
  }
  EXPECT_EQ(owned, 5);  // 5, 6, 4, 7, 4: the case mixes owned and foreign ids

  Tensor fracIds = on_device(Shape{2}, {1.0f, 2.5f}), negIds = on_device(Shape{2}, {-1.0f, 2.0f});
  Tensor out2(device(), Shape{2, h});
  EXPECT_THROW(device().embedding_shard_forward(out2, fracIds, Wte, first), tp::Error);
  EXPECT_THROW(device().embedding_shard_forward(out2, negIds, Wte, first), tp::Error);
  Tensor wrongOut(device(), Shape{n, h + 1});
  EXPECT_THROW(device().embedding_shard_forward(wrongOut, Ids, Wte, first), tp::Error);
}

TEST(KernelEmbeddingShard, ShardsSumToTheFullLookup) {
  const int64_t V = 10, h = 6;
  const int64_t n = static_cast<int64_t>(kVocabIds.size());
  Tensor Ids = on_device(Shape{n}, kVocabIds);
  for (int64_t t = 1; t <= 4; ++t) {
    const int64_t Vp = padded_vocab(V, t), rows = Vp / t;
    const auto wte = random_vector("es_sum_wte" + std::to_string(t), Vp * h);  // padded rows too
    std::vector<float> sum(n * h, 0.0f);
    for (int64_t p = 0; p < t; ++p) {
      Tensor Wte = on_device(Shape{rows, h}, row_slice(wte, p * rows, rows, h));
      Tensor Out = filled(Shape{n, h}, kNaN);
      device().embedding_shard_forward(Out, Ids, Wte, p * rows);
      const auto o = Out.to_host();
      for (int64_t i = 0; i < n * h; ++i) sum[i] += o[i];
    }
    std::vector<float> want(n * h);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < h; ++c)
        want[i * h + c] = wte[static_cast<int64_t>(kVocabIds[i]) * h + c];
    EXPECT_EQ(sum, want) << "t=" << t;  // x + 0 + … + 0 is exact: one shard owns each id
  }
}

TEST(KernelEmbeddingShard, BackwardMatchesReferenceAndFiniteDifferencesAndAccumulates) {
  const int64_t h = 5, first = 3, rows = 4;  // ids [3, 7) of V = 10
  const int64_t n = static_cast<int64_t>(kVocabIds.size());
  const Vec wte = to_d(random_vector("esb_wte", rows * h));
  const Vec R = to_d(random_vector("esb_R", n * h));
  Tensor Ids = on_device(Shape{n}, kVocabIds), dOut = on_device(Shape{n, h}, to_f(R));
  Tensor dWte = filled(Shape{rows, h}, 0.0f);
  device().embedding_shard_backward(dWte, dOut, Ids, first);
  const auto g = dWte.to_host();

  Vec want(rows * h, 0.0);  // the definition: owned rows only
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(kVocabIds[i]) - first;
    if (row >= 0 && row < rows)
      for (int64_t c = 0; c < h; ++c) want[row * h + c] += R[i * h + c];
  }
  EXPECT_LE(rel_error(g, to_f(want)), kForwardTol);
  const Vec fd =
      fd_grad([&](const Vec& x) { return embedding_shard_ref(kVocabIds, x, first, h); }, wte, R);
  EXPECT_LE(rel_error(g, to_f(fd)), kGradTol);

  // A second call accumulates (not bit-exactly 2x: rows are added one by one into dW).
  device().embedding_shard_backward(dWte, dOut, Ids, first);
  std::vector<float> twice = g;
  for (float& x : twice) x *= 2;
  EXPECT_LE(rel_error(dWte.to_host(), twice), 1e-6);

  // A shard that owns none of the ids leaves its gradient alone.
  Tensor dNone = filled(Shape{2, h}, 0.5f);
  device().embedding_shard_backward(dNone, dOut, Ids, 10);  // ids [10, 12): padding
  for (float x : dNone.to_host()) EXPECT_EQ(x, 0.5f);
}

TEST(KernelEmbeddingShard, BackwardIsThreadIndependent) {
  const int64_t n = 512, V = 10, h = 96, first = 3,
                rows = 5;  // 49152 elements, 512 ids into 5 rows
  std::vector<float> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<float>((i * 7 + i / 5) % V);
  Tensor Ids = on_device(Shape{n}, ids);
  Tensor dOut = on_device(Shape{n, h}, random_vector("esb_thr", n * h));
  std::vector<float> got[2];
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor dWte = filled(Shape{rows, h}, 0.0f);
      device().embedding_shard_backward(dWte, dOut, Ids, first);
      got[t - 1] = dWte.to_host();
    });
  EXPECT_EQ(got[0], got[1]);
}

// x[r] + wpe[(row0 + r) / B] for the global rows [row0, row0 + rows) (x: (rows, h)).
Vec position_ref(const Vec& x, const Vec& wpe, int64_t batch, int64_t row0, int64_t h) {
  Vec y = x;
  const int64_t rows = static_cast<int64_t>(x.size()) / h;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < h; ++c) y[r * h + c] += wpe[((row0 + r) / batch) * h + c];
  return y;
}

TEST(KernelPosition, ForwardAndBackwardOnASequenceShardMatchReference) {
  const int64_t B = 3, h = 4, P = 7, rows = 8;
  // row0 = 6: the shard of positions [2, 4] of a sequence split; row0 = 5: starts mid-position.
  for (int64_t row0 : {int64_t{6}, int64_t{5}}) {
    const std::string tag = "row0=" + std::to_string(row0);
    const auto x = random_vector("pos_x" + tag, rows * h), wpe = random_vector("pos_wpe", P * h);
    Tensor X = on_device(Shape{rows, h}, x), Wpe = on_device(Shape{P, h}, wpe);
    device().position_forward(X, Wpe, B, row0);
    std::vector<float> want(rows * h);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < h; ++c)
        want[r * h + c] = x[r * h + c] + wpe[((row0 + r) / B) * h + c];
    EXPECT_EQ(X.to_host(), want) << tag;  // one float add per element, the same one

    const Vec R = to_d(random_vector("pos_R" + tag, rows * h));
    Tensor dX = on_device(Shape{rows, h}, to_f(R)), dWpe = filled(Shape{P, h}, 0.0f);
    device().position_backward(dWpe, dX, B, row0);
    const auto g = dWpe.to_host();
    const Vec xd = to_d(x);
    const Vec fd =
        fd_grad([&](const Vec& w) { return position_ref(xd, w, B, row0, h); }, to_d(wpe), R);
    EXPECT_LE(rel_error(g, to_f(fd)), kGradTol) << tag;
    const int64_t s0 = row0 / B, s1 = (row0 + rows - 1) / B;  // positions held
    for (int64_t s = 0; s < P; ++s) {
      if (s >= s0 && s <= s1) continue;
      for (int64_t c = 0; c < h; ++c) EXPECT_EQ(g[s * h + c], 0.0f) << tag << " position " << s;
    }

    device().position_backward(dWpe, dX, B, row0);  // accumulates
    std::vector<float> twice = g;
    for (float& v : twice) v *= 2;
    EXPECT_LE(rel_error(dWpe.to_host(), twice), 1e-6) << tag;
  }
  Tensor X(device(), Shape{rows, h}), shortWpe(device(), Shape{4, h});  // rows [6, 14) need 5
  EXPECT_THROW(device().position_forward(X, shortWpe, B, 6), tp::Error);
  EXPECT_THROW(device().position_backward(shortWpe, X, B, 6), tp::Error);
  Tensor Wpe(device(), Shape{P, h});
  EXPECT_THROW(device().position_forward(X, Wpe, 0, 6), tp::Error);
}

TEST(KernelPosition, BackwardIsThreadIndependent) {
  const int64_t B = 4, h = 96, rows = 512, row0 = 64, P = (row0 + rows) / B;
  Tensor dX = on_device(Shape{rows, h}, random_vector("pos_thr", rows * h));
  std::vector<float> got[2];
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor dWpe = filled(Shape{P, h}, 0.0f);
      device().position_backward(dWpe, dX, B, row0);
      got[t - 1] = dWpe.to_host();
    });
  EXPECT_EQ(got[0], got[1]);
}

}  // namespace
