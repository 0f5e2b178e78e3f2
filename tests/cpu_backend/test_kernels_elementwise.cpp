// test_kernels_elementwise.cpp — the CPU elementwise kernels (cpu_backend/kernels/elementwise.cpp):
// mul, which dropout uses, elementwise and in place (serial).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

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

}  // namespace
