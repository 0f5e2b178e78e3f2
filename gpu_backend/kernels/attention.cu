// attention.cu — the GPU backend's causal attention: forward, backward, and the forward over a
// key/value cache (decoding). The math is in core/device.h; the CPU's is in
// cpu_backend/kernels/attention.cpp, whose softmax arithmetic (f32 vs f64 steps) these mirror.
//
// The products are cuBLAS GEMMs (deterministic for a given GPU and cuBLAS version); the softmax
// rows are fixed-tree block reductions (kernel_util.cuh). No float atomics.
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

// Layouts: probs (B, nh, S, S), row (b, j, s) at ((b·nh + j)·S + s)·S, zero for t > s.
//
// The products are batched cuBLAS GEMMs over the (b, head) pairs (CudaDevice::attention_forward,
// below): scores = scale · Q Kᵀ straight into probs, then this kernel turns each row into
// probabilities in place, then out = P V. Like PyTorch's eager attention, the GEMM computes the
// full S×S square and the kernel masks t > s.
//
// One block per probs row (b, j, s), grid stride over the B·nh·S rows: the max over t ≤ s (block
// max), e_t = exp(x_t − max) written back and Σ e_t in f64 (block sum), P_t = e_t · f32(1/Σ),
// zeros for t > s — the CPU's arithmetic.
//
// The same kernel serves attention over a key/value cache (attention_cached_forward): rows of P
// keys for the n query positions [past, past + n), so row (b, j, i) reads keys t ≤ past + i. The
// plain forward is n = P = S, past = 0.
__global__ void causal_softmax_kernel(float* probs, int64_t n, int64_t P, int64_t past,
                                      int64_t rows) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t s = past + row % n;
    float* p = probs + row * P;
    float m = -INFINITY;
    for (int64_t t = threadIdx.x; t <= s; t += blockDim.x) m = fmaxf(m, p[t]);
    m = gpu::block_max(m);
    double sum = 0.0;
    for (int64_t t = threadIdx.x; t <= s; t += blockDim.x) {
      const float e = expf(p[t] - m);
      p[t] = e;
      sum += e;
    }
    sum = gpu::block_sum(sum);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t t = threadIdx.x; t <= s; t += blockDim.x) p[t] *= inv;  // this thread's e_t
    for (int64_t t = s + 1 + threadIdx.x; t < P; t += blockDim.x) p[t] = 0.0f;
  }
}

// The softmax backward dS = P ⊙ (dP − rowsum(dP ⊙ P)) in place on dP (a batched GEMM, dout Vᵀ,
// full S×S); 0 for t > s, where P = 0.
// One block per row, grid stride; Σ_u P_u dP_u in f64 (block sum), as on the CPU.
__global__ void causal_softmax_backward_kernel(float* ds, const float* probs, int64_t S,
                                               int64_t rows) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t s = row % S;
    const float* p = probs + row * S;
    float* d = ds + row * S;
    double pdp = 0.0;
    for (int64_t t = threadIdx.x; t <= s; t += blockDim.x) pdp += static_cast<double>(p[t]) * d[t];
    pdp = gpu::block_sum(pdp);  // synchronises: every thread has read its dP_t
    const float c = static_cast<float>(pdp);
    for (int64_t t = threadIdx.x; t <= s; t += blockDim.x) d[t] = p[t] * (d[t] - c);
    for (int64_t t = s + 1 + threadIdx.x; t < S; t += blockDim.x) d[t] = 0.0f;
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

