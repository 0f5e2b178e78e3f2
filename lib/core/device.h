// device.h — the abstract Device: memory and compute kernels for one rank.
//
// Everything in lib/ computes through this interface, so the same code runs on the CPU backend
// (OpenMP) and the GPU backend (CUDA). Kernels work on contiguous f32 tensors; a tensor of any rank
// is seen as the 2-D matrix [rows, cols] = [product of all dims but the last, last dim].
//
// Conventions: input gradients (dx) are written (=); parameter gradients (dw, db) are accumulated
// (+=), so gradients of a parameter used twice add up.
//
// The kernels follow the Communicator's pattern: each public kernel is not virtual; it checks its
// arguments (core/kernel_checks.h: the tensors live on this device, the sizes agree, ids and
// targets are tokens) and then calls the backend's protected `do_<kernel>`:
//
//   void Device::gemm(ta, tb, α, A, B, β, C) {
//     const GemmDims dims = checks::check_gemm(*this, ta, tb, A, B, C);
//     do_gemm(ta, tb, α, A, B, β, C, dims);
//   }
//
// (device.cpp writes each as one call of a helper that takes the Kernel, core/kernel.h, so that
// the kernel is named once for its check, its timeline span and its bf16 rule.)
//
// A backend implements the do_* methods only, so it cannot skip a check, and every backend rejects
// the same arguments with the same message. Memory (allocate, the copies), synchronize(), name()
// and host_accessible() have no arguments to check and stay plain virtuals.
//
// Optional kernels. A kernel not every backend needs has a default do_* that fails with one line
// naming the device and the kernel ("cpu(openmp x2) device: attention_cached_forward not
// supported"), as the Communicator's optional operations do, so adding such a kernel touches this
// interface and the backends that implement it. Today: attention_cached_forward (generation's
// KV-cache attention; training does not call it).
//
// Dtypes (core/dtype.h). Every kernel below takes f32 tensors; a backend states a bf16 kernel by
// answering takes_bf16(kernel) = true for it (a Kernel of core/kernel.h, the one list of them).
// Its do_* then either handles bf16 itself (native_bf16(kernel) = true, which implies takes) or,
// by default, is run by the front on f32 stand-ins: each bf16 tensor widened exactly, the f32
// kernel, each bf16 output rounded to nearest even once — the rounding points of docs/model.md,
// "Precision". Tensors of both dtypes may meet in one call (a
// bf16 activation and an f32 weight gradient in a GEMM). The check refuses a bf16 tensor a backend
// does not take with one line naming the backend and the kernel, exit 2 ("gpu: layernorm_forward
// has no bf16 kernel"). The one kernel that takes both on every backend is convert (f32 ↔ bf16).
// Statistics that need range stay f32 whatever the storage (mean, rstd, the cross-entropy's row
// max, Σ e^x, target logit and loss).
//
// With a timeline set (set_timeline), each kernel is also recorded as a span (a SpanSink,
// core/span_sink.h, such as observe/timeline.h's Timeline): the kernel itself on the CPU, its
// launch on a GPU.
//
// Shape legend (one for the project: every shape comment here and in the backends' kernels/):
//   S = sequence, B = batch, h = hidden, nh = query heads, nkv = key/value heads, hd = head dim,
//   ffn = MLP width, V = vocabulary, t = tp size; and for the kernels' 2-D view, rows, cols
//   (rows = the tokens a call holds, S·B, or S·B/t under sequence parallelism) and the GEMM sizes
//   m, n, k. Activations are stored sequence-major: token (s, b) is row s·B + b.
//
// The math of every kernel is written here once, forward and backward (⊙ = elementwise product,
// Σ_r = sum over the rows): a backend's kernels/<stem> file says how it computes the formula
// (order of sums, f32 / f64 steps, threads), not the formula again. The stem of each group below is
// the file that holds it in both backends: cpu_backend/kernels/<stem>.cpp and
// gpu_backend/kernels/<stem>.cu (GEMM and the column copy are the backends' device files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/kernel.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace tp {

class SpanSink;

/// Sizes of one causal attention call (see Device::attention_forward).
struct AttentionShape {
  int64_t seq = 0;       ///< S
  int64_t batch = 0;     ///< B
  int64_t heads = 0;     ///< nh: query heads held by this call
  int64_t kv_heads = 0;  ///< nkv: key/value heads held by this call; nh % nkv == 0
  int64_t head_dim = 0;  ///< hd
  float scale = 1.0f;    ///< multiplies q·k, normally 1/sqrt(hd)
  /// Keys per sequence (0: S, self-attention). Ring attention (parallel/ring_attention.h) calls the
  /// kernels on one chunk of queries against another rank's chunk of keys.
  int64_t kv_seq = 0;
  /// Query i sits at key position past + i: it attends to keys t ≤ past + i (t < keys()). 0 with
  /// kv_seq = 0 is plain causal self-attention; past ≥ keys() − 1 lets every query see every key.
  int64_t past = 0;
  int64_t keys() const { return kv_seq > 0 ? kv_seq : seq; }
};

