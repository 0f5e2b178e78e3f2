#include "parallel/linear.h"

#include "core/error.h"
#include "core/exercise.h"
#include "core/host.h"
#include "parallel/linear_passes.h"
#include "parallel/mappings.h"

namespace tp {

namespace {
int64_t local_size(const std::string& layer, const char* dim, int64_t global, int t) {
  check_divisible(layer + "." + dim, global, t);
  return global / t;
}

// A ring's weight, op(W) = W or Wᵀ, for its t GEMMs of `rows` rows each: packed once, on first use
// (so under the ring's first transfer where the ring starts one before its first GEMM), for the
// blocks to skip the per-call pack of a BLAS (Device::pack_gemm_b). At t = 1 the one GEMM is
// none's own: not packed, the same numbers as none.
class RingWeight {
 public:
  RingWeight(Device& dev, const Communicator& comm, const Tensor& w, bool trans, int64_t rows)
      : dev_(dev), w_(w), trans_(trans), rows_(rows), pack_(comm.size() > 1) {}
  const PackedGemmB& get() {
    if (!packed_)
      packed_ = pack_ ? dev_.pack_gemm_b(w_, trans_, rows_)
                      : std::make_shared<const PackedGemmB>(w_, trans_, rows_);
    return *packed_;
  }

 private:
  Device& dev_;
  Tensor w_;
  bool trans_;
  int64_t rows_;
  bool pack_;
  std::shared_ptr<const PackedGemmB> packed_;
};
}  // namespace

// ---- ParallelLinearBase -------------------------------------------------------------------------

ParallelLinearBase::ParallelLinearBase(Device& device, Communicator& comm, std::string name,
                                       int64_t in, int64_t out, Shape weight_shard,
                                       Shape bias_shard, Bias bias_mode)
    : device_(device),
      comm_(comm),
      name_(std::move(name)),
      in_(in),
      out_(out),
      input_(name_ + ".input") {
  TP_CHECK_INPUT(in > 0 && out > 0, name_, ": in=", in, " and out=", out, " must be positive");
  weight = Tensor::zeros(device, weight_shard);
  dweight = Tensor::zeros(device, weight_shard);
  if (bias_mode == Bias::With) {
    bias = Tensor::zeros(device, bias_shard);
    dbias = Tensor::zeros(device, bias_shard);
  }
}

void ParallelLinearBase::set_compute_dtype(Dtype dtype) {
  weight_copy_ = make_compute_copy(weight, dtype);
  bias_copy_ = has_bias() ? make_compute_copy(bias, dtype) : Tensor();
}

void ParallelLinearBase::zero_grad() {
  device_.fill(dweight, 0.0f);
  if (has_bias()) device_.fill(dbias, 0.0f);
}

void ParallelLinearBase::collect(ParamList& out, Split weight_split, int64_t weight_offset,
                                 Split bias_split, int64_t bias_offset, float weight_std) const {
  Param w;
  w.name = name_ + ".weight";
  w.shape = Shape{in_, out_};
  w.split = weight_split;
  w.offset = weight_offset;
  w.value = weight;
  w.grad = dweight;
  w.compute = weight_copy_;
  w.init_std = weight_std;
  w.decay = true;
  out.push_back(w);
  if (!has_bias()) return;
  Param b;
  b.name = name_ + ".bias";
  b.shape = Shape{out_};
  b.split = bias_split;
  b.offset = bias_offset;
  b.value = bias;
  b.grad = dbias;
  b.compute = bias_copy_;
  b.init = Init::Zeros;
  out.push_back(b);
}

void ParallelLinearBase::init_shards(uint64_t seed, const Distribution& dist,
                                     const GlobalIndex& weight_index,
                                     const GlobalIndex& bias_index) {
  device_.fill_random(weight, RngKey::from(seed, name_ + ".weight"), weight_index, dist);
  if (has_bias()) device_.fill_random(bias, RngKey::from(seed, name_ + ".bias"), bias_index, dist);
}

// ---- ColumnParallelLinear -----------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(Device& device, Communicator& comm, std::string name,
                                           int64_t in, int64_t out, Bias bias_mode,
                                           ColumnOutput output, bool sequence_parallel)
    : ParallelLinearBase(device, comm, name, in, out,
                         Shape{in, local_size(name, "out", out, comm.size())},
                         Shape{out / comm.size()}, bias_mode),
      gather_output_(output == ColumnOutput::Gathered),
      sequence_parallel_(sequence_parallel),
      out_local_(out / comm.size()),
      col0_(comm.rank() * (out / comm.size())),
      input_shard_(name_ + ".input_shard") {
  TP_CHECK(
      !(gather_output_ && sequence_parallel), name_,
      ": ColumnOutput::Gathered and sequence_parallel do not combine (the output stays split)");
}

