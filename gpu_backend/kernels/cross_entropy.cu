// cross_entropy.cu — the GPU backend's pieces of the vocabulary-parallel cross-entropy: the row
// max, the sum of exponentials and the target logit, the loss, and its backward (softmax minus
// one-hot), with the all-reduces between them in lib/parallel/vocab_parallel. The math is in
// core/device.h; the CPU's are in cpu_backend/kernels/cross_entropy.cpp, whose f32 vs f64 steps
// these mirror.
//
// Host round trips: the targets arrive as f32 device tensors, and the public Device call
// (core/device.cpp) copies them to the host to check them (one synchronisation per call of
// vocab_sum_exp_target and vocab_softmax_backward).
#include <cmath>
#include <cstdint>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

// Columns [0, real) of a shard are real, real = clamp(V − first, 0, cols); the rest is padding.
// The row kernels: one block per row, grid stride, block reductions. Every kernel here is
// kernel<kTyped> over gpu::In / gpu::Out (kernel_util.cuh): bf16 logits and their gradient are
// read and written directly; the max, Σ e^x, target logit and loss are computed as below
// (f32 / f64) whatever the storage.
template <bool T>
__global__ void vocab_max_kernel(gpu::Out<T> row_max, gpu::In<T> logits, int64_t n, int64_t cols,
                                 int64_t real) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t row = i * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = fmaxf(m, logits[row + j]);
    m = gpu::block_max(m);
    if (threadIdx.x == 0) row_max.set(i, m);
  }
}

// Σ in f64 of e^(f64(x) − m), as on the CPU; the target logit read by thread 0.
template <bool T>
__global__ void vocab_sum_exp_target_kernel(gpu::Out<T> sum_exp, gpu::Out<T> target_logit,
                                            gpu::In<T> logits, gpu::In<T> row_max,
                                            gpu::In<T> targets, int64_t n, int64_t cols,
                                            int64_t real, int64_t first) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t row = i * cols;
    const double m = row_max[i];
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x)
      s += exp(static_cast<double>(logits[row + j]) - m);
    s = gpu::block_sum(s);
    if (threadIdx.x == 0) {
      const int64_t j = static_cast<int64_t>(targets[i]) - first;  // target < V: j < real if owned
      sum_exp.set(i, static_cast<float>(s));
      target_logit.set(i, j >= 0 && j < real ? logits[row + j] : 0.0f);
    }
  }
}

// In f64 as on the CPU; one thread per row.
template <bool T>
__global__ void vocab_loss_kernel(gpu::Out<T> loss, gpu::In<T> row_max, gpu::In<T> sum_exp,
                                  gpu::In<T> target_logit, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    loss.set(
        i, static_cast<float>(log(static_cast<double>(sum_exp[i])) + row_max[i] - target_logit[i]));
}

// dlogits_ij = scale (p_ij − [j = y]) with p_ij = f32(e^(f64(x_ij) − m_i) · (1/Σ_i)), 0 on
// padding. One block per row, one thread per column: each element reads its own logit before
// writing, so dlogits may alias logits.
template <bool T>
__global__ void vocab_softmax_backward_kernel(gpu::Out<T> dlogits, gpu::In<T> logits,
                                              gpu::In<T> row_max, gpu::In<T> sum_exp,
                                              gpu::In<T> targets, int64_t n, int64_t cols,
                                              int64_t real, int64_t first, float scale) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t row = i * cols;
    const double m = row_max[i], inv = 1.0 / static_cast<double>(sum_exp[i]);
    const int64_t y = static_cast<int64_t>(targets[i]) - first;  // local target column, if owned
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      if (j < real) {
        const float p = static_cast<float>(exp(static_cast<double>(logits[row + j]) - m) * inv);
        dlogits.set(row + j, scale * (p - (j == y ? 1.0f : 0.0f)));
      } else {
        dlogits.set(row + j, 0.0f);
      }
    }
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& /*shard*/,
                              int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    vocab_max_kernel<T>
        <<<gpu::row_blocks(n), gpu::threads_for(real_cols, gpu::kRowThreads), 0, stream()>>>(
            gpu::out<T>(row_max), gpu::in<T>(logits), n, cols, real_cols);
      },
      row_max, logits);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit,
                                         const Tensor& logits, const Tensor& row_max,
                                         const Tensor& targets, const VocabShard& shard,
                                         int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    vocab_sum_exp_target_kernel<T>
        <<<gpu::row_blocks(n), gpu::threads_for(real_cols, gpu::kRowThreads), 0, stream()>>>(
            gpu::out<T>(sum_exp), gpu::out<T>(target_logit), gpu::in<T>(logits),
            gpu::in<T>(row_max), gpu::in<T>(targets), n, cols, real_cols, shard.first);
      },
      sum_exp, target_logit, logits, row_max, targets);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                               const Tensor& target_logit) {
  const int64_t n = loss.numel();
  if (n == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    vocab_loss_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream()>>>(
        gpu::out<T>(loss), gpu::in<T>(row_max), gpu::in<T>(sum_exp), gpu::in<T>(target_logit), n);
      },
      loss, row_max, sum_exp, target_logit);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_vocab_softmax_backward(Tensor& dlogits, const Tensor& logits,
                                           const Tensor& row_max, const Tensor& sum_exp,
                                           const Tensor& targets, const VocabShard& shard,
                                           float scale, int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  if (n * cols == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    vocab_softmax_backward_kernel<T>
        <<<gpu::row_blocks(n), gpu::threads_for(cols, gpu::kRowThreads), 0, stream()>>>(
            gpu::out<T>(dlogits), gpu::in<T>(logits), gpu::in<T>(row_max), gpu::in<T>(sum_exp),
            gpu::in<T>(targets), n, cols, real_cols, shard.first, scale);
      },
      dlogits, logits, row_max, sum_exp, targets);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
