#include "model/train.h"

namespace tp {

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
  r.clip = clip_factor(r.grad_norm, max_grad_norm);
  opt.step(model.params(), lr, r.clip);
  return r;
}

}  // namespace tp