void ColumnParallelLinear::init(uint64_t seed, const Distribution& dist) {
  init_shards(seed, dist, GlobalIndex::columns(out_, col0_), GlobalIndex::columns(out_, col0_));
}

void ColumnParallelLinear::load_global(const std::vector<float>& w, const std::vector<float>& b) {
  TP_CHECK(static_cast<int64_t>(w.size()) == in_ * out_, name_, ".load_global: weight has ",
           w.size(), " values, expected ", in_, "x", out_);
  weight.copy_from_host(host_block(w, out_, 0, in_, col0_, out_local_));
  if (has_bias()) {
    TP_CHECK(static_cast<int64_t>(b.size()) == out_, name_, ".load_global: bias has ", b.size(),
             " values, expected ", out_);
    bias.copy_from_host(host_block(b, out_, 0, 1, col0_, out_local_));
  }
}

Tensor ColumnParallelLinear::forward(const Tensor& x, Keep keep_mode) {
  const bool keep = keep_mode == Keep::ForBackward;
  if (sequence_parallel_ && keep) return forward_shared({this}, x)[0];
  // Inference under SP: the whole sequence, nothing kept.
  return forward_whole(sequence_parallel_ ? gather_from_sp_region_forward(comm_, x) : x, keep);
}

Tensor ColumnParallelLinear::forward_whole(const Tensor& x_in, bool keep) {
  TP_CHECK(x_in.cols() == in_, name_, ".forward: input ", x_in.shape().str(),
           " should end in in=", in_);
  const Tensor x = copy_to_tp_region_forward(comm_, x_in);  // f: identity
  if (keep)
    saved_.keep(input_, x);
  else
    input_.reset();
  Tensor y(device_, x.shape().with(x.ndim() - 1, out_local_), x.dtype());
  device_.gemm(false, false, 1.0f, x, compute_weight(), 0.0f, y);  // Y_r = X A_r
  if (adds_bias()) device_.add_bias(y, compute_bias());            //     + b_r
  return gather_output_ ? gather_from_tp_region_forward(comm_, y) : y;
}

Tensor ColumnParallelLinear::backward(const Tensor& dy) { return backward_shared({this}, {dy}); }

void ColumnParallelLinear::check_group(const std::vector<ColumnParallelLinear*>& group) {
  TP_CHECK(!group.empty(), "a column-parallel group needs at least one layer");
  const ColumnParallelLinear& lead = *group.front();
  for (const ColumnParallelLinear* l : group)
    TP_CHECK(l->in_ == lead.in_ && l->sequence_parallel_ == lead.sequence_parallel_ &&
                 l->overlap_ == lead.overlap_ && &l->comm_ == &lead.comm_,
             l->name_, " cannot share ", lead.name_,
             "'s input: a group has one input size, one communicator and one mode");
}

