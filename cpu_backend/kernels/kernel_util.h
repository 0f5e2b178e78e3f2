// kernel_util.h — what the CPU backend's kernels/ files share: the size below which a loop runs on
// one thread, each thread's columns of the parameter gradients' row sums (and the bias's column
// sums), a fixed-lane f64 sum, the per-vector-width clones, an optional fused multiply-add, a
// vectorisable e^x, and the bf16 loads and stores of the kernels that read bf16 themselves.
//
// Determinism: results are bit-identical for any OpenMP thread count. Every output element is
// computed by one thread in a fixed order: sums over rows (dw, db, dwte, dwpe) are parallelised over
// the output (columns, positions), never split across threads; the norm statistics and Σ x² add
// in lane_sum's fixed lanes, and the other `omp simd` reductions in vector lanes, an order the
// compiled code fixes. The attention's GEMMs are thread-independent too
// (kernels/attention.cpp says how). Not thread-independent: the plain GEMMs (CpuDevice::gemm),
// where OpenBLAS splits one call across its threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

// TP_CPU_CLONES before an elementwise kernel's loop function: GCC compiles it three times, for
// AVX-512 (16 floats a vector), AVX2 (8) and the build's baseline (x86-64: SSE2, 4), and the
// program picks one for the CPU when it loads (target_clones, an ifunc; Linux x86-64 with GCC,
// elsewhere the baseline alone). The Makefile sets no -march, so without it every loop ran 4 lanes
// wide. All clones give the same bits: the loops are elementwise (no lane-order sums: the
// reductions stay unclone), and the Makefile compiles cpu_backend/ with -ffp-contract=off, so the
// AVX-512 clone (whose target implies FMA) keeps a·b + c two roundings like the others. (An
// optimize("fp-contract=off") attribute instead would stop the inline helpers, exp_small, from
// being inlined into the clone, which then no longer vectorises.) Measured on the bench machine
// (a Xeon with AVX-512): GeLU 0.80 ns per element with AVX2, 0.58 with AVX-512, at 64 Ki elements
// (before GeLU's fused multiply-adds: kernels/activation.cpp, TP_CPU_CLONES_FMA). The AVX-512
// clone is x86-64-v4 (AVX-512 F with BW, DQ and VL, every AVX-512 CPU since Skylake-SP), not F
// alone: the bf16 loops' 16-bit lanes (the stores' 32 → 16-bit narrowing) need BW, and without it
// GCC leaves those loops scalar in the AVX-512 clone.
// Virtual functions cannot be multiversioned, so each CpuDevice kernel calls a free function.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(TP_NO_CPU_CLONES)
#define TP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define TP_CPU_CLONES
#endif

// TP_CPU_INLINE before a helper that a cloned loop calls: always inlined, so that it is compiled
// into each clone (a copy of its own would be compiled for the baseline only). Also after the
// parameters of a lambda that column_sums or lane_sum calls per element: once the bf16 loop
// templates (below, "storage") multiplied the instances, GCC stopped inlining such lambdas, and a
// call per element keeps the loop from vectorising (f32 bias + GeLU backward ran 40 times slower).
#if defined(__GNUC__)
#define TP_CPU_INLINE __attribute__((always_inline))
#else
#define TP_CPU_INLINE
#endif

