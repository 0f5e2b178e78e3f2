// moe.h — a mixture-of-experts MLP on one rank: a top-k router, E expert MLPs, the gate-weighted
// combine, the load-balancing loss and the router z-loss (issue 43, item 1; no expert parallelism).
//
// Shape legend: N = tokens (rows of x), h = hidden, ffn = an expert's inner size, E = experts,
// k = experts per token, M = assignments kept (N·k when dropless, fewer with a capacity factor).
// The project's full legend: core/device.h.
//
// Forward, per token x (a row of x: (N, h)):
//
//     z = x W_r                      router logits, W_r: (h, E), no bias (as Mixtral's router)
//     p = softmax(z)                 in fp32 or wider (here on the host, in double, kept as f32)
//     e_1 … e_k = top-k of p         ties to the lowest expert id
//     g_j = p_{e_j} / Σ_j' p_{e_j'}  when k > 1 (Mixtral renormalises over the k)
//     g_1 = p_{e_1}                  when k = 1 (Switch): renormalising one gate would make it 1,
//                                    a constant, and the router would get no gradient from the
//                                    loss through its gate at all (only from the balancing loss)
//     y = Σ_j g_j · expert_{e_j}(x)
//
// An expert is the MLP of model/mlp.h at t = 1: GeLU (c_fc h→ffn with bias, GeLU, c_proj ffn→h
// with bias) or SwiGLU (silu(x W_gate + b_gate) ⊙ (x W_fc + b_fc), then c_proj).
//
// Capacity. Dropless by default (capacity_factor = 0). With a capacity factor c each expert takes
// at most capacity = ceil(c · N · k / E) assignments, first come first served in token order (token
// 0's k choices, then token 1's, …); an assignment past it is dropped: its share of y is 0 (the
// block's residual carries the token) and its gate gets no gradient. The other gates of that token
// keep their values (they are not renormalised again). dropped() counts the drops of the last
// forward.
//
// Losses, added by the caller to the model's loss (their values: losses(); their gradients: added
// to the router's by backward):
//   aux = α · E · Σ_e f_e · P_e    the Switch/GShard load-balancing loss (Fedus, Zoph, Shazeer,
//                                  "Switch Transformers", 2021, §2.2; α = 0.01 is theirs), with
//                                  f_e = the fraction of the N·k router choices that picked e
//                                  (counted before any drop) and P_e = the mean of p_e over the N
//                                  tokens. f_e is a count: treated as a constant in backward, as
//                                  every implementation does.
//   zl  = β · mean_tokens (log Σ_e e^{z_e})²   the router z-loss (Zoph et al., "ST-MoE", 2022,
//                                  §3; β = 1e-3 is theirs).
// Their statistics (the counts, Σ_tokens p, N, Σ_tokens lse²) are this call's tokens unless the
// caller sets a stats reducer (set_stats_reducer): it receives them summed over this rank's tokens
// and may replace them by their sums over the global batch (an all-reduce over data-parallel
// ranks, which this layer does not do). Then losses() are the global batch's, and backward adds
// this rank's tokens' share of their gradient (the sum of the shares over the ranks is the whole
// gradient, divided by the global N as the losses are).
//
// Where the work runs. The GEMMs, the activations, the gather of tokens by expert and the
// scatter-add of the combine run on the Device (the gather and scatter are the embedding lookup's
// kernels with token indices as ids). The routing goes through the host: the (N, E) logits are
// copied to the host, softmax, top-k, the statistics and the permutation are computed there, and
// the (M) indices and gates are copied back; backward copies the (M) gate gradients to the host
// and the (N, E) logit gradients back. On a GPU, forward moves 4·N·E bytes to the host and 8·M
// back, backward 4·M and 4·N·E, with two synchronisations per pass (and one more per gather or
// scatter-add call, which checks its ids on the host: core/kernel_checks.h). Each empties the
// stream and leaves the GPU idle while the host routes. A device softmax and top-k and a device
// sort by expert (what Megatron-Core's permute does) would remove them. NOTE(issue 43): move the
// routing onto the device when EP lands; correctness first.
//
// Expert parallelism (set_expert_group): this rank keeps only the E/ep experts the placement gives
// it (parallel/expert_parallel.h); after the routing, the kept slots' rows go to their experts'
// ranks and the outputs come back (ExpertDispatch), forward and backward. Capacity and drops stay
// per source rank (GShard's per-group capacity: each rank's N tokens are one group), so a run at
// any ep computes what dp ranks without EP compute. With EP the experts' input rows are kept for
// backward (R × h) instead of being gathered again from x.
//
// Micro-batches and pipelines. The routing (host), the statistics and the dispatch plan are the last
// forward's; when backward finds they belong to another input (a pipeline ran the next
// micro-batch's forward in between), it routes its own input again — the same numbers, one router
// GEMM and the two small collectives again — rather than keeping every micro-batch's routing.
//
// Precision. fp32, or bf16 mixed precision (MoeConfig::compute): the experts compute with bf16
// copies of their weights (Param::compute, remade from the fp32 masters after each update) on
// bf16 activations, as the dense MLP does (bias, then GeLU, each rounding once); the router runs in
// f32 on the widened input (its softmax and top-k are the routing: a bf16 logit would tie experts
// an f32 one tells apart); the gate-weighted combine and the input gradient are summed in f32 and
// rounded to bf16 once. The dispatch moves bf16 rows (half the bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <memory>
#include "core/device.h"
#include "model/config.h"

