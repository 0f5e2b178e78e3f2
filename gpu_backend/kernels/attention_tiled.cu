// attention_tiled.cu — causal attention without an S × K tensor in memory, FlashAttention-2's
// split: a forward kernel with the online softmax, a backward in two kernels (dk, dv per key
// tile; dq per query tile), and a small kernel for the rows' D = Σ dout ⊙ out. The math and the
// layouts are core/device.h's; attention.cu says when these run (head dim ≤ 128, every dtype:
// bf16 tensors reach them widened to f32).
//
// Tiles. A block owns kRows = 64 rows — query rows (forward, dq) or key rows (dk, dv) — and
// streams tiles of kCols rows of the other side through shared memory: K and V tiles for the
// forward and dq, Q and dout tiles (with their lse and D) for dk, dv. A row is held by kT =
// kD / 32 consecutive threads (kD: the head dim rounded up to 32, 64 or 128), each with 32 of
// the row's columns in registers (columns c, c + kT, c + 2·kT, …, so the kT threads of a row read
// adjacent words of a shared tile and the rows of a warp read the same ones: no bank conflicts);
// a dot product is 32 products per thread, then an xor-shuffle sum over the row's kT threads.
// kCols = 64 for kD ≤ 64 and 32 for kD = 128, so the two shared tiles are 2·kCols·kD·4 bytes:
// 16 KB (kD 32), 32 KB (kD 64 and 128) per block, under the 48 KB of static shared memory;
// threads per block 64, 128, 256. Registers per thread hold 32 columns of two or three rows
// (q, acc; q, dout, dq; k, v, dk, dv) plus the forward's kCols scores.
//
// Not measured: there is no GPU here, so no timings. What ptxas reports (CUDA 13, sm_90, -O2,
// `nvcc … -Xptxas -v`), registers per thread for kD = 32 / 64 / 128, no spills in any:
//   forward 254 / 168 / 128,  dq 150 / 160 / 158,  dk dv 221 / 227 / 226
// so on an H100 SM (65536 registers, 64 warps, 228 KB of shared memory) the registers, not the
// shared memory, bound the occupancy: 8–16 warps of 64 (the forward 8 / 12 / 16, dq 12 / 12 / 8,
// dk dv 8 / 8 / 8). Capping them (__launch_bounds__ with a minimum of blocks: 128 for the
// forward and dq, about 170 for dk dv) made ptxas spill 60–348 bytes per thread in every kernel
// it had to shrink, so they are not capped. The products are
// scalar FMAs from shared memory, not tensor cores (mma / wgmma would be FlashAttention-2's real
// speed: a later step). The dk, dv grid is B·nkv·⌈K/64⌉ blocks, each looping over its group's
// query heads: few blocks for a small batch and short sequences.
//
// Causal skipping: a query tile [q0, q0 + 64) reads the key tiles below min(K, past + q0 + 64)
// only; a key tile [k0, k0 + 64) reads the queries from max(0, k0 − past) on. Inside a tile the
// mask is per element (query s sees key t iff t ≤ past + s and t < K); a row that sees no key
// gets out = 0 and lse = −inf, as the cuBLAS path gives.
//
// Arithmetic: scores x = scale · (q · k) in f32, the same order of products and sums in the
// forward and in both backward kernels (so the backward's x is the forward's but for where the
// compiler fuses a multiply-add differently; P = e^(x − lse) is within f32 rounding of it); the
// forward's running max m and sum l per row in f32, rescaled by e^(m_old − m_new) per key tile,
// out = acc · (1/l), lse = m + log l. D in f64 over hd (the CPU's order), stored in f32.
// Deterministic: each output element is one thread's running sum in a fixed order (key tiles
// ascending; for dk, dv the group's query heads ascending, then query tiles ascending); the
// shuffle trees are fixed. No atomics.
#include <cmath>
#include <cstdint>

#include "cuda_check.h"
#include "kernels/attention_tiled.cuh"

