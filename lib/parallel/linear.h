// linear.h — ColumnParallelLinear and RowParallelLinear: Y = XA + b with the weight split over t ranks.
//
// Weights are stored [in, out] (x @ A, the layout of Hugging Face GPT-2's Conv1D), so splitting by
// output columns is splitting the last dim and splitting by input rows is splitting dim 0.
//
// Shape legend: N = tokens (all leading dims of X flattened), in / out = global feature sizes,
// t = comm.size(), r = comm.rank().
//
// Each layer keeps the global name and sizes of its parameters and holds only its shard. Forward
// saves exactly what backward needs (its input); backward returns dX and accumulates (+=) dW, db.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "observe/activation_stash.h"
#include "parallel/collective_matmul.h"
#include "parallel/param.h"

namespace tp {

/// What the two parallel linears share: a weight shard, an optional bias, their gradients.
class ParallelLinearBase {
 public:
  const std::string& name() const { return name_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool has_bias() const { return bias.defined(); }
  /// dweight = 0, dbias = 0.
  void zero_grad();
  /// From now on, record the input kept for backward in `ledger` under block `layer`.
  void observe(MemoryLedger* ledger, int64_t layer) { saved_.attach(ledger, layer); }
  /// How backward overlaps its collective with compute (collective_matmul.h); default None.
  void set_overlap(Overlap overlap) { overlap_ = overlap; }

  Tensor weight;   ///< this rank's shard of the [in, out] weight
  Tensor bias;     ///< this rank's bias (see each layer for its shape); undefined without bias
  Tensor dweight;  ///< gradient of `weight`, same shape, accumulated by backward
  Tensor dbias;    ///< gradient of `bias`, same shape, accumulated by backward

 protected:
  ParallelLinearBase(Device& device, Communicator& comm, std::string name, int64_t in, int64_t out,
                     Shape weight_shard, Shape bias_shard, bool with_bias);
  /// Fills the weight shard from (seed, name + ".weight", global index) with the given placement,
  /// and the bias likewise from name + ".bias".
  void init_shards(uint64_t seed, const Distribution& dist, const GlobalIndex& weight_index,
                   const GlobalIndex& bias_index);
  /// Appends the weight (N(0, weight_std), decayed) and the bias (zeros) as Params.
  void collect(ParamList& out, Split weight_split, int64_t weight_offset, Split bias_split,
               int64_t bias_offset, float weight_std) const;

  Device& device_;
  Communicator& comm_;
  std::string name_;
  int64_t in_, out_;
  ActivationStash saved_;
  SavedTensor input_;  ///< what forward keeps for backward: name() + ".input"
  Overlap overlap_ = Overlap::None;
};

/// Column-parallel linear: the weight is split by output columns, A = [A_1, …, A_t]:
///
///     X [A_1, …, A_t] = [X A_1, …, X A_t]
///
/// Rank r holds A_r (in × out/t) and b_r (out/t) and computes Y_r = X A_r + b_r from the whole X
/// with no communication. X entered through f (copy_to_tp_region), so backward all-reduces
/// dX = Σ_r dY_r A_rᵀ; dA_r = Xᵀ dY_r and db_r = Σ_rows dY_r stay local.
/// With gather_output the outputs are concatenated (gather_from_tp_region) into Y (N × out).
class ColumnParallelLinear : public ParallelLinearBase {
 public:
  /// Bad input (out not divisible by t) is a tp::Error naming the size and the valid t.
  ColumnParallelLinear(Device& device, Communicator& comm, std::string name, int64_t in,
                       int64_t out, bool with_bias, bool gather_output);

  /// Random init from (seed, parameter name, global index): identical numbers for every t.
  void init(uint64_t seed, const Distribution& dist);
  /// Takes this rank's columns of a global weight (in × out, row-major) and bias (out).
  void load_global(const std::vector<float>& weight, const std::vector<float>& bias = {});

  /// x: (N, in) → y: (N, out/t), or (N, out) with gather_output. Saves x, unless keep_input is
  /// false: then backward needs the input passed again (weight_grad(dy, x)); sequence
  /// parallelism uses this to keep only the sequence shard and re-gather it in backward.
  Tensor forward(const Tensor& x, bool keep_input = true);
  /// dy: like forward's y → dx: (N, in), complete on every rank (all-reduced).
  /// Accumulates dweight += Xᵀ dY_r, dbias += Σ_rows dY_r. With Overlap::Async the all-reduce of
  /// dX runs while dW is computed.
  Tensor backward(const Tensor& dy);

