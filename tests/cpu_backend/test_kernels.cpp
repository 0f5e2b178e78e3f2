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
//
// The fused bias + GeLU is also checked bit for bit against add_bias + gelu (its contract), and the
// CPU device's cache of freed blocks (reuse and cap) is checked here, beside the kernels it feeds.
//
// Last, the checks belong to tp::Device, not to a backend: a device whose do_* methods check
// nothing still rejects bad arguments before any do_* runs, and gets what the checks worked out.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "cpu_device.h"
#include "kernels/attention.h"
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

NormRef layernorm_ref(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t h,
                      double eps) {
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

TEST(KernelCopyColumns, WithinOneTensorOnlyWhenTheColumnsDoNotOverlap) {
  const auto v = random_vector("cols_v", 24);
  Tensor X = on_device(Shape{3, 8}, v);
  device().copy_columns(X, 0, X, 5, 3);  // columns 0..2 → 5..7 of the same rows: allowed
  auto want = v;
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 3; ++j) want[r * 8 + 5 + j] = v[r * 8 + j];
  EXPECT_EQ(X.to_host(), want);
  EXPECT_THROW(device().copy_columns(X, 0, X, 2, 4), tp::Error);  // columns 0..3 and 2..5 overlap
  Tensor Y = X.view(1, 3);  // rows 1..2 of X: the same memory, other rows
  EXPECT_THROW(device().copy_columns(X.view(0, 2), 0, Y, 0, 8), tp::Error);
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

// ---- the CPU device's memory --------------------------------------------------------------------

// A freed block comes back for the next allocation of its (64-byte rounded) size, 64-byte aligned;
// the cache holds at most max(64 MiB, the most bytes handed out at once), giving back other sizes'
// blocks first.
TEST(CpuDeviceMemory, AFreedBlockIsReusedForItsSizeAndTheCacheIsCapped) {
  tp::CpuDevice dev;
  void* a = dev.allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  dev.deallocate(a);
  EXPECT_EQ(dev.cached_bytes(), 1024u);
  void* b = dev.allocate(1000);
  EXPECT_EQ(b, a);
  EXPECT_EQ(dev.cached_bytes(), 0u);
  void* c = dev.allocate(5000);  // another size: a new block
  EXPECT_NE(c, b);
  dev.deallocate(b);
  dev.deallocate(c);
  EXPECT_EQ(dev.cached_bytes(), 1024u + 5056u);

  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<void*> big;
  for (int i = 0; i < 3; ++i) big.push_back(dev.allocate(40 * kMiB));  // 120 MiB at once: the cap
  for (void* p : big) dev.deallocate(p);
  EXPECT_EQ(dev.cached_bytes(), 120 * kMiB)
      << "the small blocks are given back to make room for the third big one";
  void* d = dev.allocate(kMiB);
  dev.deallocate(d);  // 121 MiB would exceed the cap: a 40 MiB block is given back
  EXPECT_EQ(dev.cached_bytes(), 81 * kMiB);
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

// GeLU(x + b) in double, b broadcast over the rows of x: (rows, cols).
Vec bias_gelu_ref(const Vec& x, const Vec& b) {
  Vec z(x.size());
  for (size_t i = 0; i < x.size(); ++i) z[i] = x[i] + b[i % b.size()];
  return gelu_ref(z);
}

TEST(KernelBiasGelu, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, cols = 70;  // two column blocks of the bias sums, the second ragged
  const auto x = random_scaled("bg_x", rows * cols, 3.0f), b = random_scaled("bg_b", cols, 1.0f);
  const Vec R = to_d(random_vector("bg_R", rows * cols));
  Tensor X = on_device(Shape{rows, cols}, x), B = on_device(Shape{cols}, b);
  Tensor Y = filled(Shape{rows, cols}, kNaN);
  device().bias_gelu_forward(Y, X, B);
  EXPECT_LE(rel_error(Y.to_host(), to_f(bias_gelu_ref(to_d(x), to_d(b)))), kForwardTol);

  const std::vector<float> db0 = random_vector("bg_db0", cols);  // dbias accumulates onto this
  Tensor dY = on_device(Shape{rows, cols}, to_f(R)), dX = filled(Shape{rows, cols}, kNaN);
  Tensor dB = on_device(Shape{cols}, db0);
  device().bias_gelu_backward(dX, dB, dY, X, B);
  const Vec xd = to_d(x), bd = to_d(b);
  const Vec want_dx = fd_grad([&](const Vec& xx) { return bias_gelu_ref(xx, bd); }, xd, R);
  Vec want_db = fd_grad([&](const Vec& bb) { return bias_gelu_ref(xd, bb); }, bd, R);
  EXPECT_LE(rel_error(dX.to_host(), to_f(want_dx)), kGradTol);
  std::vector<float> got_db = dB.to_host();
  for (int64_t c = 0; c < cols; ++c) got_db[c] -= db0[c];
  EXPECT_LE(rel_error(got_db, to_f(want_db)), kGradTol);
}

// The fused kernels give the bits of add_bias + gelu_forward and gelu_backward + add_bias_backward
// (the same arithmetic per element, the bias sums in the same order), at 1 and 2 threads, on a
// shape above the one-thread size and with a ragged column block.
TEST(KernelBiasGelu, BitwiseEqualToTheUnfusedKernelsAtAnyThreadCount) {
  const int64_t rows = 131, cols = 200;
  const auto x = random_scaled("bgu_x", rows * cols, 4.0f), b = random_scaled("bgu_b", cols, 1.0f);
  const auto dy = random_vector("bgu_dy", rows * cols), db0 = random_vector("bgu_db0", cols);
  Tensor X = on_device(Shape{rows, cols}, x), B = on_device(Shape{cols}, b);
  Tensor dY = on_device(Shape{rows, cols}, dy);

  Tensor Z = on_device(Shape{rows, cols}, x);  // the unfused: x + b kept, then GeLU
  device().add_bias(Z, B);
  Tensor Y0(device(), Shape{rows, cols}), dX0(device(), Shape{rows, cols});
  Tensor dB0 = on_device(Shape{cols}, db0);
  device().gelu_forward(Y0, Z);
  device().gelu_backward(dX0, dY, Z);
  device().add_bias_backward(dB0, dX0);
  for (const int threads : {1, 2}) {
    with_threads(threads, [&] {
      Tensor Y = filled(Shape{rows, cols}, kNaN), dX = filled(Shape{rows, cols}, kNaN);
      Tensor dB = on_device(Shape{cols}, db0);
      device().bias_gelu_forward(Y, X, B);
      device().bias_gelu_backward(dX, dB, dY, X, B);
      EXPECT_EQ(Y.to_host(), Y0.to_host()) << threads << " threads";
      EXPECT_EQ(dX.to_host(), dX0.to_host()) << threads << " threads";
      EXPECT_EQ(dB.to_host(), dB0.to_host()) << threads << " threads";
    });
  }
  Tensor bad(device(), Shape{cols - 1});
  Tensor Y(device(), Shape{rows, cols});
  EXPECT_THROW(device().bias_gelu_forward(Y, X, bad), tp::Error);
  EXPECT_THROW(device().bias_gelu_backward(Y, bad, dY, X, B), tp::Error);
}

// bf16 (native on the CPU, bit for bit the Device front's stand-ins: tests/cpu_backend/test_cpu_bf16.cpp): x
// and y in bf16 give the f32 kernel on the widened x, its output rounded once; the bias and its
// gradient stay f32.
TEST(KernelBiasGelu, TakesBf16AsTheF32KernelOnTheWidenedInput) {
  const int64_t rows = 9, cols = 40;
  const auto x = random_scaled("bgb_x", rows * cols, 3.0f), b = random_scaled("bgb_b", cols, 1.0f);
  const auto dy = random_vector("bgb_dy", rows * cols);
  Tensor X16(device(), Shape{rows, cols}, tp::Dtype::bf16),
      dY16(device(), Shape{rows, cols}, tp::Dtype::bf16);
  X16.copy_from_host(x);
  dY16.copy_from_host(dy);
  Tensor X(device(), Shape{rows, cols}), dY(device(), Shape{rows, cols});
  device().convert(X16, X);  // exact
  device().convert(dY16, dY);
  Tensor B = on_device(Shape{cols}, b);
  Tensor Y16(device(), Shape{rows, cols}, tp::Dtype::bf16),
      dX16(device(), Shape{rows, cols}, tp::Dtype::bf16);
  Tensor dB16 = filled(Shape{cols}, 0.0f), dB = filled(Shape{cols}, 0.0f);
  device().bias_gelu_forward(Y16, X16, B);
  device().bias_gelu_backward(dX16, dB16, dY16, X16, B);
  Tensor Y(device(), Shape{rows, cols}), dX(device(), Shape{rows, cols});
  device().bias_gelu_forward(Y, X, B);
  device().bias_gelu_backward(dX, dB, dY, X, B);
  Tensor Yr(device(), Shape{rows, cols}, tp::Dtype::bf16),
      dXr(device(), Shape{rows, cols}, tp::Dtype::bf16);
  device().convert(Y, Yr);
  device().convert(dX, dXr);
  EXPECT_EQ(Y16.to_host(), Yr.to_host());
  EXPECT_EQ(dX16.to_host(), dXr.to_host());
  EXPECT_EQ(dB16.to_host(), dB.to_host());  // from the f32 dx, before its rounding
}

TEST(KernelSwiGLU, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const int64_t n = 5 * 9;
  const auto g = random_scaled("sw_g", n, 4.0f), u = random_vector("sw_u", n);
  const Vec R = to_d(random_vector("sw_R", n));
  Tensor G = on_device(Shape{5, 9}, g), U = on_device(Shape{5, 9}, u),
         Y = filled(Shape{5, 9}, kNaN);
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
    for (int64_t i = 0; i < rows * h; ++i)
      x[i] += 0.5f * static_cast<float>(i % 3);  // nonzero means
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
  Tensor x(device(), Shape{4, 6}), y(device(), Shape{4, 6}), w(device(), Shape{5}),
      b(device(), Shape{6});
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
  const Vec want_dx =
      fd_grad([&](const Vec& xx) { return rmsnorm_ref(xx, wd, rows, h, 1e-6).y; }, xd, R);
  const Vec want_dw =
      fd_grad([&](const Vec& ww) { return rmsnorm_ref(xd, ww, rows, h, 1e-6).y; }, wd, R);
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

// ---- residual add + norm, fused ----------------------------------------------------------------

// A CpuDevice without its fused add + norm: the Device's default do_* (the two kernels), which the
// GPU backend runs.
class UnfusedAddNormCpu final : public tp::CpuDevice {
 protected:
  void do_add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                const Tensor& r, const Tensor& w, const Tensor& b,
                                float eps) override {
    Device::do_add_layernorm_forward(s, y, mean, rstd, x, r, w, b, eps);
  }
  void do_add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& r,
                              const Tensor& w, float eps) override {
    Device::do_add_rmsnorm_forward(s, y, rstd, x, r, w, eps);
  }
  void do_layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                                 const Tensor& dy, const Tensor& x, const Tensor& w,
                                 const Tensor& mean, const Tensor& rstd) override {
    Device::do_layernorm_backward_add(dx, dw, db, dres, dy, x, w, mean, rstd);
  }
  void do_rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Tensor& rstd) override {
    Device::do_rmsnorm_backward_add(dx, dw, dres, dy, x, w, rstd);
  }
};

