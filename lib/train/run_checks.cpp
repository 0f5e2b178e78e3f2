// run_checks.cpp — what a training run checks and measures around its steps (run_checks.h).
#include "train/run_checks.h"

#include <cmath>
#include <limits>
#include <vector>
#include "core/call_recorder.h"
#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "model/audit.h"
#include "model/checkpoint.h"
#include "model/evaluate.h"
#include "model/memory.h"

namespace tp {

bool audit_gradients(Communicator& world, Device& device, const Plan& plan, ProcessGrid& grid,
                     Gpt& model, const AdamWParams& hp, TokenSource& source, int64_t step) {
  Communicator& tp = grid.tp();
  const GptConfig& cfg = plan.cfg;
  const int64_t batch = plan.batch, seq = plan.seq;
  const uint64_t seed = plan.seed;
  const int dp = plan.dp;
  const ModelFile& file = plan.file;
  const std::string &init_from = plan.init_from, &load = plan.load;
  SerialCommunicator solo;
  GptConfig one = cfg;
  one.sp = false;
  one.overlap = Overlap::None;
  Gpt reference(device, solo, one);
  reference.init(seed);
  AdamW ref_opt(device, reference.params(), hp);
  if (!init_from.empty()) load_model_file(file, solo, reference);
  if (!load.empty()) load_checkpoint(load, solo, reference, ref_opt);
  // Each TP group audits its own DP slice.
  const Batch whole = source.batch(step, batch, seq);
  const Batch b = dp == 1 ? whole : batch_slice(whole, grid.dp_rank() * (batch / dp), batch / dp);
  for (Gpt* m : {&model, &reference}) {
    m->zero_grad();
    m->forward(b, seed, step);
    m->backward();
    m->finish_gradients();
  }
  // bf16: t = np and t = 1 round differently at the TP sums; tests/model/test_precision_mpi.cpp's bound.
  const double rtol = cfg.precision == Precision::Bf16 ? 0.05 : 1e-4;
  const auto problems = audit_replicated_gradients(tp, model, reference, rtol);
  int64_t replicated = 0;
  for (const Param& p : model.params()) replicated += p.split == Split::Replicated;
  for (const auto& p : problems) log0(world, "audit: ", p);
  log0(world, "audit: ", replicated - static_cast<int64_t>(problems.size()), " of ", replicated,
       " replicated gradients identical on every rank and equal to t = 1",
       problems.empty() ? "" : " — FAILED");
  return problems.empty();
}

void non_finite_step(Communicator& world, const StepResult& r, int64_t step, bool skip_nonfinite) {
  // The same on every rank (train_step): all stop here, or all skip the update.
  const double bad = r.nonfinite == "loss" ? r.loss : r.grad_norm;
  const std::string what = std::string(r.nonfinite == "loss" ? "the loss" : "the gradient norm") +
                           " is " +
                           (std::isnan(bad) ? "NaN"
                            : bad > 0       ? "+Inf"
                                            : "-Inf");
  if (!skip_nonfinite) {
    dump_flight_record("non-finite stop at step " + std::to_string(step + 1));
    throw Error(detail::str_cat("step ", step + 1, ": ", what, ", first non-finite tensor: ",
                                r.nonfinite, "; no update made and nothing saved (lower --lr, ",
                                "set --clip, or pass --skip-nonfinite to skip such steps)"),
                Error::kNonFinite);
  }
  log0(world, "step ", step + 1, ": skipped (", what, ", first non-finite tensor: ", r.nonfinite,
       ")");
}

void check_activation_memory(Communicator& world, const Gpt& model, const GptConfig& cfg,
                             int64_t seq, int64_t batch, int t) {
  const int64_t measured = model.memory().layer_bytes(0),
                formula = block_activation_bytes(cfg, seq, batch, t);
  TP_CHECK(measured == formula, "activation memory of block 0: the ledger has ", measured,
           " bytes but the formula (lib/model/memory.h) gives ", formula);
  log0(world, "activations kept per block on each rank: ", measured, " bytes (ledger) = ", formula,
       " bytes (formula", cfg.sp ? ", with SP" : "", ")");
}

void check_measured_budget(Communicator& world, const Options& o, const Plan& plan,
                           const Gpt& model, const AdamW& opt) {
  const int64_t budget = memory_budget_bytes(o);
  if (budget <= 0) return;
  int64_t states = opt.state_bytes();
  for (const Param& p : model.params())  // the fp32 master, its bf16 copy (if any), the gradient
    states += static_cast<int64_t>(p.value.bytes() + p.grad.bytes() +
                                   (p.compute.defined() ? p.compute.bytes() : 0));
  const int64_t micro = plan.batch / plan.dp / plan.step_opts.micro_batches;
  const int64_t peak = states + model.memory().total_bytes() +
                       recompute_rerun_bytes(plan.cfg, plan.seq, micro, plan.t);
  TP_CHECK_INPUT(peak <= budget, "--memory-budget=", mib(budget), " per rank: step 1 held ",
                 mib(peak), " per rank (model states ", mib(states), ", activations ",
                 mib(peak - states),
                 " by the memory ledger); raise the budget or add --recompute / --micro-batches");
  log0(world, "--memory-budget: step 1 held ", mib(peak), " per rank (ledger) of ", mib(budget));
}

double validation_loss(const Options& o, ProcessGrid& grid, Device& device, Gpt& model,
                       const TokenSource& source, const Plan& plan, int64_t step, bool last,
                       const std::function<bool()>& stop) {
  const int64_t every = o.get_int("eval-every");
  if (every <= 0 || (step % every != 0 && !last)) return std::numeric_limits<double>::quiet_NaN();
  const int64_t per_replica = plan.batch / plan.dp;
  const EvalSlice slice{grid.dp_rank() * per_replica, per_replica, plan.step_opts.micro_batches};
  // With --pp the held-out batches go forward through the stages (model/evaluate.h).
  // A SIGTERM is agreed after each held-out batch (every rank runs the same batches), so a long
  // evaluation ends within a batch; the step loop then stops the run.
  const double mine = held_out_loss(model, grid.pp(), source, o.get_int("eval-batches"), plan.batch,
                                    plan.seq, plan.seed, slice, stop);
  if (plan.dp == 1 && plan.cp == 1) return mine;
  // The mean over the replicas' slices, and under CP over each sequence's S/cp parts (equal
  // token counts: the whole batch's mean).
  Tensor v = Tensor::from_host(device, Shape{1}, {static_cast<float>(mine)});
  grid.dp().all_reduce(v);
  grid.cp().all_reduce(v);
  return v.to_host()[0] / (plan.dp * plan.cp);
}

}  // namespace tp
