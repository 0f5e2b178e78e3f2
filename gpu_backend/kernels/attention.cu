// attention.cu — the GPU backend's causal attention: forward, backward, and the forward over a
// key/value cache (decoding). The math is in core/device.h; the CPU's is in
// cpu_backend/kernels/attention.cpp, whose softmax arithmetic (f32 vs f64 steps) these mirror.
//
// No S×S probabilities are kept between the passes: the forward returns out and the per-row
// log-sum-exp lse (B, nh, S, f32), and the backward recomputes P = e^(X − lse) from q, k and lse.
//
// Two paths. Head dims up to 128 (gpu::tiled_attention_takes): the tiled kernels of
// kernels/attention_tiled.cu, FlashAttention-2's — the forward streams K and V tiles through
// shared memory with an online softmax per query row, the backward is a dq kernel per query tile
// and a dk, dv kernel per key tile (no float atomics), and no S × K scores or probabilities ever
// reach memory; that file's header gives the tiles, the shared memory per block and the registers.
// Larger head dims: the path below, cuBLAS GEMMs with the S × K scores in the device's scratch
// (CudaDevice::scratch) and softmax kernels between them (the forward: scores, softmax, P·V;
// the backward: scores and dP again, then dq, dk, dv from P and dS, 2·B·nh·S·K floats).
//
// Determinism: the tiled kernels sum in fixed orders (their file says which); on the cuBLAS path
// the GEMMs are deterministic for a given GPU and cuBLAS version (the backward's recomputed scores
// are the forward's bit for bit) and the softmax rows are fixed-tree block reductions
// (kernel_util.cuh). No float atomics on either path.
//
// bf16 (--precision bf16): the forward and backward take bf16 tensors themselves (native_bf16) but
// compute exactly as in f32: bf16 q, k, v (and out, dout) are widened into scratch (F32Staging
// below) and the same f32 kernels run — the tiled ones, or the cuBLAS path, where P stays f32 for
// the P·V product and cuBLAS multiplies no f32 operand by a bf16 one — so the result is bit for
// bit the stand-in path on any GPU, which bf16 products (another sum order) would not be. What the
// native path saves: the front's stand-in tensors and their widening of the outputs' old
// contents. lse is f32 on every path. The cached forward (generation) stays on the front's
// stand-ins; with head dims ≤ 128 it is the tiled forward (keys past + n, no lse).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/attention_tiled.cuh"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

// Layouts: the scores / probabilities (B, nh, S, S) in scratch, row (b, j, s) at
// ((b·nh + j)·S + s)·S, zero for t > s; lse (B, nh, S), row (b, j, s) at (b·nh + j)·S + s.
//
// The products are batched cuBLAS GEMMs over the (b, head) pairs (CudaDevice::attention_forward,
// below): scores = scale · Q Kᵀ into scratch, then this kernel turns each row into probabilities
// in place, then out = P V. Like PyTorch's eager attention, the GEMM computes the full S×S square
// and the kernel masks t > s.
//
// One block per row (b, j, s), grid stride over the B·nh·S rows: the max m over t ≤ s (block
// max), e_t = exp(x_t − m) written back and Σ e_t in f64 (block sum), P_t = e_t · f32(1/Σ),
// zeros for t > s — the CPU's arithmetic; lse = f32(m + log Σ) (in f64) where lse is given.
//
// The same kernel serves every placement of the queries among the keys: rows of P keys for the n
// query positions [past, past + n), so row (b, j, i) reads keys t ≤ min(past + i, P − 1):
// attention over a key/value cache (attention_cached_forward, lse null; P = past + n), one
// chunk of queries against another chunk's keys (ring attention: AttentionShape::kv_seq, past).
// The plain forward is n = P = S, past = 0.
__global__ void causal_softmax_kernel(float* probs, float* lse, int64_t n, int64_t P, int64_t past,
                                      int64_t rows) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t s = min(past + row % n, P - 1);
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
    if (lse != nullptr && threadIdx.x == 0) lse[row] = static_cast<float>(m + log(sum));
  }
}

