// tp_train — trains a small GPT with tensor parallelism; t = the number of ranks (÷ --dp).
//
//   mpirun -np 2 build/bin/tp_train --layers 2 --hidden 64 --heads 4 --steps 50
//   mpirun -np 4 build/bin/tp_train --steps 20 --save run.safetensors
//   mpirun -np 1 build/bin/tp_train --load run.safetensors --steps 20     (resume at another t)
//   mpirun -np 2 build/bin/tp_train --init-from gpt2/model.safetensors --seq 128 --export-hf out
//                                  (a Hugging Face GPT-2 in, trained, and out again; hf_gpt2.h)
//   mpirun -np 2 build/bin/tp_train --link ib --predict --steps 3   (α–β model against the ledger)
//   mpirun -np 4 build/bin/tp_train --dp 2 --steps 20     (tp 2 × dp 2: the same loss as -np 1)
//   mpirun -np 4 build/bin/tp_train --pp 2 --schedule 1f1b --micro-batches 4   (tp 2 × pp 2: again)
//   mpirun -np 2 build/bin/tp_train --steps 5 --trace run.json   (open run.json in ui.perfetto.dev;
//                                                                 run.svg is the same as a chart)
//   mpirun -np 2 build/bin/tp_train --steps 2000 --save runs/ --save-every 200 --resume auto-or-fresh
//                                  --eval-every 100   (periodic checkpoints, restart where it
//                                  stopped, the held-out loss; model/checkpoint_series.h,
//                                  model/evaluate.h)
//
// Every rank draws the same batch for a step and starts from the same weights (counter-based
// initialisation), so the loss curve is the same for every t up to fp32 rounding. With --dp N the
// ranks form a tp × dp grid (lib/parallel/process_grid.h): each TP group of np/N adjacent ranks is
// one model replica, DP rank d trains on sequences [d·B/N, (d+1)·B/N) of the step's batch, and the
// gradients (and the printed loss) are averaged over the DP group before clipping and AdamW, so the
// loss curve is that of dp = 1 on the same global batch. Only DP rank 0's TP group writes --save
// and --dump-grads (every replica holds the same weights and averaged gradients).
// With --pp N the blocks are cut into N pipeline stages (parallel/pipeline_parallel.h, the pp branch
// of train_step): the micro-batches go through them in the order of --schedule, and DP rank 0's
// stages together write one global checkpoint (and one --export-hf, one --dump-grads).
//
// The progress line's "exposed comm" is the share of the step the computing thread stood still in
// the communicator (blocking collectives, issuing and waiting for async ones; observe/timeline.h),
// measured by a timeline on the world communicator that records every step.
// Its last columns are the model FLOP/s per rank and the MFU (HFU with --recompute): the global
// model's 6·N + 12·L·h·S FLOPs per token (model/flops.h) over all ranks, divided by the peak the
// header names (the one-thread sgemm ceiling × threads, cached per machine: cpu_backend/peak_cache.h;
// the GPU's measured GEMM ceiling; or --peak-tflops: launcher.h's run_peak).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "launcher.h"
#include "model/adamw.h"
#include "model/checkpoint_series.h"
#include "model/data.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "model/hf_gpt2.h"
#include "model/schedule.h"
#include "model/train.h"
#include "observe/alpha_beta.h"
#include "observe/simulated_link.h"
#include "observe/timeline.h"
#include "observe/timer.h"
#include "parallel/process_grid.h"
#include "train/checkpoint_lifecycle.h"
#include "train/run_checks.h"
#include "train/run_log.h"
#include "train/run_outputs.h"
#include "train/run_plan.h"
#include "train/step_report.h"
#include "train/train_options.h"
#include "train/trainee.h"

using namespace tp;

