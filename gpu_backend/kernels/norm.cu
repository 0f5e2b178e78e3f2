// norm.cu — the GPU backend's norms over the last dim of each row, forward beside backward:
// LayerNorm and RMSNorm. The math is in core/device.h; the CPU's are in
// cpu_backend/kernels/norm.cpp, whose arithmetic (f32 vs f64 steps) these mirror.
//
// Row statistics use one block per row and a fixed-tree block reduction (kernel_util.cuh).
// The parameter gradients are f64 partial sums over fixed chunks of rows, in row order, summed
// inside the backward kernel itself, which also writes dx, so dy and x are read from memory once;
// then one thread per column adds the chunk sums in chunk order (gpu::column_finish,
// kernels/reduce.cu): bit-identical from run to run. Both norms read and write bf16 themselves
// (native_bf16): the statistics stay f64 / f32 sums of the widened values, each stored element
// is rounded once.
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

// One block per row: Σx, then Σ(x − μ)² (f64, block reductions), then y. Every kernel here is
// kernel<kTyped> over gpu::In / gpu::Out (kernel_util.cuh): x, w, b, y, dy, dx in f32 or bf16,
// the statistics computed in f64 / f32 as below whatever the storage.
template <bool T>
__global__ void layernorm_forward_kernel(gpu::Out<T> y, gpu::Out<T> mean, gpu::Out<T> rstd,
                                         gpu::In<T> x, gpu::In<T> w, gpu::In<T> b, int64_t rows,
                                         int64_t h, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * h;
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) s += x[row + c];
    s = gpu::block_sum(s);
    const double mu = s / static_cast<double>(h);
    double ss = 0.0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      const float xc = x[row + c];
      ss += (xc - mu) * (xc - mu);
    }
    ss = gpu::block_sum(ss);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(h) + eps));
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
      y.set(row + c, (x[row + c] - m) * rs * w[c] + b[c]);
    if (threadIdx.x == 0) {
      mean.set(r, m);
      rstd.set(r, rs);
    }
  }
}

// One block per row: Σx² (f64, block reduction), then y.
template <bool T>
__global__ void rmsnorm_forward_kernel(gpu::Out<T> y, gpu::Out<T> rstd, gpu::In<T> x, gpu::In<T> w,
                                       int64_t rows, int64_t h, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * h;
    double ss = 0.0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      const float xc = x[row + c];
      ss += static_cast<double>(xc) * xc;
    }
    ss = gpu::block_sum(ss);
    const float rs = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(h) + eps));
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) y.set(row + c, x[row + c] * rs * w[c]);
    if (threadIdx.x == 0) rstd.set(r, rs);
  }
}

// The backward of both norms (kLayerNorm: LayerNorm, else RMSNorm, where μ = 0 and there is no db).
// One block per chunk of kNormChunk rows (grid stride over chunks); for each row in order: the
// row sums (f64 block reductions), then dx for this thread's columns, adding dy·x̂ (and dy) into
// the chunk's f64 partial sums of those columns (dw_part, db_part: (nchunks, h), each element
// owned by one thread). gpu::column_finish then adds the chunks in order. dy and x are read
// from memory once; the second pass over a row finds it in cache. The arithmetic is the CPU's
// (x̂ in f32, products into f64).
template <bool kLayerNorm, bool T>
__global__ void norm_backward_kernel(gpu::Out<T> dx, double* dw_part, double* db_part,
                                     gpu::In<T> dy, gpu::In<T> x, gpu::In<T> w, gpu::In<T> mean,
                                     gpu::In<T> rstd, int64_t rows, int64_t h, int64_t nchunks) {
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
      const int64_t row = r * h;
      const float m = kLayerNorm ? mean[r] : 0.0f, rs = rstd[r];
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float g = dy[row + c] * w[c];
        if (kLayerNorm) sum_g += g;
        sum_gx += static_cast<double>(g) * ((x[row + c] - m) * rs);
      }
      if (kLayerNorm) sum_g = gpu::block_sum(sum_g);
      sum_gx = gpu::block_sum(sum_gx);  // synchronises: every thread has read dy and x of row r
      const float mean_g = kLayerNorm ? static_cast<float>(sum_g / static_cast<double>(h)) : 0.0f;
      const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
      for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float dyc = dy[row + c], xhat = (x[row + c] - m) * rs;
        dx.set(row + c, kLayerNorm ? rs * (dyc * w[c] - mean_g - xhat * mean_gx)
                                   : rs * (dyc * w[c] - xhat * mean_gx));
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
void norm_backward(CudaDevice& dev, bool layernorm, Tensor& dx, Tensor& dw, Tensor* db,
                   const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* mean,
                   const Tensor& rstd) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows == 0 || h == 0) return;  // dw, db += 0
  const int64_t nchunks = (rows + kNormChunk - 1) / kNormChunk;
  const size_t part = static_cast<size_t>(nchunks * h);
  auto* dw_part = static_cast<double*>(dev.scratch((layernorm ? 2 : 1) * part * sizeof(double)));
  double* db_part = layernorm ? dw_part + part : nullptr;
  const unsigned int threads = gpu::threads_for(h, gpu::kRowThreads);
  const Tensor no_mean;  // RMSNorm: μ = 0, never read
  const Tensor& mu = mean != nullptr ? *mean : no_mean;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    if (layernorm) {
      norm_backward_kernel<true, T><<<gpu::row_blocks(nchunks), threads, 0, dev.stream()>>>(
          gpu::out<T>(dx), dw_part, db_part, gpu::in<T>(dy), gpu::in<T>(x), gpu::in<T>(w),
          gpu::in<T>(mu), gpu::in<T>(rstd), rows, h, nchunks);
    } else {
      norm_backward_kernel<false, T><<<gpu::row_blocks(nchunks), threads, 0, dev.stream()>>>(
          gpu::out<T>(dx), dw_part, db_part, gpu::in<T>(dy), gpu::in<T>(x), gpu::in<T>(w),
          gpu::in<T>(mu), gpu::in<T>(rstd), rows, h, nchunks);
    }
      },
      dx, dy, x, w, mu, rstd);
  CUDA_CHECK_LAUNCH();
  gpu::column_finish(dev, dw, dw_part, h, nchunks);
  if (layernorm) {
    gpu::column_finish(dev, *db, db_part, h, nchunks);
  }
}
}  // namespace

void CudaDevice::do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                      const Tensor& w, const Tensor& b, float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    layernorm_forward_kernel<T>
        <<<gpu::row_blocks(rows), gpu::threads_for(h, gpu::kRowThreads), 0, stream()>>>(
            gpu::out<T>(y), gpu::out<T>(mean), gpu::out<T>(rstd), gpu::in<T>(x), gpu::in<T>(w),
            gpu::in<T>(b), rows, h, eps);
      },
      y, mean, rstd, x, w, b);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                       const Tensor& x, const Tensor& w, const Tensor& mean,
                                       const Tensor& rstd) {
  norm_backward(*this, true, dx, dw, &db, dy, x, w, &mean, rstd);
}

void CudaDevice::do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                    float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    rmsnorm_forward_kernel<T>
        <<<gpu::row_blocks(rows), gpu::threads_for(h, gpu::kRowThreads), 0, stream()>>>(
            gpu::out<T>(y), gpu::out<T>(rstd), gpu::in<T>(x), gpu::in<T>(w), rows, h, eps);
      },
      y, rstd, x, w);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                     const Tensor& w, const Tensor& rstd) {
  norm_backward(*this, false, dx, dw, nullptr, dy, x, w, nullptr, rstd);
}

}  // namespace tp