// run(dev, fused, out) fills out[0, n): the fused kernel on `device()` and on UnfusedAddNormCpu (the
// default do_*) must give the unfused kernels' bits, at 1 and 2 threads.
void expect_fused_bitwise(const std::string& tag, int n,
                          const std::function<void(tp::Device&, bool, std::vector<float>*)>& run) {
  UnfusedAddNormCpu unfused_dev;
  for (const int threads : {1, 2}) {
    with_threads(threads, [&] {
      std::vector<std::vector<float>> want(n), got(n), dflt(n);
      run(device(), false, want.data());
      run(device(), true, got.data());
      run(unfused_dev, true, dflt.data());
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(got[i], want[i]) << tag << ", output " << i << ", " << threads << " threads";
        EXPECT_EQ(dflt[i], want[i])
            << tag << ", the default, output " << i << ", " << threads << " threads";
      }
    });
  }
}

// s = x + r and the norm of s against the double reference (the sum in double too), and bitwise
// equal to the unfused pair (axpy on a copy of x, then the norm) at 1 and 2 threads, and to the
// Device's default do_* (the unfused pair inside one call).
TEST(KernelAddNorm, MatchesTheReferenceAndIsBitwiseTheUnfusedPairAtAnyThreadCount) {
  const int64_t rows = 203, h = 130;  // 26390 elements: above the parallel threshold
  const auto x = random_scaled("an_x", rows * h, 2.0f), r = random_scaled("an_r", rows * h, 1.5f);
  const auto w = random_vector("an_w", h), b = random_vector("an_b", h);
  Vec sum_d(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum_d[i] = double{x[i]} + double{r[i]};
  for (const bool rms : {false, true}) {
    const std::string tag = rms ? "rmsnorm" : "layernorm";
    const NormRef ref = rms ? rmsnorm_ref(sum_d, to_d(w), rows, h, 1e-5)
                            : layernorm_ref(sum_d, to_d(w), to_d(b), rows, h, 1e-5);
    auto run = [&](tp::Device& dev, bool fused, std::vector<float> out[4]) {
      Tensor X = Tensor::from_host(dev, Shape{rows, h}, x),
             R = Tensor::from_host(dev, Shape{rows, h}, r);
      Tensor W = Tensor::from_host(dev, Shape{h}, w), B = Tensor::from_host(dev, Shape{h}, b);
      const std::vector<float> nan_rows(rows * h, kNaN), nan_stats(rows, kNaN);
      Tensor S = Tensor::from_host(dev, Shape{rows, h}, nan_rows);
      Tensor Y = Tensor::from_host(dev, Shape{rows, h}, nan_rows);
      Tensor mean = Tensor::from_host(dev, Shape{rows}, nan_stats);
      Tensor rstd = Tensor::from_host(dev, Shape{rows}, nan_stats);
      if (fused && rms) {
        dev.add_rmsnorm_forward(S, Y, rstd, X, R, W, 1e-5f);
      } else if (fused) {
        dev.add_layernorm_forward(S, Y, mean, rstd, X, R, W, B, 1e-5f);
      } else {
        S = X.clone();
        dev.axpy(1.0f, R, S);
        if (rms)
          dev.rmsnorm_forward(Y, rstd, S, W, 1e-5f);
        else
          dev.layernorm_forward(Y, mean, rstd, S, W, B, 1e-5f);
      }
      out[0] = S.to_host();
      out[1] = Y.to_host();
      out[2] = rms ? std::vector<float>() : mean.to_host();
      out[3] = rstd.to_host();
    };
    std::vector<float> want[4];
    run(device(), false, want);
    EXPECT_LE(rel_error(want[0], to_f(sum_d)), 1e-7) << tag;  // x + r rounded once
    EXPECT_LE(rel_error(want[1], to_f(ref.y)), kForwardTol) << tag;
    EXPECT_LE(rel_error(want[3], to_f(ref.rstd)), kForwardTol) << tag;
    if (!rms) {
      EXPECT_LE(rel_error(want[2], to_f(ref.mean)), kForwardTol) << tag;
    }
    expect_fused_bitwise(tag, 4, run);
  }
}

// The backward joined with the residual's gradient: dx = dres + the norm's dx against the double
// reference (finite differences of the double norm, plus dres), and bitwise equal to the unfused
// (the norm's backward, then axpy into a copy of dres) and to the default do_* at 1 and 2
// threads (one pass on one thread, the two parallel loops on two); dw, db accumulate as unfused.
TEST(KernelAddNorm, BackwardAddIsTheNormsDxPlusTheResidualsBitwise) {
  for (const bool rms : {false, true}) {
    const std::string tag = rms ? "rmsnorm" : "layernorm";
    {  // the reference, at a size finite differences afford
      const int64_t rows = 6, h = 7;
      const auto x = random_scaled("ba_x", rows * h, 2.0f),
                 dres = random_vector("ba_res", rows * h);
      const auto w = random_vector("ba_w", h), b = random_vector("ba_b", h);
      const Vec R = to_d(random_vector("ba_R", rows * h));
      Tensor X = on_device(Shape{rows, h}, x), W = on_device(Shape{h}, w),
             B = on_device(Shape{h}, b);
      Tensor Y(device(), Shape{rows, h}), mean(device(), Shape{rows}), rstd(device(), Shape{rows});
      if (rms)
        device().rmsnorm_forward(Y, rstd, X, W, 1e-5f);
      else
        device().layernorm_forward(Y, mean, rstd, X, W, B, 1e-5f);
      Tensor dY = on_device(Shape{rows, h}, to_f(R)), dRes = on_device(Shape{rows, h}, dres);
      Tensor dX = filled(Shape{rows, h}, kNaN), dW = filled(Shape{h}, 0.0f),
             dB = filled(Shape{h}, 0.0f);
      if (rms)
        device().rmsnorm_backward_add(dX, dW, dRes, dY, X, W, rstd);
      else
        device().layernorm_backward_add(dX, dW, dB, dRes, dY, X, W, mean, rstd);
      const Vec xd = to_d(x), wd = to_d(w), bd = to_d(b);
      Vec want = fd_grad(
          [&](const Vec& xx) {
        return rms ? rmsnorm_ref(xx, wd, rows, h, 1e-5).y
                   : layernorm_ref(xx, wd, bd, rows, h, 1e-5).y;
          },
          xd, R);
      for (size_t i = 0; i < want.size(); ++i) want[i] += dres[i];
      EXPECT_LE(rel_error(dX.to_host(), to_f(want)), kGradTol) << tag;
    }
    const int64_t rows = 203, h = 130;  // above the parallel threshold: two loops on two threads
    const auto x = random_scaled("bb_x", rows * h, 2.0f), dres = random_vector("bb_res", rows * h);
    const auto dy = random_vector("bb_dy", rows * h), w = random_vector("bb_w", h);
    const auto b = random_vector("bb_b", h), dw0 = random_vector("bb_dw0", h);
    auto run = [&](tp::Device& dev, bool fused, std::vector<float> out[3]) {
      auto put = [&](const Shape& sh, const std::vector<float>& v) {
        return Tensor::from_host(dev, sh, v);
      };
      Tensor X = put(Shape{rows, h}, x), W = put(Shape{h}, w), B = put(Shape{h}, b);
      Tensor Y(dev, Shape{rows, h}), mean(dev, Shape{rows}), rstd(dev, Shape{rows});
      if (rms)
        dev.rmsnorm_forward(Y, rstd, X, W, 1e-5f);
      else
        dev.layernorm_forward(Y, mean, rstd, X, W, B, 1e-5f);
      Tensor dY = put(Shape{rows, h}, dy), dRes = put(Shape{rows, h}, dres);
      Tensor dW = put(Shape{h}, dw0), dB = put(Shape{h}, dw0);
      Tensor dX = put(Shape{rows, h}, std::vector<float>(rows * h, kNaN));
      if (fused && rms) {
        dev.rmsnorm_backward_add(dX, dW, dRes, dY, X, W, rstd);
      } else if (fused) {
        dev.layernorm_backward_add(dX, dW, dB, dRes, dY, X, W, mean, rstd);
      } else {
        Tensor t(dev, Shape{rows, h});
        if (rms)
          dev.rmsnorm_backward(t, dW, dY, X, W, rstd);
        else
          dev.layernorm_backward(t, dW, dB, dY, X, W, mean, rstd);
        dX = dRes.clone();
        dev.axpy(1.0f, t, dX);
      }
      out[0] = dX.to_host();
      out[1] = dW.to_host();
      out[2] = dB.to_host();
    };
    expect_fused_bitwise(tag, 3, run);
  }
}

// With bf16 activations the front runs the Device's default do_* (whatever the backend), each of
// its kernels rounding as on its own stand-ins (the CPU's axpy and norms now read bf16 themselves,
// with those bits): s is rounded to bf16 before the norm reads it, and the
// backward's dx before it is added, as unfused; a shape mismatch is an error.
TEST(KernelAddNorm, Bf16RoundsAsUnfusedAndBadShapesAreErrors) {
  const int64_t rows = 7, h = 48;
  auto bf16 = [&](const std::vector<float>& v) {
    Tensor t(device(), Shape{rows, h}, tp::Dtype::bf16);
    t.copy_from_host(v);
    return t;
  };
  const Tensor X = bf16(random_scaled("anb_x", rows * h, 2.0f));
  const Tensor R = bf16(random_scaled("anb_r", rows * h, 2.0f));
  Tensor W = on_device(Shape{h}, random_vector("anb_w", h));
  Tensor B = on_device(Shape{h}, random_vector("anb_b", h));
  Tensor S(device(), Shape{rows, h}, tp::Dtype::bf16), Y(device(), Shape{rows, h}, tp::Dtype::bf16);
  Tensor mean(device(), Shape{rows}), rstd(device(), Shape{rows});
  device().add_layernorm_forward(S, Y, mean, rstd, X, R, W, B, 1e-5f);
  Tensor S0 = X.clone(), Y0(device(), Shape{rows, h}, tp::Dtype::bf16);
  Tensor mean0(device(), Shape{rows}), rstd0(device(), Shape{rows});
  device().axpy(1.0f, R, S0);
  device().layernorm_forward(Y0, mean0, rstd0, S0, W, B, 1e-5f);
  EXPECT_EQ(S.to_host(), S0.to_host());
  EXPECT_EQ(Y.to_host(), Y0.to_host());
  EXPECT_EQ(rstd.to_host(), rstd0.to_host());
  device().add_rmsnorm_forward(S, Y, rstd, X, R, W, 1e-5f);
  device().rmsnorm_forward(Y0, rstd0, S0, W, 1e-5f);
  EXPECT_EQ(S.to_host(), S0.to_host());
  EXPECT_EQ(Y.to_host(), Y0.to_host());

  // the backward: the norm's dx rounded to bf16, then added to dres in bf16, as unfused
  Tensor mean1(device(), Shape{rows}), rstd1(device(), Shape{rows});
  device().layernorm_forward(Y0, mean1, rstd1, S0, W, B, 1e-5f);
  Tensor dW = filled(Shape{h}, 0.0f), dB = filled(Shape{h}, 0.0f), dW0 = dW.clone(),
         dB0 = dB.clone();
  Tensor dX(device(), Shape{rows, h}, tp::Dtype::bf16),
      t(device(), Shape{rows, h}, tp::Dtype::bf16);
  device().layernorm_backward_add(dX, dW, dB, R, X, S0, W, mean1, rstd1);
  device().layernorm_backward(t, dW0, dB0, X, S0, W, mean1, rstd1);
  Tensor dX0 = R.clone();
  device().axpy(1.0f, t, dX0);
  EXPECT_EQ(dX.to_host(), dX0.to_host());
  EXPECT_EQ(dW.to_host(), dW0.to_host());
  EXPECT_EQ(dB.to_host(), dB0.to_host());
  device().rmsnorm_forward(Y0, rstd1, S0, W, 1e-5f);
  device().rmsnorm_backward_add(dX, dW, R, X, S0, W, rstd1);
  device().rmsnorm_backward(t, dW0, X, S0, W, rstd1);
  dX0 = R.clone();
  device().axpy(1.0f, t, dX0);
  EXPECT_EQ(dX.to_host(), dX0.to_host());
  EXPECT_EQ(dW.to_host(), dW0.to_host());

  Tensor short_r(device(), Shape{rows - 1, h}), Sf(device(), Shape{rows, h}),
      Yf(device(), Shape{rows, h}), Xf(device(), Shape{rows, h});
  EXPECT_THROW(device().add_layernorm_forward(Sf, Yf, mean, rstd, Xf, short_r, W, B, 1e-5f),
               tp::Error);
  EXPECT_THROW(device().add_rmsnorm_forward(Sf, Yf, rstd, Xf, short_r, W, 1e-5f), tp::Error);
  Tensor long_w(device(), Shape{h + 1});
  EXPECT_THROW(device().add_rmsnorm_forward(Sf, Yf, rstd, Xf, Xf, long_w, 1e-5f), tp::Error);
  Tensor dWf(device(), Shape{h}), dBf(device(), Shape{h});
  EXPECT_THROW(device().layernorm_backward_add(Sf, dWf, dBf, short_r, Yf, Xf, W, mean, rstd),
               tp::Error);
  EXPECT_THROW(device().rmsnorm_backward_add(Sf, dWf, Yf, Yf, Xf, long_w, rstd), tp::Error);
}

// ---- attention --------------------------------------------------------------------------------

AttentionShape attn_shape(int64_t S, int64_t B, int64_t nh, int64_t nkv, int64_t hd) {
  return {S, B, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
}

std::string attn_tag(const AttentionShape& s) {
  return "S=" + std::to_string(s.seq) + " B=" + std::to_string(s.batch) +
         " nh=" + std::to_string(s.heads) + " nkv=" + std::to_string(s.kv_heads) +
         " hd=" + std::to_string(s.head_dim);
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
    Tensor dQ = filled(c.Q.shape(), kNaN), dK = filled(c.K.shape(), kNaN),
           dV = filled(c.V.shape(), kNaN);
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

// Attention over a key/value cache: the queries of positions [past, S) against keys [0, S) give
// the full forward's rows of those positions, for a prefill (past = 0), a middle block and the
// last position alone (decoding). The keys and values are views of the full ones' first rows.
TEST(KernelAttention, CachedForwardMatchesForwardRows) {
  for (const AttentionShape& sh : kAttnShapes) {
    AttnCase c(sh);
    const int64_t S = sh.seq, B = sh.batch;
    const auto full = c.out.to_host();
    for (int64_t past : {int64_t{0}, int64_t{2}, S - 1}) {
      const int64_t n = S - past, qc = sh.heads * sh.head_dim;
      AttentionShape part = sh;
      part.seq = n;
      Tensor out = filled(Shape{n * B, qc}, kNaN);
      device().attention_cached_forward(out, c.Q.view(past * B, S * B), c.K, c.V, past, part);
      const std::vector<float> want(full.begin() + past * B * qc, full.end());
      EXPECT_LE(rel_error(out.to_host(), want), kForwardTol) << attn_tag(sh) << " past " << past;
      // Keys past the last query's position are never read: a shorter cache gives the same rows.
      if (past > 0) {
        AttentionShape one = sh;
        one.seq = 1;
        Tensor out1 = filled(Shape{B, qc}, kNaN);
        device().attention_cached_forward(out1, c.Q.view(past * B, (past + 1) * B),
                                          c.K.view(0, (past + 1) * B), c.V.view(0, (past + 1) * B),
                                          past, one);
        const std::vector<float> want1(full.begin() + past * B * qc,
                                       full.begin() + (past + 1) * B * qc);
        EXPECT_LE(rel_error(out1.to_host(), want1), kForwardTol)
            << attn_tag(sh) << " one at " << past;
      }
    }
  }
  // Bad sizes: k must hold past + n positions.
  const AttentionShape sh = attn_shape(2, 1, 2, 2, 2);
  Tensor q(device(), Shape{2, 4}), k(device(), Shape{3, 4}), v(device(), Shape{3, 4});
  Tensor out(device(), Shape{2, 4});
  EXPECT_THROW(device().attention_cached_forward(out, q, k, v, 2, sh), tp::Error);
  EXPECT_THROW(device().attention_cached_forward(out, q, k, v, -1, sh), tp::Error);
}

TEST(KernelAttention, BadShapesAreErrors) {
  AttentionShape sh = attn_shape(3, 2, 3, 2, 4);  // nh % nkv != 0
  Tensor q(device(), Shape{6, 12}), k(device(), Shape{6, 8}), v(device(), Shape{6, 8});
  Tensor out(device(), Shape{6, 12}), probs(device(), Shape{2, 3, 3, 3});
  EXPECT_THROW(device().attention_forward(out, probs, q, k, v, sh), tp::Error);
  sh = attn_shape(3, 2, 4, 2, 4);  // q is 6x12, not 6x16
  EXPECT_THROW(device().attention_forward(out, probs, q, k, v, sh), tp::Error);
}

// ---- attention: the CPU kernel's instruction sets ----------------------------------------------
// cpu_backend/kernels/attention.cpp is a register-tiled kernel built for AVX-512, AVX2 + FMA and
// the baseline; each variant this CPU runs is checked against the double reference, on shapes
// whose S and hd are not multiples of the tiles (tails in every loop), and the FMA variants,
// which add every element in the same order, are checked to give the same bits.

// The backward by its definition (core/device.h), in double, from the forward reference's P.
struct AttnGrads {
  Vec dq, dk, dv;
};
AttnGrads attention_backward_ref(const Vec& q, const Vec& k, const Vec& v, const Vec& dout,
                                 const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const Vec P = attention_ref(q, k, v, sh).probs;
  AttnGrads g{Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
  const auto qi = [&](int64_t s, int64_t b, int64_t j, int64_t e) {
    return (s * B + b) * nh * hd + j * hd + e;
  };
  const auto ki = [&](int64_t t, int64_t b, int64_t h, int64_t e) {
    return (t * B + b) * nkv * hd + h * hd + e;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j) {
      const int64_t h = j / (nh / nkv);
      for (int64_t s = 0; s < S; ++s) {
        const double* p = &P[((b * nh + j) * S + s) * S];
        Vec dp(s + 1, 0.0);
        double r = 0;
        for (int64_t t = 0; t <= s; ++t) {
          for (int64_t e = 0; e < hd; ++e) dp[t] += dout[qi(s, b, j, e)] * v[ki(t, b, h, e)];
          r += p[t] * dp[t];
        }
        for (int64_t t = 0; t <= s; ++t) {
          const double ds = p[t] * (dp[t] - r);
          for (int64_t e = 0; e < hd; ++e) {
            g.dq[qi(s, b, j, e)] += sh.scale * ds * k[ki(t, b, h, e)];
            g.dk[ki(t, b, h, e)] += sh.scale * ds * q[qi(s, b, j, e)];
            g.dv[ki(t, b, h, e)] += p[t] * dout[qi(s, b, j, e)];
          }
        }
      }
    }
  return g;
}

// Restores the default variant when a test ends, passed or not.
struct AttnIsaGuard {
  ~AttnIsaGuard() { tp::cpu::set_attention_isa(tp::cpu::attention_isas().front()); }
};

TEST(KernelAttentionIsa, EveryVariantMatchesTheReference) {
  const std::vector<std::string> isas = tp::cpu::attention_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "base");  // the baseline runs everywhere
  const AttentionShape shapes[] = {
      attn_shape(37, 2, 4, 2, 40),  // GQA; S, hd past the tiles and the panels' 32
      attn_shape(70, 1, 3, 3, 16),  // MHA; three 32-key chunks, the last ragged
      attn_shape(5, 2, 4, 2, 3),    // the kernel tests' smallest
  };
  AttnIsaGuard guard;
  std::vector<std::vector<std::vector<float>>> got(isas.size());  // [isa][shape·5 + tensor]
  for (size_t i = 0; i < isas.size(); ++i) {
    tp::cpu::set_attention_isa(isas[i]);
    for (const AttentionShape& sh : shapes) {
      const std::string tag = isas[i] + " " + attn_tag(sh);
      AttnCase c(sh);
      const Vec q = to_d(c.q), k = to_d(c.k), v = to_d(c.v);
      const AttnRef ref = attention_ref(q, k, v, sh);
      EXPECT_LE(rel_error(c.out.to_host(), to_f(ref.out)), kForwardTol) << tag;
      EXPECT_LE(rel_error(c.probs.to_host(), to_f(ref.probs)), kForwardTol) << tag;
      const std::vector<float> r = random_vector("R" + attn_tag(sh), c.Q.numel());
      Tensor dOut = on_device(c.Q.shape(), r);
      Tensor dQ = filled(c.Q.shape(), kNaN), dK = filled(c.K.shape(), kNaN),
             dV = filled(c.V.shape(), kNaN);
      device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.probs, sh);
      const AttnGrads want = attention_backward_ref(q, k, v, to_d(r), sh);
      // the same bound as the forward: an analytic reference, no finite differences
      EXPECT_LE(rel_error(dQ.to_host(), to_f(want.dq)), kForwardTol) << tag;
      EXPECT_LE(rel_error(dK.to_host(), to_f(want.dk)), kForwardTol) << tag;
      EXPECT_LE(rel_error(dV.to_host(), to_f(want.dv)), kForwardTol) << tag;
      // the cached forward of the last S − 3 positions gives the forward's rows
      const int64_t past = 3, n = sh.seq - past, qc = sh.heads * sh.head_dim;
      AttentionShape part = sh;
      part.seq = n;
      Tensor cached = filled(Shape{n * sh.batch, qc}, kNaN);
      device().attention_cached_forward(cached, c.Q.view(past * sh.batch, sh.seq * sh.batch), c.K,
                                        c.V, past, part);
      const std::vector<float> full = c.out.to_host();
      const std::vector<float> rows(full.begin() + past * sh.batch * qc, full.end());
      EXPECT_LE(rel_error(cached.to_host(), rows), kForwardTol) << tag << " cached";
      for (Tensor* t : {&c.out, &c.probs, &dQ, &dK, &dV}) got[i].push_back(t->to_host());
    }
  }
  // AVX-512 and AVX2 + FMA: each element is the same chain of fused multiply-adds.
  std::vector<size_t> fma;
  for (size_t i = 0; i < isas.size(); ++i)
    if (isas[i] != "base") fma.push_back(i);
  for (size_t f = 1; f < fma.size(); ++f)
    for (size_t t = 0; t < got[fma[0]].size(); ++t)
      EXPECT_EQ(got[fma[0]][t], got[fma[f]][t])
          << isas[fma[0]] << " vs " << isas[fma[f]] << ", tensor " << t;
}

// The forward and the cached forward, like the backward above, give the same bits on 1 and 2
// threads (one (b, j) pair runs whole on one thread).
TEST(KernelAttentionIsa, ForwardIsThreadIndependent) {
  const AttentionShape sh = attn_shape(64, 2, 4, 2, 16);
  AttnCase c(sh);
  std::vector<float> out[2], probs[2], cached[2];
  const int64_t past = 40, n = sh.seq - past, B = sh.batch;
  AttentionShape part = sh;
  part.seq = n;
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor o = filled(c.Q.shape(), kNaN), p = filled(c.probs.shape(), kNaN);
      device().attention_forward(o, p, c.Q, c.K, c.V, sh);
      Tensor oc = filled(Shape{n * B, sh.heads * sh.head_dim}, kNaN);
      device().attention_cached_forward(oc, c.Q.view(past * B, sh.seq * B), c.K, c.V, past, part);
      out[t - 1] = o.to_host();
      probs[t - 1] = p.to_host();
      cached[t - 1] = oc.to_host();
    });
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(probs[0], probs[1]);
  EXPECT_EQ(cached[0], cached[1]);
}

