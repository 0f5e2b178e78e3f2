// data_parallel.h — data parallelism over the DP axis of a ProcessGrid (parallel/process_grid.h).
//
// Every DP rank holds the same weights, runs a different slice of the global batch and, after
// backward, the gradients are averaged over the DP group (average_gradients: one all-reduce of all
// of them packed together), so every replica takes the same AdamW step that dp = 1 would take on
// the whole batch: the mean loss over B sequences is the mean of the dp slices' mean losses when
// the slices are equal, and so is its gradient.
//
// ZeRO-1 (Rajbhandari et al.; Megatron's distributed optimizer) shards the optimizer state over
// the DP group instead: the gradients are reduce-scattered (reduce_scatter_gradients), DP rank d
// runs AdamW on its 1/dp of the flattened parameters of its TP shard (ZeroPartition), and the
// updated values are all-gathered (all_gather_parameters). The wire bytes are those of the
// all-reduce (a reduce-scatter plus an all-gather is how a ring all-reduces); the moments per rank
// fall by dp. Pipeline parallelism sits beside this file (parallel/pipeline_parallel.h).
//
// Shape legend: the gradients and parameters are this rank's TP shards, packed in ParamList order;
// dp = the DP group's size.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <functional>

#include "core/communicator.h"
#include "core/device.h"
#include "parallel/param.h"

namespace tp {

/// Data parallelism's step after backward: g ← (1/dp) Σ_dp g for every parameter gradient (this
/// rank's shard), and *loss ← the mean of the dp losses, in one all-reduce over `dp` of everything
/// packed together (label "data_parallel_grads"). Afterwards every DP rank holds the gradient of
/// the global batch's mean loss. Nothing happens when dp.size() == 1. `loss` may be null.
/// `label`: the ledger's name for the all-reduce (context parallelism averages over its CP group
/// with this too: "context_parallel_grads").
void average_gradients(Communicator& dp, Device& device, ParamList& params, float* loss,
                       const char* label = "data_parallel_grads");

/// Elements average_gradients moves per rank: every gradient shard, plus one for the loss.
int64_t data_parallel_elements(const ParamList& params);

/// ZeRO-1's partition of `params` (this rank's TP shards) packed in ParamList order into one flat
/// vector of `total` elements, padded with zeros to `padded` (a multiple of dp): DP rank d owns
/// elements [begin, end) = [d·padded/dp, (d+1)·padded/dp).
struct ZeroPartition {
  int64_t total = 0, padded = 0, begin = 0, end = 0;
  ZeroPartition(const ParamList& params, int dp_size, int dp_rank);
  int64_t shard() const { return end - begin; }
  /// For every parameter overlapping [begin, end): fn(param index, first element inside the
  /// parameter, first element inside the shard, count).
  void for_each_segment(const ParamList& params,
                        const std::function<void(size_t, int64_t, int64_t, int64_t)>& fn) const;
};

/// ZeRO-1 after backward: this rank's shard (ZeroPartition::shard() elements) of the DP-averaged,
/// flattened gradients, in one reduce-scatter over `dp` (label "zero_grads"), and *loss ← the mean
/// of the dp losses (a one-element all-reduce, "zero_loss"; `loss` may be null). With dp = 2 each
/// sum has two terms, so it is bitwise average_gradients'. The parameters' own grad tensors keep
/// this replica's local gradients.
Tensor reduce_scatter_gradients(Communicator& dp, Device& device, const ParamList& params,
                                float* loss);

/// ‖g‖₂ of the whole model from the ZeRO-1 shards: the squares of this shard's split and
/// replicated parts summed over `dp` (one all-reduce of two numbers, "zero_grad_norm"), the split
/// part then over `tp` ("grad_norm"), replicated parameters counted once, as global_grad_norm.
/// `counted`, when given, leaves out the parameters it says false for (a pipeline's last stage:
/// its copy of the tied wte, which the first stage counts).
double zero_grad_norm(Communicator& dp, Communicator& tp, Device& device, const ParamList& params,
                      const Tensor& grad_shard,
                      const std::function<bool(const Param&)>& counted = {});

/// This rank's shard of the flattened parameter values (a copy), for AdamW to update.
Tensor gather_value_shard(Device& device, const ParamList& params, const ZeroPartition& part);

/// ZeRO-1's last step: all-gather every DP rank's updated value shard over `dp` ("zero_params")
/// and write the result into the parameters, so every replica holds the same weights again.
void all_gather_parameters(Communicator& dp, Device& device, ParamList& params,
                           const Tensor& value_shard);

}  // namespace tp
