// test_kernels_norm.cpp — the CPU norms (cpu_backend/kernels/norm.cpp): LayerNorm and RMSNorm
// against double references and finite differences (kernel_test_util.h), thread independence, and
// the residual add fused with the norm bit for bit the unfused pair (serial).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "cpu_device.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

// ---- double references ------------------------------------------------------------------------

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

}  // namespace
