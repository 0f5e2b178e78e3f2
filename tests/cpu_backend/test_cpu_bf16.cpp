// test_cpu_bf16.cpp — the CPU's native bf16 kernels against the stand-in path, bit for bit.
//
// A kernel the CPU reads and writes bf16 in (CpuDevice::native_bf16; kernels/kernel_util.h,
// "storage") promises the bits of the Device front's stand-in path: every bf16 tensor widened
// exactly into an f32 copy, the f32 kernel, each bf16 output rounded to nearest even once
// (core/device.h, "Dtypes"). The reference here is that path itself: a CpuDevice whose native_bf16
// answers false for every kernel but the GEMM (StandInCpuDevice), so the front widens and rounds.
// Each kernel runs on both devices from the same inputs, for every mix of dtypes of its tensors
// (the model's bf16 activations with f32 statistics and weight gradients, and the others), on odd
// shapes (one element, a row of 1, widths that are no multiple of a vector, one above the size
// where the loops go parallel), with NaN, ±inf, ±0, subnormals, the largest float (which rounds up
// to inf in bf16) and values whose result falls exactly halfway between two bf16 numbers (ties to
// even); every output must match bit for bit (a NaN as a NaN: bits_of says why). The native call
// must also allocate nothing (no stand-in copies), which shows the native loop ran, while the
// reference call does. Serial (test_serial).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "cpu_device.h"
#include "test_util.h"

namespace {

using tp::Device;
using tp::Dtype;
using tp::Kernel;
using tp::Shape;
using tp::Tensor;
using tp::testing::random_vector;

// The stand-in path on the CPU: the same device with only the GEMM native (as CpuDevice has it).
class StandInCpuDevice : public tp::CpuDevice {
 public:
  bool native_bf16(Kernel kernel) const override {
    return kernel == Kernel::gemm && CpuDevice::native_bf16(kernel);
  }
};

Device& native() { return tp::testing::device(); }
Device& stand_in() {
  static StandInCpuDevice dev;
  return dev;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Uniform in [-a, a), keyed by name, with awkward values mixed in: NaN, ±inf, ±0, a subnormal, the
// largest float, and floats whose low 16 bits are exactly half a bf16 unit (an f32 tensor holding
// one is a tie when rounded; a bf16 tensor rounds it to even on the way in).
std::vector<float> awkward(const std::string& name, int64_t n, float a) {
  std::vector<float> v = random_vector(name, n);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           0.0f,
                           -0.0f,
                           from_bits(0x00012345u),  // subnormal
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max()};
  for (int64_t i = 0; i < n; ++i) {
    v[i] *= a;
    if (i % 5 == 3) v[i] = from_bits((to_bits(v[i]) & 0xffff0000u) | 0x8000u);  // a tie in f32
    if (i % 9 == 7) v[i] = special[(i / 9) % 8];
  }
  return v;
}

// Shapes: one element, a row of 1, a column of 1, odd widths, and one above kParallelMin
// (16384 elements) so the OpenMP paths run too.
const Shape kShapes[] = {Shape{1, 1},  Shape{1, 17},  Shape{5, 1},
                         Shape{3, 33}, Shape{37, 65}, Shape{130, 129}};

// One tensor of a call: its shape (from the call's rows × cols) and values. Written outputs start
// as NaN, so that a kernel that failed to write one fails the comparison.
struct Arg {
  enum Kind { Matrix, Row, Column } kind;  // (rows, cols); (cols): a bias; (rows): a statistic
  const char* name;
  float scale;  // input values in [-scale, scale); 0: a written output (NaN)
};

// The bits of each element (bf16 widens exactly), but a NaN's: every NaN reads as one value. Which
// NaN an operation returns when both operands are NaN (an input's quiet NaN, or the x86 default
// NaN, sign set, that an invalid operation such as inf − inf makes) is the first operand's, and the
// compiler orders the operands of a + b per compiled loop, so the f32 kernel's own clones (AVX-512,
// AVX2, baseline) may already differ in a NaN's sign; where a value is NaN is what must match.
std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> b;
  for (float f : t.to_host()) b.push_back(f != f ? 0x7fc00000u : to_bits(f));
  return b;
}

using Call = std::function<void(Device&, std::vector<Tensor>&)>;

