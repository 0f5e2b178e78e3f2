// test_gemm.cpp — the CPU device's GEMM (cblas_sgemm, OpenBLAS) against the naive reference
// tp::host_gemm (serial).
//
// Tolerance: relative Frobenius error ≤ 1e-5. Both accumulate the same products; the reference in
// double, OpenBLAS in float (in its own order), so the gap is float rounding of k-term sums
// (k ≤ 600 here).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "core/error.h"
#include "core/host.h"
#include "core/tensor.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using tp::testing::device;
using tp::testing::random_vector;
using tp::testing::rel_error;

struct Case {
  int64_t m, n, k;
};

// C = alpha op(A) op(B) + beta C through CpuDevice::gemm and through the reference.
void compare(const Case& c, bool ta, bool tb, float alpha, float beta) {
  const std::string tag =
      std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
  const auto a = random_vector("A" + tag, c.m * c.k), b = random_vector("B" + tag, c.k * c.n);
  const auto c0 = random_vector("C" + tag, c.m * c.n);
  Tensor A = Tensor::from_host(device(), ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, a);
  Tensor B = Tensor::from_host(device(), tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, b);
  Tensor C = Tensor::from_host(device(), Shape{c.m, c.n}, c0);
  device().gemm(ta, tb, alpha, A, B, beta, C);
  std::vector<float> want = c0;
  tp::host_gemm(ta, tb, c.m, c.n, c.k, alpha, a.data(), A.cols(), b.data(), B.cols(), beta,
                want.data(), c.n);
  EXPECT_LE(rel_error(C.to_host(), want), 1e-5)
      << tag << " trans_a=" << ta << " trans_b=" << tb << " alpha=" << alpha << " beta=" << beta;
}

class GemmShapes : public ::testing::TestWithParam<Case> {};

TEST_P(GemmShapes, MatchesReferenceForAllTransposesAndScalings) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 2.0f}, {-1.5f, 1.0f}})
        compare(GetParam(), ta, tb, alpha, beta);
}

// Odd shapes, edge tiles, and shapes past OpenBLAS's blocking along each dimension.
INSTANTIATE_TEST_SUITE_P(Cpu, GemmShapes,
                         ::testing::Values(Case{1, 1, 1}, Case{3, 5, 7}, Case{1, 13, 2},
                                           Case{17, 33, 65}, Case{64, 64, 64}, Case{65, 513, 257},
                                           Case{130, 7, 600}),
                         [](const auto& info) {
  return std::to_string(info.param.m) + "x" + std::to_string(info.param.n) + "x" +
         std::to_string(info.param.k);
});

TEST(Gemm, BetaZeroIgnoresNaNInC) {
  Tensor A = Tensor::from_host(device(), Shape{2, 3}, random_vector("a", 6));
  Tensor B = Tensor::from_host(device(), Shape{3, 2}, random_vector("b", 6));
  Tensor C = Tensor::from_host(device(), Shape{2, 2}, std::vector<float>(4, std::nanf("")));
  device().gemm(false, false, 1.0f, A, B, 0.0f, C);
  for (float v : C.to_host()) EXPECT_TRUE(std::isfinite(v));
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  Tensor A(device(), Shape{2, 0}), B(device(), Shape{0, 3});
  Tensor C = Tensor::from_host(device(), Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  device().gemm(false, false, 1.0f, A, B, 3.0f, C);
  EXPECT_EQ(C.to_host(), (std::vector<float>{3, 6, 9, 12, 15, 18}));
}

TEST(Gemm, ResultDoesNotDependOnThreadCount) {
  const auto a = random_vector("ta", 97 * 300), b = random_vector("tb", 300 * 70);
  Tensor A = Tensor::from_host(device(), Shape{97, 300}, a);
  Tensor B = Tensor::from_host(device(), Shape{300, 70}, b);
  Tensor C1(device(), Shape{97, 70}), C2(device(), Shape{97, 70});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  device().gemm(false, false, 1.0f, A, B, 0.0f, C1);
  omp_set_num_threads(3);
  device().gemm(false, false, 1.0f, A, B, 0.0f, C2);
  omp_set_num_threads(saved);
  // OpenBLAS picks its blocking (and so the order of each k-sum) by thread count: not bitwise, but
  // within float rounding of the 300-term sums. Measured here: 2.3e-7 relative (1 vs 3 threads).
  EXPECT_LE(rel_error(C1.to_host(), C2.to_host()), 1e-6);
}

TEST(Gemm, ShapeMismatchIsAnError) {
  Tensor A(device(), Shape{2, 3}), B(device(), Shape{4, 2}), C(device(), Shape{2, 2});
  EXPECT_THROW(device().gemm(false, false, 1.0f, A, B, 0.0f, C), tp::Error);
}

}  // namespace
