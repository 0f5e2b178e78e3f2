#include "parallel/mappings.h"

#include "core/device.h"
#include "core/error.h"
#include "core/exercise.h"

namespace tp {

namespace {

// The layout moves, each used by two ops (once forward, once backward). A move whose op has an
// *_async twin is written once and runs in either mode: Blocking completes its collective inside
// the call (the Pending holds no Work), Started leaves it in flight until the Pending's wait().
enum class Mode { Blocking, Started };

// The three collectives of the moves, in `mode`: the Work in flight, or none when it completed.
std::unique_ptr<Work> all_reduce(Communicator& comm, Tensor& x, Mode mode) {
  if (mode == Mode::Started) return comm.all_reduce_async(x);
  comm.all_reduce(x);
  return nullptr;
}

std::unique_ptr<Work> all_gather(Communicator& comm, const Tensor& shard, Tensor& full, Mode mode) {
  if (mode == Mode::Started) return comm.all_gather_async(shard, full);
  comm.all_gather(shard, full);
  return nullptr;
}

std::unique_ptr<Work> reduce_scatter(Communicator& comm, const Tensor& full, Tensor& shard,
                                     Mode mode) {
  if (mode == Mode::Started) return comm.reduce_scatter_async(full, shard);
  comm.reduce_scatter(full, shard);
  return nullptr;
}

void check_sequence_dim(const Tensor& x) {
  TP_CHECK(x.ndim() >= 1, "the sequence dimension is dim 0; got a scalar");
}

Pending all_reduce_in_place(Communicator& comm, const Tensor& x, Mode mode) {
  if (comm.size() == 1) return Pending(x, nullptr);
  Tensor y = x;
  std::unique_ptr<Work> work = all_reduce(comm, y, mode);
  return Pending(y, std::move(work));
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

// Blocking only: the column copy needs the gathered blocks.
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
  check_sequence_dim(x);
  check_divisible("the sequence dimension", x.dim(0), t);
  const int64_t s = x.dim(0) / t;
  return x.view(comm.rank() * s, (comm.rank() + 1) * s);
}

Pending gather_first_dim(Communicator& comm, const Tensor& x, Mode mode) {
  const int t = comm.size();
  if (t == 1) return Pending(x, nullptr);
  check_sequence_dim(x);
  Tensor out(x.device(), x.shape().with(0, x.dim(0) * t), x.dtype());
  std::unique_ptr<Work> work = all_gather(comm, x, out, mode);
  return Pending(out, std::move(work));
}

Pending reduce_scatter_first_dim(Communicator& comm, const Tensor& x, Mode mode) {
  const int t = comm.size();
  if (t == 1) return Pending(x, nullptr);
  check_sequence_dim(x);
  check_divisible("the sequence dimension", x.dim(0), t);
  Tensor out(x.device(), x.shape().with(0, x.dim(0) / t), x.dtype());
  std::unique_ptr<Work> work = reduce_scatter(comm, x, out, mode);
  return Pending(out, std::move(work));
}

// A pass of an op that communicates: the ledger labels the collectives its move issues with the
// op's name and pass ("gather_from_sp_region.forward"; CommLedger::Scope). An op and its *_async
// twin run the same Region, in Mode::Blocking and Mode::Started.
template <class Move>
struct Region {
  const char* label;
  Move move;
  template <class... ModeArg>
  auto operator()(Communicator& comm, const Tensor& x, ModeArg... mode) const {
    CommLedger::Scope scope(comm.ledger(), label);
    return move(comm, x, mode...);
  }
};
template <class Move>
Region(const char*, Move) -> Region<Move>;

const Region kCopyToTpBackward{"copy_to_tp_region.backward", all_reduce_in_place};
const Region kReduceFromTpForward{"reduce_from_tp_region.forward", all_reduce_in_place};
const Region kScatterToTpBackward{"scatter_to_tp_region.backward", gather_last_dim};
const Region kGatherFromTpForward{"gather_from_tp_region.forward", gather_last_dim};
const Region kScatterToSpBackward{"scatter_to_sp_region.backward", gather_first_dim};
const Region kGatherFromSpForward{"gather_from_sp_region.forward", gather_first_dim};
const Region kGatherFromSpBackward{"gather_from_sp_region.backward", reduce_scatter_first_dim};
const Region kReduceScatterToSpForward{"reduce_scatter_to_sp_region.forward",
                                       reduce_scatter_first_dim};
const Region kReduceScatterToSpBackward{"reduce_scatter_to_sp_region.backward", gather_first_dim};

}  // namespace

#if TP_EXERCISE != 1  // exercises/01_f_and_g.cpp
Tensor copy_to_tp_region_forward(Communicator&, const Tensor& x) { return x; }
Tensor copy_to_tp_region_backward(Communicator& comm, const Tensor& dy) {
  return kCopyToTpBackward(comm, dy, Mode::Blocking).wait();
}
Tensor reduce_from_tp_region_forward(Communicator& comm, const Tensor& x) {
  return kReduceFromTpForward(comm, x, Mode::Blocking).wait();
}
Tensor reduce_from_tp_region_backward(Communicator&, const Tensor& dy) { return dy; }
#endif

Pending copy_to_tp_region_backward_async(Communicator& comm, const Tensor& dy) {
  return kCopyToTpBackward(comm, dy, Mode::Started);
}
Pending reduce_from_tp_region_forward_async(Communicator& comm, const Tensor& x) {
  return kReduceFromTpForward(comm, x, Mode::Started);
}

Tensor scatter_to_tp_region_forward(Communicator& comm, const Tensor& x) {
  return split_last_dim(comm, x);
}
Tensor scatter_to_tp_region_backward(Communicator& comm, const Tensor& dy) {
  return kScatterToTpBackward(comm, dy);
}

Tensor gather_from_tp_region_forward(Communicator& comm, const Tensor& x) {
  return kGatherFromTpForward(comm, x);
}
Tensor gather_from_tp_region_backward(Communicator& comm, const Tensor& dy) {
  return split_last_dim(comm, dy);
}

Tensor scatter_to_sp_region_forward(Communicator& comm, const Tensor& x) {
  return split_first_dim(comm, x);
}
Tensor scatter_to_sp_region_backward(Communicator& comm, const Tensor& dy) {
  return kScatterToSpBackward(comm, dy, Mode::Blocking).wait();
}

#if TP_EXERCISE != 7  // exercises/07_sp_regions.cpp
Tensor gather_from_sp_region_forward(Communicator& comm, const Tensor& x) {
  return kGatherFromSpForward(comm, x, Mode::Blocking).wait();
}
Tensor gather_from_sp_region_backward(Communicator& comm, const Tensor& dy) {
  return kGatherFromSpBackward(comm, dy, Mode::Blocking).wait();
}
Tensor reduce_scatter_to_sp_region_forward(Communicator& comm, const Tensor& x) {
  return kReduceScatterToSpForward(comm, x, Mode::Blocking).wait();
}
Tensor reduce_scatter_to_sp_region_backward(Communicator& comm, const Tensor& dy) {
  return kReduceScatterToSpBackward(comm, dy, Mode::Blocking).wait();
}
#endif
Pending gather_from_sp_region_forward_async(Communicator& comm, const Tensor& x) {
  return kGatherFromSpForward(comm, x, Mode::Started);
}
Pending gather_from_sp_region_backward_async(Communicator& comm, const Tensor& dy) {
  return kGatherFromSpBackward(comm, dy, Mode::Started);
}

}  // namespace tp