// Runs `call` on the native device and on the stand-in device for every shape and every mix of
// the args' dtypes, and expects each tensor's bits to match.
void expect_stand_in_bits(Kernel kernel, const std::vector<Arg>& args, const Call& call) {
  const char* name = tp::kernel_name(kernel);
  ASSERT_TRUE(native().native_bf16(kernel)) << name;
  ASSERT_FALSE(stand_in().native_bf16(kernel)) << name;
  const int n = static_cast<int>(args.size());
  for (const Shape& s : kShapes) {
    for (int mask = 1; mask < (1 << n); ++mask) {  // bit j: args[j] is bf16 (0: all f32, no test)
      std::string tag =
          std::string(name) + " " + std::to_string(s[0]) + "x" + std::to_string(s[1]) + " dtypes";
      std::vector<Tensor> nat, ref;
      for (int j = 0; j < n; ++j) {
        const Dtype d = (mask >> j & 1) ? Dtype::bf16 : Dtype::f32;
        tag += std::string(" ") + args[j].name + ":" + tp::dtype_name(d);
        const Shape shape = args[j].kind == Arg::Row      ? Shape{s[1]}
                            : args[j].kind == Arg::Column ? Shape{s[0]}
                                                          : s;
        const std::vector<float> v =
            args[j].scale == 0
                ? std::vector<float>(static_cast<size_t>(shape.numel()),
                                     std::numeric_limits<float>::quiet_NaN())
                : awkward(std::string(name) + args[j].name, shape.numel(), args[j].scale);
        nat.push_back(Tensor::from_host(native(), shape, v, d));
        ref.push_back(Tensor::from_host(stand_in(), shape, v, d));
      }
      const int64_t before = native().memory().allocations;
      call(native(), nat);
      EXPECT_EQ(native().memory().allocations, before) << tag << ": the native call allocated";
      const int64_t ref_before = stand_in().memory().allocations;
      call(stand_in(), ref);
      EXPECT_GT(stand_in().memory().allocations, ref_before) << tag << ": no stand-in was made";
      for (int j = 0; j < n; ++j)
        EXPECT_EQ(bits_of(nat[j]), bits_of(ref[j])) << tag << " " << args[j].name;
    }
  }
}

TEST(CpuBf16Native, FillScaleAndMulAreTheStandInPathBitForBit) {
  for (const float v : {1.3f, from_bits(0x3f808000u)})  // the second a tie: 1 + 2^−8
    expect_stand_in_bits(Kernel::fill, {{Arg::Matrix, "x", 0.0f}},
                         [&](Device& dev, std::vector<Tensor>& t) { dev.fill(t[0], v); });
  expect_stand_in_bits(Kernel::scale, {{Arg::Matrix, "x", 3.0f}},
                       [](Device& dev, std::vector<Tensor>& t) { dev.scale(t[0], -0.37f); });
  expect_stand_in_bits(
      Kernel::mul, {{Arg::Matrix, "x", 3.0f}, {Arg::Matrix, "m", 2.0f}, {Arg::Matrix, "y", 0.0f}},
      [](Device& dev, std::vector<Tensor>& t) {
    dev.mul(t[0], t[1], t[2]);
    dev.mul(t[2], t[1], t[2]);  // y may alias x
      });
}

TEST(CpuBf16Native, AxpyIsTheStandInPathBitForBit) {
  for (const float alpha : {1.0f, -0.37f})
    expect_stand_in_bits(Kernel::axpy, {{Arg::Matrix, "x", 3.0f}, {Arg::Matrix, "y", 2.0f}},
                         [&](Device& dev, std::vector<Tensor>& t) { dev.axpy(alpha, t[0], t[1]); });
}

TEST(CpuBf16Native, AddBiasAndItsBackwardAreTheStandInPathBitForBit) {
  expect_stand_in_bits(Kernel::add_bias, {{Arg::Matrix, "y", 2.0f}, {Arg::Row, "b", 1.0f}},
                       [](Device& dev, std::vector<Tensor>& t) { dev.add_bias(t[0], t[1]); });
  // db accumulates: it starts from values, not NaN.
  expect_stand_in_bits(
      Kernel::add_bias_backward, {{Arg::Row, "db", 1.0f}, {Arg::Matrix, "dy", 2.0f}},
      [](Device& dev, std::vector<Tensor>& t) { dev.add_bias_backward(t[0], t[1]); });
}

TEST(CpuBf16Native, GeluForwardAndBackwardAreTheStandInPathBitForBit) {
  expect_stand_in_bits(Kernel::gelu_forward, {{Arg::Matrix, "y", 0.0f}, {Arg::Matrix, "x", 4.0f}},
                       [](Device& dev, std::vector<Tensor>& t) { dev.gelu_forward(t[0], t[1]); });
  expect_stand_in_bits(
      Kernel::gelu_backward,
      {{Arg::Matrix, "dx", 0.0f}, {Arg::Matrix, "dy", 2.0f}, {Arg::Matrix, "x", 4.0f}},
      [](Device& dev, std::vector<Tensor>& t) { dev.gelu_backward(t[0], t[1], t[2]); });
}

