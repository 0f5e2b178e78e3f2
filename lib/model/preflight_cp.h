// preflight_cp.h — the preflight of context parallelism (CP, `--cp N`): what splitting every
// sequence over cp ranks does to one rank's memory, and what the ring of ring attention moves and
// costs per layer. Arithmetic only, like preflight.h, which it builds on: plan_cp takes the TP
// preflight of the whole sequence and works out the same rank with S/cp positions of it.
//
// The grid (tp × cp × pp × dp, ProcessGrid's numbering): world rank
// r = ((pp_rank · dp + dp_rank) · cp + cp_rank) · t + tp_rank. TP is innermost, CP next, since
// the ring moves K and V in every layer: a CP group is cp ranks t apart, inside one node of G GPUs
// when G is a multiple of t · cp (G not given: each TP group is taken to be one node, as
// pipeline_plan.h does, so the ring crosses nodes as soon as cp > 1).
//
// Memory per rank (shape legend of preflight.h; c = S/(2·cp), e = the bytes of one activation):
//   weights, gradients, AdamW   unchanged: the weights are replicated over CP (ZeRO-1 shards over
//                               dp only in this implementation)
//   activations                 model/memory.h's closed forms at S/cp positions instead of S:
//                               every kept activation is per token (attention keeps the per-row
//                               log-sum-exp, never the S × S scores), so they divide by cp
//   the ring's buffers          the K|V block received and the one computed on, 2 × 2·kv·e with
//                               kv = (S/cp)·B·(nkv/t)·hd: transient, not kept between layers;
//                               counted beside the peak, not in it
//
// The ring's bytes per rank and attention call (parallel/ring_attention.h): forward
// 2·kv·e·(cp − 1), backward 2·kv·e·(cp − 1) for K, V plus 2·kv·e·cp for dK, dV (their last hop
// takes them home); 0 at cp = 1 (plain attention). Time: each hop a send-recv on the CP group's
// link (α–β, observe/alpha_beta.h), against the attention it runs under: causal attention's score
// products, 7·nh·hd·S²·B FLOPs per layer (forward QKᵀ and PV 2·S²·nh·hd each, halved by the mask;
// backward 4 products and the recomputed QKᵀ: 5 halves) over t · cp ranks — the zigzag layout
// gives every rank the same share (2·cp tiles of c²), the contiguous one gives the last rank
// (4cp − 2)/(2cp) of the average, and the slowest rank sets the step.
//
// Once per step: the CP group all-reduces the weight gradients (fp32, P · 4 bytes, averaged), each
// rank having seen only its positions; then dp does, as without CP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "model/memory.h"
#include "model/preflight.h"
#include "observe/simulated_link.h"
#include "parallel/context_parallel.h"

namespace tp {

/// The ring's bytes one rank sends per layer (one attention call forward, one backward).
struct CpRingBytes {
  int64_t kv = 0;        ///< (S/cp)·B·(nkv/t)·hd: the elements of one K (or V) block
  int64_t forward = 0;   ///< 2·kv·e·(cp − 1)
  int64_t backward = 0;  ///< 2·kv·e·(cp − 1) + 2·kv·e·cp
  int64_t total() const { return forward + backward; }
};

/// The ring's bytes per rank and layer for `cfg` (its seq is the whole S, kv() the KV heads) at
/// tp = t, CP size cp, batch B, e bytes per element. All zero at cp = 1.
CpRingBytes cp_ring_bytes(const GptConfig& cfg, int64_t batch, int t, int cp, int64_t e);

/// The CP axis of a job.
struct CpInput {
  int cp = 1;
  CpLayout layout = CpLayout::Zigzag;
  int pp = 1, dp = 1;        ///< the other axes, for the job's size
  double gpu_memory = 80e9;  ///< bytes of one GPU, for "fits"
};

/// What CP changes for one rank (fields past `problems` are filled only when there are none).
struct CpPlan {
  CpInput in;
  std::vector<std::string> problems, notes;
  int64_t local_seq = 0;     ///< S/cp
  std::vector<double> work;  ///< ring_work: tiles of c² each CP rank computes in one forward
  CpRingBytes ring;
  int64_t ring_buffers = 0;  ///< 2 × 2·kv·e, transient
  /// Per layer and rank at S/cp: this implementation's activations, plain TP and TP + SP.
  int64_t act_tp = 0, act_sp = 0;
  MemoryPeak peak;             ///< the preflight's peak with S/cp positions
  int64_t grad_allreduce = 0;  ///< P · 4: the gradients all-reduced over CP once per step
  bool ring_inside_node = false;
  Link ring_link;                ///< NVLink inside a node, else InfiniBand
  double linear_seconds = 0;     ///< per layer, forward + backward: 6·P_layer·(S/cp)·B / t
  double attention_seconds = 0;  ///< per layer: the slowest rank's share of 7·nh·hd·S²·B / t
  double ring_seconds = 0;       ///< per layer: every hop forward and backward on ring_link
  double tp_comm_seconds = 0;    ///< per layer: the TP (or TP + SP) collectives at S/cp, NVLink
  double tp_comm_bytes = 0;      ///< their bytes per rank (ring model)
  double grad_allreduce_seconds = 0;  ///< once per step, on ring_link
};

/// The problems of the CP axis alone (context_parallel.h's cp_problems, S/cp divisible by t under
/// SP, the job's size tp·cp·pp·dp), then everything above. `p` is the TP preflight of the whole
/// sequence (its problems must be empty for the numbers).
CpPlan plan_cp(const Preflight& p, const CpInput& in);

/// The CP section of the report (starts with a blank line, ends with a newline).
std::string cp_report(const Preflight& p, const CpPlan& c);

/// --cp and --cp-layout, declared once for tp_train and tp_preflight (the same words, bounds and
/// defaults, as declare_pipeline_options does for --pp).
void declare_context_parallel_options(Options& o);

}  // namespace tp
