// attention.cpp — the CPU backend's causal attention: forward, backward, and the forward over a
// key/value cache (decoding). The math is in core/device.h; the GPU's is in
// gpu_backend/kernels/attention.cu. No BLAS: a register-tiled kernel of this file (below says
// why and how), built for AVX-512, AVX2 + FMA and the baseline, the variant picked from the CPU
// once (kernels/attention.h lets a test pick another).
//
// Thread independence: one (batch, head) pair (backward: one (batch, kv head) pair, dk and dv
// included) runs whole on one thread, so attention is bit-identical across thread counts; and
// the AVX-512 and AVX2 variants give the same bits (see "Order of the sums" below).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "cpu_device.h"
#include "kernels/attention.h"
#include "kernels/kernel_util.h"

namespace tp {

// Causal attention, per batch b and query head j (kv head g = j / (nh / nkv)); the math is in
// core/device.h. Q_bj, K_bg, V_bg, dout_bj are (S, hd) blocks of the inputs with row stride
// B·nh·hd or B·nkv·hd; lse_bj is lse[b, j], (S). No S × S tensor is kept between forward and
// backward: the forward keeps each row's log-sum-exp, the backward recomputes P from it.
//
// The products are a register-blocked micro-kernel of this file, not BLAS: at these shapes
// ((S, hd) = (128, 32) in the bench model) OpenBLAS's per-call overhead and packing left the
// attention at ≈ 80–110 GFLOP/s, and a GEMM cannot skip the upper half of a diagonal block. Here
// a tile is R rows × 2 vectors of columns held in registers (8 × 32 floats with AVX-512, 4 × 16
// with AVX2, 4 × 8 with SSE2), and the causal triangle is cut at tile granularity: query rows
// [s0, s0 + R) read keys [0, s0 + R) only, key rows [t0, t0 + R) are reached from queries
// [t0, S) only. The entries t > s inside a tile are computed and then replaced by zeros (P by
// the softmax, dS by its loop), which the next product multiplies through.
// Forward, per (b, j) and R-row tile: scores into a row buffer, the softmax on it (its log-sum-exp
// written to lse), out = P V from the same buffer: the S·S scores pass through L1 and go nowhere.
// Backward, per (b, g), FlashAttention-2's order: per query head, an outer loop over blocks of
// kKeyBlock keys, an inner one over blocks of kQueryBlock queries that see the block (the causal
// triangle and past skip whole blocks and R-row tiles); per (query block, key block) P recomputed
// tile by tile from the scores and lse (e^(x − lse)), dP, the softmax backward with the row sum
// D = Σ dout ⊙ out, into a (kQueryBlock, kKeyBlock) panel; dq (+)= scale · dS K_block in an
// (n, hd) panel, dk, dv (+)= scale · dSᵀ Q, Pᵀ dout for the block's keys. No n × keys panel.
// Operands are first copied into zero-padded per-thread panels (K and V transposed where the
// kernel reads them by columns; the transposes by 8 × 8 blocks in registers). What stays scalar:
// the transposes' and the copies' edges (S, hd mod 8; hd mod W), the trees that add a row's max
// and Σ across the lanes, and D's dot product over hd.
//
// Order of the sums: every element of the scores, dP and out is one running sum over the reduction
// index in increasing order (hd for the scores and dP, keys for out); dq is one running sum per
// key block (over its keys, increasing), the blocks' sums added in increasing order; dk and dv
// one running sum per query block (over its queries, increasing), added in increasing order of
// query block, then of query head. Each step a fused multiply-add where the CPU has FMA
// (multiply_add: explicit, since -ffp-contract=off forbids the compiler to fuse; until it was
// explicit these steps were two roundings on every CPU). The blocks are constants, the same for
// every variant; a tile that starts or ends its sum at a row or key of its own adds only zeros
// (P and dS are +0 past a row's visible keys), which leave a running sum as it was. The same
// bits for any OpenMP thread count (one (b, j) or (b, g) pair runs whole on one thread), at
// every t (a head's numbers do not depend on the others), and on AVX-512 and AVX2 machines alike
// (the vector width changes which columns share a register, not any element's sum); a CPU
// without AVX2 and FMA (the baseline path) rounds each product separately: other bits, within
// fp32 tolerance.
//
// Measured (1 thread, bench model's per-layer shapes (S, B, nh, hd) = (128, 8, 8, 32), loaded
// machine): against the per-block sgemm version this replaced, AVX-512 0.63× forward and 0.77×
// backward, and 0.57×, 0.68× at (512, 2, 8, 64). The AVX2 variant (R = 4; 8 rows spill) run on
// the same machine is only 0.95–0.98× forward, 0.90–0.98× backward of that version with
// OPENBLAS_CORETYPE=Haswell: OpenBLAS's AVX2 GEMMs beat these tiles, the vectorised softmax wins.
// Then (the same shapes, AVX-512, min of 30 calls each, interleaved, loaded machine): the softmax
// without scalar masking stores and with P written in place, forward 2.09–2.21 → 1.76–1.79 ms;
// the explicit FMA, forward 1.73–1.79 → 1.47–1.55 ms, backward 2.62–2.67 → 2.10–2.21 ms; the
// transposes by 8 × 8 blocks, forward 1.59 → 1.46–1.53 ms, backward 2.25–2.28 → 2.16–2.23 ms.
// The backward by key blocks against the n × keys panels (tp_bench --suite attention, B = 1,
// nh = 8, medians of 3 interleaved runs, loaded Zen 4): 0.95–0.97× at s = 128 and 512, 0.49×
// and 0.56× at 2048 (hd 32, 64), where the panels had left L2 (docs/performance.md).
namespace {
constexpr int64_t kRows = 8;  // rows of a register tile, at most (AVX-512: 8; else 4)
constexpr int64_t kPad = 32;  // panel widths are multiples of this: 2 vectors of the widest ISA
constexpr int kLanes = 16;    // the explicit lanes of the softmax's sums

#define TP_ATTN_INLINE inline __attribute__((always_inline))

TP_ATTN_INLINE int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// W floats in one vector register; unaligned loads and stores through memcpy.
template <int W>
struct Vec {
  typedef float type __attribute__((vector_size(W * sizeof(float))));
};
// (Through references, so that no vector crosses a function boundary by value: the ABI of that
// depends on the target.)
template <typename V>
TP_ATTN_INLINE void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
template <typename V>
TP_ATTN_INLINE void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// acc += x · b, lane by lane: one fused multiply-add (one rounding) where the variant has FMA
// (W > 4: the AVX2 + FMA and AVX-512 targets, where GCC turns the fmaf lanes into one vfmadd),
// else a product and a sum (the baseline, SSE2). Written out because the Makefile compiles the
// CPU backend with -ffp-contract=off (for the cloned elementwise loops, kernel_util.h), which
// kept a · b + c two instructions and two roundings here too.
template <int W, typename V>
TP_ATTN_INLINE void multiply_add(V& acc, float x, const V& b) {
  if constexpr (W > 4) {
    for (int l = 0; l < W; ++l) acc[l] = __builtin_fmaf(x, b[l], acc[l]);
  } else {
    acc += x * b;
  }
}

// The register tile: for r < kRows and c < H·W (H = 2 vectors a row, or 1 for a last half),
//   c[r·ldc + c] (+)= alpha · Σ_{e<k} a(r, e) · b[e·ldb + c],   a(r, e) = a[r·ar + e·ae],
// the sum in increasing e (add: c + alpha·sum; else alpha·sum). a is read at kRows rows and b at
// H·W columns: the caller's panels are padded so that both exist.
template <int W, int R, int H = 2>
TP_ATTN_INLINE void tile(float* c, int64_t ldc, const float* a, int64_t ar, int64_t ae,
                         const float* b, int64_t ldb, int64_t k, float alpha, bool add) {
  static_assert(R <= kRows && kPad % R == 0 && kPad % (2 * W) == 0 && (H == 1 || H == 2),
                "a tile's rows and columns divide the panels' padding");
  using V = typename Vec<W>::type;
  V acc[R][H];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < H; ++h) acc[r][h] = V{};
  for (int64_t e = 0; e < k; ++e) {
    const float* be = b + e * ldb;
    V bv[H];
    for (int h = 0; h < H; ++h) load(bv[h], be + h * W);
    const float* ak = a + e * ae;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float x = ak[r * ar];
      for (int h = 0; h < H; ++h) multiply_add<W>(acc[r][h], x, bv[h]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < H; ++h) {
      float* cp = c + r * ldc + h * W;
      V x = alpha * acc[r][h];
      if (add) {
        V old;
        load(old, cp);
        x = old + x;
      }
      store(cp, x);
    }
}

// c (kRows, n) = alpha · a (kRows, k) b (k, n), the tile over column blocks of 2W, a last block of
// at most W columns by a one-vector tile (AVX-512: n a multiple of kLanes = W need not be of 2W);
// n ≤ the padded width of b and c, k as in tile. Which columns share a tile changes no element's
// sum.
template <int W, int R>
TP_ATTN_INLINE void tile_row(float* c, int64_t ldc, const float* a, int64_t ar, int64_t ae,
                             const float* b, int64_t ldb, int64_t k, int64_t n, float alpha,
                             bool add) {
  for (int64_t c0 = 0; c0 < n; c0 += 2 * W) {
    if (n - c0 <= W)
      tile<W, R, 1>(c + c0, ldc, a, ar, ae, b + c0, ldb, k, alpha, add);
    else
      tile<W, R, 2>(c + c0, ldc, a, ar, ae, b + c0, ldb, k, alpha, add);
  }
}

// dst (rows, cols) row stride ldd = src (rows, cols) row stride lds, W floats a step (inline:
// a call to memmove per row of 32 floats cost more than the copy); and the transpose,
// dst[c·ldd + r] = src[r·lds + c].
template <int W>
TP_ATTN_INLINE void copy_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                              int64_t cols) {
  using V = typename Vec<W>::type;
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    float* d = dst + r * ldd;
    int64_t c = 0;
    for (; c + W <= cols; c += W) {
      V x;
      load(x, s + c);
      store(d + c, x);
    }
    for (; c < cols; ++c) d[c] = s[c];
  }
}
typedef float F8 __attribute__((vector_size(8 * sizeof(float))));