TEST(KernelAttentionIsa, UnknownVariantIsAnError) {
  EXPECT_THROW(tp::cpu::set_attention_isa("avx9000"), tp::Error);
}

// ---- vocabulary-parallel embedding ------------------------------------------------------------

// The vocabulary split of the model: V tokens padded to Vp = t·ceil(V / t); shard p holds the ids
// [p·Vp/t, (p + 1)·Vp/t).
int64_t padded_vocab(int64_t V, int64_t t) { return (V + t - 1) / t * t; }

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

// ---- the checks belong to tp::Device ----------------------------------------------------------

using tp::AdamWParams;
using tp::Distribution;
using tp::GemmDims;
using tp::GlobalIndex;
using tp::RngKey;
using tp::VocabShard;

// A backend that checks nothing: host memory, and every do_* only records that it ran. If the
// public kernels did not check, bad arguments would reach it. `host_accessible` picks how the base
// reads ids for their check: in place, or through copy_to_host.
class RecordingDevice final : public tp::Device {
 public:
  explicit RecordingDevice(bool host_accessible) : host_(host_accessible) {}
  int calls = 0;                // do_* calls so far
  GemmDims dims;                // what the last do_gemm was given
  int64_t real_cols = -1;       // ... do_vocab_max
  std::vector<float> host_ids;  // ... do_embedding_shard_backward (numel of ids of them)

