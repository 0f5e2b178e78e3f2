// preflight.h — [A2]'s pre-launch checklist as arithmetic: a model configuration and a
// tensor-parallel size t in, every problem, the shard of every tensor, the memory of each rank,
// the collectives of a step and their predicted time out. No communicator, no device, no MPI:
// everything here is computed from the numbers (tools/tp_preflight prints it; tp_train runs the
// same checks before it builds the model).
//
// Shape legend: L layers, h hidden, nh query heads, nkv key/value heads, hd = h/nh, f the MLP
// inner size, V the vocabulary (V' padded), S the sequence, B the batch, N = S·B tokens, t the
// tensor-parallel size, d the bytes of one value (--dtype).
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
//
// Problems (each one line with its fix; any of them stops tp_train and makes tp_preflight exit 2):
// the checks of GptConfig::problems — h % nh, nh % t (each rank owns whole heads), nh % nkv,
// nkv % t, f % t, S % t under sequence parallelism — plus the job's size (t ≤ nodes · GPUs per
// node). When nkv < t and t % nkv = 0 the fix is KV-head replication: every KV head is stored on
// t/nkv ranks, so each rank holds one (vLLM's QKVParallelLinear does this; this project's tp::Gpt
// does not, so the preflight plans it only when asked, PreflightInput::kv_replication).
// Notes (applied fixes, no error): the vocabulary padded to V' = a multiple of t
// (GptConfig::padded_vocab, the rule VocabParallelEmbedding uses); KV-head copies.
// Warnings: a TP group that spans nodes (t > GPUs per node: every all-reduce crosses the slow
// link), and communication above 30 % of the step on the fast link: the rule of [A1] §6 and of
// [A2]'s checklist (§6.4), whose share is of the whole step, comm / (comm + compute) with the two
// run one after the other (comm_share), not comm / compute. Qwen3-8B at t = 8 on NVLink: 1.21 ms
// of communication per layer against 2.96 ms of compute is 29 %: no warning (with SP, 34 %).
//
// Shards (the layout of tp::Gpt, parallel/param.h): weights are stored [in, out].
//   column-parallel (q, k, v, c_fc, c_gate)   W [in, out] → [in, out/t], bias [out] → [out/t]
//   row-parallel (attn.c_proj, mlp.c_proj)    W [in, out] → [in/t, out], bias [out] replicated
//   vocabulary-parallel (wte, lm_head)        W [V', h]   → [V'/t, h]
//   norms, wpe                                replicated
//
// Memory per rank (P = the parameters this rank holds, replicated ones included):
//   weights      P · d (d < 4: the bf16 compute copy of --precision bf16)
//   gradients    P · 4 (this implementation keeps weight gradients in fp32 in either precision)
//   AdamW        P · 8 (exp_avg and exp_avg_sq in fp32) + P · 4 for the fp32 master when d < 4
//   So the model states are 16 B per parameter in fp32 (4 + 4 + 8) and 18 B in bf16 mixed
//   precision (2 + 4 + 4 + 8; Megatron's bf16 gradients make it 16): mixed precision does not
//   halve them, as a "bf16 halves the memory" reading suggests; it halves activations and bytes
//   on the wire.
//   activations  per layer, two ways:
//     this implementation (d bytes per activation, statistics and masks as fp32):
//     block_activation_bytes (model/memory.h), which
//     tp_train checks against its memory ledger, with and without SP;
//     Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
//     16-bit values, 1-byte dropout masks, a GPT layer with f = 4h and nkv = nh):
//       no TP     sbh · 34           + 5 a s² b
//       TP        sbh · (10 + 24/t)  + 5 a s² b / t
//       TP + SP   sbh · 34/t         + 5 a s² b / t
//     (a = nh); FlashAttention keeps no s × s scores, which drops the 5 a s² b terms ([A3]'s
//     table: 34, 13 and 4.25 · sbh at t = 8).
//   logits       N · V'/t · 4 (fp32; the vocabulary-parallel head never holds all V' columns)
//
// Collectives of one training step (this implementation's, as its CommLedger records them; the
// ring model's bytes per rank from ring_wire_bytes):
//   per layer, plain TP:  forward 2 all-reduces of N·h (g after attention and MLP), backward 2
//                         (f before them)
//   per layer, TP + SP:   forward 2 all-gathers + 2 reduce-scatters of N·h; backward 4
//                         all-gathers (dY of each row-parallel output, and the kept input shard
//                         gathered again) + 2 reduce-scatters (dX)
//   once per step:        embedding (all-reduce, SP: reduce-scatter), ln_f's output for the head
//                         (SP: all-gather), the loss's three all-reduces of N numbers (row max,
//                         Σ exp, target logit), the head's dX (all-reduce, SP: reduce-scatter), the
//                         embedding's backward (SP: all-gather), SP's partial gradients of the
//                         replicated parameters (one all-reduce), the gradient norm (one number)
//
// Time per layer: each collective by the α–β ring model (predict_seconds, observe/alpha_beta.h)
// on the NVLink and InfiniBand presets (observe/simulated_link.h); compute by 6·P_layer·N/t FLOPs
// (forward 2, backward 4 per parameter and token; attention's s² term not counted) at a stated
// FLOP rate. [A3]'s example (Qwen3-8B, h = 4096, S = 8192, B = 1, bf16, t = 8): one
// all-reduce of [1, 8192, 4096] · 2 bytes = 64 MiB sends 2 · 7/8 · 64 = 112 MiB per rank:
// 0.26 ms on NVLink (450 GB/s), 2.3 ms on IB (50 GB/s), β terms alone; compute ≈ 3 ms at
// 400 TFLOPS.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/memory.h"
#include "observe/simulated_link.h"
#include "parallel/param.h"