// An 8 × 8 block in registers, dst[c·ldd + r] = src[r·lds + c] for r, c < 8: three rounds of
// shuffles (pairs of rows interleaved, then pairs of pairs, then the halves), 8 vector loads and
// 8 vector stores where the scalar loop stored 64 floats one by one.
TP_ATTN_INLINE void transpose8(float* dst, int64_t ldd, const float* src, int64_t lds) {
  F8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) load(r[i], src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int j = 0; j < 2; ++j) {
      u[i + 2 * j] = __builtin_shufflevector(t[i + j], t[i + j + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * j + 1] =
          __builtin_shufflevector(t[i + j], t[i + j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int i = 0; i < 4; ++i) {
    const F8 lo = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const F8 hi = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    store(dst + i * ldd, lo);
    store(dst + (i + 4) * ldd, hi);
  }
}

// By 8 × 8 blocks (transpose8), the edges scalar.
TP_ATTN_INLINE void copy_transposed(float* dst, int64_t ldd, const float* src, int64_t lds,
                                    int64_t rows, int64_t cols) {
  const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int64_t r0 = 0; r0 < rows8; r0 += 8)
    for (int64_t c0 = 0; c0 < cols8; c0 += 8)
      transpose8(dst + c0 * ldd + r0, ldd, src + r0 * lds + c0, lds);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < rows8 ? cols8 : 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// x[0, n) = 0, W floats a step.
template <int W>
TP_ATTN_INLINE void zero(float* x, int64_t n) {
  const typename Vec<W>::type z = {};
  int64_t c = 0;
  for (; c + W <= n; c += W) store(x + c, z);
  for (; c < n; ++c) x[c] = 0.0f;
}

// The softmax's chunks: kLanes floats, as one vector type whatever the machine's width (the
// compiler splits it into 1, 2 or 4 registers), so the lanes, and the order of the sums in
// them, are the same on every machine.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
typedef float HalfLanes __attribute__((vector_size(kLanes / 2 * sizeof(float))));
typedef double LaneSums __attribute__((vector_size(kLanes / 2 * sizeof(double))));
typedef float F4 __attribute__((vector_size(4 * sizeof(float))));
typedef float F2 __attribute__((vector_size(2 * sizeof(float))));
typedef double D4 __attribute__((vector_size(4 * sizeof(double))));
typedef double D2 __attribute__((vector_size(2 * sizeof(double))));

// acc += x in double: lanes 0..7 into acc[0], 8..15 into acc[1].
TP_ATTN_INLINE void add_lanes(LaneSums* acc, const Lanes& x) {
  const HalfLanes lo = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7);
  const HalfLanes hi = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  acc[0] += __builtin_convertvector(lo, LaneSums);
  acc[1] += __builtin_convertvector(hi, LaneSums);
}

// Σ of the kLanes double lanes in a fixed tree, by halves in vector registers (a scalar chain
// was a tenth of a row's time): lane l of acc[0] + lane l of acc[1], then lanes l and l + 4,
// l and l + 2, 0 and 1.
TP_ATTN_INLINE double lane_sum(const LaneSums* acc) {
  const LaneSums d8 = acc[0] + acc[1];
  const D4 d4 =
      __builtin_shufflevector(d8, d8, 0, 1, 2, 3) + __builtin_shufflevector(d8, d8, 4, 5, 6, 7);
  const D2 d2 = __builtin_shufflevector(d4, d4, 0, 1) + __builtin_shufflevector(d4, d4, 2, 3);
  return d2[0] + d2[1];
}

// max_l m[l] by halves as in lane_sum (max is exact: any order gives the same value, but ±0).
TP_ATTN_INLINE float lane_max(const Lanes& m) {
  const HalfLanes lo = __builtin_shufflevector(m, m, 0, 1, 2, 3, 4, 5, 6, 7);
  const HalfLanes hi = __builtin_shufflevector(m, m, 8, 9, 10, 11, 12, 13, 14, 15);
  const HalfLanes m8 = hi > lo ? hi : lo;
  const F4 a4 = __builtin_shufflevector(m8, m8, 0, 1, 2, 3),
           b4 = __builtin_shufflevector(m8, m8, 4, 5, 6, 7);
  const F4 m4 = b4 > a4 ? b4 : a4;
  const F2 a2 = __builtin_shufflevector(m4, m4, 0, 1), b2 = __builtin_shufflevector(m4, m4, 2, 3);
  const F2 m2 = b2 > a2 ? b2 : a2;
  return m2[1] > m2[0] ? m2[1] : m2[0];
}

// One row of causal softmax in place: row[t] = e^(row[t] − m) / Σ_{u<n} e^(row[u] − m) for
// t < n, m = max_{t<n} row[t]; row[t] = 0 for n ≤ t < len (len ≥ n rounded up to kLanes).
// Returns the row's log-sum-exp, m + log Σ (the sum in double, rounded to f32 once at the end).
// By whole chunks of kLanes elements; in the last one the lanes past n are set to −inf in
// registers for the max and their e^x to 0 (what e^(−inf − m) gives), so there is no scalar tail
// (and no scalar stores for a vector load to wait on). e^x and its sum in one pass; the sum in
// double, element t in lane t mod kLanes. A NaN is never the max (x > m is false), as with
// std::max(m, x).
template <int W>
TP_ATTN_INLINE float causal_softmax_row(float* row, int64_t n, int64_t len) {
  const int64_t nc = round_up(n, kLanes), last = nc - kLanes;
  Lanes lane = {};
  for (int l = 0; l < kLanes; ++l) lane[l] = static_cast<float>(l);
  const auto live = lane < static_cast<float>(n - last);  // the last chunk's lanes t < n
  Lanes m = -INFINITY + Lanes{}, x;
  for (int64_t t = 0; t < last; t += kLanes) {
    load(x, row + t);
    m = x > m ? x : m;
  }
  load(x, row + last);
  x = live ? x : -INFINITY + Lanes{};
  m = x > m ? x : m;
  const float maxv = lane_max(m);
  LaneSums sum[2] = {};
  for (int64_t t = 0; t < nc; t += kLanes) {
    load(x, row + t);
    Lanes e;
    for (int l = 0; l < kLanes; ++l) e[l] = cpu::exp_small(cpu::clamp_abs(x[l] - maxv, 88.0f));
    if (t == last) e = live ? e : Lanes{};
    store(row + t, e);
    add_lanes(sum, e);
  }
  const double total = lane_sum(sum);
  const float inv = static_cast<float>(1.0 / total);
  for (int64_t t = 0; t < nc; t += kLanes) {
    load(x, row + t);
    store(row + t, x * inv);
  }
  zero<W>(row + nc, len - nc);
  return static_cast<float>(maxv + std::log(total));
}

// One row of P recomputed from its scores and the forward's log-sum-exp, in place:
// row[t] = e^(row[t] − lse) for t < n, 0 for n ≤ t < len (by whole chunks of kLanes, the last
// one's lanes past n set to 0, as causal_softmax_row does; len ≥ n rounded up to kLanes).
template <int W>
TP_ATTN_INLINE void probs_from_lse_row(float* row, int64_t n, int64_t len, float lse) {
  const int64_t nc = round_up(n, kLanes), last = nc - kLanes;
  Lanes lane = {};
  for (int l = 0; l < kLanes; ++l) lane[l] = static_cast<float>(l);
  const auto live = lane < static_cast<float>(n - last);
  for (int64_t t = 0; t < nc; t += kLanes) {
    Lanes x, e;
    load(x, row + t);
    for (int l = 0; l < kLanes; ++l) e[l] = cpu::exp_small(cpu::clamp_abs(x[l] - lse, 88.0f));
    if (t == last) e = live ? e : Lanes{};
    store(row + t, e);
  }
  zero<W>(row + nc, len - nc);
}

// One row of the softmax backward in place: ds[t] = p[t] (dp[t] − d) for t < n, with d the row's
// Σ_u p[u] dp[u], which backward takes from the forward's output (d = Σ_e dout[e]·out[e], the same
// sum: attention_backward in core/device.h); ds holds dp on entry, finite up to n rounded up to
// kLanes, where p is 0; ds[t] = 0 for n ≤ t < len.
template <int W>
TP_ATTN_INLINE void softmax_backward_row(float* ds, const float* p, int64_t n, int64_t len,
                                         float pdp) {
  const int64_t nc = round_up(n, kLanes);
  for (int64_t t = 0; t < nc; t += kLanes) {
    Lanes x, pt;
    load(x, ds + t);
    load(pt, p + t);
    store(ds + t, pt * (x - pdp));
  }
  std::fill(ds + n, ds + nc, 0.0f);  // p (dp − Σ) is ±0 there: +0 as before
  zero<W>(ds + nc, len - nc);
}

// The sizes of one call, and the per-thread panels (zero-initialised once; the operands' padding
// is never written, so it stays zero for every pair of the call).
struct Dims {
  int64_t n, keys, past, hd;  // queries, keys, query i's key position past + i, head dim
  int64_t nr, kr, hdp;        // n, keys and hd rounded up to kPad
  Dims(int64_t n_, int64_t keys_, int64_t past_, int64_t hd_)
      : n(n_),
        keys(keys_),
        past(past_),
        hd(hd_),
        nr(round_up(n_, kPad)),
        kr(round_up(keys_, kPad)),
        hdp(round_up(hd_, kPad)) {}
  // The keys query row i reads: [0, visible(i)).
  int64_t visible(int64_t i) const { return std::min(keys, past + i + 1); }
};

// Forward panels: Q (nr, hdp), Kᵀ (hd, kr), V (kr, hdp), the score rows (kRows, kr), the output
// rows (kRows, hdp).
int64_t forward_floats(const Dims& d) {
  return d.nr * d.hdp + d.hd * d.kr + d.kr * d.hdp + kRows * d.kr + kRows * d.hdp;
}

// One (b, j) pair: query row i (position past + i) attends to keys t ≤ past + i, t < keys.
// q, out: (n, hd) row stride ldq; k, v: (keys, hd) row stride ldk; lse (n) or null.
template <int W, int R>
TP_ATTN_INLINE void attend_pair(float* out, float* lse, const float* q, int64_t ldq, const float* k,
                                const float* v, int64_t ldk, float scale, const Dims& d,
                                float* ws) {
  float* qp = ws;                 // (nr, hdp)
  float* kt = qp + d.nr * d.hdp;  // (hd, kr)
  float* vp = kt + d.hd * d.kr;   // (kr, hdp)
  float* sc = vp + d.kr * d.hdp;  // (kRows, kr)
  float* ob = sc + kRows * d.kr;  // (kRows, hdp)
  copy_rows<W>(qp, d.hdp, q, ldq, d.n, d.hd);
  copy_transposed(kt, d.kr, k, ldk, d.keys, d.hd);
  copy_rows<W>(vp, d.hdp, v, ldk, d.keys, d.hd);
  for (int64_t i0 = 0; i0 < d.n; i0 += R) {
    const int64_t rows = std::min<int64_t>(R, d.n - i0);
    const int64_t keys = d.visible(i0 + rows - 1);  // the tile's rows read keys [0, keys)
    const int64_t cols = round_up(keys, kLanes);    // what the softmax rows read
    // scores = scale · Q[i0:i0+R] Kᵀ[:, :keys], the softmax of each row (its log-sum-exp kept),
    // out = P V[:keys]; the R score rows pass through L1 and are never stored
    tile_row<W, R>(sc, d.kr, qp + i0 * d.hdp, d.hdp, 1, kt, d.kr, d.hd, cols, scale, false);
    for (int64_t r = 0; r < rows; ++r) {
      const float l = causal_softmax_row<W>(sc + r * d.kr, d.visible(i0 + r), cols);
      if (lse) lse[i0 + r] = l;
    }
    tile_row<W, R>(ob, d.hdp, sc, d.kr, 1, vp, d.hdp, keys, d.hd, 1.0f, false);
    copy_rows<W>(out + i0 * ldq, ldq, ob, d.hdp, rows, d.hd);
  }
}

// The backward's blocks: kKeyBlock keys at a time (the outer loop), and within one, kQueryBlock
// queries at a time, whose P and dS rows are recomputed into a (kQueryBlock, kKeyBlock) panel
// and used at once. Both multiples of kPad and fixed for every variant: the order of the dk and dv
// sums (one running sum per query block) does not depend on the tile's R or W. (Key blocks of 32,
// 64 and 128 with query blocks of 64, 128 and 256 measured within noise of one another.)
constexpr int64_t kKeyBlock = 64;
constexpr int64_t kQueryBlock = 128;
static_assert(kKeyBlock % kPad == 0 && kQueryBlock % kPad == 0, "blocks of whole panel columns");

// Backward panels: K (kr, hdp), Kᵀ and Vᵀ (hd, kr), Q, dout and the dq sums (nr, hdp), the dk and
// dv sums (kr, hdp), P and dS of one block pair (qb, kKeyBlock), the row sums D (nr). No n × keys
// term: at (S, hd) = (2048, 64) 1.07 M floats (4.1 MiB) per thread, where the P and dS panels of
// n × keys made it 9.3 M (35.5 MiB).
int64_t backward_query_rows(const Dims& d) { return std::min(d.nr, kQueryBlock); }
int64_t backward_floats(const Dims& d) {
  return 3 * d.kr * d.hdp + 2 * d.hd * d.kr + 3 * d.nr * d.hdp +
         2 * backward_query_rows(d) * kKeyBlock + d.nr;
}

// The backward's per-thread panels, laid out in backward_floats' workspace.
struct BackwardPanels {
  float *kp, *kt, *vt, *qp, *dop, *dqb, *dkb, *dvb, *pb, *ds, *rs;
  BackwardPanels(float* ws, const Dims& d) {
    kp = ws;                                       // K (kr, hdp)
    kt = kp + d.kr * d.hdp;                        // Kᵀ (hd, kr)
    vt = kt + d.hd * d.kr;                         // Vᵀ (hd, kr)
    qp = vt + d.hd * d.kr;                         // Q (nr, hdp)
    dop = qp + d.nr * d.hdp;                       // dout (nr, hdp)
    dqb = dop + d.nr * d.hdp;                      // the dq sums (nr, hdp)
    dkb = dqb + d.nr * d.hdp;                      // the dk sums (kr, hdp)
    dvb = dkb + d.kr * d.hdp;                      // the dv sums (kr, hdp)
    pb = dvb + d.kr * d.hdp;                       // P (qb, kKeyBlock)
    ds = pb + backward_query_rows(d) * kKeyBlock;  // dS (qb, kKeyBlock)
    rs = ds + backward_query_rows(d) * kKeyBlock;  // D (nr)
  }
};

// One query head's share of key block [k0, k0 + kKeyBlock) ∩ [0, keys): for each query block
// [q0, q1) that sees the block, each R-row query tile in it that sees key k0 recomputes its P and
// dS rows (scores = scale · Q Kᵀ, P = e^(x − lse), dP = dout Vᵀ, dS = P ⊙ (dP − D)) and adds
// scale · dS K_block to its dq rows; then each R-key tile of the block (+)= scale · dSᵀ Q and
// Pᵀ dout over the block's queries from the first that sees it. first: this head is the group's
// first (dk, dv written rather than added at the first query block).
template <int W, int R>
TP_ATTN_INLINE void backward_key_block(const BackwardPanels& p, int64_t k0, const float* lse,
                                       bool first, float scale, const Dims& d) {
  const int64_t n = d.n, kr = d.kr, hdp = d.hdp, kend = std::min(d.keys, k0 + kKeyBlock);
  const int64_t sfirst = std::max<int64_t>(0, k0 - d.past);  // the first query that sees k0
  if (sfirst >= n) {  // no query sees the block: its dk, dv are sums of nothing
    if (first)
      for (int64_t t = k0; t < kend; ++t) {
        zero<W>(p.dkb + t * hdp, hdp);
        zero<W>(p.dvb + t * hdp, hdp);
      }
    return;
  }
  const int64_t qstart = sfirst / kQueryBlock * kQueryBlock;
  for (int64_t q0 = qstart; q0 < n; q0 += kQueryBlock) {
    const int64_t q1 = std::min(n, q0 + kQueryBlock);
    for (int64_t s0 = std::max(q0, sfirst / R * R); s0 < q1; s0 += R) {
      const int64_t rows = std::min<int64_t>(R, q1 - s0);
      // the tile reads keys [k0, k0 + seen)
      const int64_t seen = std::min(d.visible(s0 + rows - 1), kend) - k0;
      const int64_t cols = round_up(seen, kLanes);  // what the softmax rows read
      float* pr = p.pb + (s0 - q0) * kKeyBlock;
      float* dr = p.ds + (s0 - q0) * kKeyBlock;
      tile_row<W, R>(pr, kKeyBlock, p.qp + s0 * hdp, hdp, 1, p.kt + k0, kr, d.hd, cols, scale,
                     false);
      tile_row<W, R>(dr, kKeyBlock, p.dop + s0 * hdp, hdp, 1, p.vt + k0, kr, d.hd, cols, 1.0f,
                     false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t sr = std::min(std::max<int64_t>(0, d.visible(s0 + r) - k0), kKeyBlock);
        probs_from_lse_row<W>(pr + r * kKeyBlock, sr, kKeyBlock, lse[s0 + r]);
        softmax_backward_row<W>(dr + r * kKeyBlock, pr + r * kKeyBlock, sr, kKeyBlock,
                                p.rs[s0 + r]);
      }
      // dq rows (+)= scale · dS K[k0:k0+seen]: written at the first key block (every query sees
      // key 0), added after
      tile_row<W, R>(p.dqb + s0 * hdp, hdp, dr, kKeyBlock, 1, p.kp + k0 * hdp, hdp, seen, d.hd,
                     scale, k0 > 0);
    }
    const bool add = !(first && q0 == qstart);
    for (int64_t t0 = k0; t0 < kend; t0 += R) {
      const int64_t s1 = std::min(q1, std::max(q0, t0 - d.past));  // leading rows: zeros
      const float* da = p.ds + (s1 - q0) * kKeyBlock + (t0 - k0);
      const float* pa = p.pb + (s1 - q0) * kKeyBlock + (t0 - k0);
      tile_row<W, R>(p.dkb + t0 * hdp, hdp, da, 1, kKeyBlock, p.qp + s1 * hdp, hdp, q1 - s1, d.hd,
                     scale, add);
      tile_row<W, R>(p.dvb + t0 * hdp, hdp, pa, 1, kKeyBlock, p.dop + s1 * hdp, hdp, q1 - s1, d.hd,
                     1.0f, add);
    }
  }
}

// One (b, g) pair: its query heads j0 .. j0 + group − 1 in order, their dk, dv summed.
// dq, dout, q, out: head j's (n, hd) at + (j − j0)·hd, row stride ldq; k, v, dk, dv: (keys, hd)
// row stride ldk; lse: head j's (n) at + (j − j0)·n. Query row s reads keys [0, d.visible(s)).
// Per head: the key blocks in order (backward_key_block), dq summed over them in the dq panel.
template <int W, int R>
TP_ATTN_INLINE void backward_group(float* dq, float* dk, float* dv, const float* dout,
                                   const float* q, const float* k, const float* v, const float* out,
                                   const float* lse, int64_t ldq, int64_t ldk, int64_t group,
                                   float scale, const Dims& d, float* ws) {
  const int64_t S = d.n, K = d.keys, hdp = d.hdp;
  const BackwardPanels p(ws, d);
  copy_rows<W>(p.kp, hdp, k, ldk, K, d.hd);
  copy_transposed(p.kt, d.kr, k, ldk, K, d.hd);
  copy_transposed(p.vt, d.kr, v, ldk, K, d.hd);
  for (int64_t jj = 0; jj < group; ++jj) {
    const float* oj = out + jj * d.hd;
    const float* dj = dout + jj * d.hd;
    copy_rows<W>(p.qp, hdp, q + jj * d.hd, ldq, S, d.hd);
    copy_rows<W>(p.dop, hdp, dj, ldq, S, d.hd);
    for (int64_t s = 0; s < S; ++s) {  // D[s] = Σ_e dout ⊙ out, in increasing e, in double
      double dsum = 0.0;
      for (int64_t e = 0; e < d.hd; ++e)
        dsum += static_cast<double>(dj[s * ldq + e]) * oj[s * ldq + e];
      p.rs[s] = static_cast<float>(dsum);
    }
    for (int64_t k0 = 0; k0 < K; k0 += kKeyBlock)
      backward_key_block<W, R>(p, k0, lse + jj * S, jj == 0, scale, d);
    copy_rows<W>(dq + jj * d.hd, ldq, p.dqb, hdp, S, d.hd);
  }
  copy_rows<W>(dk, ldk, p.dkb, hdp, K, d.hd);
  copy_rows<W>(dv, ldk, p.dvb, hdp, K, d.hd);
}

// The instruction sets: AVX-512 (16 floats a vector), AVX2 with FMA (8), the build's baseline
// (x86-64: SSE2, 4). Each wrapper compiles the always-inline templates above for its target and
// the choice is made once, from the CPU (GCC and Clang on x86-64; elsewhere the baseline alone,
// 4-float vectors that the compiler maps to the machine's).
struct Kernels {
  void (*attend)(float*, float*, const float*, int64_t, const float*, const float*, int64_t, float,
                 const Dims&, float*);
  void (*backward)(float*, float*, float*, const float*, const float*, const float*, const float*,
                   const float*, const float*, int64_t, int64_t, int64_t, float, const Dims&,
                   float*);
};

#define TP_ATTN_KERNELS(SUFFIX, TARGET, W, R)                                                      \
  TARGET void attend_##SUFFIX(float* out, float* lse, const float* q, int64_t ldq, const float* k, \
                              const float* v, int64_t ldk, float scale, const Dims& d,             \
                              float* ws) {                                                         \
    attend_pair<W, R>(out, lse, q, ldq, k, v, ldk, scale, d, ws);                                  \
  }                                                                                                \
  TARGET void backward_##SUFFIX(float* dq, float* dk, float* dv, const float* dout,                \
                                const float* q, const float* k, const float* v, const float* out,  \
                                const float* lse, int64_t ldq, int64_t ldk, int64_t group,         \
                                float scale, const Dims& d, float* ws) {                           \
    backward_group<W, R>(dq, dk, dv, dout, q, k, v, out, lse, ldq, ldk, group, scale, d, ws);      \
  }

