// attention.cu — the GPU backend's causal attention: forward, backward, and the forward over a
// key/value cache (decoding). The math is in core/device.h; the CPU's is in
// cpu_backend/kernels/attention.cpp, whose softmax arithmetic (f32 vs f64 steps) these mirror.
//
// No S×S probabilities are kept between the passes: the forward returns out and the per-row
// log-sum-exp lse (B, nh, S, f32), and the backward recomputes P = e^(X − lse) from q, k and lse.
// The S×S scores still pass through memory, in the device's scratch (CudaDevice::scratch), for
// the cuBLAS GEMMs on either side of the softmax; a tiled kernel that never materialises them is
// a later step (FlashAttention's).
//
// The products are cuBLAS GEMMs (deterministic for a given GPU and cuBLAS version; the backward's
// recomputed scores are the forward's bit for bit); the softmax rows are fixed-tree block
// reductions (kernel_util.cuh). No float atomics.
//
// bf16 (--precision bf16): the forward and backward take bf16 tensors themselves (native_bf16) but
// compute exactly as in f32: P stays f32 for the P·V product (and the backward's GEMMs read P and
// dS in f32), and cuBLAS multiplies no f32 operand by a bf16 one, so bf16 q, k, v (and out, dout)
// are widened into scratch (F32Staging below) and the same f32 batched GEMMs run — bit for bit the
// stand-in path on any GPU, which bf16 GEMMs (another sum order) would not be. What the native
// path saves: the front's stand-in tensors and their widening of the outputs' old contents. lse
// is f32 on every path. The cached forward (generation) stays on the front's stand-ins.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "cuda_check.h"
#include "cuda_device.h"
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
// The same kernel serves attention over a key/value cache (attention_cached_forward, lse null):
// rows of P keys for the n query positions [past, past + n), so row (b, j, i) reads keys
// t ≤ past + i. The plain forward is n = P = S, past = 0.
__global__ void causal_softmax_kernel(float* probs, float* lse, int64_t n, int64_t P, int64_t past,
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
    if (lse != nullptr && threadIdx.x == 0) lse[row] = static_cast<float>(m + log(sum));
  }
}

// The backward's softmax step, per row (b, j, s) of the recomputed scores X (scale · Q Kᵀ, in
// place in `probs`) and of dP (dout Vᵀ, in place in `ds`), both full S×S batched GEMMs:
//   D     = Σ_e dout[s, e] · out[s, e]      f64 products and block sum, as on the CPU
//   P_t   = exp(X_t − lse),                 t ≤ s; 0 for t > s
//   dS_t  = P_t · (dP_t − f32(D)),          t ≤ s; 0 for t > s
// out and dout (S·B, nh·hd): (b, j, s)'s hd values at row s·B + b, columns [j·hd, (j + 1)·hd).
// One block per row, grid stride.
__global__ void causal_softmax_backward_kernel(float* probs, float* ds, const float* lse,
                                               const float* out, const float* dout, int64_t S,
                                               int64_t B, int64_t nh, int64_t hd, int64_t rows) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t s = row % S, bj = row / S, j = bj % nh, b = bj / nh;
    const int64_t at = (s * B + b) * nh * hd + j * hd;
    double dsum = 0.0;
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x)
      dsum += static_cast<double>(dout[at + e]) * out[at + e];
    const float D = static_cast<float>(gpu::block_sum(dsum));
    const float l = lse[row];
    float* p = probs + row * S;
    float* d = ds + row * S;
    for (int64_t t = threadIdx.x; t <= s; t += blockDim.x) {
      const float pt = expf(p[t] - l);
      p[t] = pt;
      d[t] = pt * (d[t] - D);
    }
    for (int64_t t = s + 1 + threadIdx.x; t < S; t += blockDim.x) {
      p[t] = 0.0f;
      d[t] = 0.0f;
    }
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
void attention_scores(CudaDevice& dev, float* scores, const float* q32, const float* k32,
                      const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv;
  for (int64_t r = 0; r < group; ++r)
    dev.batched_gemm(false, true, S, S, hd, sh.scale, q32 + r * hd, B * nh * hd, group * hd, k32,
                     B * nkv * hd, hd, 0.0f, scores + r * S * S, S, group * S * S, B * nkv);
}
}  // namespace

