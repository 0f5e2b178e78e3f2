// host.h — small host-side matrix helpers (row-major, on host memory): for expected values in
// lessons and tests, the reference the backends' GEMM is measured against, and for cutting a shard
// out of a global matrix on load. Never on a hot path.
#pragma once

#include <cstdint>
#include <vector>

namespace tp {

/// C = alpha · op(A) op(B) + beta · C, row-major, op(X) = X or Xᵀ: the naive triple loop with a
/// double accumulator, slow and obviously right — the reference the tests and tp_bench compare
/// Device::gemm with. A: (m, k), stored (k, m) when trans_a; B: (k, n), stored (n, k) when trans_b;
/// lda, ldb, ldc are the row strides of the stored matrices. beta = 0 ignores C's old contents.
void host_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc);
/// (m × k) · (k × n), double accumulation (host_gemm without transposes or scaling).
std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                               int64_t k, int64_t n);
/// The transpose of an (m × n) matrix.
std::vector<float> host_transpose(const std::vector<float>& a, int64_t m, int64_t n);
/// ‖got − want‖₂ / ‖want‖₂ in double, the one relative error of the project (tests, lessons, the
/// gradient audit); ‖got − want‖₂ when want is all zeros, infinity when the sizes differ.
double rel_error(const std::vector<float>& got, const std::vector<float>& want);
/// Rows [r0, r0 + rows) × columns [c0, c0 + cols) of a matrix with `ld` columns.
std::vector<float> host_block(const std::vector<float>& a, int64_t ld, int64_t r0, int64_t rows,
                              int64_t c0, int64_t cols);

}  // namespace tp