#include "observe/activation_stash.h"
#include "parallel/expert_parallel.h"
#include "parallel/param.h"

namespace tp {

/// The layer's own options (the lead maps --experts, --top-k, … onto it).
struct MoeConfig {
  int64_t hidden = 0;  ///< h
  int64_t ffn = 0;     ///< an expert's inner size
  int experts = 8;     ///< E
  int top_k = 2;       ///< k, 1 ≤ k ≤ E
  /// k > 1: gates renormalised over the k chosen (Mixtral). Ignored at k = 1 (the raw probability,
  /// Switch: see the top of this file).
  bool renormalise = true;
  double aux_loss_coef = 0.01;  ///< α (Switch Transformers)
  double z_loss_coef = 1e-3;    ///< β (ST-MoE)
  double capacity_factor = 0;   ///< c; 0: dropless
  Activation act = Activation::Gelu;
  Dtype compute = Dtype::f32;  ///< the activations' and the experts' compute dtype
};

/// Refuses a config that cannot run (bad input, exit 2, one line naming the fix).
void check_moe_config(const MoeConfig& cfg);

/// The sums behind the balancing loss and the z-loss (see the top of this file).
struct RouterStats {
  std::vector<double> choices;   ///< (E): router choices that picked e (of N·k, before drops)
  std::vector<double> prob_sum;  ///< (E): Σ_tokens p_e
  double tokens = 0;             ///< N
  double lse_sq_sum = 0;         ///< Σ_tokens (log Σ_e e^{z_e})²
};

/// Called in forward with this rank's RouterStats; may overwrite them with global sums.
using RouterStatsReducer = std::function<void(RouterStats&)>;

/// The losses of the last forward.
struct MoeLosses {
  double aux = 0;     ///< α · E · Σ_e f_e P_e
  double z_loss = 0;  ///< β · mean (lse²)
};

/// One expert's parameters and their gradients.
struct MoeExpert {
  Tensor w_fc, b_fc, w_gate, b_gate, w_proj, b_proj;  ///< (h, ffn), (ffn); gate: SwiGLU only
  Tensor dw_fc, db_fc, dw_gate, db_gate, dw_proj, db_proj;
  /// bf16 compute copies of the six (MoeConfig::compute = bf16), else undefined.
  Tensor cw_fc, cb_fc, cw_gate, cb_gate, cw_proj, cb_proj;
};

class MoeLayer {
 public:
  /// prefix: e.g. "transformer.h.0.moe". Parameters start at zero: init_params fills them.
  MoeLayer(Device& device, const std::string& prefix, const MoeConfig& cfg);
  /// x: (N, h) → y: (N, h). Keeps what backward needs; sets losses(), stats, dropped().
  Tensor forward(const Tensor& x);
  /// dy: (N, h) → dx: (N, h), through the experts and the router; parameter gradients +=. The aux
  /// and z-loss gradients are added times loss_scale (the factor the trainer applies to its loss,
  /// e.g. 1 / micro-batches).
  Tensor backward(const Tensor& dy, float loss_scale = 1.0f);