namespace {

// --predict: α and β of the live communicator, measured before the first step; the report comes
// after the first warm step (the second; the first when there is only one).
struct Prediction {
  bool on = false;
  std::string prefix;  // "predict: ", or "predict (simulated link): "
  AlphaBeta link;
};

Prediction start_prediction(Context& ctx, const Plan& plan, Communicator& tp) {
  const Options& o = ctx.options;
  Communicator& world = ctx.world;
  Prediction p;
  p.on = o.get_flag("predict") && tp.size() > 1;
  p.prefix = is_simulated(tp) ? "predict (simulated link): " : "predict: ";
  if (p.on) {
    p.link = measure_alpha_beta(tp, ctx.device);
    log0(world, p.prefix, "measured ", p.link.str(), " on ", tp.name());
  } else if (o.get_flag("predict")) {  // t = 1: what moves is outside the TP group, unpredicted
    const std::string pp = plan.pp > 1 ? "the stages' activation sends (--pp " +
                                             std::to_string(plan.pp) + ")"
                                       : "",
                      dp = plan.dp > 1 ? "the replicas' gradient all-reduce (--dp " +
                                             std::to_string(plan.dp) + ")"
                                       : "";
    log0(world, "predict: t = 1 has no tensor-parallel collective",
         pp.empty() && dp.empty() ? " and moves no data; nothing to predict"
                                  : "; --predict covers only those, not " + pp +
                                        (pp.empty() || dp.empty() ? "" : " or ") + dp);
  }
  return p;
}

// What the steps leave for the end of the run.
struct StepsDone {
  int64_t step = 0;                                     // the step the run stands at
  int64_t skipped = 0, first_skipped = 0;               // --skip-nonfinite
  int64_t saved_step = -1;                              // the step of the last --save-every file
  double best_mfu = 0;                                  // recheck_peak
  std::vector<double> plot_steps, plot_losses;          // --plot
  std::vector<double> plot_val_steps, plot_val_losses;  // --eval-every's points
};

// The parts of a run that train() sets up, and its steps and its end use.
struct Run {
  Context& ctx;
  const Options& o;
  Communicator& world;
  const Plan& plan;
  ProcessGrid& grid;
  Communicator& tp;  // grid.tp()
  TokenSource& source;
  Gpt& model;
  AdamW& opt;
  CheckpointLifecycle& checkpoints;
  const Peak& peak;

