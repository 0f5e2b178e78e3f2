// kernels_model.cu — the GPU backend's activation, norm and optimizer kernels: GeLU, SwiGLU,
// LayerNorm, RMSNorm, AdamW, and the bias gradient (a column sum, like the norms' dw and db). The
// math of each kernel sits in a comment above it, the forward next to its backward (llm.c style); the contract is in core/device.h and the reference is the CPU
// backend (cpu_backend/cpu_kernels.cpp), whose arithmetic (f32 vs f64 steps) is mirrored here.
//
// Determinism: no float atomics. Elementwise kernels compute each output once. Row statistics use
// one block per row (or per chunk of rows) and a fixed-tree block reduction (reduce.cuh).
// Parameter gradients summed over rows are f64 partial sums over fixed chunks of rows, in row
// order, then one thread per column adds the chunk sums in chunk order: the chunking depends only
// on the shape, so results are bit-identical from run to run. The bias gradient does this with two
// kernels (column_sums); the norms' dw (and LayerNorm's db) are summed inside the backward kernel
// itself, which also writes dx, so dy and x are read from memory once.
//
// Launch configurations: elementwise kernels 256 threads with a grid stride; row kernels one block
// per row (the fused norm backward: per 16 rows), grid stride, threads = h rounded up to a warp,
// at most 256.
#include <cmath>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_device.h"
#include "reduce.cuh"

namespace tp {

namespace {
constexpr int kThreads = 256;       // elementwise and column-sum kernels
constexpr int kRowThreads = 256;    // most threads for a one-block-per-row kernel
constexpr int64_t kRowChunk = 64;   // rows per partial column sum (bias gradient)
constexpr int64_t kNormChunk = 16;  // rows per block of the fused norm backward (dx, dw, db)

}  // namespace

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

// ---- activations ---------------------------------------------------------------------------------

// GeLU, tanh approximation, with a = √(2/π), z = a (x + 0.044715 x³):
//   y  = 0.5 x (1 + tanh z)
//   y' = 0.5 (1 + tanh z) + 0.5 x (1 − tanh² z) · a (1 + 3 · 0.044715 x²)
constexpr float kGeluA = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

__global__ void gelu_forward_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float xi = x[i];
    y[i] = 0.5f * xi * (1.0f + tanhf(kGeluA * (xi + kGeluC * xi * xi * xi)));
  }
}

__global__ void gelu_backward_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float xi = x[i];
    const float t = tanhf(kGeluA * (xi + kGeluC * xi * xi * xi));
    const float grad =
        0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * kGeluA * (1.0f + 3.0f * kGeluC * xi * xi);
    dx[i] = dy[i] * grad;
  }
}

// SwiGLU, σ(g) = 1 / (1 + e^−g), silu(g) = g σ(g), silu'(g) = σ(g) (1 + g (1 − σ(g))):
//   y = silu(g) ⊙ u
//   dg = dy ⊙ u ⊙ silu'(g),  du = dy ⊙ silu(g)
__global__ void swiglu_forward_kernel(float* y, const float* g, const float* u, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = g[i];
    const float sig = 1.0f / (1.0f + expf(-gi));
    y[i] = gi * sig * u[i];
  }
}

__global__ void swiglu_backward_kernel(float* dg, float* du, const float* dy, const float* g,
                                       const float* u, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = g[i], ui = u[i], dyi = dy[i];  // read all before writing (no aliasing rule)
    const float sig = 1.0f / (1.0f + expf(-gi));
    dg[i] = dyi * ui * sig * (1.0f + gi * (1.0f - sig));
    du[i] = dyi * gi * sig;
  }
}

// ---- parameter-gradient column sums (the bias gradient) --------------------------------------------

// out[c] += Σ_r term(r, c), deterministic in two steps:
//   partial[k, c] = Σ_{r in chunk k, in order} term(r, c)          (f64; one thread per (k, c))
//   out[c] += f32(Σ_k partial[k, c], k in order)                    (one thread per c)
// column_finish_kernel also finishes the norms' fused backward (below).
struct DyTerm {
  const float* dy;
  __device__ double operator()(int64_t, int64_t i) const { return static_cast<double>(dy[i]); }
};

