// test_kernels.cpp — the CPU model kernels against naive double-precision references (serial).
//
// Forward: each kernel (float) against a naive double reference written here, relative Frobenius
// error ≤ 1e-5 (float rounding of short sums; the shapes are small and odd).
//
// Backward: each gradient against central finite differences of L = Σ (output ⊙ R), R random,
// taken on the double reference with eps = 1e-5. In double the FD error is ~eps² (truncation) +
// 1e-16/eps (rounding) ≈ 1e-10, so what remains is the float kernel's own rounding (~1e-6); the
// tolerance is 1e-4 relative, loose enough for float cancellation (layernorm dx) and still far
// below any real mistake (a wrong term moves the error to ~1e-1 or more). The forward test ties the
// double reference to the float kernel, so together they check the kernel's backward against the
// kernel's forward.
//
// Gradients that are written (dx, dq, …) are pre-filled with NaN, so a kernel that accumulated
// into them would fail; parameter gradients are checked to accumulate.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "test_util.h"

namespace {

using tp::AttentionShape;
using tp::Shape;
using tp::Tensor;
using tp::testing::device;
using tp::testing::random_vector;
using tp::testing::rel_error;

using Vec = std::vector<double>;
using Fn = std::function<Vec(const Vec&)>;

constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 1e-4;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

Vec to_d(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }
std::vector<float> to_f(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

Tensor on_device(const Shape& shape, const std::vector<float>& values) {
  return Tensor::from_host(device(), shape, values);
}
Tensor filled(const Shape& shape, float value) {
  return on_device(shape, std::vector<float>(static_cast<size_t>(shape.numel()), value));
}

// random_vector scaled: uniform in [-a, a).
std::vector<float> random_scaled(const std::string& name, int64_t n, float a) {
  auto v = random_vector(name, n);
  for (float& x : v) x *= a;
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ∂/∂x of L(x) = Σ f(x) ⊙ R by central differences.
Vec fd_grad(const Fn& f, Vec x, const Vec& R, double eps = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + eps;
    const double lp = dot(f(x), R);
    x[i] = xi - eps;
    const double lm = dot(f(x), R);
    x[i] = xi;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

// Runs f with n OpenMP threads, then restores the previous count.
template <typename F>
void with_threads(int n, F f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

// ---- double references ------------------------------------------------------------------------

Vec gelu_ref(const Vec& x) {
  Vec y(x.size());
  const double a = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = 0.5 * x[i] * (1 + std::tanh(a * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return y;
}

Vec swiglu_ref(const Vec& g, const Vec& u) {
  Vec y(g.size());
  for (size_t i = 0; i < g.size(); ++i) y[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return y;
}

struct NormRef {
  Vec y, mean, rstd;
};

NormRef layernorm_ref(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t h, double eps) {
  NormRef r{Vec(x.size()), Vec(rows), Vec(rows)};
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < h; ++c) mu += x[i * h + c] / h;
    for (int64_t c = 0; c < h; ++c) var += (x[i * h + c] - mu) * (x[i * h + c] - mu) / h;
    const double rs = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < h; ++c) r.y[i * h + c] = (x[i * h + c] - mu) * rs * w[c] + b[c];
    r.mean[i] = mu;
    r.rstd[i] = rs;
  }
  return r;
}

NormRef rmsnorm_ref(const Vec& x, const Vec& w, int64_t rows, int64_t h, double eps) {
  NormRef r{Vec(x.size()), Vec(), Vec(rows)};
  for (int64_t i = 0; i < rows; ++i) {
    double ms = 0;
    for (int64_t c = 0; c < h; ++c) ms += x[i * h + c] * x[i * h + c] / h;
    const double rs = 1 / std::sqrt(ms + eps);
    for (int64_t c = 0; c < h; ++c) r.y[i * h + c] = x[i * h + c] * rs * w[c];
    r.rstd[i] = rs;
  }
  return r;
}

struct AttnRef {
  Vec out, probs;
};

// The definition, loop by loop: token (s, b) is row s·B + b; query head j reads kv head j/(nh/nkv).
AttnRef attention_ref(const Vec& q, const Vec& k, const Vec& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  AttnRef r{Vec(q.size(), 0.0), Vec(B * nh * S * S, 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j) {
      const int64_t g = j / (nh / nkv);
      for (int64_t s = 0; s < S; ++s) {
        Vec score(s + 1);
        double mx = -1e300;
        for (int64_t t = 0; t <= s; ++t) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e)
            d += q[(s * B + b) * nh * hd + j * hd + e] * k[(t * B + b) * nkv * hd + g * hd + e];
          score[t] = sh.scale * d;
          mx = std::max(mx, score[t]);
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int64_t t = 0; t <= s; ++t) {
          const double p = score[t] / sum;
          r.probs[((b * nh + j) * S + s) * S + t] = p;
          for (int64_t e = 0; e < hd; ++e)
            r.out[(s * B + b) * nh * hd + j * hd + e] += p * v[(t * B + b) * nkv * hd + g * hd + e];
        }
      }
    }
  return r;
}

Vec embedding_ref(const std::vector<float>& ids, const Vec& wte, const Vec& wpe, int64_t batch,
                  int64_t h) {
  Vec out(ids.size() * h);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t c = 0; c < h; ++c)
      out[i * h + c] = wte[static_cast<int64_t>(ids[i]) * h + c] + wpe[(i / batch) * h + c];
  return out;
}

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

// ---- elementwise ------------------------------------------------------------------------------

TEST(KernelMul, MultipliesElementwiseAndMayAlias) {
  const auto x = random_vector("mul_x", 35), m = random_vector("mul_m", 35);
  Tensor X = on_device(Shape{5, 7}, x), M = on_device(Shape{35}, m), Y = filled(Shape{5, 7}, kNaN);
  device().mul(X, M, Y);
  std::vector<float> want(35);
  for (int i = 0; i < 35; ++i) want[i] = x[i] * m[i];
  EXPECT_EQ(Y.to_host(), want);
  device().mul(X, M, X);  // y aliases x
  EXPECT_EQ(X.to_host(), want);
  Tensor bad(device(), Shape{34});
  EXPECT_THROW(device().mul(X, bad, Y), tp::Error);
}

TEST(KernelSumSquares, MatchesDoubleSumAndIsThreadIndependent) {
  const int64_t n = 100003;  // several blocks, ragged end
  const auto x = random_vector("ss", n);
  Tensor X = on_device(Shape{n}, x);
  double want = 0;
  for (float v : x) want += static_cast<double>(v) * v;
  double one = 0, two = 0;
  with_threads(1, [&] { one = device().sum_squares(X); });
  with_threads(2, [&] { two = device().sum_squares(X); });
  EXPECT_NEAR(one, want, 1e-12 * want);  // double accumulation: far tighter than a float sum
  EXPECT_EQ(one, two);
}

// ---- dropout ----------------------------------------------------------------------------------

TEST(KernelDropout, ZeroProbabilityGivesAllOnes) {
  Tensor M = filled(Shape{13, 17}, kNaN);
  device().dropout_mask(M, tp::RngKey::from(7, "drop"), tp::GlobalIndex::whole(17), 0.0f);
  for (float v : M.to_host()) ASSERT_EQ(v, 1.0f);
}

TEST(KernelDropout, DropsAboutPAndScalesTheRest) {
  const int64_t rows = 200, cols = 200;
  const float p = 0.25f;
  const auto key = tp::RngKey::from(7, "drop");
  Tensor M(device(), Shape{rows, cols});
  device().dropout_mask(M, key, tp::GlobalIndex::whole(cols), p);
  const auto m = M.to_host();
  int64_t zeros = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float u = tp::random_value(key, i, tp::Distribution::uniform(0.0f, 1.0f));
    ASSERT_EQ(m[i], u >= p ? 1.0f / (1.0f - p) : 0.0f) << "element " << i;
    if (m[i] == 0.0f) {
      ++zeros;
    } else {
      ASSERT_EQ(m[i], 1.0f / 0.75f);
    }
  }
  // Binomial(40000, 0.25): σ of the fraction ≈ 0.0022, so ±0.01 is ~4.5σ.
  EXPECT_NEAR(static_cast<double>(zeros) / (rows * cols), 0.25, 0.01);
  EXPECT_THROW(device().dropout_mask(M, key, tp::GlobalIndex::whole(cols), 1.0f), tp::Error);
}

TEST(KernelDropout, ShardMaskEqualsTheSameElementsOfTheWhole) {
  const int64_t rows = 7, cols = 10;
  const auto key = tp::RngKey::from(3, "layer0.attn_drop");
  Tensor whole(device(), Shape{rows, cols});
  device().dropout_mask(whole, key, tp::GlobalIndex::whole(cols), 0.5f);
  const auto w = whole.to_host();

  Tensor colshard(device(), Shape{rows, 4});  // columns [3, 7)
  device().dropout_mask(colshard, key, tp::GlobalIndex::columns(cols, 3), 0.5f);
  const auto c = colshard.to_host();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(c[r * 4 + j], w[r * cols + 3 + j]) << r << "," << j;

  Tensor rowshard(device(), Shape{3, cols});  // rows [2, 5)
  device().dropout_mask(rowshard, key, tp::GlobalIndex::rows(cols, 2), 0.5f);
  const auto rs = rowshard.to_host();
  for (int64_t i = 0; i < 3 * cols; ++i) EXPECT_EQ(rs[i], w[2 * cols + i]) << i;
}

// ---- activations ------------------------------------------------------------------------------

TEST(KernelGelu, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const int64_t n = 3 * 11;
  const auto x = random_scaled("gelu_x", n, 4.0f);  // covers both tails and the bend
  const Vec R = to_d(random_vector("gelu_R", n));
  Tensor X = on_device(Shape{3, 11}, x), Y = filled(Shape{3, 11}, kNaN);
  device().gelu_forward(Y, X);
  EXPECT_LE(rel_error(Y.to_host(), to_f(gelu_ref(to_d(x)))), kForwardTol);

  Tensor dY = on_device(Shape{3, 11}, to_f(R)), dX = filled(Shape{3, 11}, kNaN);
  device().gelu_backward(dX, dY, X);
  EXPECT_LE(rel_error(dX.to_host(), to_f(fd_grad(gelu_ref, to_d(x), R))), kGradTol);
}

TEST(KernelSwiGLU, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const int64_t n = 5 * 9;
  const auto g = random_scaled("sw_g", n, 4.0f), u = random_vector("sw_u", n);
  const Vec R = to_d(random_vector("sw_R", n));
  Tensor G = on_device(Shape{5, 9}, g), U = on_device(Shape{5, 9}, u), Y = filled(Shape{5, 9}, kNaN);
  device().swiglu_forward(Y, G, U);
  EXPECT_LE(rel_error(Y.to_host(), to_f(swiglu_ref(to_d(g), to_d(u)))), kForwardTol);

  Tensor dY = on_device(Shape{5, 9}, to_f(R));
  Tensor dG = filled(Shape{5, 9}, kNaN), dU = filled(Shape{5, 9}, kNaN);
  device().swiglu_backward(dG, dU, dY, G, U);
  const Vec gd = to_d(g), ud = to_d(u);
  const Vec want_dg = fd_grad([&](const Vec& gg) { return swiglu_ref(gg, ud); }, gd, R);
  const Vec want_du = fd_grad([&](const Vec& uu) { return swiglu_ref(gd, uu); }, ud, R);
  EXPECT_LE(rel_error(dG.to_host(), to_f(want_dg)), kGradTol);
  EXPECT_LE(rel_error(dU.to_host(), to_f(want_du)), kGradTol);
}

// ---- norms ------------------------------------------------------------------------------------

struct LayerNormCase {
  int64_t rows, h;
  std::vector<float> x, w, b, dy;
  Tensor X, W, B, dY, Y, mean, rstd;
  LayerNormCase(int64_t rows_, int64_t h_) : rows(rows_), h(h_) {
    x = random_scaled("ln_x", rows * h, 2.0f);
    for (int64_t i = 0; i < rows * h; ++i) x[i] += 0.5f * static_cast<float>(i % 3);  // nonzero means
    w = random_vector("ln_w", h);
    b = random_vector("ln_b", h);
    dy = random_vector("ln_R", rows * h);
    X = on_device(Shape{rows, h}, x);
    W = on_device(Shape{h}, w);
    B = on_device(Shape{h}, b);
    dY = on_device(Shape{rows, h}, dy);
    Y = filled(Shape{rows, h}, kNaN);
    mean = filled(Shape{rows}, kNaN);
    rstd = filled(Shape{rows}, kNaN);
    device().layernorm_forward(Y, mean, rstd, X, W, B, 1e-5f);
  }
  // dX, dW, dB from zero (dX from NaN).
  void backward(Tensor& dX, Tensor& dW, Tensor& dB) {
    dX = filled(Shape{rows, h}, kNaN);
    dW = filled(Shape{h}, 0.0f);
    dB = filled(Shape{h}, 0.0f);
    device().layernorm_backward(dX, dW, dB, dY, X, W, mean, rstd);
  }
};

TEST(KernelLayerNorm, ForwardMatchesReference) {
  LayerNormCase c(6, 7);
  const NormRef ref = layernorm_ref(to_d(c.x), to_d(c.w), to_d(c.b), c.rows, c.h, 1e-5);
  EXPECT_LE(rel_error(c.Y.to_host(), to_f(ref.y)), kForwardTol);
  EXPECT_LE(rel_error(c.mean.to_host(), to_f(ref.mean)), kForwardTol);
  EXPECT_LE(rel_error(c.rstd.to_host(), to_f(ref.rstd)), kForwardTol);
}

TEST(KernelLayerNorm, BackwardMatchesFiniteDifferences) {
  LayerNormCase c(6, 7);
  Tensor dX, dW, dB;
  c.backward(dX, dW, dB);
  const Vec x = to_d(c.x), w = to_d(c.w), b = to_d(c.b), R = to_d(c.dy);
  const int64_t rows = c.rows, h = c.h;
  auto f_x = [&](const Vec& xx) { return layernorm_ref(xx, w, b, rows, h, 1e-5).y; };
  auto f_w = [&](const Vec& ww) { return layernorm_ref(x, ww, b, rows, h, 1e-5).y; };
  auto f_b = [&](const Vec& bb) { return layernorm_ref(x, w, bb, rows, h, 1e-5).y; };
  EXPECT_LE(rel_error(dX.to_host(), to_f(fd_grad(f_x, x, R))), kGradTol);
  EXPECT_LE(rel_error(dW.to_host(), to_f(fd_grad(f_w, w, R))), kGradTol);
  EXPECT_LE(rel_error(dB.to_host(), to_f(fd_grad(f_b, b, R))), kGradTol);
}

TEST(KernelLayerNorm, ParameterGradientsAccumulate) {
  LayerNormCase c(6, 7);
  Tensor dX, dW, dB;
  c.backward(dX, dW, dB);
  const auto dw1 = dW.to_host(), db1 = dB.to_host(), dx1 = dX.to_host();
  device().layernorm_backward(dX, dW, dB, c.dY, c.X, c.W, c.mean, c.rstd);
  const auto dw2 = dW.to_host(), db2 = dB.to_host();
  for (int64_t i = 0; i < c.h; ++i) {
    EXPECT_EQ(dw2[i], 2 * dw1[i]);  // a + a is exact
    EXPECT_EQ(db2[i], 2 * db1[i]);
  }
  EXPECT_EQ(dX.to_host(), dx1);  // dx is written, not accumulated
}

TEST(KernelLayerNorm, BackwardIsThreadIndependent) {
  LayerNormCase c(300, 100);  // 30000 elements: above the kernels' parallel threshold
  std::vector<float> dx[2], dw[2], db[2];
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor dX, dW, dB;
      c.backward(dX, dW, dB);
      dx[t - 1] = dX.to_host();
      dw[t - 1] = dW.to_host();
      db[t - 1] = dB.to_host();
    });
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
  EXPECT_EQ(db[0], db[1]);
}

