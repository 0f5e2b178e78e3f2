#include "core/host.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace tp {

void host_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  const auto at = [](const float* x, int64_t ld, bool trans, int64_t r, int64_t col) {
    return static_cast<double>(trans ? x[col * ld + r] : x[r * ld + col]);
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) sum += at(a, lda, trans_a, i, p) * at(b, ldb, trans_b, p, j);
      const double old = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      c[i * ldc + j] = static_cast<float>(alpha * sum + old);
    }
}

std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                               int64_t k, int64_t n) {
  TP_CHECK(static_cast<int64_t>(a.size()) == m * k && static_cast<int64_t>(b.size()) == k * n,
           "host_matmul: sizes do not match ", m, "x", k, " · ", k, "x", n);
  std::vector<float> c(static_cast<size_t>(m * n));
  host_gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  return c;
}

std::vector<float> host_transpose(const std::vector<float>& a, int64_t m, int64_t n) {
  std::vector<float> t(a.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) t[j * m + i] = a[i * n + j];
  return t;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<float> host_block(const std::vector<float>& a, int64_t ld, int64_t r0, int64_t rows,
                              int64_t c0, int64_t cols) {
  TP_CHECK(
      r0 >= 0 && c0 >= 0 && c0 + cols <= ld && (r0 + rows) * ld <= static_cast<int64_t>(a.size()),
      "host_block: block out of range");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = a[(r0 + r) * ld + c0 + c];
  return out;
}

}  // namespace tp
