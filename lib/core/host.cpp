#include "core/host.h"

#include "core/error.h"

namespace tp {

std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                               int64_t k, int64_t n) {
  TP_CHECK(static_cast<int64_t>(a.size()) == m * k && static_cast<int64_t>(b.size()) == k * n,
           "host_matmul: sizes do not match ", m, "x", k, " · ", k, "x", n);
  std::vector<float> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += static_cast<double>(a[i * k + p]) * b[p * n + j];
      c[i * n + j] = static_cast<float>(s);
    }
  return c;
}

std::vector<float> host_transpose(const std::vector<float>& a, int64_t m, int64_t n) {
  std::vector<float> t(a.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) t[j * m + i] = a[i * n + j];
  return t;
}

std::vector<float> host_block(const std::vector<float>& a, int64_t ld, int64_t r0, int64_t rows,
                              int64_t c0, int64_t cols) {
  TP_CHECK(r0 >= 0 && c0 >= 0 && c0 + cols <= ld && (r0 + rows) * ld <= static_cast<int64_t>(a.size()),
           "host_block: block out of range");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = a[(r0 + r) * ld + c0 + c];
  return out;
}

}  // namespace tp