TEST(KernelLayerNorm, ShapeMismatchIsAnError) {
  Tensor x(device(), Shape{4, 6}), y(device(), Shape{4, 6}), w(device(), Shape{5}), b(device(), Shape{6});
  Tensor mean(device(), Shape{4}), rstd(device(), Shape{4});
  EXPECT_THROW(device().layernorm_forward(y, mean, rstd, x, w, b, 1e-5f), tp::Error);
}

TEST(KernelRMSNorm, ForwardAndBackwardMatchReference) {
  const int64_t rows = 5, h = 9;
  const auto x = random_scaled("rms_x", rows * h, 2.0f), w = random_vector("rms_w", h);
  const Vec R = to_d(random_vector("rms_R", rows * h));
  Tensor X = on_device(Shape{rows, h}, x), W = on_device(Shape{h}, w);
  Tensor Y = filled(Shape{rows, h}, kNaN), rstd = filled(Shape{rows}, kNaN);
  device().rmsnorm_forward(Y, rstd, X, W, 1e-6f);
  const NormRef ref = rmsnorm_ref(to_d(x), to_d(w), rows, h, 1e-6);
  EXPECT_LE(rel_error(Y.to_host(), to_f(ref.y)), kForwardTol);
  EXPECT_LE(rel_error(rstd.to_host(), to_f(ref.rstd)), kForwardTol);

  Tensor dY = on_device(Shape{rows, h}, to_f(R));
  Tensor dX = filled(Shape{rows, h}, kNaN), dW = filled(Shape{h}, 0.0f);
  device().rmsnorm_backward(dX, dW, dY, X, W, rstd);
  const Vec xd = to_d(x), wd = to_d(w);
  const Vec want_dx = fd_grad([&](const Vec& xx) { return rmsnorm_ref(xx, wd, rows, h, 1e-6).y; }, xd, R);
  const Vec want_dw = fd_grad([&](const Vec& ww) { return rmsnorm_ref(xd, ww, rows, h, 1e-6).y; }, wd, R);
  EXPECT_LE(rel_error(dX.to_host(), to_f(want_dx)), kGradTol);
  const auto dw1 = dW.to_host();
  EXPECT_LE(rel_error(dw1, to_f(want_dw)), kGradTol);

  device().rmsnorm_backward(dX, dW, dY, X, W, rstd);  // dw accumulates
  const auto dw2 = dW.to_host();
  for (int64_t i = 0; i < h; ++i) EXPECT_EQ(dw2[i], 2 * dw1[i]);
}

