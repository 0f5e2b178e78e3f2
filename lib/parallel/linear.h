// linear.h — ColumnParallelLinear and RowParallelLinear: Y = XA + b with the weight split over t ranks.
//
// Weights are stored [in, out] (x @ A, the layout of Hugging Face GPT-2's Conv1D), so splitting by
// output columns is splitting the last dim and splitting by input rows is splitting dim 0.
//
// Shape legend: N = tokens (all leading dims of X flattened), in / out = global feature sizes,
// t = comm.size(), r = comm.rank().
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
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
#include "parallel/mappings.h"
#include "parallel/param.h"

namespace tp {

/// Whether a parallel linear adds a bias: Y = XA + b (With) or Y = XA (Without).
enum class Bias { Without, With };
/// What ColumnParallelLinear returns: this rank's columns Y_r = X A_r + b_r (Split, what a
/// row-parallel layer takes next) or all of Y, gathered from the ranks (Gathered).
enum class ColumnOutput { Split, Gathered };
/// What RowParallelLinear takes: this rank's columns X_r (Split, what a column-parallel layer
/// returns) or the whole X, split on entry (Whole).
enum class RowInput { Split, Whole };

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
  /// Computes with copies of the weight and bias in `dtype` (bf16: made by the model's
  /// refresh_compute_copies from the fp32 master after each update; f32: the parameters themselves).
  void set_compute_dtype(Dtype dtype);
  /// What forward and backward read: the compute copies, or the parameters in fp32.
  const Tensor& compute_weight() const { return compute_tensor(weight, weight_copy_); }
  const Tensor& compute_bias() const { return compute_tensor(bias, bias_copy_); }

  Tensor weight;   ///< this rank's shard of the [in, out] weight
  Tensor bias;     ///< this rank's bias (see each layer for its shape); undefined without bias
  Tensor dweight;  ///< gradient of `weight`, same shape, accumulated by backward
  Tensor dbias;    ///< gradient of `bias`, same shape, accumulated by backward

 protected:
  ParallelLinearBase(Device& device, Communicator& comm, std::string name, int64_t in, int64_t out,
                     Shape weight_shard, Shape bias_shard, Bias bias);
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
  SavedTensor input_;               ///< what forward keeps for backward: name() + ".input"
  Tensor weight_copy_, bias_copy_;  ///< bf16 compute copies (set_compute_dtype), else undefined
  Overlap overlap_ = Overlap::None;
};

/// Column-parallel linear: the weight is split by output columns, A = [A_1, …, A_t]:
///
///     X [A_1, …, A_t] = [X A_1, …, X A_t]
///
/// Rank r holds A_r (in × out/t) and b_r (out/t) and computes Y_r = X A_r + b_r from the whole X
/// with no communication. X entered through f (copy_to_tp_region), so backward all-reduces
/// dX = Σ_r dY_r A_rᵀ; dA_r = Xᵀ dY_r and db_r = Σ_rows dY_r stay local.
/// With ColumnOutput::Gathered the outputs are concatenated (gather_from_tp_region) into Y
/// (N × out).
///
/// With sequence_parallel, X arrives as this rank's N/t tokens: forward all-gathers the sequence
/// (gather_from_sp_region) and keeps only the shard; backward gathers it again for dA_r and
/// reduce-scatters dX to this rank's tokens instead of all-reducing it. The overlap modes
/// (set_overlap): Async runs dX's collective under the dA GEMMs (and, under SP, the re-gather of X
/// under whatever runs before backward: prefetch_input); Ring (SP only) replaces the all-gather of
/// X and the reduce-scatter of dX by rings whose steps overlap the block GEMMs; Chunked (plain TP
/// only) cuts the dY A_rᵀ GEMM into row blocks, each block's all-reduce flying under the next
/// block's GEMM and the last under the dA GEMMs.
///
/// Several column-parallel layers reading the same X (q, k and v; SwiGLU's gate and up) run as one
/// through forward_shared / backward_shared: one all-gather of X under SP, and one collective for
/// dX = Σ_i Σ_r dY_i,r A_i,rᵀ. forward / backward are the group of one.
class ColumnParallelLinear : public ParallelLinearBase {
 public:
  /// Bad input (out not divisible by t) is a tp::Error naming the size and the valid t.
  ColumnParallelLinear(Device& device, Communicator& comm, std::string name, int64_t in,
                       int64_t out, Bias bias, ColumnOutput output, bool sequence_parallel = false);

  /// Random init from (seed, parameter name, global index): identical numbers for every t.
  void init(uint64_t seed, const Distribution& dist);
  /// Takes this rank's columns of a global weight (in × out, row-major) and bias (out).
  void load_global(const std::vector<float>& weight, const std::vector<float>& bias = {});

