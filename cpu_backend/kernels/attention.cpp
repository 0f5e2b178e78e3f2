// attention.cpp — the CPU backend's causal attention: forward, backward, and the forward over a
// key/value cache (decoding). The math is in core/device.h; the GPU's is in
// gpu_backend/kernels/attention.cu.
//
// Thread independence: the products go through BLAS (blas.h: tp::cpu::sgemm); the GEMMs of one
// (batch, head) pair (backward: one (batch, kv head) pair, dk and dv included) run whole on one
// thread, and inside a parallel region OpenBLAS runs each call on the calling thread alone, so
// attention is bit-identical across thread counts for a given OpenBLAS kernel: another kernel
// (OPENBLAS_CORETYPE, another CPU or library) rounds differently, within fp32 tolerance.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "blas.h"
#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

// Causal attention as GEMMs (the math: core/device.h), per batch b and query head j (kv head
// g = j / (nh / nkv)): Q_bj, K_bg, V_bg, dout_bj are read in place as (S, hd) blocks with row
// stride B·nh·hd or B·nkv·hd, and P_bj is probs[b, j], (S, S).
// The causal mask makes P, dS lower triangular, so the GEMMs go by blocks of kAttnBlock positions
// and skip the blocks above the diagonal: query rows [s0, s1) need keys [0, s1) only (scores, dP,
// out, dq), and keys [t0, t1) are reached from queries [t0, S) only (dk, dv). Inside a diagonal
// block the entries t > s are computed and then overwritten by zeros (P by the softmax, dS by
// its loop), which the next GEMM multiplies through.
// Each (b, j) pair (backward: each (b, g) pair, its query heads in order) runs on one thread, and
// inside the parallel region every sgemm runs on its calling thread.
namespace {
constexpr int64_t kAttnBlock = 64;  // positions per block of the causal GEMMs

// One row of causal softmax in place: row[t] = e^(row[t] − m) / Σ_{u≤s} e^(row[u] − m) for
// t ≤ s, m = max_{t≤s} row[t]; row[t] = 0 for t > s. row: (S). The sum is in double; the simd
// reductions add it (and take the max) in lanes, a fixed order for a given build.
void causal_softmax_row(float* row, int64_t s, int64_t S) {
  float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
  for (int64_t t = 0; t <= s; ++t) maxv = std::max(maxv, row[t]);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t t = 0; t <= s; ++t) {
    row[t] = cpu::exp_small(cpu::clamp_abs(row[t] - maxv, 88.0f));
    sum += row[t];
  }
  const float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
  for (int64_t t = 0; t <= s; ++t) row[t] *= inv;
  for (int64_t t = s + 1; t < S; ++t) row[t] = 0.0f;
}
}  // namespace

void CpuDevice::do_attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, hd = sh.head_dim;
  const int64_t group = nh / sh.kv_heads;
  const int64_t qc = nh * hd, kc = sh.kv_heads * hd;  // row lengths of q/out and k/v
  const int64_t ldq = B * qc, ldk = B * kc;           // row strides of a head's (S, hd) block
  const float* pq = q.data();
  const float* pk = k.data();
  const float* pv = v.data();
  float* pout = out.data();
  float* pp = probs.data();
  // No `if` clause: with more than one thread the region is active, so every sgemm in it runs on
  // one thread and the result is the same for any thread count.
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j) {
      const int64_t g = j / group;
      const float* qbj = pq + b * qc + j * hd;  // (S, hd), row stride ldq
      const float* kbg = pk + b * kc + g * hd;  // (S, hd), row stride ldk
      const float* vbg = pv + b * kc + g * hd;  // (S, hd), row stride ldk
      float* pbj = pp + (b * nh + j) * S * S;   // (S, S)
      float* obj = pout + b * qc + j * hd;      // (S, hd), row stride ldq
      for (int64_t s0 = 0; s0 < S; s0 += kAttnBlock) {
        const int64_t s1 = std::min(S, s0 + kAttnBlock), rows = s1 - s0;
        // scores[s0:s1, :s1] = scale · Q[s0:s1] K[:s1]ᵀ, softmax, out[s0:s1] = P[s0:s1, :s1] V[:s1]
        cpu::sgemm(false, true, rows, s1, hd, sh.scale, qbj + s0 * ldq, ldq, kbg, ldk, 0.0f,
                   pbj + s0 * S, S);
        for (int64_t s = s0; s < s1; ++s) causal_softmax_row(pbj + s * S, s, S);
        cpu::sgemm(false, false, rows, hd, s1, 1.0f, pbj + s0 * S, S, vbg, ldk, 0.0f,
                   obj + s0 * ldq, ldq);
      }
    }
}

