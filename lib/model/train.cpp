#include "model/train.h"

#include "core/error.h"
#include "model/data.h"

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

StepResult train_step(ProcessGrid& grid, Device& device, Gpt& model, AdamW& opt,
                      const Batch& global_batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm, const std::function<void(float loss)>& after_backward) {
  const int dp = grid.dp_size();
  TP_CHECK_INPUT(
      global_batch.batch % dp == 0, "batch=", global_batch.batch, " is not divisible by dp=", dp,
      ": every DP rank takes batch/dp sequences; choose a batch that is a multiple of ", dp);
  TP_CHECK_INPUT(dp == 1 || model.config().dropout == 0.0f, "dropout=", model.config().dropout,
                 " with dp=", dp,
                 ": dropout masks are keyed by the row of the local batch, so dp > 1 would not "
                 "match dp = 1; use dropout 0 or dp 1");
  const int64_t local = global_batch.batch / dp;
  const Batch mine =
      dp == 1 ? global_batch : batch_slice(global_batch, grid.dp_rank() * local, local);
  StepResult r;
  model.zero_grad();
  r.loss = model.forward(mine, seed, step);
  model.backward();
  model.finish_gradients();
  average_gradients(grid.dp(), device, model.params(), &r.loss);
  if (after_backward) after_backward(r.loss);
  // Every DP replica now holds the same gradients: the norm is over the TP group, as at dp = 1.
  r.grad_norm = global_grad_norm(grid.tp(), device, model.params());
  r.clip = clip_factor(r.grad_norm, max_grad_norm);
  opt.step(model.params(), lr, r.clip);
  return r;
}

}  // namespace tp
