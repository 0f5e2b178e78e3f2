#include "parallel/param.h"

#include "core/error.h"
#include "core/host.h"

namespace tp {

GlobalIndex Param::shard_index() const {
  switch (split) {
    case Split::Columns:
      return GlobalIndex::columns(cols(), offset);
    case Split::Rows:
      return GlobalIndex::rows(cols(), offset);
    case Split::Replicated:
      break;
  }
  return GlobalIndex::whole(cols());
}

void init_params(Device& device, ParamList& params, uint64_t seed) {
  for (Param& p : params) {
    switch (p.init) {
      case Init::Zeros:
        device.fill(p.value, 0.0f);
        break;
      case Init::Ones:
        device.fill(p.value, 1.0f);
        break;
      case Init::Normal:
        device.fill_random(p.value, RngKey::from(seed, p.name), p.shard_index(),
                           Distribution::normal(0.0f, p.init_std));
        break;
    }
  }
}

Tensor make_compute_copy(const Tensor& value, Dtype dtype) {
  if (dtype == Dtype::f32) return Tensor();
  return Tensor(value.device(), value.shape(), dtype);
}

void refresh_compute_copies(Device& device, ParamList& params) {
  for (Param& p : params)
    if (p.compute.defined()) device.convert(p.value, p.compute);
}

void zero_grads(Device& device, ParamList& params) {
  for (Param& p : params) device.fill(p.grad, 0.0f);
}

std::vector<float> gather_global(Communicator& comm, const Param& p, const Tensor& which) {
  const int t = comm.size();
  if (p.split == Split::Replicated || t == 1) return which.to_host();
  Tensor all(which.device(), Shape{t, which.numel()});
  comm.all_gather(which.reshape(Shape{which.numel()}), all);
  std::vector<float> flat = all.to_host();
  if (p.split == Split::Rows) return flat;  // blocks of rows stack in rank order
  // Columns: rank q's block is (rows × c); interleave into (rows × cols).
  const int64_t rows = p.rows(), c = p.cols() / t;
  std::vector<float> out(static_cast<size_t>(rows * p.cols()));
  for (int q = 0; q < t; ++q)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c; ++j) out[r * p.cols() + q * c + j] = flat[(q * rows + r) * c + j];
  return out;
}

std::vector<float> gather_real(Communicator& comm, const Param& p, const Tensor& which) {
  std::vector<float> all = gather_global(comm, p, which);
  all.resize(static_cast<size_t>(p.real_rows() * p.cols()));
  return all;
}

std::vector<float> shard_of(const Param& p, const std::vector<float>& global, int t) {
  TP_CHECK(static_cast<int64_t>(global.size()) == p.rows() * p.cols(), p.name, ": ", global.size(),
           " values for shape ", p.shape.str());
  switch (p.split) {
    case Split::Columns:
      return host_block(global, p.cols(), 0, p.rows(), p.offset, p.cols() / t);
    case Split::Rows:
      return host_block(global, p.cols(), p.offset, p.rows() / t, 0, p.cols());
    case Split::Replicated:
      break;
  }
  return global;
}

std::vector<float> gathered(Communicator& comm, const ParamList& params, ParamField field) {
  std::vector<float> all;
  for (const Param& p : params) {
    const std::vector<float> v =
        gather_global(comm, p, field == ParamField::Grad ? p.grad : p.value);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace tp
