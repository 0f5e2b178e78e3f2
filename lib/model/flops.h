// flops.h — the model FLOPs of a training step, for the progress line's FLOP/s, MFU and HFU.
//
// Per token of the GLOBAL model (every t: the same work, divided over the ranks), forward plus
// backward, counting a multiply-add as 2 FLOPs and matrix products only:
//
//   model FLOPs / token = 6·N + 12·L·h·S                  (PaLM, Chowdhery et al. 2022, appendix B)
//
// 6·N: each of the N weights a token meets in a matrix product costs 2 FLOPs forward and 4 backward
// (the input's and the weight's gradient). 12·L·h·S: attention's QKᵀ and PV, 2·2·S·h per token and
// layer forward, times 3 with backward, at the training sequence S (the full S × S, as the formula
// counts it, though the mask makes half of it zero).
//
// N here: every parameter of the blocks and ln_f, and the LM head's V·h once. The head is wte when
// tied (one V·h matrix, counted once); an untied model's wte is a lookup, no FLOPs, and not counted.
// The position table wpe (S·h) is a lookup too and not counted. The norms and biases are in N (they
// cost a few FLOPs per element, not 6, but are a rounding error of N). N is the real vocabulary's,
// not the padding rows'.
//
// HFU counts what the hardware runs besides: the attention backward's recomputation of the scores
// QKᵀ from the kept log-sum-exp (FlashAttention's backward; every mode), + 2·L·h·S per token; and
// full recomputation's extra forward (model/recompute.h), + 2·N_blocks + 4·L·h·S. Selective
// recomputation adds nothing: attention keeps no S × S tensor, so there is nothing left for it to
// rerun. MFU divides the model FLOPs (the work the model needs, whatever the implementation) by
// the peak, HFU the hardware FLOPs.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace tp {

struct TokenFlops {
  int64_t n = 0;         ///< N (see above)
  int64_t n_blocks = 0;  ///< the L blocks' parameters (what a full recomputation multiplies again)
  double model = 0;      ///< 6·N + 12·L·h·S
  double hardware = 0;   ///< model + recomputation's extra forward
};

/// The FLOPs per token of training `cfg` on sequences of `seq` tokens (cfg.recompute for HFU).
TokenFlops token_flops(const GptConfig& cfg, int64_t seq);

/// Model FLOP/s per rank: flops_per_token · tokens of the step / seconds / ranks.
double flops_per_rank(double flops_per_token, double tokens, double seconds, int ranks);

}  // namespace tp