std::vector<Tensor> ColumnParallelLinear::forward_shared(
    const std::vector<ColumnParallelLinear*>& group, const Tensor& x_in) {
  ColumnParallelLinear& lead = *group.front();
  check_group(group);
  std::vector<Tensor> ys;
  if (!lead.sequence_parallel_) {
    for (ColumnParallelLinear* l : group) ys.push_back(l->forward_whole(x_in, true));
    return ys;
  }
  Device& dev = lead.device_;
  Communicator& comm = lead.comm_;
  lead.saved_.keep(lead.input_shard_, x_in);  // SP: only my s/t tokens are kept
  if (lead.overlap_ == Overlap::Ring) {
    // X's blocks come around the ring; each block's rows of every Y_i while the next travels.
    TP_CHECK(x_in.cols() == lead.in_, lead.name_, ".forward: input ", x_in.shape().str(),
             " should end in in=", lead.in_);
    const int64_t n = x_in.rows();
    std::vector<RingWeight> weights;  // each A_i packed once for its t blocks
    for (ColumnParallelLinear* l : group) {
      l->input_.reset();
      ys.emplace_back(dev, Shape{n * comm.size(), l->out_local_}, x_in.dtype());
      weights.emplace_back(dev, comm, l->compute_weight(), false, n);
    }
    ring_all_gather_each(comm, x_in, [&](int c, const Tensor& x_c) {
      for (size_t i = 0; i < group.size(); ++i) {
        Tensor y_c = ys[i].view(c * n, (c + 1) * n);
        dev.gemm_packed(false, 1.0f, x_c, weights[i].get(), 0.0f, y_c);  // block c's rows: X_c A_i
      }
    });
    for (size_t i = 0; i < group.size(); ++i)
      if (group[i]->adds_bias()) dev.add_bias(ys[i], group[i]->compute_bias());
    return ys;
  }
  // All-gather my s/t tokens into the whole sequence; the layers keep nothing more.
  const Tensor x = gather_from_sp_region_forward(comm, x_in);
  for (ColumnParallelLinear* l : group) ys.push_back(l->forward_whole(x, false));
  return ys;
}

void ColumnParallelLinear::prefetch_input() {
  if (!sequence_parallel_ || overlap_ != Overlap::Async) return;
  input_gather_ = gather_from_sp_region_forward_async(comm_, input_shard_.get());
  input_prefetched_ = true;
}