TEST(KernelRMSNorm, BackwardIsThreadIndependent) {
  const int64_t rows = 257, h = 130;
  Tensor X = on_device(Shape{rows, h}, random_vector("rt_x", rows * h));
  Tensor W = on_device(Shape{h}, random_vector("rt_w", h));
  Tensor dY = on_device(Shape{rows, h}, random_vector("rt_dy", rows * h));
  Tensor Y(device(), Shape{rows, h}), rstd(device(), Shape{rows});
  device().rmsnorm_forward(Y, rstd, X, W, 1e-6f);
  std::vector<float> dx[2], dw[2];
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor dX(device(), Shape{rows, h}), dW = filled(Shape{h}, 0.0f);
      device().rmsnorm_backward(dX, dW, dY, X, W, rstd);
      dx[t - 1] = dX.to_host();
      dw[t - 1] = dW.to_host();
    });
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
}

// ---- attention --------------------------------------------------------------------------------

AttentionShape attn_shape(int64_t S, int64_t B, int64_t nh, int64_t nkv, int64_t hd) {
  return {S, B, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
}

std::string attn_tag(const AttentionShape& s) {
  return "S=" + std::to_string(s.seq) + " B=" + std::to_string(s.batch) + " nh=" +
         std::to_string(s.heads) + " nkv=" + std::to_string(s.kv_heads) + " hd=" + std::to_string(s.head_dim);
}

struct AttnCase {
  AttentionShape sh;
  std::vector<float> q, k, v;
  Tensor Q, K, V, out, probs;
  explicit AttnCase(const AttentionShape& s) : sh(s) {
    const int64_t rows = s.seq * s.batch, qc = s.heads * s.head_dim, kc = s.kv_heads * s.head_dim;
    const std::string tag = attn_tag(s);
    q = random_scaled("q" + tag, rows * qc, 2.0f);  // peaked enough that softmax is not uniform
    k = random_scaled("k" + tag, rows * kc, 2.0f);
    v = random_vector("v" + tag, rows * kc);
    Q = on_device(Shape{rows, qc}, q);
    K = on_device(Shape{rows, kc}, k);
    V = on_device(Shape{rows, kc}, v);
    out = filled(Shape{rows, qc}, kNaN);
    probs = filled(Shape{s.batch, s.heads, s.seq, s.seq}, kNaN);
    device().attention_forward(out, probs, Q, K, V, sh);
  }
};

const AttentionShape kAttnShapes[] = {
    attn_shape(5, 2, 4, 2, 3),  // GQA: two query heads per kv head
    attn_shape(5, 2, 3, 3, 4),  // MHA
    attn_shape(4, 3, 4, 1, 2),  // MQA
};

TEST(KernelAttention, ForwardMatchesReferenceAndProbsAreCausal) {
  for (const AttentionShape& sh : kAttnShapes) {
    AttnCase c(sh);
    const AttnRef ref = attention_ref(to_d(c.q), to_d(c.k), to_d(c.v), sh);
    EXPECT_LE(rel_error(c.out.to_host(), to_f(ref.out)), kForwardTol) << attn_tag(sh);
    const auto p = c.probs.to_host();
    EXPECT_LE(rel_error(p, to_f(ref.probs)), kForwardTol) << attn_tag(sh);
    const int64_t S = sh.seq;
    for (int64_t row = 0; row < sh.batch * sh.heads * S; ++row) {
      const int64_t s = row % S;
      double sum = 0;
      for (int64_t t = 0; t < S; ++t) {
        if (t > s) {
          EXPECT_EQ(p[row * S + t], 0.0f) << attn_tag(sh) << " row " << row << " t " << t;
        }
        sum += p[row * S + t];
      }
      EXPECT_NEAR(sum, 1.0, 1e-6) << attn_tag(sh) << " row " << row;
    }
  }
}

TEST(KernelAttention, BackwardMatchesFiniteDifferences) {
  for (const AttentionShape& sh : kAttnShapes) {
    AttnCase c(sh);
    const Vec R = to_d(random_vector("R" + attn_tag(sh), c.Q.numel()));
    Tensor dOut = on_device(c.Q.shape(), to_f(R));
    Tensor dQ = filled(c.Q.shape(), kNaN), dK = filled(c.K.shape(), kNaN), dV = filled(c.V.shape(), kNaN);
    device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.probs, sh);
    const Vec q = to_d(c.q), k = to_d(c.k), v = to_d(c.v);
    const Vec want_dq = fd_grad([&](const Vec& x) { return attention_ref(x, k, v, sh).out; }, q, R);
    const Vec want_dk = fd_grad([&](const Vec& x) { return attention_ref(q, x, v, sh).out; }, k, R);
    const Vec want_dv = fd_grad([&](const Vec& x) { return attention_ref(q, k, x, sh).out; }, v, R);
    EXPECT_LE(rel_error(dQ.to_host(), to_f(want_dq)), kGradTol) << attn_tag(sh);
    EXPECT_LE(rel_error(dK.to_host(), to_f(want_dk)), kGradTol) << attn_tag(sh);
    EXPECT_LE(rel_error(dV.to_host(), to_f(want_dv)), kGradTol) << attn_tag(sh);
  }
}