namespace tp {

/// What the preflight looks at: the model, the step's shape and the job.
struct PreflightInput {
  GptConfig model;    ///< layers, hidden, heads, kv_heads, ffn, vocab, seq, act, norm,
                      ///< tied, sp, pad_vocab_multiple
  int64_t batch = 8;  ///< B, sequences per step (of this TP group)
  int t = 1;          ///< tensor-parallel size
  std::string t_label = "the number of ranks";  ///< what t is, where a problem names it
  int64_t dtype_bytes = 4;      ///< d: bytes per weight, gradient, activation and message
  bool kv_replication = false;  ///< plan nkv < t by replicating KV heads (tp::Gpt cannot)
  int nodes = 0;                ///< nodes of the job; 0 = not given
  int gpus_per_node = 0;        ///< GPUs per node; 0 = not given
  double flops = 400e12;        ///< FLOP/s of one GPU, for the compute time
  int zero_dp = 1;  ///< ZeRO-1 over this many DP replicas (1: none): AdamW's moments ⌈P/dp⌉ each
  /// The memory stack (issue 22): model.recompute decides what a block keeps; the batch runs as
  /// this many micro-batches of batch / micro_batches sequences (it must divide the batch).
  int micro_batches = 1;
};

/// One parameter as tp::Gpt holds it (the same name, global shape and split as its Param).
struct PreflightTensor {
  std::string name;  ///< "transformer.wte.weight"; per-layer ones with layer 0's name
  Shape global;      ///< global shape (V' rows for the vocabulary-parallel ones)
  Split split = Split::Replicated;
  Shape local;             ///< this rank's shard (every rank's is the same shape)
  bool per_layer = false;  ///< one per block: "transformer.h.0." stands for every l
};

/// One kind of collective of a training step.
struct PlannedCollective {
  std::string op;        ///< as the CommLedger names it: "all_reduce", "all_gather", ...
  int64_t elements = 0;  ///< N of the ledger: the logical buffer's values
  int64_t bytes = 0;     ///< elements · d (the loss's and the norm's numbers: · 4)
  int count = 1;         ///< how many (per layer when per_layer)
  bool per_layer = false;
  std::string pass;  ///< "forward", "backward" or "after backward"
  std::string why;   ///< "g after attention and MLP", ...
};

/// The time of the collectives of one layer on one link, against compute.
struct LinkEstimate {
  Link link;
  double all_reduce_beta = 0;  ///< one all-reduce of N·h: the β term alone ([A3]'s number)
  double all_reduce = 0;       ///< the same with its 2 (t − 1) α
  double layer_comm = 0;       ///< one layer's collectives, forward + backward, plain TP
  double layer_comm_sp = 0;    ///< the same with sequence parallelism
};

/// Everything the preflight found. When `problems` is not empty, only problems, warnings and notes
/// are filled.
struct Preflight {
  PreflightInput in;
  GptConfig cfg;  ///< the model as planned (kv_heads = t under KV-head replication)
  std::vector<std::string> problems, warnings, notes;
  int64_t padded_vocab = 0;  ///< V'
  int64_t kv_copies = 1;     ///< ranks holding each KV head (t / nkv under replication)

