// mlp.h — the MLP under TP: column-parallel up (and gate), local activation, row-parallel down.
// Forward (saving what backward needs, through the layer's ActivationStash: observe/
// activation_stash.h) beside backward (returning dX, accumulating parameter gradients with +=).
//
// Shape legend: N = S·B tokens (sequence-major rows, token (s, b) is row s·B + b), h = hidden,
// ffn = MLP inner size, nh / nkv = query / key-value heads, hd = h / nh, t = TP size.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <string>

#include "core/communicator.h"
#include "core/device.h"
#include "model/config.h"
#include "observe/activation_stash.h"
#include "parallel/collective_matmul.h"
#include "parallel/linear.h"
#include "parallel/param.h"

namespace tp {

/// The MLP under TP: fc1 column-parallel (h → ffn), the activation local on this rank's ffn/t
/// columns, fc2 row-parallel (ffn → h):
///
///     Y = GeLU(X [A_1, …, A_t]) [B_1; …; B_t] = Σ_r GeLU(X A_r) B_r
///
/// One all-reduce forward (g, after fc2) and one backward (f, before fc1). With SwiGLU, gate and up
/// are both column-parallel, silu(X G_r) ⊙ (X U_r) is local, and their dX terms are added before
/// the single all-reduce. Checkpoint names: mlp.c_fc (up), mlp.c_gate (SwiGLU only), mlp.c_proj.
///
/// With sequence parallelism (cfg.sp) the input arrives as this rank's s/t tokens: it is
/// all-gathered on entry (gather_from_sp_region; backward: reduce-scatter) and fc2's partial sums
/// are reduce-scattered back to s/t tokens. Only the local shard of the input is kept; backward
/// all-gathers it again to form fc1's weight gradient.
///
/// GeLU's bias is fused (f32): fc1 returns X A_r without b_r (skip_bias_add) and the activation
/// is bias_gelu_forward; backward's bias_gelu_backward takes db_r in the same pass.
///
/// cfg.overlap (parallel/collective_matmul.h): async all-reduces (SP: reduce-scatters) dX while
/// fc1's weight gradient is computed, and under SP starts the input's re-gather when backward
/// begins; ring (SP) replaces each all-gather + GEMM and GEMM + reduce-scatter by a ring of blocks.
class ParallelMLP {
 public:
  /// prefix: e.g. "transformer.h.0.mlp".
  ParallelMLP(Device& device, Communicator& comm, const std::string& prefix, const GptConfig& cfg);
  /// x: (N, h), whole on every rank → y: (N, h), whole on every rank. Under SP: (N/t, h) → (N/t, h).
  Tensor forward(const Tensor& x);
  /// dy: like y → dx: like x.
  Tensor backward(const Tensor& dy);
  /// Inference: x: (N, h), whole on every rank → y: (N, h). The same numbers as forward without
  /// sequence parallelism (one all-reduce), keeping nothing for backward.
  Tensor forward_inference(const Tensor& x);
  void collect_params(ParamList& out, float std, float proj_std) const;
  void observe(MemoryLedger* ledger, int64_t layer);

 private:
  Device& device_;
  Communicator& comm_;
  bool swiglu_;
  // GeLU in f32: fc1 skips its bias add, and bias_gelu_forward / _backward take it in the same
  // pass (the same numbers as add_bias + gelu). bf16 keeps the two kernels and their two rounding
  // points (docs/model.md, "Precision").
  bool fused_bias_gelu_;
  Overlap overlap_;
  ColumnParallelLinear fc1_;   // up: (h, ffn) split by columns
  ColumnParallelLinear gate_;  // SwiGLU gate (unused for GeLU)
  RowParallelLinear fc2_;      // down: (ffn, h) split by rows
  ActivationStash saved_;
  SavedTensor up_, gate_out_;  // pre-activations (N, ffn/t); the gate's for SwiGLU only
};

}  // namespace tp