// dA_i += Xᵀ dY_i, and dX = Σ_i dY_i A_iᵀ summed over the ranks — f's all-reduce, or under SP a
// reduce-scatter to this rank's tokens — one collective for the group. Under SP, X is the kept
// shard gathered again.
Tensor ColumnParallelLinear::backward_shared(const std::vector<ColumnParallelLinear*>& group,
                                             const std::vector<Tensor>& dys) {
  ColumnParallelLinear& lead = *group.front();
  check_group(group);
  TP_CHECK(dys.size() == group.size(), lead.name_, ".backward: ", dys.size(),
           " output gradients for a group of ", group.size());
  Device& dev = lead.device_;
  Communicator& comm = lead.comm_;
  const Overlap overlap = lead.overlap_;
  auto input_grads = [&](int64_t r0, int64_t r1) {  // Σ_i dY_i A_iᵀ over rows [r0, r1)
    Tensor dx;
    for (size_t i = 0; i < group.size(); ++i) {
      Tensor term = group[i]->input_grad(dys[i].view(r0, r1));
      if (dx.defined())
        dev.axpy(1.0f, term, dx);
      else
        dx = term;
    }
    return dx;
  };
  auto weight_grads = [&](const Tensor* x) {  // every dA_i (and db_i) over all rows
    for (size_t i = 0; i < group.size(); ++i) {
      if (x != nullptr)
        group[i]->weight_grad(dys[i], *x);
      else
        group[i]->weight_grad(dys[i]);
    }
  };
  const int64_t rows = dys.front().rows();
  TP_CHECK(!(lead.sequence_parallel_ && overlap == Overlap::Chunked), lead.name_,
           ": overlap chunked is for plain TP; with sequence parallelism use ring");
  if (!lead.sequence_parallel_ && overlap == Overlap::Chunked && comm.size() > 1) {
    // dX's row blocks: a block's all-reduce starts when its rows exist and flies under the next
    // block's dY A_iᵀ GEMMs, the last one under the dA GEMMs. The same sums as none, per row.
    const Tensor& dy0 = dys.front();
    Tensor dx(dev, dy0.shape().with(dy0.ndim() - 1, lead.in_), dy0.dtype());
    const Tensor dx_rows = dx.reshape(Shape{rows, lead.in_});
    chunked_reduce_each(
        rows,
        [&](int64_t r0, int64_t r1) {
      Tensor block = dx_rows.view(r0, r1);
      for (size_t i = 0; i < group.size(); ++i) {
        const Tensor dy_i = dys[i].reshape(Shape{rows, dys[i].cols()}).view(r0, r1);
        if (i == 0)
          group[0]->input_grad_into(dy_i, block);
        else
          dev.axpy(1.0f, group[i]->input_grad(dy_i), block);
      }
      return block;
        },
        [&](const Tensor& block) { return copy_to_tp_region_backward_async(comm, block); },
        [&] { weight_grads(nullptr); });
    return dx;
  }
  if (!lead.sequence_parallel_) {
    Tensor dx = input_grads(0, rows);
    if (overlap == Overlap::None || overlap == Overlap::Chunked) {  // (chunked at t = 1: none)
      weight_grads(nullptr);
      return copy_to_tp_region_backward(comm, dx);  // f backward: one all-reduce for the group
    }
    Pending sum = copy_to_tp_region_backward_async(comm, dx);  // the all-reduce flies…
    weight_grads(nullptr);                                     // …under the dA GEMMs
    return sum.wait();
  }
  const Tensor& x_local = lead.input_shard_.get();
  if (overlap == Overlap::Ring) {
    // dX = Σ_i dY_i A_iᵀ over all rows at once (one GEMM per weight) while X's first block
    // travels; then a ring reduce-scatter of its blocks, sharing the steps of X's ring all-gather.
    // At t = 2 X's other block arrives into one (N, in) buffer and dA_i = Xᵀ dY_i is one GEMM
    // over all rows under the reduce-scatter (none's GEMM: the same numbers, no k-split; the two
    // transfers each under one of the two halves of the compute). At t > 2 that would leave the
    // gather's later steps with nothing under them: each arriving block's Xᵀ dY term of dA_i runs
    // under both transfers instead. The bias gradients once, over all rows.
    const int64_t n = x_local.rows();
    const int t = comm.size();
    const bool whole_x = t == 2;
    const Tensor x_whole =
        whole_x ? Tensor(dev, x_local.shape().with(0, t * n), x_local.dtype()) : Tensor();
    int blocks_seen = 0;
    Tensor dx = ring_gather_each_reduce_scatter(
        comm, x_local, [&] { return input_grads(0, rows); },
        [&](int c, const Tensor& x_c) {
      if (whole_x) {
        if (++blocks_seen == t)  // every block of X is in x_whole now
          for (size_t i = 0; i < group.size(); ++i)
            group[i]->weight_grad(dys[i], x_whole, /*with_bias=*/false);
        return;
      }
      for (size_t i = 0; i < group.size(); ++i)
        group[i]->weight_grad(dys[i].view(c * n, (c + 1) * n), x_c, /*with_bias=*/false);
        },
        x_whole);
    for (size_t i = 0; i < group.size(); ++i)
      if (group[i]->adds_bias()) dev.add_bias_backward(group[i]->dbias, dys[i]);
    return dx;
  }
  Tensor dx = input_grads(0, rows);
  if (overlap == Overlap::None) {
    const Tensor x = gather_from_sp_region_forward(comm, x_local);  // the whole input again
    weight_grads(&x);
    return gather_from_sp_region_backward(comm, dx);  // reduce-scatter to my tokens
  }
  Pending mine = gather_from_sp_region_backward_async(comm, dx);  // reduce-scatter flies…
  if (!lead.input_prefetched_) lead.prefetch_input();
  lead.input_prefetched_ = false;
  const Tensor x = lead.input_gather_.wait();  // (the input, gathered meanwhile)
  weight_grads(&x);                            // …under the dA GEMMs
  return mine.wait();
}

Tensor ColumnParallelLinear::local_dy(const Tensor& dy) {
  const Tensor local = gather_output_ ? gather_from_tp_region_backward(comm_, dy) : dy;
  TP_CHECK(local.cols() == out_local_, name_, ".backward: dy ", dy.shape().str(),
           " does not match the forward output");
  return local;
}

Tensor ColumnParallelLinear::input_grad(const Tensor& dy_in) {
  Tensor dx(device_, dy_in.shape().with(dy_in.ndim() - 1, in_), dy_in.dtype());
  input_grad_into(dy_in, dx);
  return dx;
}

void ColumnParallelLinear::weight_grad(const Tensor& dy) {
  TP_CHECK(input_.has_value(), name_,
           ".backward called before forward (or after forward(x, false))");
  weight_grad(dy, input_.get());
}

#if TP_EXERCISE != 2  // exercises/02_column_parallel_backward.cpp
void ColumnParallelLinear::input_grad_into(const Tensor& dy_in, Tensor& dx) {
  const Tensor dy = local_dy(dy_in);
  device_.gemm(false, true, 1.0f, dy, compute_weight(), 0.0f, dx);  // dY_r A_rᵀ: one term of dX
}

