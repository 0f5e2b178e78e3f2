// tp_train — trains a small GPT with tensor parallelism; t = the number of ranks (÷ --dp).
//
//   mpirun -np 2 build/bin/tp_train --layers 2 --hidden 64 --heads 4 --steps 50
//   mpirun -np 4 build/bin/tp_train --steps 20 --save run.safetensors
//   mpirun -np 1 build/bin/tp_train --load run.safetensors --steps 20     (resume at another t)
//   mpirun -np 2 build/bin/tp_train --init-from gpt2/model.safetensors --seq 128 --export-hf out
//                                  (a Hugging Face GPT-2 in, trained, and out again; hf_gpt2.h)
//   mpirun -np 2 build/bin/tp_train --link ib --predict --steps 3   (α–β model against the ledger)
//   mpirun -np 4 build/bin/tp_train --dp 2 --steps 20     (tp 2 × dp 2: the same loss as -np 1)
//   mpirun -np 2 build/bin/tp_train --steps 5 --trace run.json   (open run.json in ui.perfetto.dev;
//                                                                 run.svg is the same as a chart)
//
// Every rank draws the same batch for a step and starts from the same weights (counter-based
// initialisation), so the loss curve is the same for every t up to fp32 rounding. With --dp N the
// ranks form a tp × dp grid (lib/parallel/process_grid.h): each TP group of np/N adjacent ranks is
// one model replica, DP rank d trains on sequences [d·B/N, (d+1)·B/N) of the step's batch, and the
// gradients (and the printed loss) are averaged over the DP group before clipping and AdamW, so the
// loss curve is that of dp = 1 on the same global batch. Only DP rank 0's TP group writes --save
// and --dump-grads (every replica holds the same weights and averaged gradients).
//
// The progress line's "exposed comm" is the share of the step the computing thread stood still in
// the communicator (blocking collectives, issuing and waiting for async ones; observe/timeline.h),
// measured by a timeline on the world communicator that records every step.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "core/output_file.h"
#include "core/simulated_link.h"
#include "launcher.h"
#include "model/adamw.h"
#include "model/audit.h"
#include "model/checkpoint.h"
#include "model/data.h"
#include "model/file_shape.h"
#include "model/gpt.h"
#include "model/hf_gpt2.h"
#include "model/memory.h"
#include "model/preflight.h"
#include "model/schedule.h"
#include "model/train.h"
#include "observe/alpha_beta.h"
#include "observe/svg_plot.h"
#include "observe/timeline.h"
#include "observe/timer.h"
#include "parallel/process_grid.h"

using namespace tp;