// Attention over a key/value cache: the n new query positions [past, past + n) of every (b, j)
// read keys [0, past + n); query i attends to t ≤ past + i. The same GEMM · causal softmax · GEMM
// as the forward, by blocks of kAttnBlock queries (queries [i0, i1) need keys [0, past + i1)),
// with the scores in a per-thread buffer instead of probs (nothing is kept for a backward).
void CpuDevice::do_attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                            const Tensor& v, int64_t past,
                                            const AttentionShape& sh) {
  const int64_t n = sh.seq, B = sh.batch, nh = sh.heads, hd = sh.head_dim;
  const int64_t P = past + n;  // keys
  const int64_t group = nh / sh.kv_heads;
  const int64_t qc = nh * hd, kc = sh.kv_heads * hd;
  const int64_t ldq = B * qc, ldk = B * kc;
  const float* pq = q.data();
  const float* pk = k.data();
  const float* pv = v.data();
  float* pout = out.data();
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(std::min(n, kAttnBlock) * P));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < nh; ++j) {
        const int64_t g = j / group;
        const float* qbj = pq + b * qc + j * hd;  // (n, hd), row stride ldq
        const float* kbg = pk + b * kc + g * hd;  // (P, hd), row stride ldk
        const float* vbg = pv + b * kc + g * hd;
        float* obj = pout + b * qc + j * hd;  // (n, hd), row stride ldq
        for (int64_t i0 = 0; i0 < n; i0 += kAttnBlock) {
          const int64_t i1 = std::min(n, i0 + kAttnBlock), rows = i1 - i0, keys = past + i1;
          float* ps = scores.data();  // (rows, keys), row stride keys
          cpu::sgemm(false, true, rows, keys, hd, sh.scale, qbj + i0 * ldq, ldq, kbg, ldk, 0.0f, ps,
                     keys);
          for (int64_t i = i0; i < i1; ++i)
            causal_softmax_row(ps + (i - i0) * keys, past + i, keys);
          cpu::sgemm(false, false, rows, hd, keys, 1.0f, ps, keys, vbg, ldk, 0.0f, obj + i0 * ldq,
                     ldq);
        }
      }
  }
}

void CpuDevice::do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                      const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& probs, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv;
  const int64_t qc = nh * hd, kc = nkv * hd;
  const int64_t ldq = B * qc, ldk = B * kc;
  const float* pq = q.data();
  const float* pk = k.data();
  const float* pv = v.data();
  const float* pdo = dout.data();
  const float* pp = probs.data();
  float* pdq = dq.data();
  float* pdk = dk.data();
  float* pdv = dv.data();
  // One (b, g) pair per iteration, so the group's query heads add into dk_bg, dv_bg on one thread,
  // in order (beta = 0 for the first head writes them). As in the forward, no `if` clause.
#pragma omp parallel
  {
    std::vector<float> dsv(static_cast<size_t>(S * S));  // dP, then dS in place: one per thread
    float* ds = dsv.data();
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t g = 0; g < nkv; ++g) {
        const float* kbg = pk + b * kc + g * hd;  // (S, hd), row stride ldk
        const float* vbg = pv + b * kc + g * hd;
        float* dkbg = pdk + b * kc + g * hd;
        float* dvbg = pdv + b * kc + g * hd;
        for (int64_t j = g * group; j < (g + 1) * group; ++j) {
          const float* qbj = pq + b * qc + j * hd;  // (S, hd), row stride ldq
          const float* dobj = pdo + b * qc + j * hd;
          float* dqbj = pdq + b * qc + j * hd;
          const float* pbj = pp + (b * nh + j) * S * S;  // (S, S)
          const float beta = j == g * group ? 0.0f : 1.0f;
          for (int64_t s0 = 0; s0 < S; s0 += kAttnBlock) {
            const int64_t s1 = std::min(S, s0 + kAttnBlock), rows = s1 - s0;
            // dP[s0:s1, :s1] = dout[s0:s1] V[:s1]ᵀ, then row s: dS_st = P_st (dP_st − Σ_u P_su
            // dP_su) for t ≤ s, 0 for s < t < s1; dq[s0:s1] = scale · dS[s0:s1, :s1] K[:s1]
            cpu::sgemm(false, true, rows, s1, hd, 1.0f, dobj + s0 * ldq, ldq, vbg, ldk, 0.0f,
                       ds + s0 * S, S);
            for (int64_t s = s0; s < s1; ++s) {
              const float* prow = pbj + s * S;
              float* dsrow = ds + s * S;
              double pdp = 0.0;
#pragma omp simd reduction(+ : pdp)
              for (int64_t t = 0; t <= s; ++t) pdp += static_cast<double>(prow[t]) * dsrow[t];
              const float pdpf = static_cast<float>(pdp);
#pragma omp simd
              for (int64_t t = 0; t <= s; ++t) dsrow[t] = prow[t] * (dsrow[t] - pdpf);
              for (int64_t t = s + 1; t < s1; ++t) dsrow[t] = 0.0f;
            }
            cpu::sgemm(false, false, rows, hd, s1, sh.scale, ds + s0 * S, S, kbg, ldk, 0.0f,
                       dqbj + s0 * ldq, ldq);
          }
          for (int64_t t0 = 0; t0 < S; t0 += kAttnBlock) {
            const int64_t t1 = std::min(S, t0 + kAttnBlock), cols = t1 - t0;
            // dk[t0:t1] (+)= scale · dS[t0:, t0:t1]ᵀ Q[t0:],  dv[t0:t1] (+)= P[t0:, t0:t1]ᵀ dout[t0:]
            cpu::sgemm(true, false, cols, hd, S - t0, sh.scale, ds + t0 * S + t0, S, qbj + t0 * ldq,
                       ldq, beta, dkbg + t0 * ldk, ldk);
            cpu::sgemm(true, false, cols, hd, S - t0, 1.0f, pbj + t0 * S + t0, S, dobj + t0 * ldq,
                       ldq, beta, dvbg + t0 * ldk, ldk);
          }
        }
      }
  }
}

}  // namespace tp