void ColumnParallelLinear::weight_grad(const Tensor& dy_in, const Tensor& input, bool with_bias) {
  const Tensor dy = local_dy(dy_in);
  TP_CHECK(dy.rows() == input.rows() && input.cols() == in_, name_, ".backward: dy ",
           dy.shape().str(), " does not match the input ", input.shape().str());
  device_.gemm(true, false, 1.0f, input, dy, 1.0f, dweight);           // dA_r += Xᵀ dY_r
  if (adds_bias() && with_bias) device_.add_bias_backward(dbias, dy);  // db_r += Σ dY_r
}
#endif

void ColumnParallelLinear::collect_params(ParamList& out, float weight_std) const {
  collect(out, Split::Columns, col0_, Split::Columns, col0_, weight_std);
}

// ---- The plain passes (linear_passes.h) --------------------------------------------------------

#if TP_EXERCISE != 3  // exercises/03_row_parallel_forward.cpp
Tensor row_parallel_forward(Device& device, Communicator& comm, const Tensor& x_r,
                            const Tensor& a_r, const Tensor* bias, bool sequence_parallel) {
  Tensor partial(device, x_r.shape().with(x_r.ndim() - 1, a_r.cols()), x_r.dtype());
  device.gemm(false, false, 1.0f, x_r, a_r, 0.0f, partial);  // X_r A_r
  // g: Σ_r X_r A_r (SP: the sum of my tokens only)
  Tensor y = sequence_parallel ? reduce_scatter_to_sp_region_forward(comm, partial)
                               : reduce_from_tp_region_forward(comm, partial);
  if (bias) device.add_bias(y, *bias);  // + b, once
  return y;
}
#endif

// ---- RowParallelLinear --------------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(Device& device, Communicator& comm, std::string name,
                                     int64_t in, int64_t out, Bias bias_mode, RowInput input,
                                     bool sequence_parallel)
    : ParallelLinearBase(device, comm, name, in, out,
                         Shape{local_size(name, "in", in, comm.size()), out}, Shape{out},
                         bias_mode),
      input_is_parallel_(input == RowInput::Split),
      sequence_parallel_(sequence_parallel),
      in_local_(in / comm.size()),
      row0_(comm.rank() * (in / comm.size())) {}

void RowParallelLinear::init(uint64_t seed, const Distribution& dist) {
  init_shards(seed, dist, GlobalIndex::rows(out_, row0_), GlobalIndex::whole(out_));
}

void RowParallelLinear::load_global(const std::vector<float>& w, const std::vector<float>& b) {
  TP_CHECK(static_cast<int64_t>(w.size()) == in_ * out_, name_, ".load_global: weight has ",
           w.size(), " values, expected ", in_, "x", out_);
  weight.copy_from_host(host_block(w, out_, row0_, in_local_, 0, out_));
  if (has_bias()) {
    TP_CHECK(static_cast<int64_t>(b.size()) == out_, name_, ".load_global: bias has ", b.size(),
             " values, expected ", out_);
    bias.copy_from_host(b);
  }
}