  StepsDone run_steps(const LrSchedule& schedule, const Prediction& predict, OutputFile& json,
                      int64_t start, int64_t steps);
  // After the steps: the data's floor, the peak rechecked, --plot, every rank's peak memory, the
  // skipped steps, the end-of-run --save and --export-hf.
  void finish(const StepsDone& done, int64_t steps);
};

// The steps start + 1 .. start + steps: each one's batch, train_step, the checks after the first,
// the progress and JSON lines, the held-out loss and --save-every's file; then the timeline's
// trace. A signal stops the run at a step boundary (with an emergency checkpoint).
StepsDone Run::run_steps(const LrSchedule& schedule, const Prediction& predict, OutputFile& json,
                         int64_t start, int64_t steps) {
  const GptConfig& cfg = plan.cfg;
  const int64_t seq = plan.seq, batch = plan.batch;
  const uint64_t seed = plan.seed;
  const int dp = plan.dp;
  const std::string trace = o.get_text("trace");
  const TokenFlops flops = token_flops(cfg, seq);
  StepsDone done;
  int64_t step = start;
  const int64_t every = std::max<int64_t>(1, o.get_int("log-every"));
  const float clip = static_cast<float>(o.get_real("clip"));
  const bool skip_nonfinite = o.get_flag("skip-nonfinite");
  // The timeline: collectives of every step (for the exposed communication), kernels too in the
  // traced steps; it keeps the spans of the traced steps only.
  Timeline timeline(world.rank());
  tp.set_timeline(&timeline);
  grid.dp().set_timeline(&timeline);
  grid.pp().set_timeline(&timeline);
  grid.cp().set_timeline(&timeline);
  PipelineRecord record;  // --pp: what this stage ran in the step, and when
  StepOptions step_opts = plan.step_opts;
  if (plan.pp > 1) step_opts.record = &record;
  const int64_t traced_from = steps > 1 ? std::max<int64_t>(1, steps - kTraceSteps) : 0;
  enable_graceful_stop();  // SIGINT/SIGTERM: stop at a step boundary, agreed by every rank
  for (int64_t i = 0; i < steps; ++i, ++step) {
    set_current_step(step + 1);
    if (const int sig = agreed_stop_signal()) checkpoints.stop_after_signal(step, sig);
    const bool tracing = !trace.empty() && i >= traced_from;
    if (!tracing || i == traced_from) timeline.clear();
    ctx.device.set_timeline(tracing ? &timeline : nullptr);
    const size_t span_mark = timeline.mark();
    const double t0 = now();
    const size_t mark = tp.ledger().size(), dp_mark = grid.dp().ledger().size(),
                 cp_mark = grid.cp().ledger().size();
    const Batch b = source.batch(step, batch, seq);
    const float lr = learning_rate(schedule, step);
    const bool dump = i == 0 && !o.get_text("dump-grads").empty();
    const StepResult r = train_step(
        grid, ctx.device, model, opt, b, seed, step, lr, clip,
        [&](float loss) {
      if (!dump) return;
      // The gradients and loss are the whole batch's here (averaged over dp): one TP group
      // writes them with the whole batch.
      checkpoints.write_agreed("--dump-grads", [&] {
        dump_gradients(o.get_text("dump-grads"), tp, grid.pp(), model, b, loss);
      });
      log0(world, "wrote gradients of step ", step, " to ", o.get_text("dump-grads"));
        },
        step_opts);
    const float loss = r.loss;
    const double norm = r.grad_norm;
    if (!r.nonfinite.empty()) {
      non_finite_step(world, r, step, skip_nonfinite);
      if (done.skipped++ == 0) done.first_skipped = step + 1;
      if (checkpoints.periodic_save(step + 1)) done.saved_step = step + 1;
      continue;
    }
    done.plot_steps.push_back(static_cast<double>(step + 1));
    done.plot_losses.push_back(loss);
    ctx.device.synchronize();
    if (i == 0 && plan.pp == 1 && cfg.experts == 0) {  // (no closed form for experts yet)
      check_activation_memory(world, model, cfg, seq / plan.cp,
                              batch / dp / plan.step_opts.micro_batches, tp.size());
      check_measured_budget(world, o, plan, model, opt);
    }
    if (plan.pp > 1 && (i == 0 || i + 1 == steps))
      log_pipeline(ctx.device, world, grid, plan, record);
    const double secs = now() - t0,
                 comm = tp.ledger().seconds_since(mark) +
                        grid.dp().ledger().seconds_since(dp_mark) +
                        (plan.cp > 1 ? grid.cp().ledger().seconds_since(cp_mark) : 0.0);
    const double exposed = timeline.totals_since(span_mark).exposed;
    StepNumbers n{step + 1, loss,    norm, lr,        static_cast<double>(batch * seq) / secs,
                  comm,     exposed, secs, tp.size(), dp};
    set_utilisation(n, flops, static_cast<double>(batch * seq), world.size(), peak.flops);
    if (peak.given && n.mfu > 1.0 && done.best_mfu <= 1.0)  // the first step past 100 %: once
      log0(world, "warning: MFU ", fmt_g(100.0 * n.mfu), " % at step ", step + 1,
           ": no rank computes faster than its peak, so --peak-tflops ", fmt_g(peak.flops / 1e12),
           " is below this machine's; give its real peak or leave "
           "--peak-tflops out to measure it");
    done.best_mfu = std::max(done.best_mfu, n.mfu);
    if (i % every == 0 || i + 1 == steps) {
      log0(world, progress_line(n, is_simulated(tp)));
      if (cfg.experts > 0) log0(world, moe_line(model));
    }
    if (predict.on && i == std::min<int64_t>(1, steps - 1))
      log0(world, predict.prefix, "step ", step + 1, ":\n",
           prediction_report(tp.ledger(), mark, tp.ledger().size(), predict.link, predict.prefix));
    n.val_loss = validation_loss(o, grid, ctx.device, model, source, plan, step + 1, i + 1 == steps,
                                 [] { return agreed_stop_signal() != 0; });
    if (std::isfinite(n.val_loss)) {
      log0(world, validation_line(n, source, o.get_int("eval-batches"), batch));
      done.plot_val_steps.push_back(static_cast<double>(step + 1));
      done.plot_val_losses.push_back(n.val_loss);
    }
    if (json.is_open()) json.write(json_line(n) + "\n");
    if (checkpoints.periodic_save(step + 1)) done.saved_step = step + 1;
  }
  tp.set_timeline(nullptr);
  grid.dp().set_timeline(nullptr);
  grid.pp().set_timeline(nullptr);
  grid.cp().set_timeline(nullptr);
  ctx.device.set_timeline(nullptr);
  json.close();  // checked: a deferred write error (NFS, a full disk) surfaces here
  if (const int sig = agreed_stop_signal()) checkpoints.stop_after_signal(step, sig);
  if (!trace.empty() && steps > 0)
    write_trace(ctx.device, world, timeline, trace,
                world.name() + ", t = " + std::to_string(tp.size()) +
                    (plan.cp > 1 ? " × cp = " + std::to_string(plan.cp) : std::string()) +
                    (dp > 1 ? " × dp = " + std::to_string(dp) : std::string()) +
                    (plan.pp > 1 ? " × pp = " + std::to_string(plan.pp) : std::string()) +
                    ", --overlap " + overlap_name(cfg.overlap),
                step, steps - traced_from);
  done.step = step;
  return done;
}

void Run::finish(const StepsDone& done, int64_t steps) {
  const std::string &load = plan.load, &export_dir = plan.export_dir, plot = o.get_text("plot");
  const int64_t step = done.step, skipped = done.skipped, first_skipped = done.first_skipped,
                saved_step = done.saved_step;
  if (std::isfinite(source.loss_floor()))
    log0(world, "loss floor of this data: ", source.loss_floor(), " nats");
  recheck_peak(world, ctx.device, peak, done.best_mfu);
  write_plot(world, plot, source, done.plot_steps, done.plot_losses, done.plot_val_steps,
             done.plot_val_losses);
  log_peak_memory(ctx.device, world);
  if (skipped > 0)
    log0(world, "--skip-nonfinite: skipped ", skipped, " of ", steps,
         " steps with a non-finite loss or gradient norm (the first at step ", first_skipped, ")");
  // (A folder's end-of-run file is the series' file of the last step: written already when
  // --save-every divides it; and a resumed run with nothing left to train loaded it.)
  const CheckpointSeries series(o.get_text("save"));
  const bool written = (saved_step == step && series.final_path(step) == series.path_for(step)) ||
                       (steps == 0 && plan.resumed && series.final_path(step) == load);
  if (!written) checkpoints.save_at_end(step);
  if (!export_dir.empty()) {
    const Dtype dtype = o.get_text("export-dtype") == "bf16" ? Dtype::bf16 : Dtype::f32;
    // Pipeline stages send their weights to the first stage.
    checkpoints.write_agreed("--export-hf",
                             [&] { export_hf(export_dir, tp, grid.pp(), model, dtype); });
    log0(world, "exported a Hugging Face GPT-2 to ", export_dir,
         "/model.safetensors and config.json (weights only)");
  }
}

int train(Context& ctx) {
  const Options& o = ctx.options;
  Communicator& world = ctx.world;
  Plan plan = plan_run(o, world.size());
  check_memory_budget(o, plan, world.size());
  GptConfig& cfg = plan.cfg;
  const int64_t seq = plan.seq;
  const uint64_t seed = plan.seed;
  const std::string &load = plan.load, &export_dir = plan.export_dir;
  const int dp = plan.dp;

  const std::string trace = o.get_text("trace");
  CheckpointSeries(o.get_text("save")).create_folder();  // --save DIR/ (every rank: idempotent)
  check_output_paths(run_output_paths(o, trace, export_dir));
  // --save is this run's until it ends: a second run saving to the same file is refused now, not
  // silently overwritten at the end (lib/model/checkpoint.h).
  const CheckpointClaim claim(CheckpointSeries(o.get_text("save")).claim_path(), world, ctx.device);

  const std::unique_ptr<TokenSource> source = token_source(plan, o.get_real("val-fraction"));

  TP_CHECK_INPUT(o.get_int("eval-every") == 0 || source->has_held_out(), "--eval-every ",
                 o.get_int("eval-every"), " needs held-out data and there is none (",
                 source->describe(),
                 "): give --val-fraction F (> 0) leaving at least seq + 1 = ", seq + 1,
                 " bytes on each side, or drop --eval-every");
  // The tp × dp (× pp) grid: `tp` is this rank's TP group (the whole world when --dp 1, --pp 1).
  ProcessGrid grid(world, GridAxes{dp, plan.pp, plan.cp, plan.ep}, ctx.node_of_rank);
  Communicator& tp = grid.tp();
  if (!grid.placement_warning().empty()) log0(world, "warning: ", grid.placement_warning());
  AdamWParams hp;
  hp.lr = static_cast<float>(o.get_real("lr"));
  hp.weight_decay = static_cast<float>(o.get_real("weight-decay"));
  const LrSchedule schedule{hp.lr, plan.warmup, plan.decay_steps};
  const Trainee trainee = build(
      ctx.device, tp, cfg, pipeline_stage_layout(grid, cfg, plan.pp_layers), seed, hp, &grid.ep());
  Gpt& model = *trainee.model;
  AdamW& opt = *trainee.opt;
  model.set_context_parallel(grid.cp(), plan.cp_layout);  // cp 1: nothing changes
  // Before training, not after: with --save-every, room for --keep files and the next one (a save
  // writes the new file before it prunes the oldest), or for as many as this run saves.
  const int64_t save_every = o.get_int("save-every");
  const int64_t files =
      save_every > 0
          ? std::min(std::max<int64_t>(o.get_int("keep"), 0), plan.steps / save_every) + 1
          : 1;
  check_save_space(CheckpointSeries(o.get_text("save")).final_path(0), world, ctx.device, model,
                   files);
  int64_t step = start_from(world, tp, plan, model, opt);
  CheckpointLifecycle checkpoints(world, ctx.device, o, grid, model, opt, plan.origin, load);
  std::string steps_note;
  const int64_t steps = steps_to_run(plan, step, steps_note);
  if (!steps_note.empty()) log0(world, steps_note);
  shard_optimizer(world, grid, plan, model, opt);
  log_run(world, ctx.device, plan, grid, model, *source, hp.lr, step, steps,
          cfg.precision == Precision::Bf16 ? bf16_gemm_path(ctx.device) : "");
  const Peak peak = run_peak(ctx);
  log0(world, flops_line(cfg, seq, world.size(), peak.flops, peak.what));
  if (o.get_text("backend") != "gpu")
    if (const std::string note = blas_kernel_note(ctx.device); !note.empty()) log0(world, note);
  for (const std::string& note : plan.resume_notes) log0(world, "--resume: ", note);
  for (const std::string& note : plan.origin_notes) log0(world, note);

  // Rank 0 writes the outputs; every write is checked (core/output_file.h): a full disk or a
  // read-only file system stops the run at once with errno, not silently, and not after training.
  // --plot and --trace are written at the end, so their files get a placeholder now, which finds
  // those faults before the first step.
  const std::string plot = o.get_text("plot"), log_json = o.get_text("log-json");
  OutputFile json = open_outputs(world, log_json, plot, trace, steps, plan.resumed ? step : -1);
  if (o.get_flag("audit-grads")) {
    if (!audit_gradients(world, ctx.device, plan, grid, model, hp, *source, step)) return 1;
    model.zero_grad();
  }
  const Prediction predict = start_prediction(ctx, plan, tp);
  Run run{ctx, o, world, plan, grid, tp, *source, model, opt, checkpoints, peak};
  const StepsDone done = run.run_steps(schedule, predict, json, step, steps);
  run.finish(done, steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o(
      "tp_train",
      "Trains a small GPT with tensor parallelism over the ranks of mpirun (t = -np), or on a "
      "tp × dp × pp grid with --dp and --pp (t = -np / (dp · pp)).");
  declare_train_options(o);
  return run_program(argc, argv, o, train);
}
