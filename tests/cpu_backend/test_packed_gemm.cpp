// test_packed_gemm.cpp — Device::pack_gemm_b + gemm_packed (the ring's t blocks against one
// weight, core/device.h) on the CPU device (serial): the oneDNN path with B packed once where
// oneDNN has a brgemm kernel, and the fallback (TP_CPU_PACKED_GEMM=off, bf16, no oneDNN), against
// the double-precision reference tp::host_gemm.
//
// Tolerance: relative Frobenius error ≤ 1e-5, as test_gemm's: the reference sums in double, the
// kernels in float in their own order (k ≤ 512 terms here), so the gap is float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/host.h"
#include "core/tensor.h"
#include "cpu_device.h"
#include "onednn_gemm.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using tp::testing::random_vector;
using tp::testing::rel_error;

// A CpuDevice made with TP_CPU_PACKED_GEMM=value (nullptr: unset).
std::unique_ptr<tp::CpuDevice> device_with(const char* value) {
  return tp::testing::cpu_device_with_env("TP_CPU_PACKED_GEMM", value);
}

// True when oneDNN would pack op(B) (k, n) for m-row blocks here (a brgemm kernel, a layout of its
// own): the device's pack must then be a packed one.
bool packs_here(bool tb, int64_t m, int64_t n, int64_t k) {
  return tp::cpu::onednn_f32_layout(tb, m, n, k, tb ? k : n) != nullptr;
}

struct Sizes {
  int64_t m, n, k;
};

// B packed for m-row blocks, then GEMMs of `rows` rows through it, against the reference.
void compare(tp::Device& dev, const Sizes& s, int64_t rows, bool ta, bool tb, float alpha,
             float beta) {
  const std::string tag = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                          std::to_string(s.k) + " rows=" + std::to_string(rows) +
                          " trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) +
                          " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  const auto a = random_vector("A" + tag, rows * s.k), b = random_vector("B" + tag, s.k * s.n);
  const auto c0 = random_vector("C" + tag, rows * s.n);
  const Tensor A = Tensor::from_host(dev, ta ? Shape{s.k, rows} : Shape{rows, s.k}, a);
  const Tensor B = Tensor::from_host(dev, tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, b);
  Tensor C = Tensor::from_host(dev, Shape{rows, s.n}, c0);
  const auto pack = dev.pack_gemm_b(B, tb, s.m);
  EXPECT_EQ(pack->trans_b(), tb);
  EXPECT_EQ(pack->m(), s.m);
  dev.gemm_packed(ta, alpha, A, *pack, beta, C);
  std::vector<float> want = c0;
  tp::host_gemm(ta, tb, rows, s.n, s.k, alpha, a.data(), A.cols(), b.data(), B.cols(), beta,
                want.data(), s.n);
  EXPECT_LE(rel_error(C.to_host(), want), 1e-5) << tag;
  EXPECT_EQ(B.to_host(), b) << tag << ": B is only read";
}

void compare_all(tp::Device& dev) {
  const Sizes sizes[] = {{1, 1, 1}, {7, 33, 5}, {33, 65, 129}, {64, 96, 128}, {128, 256, 512}};
  for (const Sizes& s : sizes)
    for (int64_t rows : {s.m, s.m / 2 + 1, 2 * s.m})  // the m it was packed for, and two others
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -2.0f}})
            compare(dev, s, rows, ta, tb, alpha, beta);
}

TEST(PackedGemm, MatchesDoubleReferenceForTransposesScalingsAndRowCounts) {
  auto dev = device_with(nullptr);
  compare_all(*dev);
}

TEST(PackedGemm, FallbackMatchesTheSameReference) {
  auto dev = device_with("off");
  compare_all(*dev);
}

