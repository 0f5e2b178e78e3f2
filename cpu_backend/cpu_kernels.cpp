// cpu_kernels.cpp — the CPU backend's model kernels (activations, norms, attention, embedding,
// loss, optimizer, dropout). The math of each kernel sits in a comment above it, the forward next to
// its backward (llm.c style); the contract is in core/device.h.
//
// Determinism: results are bit-identical for any OpenMP thread count. Every output element is
// computed by one thread in a fixed order: sums over rows (dw, db, dwte) are parallelised over the
// output (columns, positions), never split across threads, and the `omp simd` reductions (norm
// statistics, Σ x², the softmax sums) add in vector lanes, an order the compiled code fixes.
// The attention's products go through BLAS (blas.h: tp::cpu::sgemm): the GEMMs of one (batch,
// head) pair (backward: one (batch, kv head) pair, dk and dv included) run whole on one thread, and
// inside a parallel region OpenBLAS runs each call on the calling thread alone, so attention is
// bit-identical across thread counts too, for a given OpenBLAS kernel: another kernel
// (OPENBLAS_CORETYPE, another CPU or library) rounds differently, within fp32 tolerance. Not
// thread-independent: the plain GEMMs (CpuDevice::gemm), where OpenBLAS splits one call across
// its threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blas.h"
#include "core/error.h"
#include "cpu_device.h"

namespace tp {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // below this much work, one thread is faster
constexpr int64_t kColBlock = 64;          // columns per thread in the column-parallel row sums

// acc[c] (c in [c0, c1)) = Σ_r f(r, c), rows in order; one call per column block, so the result
// does not depend on the thread that runs it.
template <typename F>
void sum_rows_block(int64_t rows, int64_t c0, int64_t c1, double* acc, F f) {
  for (int64_t c = c0; c < c1; ++c) acc[c - c0] = 0.0;
  for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c) acc[c - c0] += f(r, c);
}

// The bits of a float and back (std::bit_cast in C++20).
inline uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline float bits_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// x limited to [−lim, lim] (lim ≥ 0), NaN kept. On the bits: |x| orders like its bit pattern read
// as an integer, NaN above +inf, and an integer min is one instruction where a float min is a
// branch (its NaN rules) that stops the loop around it from vectorising.
inline float clamp_abs(float x, float lim) {
  constexpr uint32_t kInf = 0x7f800000u, kSign = 0x80000000u;
  const uint32_t b = float_bits(x), a = b & ~kSign;
  const uint32_t m = a > kInf ? a : std::min(a, float_bits(lim));
  return bits_float(m | (b & kSign));
}

// e^x for |x| ≤ 88, within 1 ulp (0 where e^x is below the smallest normal float, e^−87.3; NaN
// gives NaN), in arithmetic the compiler vectorises, where std::exp is a library call per element:
// x = n ln2 + r with |r| ≤ ln2/2 (ln2 in two parts, so r is exact), e^r by the Cephes expf
// polynomial, 2^n built as exponent bits. Adding 1.5 · 2^23 rounds x / ln2 to the integer n and
// leaves n in the low bits of the sum.
inline float exp_small(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 · 2^23
  const float shifted = x * 1.44269504088896341f + kShift;
  const float n = shifted - kShift;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t biased = float_bits(shifted) - float_bits(kShift) + 127;  // n + 127, in [0, 254]
  return p * bits_float(biased << 23);
}
}  // namespace

// ---- elementwise ---------------------------------------------------------------------------------

// y = x ⊙ m
void CpuDevice::do_mul(const Tensor& x, const Tensor& m, Tensor& y) {
  const float* px = x.data();
  const float* pm = m.data();
  float* py = y.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) py[i] = px[i] * pm[i];
}

// Σ x², in double. Fixed blocks, each summed by one thread (in simd lanes), then the block sums in
// order.
double CpuDevice::do_sum_squares(const Tensor& x) {
  const float* px = x.data();
  const int64_t n = x.numel();
  constexpr int64_t kBlock = 4096;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(nblocks), 0.0);
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t end = std::min(n, (blk + 1) * kBlock);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = blk * kBlock; i < end; ++i) s += static_cast<double>(px[i]) * px[i];
    partial[blk] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

