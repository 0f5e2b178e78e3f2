// test_kernels_reduce.cpp — the CPU reductions (cpu_backend/kernels/reduce.cpp): sum_squares,
// the gradient norm's pieces, against a double sum and the same at any thread count (serial).
#include <gtest/gtest.h>

#include <cstdint>

#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

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

}  // namespace