  std::string name() const override { return "recording"; }
  bool host_accessible() const override { return host_; }
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void deallocate(void* ptr) override { std::free(ptr); }
  void copy_from_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { std::memmove(d, s, n); }
  void synchronize() override {}

 protected:
  void do_fill(Tensor&, float) override { ++calls; }
  void do_scale(Tensor&, float) override { ++calls; }
  void do_axpy(float, const Tensor&, Tensor&) override { ++calls; }
  void do_gemm(bool, bool, float, const Tensor&, const Tensor&, float, Tensor&,
               const GemmDims& d) override {
    ++calls;
    dims = d;
  }
  void do_add_bias(Tensor&, const Tensor&) override { ++calls; }
  void do_add_bias_backward(Tensor&, const Tensor&) override { ++calls; }
  void do_copy_columns(const Tensor&, int64_t, Tensor&, int64_t, int64_t) override { ++calls; }
  void do_fill_random(Tensor&, const RngKey&, const GlobalIndex&, const Distribution&) override {
    ++calls;
  }
  void do_mul(const Tensor&, const Tensor&, Tensor&) override { ++calls; }
  double do_sum_squares(const Tensor&) override { return ++calls; }
  void do_dropout_mask(Tensor&, const RngKey&, const GlobalIndex&, float) override { ++calls; }
  void do_gelu_forward(Tensor&, const Tensor&) override { ++calls; }
  void do_gelu_backward(Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void do_swiglu_forward(Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void do_swiglu_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
    ++calls;
  }
  void do_layernorm_forward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            float) override {
    ++calls;
  }
  void do_layernorm_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&) override {
    ++calls;
  }
  void do_rmsnorm_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, float) override {
    ++calls;
  }
  void do_rmsnorm_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&) override {
    ++calls;
  }
  void do_attention_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const AttentionShape&) override {
    ++calls;
  }
  void do_attention_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const AttentionShape&) override {
    ++calls;
  }
  void do_attention_cached_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                                   const AttentionShape&) override {
    ++calls;
  }
  void do_embedding_shard_forward(Tensor&, const Tensor&, const Tensor&, int64_t) override {
    ++calls;
  }
  void do_embedding_shard_backward(Tensor&, const Tensor&, const Tensor& ids, int64_t,
                                   const float* host) override {
    ++calls;
    host_ids.assign(host, host + ids.numel());
  }
  void do_position_forward(Tensor&, const Tensor&, int64_t, int64_t) override { ++calls; }
  void do_position_backward(Tensor&, const Tensor&, int64_t, int64_t) override { ++calls; }
  void do_vocab_max(Tensor&, const Tensor&, const VocabShard&, int64_t real) override {
    ++calls;
    real_cols = real;
  }
  void do_vocab_sum_exp_target(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const VocabShard&, int64_t) override {
    ++calls;
  }
  void do_vocab_loss(Tensor&, const Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void do_vocab_softmax_backward(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const VocabShard&, float, int64_t) override {
    ++calls;
  }
  void do_adamw_step(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWParams&,
                     int64_t) override {
    ++calls;
  }

 private:
  bool host_;
};