// One thread per (chunk k, column c), item = k·h + c: consecutive threads read consecutive columns.
template <typename Term>
__global__ void column_partial_sums_kernel(double* partial, int64_t rows, int64_t h,
                                           int64_t nchunks, Term term) {
  const int64_t items = nchunks * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t k = item / h, c = item % h;
    const int64_t r0 = k * kRowChunk;
    const int64_t r1 = r0 + kRowChunk < rows ? r0 + kRowChunk : rows;
    double acc = 0.0;
    for (int64_t r = r0; r < r1; ++r) acc += term(r, r * h + c);
    partial[item] = acc;
  }
}

__global__ void column_finish_kernel(float* out, const double* partial, int64_t h,
                                     int64_t nchunks) {
  for (int64_t c = gpu::global_thread(); c < h; c += gpu::grid_threads()) {
    double acc = 0.0;
    for (int64_t k = 0; k < nchunks; ++k) acc += partial[k * h + c];
    out[c] += static_cast<float>(acc);
  }
}

// ---- norms ---------------------------------------------------------------------------------------

// LayerNorm over the last dim (h) of each row:
//   μ = mean(x), σ² = mean((x − μ)²) (biased), rstd = 1/√(σ² + eps), x̂ = (x − μ) rstd
//   y = x̂ ⊙ w + b
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

// RMSNorm over the last dim (h) of each row:
//   rstd = 1/√(mean(x²) + eps), x̂ = x rstd, y = x̂ ⊙ w
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

// Norm backward, with g = dy ⊙ w and x̂ = (x − μ) rstd (LayerNorm) or x rstd (RMSNorm):
//   LayerNorm: dx = rstd (g − mean(g) − x̂ mean(g ⊙ x̂)),  dw += Σ_r dy ⊙ x̂,  db += Σ_r dy
//   RMSNorm:   dx = rstd (g − x̂ mean(g ⊙ x̂)),           dw += Σ_r dy ⊙ x̂
// One block per chunk of kNormChunk rows (grid stride over chunks); for each row in order: the
// row sums (f64 block reductions), then dx for this thread's columns, adding dy·x̂ (and dy) into
// the chunk's f64 partial sums of those columns (dw_part, db_part: (nchunks, h), each element
// owned by one thread). column_finish_kernel then adds the chunks in order. dy and x are read
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

// ---- optimizer -----------------------------------------------------------------------------------

// AdamW, g' = grad_scale · g:
//   m = β1 m + (1 − β1) g',  v = β2 v + (1 − β2) g'²
//   p −= lr · (m / (1 − β1^step)) / (√(v / (1 − β2^step)) + eps) + lr · wd · p
// bc1 = 1 − β1^step, bc2 = 1 − β2^step are computed on the host in f64, as on the CPU.
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, AdamWParams hp,
                             float bc1, float bc2, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads()) {
    const float gi = hp.grad_scale * g[i];
    const float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * gi;
    const float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / bc1) / (sqrtf(vi / bc2) + hp.eps);
    const float pi = p[i];
    p[i] = pi - (hp.lr * update + hp.lr * hp.weight_decay * pi);
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

