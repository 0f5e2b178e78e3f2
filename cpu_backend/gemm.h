// gemm.h — row-major f32 matrix multiply for the CPU backend: the cache-blocked OpenMP kernel used
// by CpuDevice. The naive reference it is tested against is tp::host_gemm (lib/core/host.h).
//
//   C = alpha * op(A) op(B) + beta * C      op(A): (m, k), op(B): (k, n), C: (m, n)
//
// lda, ldb, ldc are the row strides of the stored matrices (A is stored (k, m) when trans_a).
#pragma once

#include <cstdint>

namespace tp::cpu {

/// Cache-blocked, OpenMP-parallel GEMM (the hot path).
void gemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc);

}  // namespace tp::cpu
