// adamw.h — AdamW with optimizer state sharded like the parameters, and global gradient-norm
// clipping that counts a replicated parameter once; ZeRO-1 (the moments sharded over the DP group).
//
// Shape legend: the moments m, v have the shape of their parameter's shard; dp = the DP group's
// size (ZeRO-1 keeps 1/dp of them).
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <utility>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "parallel/data_parallel.h"
#include "parallel/param.h"

namespace tp {

/// ‖g‖₂ over the whole model: Σ of the squares of every split shard, all-reduced over the group
/// (each rank holds a different part), plus the squares of every replicated parameter counted once
/// (every rank holds the same copy; summing it over ranks would count it t times).
double global_grad_norm(Communicator& comm, Device& device, const ParamList& params);

/// The factor that scales the gradients to norm max_norm when they are longer: min(1, max/‖g‖).
/// max_norm ≤ 0 disables clipping (factor 1).
float clip_factor(double grad_norm, float max_norm);

/// AdamW (decoupled weight decay, bias-corrected moments). exp_avg and exp_avg_sq have the shape
/// of each parameter's shard: a rank updates only the slice it owns, and the update of a
/// replicated parameter is computed identically on every rank.
class AdamW {
 public:
  AdamW(Device& device, const ParamList& params, const AdamWParams& hp);
  /// One update of every parameter with learning rate `lr`, gradients scaled by `grad_scale`.
  /// Weight decay applies where Param::decay is set.
  void step(const ParamList& params, float lr, float grad_scale);
  int64_t steps() const { return steps_; }  ///< updates done (the bias-correction counter)
  void set_steps(int64_t n) { steps_ = n; }
  /// First and second moments, aligned with the ParamList (Tensor handles: writable contents).
  const std::vector<Tensor>& exp_avg() const { return m_; }
  const std::vector<Tensor>& exp_avg_sq() const { return v_; }
  const AdamWParams& hyper() const { return hp_; }

  /// ZeRO-1: from now on this rank keeps the moments of its 1/dp of the flattened parameters only
  /// (ZeroPartition), taken from the per-parameter moments it holds now (zeros, or what a
  /// checkpoint loaded), which are freed. Local: no communication.
  void shard_over(Communicator& dp, const ParamList& params);
  /// ZeRO-1 under expert parallelism (parallel/expert_parallel.h): the experts' moments
  /// (Param::expert ≥ 0) sharded over `edp`, the ranks holding the same experts, and the rest's
  /// over `dp`: two partitions, each as shard_over's over its own parameters in ParamList order.
  void shard_over(Communicator& dp, Communicator& edp, const ParamList& params);
  /// Back to per-parameter moments (exp_avg(), exp_avg_sq()), all-gathered over the DP group: for
  /// a checkpoint, which holds global tensors. Collective over the group given to shard_over.
  void unshard(const ParamList& params);
  /// shard_over again with the groups of the last one (after unshard: a checkpoint was written).
  void reshard(const ParamList& params);
  bool sharded() const { return !shards_.empty(); }
  /// ZeRO-1's update: AdamW on this rank's shard of the values with `grad_shard` (from
  /// reduce_scatter_gradients), then all_gather_parameters. Needs shard_over first.
  void step_sharded(ParamList& params, const Tensor& grad_shard, float lr, float grad_scale);
  /// The same with one gradient shard per partition of the two-group shard_over: the rest's over
  /// dp, then the experts'.
  void step_sharded(ParamList& params, const std::vector<Tensor>& grad_shards, float lr,
                    float grad_scale);
  /// Bytes of moments this rank holds: 2 · 4 · (its parameter elements), or 2 · 4 · ⌈P/dp⌉ sharded.
  int64_t state_bytes() const;

 private:
  Device& device_;
  AdamWParams hp_;
  std::vector<Tensor> m_, v_;
  int64_t steps_ = 0;
  /// ZeRO-1's partitions: the parameters (indices into the ParamList) sharded over one group.
  struct Shard {
    Communicator* group = nullptr;
    std::vector<size_t> index;
    Tensor m, v;  // (ZeroPartition::shard()) each
  };
  std::vector<Shard> shards_;                         // empty: not sharded
  std::vector<std::pair<Communicator*, bool>> plan_;  // (group, experts?) of the last shard_over

  void shard_groups(const std::vector<std::pair<Communicator*, bool>>& plan,
                    const ParamList& params);

  AdamWParams hyper_for(const Param& p, float lr, float grad_scale) const;
};

}  // namespace tp