namespace {
// out[c] += Σ_r term(r, c) for a (rows, h) tensor, through the device's scratch memory.
template <typename Term>
void column_sums(CudaDevice& dev, float* out, int64_t rows, int64_t h, Term term) {
  if (h == 0) return;
  const int64_t nchunks = (rows + kRowChunk - 1) / kRowChunk;  // 0 rows: 0 chunks, out += 0
  double* partial = nullptr;
  if (nchunks > 0) {
    partial = static_cast<double*>(dev.scratch(static_cast<size_t>(nchunks * h) * sizeof(double)));
    column_partial_sums_kernel<<<gpu::grid_blocks(nchunks * h, kThreads), kThreads, 0,
                                 dev.stream()>>>(partial, rows, h, nchunks, term);
    CUDA_CHECK_LAUNCH();
  }
  column_finish_kernel<<<gpu::grid_blocks(h, kThreads), kThreads, 0, dev.stream()>>>(out, partial,
                                                                                     h, nchunks);
  CUDA_CHECK_LAUNCH();
}

unsigned int elementwise_blocks(int64_t n) { return gpu::grid_blocks(n, kThreads); }
unsigned int row_blocks(int64_t rows) { return gpu::grid_blocks(rows, 1); }

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
  const unsigned int threads = gpu::threads_for(h, kRowThreads);
  if (layernorm) {
    norm_backward_kernel<true><<<row_blocks(nchunks), threads, 0, dev.stream()>>>(
        dx.data(), dw_part, db_part, dy.data(), x.data(), w.data(), mean, rstd, rows, h, nchunks);
  } else {
    norm_backward_kernel<false><<<row_blocks(nchunks), threads, 0, dev.stream()>>>(
        dx.data(), dw_part, db_part, dy.data(), x.data(), w.data(), mean, rstd, rows, h, nchunks);
  }
  CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<gpu::grid_blocks(h, kThreads), kThreads, 0, dev.stream()>>>(dw, dw_part, h,
                                                                                     nchunks);
  CUDA_CHECK_LAUNCH();
  if (layernorm) {
    column_finish_kernel<<<gpu::grid_blocks(h, kThreads), kThreads, 0, dev.stream()>>>(db, db_part,
                                                                                       h, nchunks);
    CUDA_CHECK_LAUNCH();
  }
}
}  // namespace

// dbias[c] += Σ_r dy[r, c]: the two-step column sum (f64 partials over 64-row chunks, then the
// chunks in order), so a (tokens, cols) gradient keeps the whole GPU busy instead of one thread
// per column walking every row.
void CudaDevice::do_add_bias_backward(Tensor& dbias, const Tensor& dy) {
  column_sums(*this, dbias.data(), dy.rows(), dy.cols(), DyTerm{dy.data()});
}

void CudaDevice::do_gelu_forward(Tensor& y, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gelu_forward_kernel<<<elementwise_blocks(n), kThreads, 0, stream()>>>(y.data(), x.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gelu_backward_kernel<<<elementwise_blocks(n), kThreads, 0, stream()>>>(dx.data(), dy.data(),
                                                                         x.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) {
  const int64_t n = g.numel();
  if (n == 0) return;
  swiglu_forward_kernel<<<elementwise_blocks(n), kThreads, 0, stream()>>>(y.data(), g.data(),
                                                                          u.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                                    const Tensor& u) {
  const int64_t n = g.numel();
  if (n == 0) return;
  swiglu_backward_kernel<<<elementwise_blocks(n), kThreads, 0, stream()>>>(
      dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                      const Tensor& w, const Tensor& b, float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows == 0) return;
  layernorm_forward_kernel<<<row_blocks(rows), gpu::threads_for(h, kRowThreads), 0, stream()>>>(
      y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, h, eps);
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
  rmsnorm_forward_kernel<<<row_blocks(rows), gpu::threads_for(h, kRowThreads), 0, stream()>>>(
      y.data(), rstd.data(), x.data(), w.data(), rows, h, eps);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                     const Tensor& w, const Tensor& rstd) {
  norm_backward(*this, false, dx, dw.data(), nullptr, dy, x, w, nullptr, rstd.data());
}

void CudaDevice::do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                               const AdamWParams& hp, int64_t step) {
  const float bc1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(step)));
  const float bc2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(step)));
  const int64_t n = p.numel();
  if (n == 0) return;
  adamw_kernel<<<elementwise_blocks(n), kThreads, 0, stream()>>>(p.data(), g.data(), m.data(),
                                                                 v.data(), hp, bc1, bc2, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