// mask[r, c] = (u ≥ p) / (1 − p), u = uniform[0, 1) at global index offset + r·row_stride + c
void CpuDevice::do_dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index,
                                float p) {
  float* pm = mask.data();
  const int64_t rows = mask.rows(), cols = mask.cols();
  const float keep = 1.0f / (1.0f - p);
  const Distribution uniform = Distribution::uniform(0.0f, 1.0f);
#pragma omp parallel for if (rows * cols > 4096)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float u = random_value(key, index.offset + r * index.row_stride + c, uniform);
      pm[r * cols + c] = u >= p ? keep : 0.0f;
    }
}

// ---- activations ---------------------------------------------------------------------------------

// GeLU, tanh approximation, with a = √(2/π), z = a (x + 0.044715 x³), and σ(u) = 1 / (1 + e^−u),
// since 0.5 (1 + tanh z) = σ(2z) and 1 − tanh² z = 4 σ(2z) σ(−2z):
//   y  = 0.5 x (1 + tanh z)                                          = x σ(2z)
//   y' = 0.5 (1 + tanh z) + 0.5 x (1 − tanh² z) · a (1 + 3 · 0.044715 x²)
//      = σ + 2x σ(1 − σ) · a (1 + 3 · 0.044715 x²),   σ = σ(2z),  σ(1 − σ) = e^−2z σ²
// In the σ form no term cancels (1 − tanh² z does for large z), and with exp_small the loops
// vectorise: std::tanh is a library call per element, and was most of a training step's time
// outside the GEMMs. 2z is limited to ±88 first, where σ is already 1 or below 1e−38.
namespace {
constexpr float kGeluA = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

// e^−2z of GeLU at x
inline float gelu_exp(float x) {
  const float two_z = 2.0f * kGeluA * (x + kGeluC * x * x * x);
  return exp_small(-clamp_abs(two_z, 88.0f));
}
}  // namespace

void CpuDevice::do_gelu_forward(Tensor& y, const Tensor& x) {
  const float* px = x.data();
  float* py = y.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = px[i];
    py[i] = xi / (1.0f + gelu_exp(xi));
  }
}

void CpuDevice::do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const float* px = x.data();
  const float* pdy = dy.data();
  float* pdx = dx.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = px[i];
    const float e = gelu_exp(xi);
    const float sig = 1.0f / (1.0f + e);
    const float grad =
        sig + 2.0f * xi * (e * sig * sig) * kGeluA * (1.0f + 3.0f * kGeluC * xi * xi);
    pdx[i] = pdy[i] * grad;
  }
}

// SwiGLU, σ(g) = 1 / (1 + e^−g), silu(g) = g σ(g), silu'(g) = σ(g) (1 + g (1 − σ(g))):
//   y = silu(g) ⊙ u
//   dg = dy ⊙ u ⊙ silu'(g),  du = dy ⊙ silu(g)
void CpuDevice::do_swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) {
  const float* pg = g.data();
  const float* pu = u.data();
  float* py = y.data();
  const int64_t n = g.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float sig = 1.0f / (1.0f + std::exp(-pg[i]));
    py[i] = pg[i] * sig * pu[i];
  }
}

void CpuDevice::do_swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                                   const Tensor& u) {
  const float* pg = g.data();
  const float* pu = u.data();
  const float* pdy = dy.data();
  float* pdg = dg.data();
  float* pdu = du.data();
  const int64_t n = g.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = pg[i], ui = pu[i], dyi = pdy[i];  // read all before writing (no aliasing rule)
    const float sig = 1.0f / (1.0f + std::exp(-gi));
    pdg[i] = dyi * ui * sig * (1.0f + gi * (1.0f - sig));
    pdu[i] = dyi * gi * sig;
  }
}

// ---- norms ---------------------------------------------------------------------------------------

