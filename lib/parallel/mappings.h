// mappings.h — the seven region ops of tensor (and sequence) parallelism, forward and backward.
//
// Each op is a pair of functions with one stem, `<op>_forward` and `<op>_backward`, and the two
// passes are each other's adjoint: the backward of "all-reduce" is "identity", the backward of
// "split" is "all-gather". Which of the two passes communicates is the whole content of TP:
//
//   op                            forward                      backward
//   copy_to_tp_region (f)         identity                     all-reduce
//   reduce_from_tp_region (g)     all-reduce                   identity
//   scatter_to_tp_region          split last dim               all-gather last dim
//   gather_from_tp_region         all-gather last dim          split last dim
//   scatter_to_sp_region          split sequence dim           all-gather sequence dim
//   gather_from_sp_region         all-gather sequence dim      reduce-scatter sequence dim
//   reduce_scatter_to_sp_region   reduce-scatter sequence dim  all-gather sequence dim
//
// Conventions:
//   - "last dim" is the hidden / feature dimension: a tensor (..., h) splits into (..., h/t) and
//     rank r keeps columns [r·h/t, (r+1)·h/t).
//   - "sequence dim" is dim 0: activations are stored [s, b, h] (sequence outermost, as Megatron
//     does), so a sequence shard is a contiguous block and rank r keeps rows [r·s/t, (r+1)·s/t).
//   - All-reduce ops work in place: the returned tensor shares memory with the argument.
//   - With t = 1 every op returns its argument and communicates nothing.
//   - A dimension not divisible by t is a bad-input error naming the dimension and the valid t.
//
// Shape legend: t = comm.size(), r = comm.rank(), h = last dim, s = dim 0.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <memory>

#include "core/communicator.h"
#include "core/tensor.h"

namespace tp {

/// A region op whose collective is in flight (the *_async ops below): compute that does not need
/// the result may run until wait(), which returns it. At t = 1 it is ready at once.
class Pending {
 public:
  Pending() = default;
  Pending(Tensor result, std::unique_ptr<Work> work)
      : result_(std::move(result)), work_(std::move(work)) {}
  /// Waits for the collective (once) and returns its result.
  Tensor wait() {
    if (work_) work_->wait();
    work_.reset();
    return result_;
  }

 private:
  Tensor result_;
  std::unique_ptr<Work> work_;
};

/// f: enters a tensor-parallel region. Forward: identity. Backward: all-reduce (sum of the
/// partial input gradients from every rank). x: (..., h) → (..., h)
/// \f[ f:\quad y = x, \qquad dx = \sum_{r=0}^{t-1} dy_r
///     \quad (dy_r:\ \text{rank } r\text{'s partial gradient}) \f]
Tensor copy_to_tp_region_forward(Communicator& comm, const Tensor& x);
/// f backward: all-reduce, in place. dy: (..., h) → (..., h)
Tensor copy_to_tp_region_backward(Communicator& comm, const Tensor& dy);

/// f backward, asynchronous: the all-reduce starts, dy is summed in place by wait().
Pending copy_to_tp_region_backward_async(Communicator& comm, const Tensor& dy);

/// g: leaves a tensor-parallel region. Forward: all-reduce (in place) of partial sums.
/// Backward: identity. x: (..., h) → (..., h)
/// \f[ g:\quad y = \sum_{r=0}^{t-1} x_r \quad (x_r:\ \text{rank } r\text{'s partial sum}),
///     \qquad dx_r = dy \f]
Tensor reduce_from_tp_region_forward(Communicator& comm, const Tensor& x);
/// g forward, asynchronous: the all-reduce starts, x is summed in place by wait().
Pending reduce_from_tp_region_forward_async(Communicator& comm, const Tensor& x);
/// g backward: identity. dy: (..., h) → (..., h)
Tensor reduce_from_tp_region_backward(Communicator& comm, const Tensor& dy);

/// Forward: keep this rank's slice of the last dim. Backward: all-gather the last dim.
/// x: (..., h) → (..., h/t)
Tensor scatter_to_tp_region_forward(Communicator& comm, const Tensor& x);
/// dy: (..., h/t) → (..., h)
Tensor scatter_to_tp_region_backward(Communicator& comm, const Tensor& dy);

/// Forward: all-gather the last dim. Backward: keep this rank's slice of the last dim.
/// x: (..., h/t) → (..., h)
Tensor gather_from_tp_region_forward(Communicator& comm, const Tensor& x);
/// dy: (..., h) → (..., h/t)
Tensor gather_from_tp_region_backward(Communicator& comm, const Tensor& dy);

/// Forward: keep this rank's block of the sequence (a view). Backward: all-gather the sequence.
/// x: (s, ...) → (s/t, ...)
Tensor scatter_to_sp_region_forward(Communicator& comm, const Tensor& x);
/// dy: (s/t, ...) → (s, ...)
Tensor scatter_to_sp_region_backward(Communicator& comm, const Tensor& dy);

/// Forward: all-gather the sequence. Backward: reduce-scatter the sequence (each rank used the
/// whole sequence, so the gradient of its block is the sum over ranks).
/// x: (s/t, ...) → (s, ...)
Tensor gather_from_sp_region_forward(Communicator& comm, const Tensor& x);
/// dy: (s, ...) → (s/t, ...)
Tensor gather_from_sp_region_backward(Communicator& comm, const Tensor& dy);
/// The same two, asynchronous: the all-gather / reduce-scatter starts; wait() gives the result.
Pending gather_from_sp_region_forward_async(Communicator& comm, const Tensor& x);
Pending gather_from_sp_region_backward_async(Communicator& comm, const Tensor& dy);

/// Forward: reduce-scatter the sequence (sum the partial sums, keep this rank's block).
/// Backward: all-gather the sequence.  x: (s, ...) → (s/t, ...)
Tensor reduce_scatter_to_sp_region_forward(Communicator& comm, const Tensor& x);
/// dy: (s/t, ...) → (s, ...)
Tensor reduce_scatter_to_sp_region_backward(Communicator& comm, const Tensor& dy);

}  // namespace tp
