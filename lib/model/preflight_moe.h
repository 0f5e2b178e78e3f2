// preflight_moe.h — the preflight of a mixture of experts (`--experts E --top-k k`, model/moe.h;
// issue 43, item 5): how many parameters the model has and how many one token uses, what one rank
// holds today (every expert whole on every TP rank) and under a planned expert parallelism
// (`--ep N`), and what the all-to-all of that plan would move and cost. Arithmetic only, like
// preflight.h, which it builds on (its count_parameters calls moe_extra_params, so the TP
// preflight's P, memory and peak already hold the experts).
//
// Shape legend (preflight.h's): L layers, h hidden, f an expert's inner size (--ffn), E experts,
// k experts per token, M = the MoE blocks (blocks l with l % moe_every = moe_every − 1: ⌊L/n⌋),
// t the TP size, e the bytes of one value.
//
// Parameters (the names and shapes of model/moe.h; each block keeps its ln_2):
//   one expert   c_fc (h, f) + f, c_gate (h, f) + f under SwiGLU, c_proj (f, h) + h
//                — the same tensors as the dense MLP it replaces
//   router       (h, E), no bias, per MoE block
//   total        the dense model − M dense MLPs + M · (h·E + E · expert)
//   active       total − M · (E − k) · expert: everything but the experts a token does not visit
// Per rank at t: the dense preflight's shards, with each MoE block's sharded MLP replaced by the
// router and all E experts whole (tp::Gpt replicates them over TP: no expert TP, no EP yet).
//
// Expert parallelism as planned (tp_train --ep runs it: parallel/expert_parallel.h): EP groups of ep ranks
// carved from the dp axis (ranks t apart, ProcessGrid's numbering: inside a node when the node
// holds t · ep GPUs); each rank holds E/ep experts of every MoE block, the router and attention
// stay replicated. Per rank: P_ep = P − M · (E − E/ep) · expert. ZeRO-1 (--zero 1) shards the
// dense moments over dp and the experts' over the dp/ep replicas that hold the same experts.
//
// Pipeline parallelism (--pp N, tp_train runs experts on a pipeline): the blocks split evenly
// over the stages (pipeline_plan.h's stage_blocks, as pipeline_stage_layout cuts tp::Gpt); a rank
// of stage s holds that stage's dense shards (pipeline_plan.h's stage_params) with each of its M_s
// MoE blocks (is_moe_block of the global index) holding the router and E (E/ep) whole experts.
// dp is then per stage (world / (t · N)); the fullest stage's ranks are the rows that must fit.
// Context parallelism with experts is not planned (tp_preflight refuses --cp with --experts).
//
// The all-to-all of one MoE layer, per rank: T tokens (B·S; B·S/t under SP, each TP rank routing
// its own share; without SP every TP rank holds, and sends, all B·S), each token to k experts, of
// which (ep − 1)/ep live elsewhere on average (balanced routing):
//   one all-to-all   T · k · h · (ep − 1)/ep · e bytes sent (and as many received)
//   per layer        4 of them: forward dispatch + combine, backward the same in reverse
// Time: each all-to-all (ep − 1) messages, (ep − 1) · α + bytes / β, on the link the EP group
// lies on (observe/simulated_link.h's presets).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "model/config.h"
#include "model/preflight.h"
#include "observe/simulated_link.h"

namespace tp {

/// The parameter counts of the MoE blocks of `c` (0 when c.experts = 0).
struct MoeCounts {
  int64_t moe_blocks = 0;  ///< M
  int64_t expert = 0;      ///< one expert's parameters
  int64_t router = 0;      ///< h · E, per MoE block
  /// One MoE block on one rank beyond a dense block's shard at t: router + E · expert − the
  /// dense MLP's shard.
  int64_t block_extra = 0;
  /// What one rank holds beyond the dense model's shards at t: M · block_extra. At t = 1 this
  /// is what turns the dense count into the MoE one.
  int64_t extra_per_rank = 0;
  int64_t inactive = 0;  ///< M · (E − k) · expert: the experts one token does not visit
};

/// The counts of `c` at tensor-parallel size t (t ≥ 1 and f % t = 0: the TP preflight's checks).
MoeCounts moe_counts(const GptConfig& c, int t);

/// preflight.cpp's hook: the parameters one rank holds beyond the dense model's at t.
int64_t moe_extra_params(const GptConfig& c, int t);
/// preflight.cpp's hook: the mean active parameters of one block (for 6·P·N compute), given the
/// dense block's count.
int64_t moe_active_per_layer(const GptConfig& c, int64_t dense_per_layer);

/// The bytes of the EP plan's all-to-alls for one rank.
struct MoeAllToAll {
  int64_t tokens = 0;     ///< T
  int64_t each = 0;       ///< one all-to-all: T · k · h · (ep − 1)/ep · e
  int64_t per_layer = 0;  ///< 4 · each (dispatch and combine, forward and backward)
};

/// T tokens, k, h, ep, e bytes per value. Zero at ep = 1. (T·k·h·e·(ep − 1) / ep, rounded down.)
MoeAllToAll moe_all_to_all_bytes(int64_t tokens, int k, int64_t h, int ep, int64_t e);

/// The EP axis of a job.
struct MoeInput {
  int ep = 1;  ///< --ep
  int dp = 0;  ///< data-parallel replicas when known (--dp, or nodes · GPUs / t), else 0
  double gpu_memory = 80e9;  ///< bytes of one GPU, for whether the model states fit
  int pp = 1;                ///< --pp: pipeline stages (dp above is then per stage)
};

/// The model states of one rank.
struct MoeStates {
  int64_t params = 0;
  int64_t weights = 0, grads = 0, adamw = 0;  ///< bytes, as preflight.h counts them
  int64_t total() const { return weights + grads + adamw; }
};

/// One pipeline stage under --pp (pipeline_plan.h's even split, stage_blocks): its blocks, the
/// MoE blocks among them (GptConfig::is_moe_block of the global index) and one rank's states.
struct MoeStage {
  int stage = 0, first_block = 0, blocks = 0;
  int64_t moe_blocks = 0;
  MoeStates at_t, at_ep;
};

/// What the experts change (fields past `problems` only when there are none).
struct MoePlan {
  MoeInput in;
  std::vector<std::string> problems, notes;
  MoeCounts counts;
  int64_t total = 0, active = 0;  ///< the model's parameters, and those one token uses
  int64_t wpe = 0, biases = 0;    ///< S·h and the linear layers' biases (Mixtral has neither)
  MoeStates at_t, at_ep;          ///< per rank today (experts whole) and under --ep; with
                                  ///< --pp those of the fullest stage's ranks
  std::vector<MoeStage> stages;   ///< --pp > 1: every stage (empty at pp 1)
  int fullest = 0;                ///< the stage whose ranks hold the most bytes under --ep
  MoeAllToAll a2a;
  bool a2a_inside_node = false;
  Link a2a_link;
  double a2a_seconds = 0;  ///< one all-to-all, α–β
};

/// The problems of the MoE and EP axes (--ep without --experts, E % ep, dp % ep, more stages
/// than blocks), then the numbers. `p` is the TP preflight of the model (its problems must be empty for the numbers).
MoePlan plan_moe(const Preflight& p, const MoeInput& in);

/// The MoE section of the report (starts with a blank line, ends with a newline).
std::string moe_report(const Preflight& p, const MoePlan& m);

/// --experts, --top-k, --moe-every, --aux-loss-coef, --z-loss-coef, --capacity-factor and --ep,
/// declared once for tp_train and tp_preflight.
void declare_mixture_of_experts_options(Options& o);

}  // namespace tp
