// test_gemm.cpp — the CPU device's GEMM (cblas_sgemm, OpenBLAS) against the naive reference
// tp::host_gemm (serial).
//
// Tolerance: relative Frobenius error ≤ 1e-5. Both accumulate the same products; the reference in
// double, OpenBLAS in float (in its own order), so the gap is float rounding of k-term sums
// (k ≤ 600 here).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <tuple>

#include "blas.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/host.h"
#include "core/tensor.h"
#include "cpu_device.h"
#include "gemm_choice.h"
#include "onednn_gemm.h"
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

// oneDNN's f32 matmul called directly (the CPU's f32 GEMM where OpenBLAS does not know an AVX-512
// CPU: gemm_choice.h, f32_gemm), on sub-blocks of larger stored matrices (row strides above the
// columns), against the same reference and tolerance.
TEST_P(GemmShapes, OnednnF32MatchesReferenceOnStridedBlocks) {
  if (!tp::cpu::have_onednn()) GTEST_SKIP() << "built without oneDNN";
  const Case c = GetParam();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 2.0f}, {-1.5f, 1.0f}}) {
        const int64_t ar = ta ? c.k : c.m, ac = ta ? c.m : c.k, br = tb ? c.n : c.k,
                      bc = tb ? c.k : c.n, lda = ac + 3, ldb = bc + 5, ldc = c.n + 2;
        const auto a = random_vector("oA", ar * lda), b = random_vector("oB", br * ldb);
        const auto c0 = random_vector("oC", c.m * ldc);
        std::vector<float> got = c0, want = c0;
        const bool ran = tp::cpu::onednn_gemm_f32(ta, tb, c.m, c.n, c.k, alpha, a.data(), lda,
                                                  b.data(), ldb, beta, got.data(), ldc);
        if (!ran) {  // refused: nothing touched, and the caller runs cblas_sgemm
          EXPECT_EQ(got, c0);
          continue;
        }
        tp::host_gemm(ta, tb, c.m, c.n, c.k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(),
                      ldc);
        EXPECT_LE(rel_error(got, want), 1e-5) << c.m << "x" << c.n << "x" << c.k << " ta=" << ta
                                              << " tb=" << tb << " alpha=" << alpha;
        for (int64_t i = 0; i < c.m; ++i)  // the padding columns of C are not written
          for (int64_t j = c.n; j < ldc; ++j)
            EXPECT_EQ(got[i * ldc + j], c0[i * ldc + j]) << "C padding at " << i << "," << j;
      }
}

// The f32 GEMM's choice (TP_CPU_F32_GEMM): a bad name is refused naming the choices; openblas
// keeps OpenBLAS; a forced OPENBLAS_CORETYPE keeps it under auto; onednn takes oneDNN where built.
TEST(F32GemmChoice, FollowsTheEnvironment) {
  const auto with = [](const char* name, const char* value, auto body) {
    const char* old = std::getenv(name);
    const std::string saved = old ? old : "";
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
    body();
    if (old)
      setenv(name, saved.c_str(), 1);
    else
      unsetenv(name);
  };
  with("TP_CPU_F32_GEMM", "cublas", [] {
    try {
      tp::cpu::choose_f32_gemm();
      ADD_FAILURE() << "TP_CPU_F32_GEMM=cublas was accepted";
    } catch (const tp::Error& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "TP_CPU_F32_GEMM=cublas is not a CPU f32 GEMM; use openblas, onednn or auto"),
                std::string::npos)
          << e.what();
    }
  });
  with("TP_CPU_F32_GEMM", "openblas", [] {
    const auto c = tp::cpu::choose_f32_gemm();
    EXPECT_FALSE(c.onednn);
    EXPECT_EQ(c.note.rfind("OpenBLAS (", 0), 0u) << c.note;
  });
  with("TP_CPU_F32_GEMM", nullptr, [&] {
    with("OPENBLAS_CORETYPE", "Haswell", [] {
      const auto c = tp::cpu::choose_f32_gemm();
      EXPECT_FALSE(c.onednn) << c.note;
      EXPECT_NE(c.note.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << c.note;
    });
  });
  if (tp::cpu::have_onednn())
    with("TP_CPU_F32_GEMM", "onednn", [] {
      const auto c = tp::cpu::choose_f32_gemm();
      EXPECT_TRUE(c.onednn);
      EXPECT_EQ(c.note.rfind("oneDNN (", 0), 0u) << c.note;
    });
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

// ---- the bf16 GEMM: oneDNN (cpu_backend/onednn_gemm.h) and the f32 stand-in -------------------
//
// Bound, elementwise, with S = |alpha| Σ_p |a_ip| |b_pj| + |beta| |c0_ij| over the bf16 inputs
// (exact in f32) and u = 2^−24 (fp32's unit roundoff): an f32 C is within (k + 2)·u·S of the double
// reference (k − 1 fp32 adds and the product roundings, alpha's scaling, beta's add: the classic
// γ_{k+2} bound of a dot product, whatever order or blocking oneDNN or AMX sums in); a bf16 C
// adds one rounding of the result to nearest even, 2^−8 of it (|ĉ| ≤ |c| + (k + 2)·u·S).

// C with env TP_CPU_BF16_GEMM=value set while it is made (restored after).
std::unique_ptr<tp::CpuDevice> cpu_device_with(const char* value) {
  return tp::testing::cpu_device_with_env("TP_CPU_BF16_GEMM", value);
}

std::vector<float> rounded_bf16(std::vector<float> v) {
  for (float& x : v) x = tp::round_to_bf16(x);
  return v;
}
std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = tp::float_to_bf16_bits(v[i]);
  return out;
}
std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

