// param.h — a parameter as the rest of the system sees it: a global name and shape, how it is
// split over the tensor-parallel group, and this rank's shard with its gradient.
//
// Everything that walks over "all parameters" (initialisation, zeroing gradients, the gradient
// norm, the optimizer, checkpoints, the tests that compare t = N with t = 1) works on Params, so a
// new layer only has to describe its parameters once.
//
// Shape legend: a Param's shape is the global one; its shard is that shape with the split dim
// divided by t = comm.size().
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace tp {

/// How a parameter is laid out over the t ranks of a tensor-parallel group.
enum class Split {
  Replicated,  ///< every rank holds all of it (norms, row-parallel biases, embeddings here)
  Columns,     ///< rank r holds columns [offset, offset + cols/t) (column-parallel)
  Rows,        ///< rank r holds rows [offset, offset + rows/t) (row-parallel weights)
};

/// How a parameter starts.
enum class Init { Normal, Zeros, Ones };

/// One parameter: global description + this rank's shard. `value` and `grad` share memory with
/// the layer that owns them (Tensor is a handle).
struct Param {
  std::string name;  ///< unique global name, e.g. "h.0.mlp.fc1.weight"
  Shape shape;       ///< global shape: (cols) for a vector, (rows, cols) for a matrix
  Split split = Split::Replicated;
  int64_t offset = 0;  ///< first global column (Columns) or row (Rows) held here
  Tensor value;        ///< this rank's shard
  Tensor grad;         ///< its gradient (same shape), accumulated by backward
  Init init = Init::Normal;
  float init_std = 0.02f;  ///< for Init::Normal
  bool decay = false;      ///< AdamW weight decay applies (matrices, not biases or norms)
  /// Replicated, but under sequence parallelism each rank's gradient covers only its own tokens:
  /// the gradients must be summed over the group (Gpt::finish_gradients) before they are complete.
  bool sequence_parallel_grad = false;
  /// Rows stored in a checkpoint when fewer than the global rows (vocabulary padding: wte holds V
  /// rounded up to a multiple of t, the file holds the real V). 0: all rows.
  int64_t ckpt_rows = 0;
  /// Where the parameter lives in a checkpoint: tensor `ckpt_name`, columns [ckpt_col0, ckpt_col0 +
  /// cols) of a stored matrix with `ckpt_cols` columns (several parameters may share one stored
  /// tensor, e.g. q | k | v in c_attn). Empty ckpt_name: the parameter's own name, whole.
  std::string ckpt_name;
  int64_t ckpt_col0 = 0;
  int64_t ckpt_cols = 0;
  /// A mixture-of-experts expert's parameter: the global expert id (model/moe.h); under expert
  /// parallelism only the ranks holding the expert have it (parallel/expert_parallel.h), and its
  /// gradient is summed over the expert-data-parallel group instead of DP. −1: every other one.
  int expert = -1;
  /// Under bf16 mixed precision, the bf16 copy of `value` (the fp32 master) that forward and
  /// backward read, remade by refresh_compute_copies; undefined in fp32 (the layers read value).
  Tensor compute;

  int64_t rows() const {
    return shape.ndim() == 2 ? shape[0] : 1;
  }                                              ///< global rows (1 for a vector)
  int64_t cols() const { return shape.cols(); }  ///< global columns
  /// Rows that hold real values: rows() minus vocabulary padding (see ckpt_rows).
  int64_t real_rows() const { return ckpt_rows > 0 ? ckpt_rows : rows(); }
  /// Maps the shard's local (r, c) to the global flat index, for counter-based initialisation.
  GlobalIndex shard_index() const;
};

using ParamList = std::vector<Param>;

/// A layer's copy of a parameter tensor for dtype: a new bf16 tensor of the same shape when dtype
/// is bf16, else undefined (fp32 computes with the parameter itself).
Tensor make_compute_copy(const Tensor& value, Dtype dtype);
/// What a layer computes with: the copy when it has one, else the parameter itself.
inline const Tensor& compute_tensor(const Tensor& value, const Tensor& copy) {
  return copy.defined() ? copy : value;
}
/// compute = value rounded to bf16 (one rounding per weight) for every parameter with a copy.
void refresh_compute_copies(Device& device, ParamList& params);

/// Fills every parameter from (seed, name, global index): identical numbers for every t.
void init_params(Device& device, ParamList& params, uint64_t seed);
/// grad = 0 for every parameter.
void zero_grads(Device& device, ParamList& params);
/// The whole (global) tensor from every rank's shard of `which` (p.value, p.grad or optimizer
/// state of the same shape), row-major (rows × cols), on every rank. Communicates for split
/// parameters (an all-gather over `comm`).
std::vector<float> gather_global(Communicator& comm, const Param& p, const Tensor& which);
/// gather_global without the padding rows: the first real_rows() rows (what a t = 1 model with the
/// unpadded vocabulary holds, and what a checkpoint stores).
std::vector<float> gather_real(Communicator& comm, const Param& p, const Tensor& which);
/// This rank's shard of a global (rows × cols) row-major tensor, as host values.
std::vector<float> shard_of(const Param& p, const std::vector<float>& global, int t);
/// Which tensor of a Param: its value or its gradient.
enum class ParamField { Value, Grad };
/// Every parameter's global value or gradient (`field`), gather_global in ParamList order,
/// concatenated: one vector to compare a whole model at t with the same model at t = 1.
std::vector<float> gathered(Communicator& comm, const ParamList& params, ParamField field);

}  // namespace tp