namespace tp {
namespace gpu {

namespace {

// The sizes a kernel needs (AttentionShape's, with keys() resolved).
struct Dims {
  int64_t S, K, B, nh, nkv, hd, past;
  float scale;
};

constexpr int kRows = 64;    // rows a block owns
constexpr int kPerRow = 32;  // columns a thread holds

template <int kD>
struct Tile {
  static constexpr int kT = kD / kPerRow;           // threads per row
  static constexpr int kCols = kD <= 64 ? 64 : 32;  // rows of a shared tile
  static constexpr int kThreads = kRows * kT;
};

// Sum over the kT threads of a row (consecutive lanes): a fixed xor tree, every lane gets it.
template <int kT>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int off = kT / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// This thread's 32 columns (c, c + kT, …) of a row of hd floats; zeros past hd or for no row.
template <int kT>
__device__ __forceinline__ void load_row(float (&r)[kPerRow], const float* row, int c, int64_t hd) {
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) {
    const int64_t e = static_cast<int64_t>(i) * kT + c;
    r[i] = row != nullptr && e < hd ? row[e] : 0.0f;
  }
}

// Rows [r0, r0 + kCols) of head h of a (rows·B, heads·hd) tensor into a shared tile (kCols, kD),
// zero past `rows` and past hd. Every thread of the block calls it.
template <int kD, int kCols>
__device__ void load_tile(float (*tile)[kD], const float* x, int64_t r0, int64_t rows, int64_t b,
                          int64_t h, int64_t heads, const Dims& d) {
  for (int idx = threadIdx.x; idx < kCols * kD; idx += blockDim.x) {
    const int t = idx / kD, e = idx % kD;
    const int64_t row = r0 + t;
    tile[t][e] = row < rows && e < d.hd ? x[((row * d.B + b) * heads + h) * d.hd + e] : 0.0f;
  }
}

// The dot product of a row held in registers with row t of a shared tile, over the row's threads.
template <int kD>
__device__ __forceinline__ float dot(const float (&r)[kPerRow], const float* trow, int c) {
  constexpr int kT = Tile<kD>::kT;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) s += r[i] * trow[i * kT + c];
  return row_sum<kT>(s);
}

// Forward: one block per (b, j, query tile); grid B·nh·tiles. Row s = q0 + r, threads
// [r·kT, (r + 1)·kT).
template <int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    tiled_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                         Dims d) {
  constexpr int kT = Tile<kD>::kT, kCols = Tile<kD>::kCols;
  __shared__ float ks[kCols][kD];
  __shared__ float vs[kCols][kD];
  const int64_t tiles = (d.S + kRows - 1) / kRows;
  const int64_t tile = blockIdx.x % tiles, bj = blockIdx.x / tiles;
  const int64_t j = bj % d.nh, b = bj / d.nh, g = j / (d.nh / d.nkv);
  const int r = threadIdx.x / kT, c = threadIdx.x % kT;
  const int64_t q0 = tile * kRows, s = q0 + r;
  const bool live = s < d.S;
  const int64_t at = ((s * d.B + b) * d.nh + j) * d.hd;
  float qr[kPerRow], acc[kPerRow];
  load_row<kT>(qr, live ? q + at : nullptr, c, d.hd);
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) acc[i] = 0.0f;
  const int64_t last = (q0 + kRows < d.S ? q0 + kRows : d.S) - 1;  // the tile's last query
  const int64_t kend = d.past + last + 1 < d.K ? d.past + last + 1 : d.K;
  const int64_t lim = live ? (d.past + s + 1 < d.K ? d.past + s + 1 : d.K) : 0;  // keys < lim
  float m = -INFINITY, l = 0.0f;
  for (int64_t k0 = 0; k0 < kend; k0 += kCols) {
    __syncthreads();  // the previous tile's readers are done
    load_tile<kD, kCols>(ks, k, k0, d.K, b, g, d.nkv, d);
    load_tile<kD, kCols>(vs, v, k0, d.K, b, g, d.nkv, d);
    __syncthreads();
    float x[kCols];
    float tmax = -INFINITY;
#pragma unroll
    for (int t = 0; t < kCols; ++t) {
      const float xt = d.scale * dot<kD>(qr, ks[t], c);
      x[t] = k0 + t < lim ? xt : -INFINITY;
      tmax = fmaxf(tmax, x[t]);
    }
    const float mnew = fmaxf(m, tmax);
    if (mnew == -INFINITY) continue;     // nothing visible yet (the same for the row's threads)
    const float alpha = expf(m - mnew);  // 0 on the first visible tile
    l *= alpha;
#pragma unroll
    for (int i = 0; i < kPerRow; ++i) acc[i] *= alpha;
#pragma unroll
    for (int t = 0; t < kCols; ++t) {
      const float p = expf(x[t] - mnew);  // 0 where masked
      l += p;
#pragma unroll
      for (int i = 0; i < kPerRow; ++i) acc[i] += p * vs[t][i * kT + c];
    }
    m = mnew;
  }
  if (!live) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) {
    const int64_t e = static_cast<int64_t>(i) * kT + c;
    if (e < d.hd) out[at + e] = acc[i] * inv;
  }
  if (lse != nullptr && c == 0) lse[bj * d.S + s] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// D[(b, j, s)] = Σ_e dout · out over hd, f64 products and sum in e order; one thread per row.
