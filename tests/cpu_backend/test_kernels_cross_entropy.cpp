// test_kernels_cross_entropy.cpp — the CPU vocabulary-parallel loss
// (cpu_backend/kernels/cross_entropy.cpp): the pieces over t shards give the full cross-entropy and
// softmax − one-hot, padding takes no part, large logits stay finite, bad targets are errors,
// thread independence (serial).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

// ---- double reference -------------------------------------------------------------------------

// loss[r] = −log softmax(logits[r])[target]
Vec cross_entropy_ref(const Vec& logits, const std::vector<float>& targets, int64_t V) {
  Vec loss(targets.size());
  for (size_t r = 0; r < targets.size(); ++r) {
    double mx = -1e300, sum = 0;
    for (int64_t c = 0; c < V; ++c) mx = std::max(mx, logits[r * V + c]);
    for (int64_t c = 0; c < V; ++c) sum += std::exp(logits[r * V + c] - mx);
    loss[r] = mx + std::log(sum) - logits[r * V + static_cast<int64_t>(targets[r])];
  }
  return loss;
}

// ---- vocabulary-parallel loss -----------------------------------------------------------------

// The (N, V) logits split over t shards of a vocabulary padded to Vp: shard p gets the columns
// [p·Vp/t, (p + 1)·Vp/t), the padded ones filled with a huge value that must take no part.
struct VocabSplit {
  int64_t n, V, t, cols;
  std::vector<Tensor> logits;  // (n, cols) each
  VocabSplit(const std::vector<float>& full, int64_t n_, int64_t V_, int64_t t_, float pad = 1e4f)
      : n(n_), V(V_), t(t_), cols(padded_vocab(V_, t_) / t_) {
    for (int64_t p = 0; p < t; ++p) {
      std::vector<float> s(n * cols);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t id = p * cols + j;
          s[i * cols + j] = id < V ? full[i * V + id] : pad;
        }
      logits.push_back(on_device(Shape{n, cols}, s));
    }
  }
  tp::VocabShard shard(int64_t p) const { return {p * cols, V}; }
};

// What the forward does across shards, with the all-reduces done on the host: max of the row
// maxima; then Σ of sum_exp (each shard using the global max) and Σ of target_logit.
struct VocabForward {
  Tensor row_max, sum_exp, target_logit, loss;
};

VocabForward vocab_forward(const VocabSplit& sp, const Tensor& targets) {
  const int64_t n = sp.n;
  std::vector<float> mx(n, -INFINITY), se(n, 0.0f), tl(n, 0.0f);
  for (int64_t p = 0; p < sp.t; ++p) {
    Tensor m = filled(Shape{n}, kNaN);
    device().vocab_max(m, sp.logits[p], sp.shard(p));
    const auto mh = m.to_host();
    for (int64_t i = 0; i < n; ++i) mx[i] = std::max(mx[i], mh[i]);
  }
  VocabForward f;
  f.row_max = on_device(Shape{n}, mx);
  for (int64_t p = 0; p < sp.t; ++p) {
    Tensor s = filled(Shape{n}, kNaN), y = filled(Shape{n}, kNaN);
    device().vocab_sum_exp_target(s, y, sp.logits[p], f.row_max, targets, sp.shard(p));
    const auto sh = s.to_host(), yh = y.to_host();
    for (int64_t i = 0; i < n; ++i) {
      se[i] += sh[i];
      tl[i] += yh[i];
    }
  }
  f.sum_exp = on_device(Shape{n}, se);
  f.target_logit = on_device(Shape{n}, tl);
  f.loss = filled(Shape{n}, kNaN);
  device().vocab_loss(f.loss, f.row_max, f.sum_exp, f.target_logit);
  return f;
}

// scale · (softmax(logits[r]) − onehot(target)), in double.
Vec softmax_grad_ref(const Vec& logits, const std::vector<float>& targets, int64_t V,
                     double scale) {
  Vec d(logits.size());
  for (size_t r = 0; r < targets.size(); ++r) {
    double mx = -1e300, sum = 0;
    for (int64_t c = 0; c < V; ++c) mx = std::max(mx, logits[r * V + c]);
    for (int64_t c = 0; c < V; ++c) sum += std::exp(logits[r * V + c] - mx);
    for (int64_t c = 0; c < V; ++c)
      d[r * V + c] = scale * (std::exp(logits[r * V + c] - mx) / sum -
                              (c == static_cast<int64_t>(targets[r]) ? 1.0 : 0.0));
  }
  return d;
}

constexpr int64_t kVocabN = 5, kVocabV = 10;
const std::vector<float> kVocabTargets = {2, 0, 9, 2, 7};  // both ends of the vocabulary