// Where oneDNN has a brgemm kernel for the ring's shapes (lesson 11: 128-row blocks against
// (512, 768) and (2048, 512)), the default device packs and TP_CPU_PACKED_GEMM=off does not; off is
// gemm itself, bit for bit.
TEST(PackedGemm, PacksWhereOnednnHasABrgemmKernelAndOffIsGemm) {
  auto on = device_with("auto"), off = device_with("off");
  const int64_t m = 128;
  for (auto [k, n] : {std::pair<int64_t, int64_t>{512, 768}, {2048, 512}})
    for (bool tb : {false, true}) {
      const auto b = random_vector("Bp", k * n), a = random_vector("Ap", m * k);
      for (tp::CpuDevice* dev : {on.get(), off.get()}) {
        const Tensor B = Tensor::from_host(*dev, tb ? Shape{n, k} : Shape{k, n}, b);
        const Tensor A = Tensor::from_host(*dev, Shape{m, k}, a);
        const auto pack = dev->pack_gemm_b(B, tb, m);
        EXPECT_EQ(pack->packed(), dev == on.get() && packs_here(tb, m, n, k))
            << k << "x" << n << " trans_b=" << tb;
        Tensor c(*dev, Shape{m, n}), plain(*dev, Shape{m, n});
        dev->gemm_packed(false, 1.0f, A, *pack, 0.0f, c);
        dev->gemm(false, tb, 1.0f, A, B, 0.0f, plain);
        if (!pack->packed())
          EXPECT_EQ(c.to_host(), plain.to_host()) << "unpacked: gemm itself";
        else
          EXPECT_LE(rel_error(c.to_host(), plain.to_host()), 1e-6) << "oneDNN against OpenBLAS";
      }
    }
  std::string impl;
  tp::cpu::onednn_f32_layout(false, m, 768, 512, 768, &impl);
  std::cout << "[ note ] oneDNN f32 matmul for 128x768x512: " << (impl.empty() ? "none" : impl)
            << (packs_here(false, m, 768, 512) ? " (packed)" : " (not packed)") << "\n";
}

// The packed copy is a Tensor of the device: counted in memory() while the pack lives.
TEST(PackedGemm, PackedCopyIsCountedWhileThePackLives) {
  auto dev = device_with(nullptr);
  if (!packs_here(false, 128, 768, 512)) GTEST_SKIP() << "oneDNN packs nothing here";
  Tensor B(*dev, Shape{512, 768});
  dev->fill(B, 0.5f);
  const int64_t before = dev->memory().in_use;
  {
    const auto pack = dev->pack_gemm_b(B, false, 128);
    ASSERT_TRUE(pack->packed());
    EXPECT_GE(dev->memory().in_use - before, static_cast<int64_t>(B.bytes()));
  }
  EXPECT_EQ(dev->memory().in_use, before);
}

// beta = 0 overwrites C even where it holds NaN, on both paths.
TEST(PackedGemm, BetaZeroIgnoresNaNInC) {
  for (const char* env : {"auto", "off"}) {
    auto dev = device_with(env);
    const Tensor A = Tensor::from_host(*dev, Shape{64, 128}, random_vector("An", 64 * 128));
    const Tensor B = Tensor::from_host(*dev, Shape{128, 96}, random_vector("Bn", 128 * 96));
    Tensor C = Tensor::from_host(
        *dev, Shape{64, 96}, std::vector<float>(64 * 96, std::numeric_limits<float>::quiet_NaN()));
    const auto pack = dev->pack_gemm_b(B, false, 64);
    dev->gemm_packed(false, 1.0f, A, *pack, 0.0f, C);
    for (float v : C.to_host()) ASSERT_FALSE(std::isnan(v)) << env;
  }
}

