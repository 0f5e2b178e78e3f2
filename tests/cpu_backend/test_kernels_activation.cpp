// test_kernels_activation.cpp — the CPU activations (cpu_backend/kernels/activation.cpp): GeLU,
// SwiGLU and the fused bias + GeLU against double references and finite differences
// (kernel_test_util.h); the fused kernel also bit for bit against add_bias + gelu (its contract), and
// in bf16 (serial).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

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

}  // namespace