// LayerNorm over the last dim (h) of each row:
//   μ = mean(x), σ² = mean((x − μ)²) (biased), rstd = 1/√(σ² + eps), x̂ = (x − μ) rstd
//   y = x̂ ⊙ w + b
// Backward, with g = dy ⊙ w:
//   dx = rstd (g − mean(g) − x̂ mean(g ⊙ x̂))      (written)
//   dw += Σ_r dy ⊙ x̂,  db += Σ_r dy              (accumulated)
void CpuDevice::do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                     const Tensor& w, const Tensor& b, float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  const float* pb = b.data();
  float* py = y.data();
  float* pmean = mean.data();
  float* prstd = rstd.data();
#pragma omp parallel for if (rows * h > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < h; ++c) s += xr[c];
    const double mu = s / static_cast<double>(h);
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < h; ++c) ss += (xr[c] - mu) * (xr[c] - mu);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    float* yr = py + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) yr[c] = (xr[c] - m) * rs * pw[c] + pb[c];
    pmean[r] = m;
    prstd[r] = rs;
  }
}

void CpuDevice::do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                      const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  const float* pdy = dy.data();
  const float* pmean = mean.data();
  const float* prstd = rstd.data();
  float* pdx = dx.data();
  float* pdw = dw.data();
  float* pdb = db.data();
  const bool parallel = rows * h > kParallelMin;

  // dw, db: each block of columns summed over the rows in order by one thread.
  const int64_t nblocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (parallel)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(h, c0 + kColBlock);
    double acc[kColBlock];
    sum_rows_block(rows, c0, c1, acc, [&](int64_t r, int64_t c) {
      return static_cast<double>(pdy[r * h + c]) * ((px[r * h + c] - pmean[r]) * prstd[r]);
    });
    for (int64_t c = c0; c < c1; ++c) pdw[c] += static_cast<float>(acc[c - c0]);
    sum_rows_block(rows, c0, c1, acc, [&](int64_t r, int64_t c) { return double{pdy[r * h + c]}; });
    for (int64_t c = c0; c < c1; ++c) pdb[c] += static_cast<float>(acc[c - c0]);
  }

  // dx: one row per iteration.
#pragma omp parallel for if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    const float* dyr = pdy + r * h;
    const float m = pmean[r], rs = prstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < h; ++c) {
      const float g = dyr[c] * pw[c];
      sum_g += g;
      sum_gx += static_cast<double>(g) * ((xr[c] - m) * rs);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(h));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
    float* dxr = pdx + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) {
      const float xhat = (xr[c] - m) * rs;
      dxr[c] = rs * (dyr[c] * pw[c] - mean_g - xhat * mean_gx);
    }
  }
}

// RMSNorm over the last dim (h) of each row:
//   rstd = 1/√(mean(x²) + eps), x̂ = x rstd, y = x̂ ⊙ w
// Backward, with g = dy ⊙ w:
//   dx = rstd (g − x̂ mean(g ⊙ x̂))   (written)
//   dw += Σ_r dy ⊙ x̂                (accumulated)
void CpuDevice::do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                   float eps) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  float* py = y.data();
  float* prstd = rstd.data();
#pragma omp parallel for if (rows * h > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < h; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    float* yr = py + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) yr[c] = xr[c] * rs * pw[c];
    prstd[r] = rs;
  }
}

void CpuDevice::do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                    const Tensor& w, const Tensor& rstd) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* px = x.data();
  const float* pw = w.data();
  const float* pdy = dy.data();
  const float* prstd = rstd.data();
  float* pdx = dx.data();
  float* pdw = dw.data();
  const bool parallel = rows * h > kParallelMin;

  const int64_t nblocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (parallel)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(h, c0 + kColBlock);
    double acc[kColBlock];
    sum_rows_block(rows, c0, c1, acc, [&](int64_t r, int64_t c) {
      return static_cast<double>(pdy[r * h + c]) * (px[r * h + c] * prstd[r]);
    });
    for (int64_t c = c0; c < c1; ++c) pdw[c] += static_cast<float>(acc[c - c0]);
  }