// Row strides above the column counts (blocks of wider matrices), on the oneDNN functions
// directly. B's stride is the reorder's business: with a dense A and C the packed B is read. oneDNN
// 2.6's brgemm wants A and C dense: with a padded A or C (or a transposed A, where it has no
// brgemm) it picks a plain jit gemm that reads another layout, and the call is refused with C
// untouched (the device then runs sgemm on the plain B). Either way C's padding is not written.
TEST(PackedGemm, OnednnStridedOperandsMatchReferenceOrAreRefusedUntouched) {
  const int64_t m = 48, n = 80, k = 96, pad = 5;
  for (bool tb : {false, true}) {
    const int64_t ldb = (tb ? k : n) + pad;
    const auto layout = tp::cpu::onednn_f32_layout(tb, m, n, k, ldb);
    if (!layout) GTEST_SKIP() << "oneDNN packs nothing here";
    const auto b = random_vector("Bs", (tb ? n : k) * ldb);
    std::vector<float> packed((tp::cpu::onednn_f32_packed_bytes(*layout) + 3) / 4 + 16);
    auto* aligned =
        reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(packed.data()) + 63) / 64 * 64);
    tp::cpu::onednn_f32_pack(*layout, b.data(), aligned);
    for (bool ta : {false, true})
      for (auto [pad_a, pad_c] : {std::pair<int64_t, int64_t>{0, 0}, {pad, 0}, {0, pad}}) {
        const int64_t lda = (ta ? m : k) + pad_a, ldc = n + pad_c;
        const std::string tag = "trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) +
                                " lda=" + std::to_string(lda) + " ldc=" + std::to_string(ldc);
        const auto a = random_vector("As" + tag, (ta ? k : m) * lda);
        const auto c0 = random_vector("Cs" + tag, m * ldc);
        std::vector<float> got = c0, want = c0;
        const bool ran = tp::cpu::onednn_f32_gemm_packed(*layout, ta, m, 0.5f, a.data(), lda,
                                                         aligned, 1.0f, got.data(), ldc);
        if (!ta && pad_a == 0 && pad_c == 0) {
          EXPECT_TRUE(ran) << tag << ": the packed B's own case";
        }
        if (!ran) {
          EXPECT_EQ(got, c0) << tag << ": refused, but C was written";
          continue;
        }
        tp::host_gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, want.data(), ldc);
        EXPECT_LE(rel_error(got, want), 1e-5) << tag;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(got[i * ldc + j], c0[i * ldc + j]) << tag;
      }
  }
}

// bf16 operands stay on gemm's path (the pack is b itself), bit for bit.
TEST(PackedGemm, Bf16OperandsRunAsGemm) {
  auto dev = device_with(nullptr);
  const Tensor A =
      Tensor::from_host(*dev, Shape{32, 64}, random_vector("Ab", 32 * 64), tp::Dtype::bf16);
  const Tensor B =
      Tensor::from_host(*dev, Shape{64, 48}, random_vector("Bb", 64 * 48), tp::Dtype::bf16);
  const auto pack = dev->pack_gemm_b(B, false, 32);
  EXPECT_FALSE(pack->packed());
  Tensor c(*dev, Shape{32, 48}), plain(*dev, Shape{32, 48});
  dev->gemm_packed(false, 1.0f, A, *pack, 0.0f, c);
  dev->gemm(false, false, 1.0f, A, B, 0.0f, plain);
  EXPECT_EQ(c.to_host(), plain.to_host());
}

// The GEMM's own checks: a C of the wrong shape is refused with gemm's message.
TEST(PackedGemm, ShapeMismatchIsAnError) {
  auto dev = device_with(nullptr);
  Tensor A(*dev, Shape{128, 512}), B(*dev, Shape{512, 768});
  dev->fill(A, 1.0f);
  dev->fill(B, 1.0f);
  const auto pack = dev->pack_gemm_b(B, false, 128);
  Tensor wrong(*dev, Shape{128, 767});
  EXPECT_THROW(dev->gemm_packed(false, 1.0f, A, *pack, 0.0f, wrong), tp::Error);
  EXPECT_THROW(dev->pack_gemm_b(B, false, -1), tp::Error);
}

TEST(PackedGemm, BadChoiceIsAnError) {
  try {
    device_with("yes");
    FAIL() << "TP_CPU_PACKED_GEMM=yes was accepted";
  } catch (const tp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TP_CPU_PACKED_GEMM=yes is not a choice; use auto"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
