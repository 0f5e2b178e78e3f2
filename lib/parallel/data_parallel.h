// data_parallel.h — data parallelism over the DP axis of a ProcessGrid (parallel/process_grid.h).
//
// Every DP rank holds the same weights, runs a different slice of the global batch and, after
// backward, the gradients are averaged over the DP group (average_gradients: one all-reduce of all
// of them packed together), so every replica takes the same AdamW step that dp = 1 would take on
// the whole batch: the mean loss over B sequences is the mean of the dp slices' mean losses when
// the slices are equal, and so is its gradient. (ZeRO-1 will shard the optimizer state here;
// pipeline_parallel sits beside this file.)
#pragma once

#include <cstdint>

#include "core/communicator.h"
#include "core/device.h"
#include "parallel/param.h"

namespace tp {

/// Data parallelism's step after backward: g ← (1/dp) Σ_dp g for every parameter gradient (this
/// rank's shard), and *loss ← the mean of the dp losses, in one all-reduce over `dp` of everything
/// packed together (label "data_parallel_grads"). Afterwards every DP rank holds the gradient of
/// the global batch's mean loss. Nothing happens when dp.size() == 1. `loss` may be null.
void average_gradients(Communicator& dp, Device& device, ParamList& params, float* loss);

/// Elements average_gradients moves per rank: every gradient shard, plus one for the loss.
int64_t data_parallel_elements(const ParamList& params);

}  // namespace tp