TEST(KernelVocabLoss, ShardedLossEqualsFullCrossEntropy) {
  const int64_t n = kVocabN, V = kVocabV;
  const auto logits = random_scaled("vl_logits", n * V, 3.0f);
  const Vec want = cross_entropy_ref(to_d(logits), kVocabTargets, V);
  Tensor T = on_device(Shape{n}, kVocabTargets);
  for (int64_t t = 1; t <= 4; ++t) {
    VocabSplit sp(logits, n, V, t);
    VocabForward f = vocab_forward(sp, T);
    // float sums of e^(x − m) and one log: ~1e-7 relative; a padded 1e4 counted would be off by ~1e4.
    EXPECT_LE(rel_error(f.loss.to_host(), to_f(want)), 1e-6) << "t=" << t;
  }
}

TEST(KernelVocabLoss, ConcatenatedGradientIsSoftmaxMinusOneHotAndZeroOnPadding) {
  const int64_t n = kVocabN, V = kVocabV;
  const float scale = 1.0f / n;  // the mean loss
  const auto logits = random_scaled("vl_logits", n * V, 3.0f);
  const Vec want = softmax_grad_ref(to_d(logits), kVocabTargets, V, scale);
  // ∂(scale · Σ_r loss[r]) / ∂logits by central differences of the double cross-entropy.
  const Vec fd = fd_grad([&](const Vec& x) { return cross_entropy_ref(x, kVocabTargets, V); },
                         to_d(logits), Vec(n, scale));
  EXPECT_LE(rel_error(to_f(fd), to_f(want)), kGradTol);  // the reference itself is the gradient
  Tensor T = on_device(Shape{n}, kVocabTargets);
  for (int64_t t = 1; t <= 4; ++t) {
    VocabSplit sp(logits, n, V, t);
    VocabForward f = vocab_forward(sp, T);
    std::vector<float> got(n * V, kNaN);
    for (int64_t p = 0; p < t; ++p) {
      Tensor d = filled(Shape{n, sp.cols}, kNaN);
      device().vocab_softmax_backward(d, sp.logits[p], f.row_max, f.sum_exp, T, sp.shard(p), scale);
      const auto dh = d.to_host();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < sp.cols; ++j) {
          const int64_t id = p * sp.cols + j;
          if (id < V) {
            got[i * V + id] = dh[i * sp.cols + j];
          } else {
            EXPECT_EQ(dh[i * sp.cols + j], 0.0f) << "t=" << t << " padded id " << id;
          }
        }
    }
    EXPECT_LE(rel_error(got, to_f(want)), 1e-6) << "t=" << t;  // float rounding of p and scale·
    EXPECT_LE(rel_error(got, to_f(fd)), kGradTol) << "t=" << t;
  }
}

TEST(KernelVocabLoss, GradientMayAliasLogits) {
  const int64_t n = kVocabN, V = kVocabV, t = 3;
  const auto logits = random_scaled("vl_logits", n * V, 3.0f);
  Tensor T = on_device(Shape{n}, kVocabTargets);
  VocabSplit sp(logits, n, V, t);
  VocabForward f = vocab_forward(sp, T);
  for (int64_t p = 0; p < t; ++p) {
    Tensor d(device(), Shape{n, sp.cols});
    device().vocab_softmax_backward(d, sp.logits[p], f.row_max, f.sum_exp, T, sp.shard(p), 0.2f);
    Tensor inplace = on_device(Shape{n, sp.cols}, sp.logits[p].to_host());
    device().vocab_softmax_backward(inplace, inplace, f.row_max, f.sum_exp, T, sp.shard(p), 0.2f);
    EXPECT_EQ(inplace.to_host(), d.to_host()) << "shard " << p;
  }
}

TEST(KernelVocabLoss, AShardOfOnlyPaddingContributesNothing) {
  // V = 2 over t = 4 shards of one column: shards 2 and 3 hold padding only.
  const int64_t n = 2, V = 2, t = 4;
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 3.0f};
  const std::vector<float> targets = {1, 0};
  Tensor T = on_device(Shape{n}, targets);
  VocabSplit sp(logits, n, V, t);
  Tensor m(device(), Shape{n});
  device().vocab_max(m, sp.logits[3], sp.shard(3));
  for (float x : m.to_host()) EXPECT_EQ(x, -INFINITY);
  VocabForward f = vocab_forward(sp, T);
  EXPECT_LE(rel_error(f.loss.to_host(), to_f(cross_entropy_ref(to_d(logits), targets, V))), 1e-6);
  Tensor s(device(), Shape{n}), y(device(), Shape{n}), d = filled(Shape{n, 1}, kNaN);
  device().vocab_sum_exp_target(s, y, sp.logits[2], f.row_max, T, sp.shard(2));
  device().vocab_softmax_backward(d, sp.logits[2], f.row_max, f.sum_exp, T, sp.shard(2), 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(s.to_host()[i], 0.0f);
    EXPECT_EQ(y.to_host()[i], 0.0f);
    EXPECT_EQ(d.to_host()[i], 0.0f);
  }
}

