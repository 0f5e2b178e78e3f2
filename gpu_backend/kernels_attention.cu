// kernels_attention.cu — the GPU backend's attention, vocabulary-parallel embedding, position and
// cross-entropy kernels. The math of each kernel sits in a comment above it, the forward next to
// its backward (llm.c style); the contract is in core/device.h and the reference is the CPU backend
// (cpu_backend/cpu_kernels.cpp), whose arithmetic (f32 vs f64 steps) is mirrored here.
//
// Determinism: no float atomics. Every output element is written by one thread; sums over rows or
// positions (dwte, dwpe) are loops in a fixed order inside that thread, sums inside a row (softmax
// statistics) are fixed-tree warp/block reductions (reduce.cuh), and the attention products are
// cuBLAS GEMMs (deterministic for a given GPU and cuBLAS version).
//
// Host round trips: token ids and targets arrive as f32 device tensors, and the public Device call
// (core/device.cpp) copies them to the host to check them (one synchronisation per call of the
// embedding kernels, vocab_sum_exp_target and vocab_softmax_backward). embedding_shard_backward
// reuses that host copy (host_ids) to group the positions by owned row (a stable counting sort,
// uploaded with a second, synchronous copy), so each row of dwte is summed by one thread per
// column, positions in increasing order, exactly as the CPU does.
#include <climits>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_device.h"
#include "reduce.cuh"

namespace tp {

namespace {
constexpr int kThreads = 256;     // elementwise kernels
constexpr int kRowThreads = 256;  // most threads for a one-block-per-row vocab kernel

}  // namespace

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

// ---- attention -----------------------------------------------------------------------------------

// Causal attention, per batch b and query head j (kv head g = j / group), query position s:
//   P_t = softmax_{t ≤ s}(scale · q_s · k_t),  out_s = Σ_{t≤s} P_t v_t
// Row-major layouts: q, out (S·B, nh·hd), k, v (S·B, nkv·hd), token (s, b) at row s·B + b;
// probs (B, nh, S, S), row (b, j, s) at ((b·nh + j)·S + s)·S, zero for t > s.
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

// Attention backward, with dP = dout Vᵀ (a batched GEMM into dscore, full S×S):
//   dS_t = P_t (dP_t − Σ_u P_u dP_u)   (this kernel, in place; 0 for t > s, where P_t = 0)
//   dq = scale · dS K,  dk = scale · dSᵀ Q,  dv = Pᵀ dout   (batched GEMMs; a GQA kv head sums
//                                                            its group's query heads)
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

// ---- vocabulary-parallel embedding ---------------------------------------------------------------

// wte is split by rows (tokens): a shard holds ids [first, first + rows). Each shard looks up the
// ids it owns and writes zeros for the others, so the sum over the shards (one all-reduce) is the
// full lookup:
//   out[i] = wte_shard[ids[i] − first] if first ≤ ids[i] < first + rows, else 0
// One thread per (i, c). The ids were validated on the host.
__global__ void embedding_shard_forward_kernel(float* out, const float* ids, const float* wte,
                                               int64_t n, int64_t rows, int64_t h, int64_t first) {
  const int64_t items = n * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t i = item / h, c = item % h;
    const int64_t row = static_cast<int64_t>(ids[i]) - first;
    out[item] = row >= 0 && row < rows ? wte[row * h + c] : 0.0f;
  }
}

// Backward: dwte_shard[ids[i] − first] += dout[i] for the owned ids only.
// The host groups the positions i by owned row (unique rows u in increasing order; positions of
// row u at index[offsets[u] .. offsets[u + 1]), increasing). One thread per (u, c) adds dout[i, c]
// for those positions in order into the f32 value — the CPU's exact sequence of additions.
__global__ void embedding_shard_backward_kernel(float* dwte, const float* dout,
                                                const int64_t* unique_rows, const int64_t* offsets,
                                                const int64_t* index, int64_t nunique, int64_t h) {
  const int64_t items = nunique * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t u = item / h, c = item % h;
    float* dst = dwte + unique_rows[u] * h + c;
    float acc = *dst;
    for (int64_t p = offsets[u]; p < offsets[u + 1]; ++p) acc += dout[index[p] * h + c];
    *dst = acc;
  }
}

