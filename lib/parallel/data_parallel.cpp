#include "parallel/data_parallel.h"

namespace tp {

int64_t data_parallel_elements(const ParamList& params) {
  int64_t n = 1;  // the loss
  for (const Param& p : params) n += p.grad.numel();
  return n;
}

void average_gradients(Communicator& dp, Device& device, ParamList& params, float* loss) {
  if (dp.size() == 1) return;
  // One all-reduce for everything: pack, sum over the DP group, scale by 1/dp, unpack. (Real
  // frameworks cut this into buckets and start each while backward still runs; one buffer keeps
  // the collectives few and the ledger easy to read.)
  Tensor packed(device, Shape{data_parallel_elements(params)});
  int64_t at = 0;
  for (const Param& p : params) {
    packed.view(at, at + p.grad.numel()).copy_from(p.grad);
    at += p.grad.numel();
  }
  packed.view(at, at + 1).copy_from_host({loss ? *loss : 0.0f});
  {
    CommLedger::Scope scope(dp.ledger(), "data_parallel_grads");
    dp.all_reduce(packed);
  }
  device.scale(packed, 1.0f / static_cast<float>(dp.size()));
  at = 0;
  for (Param& p : params) {
    Tensor g = p.grad;
    g.copy_from(packed.view(at, at + g.numel()));
    at += g.numel();
  }
  if (loss) *loss = packed.view(at, at + 1).to_host()[0];
}

}  // namespace tp
