// norm.cpp — the CPU backend's norms over the last dim of each row, forward beside backward:
// LayerNorm and RMSNorm. The math is in core/device.h; the GPU's are in gpu_backend/kernels/norm.cu.
//
// Row statistics are f64 sums (simd lanes), x̂ is formed in f32. The parameter gradients (dw, db)
// are f64 sums over the rows: each column is summed by one thread, rows in order, so they do not
// depend on the thread count; each thread walks the rows of its range of column blocks
// (cpu::column_range) in one pass for dw and db, the loop over its columns vectorised (cloned per
// vector width, TP_CPU_CLONES: per-column sums have no lane order). The row reductions (the
// statistics, dx's two means) stay unclone: their simd lanes fix the order of their sums.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

namespace {
// dw[c] += Σ_r dy[r, c] x̂[r, c] and (db non-null) db[c] += Σ_r dy[r, c], in f64, rows in order,
// x̂ = (x − mean[r]) rstd[r] (pmean null: RMSNorm's x̂ = x rstd[r]).
TP_CPU_CLONES void norm_param_grads_loop(float* pdw, float* pdb, const float* pdy, const float* px,
                                         const float* pmean, const float* prstd, int64_t rows,
                                         int64_t h, bool parallel) {
#pragma omp parallel if (parallel)
  {
    int64_t c0, c1;
    cpu::column_range(h, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    const size_t width = static_cast<size_t>(c1 - c0);
    std::vector<double> sw(width, 0.0), sb(width, 0.0);
    double* psw = sw.data();
    double* psb = sb.data();
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = px + r * h;
      const float* dyr = pdy + r * h;
      const float m = pmean != nullptr ? pmean[r] : 0.0f, rs = prstd[r];
      if (pmean != nullptr) {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          psw[c - c0] += static_cast<double>(dyr[c]) * ((xr[c] - m) * rs);
          psb[c - c0] += double{dyr[c]};
        }
      } else {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) psw[c - c0] += static_cast<double>(dyr[c]) * (xr[c] * rs);
      }
    }
    for (int64_t c = c0; c < c1; ++c) pdw[c] += static_cast<float>(psw[c - c0]);
    if (pdb != nullptr)
      for (int64_t c = c0; c < c1; ++c) pdb[c] += static_cast<float>(psb[c - c0]);
  }
}
}  // namespace

void CpuDevice::do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                     const Tensor& w, const Tensor& b, float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  const float* pb = b.data();
  float* py = y.data();
  float* pmean = mean.data();
  float* prstd = rstd.data();
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < h; ++c) s += xr[c];
    const double mu = s / static_cast<double>(h);
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < h; ++c) ss += (xr[c] - mu) * (xr[c] - mu);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    float* yr = py + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) yr[c] = (xr[c] - m) * rs * pw[c] + pb[c];
    pmean[r] = m;
    prstd[r] = rs;
  }
}

void CpuDevice::do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                      const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  const float* pdy = dy.data();
  const float* pmean = mean.data();
  const float* prstd = rstd.data();
  float* pdx = dx.data();
  float* pdw = dw.data();
  float* pdb = db.data();
  const bool parallel = rows * h > cpu::kParallelMin;

  norm_param_grads_loop(pdw, pdb, pdy, px, pmean, prstd, rows, h, parallel);

  // dx: one row per iteration.
#pragma omp parallel for if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    const float* dyr = pdy + r * h;
    const float m = pmean[r], rs = prstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < h; ++c) {
      const float g = dyr[c] * pw[c];
      sum_g += g;
      sum_gx += static_cast<double>(g) * ((xr[c] - m) * rs);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(h));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
    float* dxr = pdx + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) {
      const float xhat = (xr[c] - m) * rs;
      dxr[c] = rs * (dyr[c] * pw[c] - mean_g - xhat * mean_gx);
    }
  }
}

void CpuDevice::do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                   float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  float* py = y.data();
  float* prstd = rstd.data();
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < h; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    float* yr = py + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) yr[c] = xr[c] * rs * pw[c];
    prstd[r] = rs;
  }
}

void CpuDevice::do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                    const Tensor& w, const Tensor& rstd) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  const float* pdy = dy.data();
  const float* prstd = rstd.data();
  float* pdx = dx.data();
  float* pdw = dw.data();
  const bool parallel = rows * h > cpu::kParallelMin;

  norm_param_grads_loop(pdw, nullptr, pdy, px, nullptr, prstd, rows, h, parallel);

#pragma omp parallel for if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    const float* dyr = pdy + r * h;
    const float rs = prstd[r];
    double sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t c = 0; c < h; ++c) sum_gx += static_cast<double>(dyr[c] * pw[c]) * (xr[c] * rs);
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
    float* dxr = pdx + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) dxr[c] = rs * (dyr[c] * pw[c] - xr[c] * rs * mean_gx);
  }
}

}  // namespace tp