// Positions, sequence-major: global row g = s·B + b is position s = g / B. x holds the global rows
// [row0, row0 + rows) (row0 > 0 for a sequence-parallel shard):
//   x[r] += wpe[(row0 + r) / B]
// One thread per (r, c).
__global__ void position_forward_kernel(float* x, const float* wpe, int64_t rows, int64_t h,
                                        int64_t batch, int64_t row0) {
  const int64_t items = rows * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t r = item / h, c = item % h;
    x[item] += wpe[((row0 + r) / batch) * h + c];
  }
}

// Backward: dwpe[s] += Σ over the held rows r of position s of dx[r]
// One thread per (position s in [s0, s1), c), its held rows in order, added one by one into the
// f32 value as on the CPU.
__global__ void position_backward_kernel(float* dwpe, const float* dx, int64_t rows, int64_t h,
                                         int64_t batch, int64_t row0, int64_t s0, int64_t s1) {
  const int64_t items = (s1 - s0) * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t s = s0 + item / h, c = item % h;
    const int64_t r0 = (s * batch > row0 ? s * batch : row0) - row0;
    const int64_t r1 = ((s + 1) * batch < row0 + rows ? (s + 1) * batch : row0 + rows) - row0;
    float* dst = dwpe + s * h + c;
    float acc = *dst;
    for (int64_t r = r0; r < r1; ++r) acc += dx[r * h + c];
    *dst = acc;
  }
}

// ---- vocabulary-parallel loss --------------------------------------------------------------------

// logits are split by columns (tokens): a shard holds global ids [first, first + cols), of which
// ids ≥ V are padding and take no part: columns [0, real) are real,
// real = clamp(V − first, 0, cols).
// With m, Σ and x_y all-reduced between the steps (max, sum, sum), for row i with target y:
//   m_i = max_j x_ij                                   (vocab_max; −inf for a shard of padding)
//   Σ_i = Σ_j e^(x_ij − m_i),  x_y = x_iy or 0         (vocab_sum_exp_target, m_i the global max)
//   loss_i = log Σ_i + m_i − x_y                       (vocab_loss)
//   dlogits_ij = scale (e^(x_ij − m_i) / Σ_i − [first + j = y]), 0 on padding
// The row kernels: one block per row, grid stride, block reductions.
__global__ void vocab_max_kernel(float* row_max, const float* logits, int64_t n, int64_t cols,
                                 int64_t real) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* xr = logits + i * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = gpu::block_max(m);
    if (threadIdx.x == 0) row_max[i] = m;
  }
}

// Σ in f64 of e^(f64(x) − m), as on the CPU; the target logit read by thread 0.
__global__ void vocab_sum_exp_target_kernel(float* sum_exp, float* target_logit,
                                            const float* logits, const float* row_max,
                                            const float* targets, int64_t n, int64_t cols,
                                            int64_t real, int64_t first) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* xr = logits + i * cols;
    const double m = row_max[i];
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x)
      s += exp(static_cast<double>(xr[j]) - m);
    s = gpu::block_sum(s);
    if (threadIdx.x == 0) {
      const int64_t j = static_cast<int64_t>(targets[i]) - first;  // target < V: j < real if owned
      sum_exp[i] = static_cast<float>(s);
      target_logit[i] = j >= 0 && j < real ? xr[j] : 0.0f;
    }
  }
}

// loss_i = log Σ_i + m_i − x_y, in f64 as on the CPU; one thread per row.
__global__ void vocab_loss_kernel(float* loss, const float* row_max, const float* sum_exp,
                                  const float* target_logit, int64_t n) {
  for (int64_t i = gpu::global_thread(); i < n; i += gpu::grid_threads())
    loss[i] =
        static_cast<float>(log(static_cast<double>(sum_exp[i])) + row_max[i] - target_logit[i]);
}