// One bf16 GEMM case, each matrix a block of a wider stored one (row strides = cols + pad).
struct Bf16Case {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  bool c_bf16;
  int64_t pad;
  std::string str() const {
    return std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " " + std::to_string(m) + "x" +
           std::to_string(n) + "x" + std::to_string(k) + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta) + (c_bf16 ? " C bf16" : " C f32") +
           " pad=" + std::to_string(pad);
  }
};

// Runs the case through cpu::onednn_gemm_bf16 (or, stand_in, through sgemm on the widened
// inputs, as the Device front does) and checks every element against the bound above. Returns
// the result.
std::vector<float> check_bf16_case(const Bf16Case& c, bool stand_in) {
  const int64_t ar = c.ta ? c.k : c.m, ac = c.ta ? c.m : c.k;  // A's stored rows and cols
  const int64_t br = c.tb ? c.n : c.k, bc = c.tb ? c.k : c.n;
  const int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.n + c.pad;
  const std::string tag = c.str();
  const auto a = rounded_bf16(random_vector("bA" + tag, ar * lda));
  const auto b = rounded_bf16(random_vector("bB" + tag, br * ldb));
  auto c0 = random_vector("bC" + tag, c.m * ldc);
  if (c.c_bf16) c0 = rounded_bf16(c0);
  std::vector<float> want = c0, scale = absolute(c0);
  tp::host_gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta,
                want.data(), ldc);
  const auto aa = absolute(a), ab = absolute(b);
  tp::host_gemm(c.ta, c.tb, c.m, c.n, c.k, std::fabs(c.alpha), aa.data(), lda, ab.data(), ldb,
                std::fabs(c.beta), scale.data(), ldc);

  std::vector<float> got = c0;
  if (stand_in) {
    tp::cpu::sgemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta,
                   got.data(), ldc);
    if (c.c_bf16) got = rounded_bf16(got);
  } else {
    const auto abits = bf16_bits(a), bbits = bf16_bits(b);
    if (c.c_bf16) {
      auto cbits = bf16_bits(c0);
      EXPECT_TRUE(tp::cpu::onednn_gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, abits.data(), lda,
                                            bbits.data(), ldb, c.beta, cbits.data(), true, ldc))
          << tag << ": oneDNN refused it";
      for (size_t i = 0; i < got.size(); ++i) got[i] = tp::bf16_bits_to_float(cbits[i]);
    } else {
      EXPECT_TRUE(tp::cpu::onednn_gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, abits.data(), lda,
                                            bbits.data(), ldb, c.beta, got.data(), false, ldc))
          << tag << ": oneDNN refused it";
    }
  }
  const double u = std::ldexp(1.0, -24), half_ulp = std::ldexp(1.0, -8);
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t e = i * ldc + j;
      if (j >= c.n) {  // the padding columns are not C's: untouched
        if (got[e] != c0[e] && ++bad <= 3) ADD_FAILURE() << tag << ": wrote outside C at " << e;
        continue;
      }
      const double acc = (c.k + 2) * u * scale[e];
      const double bound = acc + (c.c_bf16 ? half_ulp * (std::fabs(want[e]) + acc) : 0.0) + 1e-30;
      if (!(std::fabs(got[e] - want[e]) <= bound) && ++bad <= 3)
        ADD_FAILURE() << tag << ": C[" << i << "," << j << "] = " << got[e] << ", reference "
                      << want[e] << ", bound " << bound;
    }
  return got;
}

