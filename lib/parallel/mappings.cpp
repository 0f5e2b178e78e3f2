#include "parallel/mappings.h"

#include "core/device.h"
#include "core/error.h"

namespace tp {

namespace {

// The building blocks: four layout moves, each used by two ops (once forward, once backward).

Tensor all_reduce_in_place(Communicator& comm, const Tensor& x) {
  if (comm.size() == 1) return x;
  Tensor y = x;
  comm.all_reduce(y);
  return y;
}

Tensor split_last_dim(Communicator& comm, const Tensor& x) {
  const int t = comm.size();
  if (t == 1) return x;
  check_divisible("the last dimension", x.cols(), t);
  const int64_t c = x.cols() / t;
  Tensor out(x.device(), x.shape().with(x.ndim() - 1, c), x.dtype());
  x.device().copy_columns(x, comm.rank() * c, out, 0, c);
  return out;
}

Tensor gather_last_dim(Communicator& comm, const Tensor& x) {
  const int t = comm.size();
  if (t == 1) return x;
  const int64_t rows = x.rows(), c = x.cols();
  // The communicator concatenates along dim 0: [t, rows, c]. Rank i's block becomes columns
  // [i·c, (i+1)·c) of the result.
  Tensor stacked(x.device(), Shape{t, rows, c}, x.dtype());
  comm.all_gather(x, stacked);
  Tensor out(x.device(), x.shape().with(x.ndim() - 1, c * t), x.dtype());
  for (int i = 0; i < t; ++i) {
    Tensor block = stacked.view(i, i + 1).reshape(Shape{rows, c});
    x.device().copy_columns(block, 0, out, i * c, c);
  }
  return out;
}

Tensor split_first_dim(Communicator& comm, const Tensor& x) {
  const int t = comm.size();
  if (t == 1) return x;
  TP_CHECK(x.ndim() >= 1, "the sequence dimension is dim 0; got a scalar");
  check_divisible("the sequence dimension", x.dim(0), t);
  const int64_t s = x.dim(0) / t;
  return x.view(comm.rank() * s, (comm.rank() + 1) * s);
}

Tensor gather_first_dim(Communicator& comm, const Tensor& x) {
  const int t = comm.size();
  if (t == 1) return x;
  TP_CHECK(x.ndim() >= 1, "the sequence dimension is dim 0; got a scalar");
  Tensor out(x.device(), x.shape().with(0, x.dim(0) * t), x.dtype());
  comm.all_gather(x, out);
  return out;
}

Tensor reduce_scatter_first_dim(Communicator& comm, const Tensor& x) {
  const int t = comm.size();
  if (t == 1) return x;
  TP_CHECK(x.ndim() >= 1, "the sequence dimension is dim 0; got a scalar");
  check_divisible("the sequence dimension", x.dim(0), t);
  Tensor out(x.device(), x.shape().with(0, x.dim(0) / t), x.dtype());
  comm.reduce_scatter(x, out);
  return out;
}

// The same moves, started: the result is valid after the Pending's wait().
Pending all_reduce_in_place_async(Communicator& comm, const Tensor& x) {
  if (comm.size() == 1) return Pending(x, nullptr);
  Tensor y = x;
  std::unique_ptr<Work> work = comm.all_reduce_async(y);
  return Pending(y, std::move(work));
}

Pending gather_first_dim_async(Communicator& comm, const Tensor& x) {
  const int t = comm.size();
  if (t == 1) return Pending(x, nullptr);
  TP_CHECK(x.ndim() >= 1, "the sequence dimension is dim 0; got a scalar");
  Tensor out(x.device(), x.shape().with(0, x.dim(0) * t), x.dtype());
  std::unique_ptr<Work> work = comm.all_gather_async(x, out);
  return Pending(out, std::move(work));
}

Pending reduce_scatter_first_dim_async(Communicator& comm, const Tensor& x) {
  const int t = comm.size();
  if (t == 1) return Pending(x, nullptr);
  TP_CHECK(x.ndim() >= 1, "the sequence dimension is dim 0; got a scalar");
  check_divisible("the sequence dimension", x.dim(0), t);
  Tensor out(x.device(), x.shape().with(0, x.dim(0) / t), x.dtype());
  std::unique_ptr<Work> work = comm.reduce_scatter_async(x, out);
  return Pending(out, std::move(work));
}

// Labels every collective issued inside an op with the op's name and pass.
#define TP_REGION(name) CommLedger::Scope region_scope_(comm.ledger(), name)

}  // namespace

Tensor copy_to_tp_region_forward(Communicator&, const Tensor& x) { return x; }
Tensor copy_to_tp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_REGION("copy_to_tp_region.backward");
  return all_reduce_in_place(comm, dy);
}

Pending copy_to_tp_region_backward_async(Communicator& comm, const Tensor& dy) {
  TP_REGION("copy_to_tp_region.backward");
  return all_reduce_in_place_async(comm, dy);
}

Tensor reduce_from_tp_region_forward(Communicator& comm, const Tensor& x) {
  TP_REGION("reduce_from_tp_region.forward");
  return all_reduce_in_place(comm, x);
}
Pending reduce_from_tp_region_forward_async(Communicator& comm, const Tensor& x) {
  TP_REGION("reduce_from_tp_region.forward");
  return all_reduce_in_place_async(comm, x);
}

Tensor reduce_from_tp_region_backward(Communicator&, const Tensor& dy) { return dy; }

Tensor scatter_to_tp_region_forward(Communicator& comm, const Tensor& x) {
  return split_last_dim(comm, x);
}
Tensor scatter_to_tp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_REGION("scatter_to_tp_region.backward");
  return gather_last_dim(comm, dy);
}

Tensor gather_from_tp_region_forward(Communicator& comm, const Tensor& x) {
  TP_REGION("gather_from_tp_region.forward");
  return gather_last_dim(comm, x);
}
Tensor gather_from_tp_region_backward(Communicator& comm, const Tensor& dy) {
  return split_last_dim(comm, dy);
}

Tensor scatter_to_sp_region_forward(Communicator& comm, const Tensor& x) {
  return split_first_dim(comm, x);
}
Tensor scatter_to_sp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_REGION("scatter_to_sp_region.backward");
  return gather_first_dim(comm, dy);
}

Tensor gather_from_sp_region_forward(Communicator& comm, const Tensor& x) {
  TP_REGION("gather_from_sp_region.forward");
  return gather_first_dim(comm, x);
}
Tensor gather_from_sp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_REGION("gather_from_sp_region.backward");
  return reduce_scatter_first_dim(comm, dy);
}

Pending gather_from_sp_region_forward_async(Communicator& comm, const Tensor& x) {
  TP_REGION("gather_from_sp_region.forward");
  return gather_first_dim_async(comm, x);
}
Pending gather_from_sp_region_backward_async(Communicator& comm, const Tensor& dy) {
  TP_REGION("gather_from_sp_region.backward");
  return reduce_scatter_first_dim_async(comm, dy);
}

Tensor reduce_scatter_to_sp_region_forward(Communicator& comm, const Tensor& x) {
  TP_REGION("reduce_scatter_to_sp_region.forward");
  return reduce_scatter_first_dim(comm, x);
}
Tensor reduce_scatter_to_sp_region_backward(Communicator& comm, const Tensor& dy) {
  TP_REGION("reduce_scatter_to_sp_region.backward");
  return gather_first_dim(comm, dy);
}

}  // namespace tp