/// The sizes of a GEMM, C (m × n) = op(A) (m × k) · op(B) (k × n) (see Device::gemm).
struct GemmDims {
  int64_t m = 0, n = 0, k = 0;
};

/// A GEMM's B operand prepared once for several GEMMs that share it (Device::pack_gemm_b): the t
/// row blocks of a ring against one weight. This base holds b itself (the same memory: a Tensor is
/// a handle), so Device::gemm_packed is Device::gemm on it; a backend's subclass may also hold b
/// in its GEMM's own layout, made once, so that the blocks' GEMMs skip the per-call pack.
class PackedGemmB {
 public:
  /// op(B) = b, or bᵀ when trans_b; m is the rows of the A blocks it will meet.
  PackedGemmB(const Tensor& b, bool trans_b, int64_t m) : b_(b), trans_b_(trans_b), m_(m) {}
  virtual ~PackedGemmB() = default;
  const Tensor& b() const { return b_; }
  bool trans_b() const { return trans_b_; }
  int64_t m() const { return m_; }
  /// True when a backend holds b in its own layout (this base: false).
  virtual bool packed() const { return false; }

 private:
  Tensor b_;
  bool trans_b_;
  int64_t m_;
};

/// Hyper-parameters of one AdamW update (see Device::adamw_step).
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  ///< decoupled: p −= lr · wd · p
  float grad_scale = 1.0f;    ///< the gradient is multiplied by this first (global-norm clipping)
};

/// The part of a vocabulary-parallel logits tensor one rank holds: global ids [first, first + cols)
/// of which only ids < vocab are real tokens (the rest is padding up to a multiple of t).
struct VocabShard {
  int64_t first = 0;  ///< global id of column 0
  int64_t vocab = 0;  ///< real (unpadded) vocabulary size V
};

/// What a device has allocated through Tensors (kept by the Device base class for every backend).
struct MemoryStats {
  int64_t in_use = 0;       ///< bytes held by live tensors
  int64_t peak = 0;         ///< the most in_use has been since the last reset_peak()
  int64_t largest = 0;      ///< the largest single allocation since the last reset_peak()
  int64_t allocations = 0;  ///< allocations made
};

/// The FLOP/s ceiling a device measures for MFU (Device::measure_peak).
struct PeakCeiling {
  double gflops = 0;   ///< GFLOP/s of f32 GEMMs: the device's, or (the CPU) one thread's
  std::string source;  ///< where it came from, for the run header ("" where nothing to say)
  /// Measured once and kept per machine (the CPU's cache): rechecked after a run whose MFU passed
  /// 100 %, since a measurement taken on a busy machine stays low (Device::remeasure_peak).
  bool remeasurable = false;
};

/// A rank's peak FLOP/s and the run header's words for it (Device::peak_flops).
struct PeakFlops {
  double flops = 0;
  std::string what;
};

/// Memory and kernels of one rank. One per process; it must outlive every Tensor it allocated.
class Device {
 public:
  virtual ~Device() = default;

  /// Memory held by this device's tensors (tracked by Tensor for every backend).
  const MemoryStats& memory() const { return memory_; }
  /// Starts a new peak / largest-allocation window.
  void reset_peak() {
    memory_.peak = memory_.in_use;
    memory_.largest = 0;
  }
  /// Called by Tensor's storage: `bytes` allocated (positive) or freed (negative).
  void track(int64_t bytes) {
    memory_.in_use += bytes;
    if (bytes > 0) {
      ++memory_.allocations;
      memory_.largest = bytes > memory_.largest ? bytes : memory_.largest;
    }
    memory_.peak = memory_.in_use > memory_.peak ? memory_.in_use : memory_.peak;
  }

  /// Records every kernel from now on as a span of `timeline` (a SpanSink: observe/timeline.h's
  /// Timeline); nullptr (the default) records nothing. The timeline must outlive its use here.
  void set_timeline(SpanSink* timeline) { timeline_ = timeline; }
  SpanSink* timeline() const { return timeline_; }

