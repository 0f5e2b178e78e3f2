// norm.cu — the GPU backend's norms over the last dim of each row, forward beside backward:
// LayerNorm and RMSNorm. The math is in core/device.h; the CPU's are in
// cpu_backend/kernels/norm.cpp, whose arithmetic (f32 vs f64 steps) these mirror.
//
// Row statistics use one block per row and a fixed-tree block reduction (kernel_util.cuh).
// The parameter gradients are f64 partial sums over fixed chunks of rows, in row order, summed
// inside the backward kernel itself, which also writes dx, so dy and x are read from memory once;
// then one thread per column adds the chunk sums in chunk order (gpu::column_finish,
// kernels/reduce.cu): bit-identical from run to run.
#include <cstdint>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

constexpr int64_t kNormChunk = 16;  // rows per block of the fused norm backward (dx, dw, db)

// One block per row: Σx, then Σ(x − μ)² (f64, block reductions), then y.
__global__ void layernorm_forward_kernel(float* y, float* mean, float* rstd, const float* x,
                                         const float* w, const float* b, int64_t rows, int64_t h,
                                         float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * h;
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) s += xr[c];
    s = gpu::block_sum(s);
    const double mu = s / static_cast<double>(h);
    double ss = 0.0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) ss += (xr[c] - mu) * (xr[c] - mu);
    ss = gpu::block_sum(ss);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(h) + eps));
    float* yr = y + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

// One block per row: Σx² (f64, block reduction), then y.
__global__ void rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* w,
                                       int64_t rows, int64_t h, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * h;
    double ss = 0.0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) ss += static_cast<double>(xr[c]) * xr[c];
    ss = gpu::block_sum(ss);
    const float rs = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(h) + eps));
    float* yr = y + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) yr[c] = xr[c] * rs * w[c];
    if (threadIdx.x == 0) rstd[r] = rs;
  }
}

// The backward of both norms (kLayerNorm: LayerNorm, else RMSNorm, where μ = 0 and there is no db).
// One block per chunk of kNormChunk rows (grid stride over chunks); for each row in order: the
// row sums (f64 block reductions), then dx for this thread's columns, adding dy·x̂ (and dy) into
// the chunk's f64 partial sums of those columns (dw_part, db_part: (nchunks, h), each element
// owned by one thread). gpu::column_finish then adds the chunks in order. dy and x are read
// from memory once; the second pass over a row finds it in cache. The arithmetic is the CPU's
// (x̂ in f32, products into f64).
template <bool kLayerNorm>
__global__ void norm_backward_kernel(float* dx, double* dw_part, double* db_part, const float* dy,
                                     const float* x, const float* w, const float* mean,
                                     const float* rstd, int64_t rows, int64_t h, int64_t nchunks) {
  for (int64_t k = blockIdx.x; k < nchunks; k += gridDim.x) {
    const int64_t r0 = k * kNormChunk;
    const int64_t r1 = r0 + kNormChunk < rows ? r0 + kNormChunk : rows;
    double* dwp = dw_part + k * h;
    double* dbp = kLayerNorm ? db_part + k * h : nullptr;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      dwp[c] = 0.0;
      if (kLayerNorm) dbp[c] = 0.0;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * h;
      const float* dyr = dy + r * h;
      const float m = kLayerNorm ? mean[r] : 0.0f, rs = rstd[r];
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float g = dyr[c] * w[c];
        if (kLayerNorm) sum_g += g;
        sum_gx += static_cast<double>(g) * ((xr[c] - m) * rs);
      }
      if (kLayerNorm) sum_g = gpu::block_sum(sum_g);
      sum_gx = gpu::block_sum(sum_gx);  // synchronises: every thread has read dy and x of row r
      const float mean_g = kLayerNorm ? static_cast<float>(sum_g / static_cast<double>(h)) : 0.0f;
      const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
      float* dxr = dx + r * h;
      for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float dyc = dyr[c], xhat = (xr[c] - m) * rs;
        dxr[c] = kLayerNorm ? rs * (dyc * w[c] - mean_g - xhat * mean_gx)
                            : rs * (dyc * w[c] - xhat * mean_gx);
        dwp[c] += static_cast<double>(dyc) * xhat;
        if (kLayerNorm) dbp[c] += static_cast<double>(dyc);
      }
    }
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

namespace {
// The fused norm backward (norm_backward_kernel), then the chunk sums into dw (and db).
void norm_backward(CudaDevice& dev, bool layernorm, Tensor& dx, float* dw, float* db,
                   const Tensor& dy, const Tensor& x, const Tensor& w, const float* mean,
                   const float* rstd) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows == 0 || h == 0) return;  // dw, db += 0
  const int64_t nchunks = (rows + kNormChunk - 1) / kNormChunk;
  const size_t part = static_cast<size_t>(nchunks * h);
  auto* dw_part = static_cast<double*>(dev.scratch((layernorm ? 2 : 1) * part * sizeof(double)));
  double* db_part = layernorm ? dw_part + part : nullptr;
  const unsigned int threads = gpu::threads_for(h, gpu::kRowThreads);
  if (layernorm) {
    norm_backward_kernel<true><<<gpu::row_blocks(nchunks), threads, 0, dev.stream()>>>(
        dx.data(), dw_part, db_part, dy.data(), x.data(), w.data(), mean, rstd, rows, h, nchunks);
  } else {
    norm_backward_kernel<false><<<gpu::row_blocks(nchunks), threads, 0, dev.stream()>>>(
        dx.data(), dw_part, db_part, dy.data(), x.data(), w.data(), mean, rstd, rows, h, nchunks);
  }
  CUDA_CHECK_LAUNCH();
  gpu::column_finish(dev, dw, dw_part, h, nchunks);
  if (layernorm) {
    gpu::column_finish(dev, db, db_part, h, nchunks);
  }
}
}  // namespace

void CudaDevice::do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                      const Tensor& w, const Tensor& b, float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows == 0) return;
  layernorm_forward_kernel<<<gpu::row_blocks(rows), gpu::threads_for(h, gpu::kRowThreads), 0,
                             stream()>>>(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                         b.data(), rows, h, eps);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                       const Tensor& x, const Tensor& w, const Tensor& mean,
                                       const Tensor& rstd) {
  norm_backward(*this, true, dx, dw.data(), db.data(), dy, x, w, mean.data(), rstd.data());
}

void CudaDevice::do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                    float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows == 0) return;
  rmsnorm_forward_kernel<<<gpu::row_blocks(rows), gpu::threads_for(h, gpu::kRowThreads), 0,
                           stream()>>>(y.data(), rstd.data(), x.data(), w.data(), rows, h, eps);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                     const Tensor& w, const Tensor& rstd) {
  norm_backward(*this, false, dx, dw.data(), nullptr, dy, x, w, nullptr, rstd.data());
}

}  // namespace tp
