// test_lse_merge.cpp — the host log-sum-exp merge (lib/parallel/lse_merge.h), lesson 08d's reference
// and exercise 12's solution: equal to Device::attention_merge on random operands; two halves of
// the keys merged equal attention over all of them (B = 2 and grouped-query heads, so that every
// index of the layouts matters); a side that saw no key (lse = −inf) leaves the other; two equal
// sides average; wrong sizes are refused (serial).
//
// Tolerance: relative 1e-6 (the host merges in double, the kernel in float).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "parallel/lse_merge.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::random_vector;

constexpr double kTol = 1e-6;

TEST(LseMerge, EqualsTheDeviceMerge) {
  const AttentionShape sh{5, 2, 3, 3, 4, 0.5f};
  const int64_t outs = sh.seq * sh.batch * sh.heads * sh.head_dim,
                rows = sh.batch * sh.heads * sh.seq;
  std::vector<float> out = random_vector("merge.out", outs),
                     part = random_vector("merge.part", outs),
                     lse = random_vector("merge.lse", rows),
                     lse_part = random_vector("merge.lp", rows);
  for (float& x : lse_part) x *= 3;  // weights far from ½
  Tensor o = Tensor::from_host(device(), Shape{sh.seq * sh.batch, sh.heads * sh.head_dim}, out),
         l = Tensor::from_host(device(), Shape{sh.batch, sh.heads, sh.seq}, lse);
  device().attention_merge(o, l, Tensor::from_host(device(), o.shape(), part),
                           Tensor::from_host(device(), l.shape(), lse_part), sh);
  lse_merge_rows(out, lse, part, lse_part, sh);
  EXPECT_LE(rel_error(out, o.to_host()), kTol);
  EXPECT_LE(rel_error(lse, l.to_host()), kTol);
}

TEST(LseMerge, TwoHalvesOfTheKeysAreTheWholeAttention) {
  const int64_t S = 6, B = 2, nh = 4, nkv = 2, hd = 3, half = S / 2;
  const AttentionShape whole{S, B, nh, nkv, hd, 0.7f};
  const auto T = [](const Shape& s, const std::vector<float>& x) {
    return Tensor::from_host(device(), s, x);
  };
  const std::vector<float> q = random_vector("halves.q", S * B * nh * hd),
                           k = random_vector("halves.k", S * B * nkv * hd),
                           v = random_vector("halves.v", S * B * nkv * hd);
  Tensor Q = T(Shape{S * B, nh * hd}, q), K = T(Shape{S * B, nkv * hd}, k),
         V = T(Shape{S * B, nkv * hd}, v);
  Tensor O(device(), Q.shape()), L(device(), Shape{B, nh, S});
  device().attention_forward(O, L, Q, K, V, whole);
  // The queries of the second half against each half of the keys (rows half·B … S·B).
  const Tensor Q2 = Q.view(half * B, S * B);
  std::vector<float> outs[2], lses[2];
  for (int h = 0; h < 2; ++h) {
    AttentionShape sh = whole;
    sh.seq = half, sh.kv_seq = half, sh.past = half - h * half;  // Full, then Diagonal
    Tensor o(device(), Q2.shape()), l(device(), Shape{B, nh, half});
    device().attention_forward(o, l, Q2, K.view(h * half * B, (h + 1) * half * B),
                               V.view(h * half * B, (h + 1) * half * B), sh);
    outs[h] = o.to_host(), lses[h] = l.to_host();
  }
  AttentionShape sh = whole;
  sh.seq = half;
  std::vector<float> added = outs[0];  // without the weights: the merge's reason to exist
  for (size_t i = 0; i < added.size(); ++i) added[i] += outs[1][i];
  lse_merge_rows(outs[0], lses[0], outs[1], lses[1], sh);
  const auto O_all = O.view(half * B, S * B).to_host(), L_all = L.to_host();
  std::vector<float> want_lse;
  for (int64_t bj = 0; bj < B * nh; ++bj)
    for (int64_t s = half; s < S; ++s) want_lse.push_back(L_all[bj * S + s]);
  EXPECT_LE(rel_error(outs[0], O_all), 1e-5);
  EXPECT_LE(rel_error(lses[0], want_lse), 1e-5);
  EXPECT_GT(rel_error(added, O_all), 1e-2);
}

TEST(LseMerge, AnEmptySideLeavesTheOtherAndEqualSidesAverage) {
  const AttentionShape sh{1, 1, 1, 1, 2, 1.0f};
  std::vector<float> out{1.0f, 2.0f}, lse{0.5f};
  lse_merge_rows(out, lse, {7.0f, 9.0f}, {-INFINITY}, sh);
  EXPECT_EQ(out, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(lse, (std::vector<float>{0.5f}));
  lse_merge_rows(out, lse, {3.0f, 4.0f}, {0.5f}, sh);
  EXPECT_EQ(out, (std::vector<float>{2.0f, 3.0f}));
  EXPECT_NEAR(lse[0], 0.5 + std::log(2.0), 1e-6);
  std::vector<float> none{5.0f, 6.0f}, none_lse{-INFINITY};
  lse_merge_rows(none, none_lse, {7.0f, 9.0f}, {-INFINITY}, sh);
  EXPECT_EQ(none, (std::vector<float>{5.0f, 6.0f}));
}

TEST(LseMerge, RefusesWrongSizes) {
  const AttentionShape sh{2, 1, 1, 1, 2, 1.0f};
  std::vector<float> out(4), lse(2);
  EXPECT_THROW(lse_merge_rows(out, lse, std::vector<float>(3), {0.0f, 0.0f}, sh), Error);
  EXPECT_THROW(lse_merge_rows(out, lse, std::vector<float>(4), {0.0f}, sh), Error);
}

}  // namespace
