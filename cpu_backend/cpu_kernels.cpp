// cpu_kernels.cpp — the CPU backend's model kernels (activations, norms, attention, embedding,
// loss, optimizer, dropout). The math of each kernel sits in a comment above it, the forward next to
// its backward (llm.c style); the contract is in core/device.h.
//
// Determinism: every output element is computed by one thread in a fixed order, so results are
// bit-identical for any OpenMP thread count. Sums over rows (dw, db, dk, dv, dwte) are parallelised
// over the output (columns, key positions), never split across threads.
#include <algorithm>
#include <cmath>
#include <vector>

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
    for (int64_t c = c0; c < c1; ++c) acc[c - c0] += f(r, c);
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

// Σ x², in double. Fixed blocks, each summed by one thread, then the block sums in order.
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

// GeLU, tanh approximation, with a = √(2/π), z = a (x + 0.044715 x³):
//   y  = 0.5 x (1 + tanh z)
//   y' = 0.5 (1 + tanh z) + 0.5 x (1 − tanh² z) · a (1 + 3 · 0.044715 x²)
namespace {
constexpr float kGeluA = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;
}  // namespace

void CpuDevice::do_gelu_forward(Tensor& y, const Tensor& x) {
  const float* px = x.data();
  float* py = y.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = px[i];
    py[i] = 0.5f * xi * (1.0f + std::tanh(kGeluA * (xi + kGeluC * xi * xi * xi)));
  }
}

void CpuDevice::do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const float* px = x.data();
  const float* pdy = dy.data();
  float* pdx = dx.data();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = px[i];
    const float t = std::tanh(kGeluA * (xi + kGeluC * xi * xi * xi));
    const float grad =
        0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * kGeluA * (1.0f + 3.0f * kGeluC * xi * xi);
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
    for (int64_t c = 0; c < h; ++c) s += xr[c];
    const double mu = s / static_cast<double>(h);
    double ss = 0.0;
    for (int64_t c = 0; c < h; ++c) ss += (xr[c] - mu) * (xr[c] - mu);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    float* yr = py + r * h;
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
    for (int64_t c = 0; c < h; ++c) {
      const float g = dyr[c] * pw[c];
      sum_g += g;
      sum_gx += static_cast<double>(g) * ((xr[c] - m) * rs);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(h));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
    float* dxr = pdx + r * h;
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
    for (int64_t c = 0; c < h; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    float* yr = py + r * h;
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
    for (int64_t c = 0; c < h; ++c) sum_gx += static_cast<double>(dyr[c] * pw[c]) * (xr[c] * rs);
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(h));
    float* dxr = pdx + r * h;
    for (int64_t c = 0; c < h; ++c) dxr[c] = rs * (dyr[c] * pw[c] - xr[c] * rs * mean_gx);
  }
}

// ---- attention -----------------------------------------------------------------------------------

// Causal attention, per batch b and query head j (kv head g = j / (nh / nkv)), query position s:
//   P_t = softmax_{t ≤ s}(scale · q_s · k_t),  out_s = Σ_{t≤s} P_t v_t
// Backward, with dP_t = dout_s · v_t and dS_t = P_t (dP_t − Σ_u P_u dP_u):
//   dq_s = scale Σ_t dS_t k_t,  dk_t = scale Σ_{j∈g} Σ_{s≥t} dS_t q_s,  dv_t = Σ_{j∈g} Σ_{s≥t} P_t dout_s
void CpuDevice::do_attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, hd = sh.head_dim;
  const int64_t group = nh / sh.kv_heads;
  const int64_t qc = nh * hd, kc = sh.kv_heads * hd;  // row lengths of q/out and k/v
  const float* pq = q.data();
  const float* pk = k.data();
  const float* pv = v.data();
  float* pout = out.data();
  float* pp = probs.data();
  // One (b, j, s) per iteration: it writes probs row (b, j, s) and out row s·B + b, head j.
