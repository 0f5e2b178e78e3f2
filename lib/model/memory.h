// memory.h — the activation memory of one transformer block, in closed form.
//
// What a block keeps for backward on one rank, for this implementation's choices (fp32 = 4 bytes
// per value, bf16 = 2, see Precision below; dropout masks stored as fp32) with recompute = none
// (nothing recomputed except the sequence-parallel all-gather and attention's scores, which every
// backward recomputes from the kept log-sum-exp; selective and full below).
// With N = s·b tokens, h hidden, nh / nkv heads of size hd, ffn the MLP size, t ranks, and n = N/t
// under sequence parallelism (N without):
//
//   ln_1 input                  n·h        + its statistics: 2n (LayerNorm: μ, rstd) or n (RMSNorm)
//   attention input             n·h        (the ln_1 output; under SP the local shard, re-gathered
//                                           in backward)
//   q, k, v                     N·(nh + 2 nkv)·hd / t
//   attention log-sum-exp       b·(nh/t)·s, f32 in either precision (the S × S probabilities are
//                               never kept: backward recomputes them from it, core/device.h)
//   attention output (ctx)      N·nh·hd / t (input of the row-parallel c_proj)
//   dropout mask (p > 0)        n·h
//   ln_2 input                  n·h        + statistics
//   MLP input                   n·h
//   fc1 output (up)             N·ffn / t  (+ N·ffn / t for SwiGLU's gate)
//   activation output           N·ffn / t  (input of the row-parallel c_proj)
//   dropout mask (p > 0)        n·h
//
// For GPT-2's shape (nkv = nh, ffn = 4h, GeLU, LayerNorm, dropout on) this is, in bytes,
//   TP only:  4·[sbh(6 + 12/t) + 4sb] + 4·nh·s·b/t   =  sbh(24 + 48/t) + 16sb + 4·nh·sb/t
//   TP + SP:  sbh·72/t + 16sb/t + 4·nh·sb/t
// the fp32 analogue of Korthikanti et al.'s selective-recomputation rows, sbh(10 + 24/t) and
// sbh·34/t, for 16-bit activations with 1-byte masks (their no-recomputation rows add
// 5as/(ht)·sbh, the s² probabilities and their dropout mask, which this attention never keeps):
// sequence parallelism divides the part that TP alone leaves replicated (the n·h terms) by t too.
//
// Recomputation (cfg.recompute, model/recompute.h) changes what is kept:
//   selective  the same as none: there is no s² term left to drop (model/recompute.h).
//   full       the block's input only: 4·n·h, i.e. 4sbh (TP only) or 4sbh/t (TP + SP)
//              (Korthikanti: 2sbh, the 16-bit input, without SP).
//
// Outside the blocks one forward keeps (head_activation_bytes): the token ids N (as fp32), the
// embedding's dropout mask n·h (p > 0), ln_f's input n·h and statistics, ln_f's output for the
// head N·h (gathered under SP), and the logits N·V'/t (turned into dlogits in place).
//
// The peak of a step (memory_peak): the forward keeps L blocks + the head; then the backward of
// each block computes again what its mode dropped and holds it while that block's backward runs
// (recompute_rerun_bytes: full everything but the kept input; selective nothing), so one
// block's rerun adds to the peak. Model states: weights 4P (the fp32 master; under bf16 + 2P for
// its compute copy, 6P), gradients 4P (fp32 in either precision), AdamW's moments 8P, or
// 8·⌈P/dp⌉ with ZeRO-1 over dp replicas (P: this rank's parameter elements): 16 B per parameter
// in fp32, 18 B in bf16 — mixed precision does not halve the model states, it halves activations.
// Precision (cfg.precision, docs/model.md "Precision"): under bf16 every activation above takes 2
// bytes instead of 4, except the norms' statistics and the dropout masks, which stay f32 (4 B);
// outside the blocks ln_f's input and output and the logits take 2 B, the token ids, the
// embedding's mask and ln_f's statistics 4 B.
// GPT-2's shape in bf16, TP only: sbh(16 + 24/t) + 16sb + 4·nh·sb/t (the masks 8sbh of it at
// 4 B; Korthikanti's 1-byte masks would make them 2sbh, which gives their sbh(10 + 24/t)).
#pragma once

#include <cstdint>

#include "model/config.h"

namespace tp {

/// Bytes one block keeps for backward on one rank (see above); cfg.sp selects n = N/t. For GPT-2's
/// shape in fp32 that is \f$sbh\,(24 + 48/t) + 16sb + 4\,n_h s^2 b/t\f$ with TP alone and
/// \f$72\,sbh/t + 16sb/t + 4\,n_h s^2 b/t\f$ with TP + SP: the fp32 counterparts of Korthikanti et
/// al.'s \f$sbh\,(10 + 24/t + 5as/(ht))\f$ and \f$sbh\,(34/t + 5as/(ht))\f$ (16-bit activations).
int64_t block_activation_bytes(const GptConfig& cfg, int64_t seq, int64_t batch, int t);
/// The part of block_activation_bytes held in tensors of `dtype`: under bf16, 2 B per activation
/// in bf16 and 4 B per statistic and mask value in f32; in fp32 all of it in f32.
int64_t block_activation_bytes(const GptConfig& cfg, int64_t seq, int64_t batch, int t,
                               Dtype dtype);

/// Bytes one forward keeps outside the blocks on one rank (the ledger's layer -1; see above).
int64_t head_activation_bytes(const GptConfig& cfg, int64_t seq, int64_t batch, int t);

/// Bytes the backward of one block holds again under cfg.recompute: 0 (none), the probabilities
/// (selective), the block's activations less its kept input (full).
int64_t recompute_rerun_bytes(const GptConfig& cfg, int64_t seq, int64_t batch, int t);

/// One rank's peak memory, in bytes, split the way the memory stack reasons about it.
struct MemoryPeak {
  int64_t weights = 0, grads = 0, optimizer = 0, activations = 0;
  int64_t total() const { return weights + grads + optimizer + activations; }
  /// "weights", "gradients", "optimizer state" or "activations": the largest part.
  const char* largest() const;
};

/// The peak of one training step per rank in cfg.precision (see above): `micro_batch` sequences of
/// `seq` tokens per forward, `params` this rank's parameter elements, AdamW sharded over `zero_dp`
/// replicas (1: not sharded).
MemoryPeak memory_peak(const GptConfig& cfg, int64_t seq, int64_t micro_batch, int t,
                       int64_t params, int64_t zero_dp);

}  // namespace tp
