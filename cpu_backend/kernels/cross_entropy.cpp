// cross_entropy.cpp — the CPU backend's pieces of the vocabulary-parallel cross-entropy: the row
// max, the sum of exponentials and the target logit, the loss, and its backward (softmax minus
// one-hot), with the all-reduces between them in lib/parallel/vocab_parallel. The math is in
// core/device.h; the GPU's are in gpu_backend/kernels/cross_entropy.cu.
//
// Only the real columns [0, real_cols) of a shard take part (the rest pads V up to a multiple of
// t). The exponentials and their sum are f64.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

void CpuDevice::do_vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& /*shard*/,
                             int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  const float* px = logits.data();
  float* pm = row_max.data();
#pragma omp parallel for if (n * cols > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = px + i * cols;
    float m = -INFINITY;
    for (int64_t j = 0; j < real_cols; ++j) m = std::max(m, xr[j]);
    pm[i] = m;
  }
}

void CpuDevice::do_vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                                        const Tensor& row_max, const Tensor& targets,
                                        const VocabShard& shard, int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  const float* px = logits.data();
  const float* pm = row_max.data();
  const float* pt = targets.data();
  float* ps = sum_exp.data();
  float* py = target_logit.data();
#pragma omp parallel for if (n * cols > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = px + i * cols;
    const double m = pm[i];
    double s = 0.0;
    for (int64_t j = 0; j < real_cols; ++j) s += std::exp(static_cast<double>(xr[j]) - m);
    const int64_t j = static_cast<int64_t>(pt[i]) - shard.first;  // target < V: owned j < real_cols
    ps[i] = static_cast<float>(s);
    py[i] = j >= 0 && j < real_cols ? xr[j] : 0.0f;
  }
}

void CpuDevice::do_vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                              const Tensor& target_logit) {
  const float* pm = row_max.data();
  const float* ps = sum_exp.data();
  const float* py = target_logit.data();
  float* pl = loss.data();
  const int64_t n = loss.numel();
#pragma omp parallel for if (n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    pl[i] = static_cast<float>(std::log(static_cast<double>(ps[i])) + pm[i] - py[i]);
}

// Every dlogits element depends on its own logit only, so dlogits may alias logits.
void CpuDevice::do_vocab_softmax_backward(Tensor& dlogits, const Tensor& logits,
                                          const Tensor& row_max, const Tensor& sum_exp,
                                          const Tensor& targets, const VocabShard& shard,
                                          float scale, int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  const float* px = logits.data();
  const float* pm = row_max.data();
  const float* ps = sum_exp.data();
  const float* pt = targets.data();
  float* pd = dlogits.data();
#pragma omp parallel for if (n * cols > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = px + i * cols;
    float* dr = pd + i * cols;
    const double m = pm[i], inv = 1.0 / static_cast<double>(ps[i]);
    const int64_t y = static_cast<int64_t>(pt[i]) - shard.first;  // local target column, if owned
    for (int64_t j = 0; j < real_cols; ++j) {  // x_ij is read before dlogits_ij is written
      const float p = static_cast<float>(std::exp(static_cast<double>(xr[j]) - m) * inv);
      dr[j] = scale * (p - (j == y ? 1.0f : 0.0f));
    }
    for (int64_t j = real_cols; j < cols; ++j) dr[j] = 0.0f;
  }
}

}  // namespace tp
