#include "model/train.h"

#include <cmath>

namespace tp {

namespace {

// The first parameter (in parameter order) whose gradient holds a NaN/Inf on any rank. Runs only
// after the norm came out non-finite, so it may be slow: every gradient to the host, one flag per
// parameter, summed over the ranks (each rank holds a different shard).
std::string first_nonfinite_gradient(Communicator& comm, Device& device, const ParamList& params) {
  std::vector<float> bad(params.size(), 0.0f);
  for (size_t i = 0; i < params.size(); ++i)
    for (float g : params[i].grad.to_host())
      if (!std::isfinite(g)) {
        bad[i] = 1.0f;
        break;
      }
  Tensor flags = Tensor::from_host(device, Shape{static_cast<int64_t>(bad.size())}, bad);
  comm.all_reduce(flags);
  const std::vector<float> any = flags.to_host();
  for (size_t i = 0; i < any.size(); ++i)
    if (any[i] > 0) return "gradient of " + params[i].name;
  return "gradient norm";  // every gradient finite, the sum of their squares overflowed
}

}  // namespace

StepResult train_step(Communicator& comm, Device& device, Gpt& model, AdamW& opt,
                      const Batch& batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm, const std::function<void(float loss)>& after_backward) {
  StepResult r;
  model.zero_grad();
  r.loss = model.forward(batch, seed, step);
  model.backward();
  model.finish_gradients();
  if (after_backward) after_backward(r.loss);
  r.grad_norm = global_grad_norm(comm, device, model.params());
  // The loss and the norm are the same on every rank, so every rank takes the same branch.
  if (!std::isfinite(r.loss))
    r.nonfinite = "loss";
  else if (!std::isfinite(r.grad_norm))
    r.nonfinite = first_nonfinite_gradient(comm, device, model.params());
  if (!r.nonfinite.empty()) return r;  // no update: the weights and AdamW's state stay as they were
  r.clip = clip_factor(r.grad_norm, max_grad_norm);
  opt.step(model.params(), lr, r.clip);
  return r;
}

}  // namespace tp