  std::vector<PreflightTensor> tensors;  ///< in tp::Gpt's ParamList order
  int64_t params_total = 0;              ///< the model's parameters (real V rows, one copy each)
  int64_t params_per_rank = 0;           ///< P: held by one rank, padding and replicas included
  int64_t params_per_layer = 0;          ///< one block's parameters (global), for 6ND
  int64_t weight_bytes = 0, grad_bytes = 0, adamw_bytes = 0;  ///< per rank

  /// Per layer and rank: this implementation (fp32), plain TP and TP + SP.
  int64_t act_impl_tp = 0, act_impl_sp = 0;
  /// Per layer and rank, Korthikanti et al. (16-bit), with the 5as²b terms and without them
  /// (FlashAttention): no TP, TP, TP + SP.
  double act_k_none = 0, act_k_tp = 0, act_k_sp = 0;
  double act_k_none_flash = 0, act_k_tp_flash = 0, act_k_sp_flash = 0;
  int64_t logits_bytes = 0;  ///< per rank: N · V'/t fp32 values
  /// The peak per rank in the precision dtype_bytes names (4: fp32, else bf16): weights P·4 (the
  /// fp32 master; bf16 + P·2 for its compute copy), gradients P·4, AdamW 8·⌈P/zero_dp⌉, and activations = what one micro-batch's forward keeps
  /// (L blocks under model.recompute + the embedding and head, model/memory.h) + what the backward
  /// of one block computes again (recompute_rerun_bytes). Transient buffers (dX, a GEMM's output)
  /// are not counted.
  MemoryPeak peak;

  std::vector<PlannedCollective> collectives, collectives_sp;  ///< one step: plain TP, TP + SP
  double layer_compute = 0;         ///< seconds of one layer's forward + backward on one rank
  std::vector<LinkEstimate> links;  ///< NVLink, InfiniBand
};

/// Communication's share of a step in which it runs after the compute, not under it:
/// comm / (comm + compute), the share the 30 % rule of [A1] and [A2] is about (0 when both are 0).
double comm_share(double comm, double compute);

/// Runs every check and, when none fails, works out shards, memory, collectives and times.
Preflight preflight(const PreflightInput& in);

/// The collectives of one training step of `cfg` (its sp decides which) at t with B sequences of
/// cfg.seq tokens, d bytes per value. Empty at t = 1 (nothing moves).
std::vector<PlannedCollective> step_collectives(const GptConfig& cfg, int64_t batch, int t,
                                                int64_t dtype_bytes);

/// A readable report of everything in `p` (several sections, '\n'-separated, ending in one).
std::string preflight_report(const Preflight& p);

/// One error message for a list of problems: the first line "N problems: <first>", every further
/// problem on a line of its own, aligned under the first (a single problem: just it).
std::string problems_message(const std::vector<std::string>& problems);

}  // namespace tp