  /// Checkpoint names: "<prefix>.router.weight" (h, E), "<prefix>.experts.<e>.c_fc.weight" and
  /// ".bias", ".c_gate.*" (SwiGLU), ".c_proj.*" (e the global expert id; Param::expert = e); all
  /// Split::Replicated. proj_std for c_proj's weights. Under EP only this rank's experts.
  void collect_params(ParamList& out, float std, float proj_std) const;
  void observe(MemoryLedger* ledger, int64_t layer);
  void set_stats_reducer(RouterStatsReducer reducer) { reducer_ = std::move(reducer); }
  /// Expert parallelism over `ep` (null or size 1: none): keeps only this rank's experts (call it
  /// before the parameters are collected). Refuses E not divisible by ep (bad input).
  void set_expert_group(Communicator* ep);
  /// Where the experts are and, after a forward, what the last pass sent and received.
  const ExpertDispatch& dispatch() const { return *dispatch_; }

  const MoeConfig& config() const { return cfg_; }
  const MoeLosses& losses() const { return losses_; }
  /// The statistics of the last forward, after the reducer.
  const RouterStats& stats() const { return stats_; }
  /// f_e = choices_e / (N·k), and P_e = prob_sum_e / N, for logging.
  std::vector<double> choice_fraction() const;
  std::vector<double> mean_prob() const;
  /// Assignments dropped by the capacity in the last forward (0 when dropless), and the capacity.
  int64_t dropped() const { return dropped_; }
  int64_t capacity() const { return capacity_; }
  /// The last forward's choices and gates, (N·k) each, token-major; dropped ones have gate 0.
  const std::vector<int>& choices() const { return route_.expert; }
  const std::vector<float>& gates() const { return route_.gate; }

  Tensor router_weight, router_dweight;  ///< (h, E)
  /// This rank's experts: all E, or under EP the E/ep from dispatch().placement().first().
  std::vector<MoeExpert> experts;

 private:
  /// The host side of one forward's routing, kept for backward.
  struct Route {
    std::vector<float> probs;    // (N·E)
    std::vector<double> lse;     // (N)
    std::vector<int> expert;     // (N·k)
    std::vector<float> gate;     // (N·k), 0 for dropped
    std::vector<int> slot_of;    // (M): the assignment t·k + j of each kept slot, sorted by expert
    std::vector<int64_t> begin;  // (E + 1): expert e's slots are [begin[e], begin[e + 1])
  };
  void route_tokens(const Tensor& x);
  void route(const std::vector<float>& logits, int64_t n);
  void compute_losses();
  /// Rows sorted by local expert (dispatch().expert_begin()) through this rank's experts.
  Tensor experts_forward(const Tensor& xs);
  Tensor experts_backward(const Tensor& xs, const Tensor& dout);
  std::vector<float> router_grad(const std::vector<float>& dgate_slot, float loss_scale) const;
  Tensor in_compute_dtype(const Tensor& sum) const;

  Device& device_;
  std::string prefix_;
  MoeConfig cfg_;
  bool swiglu_;
  RouterStatsReducer reducer_;
  std::unique_ptr<ExpertDispatch> dispatch_;
  Route route_;
  Tensor routed_;  // the input route_ and the plan belong to (held, so its address stays unique)
  RouterStats stats_;
  MoeLosses losses_;
  int64_t dropped_ = 0;
  int64_t capacity_ = 0;
  Tensor ones_h_;  // (1, h) of ones: the gates broadcast over a row, and a row sum
  ActivationStash saved_;
  SavedTensor x_, ids_, gates_, xe_, up_, gate_pre_, act_, out_;
};

}  // namespace tp