// True when this build has oneDNN and oneDNN has an optimised bf16 matmul on this CPU: oneDNN 2.6
// refuses bf16 below AVX-512 (an AVX2 machine: the device then falls back to the stand-in for
// every GEMM, which the stand-in tests cover).
bool onednn_bf16_here() {
  return tp::cpu::have_onednn() &&
         !tp::cpu::onednn_gemm_impl(false, false, 64, 64, 64, 1.0f, 64, 64, 0.0f, false, 64)
              .empty();
}

std::vector<Bf16Case> bf16_cases() {
  std::vector<Bf16Case> out;
  const Case sizes[] = {{1, 1, 1},    {7, 33, 1},    {33, 7, 65},
                        {1, 130, 33}, {64, 96, 128}, {65, 257, 129}};
  for (const Case& s : sizes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -2.0f}})
          for (bool c_bf16 : {false, true})
            out.push_back({ta, tb, s.m, s.n, s.k, alpha, beta, c_bf16, s.m % 2 ? 3 : 0});
  return out;
}

TEST(Bf16Gemm, OnednnMatchesDoubleReferenceWithinFp32AccumulationBound) {
  if (!onednn_bf16_here())
    GTEST_SKIP() << "built without oneDNN, or no oneDNN bf16 kernel on this CPU";
  for (const Bf16Case& c : bf16_cases()) check_bf16_case(c, false);
}

TEST(Bf16Gemm, StandInMatchesDoubleReferenceWithinTheSameBound) {
  for (const Bf16Case& c : bf16_cases()) check_bf16_case(c, true);
}

// The two paths each within the bound of the reference, so within twice it of each other; at
// the layer-like shape below they are asserted closer than 1e-5 relative as a whole.
TEST(Bf16Gemm, OnednnEqualsStandInThroughTheDevice) {
  if (!onednn_bf16_here())
    GTEST_SKIP() << "built without oneDNN, or no oneDNN bf16 kernel on this CPU";
  auto onednn = cpu_device_with("onednn"), sgemm = cpu_device_with("sgemm");
  EXPECT_TRUE(onednn->native_bf16(tp::Kernel::gemm));
  EXPECT_FALSE(sgemm->native_bf16(tp::Kernel::gemm));
  EXPECT_EQ(onednn->bf16_gemm_note().rfind("oneDNN (", 0), 0u) << onednn->bf16_gemm_note();
  const int64_t m = 96, n = 80, k = 256;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (tp::Dtype cd : {tp::Dtype::f32, tp::Dtype::bf16}) {
        const auto a = random_vector("dA", m * k), b = random_vector("dB", k * n);
        const auto c0 = random_vector("dC", m * n);
        std::vector<float> out[2];
        tp::CpuDevice* devs[2] = {onednn.get(), sgemm.get()};
        for (int d = 0; d < 2; ++d) {
          tp::Device& dev = *devs[d];
          Tensor A = Tensor::from_host(dev, ta ? Shape{k, m} : Shape{m, k}, a, tp::Dtype::bf16);
          Tensor B = Tensor::from_host(dev, tb ? Shape{n, k} : Shape{k, n}, b, tp::Dtype::bf16);
          Tensor C = Tensor::from_host(dev, Shape{m, n}, c0, cd);
          dev.gemm(ta, tb, 1.0f, A, B, 1.0f, C);
          out[d] = C.to_host();
        }
        // f32 C: two fp32 sums of 256 terms; bf16 C: they may round to neighbouring bf16 values.
        const double tol = cd == tp::Dtype::bf16 ? 4e-3 : 1e-5;
        EXPECT_LE(rel_error(out[0], out[1]), tol)
            << "ta=" << ta << " tb=" << tb << " C " << tp::dtype_name(cd);
      }
}