TEST(KernelAttention, BackwardIsThreadIndependent) {
  AttnCase c(attn_shape(64, 2, 4, 2, 16));  // B·nh·S²·hd ≈ 5e5: parallel
  Tensor dOut = on_device(c.Q.shape(), random_vector("attn_thr_dout", c.Q.numel()));
  std::vector<float> got[2][3];
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor dQ(device(), c.Q.shape()), dK(device(), c.K.shape()), dV(device(), c.V.shape());
      device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.probs, c.sh);
      got[t - 1][0] = dQ.to_host();
      got[t - 1][1] = dK.to_host();
      got[t - 1][2] = dV.to_host();
    });
  EXPECT_EQ(got[0][0], got[1][0]);
  EXPECT_EQ(got[0][1], got[1][1]);
  EXPECT_EQ(got[0][2], got[1][2]);
}

TEST(KernelAttention, BadShapesAreErrors) {
  AttentionShape sh = attn_shape(3, 2, 3, 2, 4);  // nh % nkv != 0
  Tensor q(device(), Shape{6, 12}), k(device(), Shape{6, 8}), v(device(), Shape{6, 8});
  Tensor out(device(), Shape{6, 12}), probs(device(), Shape{2, 3, 3, 3});
  EXPECT_THROW(device().attention_forward(out, probs, q, k, v, sh), tp::Error);
  sh = attn_shape(3, 2, 4, 2, 4);  // q is 6x12, not 6x16
  EXPECT_THROW(device().attention_forward(out, probs, q, k, v, sh), tp::Error);
}

