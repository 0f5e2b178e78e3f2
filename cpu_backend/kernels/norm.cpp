// norm.cpp — the CPU backend's norms over the last dim of each row, forward beside backward:
// LayerNorm and RMSNorm, and each fused with the residual add before it (add_layernorm_forward).
// The math is in core/device.h; the GPU's are in gpu_backend/kernels/norm.cu.
//
// Row statistics (μ, σ², dx's two means) are f64 sums in cpu::lane_sum's fixed lanes, x̂ is formed
// in f32. The parameter gradients (dw, db) are f64 sums over the rows: each column is summed by one
// thread, rows in order; each thread walks the rows of its range of column blocks
// (cpu::column_range) in one pass for dw and db. So every sum has one order, whatever the thread
// count and the vector width: the loops are cloned per vector width (TP_CPU_CLONES), 16 lanes with
// AVX-512, where the `omp simd` reductions they replace had to stay in the baseline's 2 doubles.
// On one thread the backward is one pass (norm_backward_one_pass), the same sums in the same order.
//
// bf16 (native_bf16): the plain norms' loops are templates on the activations' element types (x,
// y; dy, dx: kernel_util.h, "storage"), so a bf16 call reads and writes them itself, with the f32
// arithmetic and one rounding per stored element, the stand-in path's bits. The per-column and
// per-row vectors (w, b, dw, db, mean, rstd: h or rows elements) go through cpu::SmallF32, an f32
// view, widened into a host buffer when bf16, so the loops stay one instance per activation dtype
// mix. The fused add + norm kernels stay f32: the Device front runs a bf16 call of those as the
// unfused steps (core/device.cpp).
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

namespace {
// Row r's terms of the parameter gradients for columns [c0, c1): sw[c − c0] += dy x̂ and (pmean
// non-null) sb[c − c0] += dy, in f64, x̂ = (x − mean[r]) rstd[r] (pmean null: RMSNorm's x̂ =
// x rstd[r]). Inlined into both backward loops below, one code, so the same bits.
template <typename DY, typename X>
TP_CPU_INLINE inline void param_grads_row(double* psw, double* psb, const DY* dyr, const X* xr,
                                          const float* pmean, float rs, int64_t r, int64_t c0,
                                          int64_t c1) {
  using cpu::load;
  if (pmean != nullptr) {
    const float m = pmean[r];
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c) {
      psw[c - c0] += static_cast<double>(load(dyr, c)) * ((load(xr, c) - m) * rs);
      psb[c - c0] += double{load(dyr, c)};
    }
  } else {
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c)
      psw[c - c0] += static_cast<double>(load(dyr, c)) * (load(xr, c) * rs);
  }
}

// dw[c] += sw[c − c0], db[c] += sb[c − c0] (pdb non-null) for c in [c0, c1).
TP_CPU_INLINE inline void add_param_grads(float* pdw, float* pdb, const double* psw,
                                          const double* psb, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) pdw[c] += static_cast<float>(psw[c - c0]);
  if (pdb != nullptr)
    for (int64_t c = c0; c < c1; ++c) pdb[c] += static_cast<float>(psb[c - c0]);
}

// Row r's dx (pmean null: RMSNorm's, x̂ = x rstd, no mean(g) term), inlined as param_grads_row;
// with resr non-null, resr + dx (the backward_add kernels: axpy's sum, dres + 1 · dx).
template <typename DX, typename DY, typename X>
TP_CPU_INLINE inline void dx_row(DX* dxr, const float* resr, const DY* dyr, const X* xr,
                                 const float* pw, const float* pmean, float rs, int64_t r,
                                 int64_t h) {
  using cpu::load;
  const float m = pmean != nullptr ? pmean[r] : 0.0f;
  const double sum_g =
      pmean != nullptr
          ? cpu::lane_sum(h, [&](int64_t c) TP_CPU_INLINE { return double{load(dyr, c) * pw[c]}; })
          : 0.0;
  const double sum_gx = cpu::lane_sum(h, [&](int64_t c) TP_CPU_INLINE {
    return static_cast<double>(load(dyr, c) * pw[c]) * ((load(xr, c) - m) * rs);
  });
  const float mean_g = static_cast<float>(sum_g / static_cast<double>(h));
  const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
  if (resr != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) {
      const float xhat = (load(xr, c) - m) * rs;
      cpu::store(dxr, c, resr[c] + rs * (load(dyr, c) * pw[c] - mean_g - xhat * mean_gx));
    }
  } else {
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) {
      const float xhat = (load(xr, c) - m) * rs;
      cpu::store(dxr, c, rs * (load(dyr, c) * pw[c] - mean_g - xhat * mean_gx));
    }
  }
}