// dlogits_ij = scale (p_ij − [j = y]) with p_ij = f32(e^(f64(x_ij) − m_i) · (1/Σ_i)), 0 on
// padding. One block per row, one thread per column: each element reads its own logit before
// writing, so dlogits may alias logits.
__global__ void vocab_softmax_backward_kernel(float* dlogits, const float* logits,
                                              const float* row_max, const float* sum_exp,
                                              const float* targets, int64_t n, int64_t cols,
                                              int64_t real, int64_t first, float scale) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* xr = logits + i * cols;
    float* dr = dlogits + i * cols;
    const double m = row_max[i], inv = 1.0 / static_cast<double>(sum_exp[i]);
    const int64_t y = static_cast<int64_t>(targets[i]) - first;  // local target column, if owned
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      if (j < real) {
        const float p = static_cast<float>(exp(static_cast<double>(xr[j]) - m) * inv);
        dr[j] = scale * (p - (j == y ? 1.0f : 0.0f));
      } else {
        dr[j] = 0.0f;
      }
    }
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

namespace {
unsigned int elementwise_blocks(int64_t n) { return gpu::grid_blocks(n, kThreads); }
unsigned int row_blocks(int64_t rows) { return gpu::grid_blocks(rows, 1); }
}  // namespace

// The attention GEMMs, batched over the (b, head) pairs. Row-major C = α op(A) op(B) + β C for
// every pair; each operand is a base pointer, a row stride (ld) and a stride between pairs.
//
// Pairs of one call: for a fixed r in [0, group), query head j = g·group + r for every batch b
// and kv head g, pair index i = b·nkv + g. Then (b, j)'s q/out block starts at (b·nh + j)·hd =
// i·(group·hd) + r·hd, (b, g)'s k/v block at i·hd, and (b, j)'s S×S probs block at
// (i·group + r)·S² — strided in i. MHA (group 1) is one call per product; GQA `group` calls.

void CudaDevice::batched_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const float* a, int64_t lda, int64_t stride_a,
                              const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                              int64_t ldc, int64_t stride_c, int64_t batch) {
  TP_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
               ldc <= INT_MAX && batch <= INT_MAX,
           "batched_gemm: sizes exceed cuBLAS's 32-bit arguments");
  // Row-major C is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: B first, as in gemm().
  CUBLAS_CHECK(cublasSgemmStridedBatched(
      cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
      static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a, &beta, c,
      static_cast<int>(ldc), stride_c, static_cast<int>(batch)));
}

void CudaDevice::do_attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv, rows = B * nh * S;
  if (rows == 0 || hd == 0) return;
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, true, S, S, hd, sh.scale, q.data() + r * hd, B * qc, group * hd, k.data(),
                 B * kc, hd, 0.0f, probs.data() + r * S * S, S, group * S * S,
                 pairs);  // scale·Q Kᵀ
  causal_softmax_kernel<<<row_blocks(rows), gpu::threads_for(S, kRowThreads), 0, stream()>>>(
      probs.data(), S, S, 0, rows);
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
  causal_softmax_kernel<<<row_blocks(rows), gpu::threads_for(P, kRowThreads), 0, stream()>>>(
      scores, n, P, past, rows);
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
  causal_softmax_backward_kernel<<<row_blocks(rows), gpu::threads_for(S, kRowThreads), 0,
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