namespace tp {
namespace cpu {

// ---- storage: f32 or bf16 (--precision bf16) ---------------------------------------------------
// A kernel that reads bf16 itself (CpuDevice::native_bf16) is a loop template on each tensor's
// element type, float or uint16_t (bf16's bits), called through typed(): load() gives a float (a
// bf16 widened exactly), the arithmetic is the f32 kernel's own, and store() rounds to bf16 once.
// So a bf16 call gives the bits of the Device front's stand-in path (the rule is written there,
// core/device.cpp) in one pass over memory instead of three or four, and the f32 kernel is the
// same template on floats.

// The bit work is core/dtype.h's (exact widening; nearest, ties to even, a NaN kept quiet, as a
// select so that the loops around it vectorise).
TP_CPU_INLINE inline float load(const float* p, int64_t i) { return p[i]; }
TP_CPU_INLINE inline float load(const uint16_t* p, int64_t i) { return bf16_bits_to_float(p[i]); }
TP_CPU_INLINE inline void store(float* p, int64_t i, float v) { p[i] = v; }
TP_CPU_INLINE inline void store(uint16_t* p, int64_t i, float v) { p[i] = float_to_bf16_bits(v); }

// Calls f(p...) with each tensor's elements as a typed pointer: float* for f32, uint16_t* for bf16
// (const for a const Tensor; nullptr for an undefined one). One instance of f per mix of dtypes, so
// each loop is compiled for the types it reads, with no per-element test of a dtype.
template <typename F>
inline void typed(F&& f) {
  f();
}
template <typename F, typename T, typename... Ts>
inline void typed(F&& f, T& t, Ts&... rest) {
  constexpr bool kConst = std::is_const_v<T>;
  using Bits = std::conditional_t<kConst, const uint16_t, uint16_t>;
  using Float = std::conditional_t<kConst, const float, float>;
  if (t.defined() && t.dtype() == Dtype::bf16)
    typed([&](auto*... ps) { f(static_cast<Bits*>(t.raw()), ps...); }, rest...);
  else
    typed([&](auto*... ps) { f(static_cast<Float*>(t.raw()), ps...); }, rest...);
}

// A short tensor (a norm's weight, bias, statistics or parameter gradient: h or rows elements) as
// f32 for a native kernel's loops: its own memory when it is f32, else load() into a host buffer,
// store()d back once by round_back() when it is an output — the front's stand-in in the kernel's
// own terms, because a native kernel may not call the front (a Device allocation and a convert
// span per call, inside the kernel's span). A call pays h or rows elements for it, not the
// activations' rows × h, and the loops stay one instance per mix of the activations' dtypes. An
// undefined tensor gives nullptr.
class SmallF32 {
 public:
  explicit SmallF32(const Tensor& t) : t_(t), bf16_(t.defined() && t.dtype() == Dtype::bf16) {
    if (!bf16_) return;
    const auto* p = static_cast<const uint16_t*>(t.raw());
    wide_.resize(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) wide_[static_cast<size_t>(i)] = load(p, i);
  }
  float* data() { return bf16_ ? wide_.data() : own(); }
  const float* data() const { return bf16_ ? wide_.data() : own(); }
  void round_back() {
    if (!bf16_) return;
    auto* p = static_cast<uint16_t*>(t_.raw());
    for (int64_t i = 0; i < t_.numel(); ++i) store(p, i, wide_[static_cast<size_t>(i)]);
  }