void CudaDevice::do_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv, rows = B * nh * S;
  if (rows == 0 || hd == 0) return;
  // bf16 tensors (native_bf16): widened into scratch, the f32 computation below unchanged, a bf16
  // out rounded once — what the Device front's stand-ins do, without their allocations and their
  // widening of out's old contents. The scores / P: B·nh·S·S floats of scratch after the staging.
  F32Staging st(*this, {{&q, true}, {&k, true}, {&v, true}, {&out, false}},
                static_cast<size_t>(rows * S) * sizeof(float));
  const float *q32 = st.f32(0), *k32 = st.f32(1), *v32 = st.f32(2);
  float *out32 = st.f32(3), *p32 = st.extra();
  attention_scores(*this, p32, q32, k32, sh);  // scale·Q Kᵀ
  causal_softmax_kernel<<<gpu::row_blocks(rows), gpu::threads_for(S, gpu::kRowThreads), 0,
                          stream()>>>(p32, lse.data(), S, S, 0, rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, false, S, hd, S, 1.0f, p32 + r * S * S, S, group * S * S, v32, B * kc, hd,
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
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv, qc = nh * hd, kc = nkv * hd, pairs = B * nkv, rows = B * nh * S;
  if (rows == 0 || hd == 0) return;
  // bf16 tensors: widened into scratch (out too: D reads it in f32), the f32 computation
  // unchanged, dq, dk, dv rounded once at the end (dk and dv after their sum over the group).
  // After the staging, 2·B·nh·S·S floats of scratch: the scores, then P in place; dP, then dS.
  const size_t square = static_cast<size_t>(rows * S);
  F32Staging st(*this,
                {{&dout, true},
                 {&q, true},
                 {&k, true},
                 {&v, true},
                 {&out, true},
                 {&dq, false},
                 {&dk, false},
                 {&dv, false}},
                2 * square * sizeof(float));
  const float *dout32 = st.f32(0), *q32 = st.f32(1), *k32 = st.f32(2), *v32 = st.f32(3),
              *out32 = st.f32(4);
  float *dq32 = st.f32(5), *dk32 = st.f32(6), *dv32 = st.f32(7);
  float *p32 = st.extra(), *ds = st.extra() + square;
  attention_scores(*this, p32, q32, k32, sh);  // scale·Q Kᵀ, the forward's
  for (int64_t r = 0; r < group; ++r)
    batched_gemm(false, true, S, S, hd, 1.0f, dout32 + r * hd, B * qc, group * hd, v32, B * kc, hd,
                 0.0f, ds + r * S * S, S, group * S * S, pairs);  // dP = dout Vᵀ
  causal_softmax_backward_kernel<<<gpu::row_blocks(rows), gpu::threads_for(S, gpu::kRowThreads), 0,
                                   stream()>>>(p32, ds, lse.data(), out32, dout32, S, B, nh, hd,
                                               rows);
  CUDA_CHECK_LAUNCH();
  for (int64_t r = 0; r < group; ++r) {
    const float* dsr = ds + r * S * S;
    const float* pr = p32 + r * S * S;
    const float beta = r == 0 ? 0.0f : 1.0f;  // a kv head sums over its group's query heads
    batched_gemm(false, false, S, hd, S, sh.scale, dsr, S, group * S * S, k32, B * kc, hd, 0.0f,
                 dq32 + r * hd, B * qc, group * hd, pairs);  // dq = scale · dS K
    batched_gemm(true, false, S, hd, S, sh.scale, dsr, S, group * S * S, q32 + r * hd, B * qc,
                 group * hd, beta, dk32, B * kc, hd, pairs);  // dk (+)= scale · dSᵀ Q
    batched_gemm(true, false, S, hd, S, 1.0f, pr, S, group * S * S, dout32 + r * hd, B * qc,
                 group * hd, beta, dv32, B * kc, hd, pairs);  // dv (+)= Pᵀ dout
  }
  st.round(5);
  st.round(6);
  st.round(7);
}

}  // namespace tp