TEST(CpuBf16Native, BiasGeluForwardAndBackwardAreTheStandInPathBitForBit) {
  expect_stand_in_bits(
      Kernel::bias_gelu_forward,
      {{Arg::Matrix, "y", 0.0f}, {Arg::Matrix, "x", 4.0f}, {Arg::Row, "b", 1.0f}},
      [](Device& dev, std::vector<Tensor>& t) { dev.bias_gelu_forward(t[0], t[1], t[2]); });
  expect_stand_in_bits(Kernel::bias_gelu_backward,
                       {{Arg::Matrix, "dx", 0.0f},
                        {Arg::Row, "db", 1.0f},
                        {Arg::Matrix, "dy", 2.0f},
                        {Arg::Matrix, "x", 4.0f},
                        {Arg::Row, "b", 1.0f}},
                       [](Device& dev, std::vector<Tensor>& t) {
    dev.bias_gelu_backward(t[0], t[1], t[2], t[3], t[4]);
  });
}

// The statistics (mean, rstd) are f32 in the model but any dtype here, as the parameters and their
// gradients; the backward reads arbitrary statistics (NaN and negative ones too): its contract
// is bits for every input, not only for the forward's outputs.
constexpr float kEps = 1e-5f;
// The norms' shared arguments: x, w, dy, dw and rstd as inputs.
const Arg kX{Arg::Matrix, "x", 3.0f}, kW{Arg::Row, "w", 2.0f}, kDy{Arg::Matrix, "dy", 2.0f},
    kDw{Arg::Row, "dw", 1.0f}, kRstd{Arg::Column, "rstd", 4.0f};

TEST(CpuBf16Native, LayerNormForwardAndBackwardAreTheStandInPathBitForBit) {
  expect_stand_in_bits(Kernel::layernorm_forward,
                       {{Arg::Matrix, "y", 0.0f},
                        {Arg::Column, "mean", 0.0f},
                        {Arg::Column, "rstd", 0.0f},
                        kX,
                        kW,
                        {Arg::Row, "b", 1.0f}},
                       [](Device& dev, std::vector<Tensor>& t) {
    dev.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], kEps);
  });
  expect_stand_in_bits(Kernel::layernorm_backward,
                       {{Arg::Matrix, "dx", 0.0f},
                        kDw,
                        {Arg::Row, "db", 1.0f},
                        kDy,
                        kX,
                        kW,
                        {Arg::Column, "mean", 1.0f},
                        kRstd},
                       [](Device& dev, std::vector<Tensor>& t) {
    dev.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
  });
}

TEST(CpuBf16Native, RmsNormForwardAndBackwardAreTheStandInPathBitForBit) {
  expect_stand_in_bits(Kernel::rmsnorm_forward,
                       {{Arg::Matrix, "y", 0.0f}, {Arg::Column, "rstd", 0.0f}, kX, kW},
                       [](Device& dev, std::vector<Tensor>& t) {
    dev.rmsnorm_forward(t[0], t[1], t[2], t[3], kEps);
  });
  expect_stand_in_bits(Kernel::rmsnorm_backward,
                       {{Arg::Matrix, "dx", 0.0f}, kDw, kDy, kX, kW, kRstd},
                       [](Device& dev, std::vector<Tensor>& t) {
    dev.rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5]);
  });
}

// The store's rounding is core/dtype.h's, for every one of the 2^16 bf16 neighbourhoods' halfway
// and off-halfway cases: axpy with alpha = 1 into a bf16 zero stores round(x) of an f32 x, which
// must be float_to_bf16_bits(x) (the stand-in path's convert) for each bit pattern tried.
TEST(CpuBf16Native, TheStoreRoundsAsDtypeHDoes) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (const uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      x.push_back(from_bits(hi << 16 | lo));
  const Shape s{static_cast<int64_t>(x.size())};
  const Tensor X = Tensor::from_host(native(), s, x);
  Tensor Y = Tensor::from_host(native(), s, std::vector<float>(x.size(), 0.0f), Dtype::bf16);
  native().axpy(1.0f, X, Y);
  const std::vector<float> y = Y.to_host();
  int wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float sum = 0.0f + 1.0f * x[i];  // what axpy computes before its store (−0 + 0 is +0)
    const uint32_t want = static_cast<uint32_t>(tp::float_to_bf16_bits(sum)) << 16;
    if (to_bits(y[i]) != want && ++wrong <= 5)
      ADD_FAILURE() << std::hex << "x bits " << to_bits(x[i]) << ": stored " << to_bits(y[i])
                    << ", dtype.h gives " << want;
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