// ---- embedding --------------------------------------------------------------------------------

TEST(KernelEmbedding, ForwardAddsTokenAndPositionRows) {
  const int64_t S = 4, B = 3, V = 7, h = 5, P = 6;  // wpe has more positions than S
  const std::vector<float> ids = {3, 0, 6, 3, 3, 1, 5, 0, 2, 6, 6, 4};  // repeats
  const auto wte = random_vector("wte", V * h), wpe = random_vector("wpe", P * h);
  Tensor Ids = on_device(Shape{S * B}, ids), Wte = on_device(Shape{V, h}, wte),
         Wpe = on_device(Shape{P, h}, wpe), Out = filled(Shape{S * B, h}, kNaN);
  device().embedding_forward(Out, Ids, Wte, Wpe, B);
  std::vector<float> want(S * B * h);
  for (int64_t i = 0; i < S * B; ++i)
    for (int64_t c = 0; c < h; ++c)
      want[i * h + c] = wte[static_cast<int64_t>(ids[i]) * h + c] + wpe[(i / B) * h + c];
  EXPECT_EQ(Out.to_host(), want);  // one float add per element, the same one

  Tensor badIds = on_device(Shape{S * B}, std::vector<float>(S * B, 7.0f));  // id == V
  EXPECT_THROW(device().embedding_forward(Out, badIds, Wte, Wpe, B), tp::Error);
  Tensor shortWpe(device(), Shape{S - 1, h});
  EXPECT_THROW(device().embedding_forward(Out, Ids, Wte, shortWpe, B), tp::Error);
}

