// train.h — one training step, the same everywhere (tp_train, lesson 07, the tests).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/gpt.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/process_grid.h"

namespace tp {

struct StepResult {
  float loss = 0;        ///< mean cross-entropy of the batch (before the update)
  double grad_norm = 0;  ///< global gradient norm (before clipping)
  float clip = 1;        ///< the factor the gradients were scaled by
  /// Empty when the loss and the gradient norm are finite. Otherwise the step made no update (no
  /// AdamW step, no weight change) and this names the first tensor holding a NaN/Inf: "loss", or
  /// "gradient of <param>" (the first in parameter order on any rank), or "gradient norm" when
  /// every gradient is finite but the sum of their squares overflowed. The same on every rank.
  std::string nonfinite;
};

/// How a step fits memory (issue 22): gradient accumulation and ZeRO-1. Activation recomputation
/// is the model's (GptConfig::recompute).
struct StepOptions {
  /// m: each DP rank's batch/dp sequences run as m micro-batches of batch/(dp·m), forward and
  /// backward one after another; gradients accumulate and are averaged (each micro-batch's mean
  /// loss weighs 1/m: they hold the same number of tokens), then one optimizer step. The SP and DP
  /// reductions run once, after the last micro-batch. Activation memory per rank falls by m.
  int micro_batches = 1;
  /// ZeRO stage on the DP axis: 0 (plain DP, average_gradients) or 1 (reduce-scatter, AdamW on
  /// this rank's 1/dp, all-gather: parallel/data_parallel.h). Stage 1 needs opt.shard_over(dp).
  int zero = 0;
  /// Pipeline parallelism (grid.pp() > 1, parallel/pipeline_parallel.h): the order each stage
  /// runs its m micro-batches in; `record`, when set, receives what this stage ran and when.
  Schedule schedule = Schedule::Afab;
  PipelineRecord* record = nullptr;
};

/// The part of the model this rank's pipeline stage holds: stage grid.pp_rank() of
/// grid.pp_size(), blocks by stage_layer_counts(cfg.layers, pp, pp_layers). Build the Gpt with
/// it (pp = 1: the whole model).
StageLayout pipeline_stage_layout(const ProcessGrid& grid, const GptConfig& cfg,
                                  const std::vector<int64_t>& pp_layers = {});

/// Pipeline parallelism after backward: the tied wte's gradients of the first and last stage
/// summed between the two (one send_recv over `pp`, "embedding_grads"), so both copies take the
/// same step. Nothing when pp = 1 or the head is untied.
void sum_embedding_gradients(Communicator& pp, Device& device, Gpt& model);

/// ‖g‖₂ of the whole model on a pipeline: each stage's global_grad_norm over `tp`, squared and
/// summed over `pp` ("pp_grad_norm"); the last stage's copy of a tied wte is left out.
double pipeline_grad_norm(Communicator& tp, Communicator& pp, Device& device, Gpt& model);

/// One step on a grid of one model replica, `comm` its TP group: the grid version below with
/// ProcessGrid(comm, 1) (dp = pp = 1).
StepResult train_step(Communicator& comm, Device& device, Gpt& model, AdamW& opt,
                      const Batch& batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm,
                      const std::function<void(float loss)>& after_backward = {},
                      const StepOptions& options = {});

/// The training step for every grid (parallel/process_grid.h): zero_grad → forward → backward →
/// finish_gradients → average_gradients over grid.dp() → [after_backward()] → global gradient norm
/// over grid.tp() → clip → AdamW. A non-finite loss or gradient norm skips the update (see
/// StepResult::nonfinite). Collective: every rank calls it with the same batch. With pp > 1 the
/// model is this rank's stage (pipeline_stage_layout) and its micro-batches run through the
/// stages in the order of options.schedule (run_schedule); the loss comes from the last stage to
/// every rank, the tied embedding's gradients are summed (sum_embedding_gradients) and the norm
/// covers every stage (pipeline_grad_norm); under ZeRO-1 each stage's DP group shards its own
/// stage. `model` and `opt` are built on
/// grid.tp();
/// `global_batch` is the whole batch (the same on every rank), and DP rank d runs sequences
/// [d·B/dp, (d+1)·B/dp) of it. After backward and finish_gradients, average_gradients
/// averages every gradient and the loss over grid.dp(), so clipping, AdamW, the returned loss and
/// `after_backward` see what dp = 1 would on the whole batch (up to fp32 rounding: the sum order
/// changes). Dropout is keyed by the row of the local batch, so with dropout > 0 a dp > 1 run draws
/// different masks than dp = 1: the step refuses that (bad input). B must be divisible by dp.
/// `options`: micro-batches (B/dp divisible by m; dropout 0 when m > 1, for the same reason as dp)
/// and ZeRO-1 (dp > 1, `opt` sharded over grid.dp()). Under ZeRO-1 the parameters' grad tensors
/// keep this replica's local (not averaged) gradients after the step.
StepResult train_step(ProcessGrid& grid, Device& device, Gpt& model, AdamW& opt,
                      const Batch& global_batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm,
                      const std::function<void(float loss)>& after_backward = {},
                      const StepOptions& options = {});

/// The bad-input problems of `options` for this grid and global batch, each one line naming the
/// value and the fix; empty when they are fine. train_step throws the first as bad input.
std::vector<std::string> step_option_problems(const StepOptions& options, int dp,
                                              int64_t global_batch, float dropout);

}  // namespace tp