void CudaDevice::do_embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                            int64_t first_id) {
  const int64_t n = ids.numel(), rows = wte_shard.rows(), h = wte_shard.cols();
  if (n * h == 0) return;
  embedding_shard_forward_kernel<<<elementwise_blocks(n * h), kThreads, 0, stream()>>>(
      out.data(), ids.data(), wte_shard.data(), n, rows, h, first_id);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout,
                                             const Tensor& ids, int64_t first_id,
                                             const float* host_ids) {
  const int64_t n = ids.numel(), rows = dwte_shard.rows(), h = dwte_shard.cols();
  if (h == 0) return;

  // Group the positions by owned row (stable counting sort). Host layout, int64:
  //   [unique rows (nunique)] [offsets (nunique + 1)] [positions (owned)]
  std::vector<int64_t> row_of(static_cast<size_t>(n));
  std::vector<int64_t> count(static_cast<size_t>(rows), 0);
  int64_t owned = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(host_ids[i]) - first_id;
    row_of[i] = row >= 0 && row < rows ? row : -1;
    if (row_of[i] >= 0) {
      ++count[row_of[i]];
      ++owned;
    }
  }
  if (owned == 0) return;  // a shard that owns none of the ids leaves its gradient alone
  int64_t nunique = 0;
  for (int64_t r = 0; r < rows; ++r) nunique += count[r] > 0 ? 1 : 0;
  std::vector<int64_t> packed(static_cast<size_t>(2 * nunique + 1 + owned));
  int64_t* unique_rows = packed.data();
  int64_t* offsets = unique_rows + nunique;
  int64_t* index = offsets + nunique + 1;
  std::vector<int64_t> cursor(static_cast<size_t>(rows), -1);  // next free slot of each owned row
  int64_t u = 0, at = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (count[r] == 0) continue;
    unique_rows[u] = r;
    offsets[u] = at;
    cursor[r] = at;
    at += count[r];
    ++u;
  }
  offsets[nunique] = at;
  for (int64_t i = 0; i < n; ++i)
    if (row_of[i] >= 0) index[cursor[row_of[i]]++] = i;  // positions in increasing order

  const size_t bytes = packed.size() * sizeof(int64_t);
  int64_t* dev_packed = static_cast<int64_t*>(scratch(bytes));
  // Stream-ordered after earlier users of the scratch. `packed` is a pageable vector freed when we
  // return, and CUDA documents a pageable cudaMemcpyAsync only as "might be synchronous" (staging
  // before return is the guarantee of the synchronous cudaMemcpy, not of the Async form), so the
  // copy goes through copy_from_host, which waits for it (the call already synchronised once, to
  // bring the ids to the host for their check).
  copy_from_host(dev_packed, packed.data(), bytes);
  embedding_shard_backward_kernel<<<elementwise_blocks(nunique * h), kThreads, 0, stream()>>>(
      dwte_shard.data(), dout.data(), dev_packed, dev_packed + nunique,
      dev_packed + 2 * nunique + 1, nunique, h);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows * h == 0) return;
  position_forward_kernel<<<elementwise_blocks(rows * h), kThreads, 0, stream()>>>(
      x.data(), wpe.data(), rows, h, batch, row0);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) {
  const int64_t rows = dx.rows(), h = dx.cols();
  if (rows == 0 || h == 0) return;
  const int64_t s0 = row0 / batch, s1 = (row0 + rows - 1) / batch + 1;  // positions [s0, s1)
  position_backward_kernel<<<elementwise_blocks((s1 - s0) * h), kThreads, 0, stream()>>>(
      dwpe.data(), dx.data(), rows, h, batch, row0, s0, s1);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& /*shard*/,
                              int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  if (n == 0) return;
  vocab_max_kernel<<<row_blocks(n), gpu::threads_for(real_cols, kRowThreads), 0, stream()>>>(
      row_max.data(), logits.data(), n, cols, real_cols);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit,
                                         const Tensor& logits, const Tensor& row_max,
                                         const Tensor& targets, const VocabShard& shard,
                                         int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  if (n == 0) return;
  vocab_sum_exp_target_kernel<<<row_blocks(n), gpu::threads_for(real_cols, kRowThreads), 0,
                                stream()>>>(sum_exp.data(), target_logit.data(), logits.data(),
                                            row_max.data(), targets.data(), n, cols, real_cols,
                                            shard.first);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                               const Tensor& target_logit) {
  const int64_t n = loss.numel();
  if (n == 0) return;
  vocab_loss_kernel<<<elementwise_blocks(n), kThreads, 0, stream()>>>(
      loss.data(), row_max.data(), sum_exp.data(), target_logit.data(), n);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_vocab_softmax_backward(Tensor& dlogits, const Tensor& logits,
                                           const Tensor& row_max, const Tensor& sum_exp,
                                           const Tensor& targets, const VocabShard& shard,
                                           float scale, int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  if (n * cols == 0) return;
  vocab_softmax_backward_kernel<<<row_blocks(n), gpu::threads_for(cols, kRowThreads), 0,
                                  stream()>>>(dlogits.data(), logits.data(), row_max.data(),
                                              sum_exp.data(), targets.data(), n, cols, real_cols,
                                              shard.first, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