TEST(KernelEmbedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t S = 4, B = 3, V = 7, h = 5, P = 6;
  const std::vector<float> ids = {3, 0, 6, 3, 3, 1, 5, 0, 2, 6, 6, 4};
  const Vec wte = to_d(random_vector("wte", V * h)), wpe = to_d(random_vector("wpe", P * h));
  const Vec R = to_d(random_vector("emb_R", S * B * h));
  Tensor Ids = on_device(Shape{S * B}, ids), dOut = on_device(Shape{S * B, h}, to_f(R));
  Tensor dWte = filled(Shape{V, h}, 0.0f), dWpe = filled(Shape{P, h}, 0.0f);
  device().embedding_backward(dWte, dWpe, dOut, Ids, B);
  const Vec want_wte = fd_grad([&](const Vec& x) { return embedding_ref(ids, x, wpe, B, h); }, wte, R);
  const Vec want_wpe = fd_grad([&](const Vec& x) { return embedding_ref(ids, wte, x, B, h); }, wpe, R);
  const auto g_wte = dWte.to_host(), g_wpe = dWpe.to_host();
  EXPECT_LE(rel_error(g_wte, to_f(want_wte)), kGradTol);
  EXPECT_LE(rel_error(g_wpe, to_f(want_wpe)), kGradTol);
  for (int64_t c = 0; c < h; ++c) EXPECT_EQ(g_wpe[(S + 1) * h + c], 0.0f);  // positions ≥ S untouched

  // A second call accumulates. Not bit-exactly 2x: the kernel adds row by row into dW, so the second
  // pass rounds differently; 1e-6 is float rounding, a kernel that overwrote would be off by 0.5.
  device().embedding_backward(dWte, dWpe, dOut, Ids, B);
  std::vector<float> twice_wte = g_wte, twice_wpe = g_wpe;
  for (float& x : twice_wte) x *= 2;
  for (float& x : twice_wpe) x *= 2;
  EXPECT_LE(rel_error(dWte.to_host(), twice_wte), 1e-6);
  EXPECT_LE(rel_error(dWpe.to_host(), twice_wpe), 1e-6);
}

