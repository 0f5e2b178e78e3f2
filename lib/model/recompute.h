// recompute.h — activation recomputation: what a transformer block keeps for backward and what it
// computes again there (GptConfig::recompute, tp_train --recompute).
//
//   none       every block keeps what its backward reads (model/memory.h lists it).
//   selective  the attention core is not kept: the softmax probabilities (B, nh/t, S, S), the one
//              activation that grows with s², are recomputed in backward from the kept q, k, v
//              (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
//              Models", selective recomputation). Extra work: one attention_forward per block.
//   full       each block keeps only its input (under SP its s/t-token shard) and reruns its whole
//              forward at the start of its backward, collectives included. Extra work: one forward.
//
// The rerun uses the same kernels, inputs and counter-keyed dropout masks (keyed by step, layer,
// site, token, feature), so every gradient is bitwise the one `none` gives.
#pragma once

#include <string>

namespace tp {

enum class Recompute { None, Selective, Full };

/// "none" | "selective" | "full"; anything else is bad input (one line naming the choices).
Recompute parse_recompute(const std::string& name);
const char* recompute_name(Recompute mode);

}  // namespace tp