  /// Human-readable name: "cpu (openmp x2)", "cuda:0 (H200)".
  virtual std::string name() const = 0;
  /// True when the host may read and write tensor memory directly (so MPI can use it unstaged).
  virtual bool host_accessible() const = 0;
  /// The first word of name(), for one-line messages: "cpu", "cuda:0".
  std::string backend() const;
  /// True when this backend's `kernel` (Kernel::layernorm_forward) takes bf16 tensors as well as
  /// f32. Default: none does (convert is not asked: it always takes both).
  virtual bool takes_bf16(Kernel kernel) const;
  /// True when this backend's do_<kernel> handles bf16 tensors itself. Otherwise (the default) a
  /// kernel it takes in bf16 runs its f32 do_* on stand-ins: every bf16 tensor widened to f32
  /// (exact), the kernel computed in f32, every bf16 output rounded back once (device.cpp).
  virtual bool native_bf16(Kernel kernel) const;

  // ---- the peak MFU divides by (launcher/peak.cpp: rank 0 measures, every rank gets the value) ---
  /// Measures this device's f32 GEMM ceiling (a second or two). Default, for any device (the
  /// GPU's): the best GFLOP/s of gemm at n³ for n = 256, 512, ... 4096 (best of 3 after a warm-up
  /// each), stopping at the first size whose call takes over 50 ms (a slow device, the CUDA
  /// emulator); device_peak.cpp. The CPU backend measures one thread's sgemm instead and keeps it
  /// per machine (cpu_backend/peak_probe.cpp).
  virtual PeakCeiling measure_peak();
  /// This rank's peak from `ceiling` (rank 0's measure_peak, its gflops broadcast to every rank)
  /// and the header's words for it. Default: gflops itself, "the measured fp32 GEMM ceiling of
  /// <name()> (Device::gemm, n³ up to 4096³)". The CPU: one thread's ceiling × its threads.
  virtual PeakFlops peak_flops(const PeakCeiling& ceiling) const;
  /// For a remeasurable ceiling (above) after a run whose MFU passed 100 %: measures again past any
  /// cache and returns it; *kept says whether it replaced `was` where it is kept (only a higher
  /// value does). Default: measure_peak()'s value, nothing kept.
  virtual double remeasure_peak(double was, bool* kept);

  // ---- memory (plain virtuals: nothing to check) ----------------------------------------------
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  ///< device to device
  /// Waits until every kernel launched so far has finished.
  virtual void synchronize() = 0;

  // The kernels. Each checks its arguments, then calls the do_* of the same name (below); a bad
  // argument throws tp::Error before any work is queued.

  // ---- dtype conversion (stem: convert) ------------------------------------------------------
  /// dst = src in dst's dtype, the same numel: f32 → bf16 rounds to nearest even (NaN stays NaN,
  /// a carry past the largest bf16 gives ±inf); bf16 → f32 is exact; the same dtype is a copy.
  /// Optional: a backend without it fails with one line.
  void convert(const Tensor& src, Tensor& dst);

  // ---- elementwise (stem: elementwise) -------------------------------------------------------
  /// x[:] = value
  void fill(Tensor& x, float value);
  /// x[:] *= alpha. Backward: dx = alpha · dy (this kernel again).
  void scale(Tensor& x, float alpha);
  /// y[:] += alpha * x[:]   (same numel). Backward: dx += alpha · dy (axpy again), dy passes.
  void axpy(float alpha, const Tensor& x, Tensor& y);

