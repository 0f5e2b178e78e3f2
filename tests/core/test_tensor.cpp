// test_tensor.cpp — Shape, Tensor views and copies, the storage dtype (bf16 bytes, Device::convert,
// the kernels' one-line refusal of bf16), the divisibility message (serial).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;

TEST(Shape, SizesAndTwoDimensionalView) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.cols(), 4);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(s.with(0, 5), (Shape{5, 3, 4}));
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), Error);
}

TEST(Tensor, HostRoundTripViewReshapeClone) {
  Tensor t = Tensor::from_host(device(), Shape{3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.to_host(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor v = t.view(1, 3);  // rows 1..2, shares memory
  EXPECT_EQ(v.shape(), (Shape{2, 2}));
  EXPECT_EQ(v.to_host(), (std::vector<float>{3, 4, 5, 6}));
  Tensor c = t.clone();
  device().fill(v, 0.0f);
  EXPECT_EQ(t.to_host(), (std::vector<float>{1, 2, 0, 0, 0, 0}));
  EXPECT_EQ(c.to_host(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.reshape(Shape{6}).shape(), (Shape{6}));
  EXPECT_THROW(t.reshape(Shape{4}), Error);
  EXPECT_THROW(t.view(2, 4), Error);
  EXPECT_THROW(t.copy_from_host({1, 2}), Error);
}

TEST(Tensor, ElementwiseAndLayoutKernels) {
  Tensor y = Tensor::from_host(device(), Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor x = Tensor::from_host(device(), Shape{2, 3}, {1, 1, 1, 1, 1, 1});
  device().axpy(2.0f, x, y);
  device().scale(y, 0.5f);
  EXPECT_EQ(y.to_host(), (std::vector<float>{1.5, 2, 2.5, 3, 3.5, 4}));
  Tensor b = Tensor::from_host(device(), Shape{3}, {10, 20, 30});
  device().add_bias(y, b);
  EXPECT_EQ(y.to_host(), (std::vector<float>{11.5, 22, 32.5, 13, 23.5, 34}));
  Tensor db = Tensor::zeros(device(), Shape{3});
  device().add_bias_backward(db, y);
  device().add_bias_backward(db, y);  // accumulates
  EXPECT_EQ(db.to_host(), (std::vector<float>{49, 91, 133}));
  Tensor dst = Tensor::zeros(device(), Shape{2, 4});
  device().copy_columns(y, 1, dst, 2, 2);
  EXPECT_EQ(dst.to_host(), (std::vector<float>{0, 0, 22, 32.5, 0, 0, 23.5, 34}));
}

// ---- storage dtype -------------------------------------------------------------------------------

TEST(Dtype, Bf16TensorHasTwoByteElementsAndTracksHalfTheMemory) {
  Device& dev = device();
  const int64_t before = dev.memory().in_use;
  Tensor t32(dev, Shape{3, 4});
  EXPECT_EQ(t32.dtype(), Dtype::f32);  // the default: no call site changes
  EXPECT_EQ(t32.bytes(), 48u);
  Tensor t16(dev, Shape{3, 4}, Dtype::bf16);
  EXPECT_EQ(t16.element_size(), 2);
  EXPECT_EQ(t16.bytes(), 24u);
  EXPECT_EQ(dev.memory().in_use - before, 48 + 24);
  // A view of rows 1..2 starts 4 elements = 8 bytes in; a clone keeps the dtype.
  Tensor z = Tensor::zeros(dev, Shape{3, 4}, Dtype::bf16);
  EXPECT_EQ(z.to_host(), std::vector<float>(12, 0.0f));
  Tensor v = t16.view(1, 3);
  EXPECT_EQ(static_cast<char*>(v.raw()) - static_cast<char*>(t16.raw()), 8);
  EXPECT_EQ(t16.clone().dtype(), Dtype::bf16);
  // data() is the f32 pointer only; a copy between dtypes is a convert.
  EXPECT_THROW(t16.data(), Error);
  EXPECT_THROW(t16.copy_from(t32), Error);
}

TEST(Dtype, ConvertRoundsToNearestEvenAndWidensExactly) {
  Device& dev = device();
  const float inf = std::numeric_limits<float>::infinity();
  const float max_bf16 = std::ldexp(255.0f / 128.0f, 127);  // 0x7f7f
  // value → the bf16 it must become: exact values; ties to even (down and up); above and below a
  // tie; a carry into the exponent; overflow to inf; a subnormal; signs; NaN.
  const std::vector<float> in = {1.0f,
                                 -3.0f,
                                 1.0f + 1.0f / 256,  // tie between 1 and 1 + 2^−7: even is 1
                                 1.0f + 3.0f / 256,  // tie: even is 1 + 2^−6
                                 1.0f + 1.0f / 256 + 1.0f / 65536,
                                 2.0f - 1.0f / 512,  // rounds up into 2
                                 max_bf16 * (1.0f + 1.0f / 256),
                                 std::ldexp(1.0f, -130),
                                 -0.0f,
                                 std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> want = {
      1.0f,  -3.0f, 1.0f, 1.0f + 4.0f / 256, 1.0f + 2.0f / 256, 2.0f, inf, std::ldexp(1.0f, -130),
      -0.0f, 0.0f};
  const int64_t n = static_cast<int64_t>(in.size());
  Tensor x = Tensor::from_host(dev, Shape{n}, in);
  Tensor y(dev, Shape{n}, Dtype::bf16), back(dev, Shape{n});
  dev.convert(x, y);
  dev.convert(y, back);
  const std::vector<float> got = back.to_host();
  for (int64_t i = 0; i + 1 < n; ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
  EXPECT_TRUE(std::isnan(got[n - 1]));
  EXPECT_TRUE(std::signbit(got[n - 2]));
  // The host path (from_host into bf16) and the kernel agree, and bf16 → f32 → bf16 is the identity.
  Tensor h = Tensor::from_host(dev, Shape{n}, in, Dtype::bf16);
  const std::vector<float> hv = h.to_host();
  for (int64_t i = 0; i + 1 < n; ++i) EXPECT_EQ(hv[i], got[i]) << "element " << i;
  Tensor again(dev, Shape{n}, Dtype::bf16);
  dev.convert(back, again);
  const std::vector<float> av = again.to_host();
  for (int64_t i = 0; i + 1 < n; ++i) EXPECT_EQ(av[i], got[i]) << "element " << i;
  // Many values across threads: the relative error is at most u = 2^−8 (half an ulp, 8-bit
  // significand).
  const int64_t m = 1 << 16;
  std::vector<float> big = tp::testing::random_vector("convert", m);
  Tensor bx = Tensor::from_host(dev, Shape{m}, big), by(dev, Shape{m}, Dtype::bf16);
  dev.convert(bx, by);
  const std::vector<float> bv = by.to_host();
  for (int64_t i = 0; i < m; ++i)
    ASSERT_LE(std::fabs(bv[i] - big[i]), std::ldexp(std::fabs(big[i]), -8)) << i;
  // Sizes must agree.
  Tensor wrong(dev, Shape{n + 1}, Dtype::bf16);
  EXPECT_THROW(dev.convert(x, wrong), Error);
}

TEST(Dtype, AnF32OnlyKernelRefusesBf16WithOneLineNamingItAndTheBackend) {
  // The CPU takes bf16 in every kernel but adamw_step, which updates fp32 master weights only.
  Device& dev = device();
  Tensor p(dev, Shape{8}, Dtype::bf16), g = Tensor::zeros(dev, Shape{8});
  Tensor m = Tensor::zeros(dev, Shape{8}), v = Tensor::zeros(dev, Shape{8});
  EXPECT_EQ(dev.backend(), "cpu");
  EXPECT_FALSE(dev.takes_bf16(tp::Kernel::adamw_step));
  EXPECT_TRUE(dev.takes_bf16(tp::Kernel::layernorm_forward));
  try {
    dev.adamw_step(p, g, m, v, AdamWParams{}, 1);
    ADD_FAILURE() << "adamw_step took bf16";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("cpu: adamw_step has no bf16 kernel", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(e.exit_code(), 2);
  }
  // The rule is in the common check: any of the four tensors in bf16 is refused.
  Tensor p32 = Tensor::zeros(dev, Shape{8}), m16(dev, Shape{8}, Dtype::bf16);
  EXPECT_THROW(dev.adamw_step(p32, g, m16, v, AdamWParams{}, 1), Error);
}

TEST(Dtype, ABf16KernelWidensComputesInF32AndRoundsEachOutputOnce) {
  // The widening path (Device front, core/device.h "Dtypes"): a bf16 kernel's output is the f32
  // kernel's output on the widened inputs, rounded to nearest even once — bit for bit.
  Device& dev = device();
  const int64_t rows = 5, cols = 16;
  const std::vector<float> xs = tp::testing::random_vector("widen.x", rows * cols);
  Tensor x16 = Tensor::from_host(dev, Shape{rows, cols}, xs, Dtype::bf16);
  Tensor x32 = Tensor::from_host(dev, Shape{rows, cols}, x16.to_host());  // the same values
  Tensor w = Tensor::from_host(dev, Shape{cols}, tp::testing::random_vector("widen.w", cols));
  Tensor b = Tensor::from_host(dev, Shape{cols}, tp::testing::random_vector("widen.b", cols));
  Tensor y16(dev, Shape{rows, cols}, Dtype::bf16), y32(dev, Shape{rows, cols});
  Tensor mean16(dev, Shape{rows}), rstd16(dev, Shape{rows}), mean32(dev, Shape{rows}),
      rstd32(dev, Shape{rows});
  dev.layernorm_forward(y16, mean16, rstd16, x16, w, b, 1e-5f);
  dev.layernorm_forward(y32, mean32, rstd32, x32, w, b, 1e-5f);
  const std::vector<float> a = y16.to_host(), ref = y32.to_host();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], round_to_bf16(ref[i])) << i;
  EXPECT_EQ(mean16.to_host(), mean32.to_host());  // the statistics stay f32, unrounded
  EXPECT_EQ(rstd16.to_host(), rstd32.to_host());
  // A GEMM of bf16 operands into an f32 accumulator (a weight gradient, beta = 1): f32 out.
  Tensor c = Tensor::from_host(dev, Shape{cols, cols}, std::vector<float>(cols * cols, 1.0f));
  Tensor c32 = c.clone();
  dev.gemm(true, false, 1.0f, x16, x16, 1.0f, c);
  dev.gemm(true, false, 1.0f, x32, x32, 1.0f, c32);
  EXPECT_EQ(c.to_host(), c32.to_host());
  // In place (y aliases x): mul of a bf16 tensor by itself.
  Tensor sq = x16.clone();
  dev.mul(sq, sq, sq);
  const std::vector<float> xv = x16.to_host(), sv = sq.to_host();
  for (size_t i = 0; i < xv.size(); ++i) ASSERT_EQ(sv[i], round_to_bf16(xv[i] * xv[i])) << i;
}

TEST(CheckDivisible, MessageNamesValueTAndChoices) {
  EXPECT_NO_THROW(check_divisible("out", 12, 3));
  try {
    check_divisible("out", 7, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(
        std::string(e.what()),
        "out=7 is not divisible by t=3 (the number of ranks); run with t in {1, 7} or change out");
  }
}

}  // namespace