// The backward's softmax step, per row (b, j, s) of the recomputed scores X (scale · Q Kᵀ, in
// place in `probs`) and of dP (dout Vᵀ, in place in `ds`), both full S×K batched GEMMs; with
// u = min(past + s, K − 1) the row's last key (as in the forward):
//   D     = Σ_e dout[s, e] · out[s, e]      f64 products and block sum, as on the CPU
//   P_t   = exp(X_t − lse),                 t ≤ u; 0 for t > u
//   dS_t  = P_t · (dP_t − f32(D)),          t ≤ u; 0 for t > u
// out and dout (S·B, nh·hd): (b, j, s)'s hd values at row s·B + b, columns [j·hd, (j + 1)·hd).
// One block per row, grid stride.
__global__ void causal_softmax_backward_kernel(float* probs, float* ds, const float* lse,
                                               const float* out, const float* dout, int64_t S,
                                               int64_t K, int64_t past, int64_t B, int64_t nh,
                                               int64_t hd, int64_t rows) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t s = row % S, bj = row / S, j = bj % nh, b = bj / nh;
    const int64_t u = min(past + s, K - 1);
    const int64_t at = (s * B + b) * nh * hd + j * hd;
    double dsum = 0.0;
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x)
      dsum += static_cast<double>(dout[at + e]) * out[at + e];
    const float D = static_cast<float>(gpu::block_sum(dsum));
    const float l = lse[row];
    float* p = probs + row * K;
    float* d = ds + row * K;
    for (int64_t t = threadIdx.x; t <= u; t += blockDim.x) {
      const float pt = expf(p[t] - l);
      p[t] = pt;
      d[t] = pt * (d[t] - D);
    }
    for (int64_t t = u + 1 + threadIdx.x; t < K; t += blockDim.x) {
      p[t] = 0.0f;
      d[t] = 0.0f;
    }
  }
}