TEST(KernelEmbedding, BackwardIsThreadIndependent) {
  const int64_t S = 64, B = 8, V = 10, h = 96;  // 49152 elements; 512 rows into 10 token rows
  std::vector<float> ids(S * B);
  for (int64_t i = 0; i < S * B; ++i) ids[i] = static_cast<float>((i * 7 + i / 5) % V);
  Tensor Ids = on_device(Shape{S * B}, ids);
  Tensor dOut = on_device(Shape{S * B, h}, random_vector("emb_thr", S * B * h));
  std::vector<float> wte[2], wpe[2];
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor dWte = filled(Shape{V, h}, 0.0f), dWpe = filled(Shape{S, h}, 0.0f);
      device().embedding_backward(dWte, dWpe, dOut, Ids, B);
      wte[t - 1] = dWte.to_host();
      wpe[t - 1] = dWpe.to_host();
    });
  EXPECT_EQ(wte[0], wte[1]);
  EXPECT_EQ(wpe[0], wpe[1]);
}

// ---- loss -------------------------------------------------------------------------------------

TEST(KernelCrossEntropy, LossMatchesReferenceAndGradientMatchesFiniteDifferences) {
  const int64_t rows = 4, V = 7;
  const float scale = 0.25f;  // e.g. 1 / rows, the mean loss
  const auto logits = random_scaled("ce_logits", rows * V, 3.0f);
  const std::vector<float> targets = {2, 0, 6, 2};
  Tensor Logits = on_device(Shape{rows, V}, logits), T = on_device(Shape{rows}, targets);
  Tensor loss = filled(Shape{rows}, kNaN), dLogits = filled(Shape{rows, V}, kNaN);
  device().softmax_cross_entropy(loss, dLogits, Logits, T, scale);
  EXPECT_LE(rel_error(loss.to_host(), to_f(cross_entropy_ref(to_d(logits), targets, V))), kForwardTol);
  // dlogits = ∂(scale · Σ_r loss[r]) / ∂logits
  const Vec want = fd_grad([&](const Vec& x) { return cross_entropy_ref(x, targets, V); }, to_d(logits),
                           Vec(rows, scale));
  const auto got = dLogits.to_host();
  EXPECT_LE(rel_error(got, to_f(want)), kGradTol);

  // dlogits aliasing logits gives the same numbers.
  Tensor inplace = on_device(Shape{rows, V}, logits), loss2(device(), Shape{rows});
  device().softmax_cross_entropy(loss2, inplace, inplace, T, scale);
  EXPECT_EQ(inplace.to_host(), got);
  EXPECT_EQ(loss2.to_host(), loss.to_host());

  Tensor badT = on_device(Shape{rows}, {2, 0, 7, 2});  // target == V
  EXPECT_THROW(device().softmax_cross_entropy(loss, dLogits, Logits, badT, scale), tp::Error);
}