TP_ATTN_KERNELS(base, , 4, 4)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TP_NO_CPU_CLONES)
TP_ATTN_KERNELS(avx2, __attribute__((target("avx2,fma"))), 8, 4)
TP_ATTN_KERNELS(avx512, __attribute__((target("avx512f"))), 16, 8)
#endif

struct Variant {
  const char* name;
  Kernels kernels;
};

// The variants this CPU runs, fastest first.
const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = [] {
    std::vector<Variant> r;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TP_NO_CPU_CLONES)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
      r.push_back({"avx512", {attend_avx512, backward_avx512}});
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      r.push_back({"avx2", {attend_avx2, backward_avx2}});
#endif
    r.push_back({"base", {attend_base, backward_base}});
    return r;
  }();
  return v;
}

const Kernels* g_kernels = nullptr;  // set_attention_isa's choice; null: the first variant

const Kernels& kernels() { return g_kernels ? *g_kernels : variants().front().kernels; }
}  // namespace

namespace cpu {
std::vector<std::string> attention_isas() {
  std::vector<std::string> r;
  for (const Variant& v : variants()) r.push_back(v.name);
  return r;
}

void set_attention_isa(const std::string& isa) {
  for (const Variant& v : variants())
    if (isa == v.name) {
      g_kernels = &v.kernels;
      return;
    }
  std::string known;
  for (const Variant& v : variants()) known += std::string(known.empty() ? "" : ", ") + v.name;
  TP_CHECK(false, "attention ISA '", isa, "' is not one this CPU runs (", known, ")");
}
}  // namespace cpu