__global__ void rowsum_kernel(float* D, const float* dout, const float* out, Dims d) {
  const int64_t rows = d.B * d.nh * d.S;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = row % d.S, bj = row / d.S, j = bj % d.nh, b = bj / d.nh;
    const int64_t at = ((s * d.B + b) * d.nh + j) * d.hd;
    double sum = 0.0;
    for (int64_t e = 0; e < d.hd; ++e) sum += static_cast<double>(dout[at + e]) * out[at + e];
    D[row] = static_cast<float>(sum);
  }
}

// dq: one block per (b, j, query tile), looping over the key tiles it sees (as the forward):
// P = e^(x − lse), dP = dout · v, dS = P (dP − D), dq = scale · Σ_t dS k_t.
template <int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    tiled_dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v,
                    const float* lse, const float* D, Dims d) {
  constexpr int kT = Tile<kD>::kT, kCols = Tile<kD>::kCols;
  __shared__ float ks[kCols][kD];
  __shared__ float vs[kCols][kD];
  const int64_t tiles = (d.S + kRows - 1) / kRows;
  const int64_t tile = blockIdx.x % tiles, bj = blockIdx.x / tiles;
  const int64_t j = bj % d.nh, b = bj / d.nh, g = j / (d.nh / d.nkv);
  const int r = threadIdx.x / kT, c = threadIdx.x % kT;
  const int64_t q0 = tile * kRows, s = q0 + r;
  const bool live = s < d.S;
  const int64_t at = ((s * d.B + b) * d.nh + j) * d.hd;
  float qr[kPerRow], dor[kPerRow], acc[kPerRow];
  load_row<kT>(qr, live ? q + at : nullptr, c, d.hd);
  load_row<kT>(dor, live ? dout + at : nullptr, c, d.hd);
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) acc[i] = 0.0f;
  const float L = live ? lse[bj * d.S + s] : 0.0f, Dr = live ? D[bj * d.S + s] : 0.0f;
  const int64_t last = (q0 + kRows < d.S ? q0 + kRows : d.S) - 1;
  const int64_t kend = d.past + last + 1 < d.K ? d.past + last + 1 : d.K;
  const int64_t lim = live ? (d.past + s + 1 < d.K ? d.past + s + 1 : d.K) : 0;
  for (int64_t k0 = 0; k0 < kend; k0 += kCols) {
    __syncthreads();
    load_tile<kD, kCols>(ks, k, k0, d.K, b, g, d.nkv, d);
    load_tile<kD, kCols>(vs, v, k0, d.K, b, g, d.nkv, d);
    __syncthreads();
    for (int t = 0; t < kCols; ++t) {
      const float x = d.scale * dot<kD>(qr, ks[t], c);
      const float dp = dot<kD>(dor, vs[t], c);
      const float p = k0 + t < lim ? expf(x - L) : 0.0f;
      const float ds = p * (dp - Dr);
#pragma unroll
      for (int i = 0; i < kPerRow; ++i) acc[i] += ds * ks[t][i * kT + c];
    }
  }
  if (!live) return;
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) {
    const int64_t e = static_cast<int64_t>(i) * kT + c;
    if (e < d.hd) dq[at + e] = d.scale * acc[i];
  }
}

// dk, dv: one block per (b, kv head g, key tile); key t = k0 + r held by threads
// [r·kT, (r + 1)·kT) with its k, v, dk, dv columns in registers. Loops over the group's query
// heads, then the query tiles from the first query that sees the key tile, each (Q, dout, lse,
// D) tile in shared memory: dv_t += P dout_s, dk_t += dS q_s; dk scaled once at the end.
template <int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    tiled_dkdv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k,
                      const float* v, const float* lse, const float* D, Dims d) {
  constexpr int kT = Tile<kD>::kT, kCols = Tile<kD>::kCols;
  __shared__ float qs[kCols][kD];
  __shared__ float dos[kCols][kD];
  __shared__ float ls[kCols];
  __shared__ float Ds[kCols];
  const int64_t tiles = (d.K + kRows - 1) / kRows;
  const int64_t tile = blockIdx.x % tiles, bg = blockIdx.x / tiles;
  const int64_t g = bg % d.nkv, b = bg / d.nkv, group = d.nh / d.nkv;
  const int r = threadIdx.x / kT, c = threadIdx.x % kT;
  const int64_t k0 = tile * kRows, t = k0 + r;
  const bool live = t < d.K;
  const int64_t at = ((t * d.B + b) * d.nkv + g) * d.hd;
  float kr[kPerRow], vr[kPerRow], dkr[kPerRow], dvr[kPerRow];
  load_row<kT>(kr, live ? k + at : nullptr, c, d.hd);
  load_row<kT>(vr, live ? v + at : nullptr, c, d.hd);
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) dkr[i] = dvr[i] = 0.0f;
  const int64_t qbeg = k0 - d.past > 0 ? k0 - d.past : 0;  // the first query seeing the tile
  for (int64_t h = 0; h < group; ++h) {
    const int64_t j = g * group + h;
    for (int64_t s0 = qbeg; s0 < d.S; s0 += kCols) {
      __syncthreads();
      load_tile<kD, kCols>(qs, q, s0, d.S, b, j, d.nh, d);
      load_tile<kD, kCols>(dos, dout, s0, d.S, b, j, d.nh, d);
      for (int i = threadIdx.x; i < kCols; i += blockDim.x) {
        const bool in = s0 + i < d.S;
        ls[i] = in ? lse[(b * d.nh + j) * d.S + s0 + i] : 0.0f;
        Ds[i] = in ? D[(b * d.nh + j) * d.S + s0 + i] : 0.0f;
      }
      __syncthreads();
      for (int i = 0; i < kCols; ++i) {
        const int64_t s = s0 + i;
        const float x = d.scale * dot<kD>(kr, qs[i], c);
        const float dp = dot<kD>(vr, dos[i], c);
        const bool seen = live && s < d.S && t <= d.past + s;
        const float p = seen ? expf(x - ls[i]) : 0.0f;
        const float ds = p * (dp - Ds[i]);
#pragma unroll
        for (int e = 0; e < kPerRow; ++e) {
          dvr[e] += p * dos[i][e * kT + c];
          dkr[e] += ds * qs[i][e * kT + c];
        }
      }
    }
  }
  if (!live) return;
