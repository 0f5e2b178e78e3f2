// cross_entropy.cpp — the CPU backend's pieces of the vocabulary-parallel cross-entropy: the row
// max, the sum of exponentials and the target logit, the loss, and its backward (softmax minus
// one-hot), with the all-reduces between them in lib/parallel/vocab_parallel. The math is in
// core/device.h; the GPU's are in gpu_backend/kernels/cross_entropy.cu.
//
// Only the real columns [0, real_cols) of a shard take part (the rest pads V up to a multiple of
// t). Each exponential is cpu::exp_small of the f32 difference x − max (within 1 ulp of e^x,
// kernel_util.h; below e^−87.3 it is 0, where the term is under 1e−38 of the row's largest), their
// sum is f64 in cpu::lane_sum's fixed lanes, and the backward's softmax is that exponential times
// the f32 reciprocal of the sum. The loops are cloned per vector width (TP_CPU_CLONES) and give the
// same bits in every clone. Until they were, std::exp in f64 per element made the loss 42 % of a
// step at GPT-2's vocabulary. Measured, one thread, --layers 4 --hidden 256 --heads 8 --seq 128
// --batch 8 --vocab 50257 (tp_train --trace): the row max, the sums and the backward took 73, 342
// and 337 ms a step (of 1.78 s), now 21, 55 and 53; 560-600 tokens/s became 820-940, the same
// losses to 7 digits. What stays scalar: the lanes' final pairwise sums and the maximum's.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

namespace {
// max over x[0, n) (−inf when n = 0) in kLanes lanes, then the lanes by halves: a maximum is exact
// in any order (but for the sign of a zero, which no use of it sees), and NaN is skipped as by
// std::max(m, x), which keeps m.
TP_CPU_CLONES float row_max(const float* x, int64_t n) {
  constexpr int kLanes = cpu::kLanes;
  float m[kLanes];
  for (int j = 0; j < kLanes; ++j) m[j] = -INFINITY;
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int j = 0; j < kLanes; ++j) m[j] = m[j] < x[c + j] ? x[c + j] : m[j];
  for (int j = 0; c + j < n; ++j) m[j] = m[j] < x[c + j] ? x[c + j] : m[j];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) m[j] = m[j] < m[j + w] ? m[j + w] : m[j];
  return m[0];
}

// e^(x − m) for x ≤ m: cpu::exp_small on the f32 difference, clamped to −88 (e^−88 gives 0, as
// −inf does).
TP_CPU_INLINE inline float exp_shifted(float x, float m) {
  return cpu::exp_small(cpu::clamp_abs(x - m, 88.0f));
}

TP_CPU_CLONES double row_sum_exp(const float* x, float m, int64_t n) {
  return cpu::lane_sum(
      n, [&](int64_t j) TP_CPU_INLINE { return static_cast<double>(exp_shifted(x[j], m)); });
}

// d[j] = scale (softmax_j − [j = y]) over the real columns, 0 over the padding; d may be x.
TP_CPU_CLONES void row_softmax_backward(float* d, const float* x, float m, float inv, int64_t y,
                                        float scale, int64_t real_cols, int64_t cols) {
#pragma omp simd
  for (int64_t j = 0; j < real_cols; ++j) {  // x_j is read before d_j is written
    const float p = exp_shifted(x[j], m) * inv;
    d[j] = scale * (p - (j == y ? 1.0f : 0.0f));
  }
  for (int64_t j = real_cols; j < cols; ++j) d[j] = 0.0f;
}
}  // namespace

void CpuDevice::do_vocab_max(Tensor& row_max_t, const Tensor& logits, const VocabShard& /*shard*/,
                             int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  const float* px = logits.data();
  float* pm = row_max_t.data();
#pragma omp parallel for if (n * cols > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) pm[i] = row_max(px + i * cols, real_cols);
}

void CpuDevice::do_vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                                        const Tensor& row_max_t, const Tensor& targets,
                                        const VocabShard& shard, int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  const float* px = logits.data();
  const float* pm = row_max_t.data();
  const float* pt = targets.data();
  float* ps = sum_exp.data();
  float* py = target_logit.data();
#pragma omp parallel for if (n * cols > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = px + i * cols;
    const int64_t j = static_cast<int64_t>(pt[i]) - shard.first;  // target < V: owned j < real_cols
    ps[i] = static_cast<float>(row_sum_exp(xr, pm[i], real_cols));
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
                                          const Tensor& row_max_t, const Tensor& sum_exp,
                                          const Tensor& targets, const VocabShard& shard,
                                          float scale, int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  const float* px = logits.data();
  const float* pm = row_max_t.data();
  const float* ps = sum_exp.data();
  const float* pt = targets.data();
  float* pd = dlogits.data();
#pragma omp parallel for if (n * cols > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y = static_cast<int64_t>(pt[i]) - shard.first;  // local target column, if owned
    row_softmax_backward(pd + i * cols, px + i * cols, pm[i], static_cast<float>(1.0 / ps[i]), y,
                         scale, real_cols, cols);
  }
}

}  // namespace tp
