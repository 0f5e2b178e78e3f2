#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/exercise.h"

namespace tp {

int64_t data_parallel_elements(const ParamList& params) {
  int64_t n = 1;  // the loss
  for (const Param& p : params) n += p.grad.numel();
  return n;
}

namespace {
// Copies every parameter's `which` (grad or value) into `flat`, in ParamList order, from element 0.
void pack(const ParamList& params, Tensor Param::*which, Tensor& flat) {
  int64_t at = 0;
  for (const Param& p : params) {
    const Tensor& src = p.*which;
    flat.view(at, at + src.numel()).copy_from(src);
    at += src.numel();
  }
}
}  // namespace

void average_gradients(Communicator& dp, Device& device, ParamList& params, float* loss,
                       const char* label) {
  if (dp.size() == 1) return;
  // One all-reduce for everything: pack, sum over the DP group, scale by 1/dp, unpack. (Real
  // frameworks cut this into buckets and start each while backward still runs; one buffer keeps
  // the collectives few and the ledger easy to read.)
  Tensor packed(device, Shape{data_parallel_elements(params)});
  pack(params, &Param::grad, packed);
  const int64_t at = packed.numel() - 1;
  packed.view(at, at + 1).copy_from_host({loss ? *loss : 0.0f});
  {
    CommLedger::Scope scope(dp.ledger(), label);
    dp.all_reduce(packed);
  }
  device.scale(packed, 1.0f / static_cast<float>(dp.size()));
  int64_t from = 0;
  for (Param& p : params) {
    Tensor g = p.grad;
    g.copy_from(packed.view(from, from + g.numel()));
    from += g.numel();
  }
  if (loss) *loss = packed.view(at, at + 1).to_host()[0];
}

#if TP_EXERCISE != 10  // exercises/10_zero1_shard_and_gather.cpp
ZeroPartition::ZeroPartition(const ParamList& params, int dp_size, int dp_rank) {
  TP_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "ZeroPartition: rank ", dp_rank,
           " of ", dp_size);
  for (const Param& p : params) total += p.value.numel();
  padded = (total + dp_size - 1) / dp_size * dp_size;
  begin = dp_rank * (padded / dp_size);
  end = begin + padded / dp_size;
}
#endif

void ZeroPartition::for_each_segment(
    const ParamList& params,
    const std::function<void(size_t, int64_t, int64_t, int64_t)>& fn) const {
  int64_t at = 0;  // the parameter's first flat element
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].value.numel(), lo = std::max(at, begin), hi = std::min(at + n, end);
    if (lo < hi) fn(i, lo - at, lo - begin, hi - lo);
    at += n;
  }
}

Tensor reduce_scatter_gradients(Communicator& dp, Device& device, const ParamList& params,
                                float* loss) {
  const ZeroPartition part(params, dp.size(), dp.rank());
  Tensor flat = Tensor::zeros(device, Shape{part.padded});  // the padding stays zero
  pack(params, &Param::grad, flat);
  Tensor shard(device, Shape{part.shard()});
  {
    CommLedger::Scope scope(dp.ledger(), "zero_grads");
    if (dp.size() == 1)
      shard.copy_from(flat);
    else
      dp.reduce_scatter(flat, shard);
  }
  device.scale(shard, 1.0f / static_cast<float>(dp.size()));
  if (loss && dp.size() > 1) {
    Tensor l = Tensor::from_host(device, Shape{1}, {*loss});
    {
      CommLedger::Scope scope(dp.ledger(), "zero_loss");
      dp.all_reduce(l);
    }
    device.scale(l, 1.0f / static_cast<float>(dp.size()));
    *loss = l.to_host()[0];
  }
  return shard;
}

double zero_grad_norm(Communicator& dp, Communicator& tp, Device& device, const ParamList& params,
                      const Tensor& grad_shard, const std::function<bool(const Param&)>& counted) {
  const ZeroPartition part(params, dp.size(), dp.rank());
  double split = 0, replicated = 0;
  part.for_each_segment(params, [&](size_t i, int64_t, int64_t at, int64_t n) {
    if (counted && !counted(params[i])) return;
    (params[i].split == Split::Replicated ? replicated : split) +=
        device.sum_squares(grad_shard.view(at, at + n));
  });
  if (dp.size() > 1) {
    Tensor s = Tensor::from_host(device, Shape{2},
                                 {static_cast<float>(split), static_cast<float>(replicated)});
    CommLedger::Scope scope(dp.ledger(), "zero_grad_norm");
    dp.all_reduce(s);
    const std::vector<float> both = s.to_host();
    split = both[0];
    replicated = both[1];
  }
  if (tp.size() > 1) {
    Tensor s = Tensor::from_host(device, Shape{1}, {static_cast<float>(split)});
    CommLedger::Scope scope(tp.ledger(), "grad_norm");
    tp.all_reduce(s);
    split = s.to_host()[0];
  }
  return std::sqrt(split + replicated);
}

Tensor gather_value_shard(Device& device, const ParamList& params, const ZeroPartition& part) {
  Tensor shard = Tensor::zeros(device, Shape{part.shard()});
  part.for_each_segment(params, [&](size_t i, int64_t from, int64_t at, int64_t n) {
    const Tensor& v = params[i].value;
    shard.view(at, at + n).copy_from(v.reshape(Shape{v.numel()}).view(from, from + n));
  });
  return shard;
}

#if TP_EXERCISE != 10  // exercises/10_zero1_shard_and_gather.cpp
void all_gather_parameters(Communicator& dp, Device& device, ParamList& params,
                           const Tensor& value_shard) {
  const ZeroPartition part(params, dp.size(), dp.rank());
  TP_CHECK(value_shard.numel() == part.shard(), "all_gather_parameters: a shard of ",
           value_shard.numel(), " elements, the partition's is ", part.shard());
  Tensor flat(device, Shape{part.padded});
  {
    CommLedger::Scope scope(dp.ledger(), "zero_params");
    if (dp.size() == 1)
      flat.copy_from(value_shard);
    else
      dp.all_gather(value_shard, flat);
  }
  int64_t at = 0;
  for (Param& p : params) {
    Tensor v = p.value;
    v.copy_from(flat.view(at, at + v.numel()));
    at += v.numel();
  }
}
#endif

}  // namespace tp