 private:
  float* own() const { return t_.defined() ? static_cast<float*>(t_.raw()) : nullptr; }
  const Tensor& t_;
  bool bf16_;
  std::vector<float> wide_;
};

constexpr int64_t kParallelMin = 1 << 14;  // below this much work, one thread is faster
constexpr int64_t kColBlock = 64;          // the unit of a thread's columns in the row sums

// Thread `me` of `nt`'s columns [c0, c1) of [0, cols): a range of whole kColBlock blocks, for the
// row sums that walk the rows in order per thread (every column summed by one thread, rows in
// order, so the bits do not depend on nt). Empty (c0 = c1) for a thread left without a block.
inline void column_range(int64_t cols, int64_t nt, int64_t me, int64_t& c0, int64_t& c1) {
  const int64_t nblocks = (cols + kColBlock - 1) / kColBlock, per = (nblocks + nt - 1) / nt;
  c0 = std::min(cols, me * per * kColBlock);
  c1 = std::min(cols, (me + 1) * per * kColBlock);
}

// The bias gradient's column sums, called by every thread of a parallel region: db[c] += Σ_r
// term(r · cols + c, c) over the rows r of a rows × cols matrix, for this thread's columns
// (column_range), in a float sum per column, rows in order (a bf16 db: widened, the sum added,
// rounded once, as the stand-in path does). So each column is summed by one thread
// in one order, and the bits do not depend on the thread count. `term` gives the element (and may
// write beside it: the fused bias + GeLU's dx). add_bias_backward's and the fused bias + GeLU
// backward's walk (kernels/elementwise.cpp, activation.cpp). Always inlined, for the clone that
// calls it (as lane_sum); the loop over the columns vectorises.
template <typename F, typename DB = float>
TP_CPU_INLINE inline void column_sums(DB* pdb, int64_t rows, int64_t cols, F term) {
  int64_t c0, c1;
  column_range(cols, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
  std::vector<float> sum(static_cast<size_t>(c1 - c0), 0.0f);
  float* ps = sum.data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * cols;
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c) ps[c - c0] += term(o + c, c);
  }
  for (int64_t c = c0; c < c1; ++c) store(pdb, c, load(pdb, c) + ps[c - c0]);
}

// Σ_c f(c) over c in [0, n), in f64, in kLanes fixed partial sums: lane j adds the c ≡ j (mod
// kLanes) in order, then the lanes are added pairwise (j + kLanes/2 into j, halving). One order for
// any vector width, so a cloned loop (TP_CPU_CLONES) gives the baseline's bits; where an
// `omp simd reduction` lets the compiler pick the lanes (their count and so the bits would differ
// per clone). GCC vectorises the lane loop: 16 doubles are two AVX-512 or four AVX2 vectors.
// Always inlined: a copy of its own would be compiled for the baseline only, not for the clone that
// calls it.
constexpr int kLanes = 16;
template <typename F>
TP_CPU_INLINE inline double lane_sum(int64_t n, F f) {
  double acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += f(c + j);
  for (int j = 0; c + j < n; ++j) acc[j] += f(c + j);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
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

// a · b + c: one rounding (a fused multiply-add, correctly rounded: the same bits on every CPU)
// when kFused, else two. Fused, a loop vectorises to vfmadd only where the target has FMA (the
// AVX-512 and x86-64-v3 clones of TP_CPU_CLONES_FMA); elsewhere it is a call to fmaf per element.
template <bool kFused>
TP_CPU_INLINE inline float madd(float a, float b, float c) {
  if constexpr (kFused)
    return __builtin_fmaf(a, b, c);
  else
    return a * b + c;
}

// e^x for |x| ≤ 88, within 1 ulp (0 where e^x is below the smallest normal float, e^−87.3; NaN
// gives NaN), in arithmetic the compiler vectorises, where std::exp is a library call per element:
// x = n ln2 + r with |r| ≤ ln2/2 (ln2 in two parts, so r is exact), e^r by the Cephes expf
// polynomial, 2^n built as exponent bits. Adding 1.5 · 2^23 rounds x / ln2 to the integer n and
// leaves n in the low bits of the sum. kFused: each a · b + c one fused multiply-add (madd), for
// the loops cloned with TP_CPU_CLONES_FMA; else two roundings, the arithmetic of every clone.
// Always inlined (TP_CPU_INLINE): one call left in a loop stops it from vectorising, and GCC's
// inliner stopped inlining it once the bf16 loop templates (kernel_util.h, "storage") gave it
// dozens of callers.
template <bool kFused = false>
TP_CPU_INLINE inline float exp_small(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 · 2^23
  const float shifted = madd<kFused>(x, 1.44269504088896341f, kShift);
  const float n = shifted - kShift;
  const float r = madd<kFused>(n, 2.12194440e-4f, madd<kFused>(n, -0.693359375f, x));
  float p = 1.9875691500e-4f;
  p = madd<kFused>(p, r, 1.3981999507e-3f);
  p = madd<kFused>(p, r, 8.3334519073e-3f);
  p = madd<kFused>(p, r, 4.1665795894e-2f);
  p = madd<kFused>(p, r, 1.6666665459e-1f);
  p = madd<kFused>(p, r, 5.0000001201e-1f);
  p = madd<kFused>(p * r, r, r) + 1.0f;
  const uint32_t biased = float_bits(shifted) - float_bits(kShift) + 127;  // n + 127, in [0, 254]
  return p * bits_float(biased << 23);
}

}  // namespace cpu
}  // namespace tp