Tensor RowParallelLinear::forward(const Tensor& x, Keep keep_mode) {
  const bool keep = keep_mode == Keep::ForBackward;
  const Tensor x_r = input_is_parallel_ ? x : scatter_to_tp_region_forward(comm_, x);
  if (keep)
    saved_.keep(input_, x_r);
  else
    input_.reset();
  TP_CHECK(x_r.cols() == in_local_, name_, ".forward: input ", x.shape().str(), " should end in ",
           input_is_parallel_ ? in_local_ : in_, input_is_parallel_ ? " (in/t)" : " (in)");
  TP_CHECK(!(sequence_parallel_ && overlap_ == Overlap::Chunked), name_,
           ": overlap chunked is for plain TP; with sequence parallelism use ring");
  Tensor y;
  if (!sequence_parallel_ && overlap_ == Overlap::Chunked && comm_.size() > 1) {
    // g's all-reduce block by block: a row block's partial sums start their all-reduce as soon as
    // its GEMM is done and fly under the next block's GEMM.
    const int64_t rows = x_r.rows();
    const Tensor x_rows = x_r.reshape(Shape{rows, in_local_});
    y = Tensor(device_, x_r.shape().with(x_r.ndim() - 1, out_), x_r.dtype());
    const Tensor y_rows = y.reshape(Shape{rows, out_});
    chunked_reduce_each(
        rows,
        [&](int64_t r0, int64_t r1) {
      Tensor block = y_rows.view(r0, r1);
      device_.gemm(false, false, 1.0f, x_rows.view(r0, r1), compute_weight(), 0.0f,
                   block);  // X_r A_r
      return block;
        },
        [&](const Tensor& block) { return reduce_from_tp_region_forward_async(comm_, block); });
  } else if (sequence_parallel_ && overlap_ == Overlap::Ring) {
    // Σ_r X_r A_r, block d of rows for rank d: each block's GEMM while the running sums travel.
    check_divisible(name_ + ": the sequence dimension", x_r.rows(), comm_.size());
    const int64_t n = x_r.rows() / comm_.size();
    RingWeight w(device_, comm_, compute_weight(), false, n);  // packed once for the t blocks
    y = ring_reduce_scatter(comm_, [&](int d) {
      Tensor block(device_, Shape{n, out_}, x_r.dtype());
      device_.gemm_packed(false, 1.0f, x_r.view(d * n, (d + 1) * n), w.get(), 0.0f, block);
      return block;
    });
  } else {
    return row_parallel_forward(device_, comm_, x_r, compute_weight(),
                                has_bias() ? &compute_bias() : nullptr, sequence_parallel_);
  }
  if (has_bias()) device_.add_bias(y, compute_bias());  // + b, once
  return y;
}

Tensor RowParallelLinear::backward(const Tensor& dy_in) {
  TP_CHECK(input_.has_value(), name_, ".backward called before forward");
  const Tensor& x_r = input_.get();
  if (sequence_parallel_ && overlap_ == Overlap::Ring) {
    // dY's blocks come around the ring; each block's dX rows and dA term while the next travels.
    TP_CHECK(dy_in.cols() == out_ && dy_in.rows() * comm_.size() == x_r.rows(), name_,
             ".backward: dy ", dy_in.shape().str(), " does not match the forward output");
    const int64_t n = dy_in.rows();
    Tensor dx(device_, x_r.shape(), x_r.dtype());
    RingWeight wt(device_, comm_, compute_weight(), true, n);  // A_rᵀ packed once for the t blocks
    ring_all_gather_each(comm_, dy_in, [&](int c, const Tensor& dy_c) {
      Tensor dx_c = dx.view(c * n, (c + 1) * n);
      device_.gemm_packed(false, 1.0f, dy_c, wt.get(), 0.0f, dx_c);                        // dX_r
      device_.gemm(true, false, 1.0f, x_r.view(c * n, (c + 1) * n), dy_c, 1.0f, dweight);  // dA_r
    });
    if (has_bias()) device_.add_bias_backward(dbias, dy_in);  // my tokens (summed over the group)
    return input_is_parallel_ ? dx : scatter_to_tp_region_backward(comm_, dx);
  }
  const Tensor dy = sequence_parallel_
                        ? reduce_scatter_to_sp_region_backward(comm_, dy_in)  // all-gather
                        : reduce_from_tp_region_backward(comm_, dy_in);       // g: identity
  TP_CHECK(dy.cols() == out_ && dy.rows() == x_r.rows(), name_, ".backward: dy ", dy.shape().str(),
           " does not match the forward output");
  device_.gemm(true, false, 1.0f, x_r, dy, 1.0f, dweight);  // dA_r += X_rᵀ dY
  if (has_bias()) device_.add_bias_backward(dbias, sequence_parallel_ ? dy_in : dy);  // db += Σ dY
  Tensor dx(device_, x_r.shape(), x_r.dtype());
  device_.gemm(false, true, 1.0f, dy, compute_weight(), 0.0f, dx);  // dX_r = dY A_rᵀ
  return input_is_parallel_ ? dx : scatter_to_tp_region_backward(comm_, dx);
}

void RowParallelLinear::collect_params(ParamList& out, float weight_std) const {
  collect(out, Split::Rows, row0_, Split::Replicated, 0, weight_std);
  if (has_bias() && sequence_parallel_)
    out.back().sequence_parallel_grad = true;  // sums my tokens only
}

}  // namespace tp
