// blas.cpp — cblas_sgemm (or oneDNN's f32 matmul, where gemm_choice.h's f32_gemm says) behind
// tp::cpu::sgemm, and OpenBLAS's thread control (blas.h); the direct sgemm and the thread count
// (cpu_direct.h).
#include "blas.h"

#include <cblas.h>
#include <omp.h>
#include <strings.h>

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "cpu_direct.h"
#include "gemm_choice.h"
#include "onednn_gemm.h"

// OpenBLAS's own extension, declared here so that this file does not depend on which cblas.h the
// system's alternatives point at (OpenBLAS's declares it, netlib's does not).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

namespace tp::cpu {

namespace {
int as_int(int64_t v, const char* what) {
  TP_CHECK(v <= INT_MAX, "sgemm: ", what, "=", v, " exceeds what CBLAS takes (", INT_MAX, ")");
  return static_cast<int>(v);
}
}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {  // op(A) op(B) contributes nothing: C = beta C
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      if (beta == 0.0f)
        std::fill(row, row + n, 0.0f);
      else if (beta != 1.0f)
        std::transform(row, row + n, row, [beta](float v) { return beta * v; });
    }
    return;
  }
  if (f32_gemm().onednn && !omp_in_parallel() &&
      onednn_gemm_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  direct_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void direct_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, as_int(m, "m"), as_int(n, "n"), as_int(k, "k"),
              alpha, a, as_int(lda, "lda"), b, as_int(ldb, "ldb"), beta, c, as_int(ldc, "ldc"));
}

int openmp_threads() { return omp_get_max_threads(); }

const char* openblas_core() { return openblas_get_corename(); }

const char* openblas_config() { return openblas_get_config(); }

void set_blas_threads(int threads) { openblas_set_num_threads(std::max(1, threads)); }

bool openblas_lacks_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return false;
  const char* core = openblas_get_corename();
  for (const char* wide : {"skylakex", "cooperlake", "sapphirerapids"})
    if (strcasecmp(core, wide) == 0) return false;
  return true;
#else
  return false;
#endif
}

}  // namespace tp::cpu