TEST(KernelVocabLoss, LargeLogitsStayFinite) {
  const int64_t n = 2, V = 5, t = 2;  // Vp = 6: shard 1 holds ids 3, 4 and one padded column
  const std::vector<float> logits = {1e4f,  1e4f - 1, 1e4f - 3, -1e4f, 1e4f - 0.5f,
                                     -1e4f, 2e4f,     0,        1e4f,  2e4f - 2};
  const std::vector<float> targets = {1, 4};
  Tensor T = on_device(Shape{n}, targets);
  VocabSplit sp(logits, n, V, t, 3e4f);
  VocabForward f = vocab_forward(sp, T);
  const auto l = f.loss.to_host();
  const double lse0 = std::log(1 + std::exp(-1.0) + std::exp(-3.0) + std::exp(-0.5));
  const double lse1 = std::log(1 + std::exp(-2.0));
  EXPECT_NEAR(l[0], lse0 + 1.0, 1e-5);
  EXPECT_NEAR(l[1], lse1 + 2.0, 1e-5);
  double sum[2] = {0, 0};
  for (int64_t p = 0; p < t; ++p) {
    Tensor d(device(), Shape{n, sp.cols});
    device().vocab_softmax_backward(d, sp.logits[p], f.row_max, f.sum_exp, T, sp.shard(p), 1.0f);
    const auto dh = d.to_host();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < sp.cols; ++j) {
        EXPECT_TRUE(std::isfinite(dh[i * sp.cols + j]));
        sum[i] += dh[i * sp.cols + j];
      }
  }
  EXPECT_NEAR(sum[0], 0.0, 1e-6);  // softmax sums to 1, minus the one-hot
  EXPECT_NEAR(sum[1], 0.0, 1e-6);
}

TEST(KernelVocabLoss, BadTargetsAndShapesAreErrors) {
  const int64_t n = 3, cols = 4;
  const tp::VocabShard shard{4, 10};
  Tensor logits(device(), Shape{n, cols}), m = filled(Shape{n}, 0.0f), s = filled(Shape{n}, 1.0f);
  Tensor y(device(), Shape{n}), d(device(), Shape{n, cols});
  Tensor badT = on_device(Shape{n}, {1, 10, 2});  // target == V (a padded id)
  EXPECT_THROW(device().vocab_sum_exp_target(s, y, logits, m, badT, shard), tp::Error);
  EXPECT_THROW(device().vocab_softmax_backward(d, logits, m, s, badT, shard, 1.0f), tp::Error);
  Tensor T = on_device(Shape{n}, {1, 9, 2}), shortM(device(), Shape{n - 1});
  EXPECT_THROW(device().vocab_max(shortM, logits, shard), tp::Error);
  EXPECT_THROW(device().vocab_sum_exp_target(s, y, logits, shortM, T, shard), tp::Error);
  Tensor wrongD(device(), Shape{n, cols + 1});
  EXPECT_THROW(device().vocab_softmax_backward(wrongD, logits, m, s, T, shard, 1.0f), tp::Error);
  EXPECT_THROW(device().vocab_loss(y, m, shortM, s), tp::Error);
}

TEST(KernelVocabLoss, SumExpAndBackwardAreThreadIndependent) {
  const int64_t n = 400, V = 197, t = 4, cols = padded_vocab(V, t) / t;  // 20000 elements
  // The last of 4 shards over V = 197 padded to 200: ids [150, 200), the last 3 padding.
  const tp::VocabShard shard{(t - 1) * cols, V};
  const auto x = random_scaled("vl_thr", n * cols, 3.0f);
  std::vector<float> targets(n);
  for (int64_t i = 0; i < n; ++i) targets[i] = static_cast<float>((i * 37) % V);
  Tensor X = on_device(Shape{n, cols}, x), T = on_device(Shape{n}, targets);
  std::vector<float> got[2][4];
  for (int th = 1; th <= 2; ++th)
    with_threads(th, [&] {
      Tensor m(device(), Shape{n}), s(device(), Shape{n}), y(device(), Shape{n});
      Tensor d(device(), Shape{n, cols});
      device().vocab_max(m, X, shard);
      device().vocab_sum_exp_target(s, y, X, m, T, shard);
      device().vocab_softmax_backward(d, X, m, s, T, shard, 1.0f / n);
      got[th - 1][0] = m.to_host();
      got[th - 1][1] = s.to_host();
      got[th - 1][2] = y.to_host();
      got[th - 1][3] = d.to_host();
    });
  for (int k = 0; k < 4; ++k) EXPECT_EQ(got[0][k], got[1][k]) << "output " << k;
}

}  // namespace