  // Backward in its two halves, for several column-parallel layers reading the same X (q, k, v;
  // SwiGLU's gate and up): add their dX terms and reduce once instead of once per layer.
  /// This rank's term of dX, dY_r A_rᵀ: (N, in), no communication. dy: like forward's output.
  Tensor input_grad(const Tensor& dy);
  /// dweight += Xᵀ dY_r and dbias += Σ_rows dY_r, X the input forward kept.
  void weight_grad(const Tensor& dy);
  /// The same with X given (forward(x, false)); with_bias = false leaves dbias alone (for the
  /// blocks of rows of a ring, whose bias gradient is taken once over all rows).
  void weight_grad(const Tensor& dy, const Tensor& input, bool with_bias = true);
  /// y = X A_r for a block of rows, no bias, no communication (the collective matmul's step).
  /// x: (n, in) → y: (n, out/t), written.
  void matmul(const Tensor& x, Tensor& y);

  int64_t out_local() const { return out_local_; }
  int64_t first_column() const { return col0_; }  ///< global index of this rank's first column
  /// Appends the weight (in, out; split by columns) and bias (out; split by columns) as Params
  /// named name() + ".weight" / ".bias": the weight N(0, weight_std) with decay, the bias zero.
  void collect_params(ParamList& out, float weight_std) const;

 private:
  /// dY with gather_output undone (this rank's columns), checked against out/t.
  Tensor local_dy(const Tensor& dy);

  bool gather_output_;
  int64_t out_local_, col0_;
};

/// Row-parallel linear: the weight is split by input rows, A = [A_1; …; A_t], and the input by
/// columns, X = [X_1, …, X_t]:
///
///     [X_1, …, X_t] [A_1; …; A_t] = Σ_r X_r A_r
///
/// Rank r holds A_r (in/t × out) and computes the partial sum X_r A_r (N × out); g
/// (reduce_from_tp_region) all-reduces the partial sums, and the bias (out, not split) is added
/// once, after the all-reduce. Backward needs no communication: every rank has the whole dY, so
/// dX_r = dY A_rᵀ, dA_r = X_rᵀ dY and db = Σ_rows dY are local (db is the same on every rank).
/// If the input arrives whole (input_is_parallel = false), it is split on entry
/// (scatter_to_tp_region) and backward all-gathers dX.
///
/// With sequence_parallel, the partial sums are reduce-scattered along the sequence
/// (reduce_scatter_to_sp_region) instead of all-reduced: each rank gets the complete output for
/// its s/t tokens, adds the bias to them, and backward all-gathers dY first. The bias gradient then
/// covers only this rank's tokens and must be summed over the group (Param::sequence_parallel_grad).
class RowParallelLinear : public ParallelLinearBase {
 public:
  /// Bad input (in not divisible by t) is a tp::Error naming the size and the valid t.
  RowParallelLinear(Device& device, Communicator& comm, std::string name, int64_t in, int64_t out,
                    bool with_bias, bool input_is_parallel, bool sequence_parallel = false);

  void init(uint64_t seed, const Distribution& dist);
  /// Takes this rank's rows of a global weight (in × out, row-major) and the whole bias (out).
  void load_global(const std::vector<float>& weight, const std::vector<float>& bias = {});

  /// x: (N, in/t) when input_is_parallel, else (N, in) → y: (N, out), complete on every rank
  /// (sequence_parallel: (N/t, out), this rank's tokens). With sequence_parallel and
  /// Overlap::Ring, the reduce-scatter is a ring whose steps overlap the block GEMMs. Saves X_r
  /// for backward unless keep_input is false (inference).
  Tensor forward(const Tensor& x, bool keep_input = true);
  /// dy: like y → dx: (N, in/t) when input_is_parallel, else (N, in). With sequence_parallel and
  /// Overlap::Ring, dY's all-gather is a ring whose steps overlap the block GEMMs.
  Tensor backward(const Tensor& dy);

  int64_t in_local() const { return in_local_; }
  int64_t first_row() const { return row0_; }  ///< global index of this rank's first weight row
  /// Appends the weight (in, out; split by rows) and the replicated bias (out) as Params named
  /// name() + ".weight" / ".bias": the weight N(0, weight_std) with decay, the bias zero.
  void collect_params(ParamList& out, float weight_std) const;

 private:
  bool input_is_parallel_;
  bool sequence_parallel_;
  int64_t in_local_, row0_;
};

}  // namespace tp