void CpuDevice::do_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, hd = sh.head_dim;
  const int64_t group = nh / sh.kv_heads;
  const int64_t qc = nh * hd, kc = sh.kv_heads * hd;  // row lengths of q/out and k/v
  const int64_t ldq = B * qc, ldk = B * kc;           // row strides of a head's (S, hd) block
  const float* pq = q.data();
  const float* pk = k.data();
  const float* pv = v.data();
  float* pout = out.data();
  float* pl = lse.data();
  const Dims d(S, sh.keys(), sh.past, hd);
  const Kernels& kern = kernels();
#pragma omp parallel
  {
    std::vector<float> ws(static_cast<size_t>(forward_floats(d)));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < nh; ++j) {
        const int64_t g = j / group;
        kern.attend(pout + b * qc + j * hd, pl + (b * nh + j) * S, pq + b * qc + j * hd, ldq,
                    pk + b * kc + g * hd, pv + b * kc + g * hd, ldk, sh.scale, d, ws.data());
      }
  }
}

// Attention over a key/value cache: the n new query positions [past, past + n) of every (b, j)
// read keys [0, past + n); query i attends to t ≤ past + i. The forward's pair routine with the
// positions offset by past, and no log-sum-exp kept (nothing is kept for a backward).
void CpuDevice::do_attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                            const Tensor& v, int64_t past,
                                            const AttentionShape& sh) {
  const int64_t n = sh.seq, B = sh.batch, nh = sh.heads, hd = sh.head_dim;
  const int64_t group = nh / sh.kv_heads;
  const int64_t qc = nh * hd, kc = sh.kv_heads * hd;
  const int64_t ldq = B * qc, ldk = B * kc;
  const float* pq = q.data();
  const float* pk = k.data();
  const float* pv = v.data();
  float* pout = out.data();
  const Dims d(n, past + n, past, hd);
  const Kernels& kern = kernels();
#pragma omp parallel
  {
    std::vector<float> ws(static_cast<size_t>(forward_floats(d)));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < nh; ++j) {
        const int64_t g = j / group;
        kern.attend(pout + b * qc + j * hd, nullptr, pq + b * qc + j * hd, ldq,
                    pk + b * kc + g * hd, pv + b * kc + g * hd, ldk, sh.scale, d, ws.data());
      }
  }
}

void CpuDevice::do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                      const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& out, const Tensor& lse,
                                      const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const int64_t group = nh / nkv;
  const int64_t qc = nh * hd, kc = nkv * hd;
  const int64_t ldq = B * qc, ldk = B * kc;
  const Dims d(S, sh.keys(), sh.past, hd);
  const Kernels& kern = kernels();
  // One (b, g) pair per iteration, so the group's query heads add into dk_bg, dv_bg on one
  // thread, in order.
#pragma omp parallel
  {
    std::vector<float> ws(static_cast<size_t>(backward_floats(d)));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t g = 0; g < nkv; ++g) {
        const int64_t j0 = g * group, qoff = b * qc + j0 * hd, koff = b * kc + g * hd;
        kern.backward(dq.data() + qoff, dk.data() + koff, dv.data() + koff, dout.data() + qoff,
                      q.data() + qoff, k.data() + koff, v.data() + koff, out.data() + qoff,
                      lse.data() + (b * nh + j0) * S, ldq, ldk, group, sh.scale, d, ws.data());
      }
  }
}

}  // namespace tp
