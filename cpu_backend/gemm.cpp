// gemm.cpp — the CPU GEMM.
//
// Blocking (Goto-style, simplified): C is cut into tiles of kMc rows × kNc columns and the shared
// dimension into panels of kKc. For one (column tile, k panel), the kKc × kNc block of op(B) is
// packed once into a contiguous buffer (transposes are resolved while packing); then the row tiles
// are shared among the OpenMP threads, each packing its kMc × kKc block of op(A) and running the
// inner loop
//     C[i, j] += (alpha · A_p[i, p]) · B_p[p, j]       (j innermost, contiguous: vectorises)
// so the working set (A_p ≈ 64 KiB, one row of B_p) stays in cache.
#include "gemm.h"

#include <algorithm>
#include <vector>

namespace tp::cpu {

namespace {
constexpr int64_t kMc = 64;   // rows of C per tile
constexpr int64_t kKc = 256;  // shared-dimension panel
constexpr int64_t kNc = 512;  // columns of C per tile

inline float at(const float* x, int64_t ld, bool trans, int64_t r, int64_t c) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
#pragma omp parallel for if (m * n > 16384)
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}
}  // namespace

void gemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  scale_c(m, n, beta, c, ldc);
  if (k <= 0 || alpha == 0.0f) return;
  const bool parallel = m * n * k > 32768;
  std::vector<float> bp(static_cast<size_t>(kKc * kNc));
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0);
      // Pack op(B)[p0 : p0 + kc, j0 : j0 + nc] row-major into bp (kc × nc).
#pragma omp parallel for if (parallel)
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t j = 0; j < nc; ++j) bp[p * nc + j] = at(b, ldb, trans_b, p0 + p, j0 + j);
#pragma omp parallel if (parallel)
      {
        std::vector<float> ap(static_cast<size_t>(kMc * kKc));
#pragma omp for schedule(dynamic)
        for (int64_t i0 = 0; i0 < m; i0 += kMc) {
          const int64_t mc = std::min(kMc, m - i0);
          for (int64_t i = 0; i < mc; ++i)
            for (int64_t p = 0; p < kc; ++p)
              ap[i * kc + p] = alpha * at(a, lda, trans_a, i0 + i, p0 + p);
          for (int64_t i = 0; i < mc; ++i) {
            float* crow = c + (i0 + i) * ldc + j0;
            const float* arow = ap.data() + i * kc;
            for (int64_t p = 0; p < kc; ++p) {
              const float av = arow[p];
              const float* brow = bp.data() + p * nc;
#pragma omp simd
              for (int64_t j = 0; j < nc; ++j) crow[j] += av * brow[j];
            }
          }
        }
      }
    }
  }
}

}  // namespace tp::cpu