TEST(DeviceChecks, EveryKernelRejectsATensorOfAnotherDeviceBeforeTheBackendRuns) {
  RecordingDevice dev(true);
  Tensor x(dev, Shape{2, 4});
  Tensor other = filled(Shape{2, 4}, 0.0f);  // on the tests' CPU device
  const RngKey key = RngKey::from(1, "checks");
  const GlobalIndex index = GlobalIndex::whole(4);
  const AttentionShape sh{2, 1, 1, 1, 4, 0.5f};
  const VocabShard shard{0, 4};
  const std::vector<std::function<void()>> kernels = {
      [&] {
    dev.fill(other, 1.0f);
      },
      [&] {
    dev.scale(other, 2.0f);
  },
                                           [&] {
    dev.axpy(1.0f, other, x);
  },
      [&] { dev.gemm(false, true, 1.0f, other, x, 0.0f, x); }, [&] { dev.add_bias(x, other); },
      [&] { dev.add_bias_backward(other, x); }, [&] { dev.copy_columns(other, 0, x, 0, 4); },
      [&] { dev.fill_random(other, key, index, Distribution::uniform(0.0f, 1.0f)); },
      [&] { dev.mul(x, other, x); }, [&] { dev.sum_squares(other); },
      [&] { dev.dropout_mask(other, key, index, 0.1f); }, [&] { dev.gelu_forward(x, other); },
      [&] { dev.gelu_backward(x, x, other); }, [&] { dev.swiglu_forward(x, x, other); },
      [&] { dev.bias_gelu_forward(x, other, x); },
      [&] { dev.bias_gelu_backward(x, x, x, other, x); },
      [&] { dev.swiglu_backward(x, x, x, x, other); },
      [&] { dev.layernorm_forward(x, x, x, x, x, other, 1e-5f); },
      [&] { dev.layernorm_backward(x, x, x, x, x, x, x, other); },
      [&] { dev.rmsnorm_forward(x, x, other, x, 1e-5f); },
      [&] { dev.rmsnorm_backward(x, x, x, x, x, other); },
      [&] { dev.attention_forward(x, x, other, x, x, sh); },
      [&] { dev.attention_backward(x, x, x, x, x, x, x, other, sh); },
      [&] { dev.attention_cached_forward(x, x, x, other, 0, sh); },
      [&] { dev.embedding_shard_forward(x, other, x, 0); },
      [&] { dev.embedding_shard_backward(x, x, other, 0); },
      [&] { dev.position_forward(x, other, 1, 0); }, [&] { dev.position_backward(other, x, 1, 0); },
      [&] { dev.vocab_max(x, other, shard); },
      [&] { dev.vocab_sum_exp_target(x, x, x, x, other, shard); },
      [&] { dev.vocab_loss(x, x, x, other); },
      [&] { dev.vocab_softmax_backward(x, x, x, x, other, shard, 1.0f); },
      [&] { dev.adamw_step(x, x, x, other, AdamWParams{}, 1); },
      };
  dev.fill(x, 0.0f);  // a good call reaches the backend
  ASSERT_EQ(dev.calls, 1);
  for (size_t i = 0; i < kernels.size(); ++i) {
    try {
      kernels[i]();
      ADD_FAILURE() << "kernel " << i << " accepted a tensor of another device";
    } catch (const tp::Error& e) {
      EXPECT_NE(std::string(e.what()).find("lives on another device"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(dev.calls, 1) << "a kernel reached its do_* with a tensor of another device";
}

TEST(DeviceChecks, TheBackendGetsWhatTheCheckWorkedOut) {
  for (const bool host : {true, false}) {  // ids read in place, or copied with copy_to_host
    RecordingDevice dev(host);
    Tensor a(dev, Shape{3, 2}), b(dev, Shape{5, 3}), c(dev, Shape{2, 5});
    dev.gemm(true, true, 1.0f, a, b, 0.0f, c);  // C (2×5) = Aᵀ (2×3) · Bᵀ (3×5)
    EXPECT_EQ(dev.dims.m, 2);
    EXPECT_EQ(dev.dims.n, 5);
    EXPECT_EQ(dev.dims.k, 3);

    Tensor logits(dev, Shape{2, 4}), row_max(dev, Shape{2});
    dev.vocab_max(row_max, logits, VocabShard{8, 11});  // ids 8..11, of which 8..10 are tokens
    EXPECT_EQ(dev.real_cols, 3);

    const std::vector<float> ids = {3.0f, 0.0f, 3.0f};
    Tensor Ids = Tensor::from_host(dev, Shape{3}, ids);
    Tensor dwte(dev, Shape{4, 2}), dout(dev, Shape{3, 2});
    dev.embedding_shard_backward(dwte, dout, Ids, 0);
    EXPECT_EQ(dev.host_ids, ids);
    EXPECT_EQ(dev.calls, 3);

    Tensor bad = Tensor::from_host(dev, Shape{3}, {3.0f, 0.5f, 1.0f});  // 0.5 is not a token
    EXPECT_THROW(dev.embedding_shard_backward(dwte, dout, bad, 0), tp::Error);
    EXPECT_EQ(dev.calls, 3);
  }
}

}  // namespace
