// kernel_test_util.h — what the tests of the CPU kernels share (tests/cpu_backend/test_kernels_<stem>.cpp,
// one file per stem of cpu_backend/kernels/): the tolerances, tensors on the tests' device, random
// fills, central finite differences, a thread count for the thread-independence checks, and the
// padded vocabulary of the vocabulary-parallel kernels. Each kernel's double reference stands in
// the file of its stem, beside the tests it serves.
//
// Forward: each kernel (float) against a naive double reference, relative Frobenius error
// ≤ kForwardTol = 1e-5 (float rounding of short sums; the shapes are small and odd).
//
// Backward: each gradient against central finite differences of L = Σ (output ⊙ R), R random,
// taken on the double reference with eps = 1e-5 (fd_grad). In double the FD error is ~eps²
// (truncation) + 1e-16/eps (rounding) ≈ 1e-10, so what remains is the float kernel's own rounding
// (~1e-6); kGradTol = 1e-4 relative is loose enough for float cancellation (layernorm dx) and still
// far below any real mistake (a wrong term moves the error to ~1e-1 or more). The forward test ties
// the double reference to the float kernel, so together they check the kernel's backward against
// the kernel's forward.
//
// Gradients that are written (dx, dq, …) are pre-filled with NaN (kNaN), so a kernel that
// accumulated into them would fail; parameter gradients are checked to accumulate.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "test_util.h"

namespace tp::testing {

using Vec = std::vector<double>;
using Fn = std::function<Vec(const Vec&)>;

constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 1e-4;
inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

inline Vec to_d(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }
inline std::vector<float> to_f(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

inline Tensor on_device(const Shape& shape, const std::vector<float>& values) {
  return Tensor::from_host(device(), shape, values);
}
inline Tensor filled(const Shape& shape, float value) {
  return on_device(shape, std::vector<float>(static_cast<size_t>(shape.numel()), value));
}

// random_vector scaled: uniform in [-a, a).
inline std::vector<float> random_scaled(const std::string& name, int64_t n, float a) {
  auto v = random_vector(name, n);
  for (float& x : v) x *= a;
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ∂/∂x of L(x) = Σ f(x) ⊙ R by central differences.
inline Vec fd_grad(const Fn& f, Vec x, const Vec& R, double eps = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + eps;
    const double lp = dot(f(x), R);
    x[i] = xi - eps;
    const double lm = dot(f(x), R);
    x[i] = xi;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

// Runs f with n OpenMP threads, then restores the previous count.
template <typename F>
void with_threads(int n, F f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

// The vocabulary split of the model: V tokens padded to Vp = t·ceil(V / t); shard p holds the ids
// [p·Vp/t, (p + 1)·Vp/t).
inline int64_t padded_vocab(int64_t V, int64_t t) { return (V + t - 1) / t * t; }

}  // namespace tp::testing
