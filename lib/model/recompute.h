// recompute.h — activation recomputation: what a transformer block keeps for backward and what it
// computes again there (GptConfig::recompute, tp_train --recompute).
//
//   none       every block keeps what its backward reads (model/memory.h lists it).
//   selective  Korthikanti et al.'s selective recomputation ("Reducing Activation Recomputation in
//              Large Transformer Models") drops the attention core's S × S tensors and recomputes
//              them in backward. This library's attention never keeps them: its forward keeps the
//              per-row log-sum-exp, (B, nh/t, S), and its backward recomputes the probabilities
//              from q, k and that (FlashAttention's way, core/device.h), in every mode. So
//              selective keeps what `none` keeps and does no extra work; the name stays, so that
//              configurations that ask for it run and show that it is already paid for.
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