// Ring attention's merge (Device::attention_merge), one thread per (row s·B + b, head j), the
// CPU's arithmetic (cpu_backend/kernels/attention_merge.cpp): m = max(l1, l2), w = e^(l − m),
// out ← (w1/Σ)·out + (w2/Σ)·out_part, lse ← m + log Σ; both −inf leave the row as it was.
__global__ void attention_merge_kernel(float* out, float* lse, const float* out_part,
                                       const float* lse_part, int64_t S, int64_t B, int64_t nh,
                                       int64_t hd) {
  const int64_t pairs = S * B * nh;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % nh, sb = i / nh, b = sb % B, s = sb / B;
    float& l1 = lse[(b * nh + j) * S + s];
    const float l2 = lse_part[(b * nh + j) * S + s];
    const float m = l1 > l2 ? l1 : l2;
    if (m == -INFINITY) continue;
    const float w1 = expf(l1 - m), w2 = expf(l2 - m), sum = w1 + w2;
    const float a = w1 / sum, c = w2 / sum;
    float* o = out + sb * nh * hd + j * hd;
    const float* op = out_part + sb * nh * hd + j * hd;
    for (int64_t e = 0; e < hd; ++e) o[e] = __fadd_rn(__fmul_rn(a, o[e]), __fmul_rn(c, op[e]));
    l1 = m + logf(sum);
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

namespace {
// f32 views of an attention call's tensors, for bf16 ones (native_bf16): each bf16 tensor gets an
// f32 copy in the device's scratch memory — an input widened exactly (convert.cu), an output left
// to be written — and round(i) stores output i back into its bf16 tensor, rounded once. An f32
// tensor is used in place. `extra` bytes of f32 scratch follow (the S×S scores, P, dP / dS).
class F32Staging {
 public:
  struct Item {
    const Tensor* t;
    bool input;  // widened now; else an output, rounded by round()
  };
  F32Staging(CudaDevice& dev, std::initializer_list<Item> items, size_t extra = 0)
      : dev_(dev), items_(items) {
    size_t bytes = 0;
    for (const Item& it : items_) {
      offsets_.push_back(bytes);
      if (it.t->dtype() == Dtype::bf16)
        bytes += (static_cast<size_t>(it.t->numel()) * sizeof(float) + 255) / 256 * 256;
    }
    extra_offset_ = bytes;
    char* base = static_cast<char*>(dev.scratch(bytes + extra + 1));
    for (size_t i = 0; i < items_.size(); ++i) {
      const Tensor& t = *items_[i].t;
      if (t.dtype() == Dtype::bf16) {
        ptrs_.push_back(reinterpret_cast<float*>(base + offsets_[i]));
        if (items_[i].input) gpu::from_bf16(dev.stream(), t.raw(), ptrs_.back(), t.numel());
      } else {
        ptrs_.push_back(t.data());
      }
    }
    extra_ = reinterpret_cast<float*>(base + extra_offset_);
  }
  float* f32(size_t i) const { return ptrs_[i]; }
  float* extra() const { return extra_; }
  void round(size_t i) const {
    const Tensor& t = *items_[i].t;
    if (t.dtype() == Dtype::bf16) gpu::to_bf16(dev_.stream(), ptrs_[i], t.raw(), t.numel());
  }

 private:
  CudaDevice& dev_;
  std::vector<Item> items_;
  std::vector<size_t> offsets_;
  std::vector<float*> ptrs_;
  size_t extra_offset_ = 0;
  float* extra_ = nullptr;
};
}  // namespace

// The attention GEMMs, batched over the (b, head) pairs (CudaDevice::batched_gemm, cuda_device.cu):
// row-major C = α op(A) op(B) + β C for every pair; each operand is a base pointer, a row stride
// (ld) and a stride between pairs.
//
// Pairs of one call: for a fixed r in [0, group), query head j = g·group + r for every batch b
// and kv head g, pair index i = b·nkv + g. Then (b, j)'s q/out block starts at (b·nh + j)·hd =
// i·(group·hd) + r·hd, (b, g)'s k/v block at i·hd, and (b, j)'s S×S block of scores at
// (i·group + r)·S² — strided in i. MHA (group 1) is one call per product; GQA `group` calls.
namespace {
// scores (B, nh, S, S) = scale · Q Kᵀ for every (b, j), the full square (forward and backward: the
// same calls, so the backward recomputes the forward's scores bit for bit).
// With kv_seq set the block is S × K, K = keys() (ring attention's chunk pairs).
void attention_scores(CudaDevice& dev, float* scores, const float* q32, const float* k32,
                      const AttentionShape& sh) {
  const int64_t S = sh.seq, K = sh.keys(), B = sh.batch, nh = sh.heads, nkv = sh.kv_heads,
                hd = sh.head_dim;
  const int64_t group = nh / nkv;
  for (int64_t r = 0; r < group; ++r)
    dev.batched_gemm(false, true, S, K, hd, sh.scale, q32 + r * hd, B * nh * hd, group * hd, k32,
                     B * nkv * hd, hd, 0.0f, scores + r * S * K, K, group * S * K, B * nkv);
}
}  // namespace

void CudaDevice::do_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, K = sh.keys(), B = sh.batch, nh = sh.heads, nkv = sh.kv_heads,
                hd = sh.head_dim;
  const int64_t group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv, rows = B * nh * S;
  if (rows == 0 || hd == 0) return;
  // bf16 tensors (native_bf16): widened into scratch, the f32 computation below unchanged, a bf16
  // out rounded once — what the Device front's stand-ins do, without their allocations and their
  // widening of out's old contents. The scores / P: B·nh·S·K floats of scratch after the staging.
  const bool tiled = gpu::tiled_attention_takes(sh);
  F32Staging st(*this, {{&q, true}, {&k, true}, {&v, true}, {&out, false}},
                tiled ? 0 : static_cast<size_t>(rows * K) * sizeof(float));
  const float *q32 = st.f32(0), *k32 = st.f32(1), *v32 = st.f32(2);
  float *out32 = st.f32(3), *p32 = st.extra();
  if (tiled) {  // kernels/attention_tiled.cu: no scores in memory
    gpu::tiled_attention_forward(stream(), out32, lse.data(), q32, k32, v32, sh);
    st.round(3);
    return;
  }
  attention_scores(*this, p32, q32, k32, sh);  // scale·Q Kᵀ
  causal_softmax_kernel<<<gpu::row_blocks(rows), gpu::threads_for(K, gpu::kRowThreads), 0,
                          stream()>>>(p32, lse.data(), S, K, sh.past, rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, false, S, hd, K, 1.0f, p32 + r * S * K, K, group * S * K, v32, B * kc, hd,
                 0.0f, out32 + r * hd, B * qc, group * hd, pairs);  // out = P V
  st.round(3);
}

// As the forward with n query rows over P = past + n keys: the scores (B, nh, n, P) in scratch.
void CudaDevice::do_attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                             const Tensor& v, int64_t past,
                                             const AttentionShape& sh) {
  const int64_t n = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t P = past + n, group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv;
  const int64_t rows = B * nh * n;
  if (rows == 0 || hd == 0) return;
  if (gpu::tiled_attention_takes(sh)) {  // the queries at [past, past + n) of P keys, no lse
    AttentionShape tsh = sh;
    tsh.kv_seq = P;
    tsh.past = past;
    gpu::tiled_attention_forward(stream(), out.data(), nullptr, q.data(), k.data(), v.data(), tsh);
    return;
  }
  float* scores = static_cast<float*>(scratch(static_cast<size_t>(rows * P) * sizeof(float)));
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, true, n, P, hd, sh.scale, q.data() + r * hd, B * qc, group * hd, k.data(),
                 B * kc, hd, 0.0f, scores + r * n * P, P, group * n * P, pairs);  // scale·Q Kᵀ
  causal_softmax_kernel<<<gpu::row_blocks(rows), gpu::threads_for(P, gpu::kRowThreads), 0,
                          stream()>>>(scores, nullptr, n, P, past, rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, false, n, hd, P, 1.0f, scores + r * n * P, P, group * n * P, v.data(),
                 B * kc, hd, 0.0f, out.data() + r * hd, B * qc, group * hd, pairs);  // out = P V
}