// The attention GEMMs, batched over the (b, head) pairs (CudaDevice::batched_gemm, cuda_device.cu):
// row-major C = α op(A) op(B) + β C for every pair; each operand is a base pointer, a row stride
// (ld) and a stride between pairs.
//
// Pairs of one call: for a fixed r in [0, group), query head j = g·group + r for every batch b
// and kv head g, pair index i = b·nkv + g. Then (b, j)'s q/out block starts at (b·nh + j)·hd =
// i·(group·hd) + r·hd, (b, g)'s k/v block at i·hd, and (b, j)'s S×S probs block at
// (i·group + r)·S² — strided in i. MHA (group 1) is one call per product; GQA `group` calls.
void CudaDevice::do_attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv, rows = B * nh * S;
  if (rows == 0 || hd == 0) return;
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, true, S, S, hd, sh.scale, q.data() + r * hd, B * qc, group * hd, k.data(),
                 B * kc, hd, 0.0f, probs.data() + r * S * S, S, group * S * S,
                 pairs);  // scale·Q Kᵀ
  causal_softmax_kernel<<<gpu::row_blocks(rows), gpu::threads_for(S, gpu::kRowThreads), 0,
                          stream()>>>(probs.data(), S, S, 0, rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, false, S, hd, S, 1.0f, probs.data() + r * S * S, S, group * S * S, v.data(),
                 B * kc, hd, 0.0f, out.data() + r * hd, B * qc, group * hd, pairs);  // out = P V
}

// As the forward with n query rows over P = past + n keys: the scores (B, nh, n, P) in scratch.
void CudaDevice::do_attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, int64_t past,
                                             const AttentionShape& sh) {
  const int64_t n = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t P = past + n, group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv;
  const int64_t rows = B * nh * n;
  if (rows == 0 || hd == 0) return;
  float* scores = static_cast<float*>(scratch(static_cast<size_t>(rows * P) * sizeof(float)));
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, true, n, P, hd, sh.scale, q.data() + r * hd, B * qc, group * hd, k.data(),
                 B * kc, hd, 0.0f, scores + r * n * P, P, group * n * P, pairs);  // scale·Q Kᵀ
  causal_softmax_kernel<<<gpu::row_blocks(rows), gpu::threads_for(P, gpu::kRowThreads), 0,
                          stream()>>>(scores, n, P, past, rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, false, n, hd, P, 1.0f, scores + r * n * P, P, group * n * P, v.data(),
                 B * kc, hd, 0.0f, out.data() + r * hd, B * qc, group * hd, pairs);  // out = P V
}

void CudaDevice::do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                       const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& probs, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv, rows = B * nh * S;
  if (rows == 0 || hd == 0) return;
  // dP, then dS in place: B·nh·S·S floats of scratch, the size of probs.
  float* ds = static_cast<float*>(scratch(static_cast<size_t>(rows * S) * sizeof(float)));
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, true, S, S, hd, 1.0f, dout.data() + r * hd, B * qc, group * hd, v.data(),
                 B * kc, hd, 0.0f, ds + r * S * S, S, group * S * S, pairs);  // dP = dout Vᵀ
  causal_softmax_backward_kernel<<<gpu::row_blocks(rows), gpu::threads_for(S, gpu::kRowThreads), 0,
                                   stream()>>>(ds, probs.data(), S, rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r) {
    const float* dsr = ds + r * S * S;
    const float* pr = probs.data() + r * S * S;
    const float beta = r == 0 ? 0.0f : 1.0f;  // a kv head sums over its group's query heads
    batched_gemm(false, false, S, hd, S, sh.scale, dsr, S, group * S * S, k.data(), B * kc, hd,
                 0.0f, dq.data() + r * hd, B * qc, group * hd, pairs);  // dq = scale · dS K
    batched_gemm(true, false, S, hd, S, sh.scale, dsr, S, group * S * S, q.data() + r * hd, B * qc,
                 group * hd, beta, dk.data(), B * kc, hd, pairs);  // dk (+)= scale · dSᵀ Q
    batched_gemm(true, false, S, hd, S, 1.0f, pr, S, group * S * S, dout.data() + r * hd, B * qc,
                 group * hd, beta, dv.data(), B * kc, hd, pairs);  // dv (+)= Pᵀ dout
  }
}

}  // namespace tp
