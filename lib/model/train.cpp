#include "model/train.h"

#include <cmath>

#include "core/error.h"
#include "model/data.h"
#include "parallel/data_parallel.h"

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
  ProcessGrid grid(comm, 1);  // dp = pp = 1: the TP group is `comm` itself, nothing is split
  return train_step(grid, device, model, opt, batch, seed, step, lr, max_grad_norm, after_backward);
}

StepResult train_step(ProcessGrid& grid, Device& device, Gpt& model, AdamW& opt,
                      const Batch& global_batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm, const std::function<void(float loss)>& after_backward) {
  const int dp = grid.dp_size();
  TP_CHECK_INPUT(grid.pp_size() == 1, "pp=", grid.pp_size(),
                 ": pipeline parallelism is not implemented yet; train with pp 1");
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
  // The averaged loss and the norm are the same on every rank: every rank takes the same branch.
  if (!std::isfinite(r.loss))
    r.nonfinite = "loss";
  else if (!std::isfinite(r.grad_norm))
    r.nonfinite = first_nonfinite_gradient(grid.tp(), device, model.params());
  if (!r.nonfinite.empty()) return r;  // no update: the weights and AdamW's state stay as they were
  r.clip = clip_factor(r.grad_norm, max_grad_norm);
  opt.step(model.params(), lr, r.clip);
  return r;
}

}  // namespace tp