#pragma omp parallel for collapse(3) if (B * nh * S * S * hd > kParallelMin)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t g = j / group;
        const float* qs = pq + (s * B + b) * qc + j * hd;
        float* prow = pp + ((b * nh + j) * S + s) * S;
        float maxv = -INFINITY;
        for (int64_t t = 0; t <= s; ++t) {
          const float* kt = pk + (t * B + b) * kc + g * hd;
          float dot = 0.0f;
          for (int64_t d = 0; d < hd; ++d) dot += qs[d] * kt[d];
          prow[t] = sh.scale * dot;
          maxv = std::max(maxv, prow[t]);
        }
        double sum = 0.0;
        for (int64_t t = 0; t <= s; ++t) {
          prow[t] = std::exp(prow[t] - maxv);
          sum += prow[t];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t t = 0; t <= s; ++t) prow[t] *= inv;
        for (int64_t t = s + 1; t < S; ++t) prow[t] = 0.0f;
        float* os = pout + (s * B + b) * qc + j * hd;
        for (int64_t d = 0; d < hd; ++d) os[d] = 0.0f;
        for (int64_t t = 0; t <= s; ++t) {
          const float* vt = pv + (t * B + b) * kc + g * hd;
          for (int64_t d = 0; d < hd; ++d) os[d] += prow[t] * vt[d];
        }
      }
}

void CpuDevice::do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                      const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& probs, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv;
  const int64_t qc = nh * hd, kc = nkv * hd;
  const float* pq = q.data();
  const float* pk = k.data();
  const float* pv = v.data();
  const float* pdo = dout.data();
  const float* pp = probs.data();
  float* pdq = dq.data();
  float* pdk = dk.data();
  float* pdv = dv.data();
  const bool parallel = B * nh * S * S * hd > kParallelMin;

  // Pass 1, one (b, j, s) per iteration: dS row (b, j, s) into scratch, and dq_s.
  std::vector<float> dscore(static_cast<size_t>(B * nh * S * S));
#pragma omp parallel for collapse(3) if (parallel)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t g = j / group;
        const int64_t row = (b * nh + j) * S + s;
        const float* prow = pp + row * S;
        float* dsrow = dscore.data() + row * S;
        const float* dos = pdo + (s * B + b) * qc + j * hd;
        double pdp = 0.0;  // Σ_u P_u dP_u
        for (int64_t t = 0; t <= s; ++t) {
          const float* vt = pv + (t * B + b) * kc + g * hd;
          float dp = 0.0f;
          for (int64_t d = 0; d < hd; ++d) dp += dos[d] * vt[d];
          dsrow[t] = dp;
          pdp += static_cast<double>(prow[t]) * dp;
        }
        const float pdpf = static_cast<float>(pdp);
        for (int64_t t = 0; t <= s; ++t) dsrow[t] = prow[t] * (dsrow[t] - pdpf);
        float* dqs = pdq + (s * B + b) * qc + j * hd;
        for (int64_t d = 0; d < hd; ++d) dqs[d] = 0.0f;
        for (int64_t t = 0; t <= s; ++t) {
          const float* kt = pk + (t * B + b) * kc + g * hd;
          for (int64_t d = 0; d < hd; ++d) dqs[d] += dsrow[t] * kt[d];
        }
        for (int64_t d = 0; d < hd; ++d) dqs[d] *= sh.scale;
      }

      // Pass 2, one (b, kv head g, t) per iteration: dk_t and dv_t summed over the group's query heads
      // and the positions s ≥ t, in a fixed order.
#pragma omp parallel for collapse(3) if (parallel)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < nkv; ++g)
      for (int64_t t = 0; t < S; ++t) {
        float* dkt = pdk + (t * B + b) * kc + g * hd;
        float* dvt = pdv + (t * B + b) * kc + g * hd;
        for (int64_t d = 0; d < hd; ++d) dkt[d] = dvt[d] = 0.0f;
        for (int64_t j = g * group; j < (g + 1) * group; ++j)
          for (int64_t s = t; s < S; ++s) {
            const int64_t row = (b * nh + j) * S + s;
            const float ds = dscore[row * S + t], p = pp[row * S + t];
            const float* qs = pq + (s * B + b) * qc + j * hd;
            const float* dos = pdo + (s * B + b) * qc + j * hd;
            for (int64_t d = 0; d < hd; ++d) {
              dkt[d] += ds * qs[d];
              dvt[d] += p * dos[d];
            }
          }
        for (int64_t d = 0; d < hd; ++d) dkt[d] *= sh.scale;
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
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = hp.grad_scale * pg[i];
    const float mi = hp.beta1 * pm[i] + (1.0f - hp.beta1) * gi;
    const float vi = hp.beta2 * pv[i] + (1.0f - hp.beta2) * gi * gi;
    pm[i] = mi;
    pv[i] = vi;
    const float update = (mi / bc1) / (std::sqrt(vi / bc2) + hp.eps);
    pp[i] -= hp.lr * update + hp.lr * hp.weight_decay * pp[i];
  }
}

}  // namespace tp
