// pipeline_plan.h — the preflight of a tp × pp × dp layout: what each pipeline stage holds, how
// much of the step the pipeline idles (the bubble), and what crosses each kind of link in one
// step. Arithmetic only, like preflight.h (which it builds on for the TP part): no communicator,
// no device. tools/tp_preflight prints it with --pp; lesson 16 uses it for a 70B model on 8 × 8
// GPUs.
//
// Legend: L blocks, N = pp stages, m micro-batches per step, t = tp, D = dp, B the global batch
// (sequences per step), b = B / (D · m) the sequences of one micro-batch of one replica, S the
// sequence, h hidden, d bytes per value, G GPUs per node.
//
// Stages (a stage = a contiguous range of blocks): stage s holds blocks [first, first + L_s),
// the even split L_s = ⌊L/N⌋, plus one for the first L mod N stages. Stage 0 also holds the
// embeddings (wte, wpe), stage N − 1 ln_f, the head and the loss. A tied head is wte itself, so
// with N > 1 the first and the last stage both hold wte's shard and sum its gradient between
// them once per step (Megatron's embedding group); --untie gives the last stage lm_head instead.
//
// Memory per rank of stage s (P_s = the parameters of its shard; weights, gradients and AdamW as
// in preflight.h, without ZeRO):
//   weights P_s·d, gradients P_s·d, AdamW P_s·8 (+ P_s·4 master copy when d < 4)
//   activations  k_s · L_s · A(b)   A(b) = block_activation_bytes (model/memory.h) of a micro-
//                                   batch, k_s the micro-batches in flight at the peak:
//                                     AFAB (all forwards, then all backwards)  k_s = m
//                                     1F1B (N − s − 1 warm-up forwards, then one forward one
//                                     backward)                               k_s = min(m, N − s)
//   logits (last stage)  b·S·V'/t·4: one micro-batch's, its loss and gradient are taken at once
//
// The bubble: every stage waits N − 1 micro-batch slots of the m + N − 1 a step takes (the fill
// and the drain), the same for both schedules: bubble = (N − 1) / (m + N − 1).
//
// Traffic of one step, bytes each rank sends (the ring model of observe/alpha_beta.h) and the
// α–β time, on the link its group lies on: a group inside one node uses the NVLink preset, one
// that spans nodes InfiniBand (observe/simulated_link.h). Ranks are placed as ProcessGrid numbers
// them, r = (pp_rank · D + dp_rank) · t + tp_rank, G consecutive ranks per node:
//   TP  the blocks' collectives (step_collectives, per layer) of each micro-batch:
//       m · L_s · Σ ring bytes (the embedding's, head's and loss's few are left out)
//   PP  the activation forward and its gradient backward, one message each per micro-batch and
//       stage boundary: S·b·h·d each (S·b·h·d / t under SP: each TP rank sends its shard), so
//       m messages per direction; stage 0 and N − 1 send in one direction only
//   DP  one all-reduce of the stage's gradients per step: 2 (D − 1)/D · P_s·d
//   tied embedding: one all-reduce of wte's gradient shard between the first and last stage
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "model/preflight.h"
#include "observe/simulated_link.h"

namespace tp {

/// The two pipeline schedules of this project.
enum class PpSchedule { Afab, OneFOneB };
/// "afab" → Afab, "1f1b" → OneFOneB; anything else a bad-input tp::Error naming both.
PpSchedule parse_pp_schedule(const std::string& name);
/// The name parse_pp_schedule takes.
const char* pp_schedule_name(PpSchedule s);

/// --pp and --schedule, declared once for tp_train and tp_preflight, so both take the same values
/// with the same words and the same defaults: --pp in [1, 1024] (an int), --schedule afab
/// (default) or 1f1b.
void declare_pipeline_options(Options& o);

/// The bubble of N stages and m micro-batches: (N − 1) / (m + N − 1).
double pipeline_bubble(int stages, int micro_batches);

/// Activation micro-batches stage `stage` of `stages` keeps at its peak: m (AFAB) or
/// min(m, N − stage) (1F1B).
int micro_batches_in_flight(PpSchedule s, int stages, int stage, int micro_batches);

/// [first block, number of blocks] of each of `stages` stages over `layers` blocks (even split,
/// the first layers mod stages stages one more).
std::vector<std::pair<int, int>> stage_blocks(int layers, int stages);

/// P_s: the parameters one rank of stage `stage` of `stages`, holding `blocks` blocks, keeps:
/// `blocks` dense blocks' shards of the TP preflight `tp`, the embeddings on stage 0, ln_f and the
/// head on the last (a tied head: wte's shard again when the last stage is not the first).
int64_t stage_params(const Preflight& tp, int stages, int stage, int blocks);

/// A layout to plan: the model and job of the TP preflight (base.batch = B, the global batch;
/// base.t = tp) and the outer axes.
struct PipelineInput {
  PreflightInput base;
  int pp = 1;             ///< N, pipeline stages
  int dp = 1;             ///< D, data-parallel replicas
  int micro_batches = 1;  ///< m, per replica and step
  PpSchedule schedule = PpSchedule::OneFOneB;
};

/// What one kind of link carries in one step, for one rank.
struct LinkTraffic {
  bool inside_node = true;  ///< the group lies on one node (NVLink) or spans nodes (InfiniBand)
  Link link;                ///< the preset used
  int64_t bytes = 0;        ///< sent per rank per step
  double seconds = 0;       ///< α–β time of those messages, one after the other
};

/// One stage, as one of its ranks sees it.
struct StagePlan {
  int stage = 0, first_block = 0, blocks = 0;
  bool embeddings = false, head = false;  ///< holds wte + wpe; holds ln_f + head + loss
  int64_t params = 0;                     ///< P_s: this rank's shard
  int64_t weight_bytes = 0, grad_bytes = 0, adamw_bytes = 0;
  int in_flight = 0;               ///< k_s
  int64_t act_per_micro = 0;       ///< L_s · A(b)
  int64_t activation_bytes = 0;    ///< k_s · L_s · A(b)
  double activation_bytes_16 = 0;  ///< the same by Korthikanti et al. (16-bit, FlashAttention)
  int64_t logits_bytes = 0;        ///< last stage only
  int64_t total_bytes = 0;         ///< everything above
  double compute_seconds = 0;      ///< m · L_s · one layer's forward + backward of a micro-batch
  LinkTraffic tp, pp, dp, tied;    ///< per step (tied: the embedding group's all-reduce)
};

/// Everything the pipeline preflight found; when `problems` is not empty nothing else is filled.
struct PipelinePlan {
  PipelineInput in;
  std::vector<std::string> problems, notes;
  Preflight tp;               ///< the TP preflight of one micro-batch (batch = b) at t
  int64_t micro_batch = 0;    ///< b
  double bubble = 0;          ///< (N − 1) / (m + N − 1)
  int64_t pp_message = 0;     ///< bytes of one activation (or gradient) sent between stages
  double layer_tp_bytes = 0;  ///< one layer's TP bytes sent per rank, one micro-batch
  std::vector<StagePlan> stages;
  double step_seconds = 0;  ///< the slowest stage's compute ÷ (1 − bubble); no communication
};

/// Runs the TP preflight and the pipeline's own checks (stages ≤ layers, 1F1B needs m ≥ N, the
/// batch splits into D · m micro-batches, tp · pp · dp ≤ the job's GPUs), then plans each stage.
PipelinePlan plan_pipeline(const PipelineInput& in);

/// A readable report of the stages, the bubble and the traffic (several lines, ending in '\n').
std::string pipeline_report(const PipelinePlan& p);

}  // namespace tp