  // ---- matrix multiply (the device files: cpu_backend/blas, gpu_backend/cuda_device.cu) -------
  /// C = alpha * op(A) op(B) + beta * C, row-major; op(X) = X or Xᵀ.
  /// A: (m, k), or (k, m) when trans_a; B: (k, n), or (n, k) when trans_b; C: (m, n).
  /// With beta = 0, C is overwritten (its old contents, even NaN, are ignored).
  /// Backward of Y = X W (X: (rows, k), W: (k, n)): dX = dY Wᵀ, dW += Xᵀ dY, both this kernel
  /// with a transpose flag (beta = 1 to accumulate).
  void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            Tensor& c);
  /// The same B in several GEMMs (the t row blocks of a ring, lib/parallel/collective_matmul.h):
  /// pack_gemm_b prepares op(B) once for A blocks of m rows; gemm_packed is then gemm with it,
  ///   C = alpha · op(A) op(B) + beta · C,
  /// the same checks and the same math (to float rounding: a backend's packed kernel may sum in
  /// another order than its gemm). Contract: b must not change while the pack is alive (the pack
  /// may be a copy in another layout). An A of another row count than m, or trans_a, is allowed:
  /// where the packed layout does not fit that GEMM, the backend runs gemm on b. bf16 operands
  /// always run as gemm. Default (GPU, the CUDA emulator: cuBLAS does not repack per call): the
  /// pack is b itself. The CPU backend packs into oneDNN's f32 matmul layout where oneDNN has a
  /// brgemm kernel for it (cpu_backend/onednn_gemm.h; TP_CPU_PACKED_GEMM=off turns it off).
  std::shared_ptr<const PackedGemmB> pack_gemm_b(const Tensor& b, bool trans_b, int64_t m);
  void gemm_packed(bool trans_a, float alpha, const Tensor& a, const PackedGemmB& b, float beta,
                   Tensor& c);

  // ---- bias (stem: elementwise) --------------------------------------------------------------
  /// y[r, :] += bias[:] for every row r.   y: (rows, n), bias: (n)
  void add_bias(Tensor& y, const Tensor& bias);
  /// add_bias's backward: dbias[:] += Σ_r dy[r, :] (dy itself passes unchanged to the input).
  /// dbias: (n), dy: (rows, n)
  void add_bias_backward(Tensor& dbias, const Tensor& dy);

  // ---- layout (the device files) -------------------------------------------------------------
  /// dst[r, dst_col + j] = src[r, src_col + j] for j < ncols and every row r (same row count).
  /// Splitting and concatenating along the last dimension are both this copy, and each is the
  /// other's backward (the same copy with src and dst exchanged).
  void copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                    int64_t ncols);

  // ---- random numbers (stem: rng) ------------------------------------------------------------
  /// Fills a shard from the counter-based RNG: element (r, c) of `x` (2-D view) is the element
  /// with global index `index.offset + r * index.row_stride + c` of the parameter keyed by `key`.
  /// See core/rng.h; the value depends only on (key, global index), never on the shard.
  void fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                   const Distribution& dist);

  // ---- elementwise, more (stems: elementwise, reduce, rng) -----------------------------------
  /// y = x ⊙ m (same numel; y may alias x). Backward: dx = dy ⊙ m, this kernel again. Dropout is
  /// this with m = dropout_mask: y = x ⊙ mask forward, dx = dy ⊙ mask backward.   (elementwise)
  void mul(const Tensor& x, const Tensor& m, Tensor& y);
  /// Σ x², accumulated in double (synchronises: the result is on the host). No backward: the
  /// global gradient norm (model/adamw) is the square root of these sums over the parameters.
  /// (reduce)
  double sum_squares(const Tensor& x);
  /// mask[r, c] = (u ≥ p) / (1 − p) with u uniform in [0, 1) from (key, global index of (r, c)),
  /// as in fill_random. p = 0 gives all ones. mask: (rows, cols)   (rng)
  void dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index, float p);

  // ---- activations (stem: activation; y, x, g, u, their gradients: (rows, ffn/t)) ------------
  /// GeLU, tanh approximation, with z = √(2/π) (x + 0.044715 x³):
  ///   y = 0.5 x (1 + tanh z)
  void gelu_forward(Tensor& y, const Tensor& x);
  /// dx = dy ⊙ GeLU'(x),
  ///   GeLU'(x) = 0.5 (1 + tanh z) + 0.5 x (1 − tanh² z) · √(2/π) (1 + 3 · 0.044715 x²)
  void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
  /// Bias + GeLU in one pass (the MLP's up projection, whose GEMM leaves out its bias):
  ///   y[r, :] = GeLU(x[r, :] + bias[:])      x, y: (rows, n), bias: (n)
  /// The same numbers as add_bias then gelu_forward (the sum is rounded to f32 once in both),
  /// without writing and reading x + bias in between. Optional in effect: the default do_* runs
  /// those two kernels (a backend without its own fused kernel gets the same numbers).
  void bias_gelu_forward(Tensor& y, const Tensor& x, const Tensor& bias);
  /// bias_gelu_forward's backward, with z = x + bias recomputed (x is kept without the bias):
  ///   dx = dy ⊙ GeLU'(z)   (written),   dbias[:] += Σ_r dx[r, :]   (accumulated)
  /// The same numbers as gelu_backward on z then add_bias_backward on dx.
  void bias_gelu_backward(Tensor& dx, Tensor& dbias, const Tensor& dy, const Tensor& x,
                          const Tensor& bias);
  /// SwiGLU, σ(g) = 1 / (1 + e^−g), silu(g) = g σ(g):
  ///   y = silu(g) ⊙ u
  void swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u);
  /// dg = dy ⊙ u ⊙ silu'(g),  du = dy ⊙ silu(g),  silu'(g) = σ(g) (1 + g (1 − σ(g)))
  void swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g, const Tensor& u);

  // ---- norms (stem: norm; over the last dim of x: (rows, h); w, b: (h); saved: (rows)) -------
  /// LayerNorm of each row: μ = mean(x), σ² = mean((x − μ)²) (biased), rstd = 1/√(σ² + eps),
  ///   x̂ = (x − μ) rstd,  y = x̂ ⊙ w + b.   Saves μ (mean) and rstd for the backward.
  void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                         const Tensor& b, float eps);
  /// With g = dy ⊙ w and means over the row:
  ///   dx = rstd (g − mean(g) − x̂ mean(g ⊙ x̂))      (written)
  ///   dw += Σ_r dy ⊙ x̂,  db += Σ_r dy              (accumulated)
  void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                          const Tensor& w, const Tensor& mean, const Tensor& rstd);
  /// RMSNorm of each row: rstd = 1/√(mean(x²) + eps), x̂ = x rstd, y = x̂ ⊙ w. Saves rstd.
  void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
  /// With g = dy ⊙ w:
  ///   dx = rstd (g − x̂ mean(g ⊙ x̂))   (written)
  ///   dw += Σ_r dy ⊙ x̂                (accumulated)
  void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& rstd);

  /// Residual add + LayerNorm in one pass (a block's x1 = x + a, then ln_2(x1)):
  ///   s = x + r   (written, rounded to f32 once),   then y, mean, rstd = layernorm_forward(s)
  /// The same numbers as s = x, axpy(1, r, s), layernorm_forward(y, mean, rstd, s, w, b, eps),
  /// without reading s back from memory. x, r, s, y: (rows, h), s distinct from x and r. Optional
  /// in effect: the default do_* runs those two kernels; with a bf16 tensor the front runs that
  /// default on any backend, each kernel on its own stand-ins (s is rounded to bf16 before the
  /// norm reads it, as unfused).
  void add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                             const Tensor& r, const Tensor& w, const Tensor& b, float eps);
  /// Residual add + RMSNorm, as add_layernorm_forward: s = x + r, then rmsnorm_forward(y, rstd, s).
  void add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& r,
                           const Tensor& w, float eps);

  /// The norm's backward added to the residual's gradient, in one pass (a block's
  /// dx1 = dx2 + ln_2's dx, the backward of x1 + mlp(ln_2(x1))):
  ///   dx = dres + (layernorm_backward's dx)   (written),   dw, db as layernorm_backward
  /// The same numbers as layernorm_backward into a temporary t, then dx = dres, axpy(1, t, dx).
  /// dres, dx: (rows, h), dx distinct from dres and dy. Optional in effect as
  /// add_layernorm_forward: the default do_* runs the two kernels, and runs for any call with a
  /// bf16 tensor (t rounded to bf16 as unfused).
  void layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                              const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& mean, const Tensor& rstd);
  /// RMSNorm's, as layernorm_backward_add: dx = dres + (rmsnorm_backward's dx), dw accumulates.
  void rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres, const Tensor& dy,
                            const Tensor& x, const Tensor& w, const Tensor& rstd);

  // ---- attention (stem: attention) -----------------------------------------------------------
  /// Causal softmax attention for every (batch b, query head j): query head j reads key/value
  /// head g = j / (nh / nkv). q: (S·B, nh·hd), k, v: (K·B, nkv·hd) with K = shape.keys() (S unless
  /// kv_seq is set), out: (S·B, nh·hd), row s·B + b; Q_bj (S, hd), K_bg, V_bg (K, hd) are head j's
  /// (g's) columns at the rows of batch b. With p = shape.past (0 by default), per (b, j):
  ///   X_bj   = scale · Q_bj K_bgᵀ                        (the scores, S × K)
  ///   P_bj   = softmax_causal(X_bj)   row s: softmax over t ≤ p + s, 0 for t > p + s
  ///   out_bj = P_bj V_bg
  ///   lse_bj[s] = log Σ_{t ≤ p + s} e^(X_bj[s, t])       (natural log: the softmax's denominator)
  /// lse: (B, nh, S), always f32. The S × S probabilities are not kept: lse is what backward needs
  /// to recompute them, P[s, t] = e^(X[s, t] − lse[s]) (FlashAttention's saved statistic; ring
  /// attention merges partial outputs by it).
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, const AttentionShape& shape);
  /// Per (b, j), with P recomputed from q, k and lse as above and D[s] = Σ_e dout[s, e]·out[s, e]
  /// (= Σ_t P[s, t]·dP[s, t]: the softmax backward's row sum, from the forward's output):
  ///   dP    = dout_bj V_bgᵀ
  ///   dS    = P ⊙ (dP − D)                                (the softmax backward)
  ///   dq_bj = scale · dS K_bg
  ///   dk_bg = scale · Σ_{j of g} dSᵀ Q_bj,   dv_bg = Σ_{j of g} P_bjᵀ dout_bj
  /// dq, dk, dv written (=); dk, dv sum over the query heads that share a key/value head. out and
  /// lse are attention_forward's. With kv_seq and past as in attention_forward (dk, dv: (K·B,
  /// nkv·hd)); ring attention passes the merged out and lse of every key block (the row sum D and
  /// P need the softmax over all keys, not over this call's).
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const AttentionShape& shape);
  /// Merges two softmax attentions of the same queries over disjoint key sets (ring attention's
  /// step: parallel/ring_attention.h). out, out_part: (S·B, nh·hd); lse, lse_part: (B, nh, S), f32,
  /// as attention_forward writes them. Per row, with L = log(e^lse + e^lse_part):
  ///   out ← e^(lse − L)·out + e^(lse_part − L)·out_part,   lse ← L
  /// — the softmax over the union of the key sets, without the scores of either.
  void attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part,
                       const AttentionShape& shape);
  /// Causal attention of new positions over a key/value cache (incremental decoding; inference
  /// only, so no probs are kept and no backward). q, out: (n·B, nh·hd), the queries of positions
  /// [past, past + n) with n = shape.seq; k, v: ((past + n)·B, nkv·hd), the keys and values of
  /// positions [0, past + n), sequence-major (row s·B + b). Query (i, b) attends to keys
  /// t ≤ past + i:
  ///   out = softmax_{t ≤ past+i}(scale · q_i · k_t) v_t
  /// With past = 0 this is attention_forward's out.
  void attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                int64_t past, const AttentionShape& shape);

  // ---- vocabulary-parallel embedding (stem: embedding) ---------------------------------------
  /// wte is split by rows (tokens); this shard holds ids [first_id, first_id + V/t):
  ///   out[i] = wte_shard[ids[i] − first_id] when this shard owns ids[i], else 0,
  /// so the sum over the shards (one all-reduce) is the full lookup.
  /// ids: (rows) as f32, wte_shard: (V/t, h), out: (rows, h)
  void embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                               int64_t first_id);
  /// dwte_shard[ids[i] − first_id] += dout[i] for the ids this shard owns (repeated ids add up).
  void embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout, const Tensor& ids,
                                int64_t first_id);
  /// Positions: global row g = s·B + b is position s = g / B; x holds the sequence-major rows
  /// [row0, row0 + rows) of the batch (row0 > 0 for a sequence-parallel shard):
  ///   x[r] += wpe[(row0 + r) / B]          x: (rows, h), wpe: (S, h)
  void position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0);
  /// dwpe[s] += Σ over the held rows r of position s of dx[r]
  void position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0);

  // ---- vocabulary-parallel cross-entropy (stem: cross_entropy) -------------------------------
  // logits are split by columns: a shard holds global ids [first, first + cols), cols = V/t
  // padded, of which only ids < V are real. For row i with target y, the three numbers m, Σ, x_y
  // are all-reduced between the calls (max, sum, sum; lib/parallel/vocab_parallel):
  //   m_i = max_j x_ij,  Σ_i = Σ_j e^(x_ij − m_i),  x_y = x_iy,  loss_i = log Σ_i + m_i − x_y
  //   dlogits_ij = scale (e^(x_ij − m_i) / Σ_i − [first + j = y])   (softmax − one-hot)
  // logits, dlogits: (rows, cols); row_max, sum_exp, target_logit, targets, loss: (rows).
  /// row_max[i] = max of logits[i, j] over the real columns (first + j < vocab); −inf if none.
  void vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& shard);
  /// sum_exp[i] = Σ over real columns of exp(logits[i, j] − row_max[i]);
  /// target_logit[i] = logits[i, targets[i] − first] when this shard owns targets[i], else 0.
  void vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                            const Tensor& row_max, const Tensor& targets, const VocabShard& shard);
  /// loss[i] = log(sum_exp[i]) + row_max[i] − target_logit[i]   (after the all-reduces)
  void vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                  const Tensor& target_logit);
  /// The loss's backward, times scale (e.g. 1 / tokens for the mean loss):
  /// dlogits[i, j] = scale · (exp(logits[i, j] − row_max[i]) / sum_exp[i] − [first + j == targets[i]])
  /// for real columns, 0 for padding. dlogits may alias logits.
  void vocab_softmax_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                              const Tensor& sum_exp, const Tensor& targets, const VocabShard& shard,
                              float scale);

  // ---- optimizer (stem: adamw) ---------------------------------------------------------------
  /// One AdamW step (step ≥ 1) with g' = grad_scale · g:
  ///   m = β1 m + (1 − β1) g',  v = β2 v + (1 − β2) g'²
  ///   p −= lr · (m / (1 − β1^step)) / (√(v / (1 − β2^step)) + eps) + lr · wd · p
  /// p, g, m, v: the same numel (one parameter shard and its state).
  void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                  int64_t step);

 protected:
  // ---- what a backend implements: one do_* per kernel -----------------------------------------
  // Called by the kernel of the same name once its arguments passed the checks, so a do_* may
  // assume them (tensors on this device, sizes that agree, ids that are tokens). Arguments as in
  // the public call, plus what the check worked out on the way, so no backend computes it again:
  //   dims       m, n, k of the GEMM
  //   real_cols  columns [0, real_cols) of the logits shard are real tokens, the rest padding
  //   host_ids   the ids in host memory (numel of ids of them): the tensor's own memory on a
  //              host_accessible() device, else the host copy that was checked
  // Empty tensors pass the checks and reach do_* as well (a GPU backend returns before launching
  // an empty grid; a CPU loop simply runs no times).
  /// Optional (see the top of this file); src and dst differ in dtype (the front copies otherwise).
  virtual void do_convert(const Tensor& src, Tensor& dst);
  virtual void do_fill(Tensor& x, float value) = 0;
  virtual void do_scale(Tensor& x, float alpha) = 0;
  virtual void do_axpy(float alpha, const Tensor& x, Tensor& y) = 0;
  virtual void do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                       float beta, Tensor& c, const GemmDims& dims) = 0;
  /// Default: a PackedGemmB holding b (gemm_packed is then gemm). Only f32 b reaches it.
  virtual std::shared_ptr<const PackedGemmB> do_pack_gemm_b(const Tensor& b, bool trans_b,
                                                            int64_t m);
  /// Called for a pack whose packed() is true, with f32 a and c; default: do_gemm on b.b().
  virtual void do_gemm_packed(bool trans_a, float alpha, const Tensor& a, const PackedGemmB& b,
                              float beta, Tensor& c, const GemmDims& dims);
  virtual void do_add_bias(Tensor& y, const Tensor& bias) = 0;
  virtual void do_add_bias_backward(Tensor& dbias, const Tensor& dy) = 0;
  virtual void do_copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                               int64_t ncols) = 0;
  virtual void do_fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                              const Distribution& dist) = 0;
  virtual void do_mul(const Tensor& x, const Tensor& m, Tensor& y) = 0;
  virtual double do_sum_squares(const Tensor& x) = 0;
  virtual void do_dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index,
                               float p) = 0;
  virtual void do_gelu_forward(Tensor& y, const Tensor& x) = 0;
  virtual void do_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) = 0;
  /// Default: add_bias then gelu_forward on a copy (a backend overrides it with one pass).
  virtual void do_bias_gelu_forward(Tensor& y, const Tensor& x, const Tensor& bias);
  /// Default: add_bias on a copy of x, gelu_backward, add_bias_backward.
  virtual void do_bias_gelu_backward(Tensor& dx, Tensor& dbias, const Tensor& dy, const Tensor& x,
                                     const Tensor& bias);
  virtual void do_swiglu_forward(Tensor& y, const Tensor& g, const Tensor& u) = 0;
  virtual void do_swiglu_backward(Tensor& dg, Tensor& du, const Tensor& dy, const Tensor& g,
                                  const Tensor& u) = 0;
  virtual void do_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                                    const Tensor& w, const Tensor& b, float eps) = 0;
  virtual void do_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                     const Tensor& x, const Tensor& w, const Tensor& mean,
                                     const Tensor& rstd) = 0;
  virtual void do_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w,
                                  float eps) = 0;
  virtual void do_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                   const Tensor& w, const Tensor& rstd) = 0;
  /// Default: x copied into s, axpy, layernorm_forward, each run_kernel on its do_* (a backend
  /// overrides it with one pass, for f32 calls: the front runs the default for bf16 ones).
  virtual void do_add_layernorm_forward(Tensor& s, Tensor& y, Tensor& mean, Tensor& rstd,
                                        const Tensor& x, const Tensor& r, const Tensor& w,
                                        const Tensor& b, float eps);
  /// Default: x copied into s, axpy, rmsnorm_forward (as do_add_layernorm_forward).
  virtual void do_add_rmsnorm_forward(Tensor& s, Tensor& y, Tensor& rstd, const Tensor& x,
                                      const Tensor& r, const Tensor& w, float eps);
  /// Default: layernorm_backward into a temporary, dres copied into dx, axpy (as above).
  virtual void do_layernorm_backward_add(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres,
                                         const Tensor& dy, const Tensor& x, const Tensor& w,
                                         const Tensor& mean, const Tensor& rstd);
  /// Default: rmsnorm_backward into a temporary, dres copied into dx, axpy (as above).
  virtual void do_rmsnorm_backward_add(Tensor& dx, Tensor& dw, const Tensor& dres, const Tensor& dy,
                                       const Tensor& x, const Tensor& w, const Tensor& rstd);
  virtual void do_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const AttentionShape& shape) = 0;
  virtual void do_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                     const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse,
                                     const AttentionShape& shape) = 0;
  virtual void do_attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part,
                                  const Tensor& lse_part, const AttentionShape& shape) = 0;
  /// Optional (see the top of this file).
  virtual void do_attention_cached_forward(Tensor& out, const Tensor& q, const Tensor& k,
                                           const Tensor& v, int64_t past,
                                           const AttentionShape& shape);
  virtual void do_embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                          int64_t first_id) = 0;
  virtual void do_embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout,
                                           const Tensor& ids, int64_t first_id,
                                           const float* host_ids) = 0;
  virtual void do_position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) = 0;
  virtual void do_position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch,
                                    int64_t row0) = 0;
  virtual void do_vocab_max(Tensor& row_max, const Tensor& logits, const VocabShard& shard,
                            int64_t real_cols) = 0;
  virtual void do_vocab_sum_exp_target(Tensor& sum_exp, Tensor& target_logit, const Tensor& logits,
                                       const Tensor& row_max, const Tensor& targets,
                                       const VocabShard& shard, int64_t real_cols) = 0;
  virtual void do_vocab_loss(Tensor& loss, const Tensor& row_max, const Tensor& sum_exp,
                             const Tensor& target_logit) = 0;
  virtual void do_vocab_softmax_backward(Tensor& dlogits, const Tensor& logits,
                                         const Tensor& row_max, const Tensor& sum_exp,
                                         const Tensor& targets, const VocabShard& shard,
                                         float scale, int64_t real_cols) = 0;
  virtual void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWParams& h,
                             int64_t step) = 0;
  /// Throws "<name()> device: <kernel> not supported" (an optional kernel's default).
  [[noreturn]] void unsupported(Kernel kernel) const;
  /// do_gemm on f32 stand-ins of its bf16 operands (the front's widening, device.cpp): for a
  /// backend whose native bf16 GEMM declines a call (the CPU's oneDNN path: an f32 operand, or a
  /// case oneDNN refuses), so that the stand-in rule is written once, in the front.
  void gemm_on_stand_ins(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                         float beta, Tensor& c, const GemmDims& dims);

 private:
  // The unfused kernels the fused add + norm defaults are made of, past their check and span:
  // run_kernel on the do_* (direct on f32 tensors, else on stand-ins). The public kernel of the
  // same name is its check, its span and this; the defaults call these, so an f32 call records
  // one span (the fused kernel's) and a bf16 one rounds at each step as the public kernels do.
  void run_axpy(float alpha, const Tensor& x, Tensor& y);
  void run_layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                             const Tensor& w, const Tensor& b, float eps);
  void run_layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                              const Tensor& w, const Tensor& mean, const Tensor& rstd);
  void run_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
  void run_rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                            const Tensor& w, const Tensor& rstd);

  MemoryStats memory_;
  SpanSink* timeline_ = nullptr;
};

/// How to create a device (from the command line: --backend, --tf32, --dtype). The launcher makes
/// the device (launcher/backends.h: make_device); a backend's constructor reads what applies to it.
struct DeviceOptions {
  std::string backend = "cpu";  ///< "cpu" or "gpu"
  int local_rank = 0;           ///< rank among the ranks on this node (picks the GPU)
  bool tf32 = false;            ///< GPU: let cuBLAS use TF32 tensor cores for fp32 GEMMs
  std::string dtype = "fp32";   ///< GEMM input precision: "fp32", or "bf16" (GPU; fp32 accumulate)
};

}  // namespace tp