// dw[c] += Σ_r dy[r, c] x̂[r, c] and (db non-null) db[c] += Σ_r dy[r, c], in f64, rows in order.
template <typename DY, typename X>
TP_CPU_CLONES void norm_param_grads_loop(float* pdw, float* pdb, const DY* pdy, const X* px,
                                         const float* pmean, const float* prstd, int64_t rows,
                                         int64_t h) {
#pragma omp parallel
  {
    int64_t c0, c1;
    cpu::column_range(h, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    const size_t width = static_cast<size_t>(c1 - c0);
    std::vector<double> sw(width, 0.0), sb(width, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      param_grads_row(sw.data(), sb.data(), pdy + r * h, px + r * h, pmean, prstd[r], r, c0, c1);
    add_param_grads(pdw, pdb, sw.data(), sb.data(), c0, c1);
  }
}

// dx (pres non-null: dres + dx), one row per iteration.
template <typename DX, typename DY, typename X>
TP_CPU_CLONES void norm_dx_loop(DX* pdx, const float* pres, const DY* pdy, const X* px,
                                const float* pw, const float* pmean, const float* prstd,
                                int64_t rows, int64_t h) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r)
    dx_row(pdx + r * h, pres != nullptr ? pres + r * h : nullptr, pdy + r * h, px + r * h, pw,
           pmean, prstd[r], r, h);
}

// The backward on one thread in one pass over dy and x (the two loops above read both twice):
// row by row, its parameter-gradient terms for every column, then its dx. Each column's sum
// still adds the rows in order, so the bits are those of the two loops.
template <typename DX, typename DY, typename X>
TP_CPU_CLONES void norm_backward_one_pass(DX* pdx, float* pdw, float* pdb, const float* pres,
                                          const DY* pdy, const X* px, const float* pw,
                                          const float* pmean, const float* prstd, int64_t rows,
                                          int64_t h) {
  std::vector<double> sw(static_cast<size_t>(h), 0.0), sb(static_cast<size_t>(h), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    param_grads_row(sw.data(), sb.data(), pdy + r * h, px + r * h, pmean, prstd[r], r, 0, h);
    dx_row(pdx + r * h, pres != nullptr ? pres + r * h : nullptr, pdy + r * h, px + r * h, pw,
           pmean, prstd[r], r, h);
  }
  add_param_grads(pdw, pdb, sw.data(), sb.data(), 0, h);
}

// The norms' backward (pres non-null: dx = dres + the norm's dx): one pass where it runs on one
// thread, else the two loops, each parallel.
template <typename DX, typename DY, typename X>
void norm_backward(DX* pdx, float* pdw, float* pdb, const float* pres, const DY* pdy, const X* px,
                   const float* pw, const float* pmean, const float* prstd, int64_t rows,
                   int64_t h) {
  if (rows * h <= cpu::kParallelMin || omp_get_max_threads() == 1) {
    norm_backward_one_pass(pdx, pdw, pdb, pres, pdy, px, pw, pmean, prstd, rows, h);
    return;
  }
  norm_param_grads_loop(pdw, pdb, pdy, px, pmean, prstd, rows, h);
  norm_dx_loop(pdx, pres, pdy, px, pw, pmean, prstd, rows, h);
}

// LayerNorm forward of one row of h: y, *mean, *rstd (device.h). Always inlined, as cpu::lane_sum,
// into the plain and the fused (residual add + norm) loops: one code for both, so the same bits.
template <typename Y, typename X>
TP_CPU_INLINE inline void layernorm_row(Y* yr, float* mean, float* rstd, const X* xr,
                                        const float* pw, const float* pb, int64_t h, float eps) {
  using cpu::load;
  const double mu = cpu::lane_sum(h, [&](int64_t c) TP_CPU_INLINE { return double{load(xr, c)}; }) /
                    static_cast<double>(h);
  const double ss = cpu::lane_sum(h, [&](int64_t c) TP_CPU_INLINE {
    const double d = load(xr, c) - mu;
    return d * d;
  });
  const float m = static_cast<float>(mu);
  const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
#pragma omp simd
  for (int64_t c = 0; c < h; ++c) cpu::store(yr, c, (load(xr, c) - m) * rs * pw[c] + pb[c]);
  *mean = m;
  *rstd = rs;
}

// RMSNorm forward of one row of h: y, *rstd (inlined, as layernorm_row).
template <typename Y, typename X>
TP_CPU_INLINE inline void rmsnorm_row(Y* yr, float* rstd, const X* xr, const float* pw, int64_t h,
                                      float eps) {
  using cpu::load;
  const double ss = cpu::lane_sum(h, [&](int64_t c) TP_CPU_INLINE {
    const float v = load(xr, c);
    return static_cast<double>(v) * v;
  });
  const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
#pragma omp simd
  for (int64_t c = 0; c < h; ++c) cpu::store(yr, c, load(xr, c) * rs * pw[c]);
  *rstd = rs;
}

// s = x + r of one row of h, in axpy's arithmetic (x + 1 · r is x + r): the fused loops' add.
TP_CPU_INLINE inline void add_row(float* sr, const float* xr, const float* rr, int64_t h) {
#pragma omp simd
  for (int64_t c = 0; c < h; ++c) sr[c] = xr[c] + rr[c];
}