  /// x: (N, in), or (N/t, in) this rank's tokens with sequence_parallel → y: (N, out/t), or
  /// (N, out) with ColumnOutput::Gathered. Saves x (sequence_parallel: the shard) unless keep is
  /// false (inference: no backward follows).
  Tensor forward(const Tensor& x, Keep keep = Keep::ForBackward);
  /// dy: like forward's y → dx: like forward's x: complete on every rank (all-reduced), or with
  /// sequence_parallel this rank's tokens (reduce-scattered). Accumulates dweight += Xᵀ dY_r,
  /// dbias += Σ_rows dY_r.
  Tensor backward(const Tensor& dy);

  /// The layers of `group` (the same in, the same modes) on one input x (as forward's): Y_i for
  /// each, in order. group[0] keeps the input shard under sequence parallelism.
  static std::vector<Tensor> forward_shared(const std::vector<ColumnParallelLinear*>& group,
                                            const Tensor& x);
  /// dy[i]: the gradient of group[i]'s output → dx = Σ_i dY_i A_iᵀ over the ranks, one collective
  /// for the group; accumulates each layer's dweight and dbias.
  static Tensor backward_shared(const std::vector<ColumnParallelLinear*>& group,
                                const std::vector<Tensor>& dy);
  /// Sequence parallelism with Overlap::Async: starts backward's re-gather of the kept input
  /// shard now, so that it runs under the backward of the layers after this one. Otherwise
  /// nothing; backward starts it itself when this was not called.
  void prefetch_input();
  /// The name the sequence-parallel input shard is recorded under (default name() +
  /// ".input_shard"; the attention names its group's "<block>.attn.input_shard").
  void set_input_shard_name(const std::string& name) { input_shard_ = SavedTensor(name); }

  /// Megatron's skip_bias_add: forward returns X A_r without b_r and backward leaves dbias alone,
  /// for a caller that fuses the bias into what follows (the MLP's bias + GeLU kernel), adding
  /// b_r forward and accumulating dbias backward itself. Default false.
  void set_skip_bias_add(bool skip) { skip_bias_add_ = skip; }
  int64_t out_local() const { return out_local_; }
  int64_t first_column() const { return col0_; }  ///< global index of this rank's first column
  /// Appends the weight (in, out; split by columns) and bias (out; split by columns) as Params
  /// named name() + ".weight" / ".bias": the weight N(0, weight_std) with decay, the bias zero.
  void collect_params(ParamList& out, float weight_std) const;

 private:
  /// Every layer of a group has the leader's input size, communicator and modes.
  static void check_group(const std::vector<ColumnParallelLinear*>& group);
  /// Forward on the whole X (N, in): y = X A_r + b_r (gathered with gather_output).
  Tensor forward_whole(const Tensor& x, bool keep_input);
  /// dY with gather_output undone (this rank's columns), checked against out/t.
  Tensor local_dy(const Tensor& dy);
  /// This rank's term of dX, dY_r A_rᵀ: (N, in), no communication. dy: like forward's output.
  Tensor input_grad(const Tensor& dy);
  /// The same into dx (N, in), a view of rows of a larger tensor allowed.
  void input_grad_into(const Tensor& dy, Tensor& dx);
  /// dweight += Xᵀ dY_r and dbias += Σ_rows dY_r, X the input forward kept.
  void weight_grad(const Tensor& dy);
  /// The same with X given; with_bias = false leaves dbias alone (for the blocks of rows of a
  /// ring, whose bias gradient is taken once over all rows).
  void weight_grad(const Tensor& dy, const Tensor& input, bool with_bias = true);

  /// The bias is added here (forward) and its gradient taken here (backward): not skip_bias_add.
  bool adds_bias() const { return has_bias() && !skip_bias_add_; }

  bool gather_output_;
  bool sequence_parallel_;
  bool skip_bias_add_ = false;
  int64_t out_local_, col0_;
  SavedTensor input_shard_;  ///< sequence parallelism: this rank's tokens of X, (N/t, in)
  Pending input_gather_;     ///< prefetch_input's all-gather of the shard, in flight
  bool input_prefetched_ = false;
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
/// If the input arrives whole (RowInput::Whole), it is split on entry
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
                    Bias bias, RowInput input, bool sequence_parallel = false);

  void init(uint64_t seed, const Distribution& dist);
  /// Takes this rank's rows of a global weight (in × out, row-major) and the whole bias (out).
  void load_global(const std::vector<float>& weight, const std::vector<float>& bias = {});

  /// x: (N, in/t) with RowInput::Split, else (N, in) → y: (N, out), complete on every rank
  /// (sequence_parallel: (N/t, out), this rank's tokens). With sequence_parallel and
  /// Overlap::Ring, the reduce-scatter is a ring whose steps overlap the block GEMMs; without it
  /// and with Overlap::Chunked, the GEMM runs in row blocks whose all-reduces each fly under the
  /// next block's GEMM (collective_matmul.h). Saves X_r
  /// for backward unless keep is Keep::Nothing (inference).
  Tensor forward(const Tensor& x, Keep keep = Keep::ForBackward);
  /// dy: like y → dx: (N, in/t) with RowInput::Split, else (N, in). With sequence_parallel and
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