TEST(KernelCrossEntropy, LargeLogitsStayFinite) {
  const int64_t rows = 2, V = 5;
  const std::vector<float> logits = {1e4f, 1e4f - 1, 1e4f - 3, -1e4f, 1e4f - 0.5f,
                                     -1e4f, 2e4f,     0,         1e4f,  2e4f - 2};
  const std::vector<float> targets = {1, 4};
  Tensor Logits = on_device(Shape{rows, V}, logits), T = on_device(Shape{rows}, targets);
  Tensor loss(device(), Shape{rows}), dLogits(device(), Shape{rows, V});
  device().softmax_cross_entropy(loss, dLogits, Logits, T, 1.0f);
  const auto l = loss.to_host(), d = dLogits.to_host();
  for (float x : d) EXPECT_TRUE(std::isfinite(x));
  // −log softmax by hand: row 0 over the offsets {0, −1, −3, −2e4, −0.5} from the max, target −1.
  const double lse0 = std::log(1 + std::exp(-1.0) + std::exp(-3.0) + std::exp(-0.5));
  const double lse1 = std::log(1 + std::exp(-2.0));  // offsets {−3e4, 0, −2e4, −1e4, −2}
  EXPECT_NEAR(l[0], lse0 + 1.0, 1e-5);
  EXPECT_NEAR(l[1], lse1 + 2.0, 1e-5);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < V; ++c) sum += d[r * V + c];
    EXPECT_NEAR(sum, 0.0, 1e-6);  // softmax sums to 1, minus the one-hot
  }
}

// ---- optimizer --------------------------------------------------------------------------------

TEST(KernelAdamW, StepOneIsSignDescentWithoutDecay) {
  // m̂ = g, v̂ = g² at step 1, so the update is lr · g / (|g| + eps) ≈ lr · sign(g).
  const std::vector<float> p0 = {1.0f, -2.0f, 0.5f}, g = {0.3f, -4.0f, 1e-3f};
  Tensor P = on_device(Shape{3}, p0), G = on_device(Shape{3}, g);
  Tensor M = filled(Shape{3}, 0.0f), V = filled(Shape{3}, 0.0f);
  tp::AdamWParams hp;
  hp.lr = 0.1f;
  device().adamw_step(P, G, M, V, hp, 1);
  const auto p = P.to_host();
  EXPECT_NEAR(p[0], 0.9f, 1e-6);
  EXPECT_NEAR(p[1], -1.9f, 1e-6);
  EXPECT_NEAR(p[2], 0.4f, 1e-5);  // g = 1e-3: eps = 1e-8 shifts the step by 1e-6 relative
}

TEST(KernelAdamW, TwoStepsMatchHandComputation) {
  const int64_t n = 11;
  const auto p0 = random_vector("adam_p", n), g1 = random_vector("adam_g1", n),
             g2 = random_vector("adam_g2", n);
  tp::AdamWParams hp;
  hp.lr = 0.01f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  Tensor P = on_device(Shape{n}, p0), M = filled(Shape{n}, 0.0f), V = filled(Shape{n}, 0.0f);
  Tensor G1 = on_device(Shape{n}, g1), G2 = on_device(Shape{n}, g2);
  device().adamw_step(P, G1, M, V, hp, 1);
  device().adamw_step(P, G2, M, V, hp, 2);

  // The documented update in double, with the float hyper-parameters.
  Vec p = to_d(p0), m(n, 0.0), v(n, 0.0);
  const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.weight_decay;
  for (int step = 1; step <= 2; ++step) {
    const auto& g = step == 1 ? g1 : g2;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double{hp.grad_scale} * g[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, step)), vhat = v[i] / (1 - std::pow(b2, step));
      p[i] -= lr * mhat / (std::sqrt(vhat) + hp.eps) + lr * wd * p[i];
    }
  }
  // Compare the change in p (≈ 2 lr), not p itself, so an error in the update is not hidden by p.
  const auto got = P.to_host();
  Vec got_delta(n), want_delta(n);
  for (int64_t i = 0; i < n; ++i) {
    got_delta[i] = got[i] - static_cast<double>(p0[i]);
    want_delta[i] = p[i] - p0[i];
  }
  EXPECT_LE(rel_error(to_f(got_delta), to_f(want_delta)), 1e-4);  // p − p0 loses ~7 bits to float p
  EXPECT_LE(rel_error(M.to_host(), to_f(m)), kForwardTol);
  EXPECT_LE(rel_error(V.to_host(), to_f(v)), kForwardTol);
}

}  // namespace