void CudaDevice::do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                       const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse,
                                       const AttentionShape& sh) {
  const int64_t S = sh.seq, K = sh.keys(), B = sh.batch, nh = sh.heads, nkv = sh.kv_heads,
                hd = sh.head_dim;
  const int64_t group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv, rows = B * nh * S;
  if (rows == 0 || hd == 0) return;
  // bf16 tensors: widened into scratch (out too: D reads it in f32), the f32 computation
  // unchanged, dq, dk, dv rounded once at the end (dk and dv after their sum over the group).
  // After the staging, 2·B·nh·S·K floats of scratch: the scores, then P in place; dP, then dS.
  const bool tiled = gpu::tiled_attention_takes(sh);
  const size_t square = static_cast<size_t>(rows * K);
  F32Staging st(*this,
                {{&dout, true},
                 {&q, true},
                 {&k, true},
                 {&v, true},
                 {&out, true},
                 {&dq, false},
                 {&dk, false},
                 {&dv, false}},
                (tiled ? static_cast<size_t>(rows) : 2 * square) * sizeof(float));
  const float *dout32 = st.f32(0), *q32 = st.f32(1), *k32 = st.f32(2), *v32 = st.f32(3),
              *out32 = st.f32(4);
  float *dq32 = st.f32(5), *dk32 = st.f32(6), *dv32 = st.f32(7);
  if (tiled) {  // kernels/attention_tiled.cu: the rows' D in scratch, no S × K panels
    gpu::tiled_attention_backward(stream(), dq32, dk32, dv32, dout32, q32, k32, v32, out32,
                                  lse.data(), st.extra(), sh);
    st.round(5);
    st.round(6);
    st.round(7);
    return;
  }
  float *p32 = st.extra(), *ds = st.extra() + square;
  attention_scores(*this, p32, q32, k32, sh);  // scale·Q Kᵀ, the forward's
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, true, S, K, hd, 1.0f, dout32 + r * hd, B * qc, group * hd, v32, B * kc, hd,
                 0.0f, ds + r * S * K, K, group * S * K, pairs);  // dP = dout Vᵀ
  causal_softmax_backward_kernel<<<gpu::row_blocks(rows), gpu::threads_for(K, gpu::kRowThreads), 0,
                                   stream()>>>(p32, ds, lse.data(), out32, dout32, S, K, sh.past, B,
                                               nh, hd, rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r) {
    const float* dsr = ds + r * S * K;
    const float* pr = p32 + r * S * K;
    const float beta = r == 0 ? 0.0f : 1.0f;  // a kv head sums over its group's query heads
    batched_gemm(false, false, S, hd, K, sh.scale, dsr, K, group * S * K, k32, B * kc, hd, 0.0f,
                 dq32 + r * hd, B * qc, group * hd, pairs);  // dq = scale · dS K
    batched_gemm(true, false, K, hd, S, sh.scale, dsr, K, group * S * K, q32 + r * hd, B * qc,
                 group * hd, beta, dk32, B * kc, hd, pairs);  // dk (+)= scale · dSᵀ Q
    batched_gemm(true, false, K, hd, S, 1.0f, pr, K, group * S * K, dout32 + r * hd, B * qc,
                 group * hd, beta, dv32, B * kc, hd, pairs);  // dv (+)= Pᵀ dout
  }
  st.round(5);
  st.round(6);
  st.round(7);
}

// Ring attention's merge: no GEMM, one thread per (row, head), in f32: bf16 out and out_part
// widened into scratch and out rounded once (F32Staging), as the front's stand-ins would.
void CudaDevice::do_attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part,
                                    const Tensor& lse_part, const AttentionShape& sh) {
  const int64_t pairs = sh.seq * sh.batch * sh.heads;
  if (pairs == 0) return;
  F32Staging st(*this, {{&out, true}, {&out_part, true}});
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((pairs + kThreads - 1) / kThreads, 4096));
  attention_merge_kernel<<<blocks, kThreads, 0, stream()>>>(
      st.f32(0), lse.data(), st.f32(1), lse_part.data(), sh.seq, sh.batch, sh.heads, sh.head_dim);
  CUDA_CHECK_LAUNCH();
  st.round(0);
}

}  // namespace tp