#pragma unroll
  for (int i = 0; i < kPerRow; ++i) {
    const int64_t e = static_cast<int64_t>(i) * kT + c;
    if (e < d.hd) {
      dk[at + e] = d.scale * dkr[i];
      dv[at + e] = dvr[i];
    }
  }
}

Dims dims_of(const AttentionShape& sh) {
  return Dims{sh.seq, sh.keys(), sh.batch, sh.heads, sh.kv_heads, sh.head_dim, sh.past, sh.scale};
}

unsigned int blocks_for(int64_t pairs, int64_t rows) {
  return static_cast<unsigned int>(pairs * ((rows + kRows - 1) / kRows));
}

template <int kD>
void forward(cudaStream_t stream, float* out, float* lse, const float* q, const float* k,
             const float* v, const Dims& d) {
  tiled_forward_kernel<kD>
      <<<blocks_for(d.B * d.nh, d.S), Tile<kD>::kThreads, 0, stream>>>(out, lse, q, k, v, d);
  CUDA_CHECK_LAUNCH();
}

template <int kD>
void backward(cudaStream_t stream, float* dq, float* dk, float* dv, const float* dout,
              const float* q, const float* k, const float* v, const float* lse, const float* D,
              const Dims& d) {
  tiled_dq_kernel<kD><<<blocks_for(d.B * d.nh, d.S), Tile<kD>::kThreads, 0, stream>>>(
      dq, dout, q, k, v, lse, D, d);
  CUDA_CHECK_LAUNCH();
  if (d.K == 0) return;
  tiled_dkdv_kernel<kD><<<blocks_for(d.B * d.nkv, d.K), Tile<kD>::kThreads, 0, stream>>>(
      dk, dv, dout, q, k, v, lse, D, d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void tiled_attention_forward(cudaStream_t stream, float* out, float* lse, const float* q,
                             const float* k, const float* v, const AttentionShape& sh) {
  const Dims d = dims_of(sh);
  if (d.S == 0 || d.B == 0 || d.nh == 0) return;
  if (d.hd <= 32)
    forward<32>(stream, out, lse, q, k, v, d);
  else if (d.hd <= 64)
    forward<64>(stream, out, lse, q, k, v, d);
  else
    forward<128>(stream, out, lse, q, k, v, d);
}

void tiled_attention_backward(cudaStream_t stream, float* dq, float* dk, float* dv,
                              const float* dout, const float* q, const float* k, const float* v,
                              const float* out, const float* lse, float* rowsum,
                              const AttentionShape& sh) {
  const Dims d = dims_of(sh);
  if (d.S == 0 || d.B == 0 || d.nh == 0) return;
  const int64_t rows = d.B * d.nh * d.S;
  const unsigned int blocks =
      static_cast<unsigned int>(rows / 256 + 1 < 4096 ? rows / 256 + 1 : 4096);
  rowsum_kernel<<<blocks, 256, 0, stream>>>(rowsum, dout, out, d);
  CUDA_CHECK_LAUNCH();
  if (d.hd <= 32)
    backward<32>(stream, dq, dk, dv, dout, q, k, v, lse, rowsum, d);
  else if (d.hd <= 64)
    backward<64>(stream, dq, dk, dv, dout, q, k, v, lse, rowsum, d);
  else
    backward<128>(stream, dq, dk, dv, dout, q, k, v, lse, rowsum, d);
}

}  // namespace gpu
}  // namespace tp