namespace {

// --trace records the last kTraceSteps steps, never the first (it pays for first-touch allocations
// and page faults) unless it is the only one: every kernel and collective of a step is a span, a
// few hundred per step of the default model, and a chart of more steps is no easier to read.
constexpr int64_t kTraceSteps = 3;

// run.json → run.svg (any other name gets ".svg" appended).
std::string svg_path(const std::string& json_path) {
  const std::string ext = ".json";
  if (json_path.size() > ext.size() &&
      json_path.compare(json_path.size() - ext.size(), ext.size(), ext) == 0)
    return json_path.substr(0, json_path.size() - ext.size()) + ".svg";
  return json_path + ".svg";
}

// What to check up front for --export-hf DIR (launcher.h's check_output_paths checks files): its
// config.json when DIR exists, else the first missing folder on the way to DIR, which export_hf
// creates; a read-only or missing parent is found before training, not after.
std::string export_probe(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return dir + "/config.json";
  for (;;) {
    const size_t slash = dir.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "."
                               : slash == 0               ? "/"
                                                          : dir.substr(0, slash);
    if (parent == dir || ::stat(parent.c_str(), &st) == 0) return dir;
    dir = parent;
  }
}

// Runs `make`, turning an allocation failure into one line that names what was being allocated,
// about how big it is and the flags that size it.
template <typename Make>
auto allocating(const std::string& what, const std::string& flags, Make make) {
  try {
    return make();
  } catch (const std::bad_alloc&) {
    TP_CHECK_INPUT(false, "out of memory allocating ", what, ": reduce ", flags);
  } catch (const Error& e) {
    // The device's own "out of host/GPU memory allocating N bytes": the same sizes on every rank,
    // so treated as bad input (one line from rank 0), with what was being allocated.
    const std::string m = e.what();
    if (e.on_every_rank() || m.rfind("out of ", 0) != 0) throw;
    TP_CHECK_INPUT(false, m, " for ", what, ": reduce ", flags);
  }
}

// Every rank got (or was told of) SIGINT/SIGTERM and stands at the same step boundary: write an
// emergency checkpoint when --save is given, then end with 128 + the signal on every rank.
[[noreturn]] void stop_after_signal(Communicator& world, ProcessGrid& grid, const Options& o,
                                    const Gpt& model, AdamW& opt, int64_t step, int sig) {
  const std::string name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
  const std::string save = o.get_text("save");
  std::string said = "no checkpoint written (no --save)";
  if (!save.empty()) {
    // DP replicas hold the same weights and moments: DP rank 0's TP group writes the file.
    if (opt.sharded()) opt.unshard(model.params());  // --zero 1: the file holds them whole
    if (grid.dp_rank() == 0) save_checkpoint(save, grid.tp(), model, opt, step);
    world.barrier();
    said = "emergency checkpoint " + save + " saved at step " + std::to_string(step) +
           " (resume with --load " + save + ")";
  }
  throw Error(detail::str_cat("stopped by ", name, " before step ", step + 1, ": ", said),
              128 + sig);
}

// What train() runs, read from the flags (and the model file they name) and checked: every
// problem at once, before anything allocates or communicates.
struct Plan {
  GptConfig cfg;
  int64_t seq = 0;  // the length of a training sequence (cfg.seq: the position table)
  int64_t steps = 0, batch = 0, warmup = 0, decay_steps = 0;
  uint64_t seed = 0;
  std::string data, init_from, load, export_dir;
  ModelFile file;
  int dp = 1, t = 1;      // t: the TP group's size
  StepOptions step_opts;  // --micro-batches, --zero
};

Plan plan_run(const Options& o, int world_size) {
  Plan r;
  GptConfig& cfg = r.cfg;
  cfg = config_from_flags(o);
  int64_t& seq = r.seq;
  seq = cfg.seq;  // the length of a training sequence (cfg.seq: the position table)
  const int64_t steps = r.steps = o.get_int("steps"), batch = r.batch = o.get_int("batch");
  r.seed = static_cast<uint64_t>(o.get_int("seed"));
  const std::string& data = r.data = o.get_text("data");
  const int dp = r.dp = o.get_int32("dp");
  // Check every flag before anything allocates or communicates; report all problems at once.
  std::vector<std::string> problems;
  if (steps < 0) problems.push_back("--steps=" + std::to_string(steps) + " must be 0 or more");
  const int64_t warmup = r.warmup = o.get_int("warmup"),
                decay_steps = r.decay_steps = o.get_int("decay-steps");
  if (decay_steps != 0 && decay_steps <= warmup)
    problems.push_back("--decay-steps=" + std::to_string(decay_steps) +
                       " must be above --warmup=" + std::to_string(warmup) +
                       " (the cosine decay runs from the end of warm-up to step N), or 0 for no "
                       "decay");
  if (!data.empty() && cfg.vocab != 0 && cfg.vocab != 256)
    problems.push_back("--data uses byte tokens (V = 256); drop --vocab=" +
                       std::to_string(cfg.vocab));
  if (cfg.vocab == 0) cfg.vocab = 256;
  // --init-from F (weights only), or --load F: the shape from the file. A Hugging Face file given
  // to --load is taken as --init-from (it holds no optimizer state and no step).
  std::string &init_from = r.init_from = o.get_text("init-from"),
              &load = r.load = o.get_text("load");
  ModelFile& file = r.file;
  if (!init_from.empty() && !load.empty())
    problems.push_back("give --init-from (weights only) or --load (resume), not both");
  else if (!init_from.empty() || !load.empty()) {
    file = inspect_model_file(init_from.empty() ? load : init_from,
                              o.given("heads") ? o.get_int("heads") : 0);
    if (file.hub && !load.empty()) std::swap(init_from, load);
    shape_from_file(file, o,
                    init_from.empty() ? FileShape::FlagsOverride : FileShape::FlagsMustAgree, cfg,
                    seq, problems);
    if (!data.empty() && cfg.vocab < 256)
      problems.push_back("--data uses byte tokens (ids 0..255), but " + file.path +
                         " has a vocabulary of " + std::to_string(cfg.vocab));
  }
  const auto grid_problems = ProcessGrid::problems(world_size, dp);
  for (const auto& p : grid_problems) problems.push_back(p);
  const int t = r.t = grid_problems.empty() ? world_size / dp : world_size;  // TP group size
  if (grid_problems.empty() && batch >= 1 && batch % dp != 0)
    problems.push_back("--batch=" + std::to_string(batch) + " is not divisible by --dp=" +
                       std::to_string(dp) + ": every DP rank takes batch/dp sequences");
  const StepOptions& step_opts = r.step_opts = {o.get_int32("micro-batches"), o.get_int32("zero")};
  if (grid_problems.empty() && batch >= 1 && batch % dp == 0)
    for (const auto& p : step_option_problems(step_opts, dp, batch, dp > 1 ? 0.0f : cfg.dropout))
      problems.push_back(p);
  if (step_opts.zero == 1 && !o.get_text("dump-grads").empty())
    problems.push_back(
        "--dump-grads with --zero 1: each replica holds only its 1/dp of the "
        "averaged gradients; dump them with --zero 0");
  if (dp > 1 && cfg.dropout != 0.0f)
    problems.push_back(
        "--dropout with --dp > 1: the masks are keyed by the row of each DP "
        "rank's own slice, so the run would not match --dp 1; use --dropout 0");
  if (cfg.sp && seq != cfg.seq && seq % t != 0)
    problems.push_back("--seq=" + std::to_string(seq) + " is not divisible by t=" +
                       std::to_string(t) + ", which sequence parallelism needs");
  const std::string& export_dir = r.export_dir = o.get_text("export-hf");
  if (!export_dir.empty() && !hf_export_problem(cfg).empty())
    problems.push_back("--export-hf: GPT-2 cannot hold this model: " + hf_export_problem(cfg));
  // The preflight's checks (lib/model/preflight.h; tp_preflight prints the same), one line each,
  // for the TP group: with --dp, t is ranks / dp, and the messages say so where they name t.
  PreflightInput pre;
  pre.model = cfg;
  pre.batch = batch;
  pre.t = t;
  if (dp > 1) pre.t_label = "the TP group: ranks / --dp";
  for (const std::string& p : preflight(pre).problems) problems.push_back(p);
  TP_CHECK_INPUT(problems.empty(), problems_message(problems));
  return r;
}

// Peak device memory of every rank, in MiB (gathered for the report, after training).
void log_peak_memory(Device& device, Communicator& world) {
  Tensor mine = Tensor::from_host(device, Shape{2},
                                  {static_cast<float>(device.memory().peak / 1048576.0),
                                   static_cast<float>(device.memory().largest / 1048576.0)});
  Tensor all(device, Shape{world.size(), 2});
  world.all_gather(mine, all);
  const std::vector<float> v = all.to_host();
  std::string line;
  char buf[96];
  for (int r = 0; r < world.size(); ++r) {
    std::snprintf(buf, sizeof buf, "%srank %d %.2f MiB (largest tensor %.2f MiB)", r ? ", " : "", r,
                  v[2 * r], v[2 * r + 1]);
    line += buf;
  }
  log0(world, "peak device memory: ", line);
}

// --plot: the loss curve (and the data's floor), written by rank 0.
void write_plot(Communicator& world, const std::string& plot, const TokenSource& source,
                const std::vector<double>& plot_steps, const std::vector<double>& plot_losses) {
  if (!plot.empty() && !plot_steps.empty()) {  // (every step skipped: no curve)
    if (world.rank() == 0) {
      std::vector<PlotSeries> series = {
          {"t = " + std::to_string(world.size()), plot_steps, plot_losses, "#1f77b4", false}};
      if (std::isfinite(source.loss_floor()))
        series.push_back({"loss floor",
                          {plot_steps.front(), plot_steps.back()},
                          {source.loss_floor(), source.loss_floor()},
                          "#888888",
                          true});
      write_text_file(plot,
                      svg_line_plot("tp_train: training loss, t = " + std::to_string(world.size()),
                                    "step", "loss (nats)", series),
                      "--plot " + plot);
    }
    log0(world, "loss curve of steps ", plot_steps.front(), "..", plot_steps.back(), ": ", plot);
  }
}

// --save at the end of the run; a failed write names what is still intact.
void save_at_end(Communicator& world, ProcessGrid& grid, const Options& o, const Gpt& model,
                 AdamW& opt, int64_t step, const std::string& load) {
  Communicator& tp = grid.tp();
  if (!o.get_text("save").empty()) {
    const std::string save = o.get_text("save");
    try {
      // Every DP replica holds the same weights and moments: DP rank 0's TP group writes the file.
      if (opt.sharded()) opt.unshard(model.params());  // --zero 1: the file holds them whole
      if (grid.dp_rank() == 0) save_checkpoint(save, tp, model, opt, step);
      world.barrier();
    } catch (const Error& e) {
      // The write is atomic (temporary file, then rename): whatever was at `save` is untouched.
      struct stat st {};
      const std::string where =
          ::stat(save.c_str(), &st) == 0
              ? "the previous checkpoint " + save + " is intact; rerun with --load " + save
          : !load.empty() ? "the checkpoint this run started from, " + load +
                                ", is intact; rerun with --load " + load
                          : "no checkpoint of this run exists; its steps are lost";
      throw Error(detail::str_cat(e.what(), "; ", where), e.exit_code());
    }
    log0(world, "saved ", save, " at step ", step);
  }
}

// --audit-grads: the same step at t = 1 on every rank, from the same weights, then compared;
// false when a replicated gradient differs.
bool audit_gradients(Context& ctx, const Plan& plan, ProcessGrid& grid, Gpt& model,
                     const AdamWParams& hp, TokenSource& source, int64_t step) {
  Communicator& world = ctx.world;
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
  Gpt reference(ctx.device, solo, one);
  reference.init(seed);
  AdamW ref_opt(ctx.device, reference.params(), hp);
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
  const auto problems = audit_replicated_gradients(tp, model, reference);
  int64_t replicated = 0;
  for (const Param& p : model.params()) replicated += p.split == Split::Replicated;
  for (const auto& p : problems) log0(world, "audit: ", p);
  log0(world, "audit: ", replicated - static_cast<int64_t>(problems.size()), " of ", replicated,
       " replicated gradients identical on every rank and equal to t = 1",
       problems.empty() ? "" : " — FAILED");
  return problems.empty();
}

// What this run is: the grid, the model, the data, the batch and the steps.
void log_run(Context& ctx, const Plan& plan, ProcessGrid& grid, const Gpt& model,
             const TokenSource& source, float lr, int64_t step) {
  Communicator& world = ctx.world;
  Communicator& tp = grid.tp();
  const GptConfig& cfg = plan.cfg;
  const int64_t seq = plan.seq, steps = plan.steps, batch = plan.batch;
  const int dp = plan.dp;
  int64_t n_params = 0;
  for (const Param& p : model.params())
    n_params += p.ckpt_rows > 0 ? p.ckpt_rows * p.cols() : p.shape.numel();
  log0(world, "tp_train: t = ", tp.size(), " (", world.name(), ", ", ctx.device.name(), ")");
  if (dp > 1) log0(world, "grid: ", grid.describe());
  log0(world, "model: ", cfg.str(), ", ", n_params, " parameters");
  log0(world, "data: ", source.describe());
  if (model.padded_vocab() != cfg.vocab)
    log0(world, "vocabulary ", cfg.vocab, " padded to ", model.padded_vocab(), " (",
         model.padded_vocab() / tp.size(),
         " rows per rank); the padding is never looked up, never wins the softmax, and is not "
         "saved");
  if (seq < cfg.seq)
    log0(world, "sequences of ", seq, " tokens; the position table holds ", cfg.seq);
  log0(world, "batch ", batch, " x seq ", seq, " = ", batch * seq, " tokens/step",
       dp > 1 ? " (" + std::to_string(batch / dp) +
                    " sequences on each of dp = " + std::to_string(dp) + " replicas)"
              : std::string(),
       ", lr ", lr, ", steps ", step, " -> ", step + steps);
}

// --trace: every rank's spans to rank 0, one trace for Perfetto and one chart, of the steps
// (step - traced) + 1 .. step.
void write_trace(Device& device, Communicator& world, Timeline& timeline, const std::string& trace,
                 const std::string& title, int64_t step, int64_t traced) {
  timeline.gather(world, device);
  if (world.rank() == 0) {
    timeline.write_trace_json(trace, "--trace " + trace);
    timeline.set_title(title);
    timeline.write_svg(svg_path(trace), "--trace (its SVG) " + svg_path(trace));
  }
  log0(world, "trace of steps ", step - traced + 1, "..", step, " (", timeline.spans().size(),
       " spans of ", world.size(), " ranks): ", trace, " (open in https://ui.perfetto.dev) and ",
       svg_path(trace));
}

// Rank 0's output files, opened (--log-json) or given a placeholder (--plot, --trace: written at
// the end) before the first step, so that a full disk or a read-only file system stops the run now.
OutputFile open_outputs(Communicator& world, const std::string& log_json, const std::string& plot,
                        const std::string& trace, int64_t steps) {
  OutputFile json;
  if (world.rank() == 0) {
    if (!log_json.empty())
      json = OutputFile(log_json, "--log-json " + log_json, OutputFile::Mode::Append);
    const std::string note =
        svg_placeholder("tp_train writes this file when it ends (it stays so if the run stopped)");
    if (!plot.empty() && steps > 0) write_text_file(plot, note, "--plot " + plot);
    if (!trace.empty() && steps > 0) {
      write_text_file(trace, "{\"traceEvents\": []}\n", "--trace " + trace);
      write_text_file(svg_path(trace), note, "--trace (its SVG) " + svg_path(trace));
    }
  }
  return json;
}

// A step whose loss or gradient norm is not finite (the same on every rank: train_step): all
// stop here with one line, or with --skip-nonfinite all skip the update and say so.
void non_finite_step(Communicator& world, const StepResult& r, int64_t step, bool skip_nonfinite) {
  // The same on every rank (train_step): all stop here, or all skip the update.
  const double bad = r.nonfinite == "loss" ? r.loss : r.grad_norm;
  const std::string what = std::string(r.nonfinite == "loss" ? "the loss" : "the gradient norm") +
                           " is " +
                           (std::isnan(bad) ? "NaN"
                            : bad > 0       ? "+Inf"
                                            : "-Inf");
  if (!skip_nonfinite)
    throw Error(detail::str_cat("step ", step + 1, ": ", what, ", first non-finite tensor: ",
                                r.nonfinite, "; no update made and nothing saved (lower --lr, ",
                                "set --clip, or pass --skip-nonfinite to skip such steps)"),
                Error::kNonFinite);
  log0(world, "step ", step + 1, ": skipped (", what, ", first non-finite tensor: ", r.nonfinite,
       ")");
}

// --zero 1: AdamW's moments sharded over the DP replicas (after a load, which reads them whole).
void shard_optimizer(Communicator& world, ProcessGrid& grid, const Plan& plan, const Gpt& model,
                     AdamW& opt) {
  if (plan.step_opts.zero != 1 || opt.sharded()) return;
  const int64_t whole = opt.state_bytes();
  opt.shard_over(grid.dp(), model.params());
  log0(world, "--zero 1: AdamW's moments on each rank: ", opt.state_bytes(),
       " bytes (2 · 4 · ⌈P/dp⌉", ", P = ", whole / 8,
       " parameter elements of this TP rank) instead of ", whole);
}

// What a block keeps for backward, measured by the memory ledger, against the formula.
void check_activation_memory(Communicator& world, const Gpt& model, const GptConfig& cfg,
                             int64_t seq, int64_t batch, int t) {
  const int64_t measured = model.memory().layer_bytes(0),
                formula = block_activation_bytes(cfg, seq, batch, t);
  TP_CHECK(measured == formula, "activation memory of block 0: the ledger has ", measured,
           " bytes but the formula (lib/model/memory.h) gives ", formula);
  log0(world, "activations kept per block on each rank: ", measured, " bytes (ledger) = ", formula,
       " bytes (formula", cfg.sp ? ", with SP" : "", ")");
}

// One step's numbers, as the progress line and --log-json print them.
struct StepNumbers {
  int64_t step;  // 1-based
  float loss;
  double norm;
  float lr;
  double tok_s, comm, exposed, secs;
  int t, dp;
};

std::string progress_line(const StepNumbers& n, bool simulated) {
  char line[200];
  std::snprintf(line, sizeof line,
                "step %5lld | loss %.6f | grad norm %.4f | lr %.3g | %.0f tok/s | exposed comm "
                "%4.1f%%%s",
                static_cast<long long>(n.step), n.loss, n.norm, n.lr, n.tok_s,
                100.0 * n.exposed / n.secs, simulated ? " (simulated link)" : "");
  return line;
}

std::string json_line(const StepNumbers& n) {
  char line[280];
  std::snprintf(line, sizeof line,
                "{\"step\": %lld, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                "\"tokens_per_s\": %.6g, "
                "\"comm_s\": %.6g, \"exposed_s\": %.6g, \"compute_s\": %.6g, \"t\": %d, "
                "\"dp\": %d}",
                static_cast<long long>(n.step), n.loss, n.norm, n.lr, n.tok_s, n.comm, n.exposed,
                n.secs - n.comm, n.t, n.dp);
  return line;
}

// Every output path on every rank, before anything is allocated or trained: a bad path costs
// seconds, not the run.
void check_outputs(const Options& o, const std::string& trace, const std::string& export_dir) {
  check_output_paths({{"--save", o.get_text("save")},
                      {"--dump-grads", o.get_text("dump-grads")},
                      {"--log-json", o.get_text("log-json")},
                      {"--trace", trace},
                      {"--trace (its SVG)", trace.empty() ? "" : svg_path(trace)},
                      {"--plot", o.get_text("plot")},
                      {"--export-hf", export_dir.empty() ? "" : export_probe(export_dir)}});
}

// The model (initialised from `seed`) and its optimizer on this rank's TP group; running out of
// memory is one line naming what and the flags that size it.
struct Trainee {
  std::unique_ptr<Gpt> model;
  std::unique_ptr<AdamW> opt;
};

Trainee build(Device& device, Communicator& tp, const GptConfig& cfg, uint64_t seed,
              const AdamWParams& hp) {
  // The size of weights and gradients (fp32) per rank, roughly, for an out-of-memory message.
  const double h = static_cast<double>(cfg.hidden), ffn = cfg.ffn ? cfg.ffn : 4.0 * h;
  const double weights = 4.0 *
                         (static_cast<double>(cfg.layers) * (4 * h * h + 3 * h * ffn) +
                          static_cast<double>(cfg.vocab + cfg.seq) * h) /
                         tp.size();
  auto model_ptr =
      allocating("the model (about " + gib(2 * weights) + " of weights and gradients per rank)",
                 "--hidden/--layers/--ffn/--vocab/--seq or add ranks",
                 [&] { return std::make_unique<Gpt>(device, tp, cfg); });
  model_ptr->init(seed);
  auto opt_ptr = allocating("AdamW's moments (about " + gib(2 * weights) + " per rank)",
                            "--hidden/--layers/--ffn/--vocab or add ranks", [&] {
                              return std::make_unique<AdamW>(device, model_ptr->params(), hp);
                            });
  return {std::move(model_ptr), std::move(opt_ptr)};
}

// --init-from (weights, step 0) or --load (weights, moments and the step): the step to start at.
int64_t start_from(Communicator& world, Communicator& tp, const Plan& plan, Gpt& model,
                   AdamW& opt) {
  const std::string &init_from = plan.init_from, &load = plan.load;
  const ModelFile& file = plan.file;
  int64_t step = 0;
  if (!init_from.empty()) {
    load_model_file(file, tp, model);
    log0(world, "initialised from ", init_from, ": ", file.describe(),
         "; AdamW starts fresh at step 0");
    if (!file.checksums) log0(world, unverified_note(init_from));
  } else if (!load.empty()) {
    const LoadedCheckpoint loaded = load_checkpoint(load, tp, model, opt);
    step = loaded.step;
    log0(world, "loaded ", load, " at step ", step,
         loaded.optimizer_state ? " (with optimizer state)"
                                : " (no optimizer state: AdamW starts fresh)");
    if (!loaded.checksums) log0(world, unverified_note(load));
  }
  // Step counters: the data's sample index (step · batch + b) · (seq + 1) must not overflow.
  const int64_t last_step = std::numeric_limits<int64_t>::max() / plan.batch / (plan.cfg.seq + 1);
  TP_CHECK_INPUT(step <= last_step && plan.steps <= last_step - step, "step ", step,
                 load.empty() ? "" : " (from --load " + load + ")", " + --steps=", plan.steps,
                 " passes the last step this --batch/--seq can number, ", last_step,
                 "; use fewer --steps or a checkpoint with a sane step count");
  return step;
}

int train(Context& ctx) {
  const Options& o = ctx.options;
  Communicator& world = ctx.world;
  Plan plan = plan_run(o, world.size());
  GptConfig& cfg = plan.cfg;
  const int64_t seq = plan.seq, steps = plan.steps, batch = plan.batch;
  const uint64_t seed = plan.seed;
  const std::string &data = plan.data, &load = plan.load, &export_dir = plan.export_dir;
  const int dp = plan.dp;

  const std::string trace = o.get_text("trace");
  check_outputs(o, trace, export_dir);
  // --save is this run's until it ends: a second run saving to the same file is refused now, not
  // silently overwritten at the end (lib/model/checkpoint.h).
  const CheckpointClaim claim(o.get_text("save"), world, ctx.device);

  const std::unique_ptr<TokenSource> source =
      allocating("the data", "the --data file or --vocab", [&]() -> std::unique_ptr<TokenSource> {
        if (data.empty()) return std::make_unique<MarkovSource>(cfg.vocab, seed);
        return std::make_unique<TextSource>(data, seq, seed);
      });

  // The tp × dp grid: `tp` is this rank's TP group (the whole world when --dp 1).
  ProcessGrid grid(world, dp, ctx.node_of_rank);
  Communicator& tp = grid.tp();
  if (!grid.placement_warning().empty()) log0(world, "warning: ", grid.placement_warning());
  AdamWParams hp;
  hp.lr = static_cast<float>(o.get_real("lr"));
  hp.weight_decay = static_cast<float>(o.get_real("weight-decay"));
  const LrSchedule schedule{hp.lr, plan.warmup, plan.decay_steps};
  const Trainee trainee = build(ctx.device, tp, cfg, seed, hp);
  Gpt& model = *trainee.model;
  AdamW& opt = *trainee.opt;
  check_save_space(o.get_text("save"), world, ctx.device, model);  // before training, not after
  int64_t step = start_from(world, tp, plan, model, opt);
  shard_optimizer(world, grid, plan, model, opt);
  log_run(ctx, plan, grid, model, *source, hp.lr, step);

  // Rank 0 writes the outputs; every write is checked (core/output_file.h): a full disk or a
  // read-only file system stops the run at once with errno, not silently, and not after training.
  // --plot and --trace are written at the end, so their files get a placeholder now, which finds
  // those faults before the first step.
  const std::string plot = o.get_text("plot"), log_json = o.get_text("log-json");
  OutputFile json = open_outputs(world, log_json, plot, trace, steps);
  std::vector<double> plot_steps, plot_losses;  // --plot (checked with the other output paths)
  if (o.get_flag("audit-grads")) {
    if (!audit_gradients(ctx, plan, grid, model, hp, *source, step)) return 1;
    model.zero_grad();
  }
  // --predict: α and β of the live communicator now; the report after the first warm step (the
  // second; the first when there is only one).
  const bool predict = o.get_flag("predict") && tp.size() > 1;
  const std::string predict_prefix = is_simulated(tp) ? "predict (simulated link): " : "predict: ";
  AlphaBeta link;
  if (predict) {
    link = measure_alpha_beta(tp, ctx.device);
    log0(world, predict_prefix, "measured ", link.str(), " on ", tp.name());
  } else if (o.get_flag("predict")) {
    log0(world, "predict: t = 1 moves no data; nothing to predict");
  }
  const int64_t every = std::max<int64_t>(1, o.get_int("log-every"));
  const float clip = static_cast<float>(o.get_real("clip"));
  const bool skip_nonfinite = o.get_flag("skip-nonfinite");
  int64_t skipped = 0, first_skipped = 0;
  // The timeline: collectives of every step (for the exposed communication), kernels too in the
  // traced steps; it keeps the spans of the traced steps only.
  Timeline timeline(world.rank());
  tp.set_timeline(&timeline);
  grid.dp().set_timeline(&timeline);
  const int64_t traced_from = steps > 1 ? std::max<int64_t>(1, steps - kTraceSteps) : 0;
  enable_graceful_stop();  // SIGINT/SIGTERM: stop at a step boundary, agreed by every rank
  for (int64_t i = 0; i < steps; ++i, ++step) {
    set_current_step(step + 1);
    if (const int sig = agreed_stop_signal())
      stop_after_signal(world, grid, o, model, opt, step, sig);
    const bool tracing = !trace.empty() && i >= traced_from;
    if (!tracing || i == traced_from) timeline.clear();
    ctx.device.set_timeline(tracing ? &timeline : nullptr);
    const size_t span_mark = timeline.mark();
    const double t0 = now();
    const size_t mark = tp.ledger().size(), dp_mark = grid.dp().ledger().size();
    const Batch b = source->batch(step, batch, seq);
    const float lr = learning_rate(schedule, step);
    const bool dump = i == 0 && !o.get_text("dump-grads").empty();
    const StepResult r = train_step(
        grid, ctx.device, model, opt, b, seed, step, lr, clip,
        [&](float loss) {
      if (!dump) return;
      // The gradients and loss are the whole batch's here (averaged over dp): one TP group
      // writes them with the whole batch.
      if (grid.dp_rank() == 0) dump_gradients(o.get_text("dump-grads"), tp, model, b, loss);
      world.barrier();
      log0(world, "wrote gradients of step ", step, " to ", o.get_text("dump-grads"));
        },
        plan.step_opts);
    const float loss = r.loss;
    const double norm = r.grad_norm;
    if (!r.nonfinite.empty()) {
      non_finite_step(world, r, step, skip_nonfinite);
      if (skipped++ == 0) first_skipped = step + 1;
      continue;
    }
    plot_steps.push_back(static_cast<double>(step + 1));
    plot_losses.push_back(loss);
    ctx.device.synchronize();
    if (i == 0)
      check_activation_memory(world, model, cfg, seq, batch / dp / plan.step_opts.micro_batches,
                              tp.size());
    const double secs = now() - t0,
                 comm = tp.ledger().seconds_since(mark) + grid.dp().ledger().seconds_since(dp_mark);
    const double exposed = timeline.totals_since(span_mark).exposed;
    const StepNumbers n{step + 1, loss,    norm, lr,        static_cast<double>(batch * seq) / secs,
                        comm,     exposed, secs, tp.size(), dp};
    if (i % every == 0 || i + 1 == steps) log0(world, progress_line(n, is_simulated(tp)));
    if (json.is_open()) json.write(json_line(n) + "\n");
    if (predict && i == std::min<int64_t>(1, steps - 1))
      log0(world, predict_prefix, "step ", step + 1, ":\n",
           prediction_report(tp.ledger(), mark, tp.ledger().size(), link, predict_prefix));
  }
  tp.set_timeline(nullptr);
  grid.dp().set_timeline(nullptr);
  ctx.device.set_timeline(nullptr);
  json.close();  // checked: a deferred write error (NFS, a full disk) surfaces here
  if (const int sig = agreed_stop_signal())
    stop_after_signal(world, grid, o, model, opt, step, sig);
  if (!trace.empty() && steps > 0)
    write_trace(ctx.device, world, timeline, trace,
                world.name() + ", t = " + std::to_string(tp.size()) +
                    (dp > 1 ? " × dp = " + std::to_string(dp) : std::string()) + ", --overlap " +
                    overlap_name(cfg.overlap),
                step, steps - traced_from);
  if (std::isfinite(source->loss_floor()))
    log0(world, "loss floor of this data: ", source->loss_floor(), " nats");
  write_plot(world, plot, *source, plot_steps, plot_losses);
  log_peak_memory(ctx.device, world);
  if (skipped > 0)
    log0(world, "--skip-nonfinite: skipped ", skipped, " of ", steps,
         " steps with a non-finite loss or gradient norm (the first at step ", first_skipped, ")");
  save_at_end(world, grid, o, model, opt, step, load);
  if (!export_dir.empty()) {
    if (grid.dp_rank() == 0) export_hf(export_dir, tp, model);  // DP replicas hold the same model
    world.barrier();
    log0(world, "exported a Hugging Face GPT-2 to ", export_dir,
         "/model.safetensors and config.json (weights only)");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o(
      "tp_train",
      "Trains a small GPT with tensor parallelism over the ranks of mpirun (t = -np), or on a "
      "tp × dp grid with --dp (t = -np / dp).");
  o.integer("layers", 2, "transformer blocks L")
      .min(1)
      .integer("hidden", 64, "hidden size h")
      .min(1)
      .integer("heads", 4, "attention heads (divisible by t)")
      .min(1)
      .integer("kv-heads", 0, "key/value heads for GQA; 0 = heads")
      .non_negative()
      .integer("ffn", 0, "MLP inner size; 0 = 4 h")
      .non_negative()
      .integer("vocab", 0,
               "vocabulary V; 0 = 256 (the Markov data's default, and bytes for --data)")
      .non_negative()
      .integer("seq", 64, "sequence length = size of the position table")
      .min(1)
      .integer("batch", 8, "sequences per step")
      .min(1)
      .integer("dp", 1,
               "data-parallel replicas: np = tp × dp; each TP group of np/dp adjacent ranks takes "
               "batch/dp sequences and the gradients are averaged over the replicas")
      .min(1)
      .fits_int()
      .integer("steps", 50,
               "steps to run from where the run starts (fresh or --load; 0: just --save the "
               "initial weights)")
      .non_negative()
      .real("lr", 1e-3, "peak learning rate (constant unless --warmup / --decay-steps)")
      .positive()
      .as_float()
      .integer("warmup", 0, "linear warm-up over the first N steps (absolute step numbers)")
      .non_negative()
      .integer("decay-steps", 0, "cosine decay to 10% of lr, ending at absolute step N (0 = none)")
      .non_negative()
      .real("weight-decay", 0.0, "AdamW decoupled weight decay on matrices")
      .non_negative()
      .as_float()
      .real("clip", 1.0, "clip the global gradient norm to this (0 = no clipping)")
      .non_negative()
      .as_float()
      .integer("seed", 1234, "seed of the initial weights, the data and dropout")
      .real("dropout", 0.0, "dropout probability (embedding and both residual branches)")
      .min(0)
      .max(1, true)
      .as_float()
      .text("act", "gelu", "MLP activation", {"gelu", "swiglu"})
      .text("norm", "layernorm", "normalisation", {"layernorm", "rmsnorm"})
      .flag("untie", "give the LM head its own weight instead of tying it to wte")
      .flag("sp", "sequence parallelism: between the TP regions each rank keeps seq/t tokens")
      .text("overlap", "async",
            "overlap communication with compute: none, async (backward's all-reduce under the "
            "weight-gradient GEMMs), ring (collective matmul; needs --sp)",
            {"none", "async", "ring"})
      .text("recompute", "none",
            "activation recomputation: none, selective (the attention probabilities are "
            "recomputed in backward), full (each block keeps its input and reruns its forward)",
            {"none", "selective", "full"})
      .integer("micro-batches", 1,
               "gradient accumulation: each replica runs its batch/dp sequences as m micro-batches "
               "and steps once")
      .min(1)
      .fits_int()
      .integer("zero", 0,
               "ZeRO stage on the dp axis: 0, or 1 (AdamW's moments sharded over the replicas)")
      .non_negative()
      .fits_int()
      .integer("pad-vocab-multiple", 1, "pad the vocabulary to a multiple of this times t")
      .min(1)
      .flag("audit-grads",
            "before training, check every replicated gradient against t = 1 and across ranks")
      .path("data", "", "train on the bytes of this file (V = 256) instead of the Markov data")
      .path("save", "", "write a checkpoint (safetensors) here at the end")
      .path("load", "",
            "resume from this checkpoint (weights, optimizer state, step; the shape from the "
            "file unless given)")
      .path("init-from", "",
            "start from the weights of this file, AdamW fresh at step 0: a GPT-2 in the Hugging "
            "Face layout (F32/F16/BF16; the shape from the file, heads from config.json beside "
            "it or --heads) or a checkpoint; --seq may be shorter than its position table")
      .path("export-hf", "",
            "at the end, write DIR/model.safetensors and DIR/config.json that transformers loads "
            "as GPT2LMHeadModel")
      .flag("skip-nonfinite",
            "skip (and count) a step whose loss or gradient norm is NaN/Inf instead of stopping "
            "the run with exit 3")
      .path("dump-grads", "",
            "after the first backward, write every global gradient, the batch and the loss here")
      .path("log-json", "", "append one JSON object per step to this file")
      .flag("predict",
            "measure the link's α and β at the start, and after the first warm step print each "
            "collective's α–β prediction against its measured time, per op and per label")
      .path("trace", "",
            "write a timeline of the last " + std::to_string(kTraceSteps) +
                " steps here (Chrome/Perfetto JSON) and beside it as SVG")
      .path("plot", "", "write the loss curve of this run here (SVG)")
      .integer("log-every", 10, "print a progress line every N steps")
      .min(1);
  return run_program(argc, argv, o, train);
}