#pragma omp parallel for if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * h;
    const float* dyr = pdy + r * h;
    const float rs = prstd[r];
    double sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t c = 0; c < h; ++c) sum_gx += static_cast<double>(dyr[c] * pw[c]) * (xr[c] * rs);
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
    float* dxr = pdx + r * h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) dxr[c] = rs * (dyr[c] * pw[c] - xr[c] * rs * mean_gx);
  }
}

// ---- attention -----------------------------------------------------------------------------------

// Causal attention as GEMMs, per batch b and query head j (kv head g = j / (nh / nkv)). Q_bj: (S, hd)
// is head j's columns of q at the rows s·B + b, K_bg, V_bg: (S, hd) likewise, all read in place
// (row stride B·nh·hd or B·nkv·hd); P_bj: (S, S) is probs[b, j]:
//   P_bj   = softmax_causal(scale · Q_bj K_bgᵀ)       row s: softmax over t ≤ s, 0 for t > s
//   out_bj = P_bj V_bg
// Backward, ⊙ elementwise and rowsum(X)_s = Σ_t X_st:
//   dP     = dout_bj V_bgᵀ
//   dS     = P ⊙ (dP − rowsum(dP ⊙ P))               (the softmax backward, row by row)
//   dq_bj  = scale · dS K_bg
//   dk_bg  = scale · Σ_{j∈g} dSᵀ Q_bj,   dv_bg = Σ_{j∈g} P_bjᵀ dout_bj
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
    row[t] = exp_small(clamp_abs(row[t] - maxv, 88.0f));
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

// ---- vocabulary-parallel embedding ---------------------------------------------------------------

// wte is split by rows (tokens): a shard holds ids [first, first + rows). Each shard looks up the
// ids it owns and writes zeros for the others, so the sum over the shards (one all-reduce) is the
// full lookup:
//   out[i] = wte_shard[ids[i] − first] if first ≤ ids[i] < first + rows, else 0
// Backward: dwte_shard[ids[i] − first] += dout[i] for the owned ids only.
namespace {
// The owned row of id, or −1 when another shard owns it.
int64_t owned_row(float id, int64_t first, int64_t rows) {
  const int64_t row = static_cast<int64_t>(id) - first;
  return row >= 0 && row < rows ? row : -1;
}
}  // namespace

void CpuDevice::do_embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                           int64_t first_id) {
  const int64_t n = ids.numel(), rows = wte_shard.rows(), h = wte_shard.cols();
  const float* pid = ids.data();
  const float* pwte = wte_shard.data();
  float* pout = out.data();
#pragma omp parallel for if (n * h > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = owned_row(pid[i], first_id, rows);
    float* o = pout + i * h;
    if (row < 0) {
      for (int64_t c = 0; c < h; ++c) o[c] = 0.0f;
    } else {
      const float* te = pwte + row * h;
      for (int64_t c = 0; c < h; ++c) o[c] = te[c];
    }
  }
}

void CpuDevice::do_embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout,
                                            const Tensor& ids, int64_t first_id,
                                            const float* host_ids) {
  const int64_t n = ids.numel(), rows = dwte_shard.rows(), h = dwte_shard.cols();
  const float* pid = host_ids;  // on the CPU, ids.data() itself
  const float* pdo = dout.data();
  float* pdwte = dwte_shard.data();
  // ids repeat, so each block of columns is owned by one thread, rows i in order.
  const int64_t nblocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (n * h > kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(h, c0 + kColBlock);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = owned_row(pid[i], first_id, rows);
      if (row < 0) continue;
      float* dst = pdwte + row * h;
      const float* src = pdo + i * h;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

// Positions, sequence-major: global row g = s·B + b is position s = g / B. x holds the global rows
// [row0, row0 + rows) (row0 > 0 for a sequence-parallel shard):
//   x[r] += wpe[(row0 + r) / B]
// Backward: dwpe[s] += Σ over the held rows r of position s of dx[r]
void CpuDevice::do_position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) {
  const int64_t rows = x.rows(), h = x.cols();
  const float* pwpe = wpe.data();
  float* px = x.data();
#pragma omp parallel for if (rows * h > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* pe = pwpe + ((row0 + r) / batch) * h;
    float* xr = px + r * h;
    for (int64_t c = 0; c < h; ++c) xr[c] += pe[c];
  }
}