// An f32 operand meeting a bf16 one is not oneDNN's (bf16 × bf16 only): it runs as the stand-in,
// bit for bit.
TEST(Bf16Gemm, MixedOperandsFallBackToTheStandIn) {
  if (!tp::cpu::have_onednn()) GTEST_SKIP() << "built without oneDNN";
  auto onednn = cpu_device_with("onednn"), sgemm = cpu_device_with("sgemm");
  const auto a = random_vector("mA", 40 * 50), b = random_vector("mB", 50 * 30);
  std::vector<float> out[2];
  tp::CpuDevice* devs[2] = {onednn.get(), sgemm.get()};
  for (int d = 0; d < 2; ++d) {
    Tensor A = Tensor::from_host(*devs[d], Shape{40, 50}, a);
    Tensor B = Tensor::from_host(*devs[d], Shape{50, 30}, b, tp::Dtype::bf16);
    Tensor C = Tensor::zeros(*devs[d], Shape{40, 30}, tp::Dtype::bf16);
    devs[d]->gemm(false, false, 1.0f, A, B, 0.0f, C);
    out[d] = C.to_host();
  }
  EXPECT_EQ(out[0], out[1]);
}

// Does oneDNN's bf16 result depend on the thread count? It does where it splits K across threads
// or picks another kernel by thread count: measured here (AMX) bitwise equal at 1, 2 and 4 threads
// for every case below but TN 256x256x1024, a weight-gradient shape Xᵀ dY (6.9e-8 relative). Like
// OpenBLAS's fp32 GEMM (Gemm.ResultDoesNotDependOnThreadCount above) it is then within float
// rounding of the k-term sums, not bitwise; the bound is that test's.
TEST(Bf16Gemm, OnednnResultDependsOnThreadCountOnlyWithinRounding) {
  if (!onednn_bf16_here())
    GTEST_SKIP() << "built without oneDNN, or no oneDNN bf16 kernel on this CPU";
  const Case shapes[] = {{256, 768, 256}, {256, 256, 1024}, {32, 32, 4096}, {256, 1024, 256}};
  const int saved = omp_get_max_threads();
  for (const Case& s : shapes)
    for (bool ta : {false, true}) {
      const auto a = bf16_bits(random_vector("hA", s.m * s.k));
      const auto b = bf16_bits(random_vector("hB", s.k * s.n));
      // oneDNN has an optimised kernel for every layer shape (not only its reference loop).
      const std::string impl = tp::cpu::onednn_gemm_impl(ta, false, s.m, s.n, s.k, 1.0f,
                                                         ta ? s.m : s.k, s.n, 0.0f, false, s.n);
      EXPECT_FALSE(impl.empty()) << s.m << "x" << s.n << "x" << s.k << " ta=" << ta;
      if (std::getenv("TP_TEST_VERBOSE")) std::printf("%s\n", impl.c_str());
      std::vector<float> first;
      for (int threads : {1, 2, 4}) {
        omp_set_num_threads(threads);
        std::vector<float> c(s.m * s.n);
        ASSERT_TRUE(tp::cpu::onednn_gemm_bf16(ta, false, s.m, s.n, s.k, 1.0f, a.data(),
                                              ta ? s.m : s.k, b.data(), s.n, 0.0f, c.data(), false,
                                              s.n));
        if (first.empty()) {
          first = c;
          continue;
        }
        const double e = rel_error(c, first);
        if (std::getenv("TP_TEST_VERBOSE"))
          std::printf("%s %lldx%lldx%lld at %d threads: %s (%.2e)\n", ta ? "TN" : "NN",
                      static_cast<long long>(s.m), static_cast<long long>(s.n),
                      static_cast<long long>(s.k), threads, c == first ? "bitwise" : "differs", e);
        EXPECT_LE(e, 1e-6) << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " at " << threads
                           << " threads";
      }
    }
  omp_set_num_threads(saved);
}

TEST(Bf16Gemm, BadChoiceIsAnError) {
  EXPECT_THROW(cpu_device_with("cublas"), tp::Error);
  if (!tp::cpu::have_onednn()) {
    EXPECT_THROW(cpu_device_with("onednn"), tp::Error);
  }
}

}  // namespace
