// run_checks.h — what a training run checks and measures around its steps: --audit-grads (the
// replicated gradients against t = 1), a step whose loss or gradient norm is not finite, the
// activation memory and --memory-budget after step 1 (the ledger against the formulas), and
// --eval-every's held-out loss.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include "core/communicator.h"
#include "core/device.h"
#include "core/options.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/train.h"
#include "parallel/process_grid.h"
#include "train/run_plan.h"

namespace tp {

/// --audit-grads: the same step at t = 1 on every rank, from the same weights, then compared;
/// false when a replicated gradient differs.
bool audit_gradients(Communicator& world, Device& device, const Plan& plan, ProcessGrid& grid,
                     Gpt& model, const AdamWParams& hp, TokenSource& source, int64_t step);

/// A step whose loss or gradient norm is not finite (the same on every rank: train_step): all
/// stop here with one line, or with --skip-nonfinite all skip the update and say so.
void non_finite_step(Communicator& world, const StepResult& r, int64_t step, bool skip_nonfinite);

/// What a block keeps for backward, measured by the memory ledger, against the formula.
void check_activation_memory(Communicator& world, const Gpt& model, const GptConfig& cfg,
                             int64_t seq, int64_t batch, int t);

/// After the first step: the same peak from what the run holds (the parameters and gradients,
/// AdamW's state, the memory ledger's kept activations and one block's rerun) against the budget.
void check_measured_budget(Communicator& world, const Options& o, const Plan& plan,
                           const Gpt& model, const AdamW& opt);

/// --eval-every: the held-out loss (model/evaluate.h) after this step, when it is an evaluation
/// step (every N, and the last); NaN otherwise. Each DP replica runs its slice of every held-out
/// batch (in --micro-batches forwards, like training) and the replicas average. `stop`: whether
/// a signal stops the run (agreed by every rank), asked after each held-out batch.
double validation_loss(const Options& o, ProcessGrid& grid, Device& device, Gpt& model,
                       const TokenSource& source, const Plan& plan, int64_t step, bool last,
                       const std::function<bool()>& stop);

}  // namespace tp