// LayerNorm forward of rows × h: y, mean, rstd.
template <typename Y, typename X>
TP_CPU_CLONES void layernorm_forward_loop(Y* py, float* pmean, float* prstd, const X* px,
                                          const float* pw, const float* pb, int64_t rows, int64_t h,
                                          float eps) {
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    layernorm_row(py + r * h, pmean + r, prstd + r, px + r * h, pw, pb, h, eps);
}

// s = x + res, then LayerNorm of s, row by row: s is normalised while its row is in cache (the
// unfused pair wrote s, then read it again). The same bits as axpy then layernorm_forward_loop.
TP_CPU_CLONES void add_layernorm_forward_loop(float* ps, float* py, float* pmean, float* prstd,
                                              const float* px, const float* pres, const float* pw,
                                              const float* pb, int64_t rows, int64_t h, float eps) {
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    add_row(ps + r * h, px + r * h, pres + r * h, h);
    layernorm_row(py + r * h, pmean + r, prstd + r, ps + r * h, pw, pb, h, eps);
  }
}

// RMSNorm forward of rows × h: y, rstd.
template <typename Y, typename X>
TP_CPU_CLONES void rmsnorm_forward_loop(Y* py, float* prstd, const X* px, const float* pw,
                                        int64_t rows, int64_t h, float eps) {
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) rmsnorm_row(py + r * h, prstd + r, px + r * h, pw, h, eps);
}

// s = x + res, then RMSNorm of s, row by row (as add_layernorm_forward_loop).
TP_CPU_CLONES void add_rmsnorm_forward_loop(float* ps, float* py, float* prstd, const float* px,
                                            const float* pres, const float* pw, int64_t rows,
                                            int64_t h, float eps) {
#pragma omp parallel for if (rows * h > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    add_row(ps + r * h, px + r * h, pres + r * h, h);
    rmsnorm_row(py + r * h, prstd + r, ps + r * h, pw, h, eps);
  }
}
}  // namespace

void CpuDevice::do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                     const Tensor& w, const Tensor& b, float eps) {
  cpu::SmallF32 m(mean), rs(rstd);
  const cpu::SmallF32 pw(w), pb(b);
  cpu::typed(
      [&](auto* py, auto* px) {
    layernorm_forward_loop(py, m.data(), rs.data(), px, pw.data(), pb.data(), x.rows(), x.cols(),
                           eps);
      },
      y, x);
  m.round_back();
  rs.round_back();
}

void CpuDevice::do_add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd,
                                         const Tensor& x, const Tensor& r, const Tensor& w,
                                         const Tensor& b, float eps) {
  add_layernorm_forward_loop(s.data(), y.data(), mean.data(), rstd.data(), x.data(), r.data(),
                             w.data(), b.data(), x.rows(), x.cols(), eps);
}

void CpuDevice::do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                      const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd) {
  cpu::SmallF32 pdw(dw), pdb(db);
  const cpu::SmallF32 pw(w), m(mean), rs(rstd);
  cpu::typed(
      [&](auto* pdx, auto* pdy, auto* px) {
    norm_backward(pdx, pdw.data(), pdb.data(), nullptr, pdy, px, pw.data(), m.data(), rs.data(),
                  x.rows(), x.cols());
      },
      dx, dy, x);
  pdw.round_back();
  pdb.round_back();
}

void CpuDevice::do_layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                                          const Tensor& dy, const Tensor& x, const Tensor& w,
                                          const Tensor& mean, const Tensor& rstd) {
  norm_backward(dx.data(), dw.data(), db.data(), dres.data(), dy.data(), x.data(), w.data(),
                mean.data(), rstd.data(), x.rows(), x.cols());
}

void CpuDevice::do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                   float eps) {
  cpu::SmallF32 rs(rstd);
  const cpu::SmallF32 pw(w);
  cpu::typed(
      [&](auto* py, auto* px) {
    rmsnorm_forward_loop(py, rs.data(), px, pw.data(), x.rows(), x.cols(), eps);
      },
      y, x);
  rs.round_back();
}

void CpuDevice::do_add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x,
                                       const Tensor& r, const Tensor& w, float eps) {
  add_rmsnorm_forward_loop(s.data(), y.data(), rstd.data(), x.data(), r.data(), w.data(), x.rows(),
                           x.cols(), eps);
}

void CpuDevice::do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                    const Tensor& w, const Tensor& rstd) {
  cpu::SmallF32 pdw(dw);
  const cpu::SmallF32 pw(w), rs(rstd);
  cpu::typed(
      [&](auto* pdx, auto* pdy, auto* px) {
    norm_backward(pdx, pdw.data(), nullptr, nullptr, pdy, px, pw.data(), nullptr, rs.data(),
                  x.rows(), x.cols());
      },
      dx, dy, x);
  pdw.round_back();
}

void CpuDevice::do_rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres,
                                        const Tensor& dy, const Tensor& x, const Tensor& w,
                                        const Tensor& rstd) {
  norm_backward(dx.data(), dw.data(), nullptr, dres.data(), dy.data(), x.data(), w.data(), nullptr,
                rstd.data(), x.rows(), x.cols());
}

}  // namespace tp