void CpuDevice::do_position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) {
  const int64_t rows = dx.rows(), h = dx.cols();
  if (rows == 0) return;
  const int64_t s0 = row0 / batch, s1 = (row0 + rows - 1) / batch + 1;  // positions [s0, s1)
  const float* pdx = dx.data();
  float* pdwpe = dwpe.data();
  // Position s is owned by one thread, its held rows in order.
#pragma omp parallel for if (rows * h > kParallelMin)
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t r0 = std::max(s * batch, row0) - row0;
    const int64_t r1 = std::min((s + 1) * batch, row0 + rows) - row0;
    float* dst = pdwpe + s * h;
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = pdx + r * h;
      for (int64_t c = 0; c < h; ++c) dst[c] += src[c];
    }
  }
}

// ---- vocabulary-parallel loss --------------------------------------------------------------------

// logits are split by columns (tokens): a shard holds global ids [first, first + cols), of which
// ids ≥ V are padding and take no part. With m, Σ and x_y all-reduced between the steps (max, sum,
// sum), for row i with target y:
//   m_i = max_j x_ij                                   (vocab_max; −inf for a shard of padding)
//   Σ_i = Σ_j e^(x_ij − m_i),  x_y = x_iy or 0         (vocab_sum_exp_target, m_i the global max)
//   loss_i = log Σ_i + m_i − x_y                       (vocab_loss)
//   dlogits_ij = scale (e^(x_ij − m_i) / Σ_i − [first + j = y]), 0 on padding
// Every dlogits element depends on its own logit only, so dlogits may alias logits.
void CpuDevice::do_vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& /*shard*/,
                             int64_t real_cols) {
  const int64_t n = logits.rows(), cols = logits.cols();
  const float* px = logits.data();
  float* pm = row_max.data();
#pragma omp parallel for if (n * cols > kParallelMin)
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
#pragma omp parallel for if (n * cols > kParallelMin)
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
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    pl[i] = static_cast<float>(std::log(static_cast<double>(ps[i])) + pm[i] - py[i]);
}

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
#pragma omp parallel for if (n * cols > kParallelMin)
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

// ---- optimizer -----------------------------------------------------------------------------------

// AdamW, g' = grad_scale · g:
//   m = β1 m + (1 − β1) g',  v = β2 v + (1 − β2) g'²
//   p −= lr · (m / (1 − β1^step)) / (√(v / (1 − β2^step)) + eps) + lr · wd · p
// In blocks of kBlock elements, three loops over each: m, v; the square roots; p. std::sqrt may
// set errno (on a negative argument), so the compiler keeps it out of vector code: on its own it
// runs one element at a time, while the loops around it vectorise. Each element's arithmetic is
// the same as in one loop.
void CpuDevice::do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                              const AdamWParams& hp, int64_t step) {
  const float bc1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(step)));
  const float bc2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(step)));
  float* pp = p.data();
  const float* pg = g.data();
  float* pm = m.data();
  float* pv = v.data();
  const int64_t n = p.numel();
  constexpr int64_t kBlock = 256;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t i0 = blk * kBlock, len = std::min(kBlock, n - i0);
    float denom[kBlock];  // √(v / (1 − β2^step)) + eps
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      const float gi = hp.grad_scale * pg[i];
      const float mi = hp.beta1 * pm[i] + (1.0f - hp.beta1) * gi;
      const float vi = hp.beta2 * pv[i] + (1.0f - hp.beta2) * gi * gi;
      pm[i] = mi;
      pv[i] = vi;
      denom[j] = vi / bc2;
    }
    for (int64_t j = 0; j < len; ++j) denom[j] = std::sqrt(denom[j]) + hp.eps;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      const float update = (pm[i] / bc1) / denom[j];
      pp[i] -= hp.lr * update + hp.lr * hp.weight_decay * pp[i];
    }
  }
}

}  // namespace tp
