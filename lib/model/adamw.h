// adamw.h — AdamW with optimizer state sharded like the parameters, and global gradient-norm
// clipping that counts a replicated parameter once.
#pragma once

#include <vector>

#include "core/communicator.h"
#include "core/device.h"
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

 private:
  Device& device_;
  AdamWParams hp_;
  std::vector<Tensor> m_, v_;
  int64_t steps_ = 0;
};

}  // namespace tp
