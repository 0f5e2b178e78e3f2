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
// header names (the one-thread sgemm ceiling × threads, cached per machine: observe/peak_cache.h;
// the GPU's measured GEMM ceiling; or --peak-tflops).
#include <cblas.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "core/agreement.h"
#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "core/output_file.h"
#include "core/simulated_link.h"
#include "launcher.h"
#include "model/adamw.h"
#include "model/audit.h"
#include "model/checkpoint.h"
#include "model/checkpoint_series.h"
#include "model/data.h"
#include "model/evaluate.h"
#include "model/file_shape.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "model/hf_gpt2.h"
#include "model/memory.h"
#include "model/memory_budget.h"
#include "model/pipeline_plan.h"
#include "model/preflight.h"
#include "model/schedule.h"
#include "model/train.h"
#include "observe/alpha_beta.h"
#include "observe/peak_cache.h"
#include "observe/step_log.h"
#include "observe/svg_plot.h"
#include "observe/timeline.h"
#include "observe/timer.h"
#include "parallel/process_grid.h"
#include "text/bpe.h"

using namespace tp;

namespace {

// --trace records the last kTraceSteps steps, never the first (it pays for first-touch allocations
// and page faults) unless it is the only one: every kernel and collective of a step is a span, a
// few hundred per step of the default model, and a chart of more steps is no easier to read.
constexpr int64_t kTraceSteps = 3;

// The largest step count a flag takes (--warmup, --save-every, --eval-every, ...): 10^9 steps is
// 11 days at a millisecond a step; a larger number is a typo, not a plan.
constexpr int64_t kMaxSteps = 1000000000;

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

// After a save at `step` into --save's series (model/checkpoint_series.h): rank 0 deletes what
// --keep does not keep of this run's files, and names the files of later steps it deletes (an
// abandoned longer attempt's, which a later --resume auto must not take) and, with
// --replace-series, each file of another run. Never throws: a folder it cannot list is a warning.
void prune_series(Communicator& world, const Options& o, int64_t step,
                  const CheckpointOrigin& origin) {
  const CheckpointSeries series(o.get_text("save"));
  if (series.empty() || world.rank() != 0) return;
  const PruneRule rule{
      step, o.get_int32("keep"), origin.run_id,
      o.get_flag("replace-series") ? ForeignSeries::Replace : ForeignSeries::Refuse};
  std::vector<SeriesEntry> entries;
  try {
    entries = series.list();
  } catch (const Error& e) {
    log0(world, "warning: nothing pruned: ", e.what());
    return;
  }
  for (const SeriesEntry& e : series_to_delete(entries, rule)) {
    if (e.run_id != origin.run_id)
      log0(world, "removed ", e.path, ": step ", e.step, " of ",
           e.run_id.empty() ? "a run without a run id" : "run " + e.run_id, " (--replace-series)");
    else if (e.step > step)
      log0(world, "removed ", e.path, ": step ", e.step, " is past this run's step ", step,
           " (a run that went further before this one resumed earlier)");
    std::remove(e.path.c_str());
  }
}

// Runs `write` on DP rank 0's ranks (DP replicas hold the same weights and moments), then every
// rank agrees on its outcome (core/agreement.h): a failure on any rank ends every rank with that
// rank's line, "<flag> <value>: <what failed, errno>; <what is intact>", exit 2, instead of the
// failing rank alone while the others walk on into a collective nobody joins.
void write_agreed(Context& ctx, ProcessGrid& grid, const std::string& flag, const std::string& load,
                  const std::function<void()>& write) {
  const std::string failed = agree_on_outcome(ctx.world, ctx.device, grid.dp_rank() == 0, write);
  if (failed.empty()) return;
  // Only rank 0's line is printed: only rank 0 looks for what survived (a checkpoint, when what
  // failed was one, or an export of one).
  const std::string intact =
      ctx.world.rank() == 0 && flag != "--dump-grads"
          ? "; " + CheckpointSeries(ctx.options.get_text("save")).intact_note(load)
          : "";
  throw Error(flag + " " + ctx.options.get_text(flag.substr(2)) + ": " + failed + intact, 2);
}

// One save into --save's series (periodic, end-of-run, emergency) at `step`, to `path`: rank 0
// first removes what killed saves left behind, then the file is written and agreed on, and rank 0
// prunes what --keep does not keep.
void save_to_series(Context& ctx, ProcessGrid& grid, const Gpt& model, AdamW& opt,
                    const CheckpointOrigin& origin, int64_t step, const std::string& path,
                    const std::string& load) {
  Communicator& world = ctx.world;
  if (world.rank() == 0) {
    std::vector<std::string> gone;
    try {
      gone = CheckpointSeries(ctx.options.get_text("save")).remove_dead_leftovers();
    } catch (const Error&) {  // rank 0 alone: the save's agreed outcome says what is wrong
    }
    std::string names;
    for (const std::string& g : gone) names += (names.empty() ? "" : ", ") + g;
    if (!gone.empty()) log0(world, "removed what killed saves left behind: ", names);
  }
  const bool sharded = opt.sharded();
  if (sharded) opt.unshard(model.params());  // --zero 1: the file holds them whole
  write_agreed(ctx, grid, "--save", load,
               [&] { save_checkpoint(path, grid.tp(), grid.pp(), model, opt, step, origin); });
  if (sharded) opt.shard_over(grid.dp(), model.params());  // and training goes on sharded
  prune_series(world, ctx.options, step, origin);
  log0(world, "saved ", path, " at step ", step);
}

// --save-every N: after step `step` (steps done), when N divides it, the series' file of the step.
// Returns true when it wrote one.
bool periodic_save(Context& ctx, ProcessGrid& grid, const Gpt& model, AdamW& opt,
                   const CheckpointOrigin& origin, int64_t step, const std::string& load) {
  const int64_t every = ctx.options.get_int("save-every");
  if (every <= 0 || step % every != 0) return false;
  save_to_series(ctx, grid, model, opt, origin, step,
                 CheckpointSeries(ctx.options.get_text("save")).path_for(step), load);
  return true;
}

// Every rank got (or was told of) SIGINT/SIGTERM and stands at the same step boundary: write an
// emergency checkpoint when --save is given, then end with 128 + the signal on every rank.
[[noreturn]] void stop_after_signal(Context& ctx, ProcessGrid& grid, const Gpt& model, AdamW& opt,
                                    const CheckpointOrigin& origin, int64_t step, int sig,
                                    const std::string& load) {
  const std::string name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
  const std::string save = CheckpointSeries(ctx.options.get_text("save")).final_path(step);
  std::string said = "no --save: nothing written";
  if (!save.empty()) {
    save_to_series(ctx, grid, model, opt, origin, step, save, load);
    said = "emergency checkpoint " + save + " saved at step " + std::to_string(step) +
           " (resume with --load " + save + " or --resume auto)";
  }
  throw Error(detail::str_cat("stopped by ", name, " before step ", step + 1, ": ", said),
              128 + sig);
}

// ---- MFU: the peak a rank's model FLOP/s are divided by (model/flops.h has the FLOPs) ----------

std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// The best GFLOP/s of one thread's f32 GEMM at 512³ and 1024³ (best of 3 after a warm-up): OpenBLAS's
// cblas_sgemm, or Device::gemm where the CPU device runs its f32 GEMMs on oneDNN instead
// (f32_gemm_path: an OpenBLAS that does not know an AVX-512 CPU).
double one_thread_sgemm_gflops(Device& device) {
  bool onednn = false;
  f32_gemm_path(device, &onednn);
  const int before = openblas_get_num_threads(), omp_before = omp_get_max_threads();
  openblas_set_num_threads(1);
  omp_set_num_threads(1);
  double best = 0;
  for (int n : {512, 1024}) {
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
    const Tensor ta = Tensor::from_host(device, Shape{n, n}, a),
                 tb = Tensor::from_host(device, Shape{n, n}, b);
    Tensor tc(device, Shape{n, n});
    for (int rep = 0; rep < 4; ++rep) {
      const double t0 = now();
      if (onednn)
        device.gemm(false, false, 1.0f, ta, tb, 0.0f, tc);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                    n, 0.0f, c.data(), n);
      if (rep > 0) best = std::max(best, 2.0 * n * n * n / (now() - t0) / 1e9);
    }
  }
  openblas_set_num_threads(before);
  omp_set_num_threads(omp_before);
  return best;
}

// The best GFLOP/s of Device::gemm (fp32) at n³ for n = 256, 512, ... 4096 (best of 3 after a
// warm-up each), stopping at the first size whose call takes over 50 ms (a slow device, or the
// CUDA emulator): the GPU's measured fp32 GEMM ceiling.
double device_gemm_gflops(Device& device) {
  double best = 0;
  for (int64_t n = 256; n <= 4096; n *= 2) {
    Tensor a(device, Shape{n, n}), b(device, Shape{n, n}), c(device, Shape{n, n});
    device.fill(a, 0.5f);
    device.fill(b, 0.25f);
    double slowest = 0;
    for (int rep = 0; rep < 4; ++rep) {
      device.synchronize();
      const double t0 = now();
      device.gemm(false, false, 1.0f, a, b, 0.0f, c);
      device.synchronize();
      const double secs = now() - t0;
      slowest = std::max(slowest, secs);
      if (rep > 0) best = std::max(best, 2.0 * static_cast<double>(n * n * n) / secs / 1e9);
    }
    if (slowest > 0.05) break;
  }
  return best;
}

// The peak cache's BLAS part of the key: OpenBLAS's kernels, and "+ oneDNN f32" when the f32 GEMMs
// run on oneDNN instead (a different ceiling on the same machine).
std::string blas_core_key(const Device& device) {
  bool onednn = false;
  f32_gemm_path(device, &onednn);
  return std::string(openblas_get_corename()) + (onednn ? " + oneDNN f32" : "");
}

struct Peak {
  double flops = 0;  // per rank, FLOP/s
  std::string what;  // for the header
  // On the CPU, where the one-thread ceiling came from (rank 0): its cache file and key, "" when
  // --peak-tflops gave the peak or on the GPU (recheck_peak below).
  std::string cache_path, cache_key;
  double thread_gflops = 0;
  bool given =
      false;  // --peak-tflops: an MFU above 100 % warns once (a measured peak is rechecked)
};

// --peak-tflops X, else on the CPU the one-thread sgemm ceiling (cached per machine:
// observe/peak_cache.h) times the threads of a rank, on the GPU the measured fp32 GEMM ceiling.
// Rank 0 measures, every rank gets its value.
Peak run_peak(Context& ctx) {
  Peak p;
  const double given = ctx.options.get_real("peak-tflops");
  if (given > 0) {
    p.flops = given * 1e12;
    p.given = true;
    p.what = "--peak-tflops " + fmt_g(given) + " per rank";
    return p;
  }
  const bool cpu = ctx.options.get_text("backend") != "gpu";
  std::string note;
  double gflops = 0;
  if (ctx.world.rank() == 0) {
    if (cpu) {
      const std::string path = peak_cache_path(),
                        key = peak_cache_key(cpu_model_name(), blas_core_key(ctx.device));
      gflops = cached_peak(path, key);
      note = "cached in " + path;
      if (gflops <= 0) {
        gflops = one_thread_sgemm_gflops(ctx.device);
        note = store_peak(path, key, gflops) ? "measured now, cached in " + path
                                             : "measured now (no cache)";
      }
      note = key + ", " + note;
      p.cache_path = path;
      p.cache_key = key;
    } else {
      gflops = device_gemm_gflops(ctx.device);
    }
  }
  Tensor v = Tensor::from_host(ctx.device, Shape{1}, {static_cast<float>(gflops)});
  ctx.world.broadcast(v, 0);
  gflops = v.to_host()[0];
  if (cpu) {
    const int threads = omp_get_max_threads();
    p.thread_gflops = gflops;
    p.flops = gflops * 1e9 * threads;
    p.what = std::to_string(threads) + " thread(s) × " + fmt_g(gflops) +
             " GFLOP/s (one-thread sgemm ceiling; " + note + ")";
  } else {
    p.flops = gflops * 1e9;
    p.what = "the measured fp32 GEMM ceiling of " + ctx.device.name() +
             " (Device::gemm, n³ up to 4096³)";
  }
  return p;
}

// A CPU with AVX-512 whose OpenBLAS runs kernels without it, OPENBLAS_CORETYPE=Haswell set by the
// environment (some machines' do) or an OpenBLAS too old to know the CPU: "" when neither, else a
// line saying so, since the GEMMs are most of a CPU step. Measured on a 2-core AMD EPYC (Zen 5),
// one thread, make bench's model: 8,600 tokens/s on OpenBLAS's own pick (Cooperlake, AVX-512),
// 5,100 with OPENBLAS_CORETYPE=Haswell (AVX2). On a 2-core Xeon of model 207 (Emerald Rapids),
// which Debian 12's OpenBLAS 0.3.21 does not know and runs on its Prescott (SSE3) kernels:
// 830-1,490 tokens/s, against 3,770-5,380 with OPENBLAS_CORETYPE=SkylakeX (3.6-4.5x, interleaved).
std::string blas_kernel_note(const Device& device) {
  const std::string core = openblas_get_corename();
  bool onednn = false;
  const std::string path = f32_gemm_path(device, &onednn);
  const bool narrow = openblas_lacks_avx512();
  if (onednn)
    return "note: f32 GEMMs: " + path + "; TP_CPU_F32_GEMM=openblas keeps OpenBLAS" +
           (narrow ? ", OPENBLAS_CORETYPE=SkylakeX gives it its AVX-512 kernels" : "");
  if (!narrow) return "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  return "note: OpenBLAS runs its " + core + " kernels" +
         (forced ? " (OPENBLAS_CORETYPE=" + std::string(forced) + ")" : std::string()) +
         " on a CPU with AVX-512, where its SkylakeX ones are faster (1.7x tokens/s measured "
         "against Haswell's on an AMD EPYC, 3.6-4.5x against Prescott's on a Xeon): " +
         (forced ? "unset OPENBLAS_CORETYPE" : "run with OPENBLAS_CORETYPE=SkylakeX");
}

// After the run, on rank 0: a step whose model FLOP/s beat the CPU peak (MFU over 100 %) shows the
// cached one-thread ceiling is low. It is measured once, over a second or two, so a measurement
// taken while the machine was busy (a parallel build, other ranks) stays low for every later run;
// seen on a 2-core Xeon, 107 GFLOP/s cached against 147 quiet, MFU 105 %. Measured again now
// (after the run, so no step is disturbed), and the higher value cached.
void recheck_peak(Communicator& world, Device& device, const Peak& peak, double best_mfu) {
  if (world.rank() != 0 || peak.cache_key.empty() || best_mfu <= 1.0) return;
  const double now_gflops = one_thread_sgemm_gflops(device);
  const bool higher = now_gflops > peak.thread_gflops;
  const bool stored = higher && store_peak(peak.cache_path, peak.cache_key, now_gflops);
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.3g", 100.0 * best_mfu);
  log0(world, "note: MFU reached ", pct, " % against a one-thread sgemm ceiling of ",
       fmt_g(peak.thread_gflops), " GFLOP/s, so that ceiling was measured on a busy machine (or ",
       "OpenBLAS's sgemm is not this CPU's fastest GEMM); measured again now: ", fmt_g(now_gflops),
       " GFLOP/s",
       stored   ? ", cached for the next run"
       : higher ? " (not cached)"
                : ", kept");
}

// The header's MFU line: the formula, N, and the peak.
void log_flops(Communicator& world, const GptConfig& cfg, int64_t seq, const Peak& peak) {
  const TokenFlops f = token_flops(cfg, seq);
  log0(world, "MFU: model FLOPs per token 6·N + 12·L·h·S = ", fmt_g(f.model),
       " (PaLM, appendix B; N = ", f.n, ": the blocks, ln_f and the LM head",
       cfg.tied ? " (tied wte)" : "", ", not wpe", cfg.tied ? "" : " nor wte's lookup",
       "), of the global model over ", world.size(), " rank(s)",
       f.hardware != f.model
           ? "; HFU adds --recompute " + std::string(recompute_name(cfg.recompute)) +
                 "'s forward: " + fmt_g(f.hardware)
           : std::string(),
       "; peak per rank ", fmt_g(peak.flops / 1e9), " GFLOP/s = ", peak.what);
}

// What train() runs, read from the flags (and the model file they name) and checked: every
// problem at once, before anything allocates or communicates.
struct Plan {
  GptConfig cfg;
  int64_t seq = 0;  // the length of a training sequence (cfg.seq: the position table)
  int64_t steps = 0, batch = 0, warmup = 0, decay_steps = 0;
  uint64_t seed = 0;
  std::string data, init_from, load, export_dir;
  std::shared_ptr<text::Tokenizer> tokenizer;  // --tokenizer: --data's text as its ids
  ModelFile file;
  int dp = 1, t = 1;                      // t: the TP group's size
  int pp = 1;                             // --pp: pipeline stages
  std::vector<int64_t> pp_layers;         // --pp-layers (empty: an even split)
  StepOptions step_opts;                  // --micro-batches, --zero, --schedule
  std::vector<std::string> resume_notes;  // --resume auto: the newer checkpoints it skipped
  CheckpointOrigin origin;                // this run's id and tokens, in every file it writes
  std::vector<std::string> origin_notes;  // the run id line; --replace-series' line
  bool resumed = false;  // --resume took a checkpoint: --steps is the step the run ends at
};

// --resume auto | auto-or-fresh: the newest valid checkpoint of --save's series (or --save itself;
// model/checkpoint_series.h), or "" to start fresh. Every rank looks (the same files: no
// communication yet); a bad newer file is skipped with a note, none at all is a problem.
std::string resume_path(const Options& o, std::vector<std::string>& notes,
                        std::vector<std::string>& problems) {
  const std::string mode = o.get_text("resume");
  if (mode.empty()) return "";
  if (!o.get_text("load").empty() || !o.get_text("init-from").empty()) {
    problems.push_back("give --resume " + mode + " or --load/--init-from, not both");
    return "";
  }
  ResumeDecision d = resume_decision(mode, o.get_text("save"));
  notes = d.notes;
  if (!d.problem.empty()) problems.push_back(d.problem);
  return d.path;
}

// Who this run is (model/checkpoint_series.h): the run id of the checkpoint it continues (--resume,
// --load), else a new one; a run that does not continue --save's series may not save into a
// series of another run (unless --replace-series); a file trained on BPE ids does not go on bytes.
// A new id differs between ranks (time, pid): world rank 0's is the run's, as rank 0 writes every
// file and prunes; the refusal compares files against an id none of them carries, on every rank.
void plan_origin(const Options& o, Plan& r, std::vector<std::string>& problems) {
  const std::string& from = r.load.empty() ? r.init_from : r.load;
  const CheckpointOrigin file = from.empty() ? CheckpointOrigin{} : checkpoint_origin(from);
  const bool inherit = !r.load.empty() && !file.run_id.empty();
  r.origin.run_id = inherit ? file.run_id : new_run_id();
  r.origin.tokens = r.data.empty() ? "markov" : r.tokenizer ? "gpt2-bpe" : "bytes";
  r.origin_notes = {"run id " + r.origin.run_id +
                    (inherit ? " (continued from " + r.load + ")" : " (new)")};
  if (file.tokens == "gpt2-bpe" && !r.data.empty() && !r.tokenizer)
    problems.push_back(from + " was trained on GPT-2 BPE ids (--tokenizer), but --data " + r.data +
                       " would be read as bytes: give --tokenizer DIR, the one it was trained "
                       "with");
  const std::string& save = o.get_text("save");
  const CheckpointSeries series(save);
  const ForeignSeries mode =
      o.get_flag("replace-series") ? ForeignSeries::Replace : ForeignSeries::Refuse;
  const bool continues = !o.get_text("resume").empty() || (!r.load.empty() && series.holds(r.load));
  if (series.empty() || (continues && mode == ForeignSeries::Refuse)) return;
  const SeriesOwnership own = check_series_owner(save, r.origin.run_id, mode);
  if (!own.problem.empty()) problems.push_back(own.problem);
  if (!own.note.empty()) r.origin_notes.push_back(own.note);
}

Plan plan_run(const Options& o, int world_size) {
  Plan r;
  GptConfig& cfg = r.cfg;
  cfg = config_from_flags(o);
  cfg.precision = parse_precision(o.get_text("precision"));  // never from a file: it holds fp32
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
  // --tokenizer DIR: --data's text as GPT-2 BPE ids (lib/text/bpe.h); V is the tokenizer's.
  const std::string tokenizer_dir = o.get_text("tokenizer");
  if (!tokenizer_dir.empty()) {
    r.tokenizer = std::make_shared<text::Tokenizer>(text::Tokenizer::load(tokenizer_dir));
    if (data.empty())
      problems.push_back("--tokenizer " + tokenizer_dir +
                         " encodes a text file: give it with --data FILE");
  }
  const int64_t data_vocab = r.tokenizer ? r.tokenizer->vocab_size() : 256;
  if (!data.empty() && cfg.vocab != 0 && cfg.vocab != data_vocab)
    problems.push_back(
        r.tokenizer
            ? "the tokenizer in " + tokenizer_dir + " has V = " + std::to_string(data_vocab) +
                  "; drop --vocab=" + std::to_string(cfg.vocab) +
                  " (the vocabulary comes from the tokenizer)"
            : "--data uses byte tokens (V = 256); drop --vocab=" + std::to_string(cfg.vocab));
  if (cfg.vocab == 0) cfg.vocab = data.empty() ? 256 : data_vocab;
  // --init-from F (weights only), or --load F: the shape from the file. A Hugging Face file given
  // to --load is taken as --init-from (it holds no optimizer state and no step).
  std::string &init_from = r.init_from = o.get_text("init-from"),
              &load = r.load = o.get_text("load");
  if (!o.get_text("resume").empty()) {
    load = resume_path(o, r.resume_notes, problems);
    r.resumed = !load.empty();
  }
  if (o.get_int("save-every") > 0 && o.get_text("save").empty())
    problems.push_back("--save-every " + std::to_string(o.get_int("save-every")) +
                       " needs --save DIR/ or --save FILE: the folder or the stem of the "
                       "checkpoints");
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
    if (!data.empty() && !r.tokenizer && cfg.vocab < 256)
      problems.push_back("--data uses byte tokens (ids 0..255), but " + file.path +
                         " has a vocabulary of " + std::to_string(cfg.vocab));
    if (r.tokenizer && cfg.vocab != data_vocab)
      problems.push_back(file.path + " has a vocabulary of " + std::to_string(cfg.vocab) +
                         ", the tokenizer in " + tokenizer_dir + " one of " +
                         std::to_string(data_vocab) +
                         ": give the tokenizer the model was trained with (or no --tokenizer)");
  }
  plan_origin(o, r, problems);
  const int pp = r.pp = o.get_int32("pp");
  const auto grid_problems = ProcessGrid::problems(world_size, dp, pp);
  for (const auto& p : grid_problems) problems.push_back(p);
  const int t = r.t = grid_problems.empty() ? world_size / dp / pp : world_size;  // TP group size
  if (grid_problems.empty() && batch >= 1 && batch % dp != 0)
    problems.push_back("--batch=" + std::to_string(batch) + " is not divisible by --dp=" +
                       std::to_string(dp) + ": every DP rank takes batch/dp sequences");
  r.step_opts = {o.get_int32("micro-batches"), o.get_int32("zero")};
  r.step_opts.schedule = parse_schedule(o.get_text("schedule"));
  r.pp_layers = parse_pp_layers(o.get_text("pp-layers"));
  const StepOptions& step_opts = r.step_opts;
  // --pp: the stages (parallel/pipeline_parallel.h) and what does not combine with them yet.
  if (pp > 1 || !r.pp_layers.empty())
    for (const auto& p : pipeline_problems(cfg.layers, pp, step_opts.micro_batches,
                                           step_opts.schedule, r.pp_layers))
      problems.push_back(p);
  if (pp > 1) {
    const std::pair<bool, const char*> refused[] = {
        {o.get_flag("audit-grads"), "--audit-grads"},
        {o.get_real("memory-budget") > 0, "--memory-budget"}};
    for (const auto& [given, flag] : refused)
      if (given)
        problems.push_back(std::string(flag) + " with --pp=" + std::to_string(pp) +
                           ": not implemented for pipeline stages; drop it or use --pp 1");
  }
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
  if (pp > 1) pre.t_label = "the TP group: ranks / (--dp · --pp)";
  for (const std::string& p : preflight(pre).problems) problems.push_back(p);
  TP_CHECK_INPUT(problems.empty(), problems_message(problems));
  return r;
}

// --data FILE --tokenizer DIR: the whole file read and encoded (every rank the same ids).
std::unique_ptr<TokenSource> tokenized_source(const std::string& path, text::Tokenizer& tokenizer,
                                              int64_t seq, uint64_t seed) {
  TextSource readable(path, seq, seed);  // the file's checks: exists, regular, long enough
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TP_CHECK_INPUT(in.good() || in.eof(), "cannot read data file ", path);
  return std::make_unique<IdSource>(
      tokenizer.encode(bytes), tokenizer.vocab_size(), seq, seed,
      path + " as GPT-2 BPE tokens (" + std::to_string(bytes.size()) + " bytes)");
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
                const std::vector<double>& plot_steps, const std::vector<double>& plot_losses,
                const std::vector<double>& val_steps, const std::vector<double>& val_losses) {
  if (!plot.empty() && !plot_steps.empty()) {  // (every step skipped: no curve)
    if (world.rank() == 0) {
      std::vector<PlotSeries> series = {{(val_steps.empty() ? "" : "train, ") +
                                             std::string("t = ") + std::to_string(world.size()),
                                         plot_steps, plot_losses, "#1f77b4", false}};
      if (!val_steps.empty())
        series.push_back({"validation (held out)", val_steps, val_losses, "#d62728", false});
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

// --save at the end of the run (a failed write names what is still intact: write_agreed).
void save_at_end(Context& ctx, ProcessGrid& grid, const Gpt& model, AdamW& opt,
                 const CheckpointOrigin& origin, int64_t step, const std::string& load) {
  const std::string save = CheckpointSeries(ctx.options.get_text("save")).final_path(step);
  if (!save.empty()) save_to_series(ctx, grid, model, opt, origin, step, save, load);
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
  // bf16: t = np and t = 1 round differently at the TP sums; tests/test_precision.cpp's bound.
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

// What this run is: the grid, the model, the data, the batch and the steps.
void log_run(Context& ctx, const Plan& plan, ProcessGrid& grid, const Gpt& model,
             const TokenSource& source, float lr, int64_t step, int64_t steps) {
  Communicator& world = ctx.world;
  Communicator& tp = grid.tp();
  const GptConfig& cfg = plan.cfg;
  const int64_t seq = plan.seq, batch = plan.batch;
  const int dp = plan.dp;
  int64_t n_params = 0;
  for (const Param& p : model.params())
    n_params += p.ckpt_rows > 0 ? p.ckpt_rows * p.cols() : p.shape.numel();
  log0(world, "tp_train: t = ", tp.size(), " (", world.name(), ", ", ctx.device.name(), ")");
  if (dp > 1 || grid.pp_size() > 1) log0(world, "grid: ", grid.describe());
  log0(world, "model: ", cfg.str(), ", ", n_params, " parameters");
  if (cfg.precision == Precision::Bf16) log0(world, "bf16 GEMM: ", bf16_gemm_path(ctx.device));
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
// A resumed run (`resumed_at` >= 0) first cuts the log back to its checkpoint (observe/step_log.h).
OutputFile open_outputs(Communicator& world, const std::string& log_json, const std::string& plot,
                        const std::string& trace, int64_t steps, int64_t resumed_at) {
  OutputFile json;
  if (world.rank() == 0) {
    const std::string what = "--log-json " + log_json;
    if (!log_json.empty() && resumed_at >= 0)
      if (const LogCut cut = cut_step_log(log_json, resumed_at, what); cut.cut > 0)
        log0(world, what, ": cut ", cut.cut, " line", cut.cut == 1 ? "" : "s", " past step ",
             resumed_at,
             ", the checkpoint this run resumes (the interrupted run's steps, done again now)");
    if (!log_json.empty()) json = OutputFile(log_json, what, OutputFile::Mode::Append);
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

// --memory-budget MiB (issue 22): before anything is built, the preflight's peak per rank against
// the budget; over it, one line naming the largest part and the cheapest option that fits
// (model/memory_budget.h), exit 2.
MemoryChoice memory_choice(const Plan& plan) {
  return {plan.t,
          plan.dp,
          plan.cfg.recompute,
          plan.step_opts.micro_batches,
          plan.step_opts.zero,
          plan.cfg.precision};
}

int64_t memory_budget_bytes(const Options& o) {
  return static_cast<int64_t>(o.get_real("memory-budget") * 1048576.0);
}

// This host's memory in bytes (sysconf), 0 when the system does not say.
int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

void check_memory_budget(const Options& o, const Plan& plan, int world_size) {
  const int64_t budget = memory_budget_bytes(o);
  if (budget <= 0) {
    // Without a budget, on the CPU: a run whose preflight peak per rank is more than this whole
    // host holds stops here, before a tensor is allocated, instead of at the first allocation that
    // fails after the ones before it were initialised (seconds for a 1 GiB embedding). Only a rank
    // that could not fit even alone on the host is refused: how many ranks share a host, and what
    // else runs there, is not known here (the allocator's own check still catches those).
    const int64_t host = host_memory_bytes();
    if (o.get_text("backend") == "gpu" || host <= 0) return;
    const MemoryEstimate e = estimate_memory(plan.cfg, plan.seq, plan.batch, memory_choice(plan));
    const std::string largest = e.peak.largest();
    TP_CHECK_INPUT(!e.problems.empty() || e.peak.total() <= host, "the run needs ",
                   mib(e.peak.total()), " per rank (the preflight's peak, ", largest,
                   " the largest part) but this host has ", mib(host), " of memory in all; reduce ",
                   largest == "activations"
                       ? "--batch, --seq or the model's sizes, or add --recompute"
                       : "--hidden, --ffn, --layers or --vocab",
                   ", use more ranks, or give --memory-budget MiB to find the options that fit");
    return;
  }
  const BudgetVerdict v =
      fit_memory_budget(plan.cfg, plan.seq, plan.batch, world_size, memory_choice(plan), budget);
  TP_CHECK_INPUT(v.fits, v.message);
}

// After the first step: the same peak from what the run holds (the parameters and gradients,
// AdamW's state, the memory ledger's kept activations and one block's rerun) against the budget.
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

// --pp: each stage's schedule as it ran, its activations in flight against the formula, and the
// measured bubble against (N − 1)/(m + N − 1) (rank 0 prints what every stage's TP rank 0 sent).
void log_pipeline(Device& device, Communicator& world, ProcessGrid& grid, const Plan& plan,
                  const PipelineRecord& record) {
  const int n = grid.pp_size(), m = plan.step_opts.micro_batches;
  const Schedule sched = plan.step_opts.schedule;
  // Per rank: stage, in flight, bubble, peak bytes, then its ops as ±(micro + 1) (+: forward).
  const int64_t width = 4 + 2 * static_cast<int64_t>(m);
  std::vector<float> row = {
      static_cast<float>(grid.pp_rank()), static_cast<float>(record.peak_in_flight),
      static_cast<float>(record.bubble()), static_cast<float>(record.peak_activation_bytes)};
  for (const PipelineRecord::Span& sp : record.ops)
    row.push_back(static_cast<float>(sp.op.forward ? sp.op.micro + 1 : -(sp.op.micro + 1)));
  row.resize(static_cast<size_t>(width), 0.0f);
  Tensor all(device, Shape{world.size(), width});
  world.all_gather(Tensor::from_host(device, Shape{width}, row), all);
  const std::vector<float> v = all.to_host();
  log0(world, "pipeline: --schedule ", schedule_name(sched), ", ", n, " stages, m = ", m,
       " micro-batches (stage s of TP rank 0, DP replica 0):");
  double bubble = 0;
  for (int s = 0; s < n; ++s) {
    const float* r = &v[static_cast<size_t>(grid.world_rank(0, 0, s) * width)];
    std::string ops;
    for (int64_t k = 4; k < width; ++k)
      ops += (k > 4 ? " " : "") + std::string(r[k] > 0 ? "F" : "B") +
             std::to_string(static_cast<int>(std::fabs(r[k])) - 1);
    char line[160];
    std::snprintf(line, sizeof line,
                  "in flight %d (formula %d), activations kept %.0f bytes, idle %.1f %%",
                  static_cast<int>(r[1]), in_flight_formula(sched, n, s, m), r[3], 100.0 * r[2]);
    log0(world, "  stage ", s, ": ", ops, " | ", line);
    bubble += r[2] / n;
  }
  char line[160];
  std::snprintf(line, sizeof line,
                "pipeline bubble: %.1f %% measured (mean idle share of the stages) vs (N - 1)/(m + "
                "N - 1) = %.1f %%",
                100.0 * bubble, 100.0 * bubble_formula(n, m));
  log0(world, line);
}

// One step's numbers, as the progress line and --log-json print them.
struct StepNumbers {
  int64_t step;  // 1-based
  float loss;
  double norm;
  float lr;
  double tok_s, comm, exposed, secs;
  int t, dp;
  double flops_rank = 0, mfu = 0, hfu = -1;  // model FLOP/s per rank, MFU, HFU (-1: = MFU)
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // --eval-every's steps only
};

// --eval-every: the held-out loss (model/evaluate.h) after this step, when it is an evaluation
// step (every N, and the last); NaN otherwise. Each DP replica runs its slice of every held-out
// batch (in --micro-batches forwards, like training) and the replicas average.
double validation_loss(const Options& o, ProcessGrid& grid, Device& device, Gpt& model,
                       const TokenSource& source, const Plan& plan, int64_t step, bool last) {
  const int64_t every = o.get_int("eval-every");
  if (every <= 0 || (step % every != 0 && !last)) return std::numeric_limits<double>::quiet_NaN();
  const int64_t per_replica = plan.batch / plan.dp;
  const EvalSlice slice{grid.dp_rank() * per_replica, per_replica, plan.step_opts.micro_batches};
  // With --pp the held-out batches go forward through the stages (model/evaluate.h).
  // A SIGTERM is agreed after each held-out batch (every rank runs the same batches), so a long
  // evaluation ends within a batch; the step loop then stops the run.
  const double mine =
      held_out_loss(model, grid.pp(), source, o.get_int("eval-batches"), plan.batch, plan.seq,
                    plan.seed, slice, [] { return agreed_stop_signal() != 0; });
  if (plan.dp == 1) return mine;
  Tensor v = Tensor::from_host(device, Shape{1}, {static_cast<float>(mine)});
  grid.dp().all_reduce(v);
  return v.to_host()[0] / plan.dp;
}

// The line an evaluation step prints: the held-out loss beside the step's training loss and the
// data's floor.
std::string validation_line(const StepNumbers& n, const TokenSource& source, int64_t batches,
                            int64_t batch) {
  char line[200];
  std::snprintf(line, sizeof line,
                "step %5lld | val loss %.6f | train loss %.6f | floor %s | %lld held-out batches "
                "of %lld",
                static_cast<long long>(n.step), n.val_loss, n.loss,
                std::isfinite(source.loss_floor()) ? fmt_g(source.loss_floor()).c_str() : "unknown",
                static_cast<long long>(batches), static_cast<long long>(batch));
  return line;
}

// The step's FLOP/s per rank, MFU and HFU (model/flops.h) into `n`.
void set_utilisation(StepNumbers& n, const TokenFlops& f, double tokens, int ranks, double peak) {
  n.flops_rank = flops_per_rank(f.model, tokens, n.secs, ranks);
  n.mfu = peak > 0 ? n.flops_rank / peak : 0;
  n.hfu = f.hardware != f.model && peak > 0
              ? flops_per_rank(f.hardware, tokens, n.secs, ranks) / peak
              : -1;
}

std::string progress_line(const StepNumbers& n, bool simulated) {
  char line[200], mfu[96];
  std::snprintf(line, sizeof line,
                "step %5lld | loss %.6f | grad norm %.4f | lr %.3g | %.0f tok/s | exposed comm "
                "%4.1f%%%s",
                static_cast<long long>(n.step), n.loss, n.norm, n.lr, n.tok_s,
                100.0 * n.exposed / n.secs, simulated ? " (simulated link)" : "");
  std::snprintf(mfu, sizeof mfu, " | %.3g GFLOP/s/rank, MFU %.3g%%", n.flops_rank / 1e9,
                100.0 * n.mfu);
  std::string out = std::string(line) + mfu;
  if (n.hfu >= 0) {
    std::snprintf(mfu, sizeof mfu, ", HFU %.3g%%", 100.0 * n.hfu);
    out += mfu;
  }
  return out;
}

std::string json_line(const StepNumbers& n) {
  char line[400];
  std::snprintf(line, sizeof line,
                "{\"step\": %lld, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                "\"tokens_per_s\": %.6g, "
                "\"comm_s\": %.6g, \"exposed_s\": %.6g, \"compute_s\": %.6g, \"t\": %d, "
                "\"dp\": %d, \"flops_per_rank\": %.6g, \"mfu\": %.6g, \"hfu\": %.6g",
                static_cast<long long>(n.step), n.loss, n.norm, n.lr, n.tok_s, n.comm, n.exposed,
                n.secs - n.comm, n.t, n.dp, n.flops_rank, n.mfu, n.hfu >= 0 ? n.hfu : n.mfu);
  std::string out = line;
  if (std::isfinite(n.val_loss)) {
    std::snprintf(line, sizeof line, ", \"val_loss\": %.9g", n.val_loss);
    out += line;
  }
  return out + "}";
}

// Every output path on every rank, before anything is allocated or trained: a bad path costs
// seconds, not the run.
void check_outputs(const Options& o, const std::string& trace, const std::string& export_dir) {
  check_output_paths({{"--save", CheckpointSeries(o.get_text("save")).final_path(0)},
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

Trainee build(Device& device, Communicator& tp, const GptConfig& cfg, const StageLayout& stage,
              uint64_t seed, const AdamWParams& hp) {
  // The size of weights and gradients (fp32) per rank, roughly, for an out-of-memory message.
  const double h = static_cast<double>(cfg.hidden), ffn = cfg.ffn ? cfg.ffn : 4.0 * h;
  const double weights = 4.0 *
                         (static_cast<double>(cfg.layers) * (4 * h * h + 3 * h * ffn) +
                          static_cast<double>(cfg.vocab + cfg.seq) * h) /
                         tp.size();
  auto model_ptr =
      allocating("the model (about " + gib(2 * weights) + " of weights and gradients per rank)",
                 "--hidden/--layers/--ffn/--vocab/--seq or add ranks",
                 [&] { return std::make_unique<Gpt>(device, tp, cfg, stage); });
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

// --steps N: the steps to run now. From --load (or fresh) N more; a run that --resume took a
// checkpoint for ends at step N, so the command that started the run, given again after a crash,
// finishes it where the uninterrupted run would have (Megatron's --train-iters, nanoGPT's
// max_iters count the same way).
int64_t steps_to_run(Communicator& world, const Plan& plan, int64_t start) {
  if (!plan.resumed) return plan.steps;
  const int64_t left = std::max<int64_t>(0, plan.steps - start);
  if (left == 0)
    log0(world, "--resume: the run is at step ", start, " and --steps ", plan.steps,
         " ends it there: nothing left to train");
  else
    log0(world, "--resume: --steps ", plan.steps, " is the step the run ends at: ", left,
         " more from step ", start);
  return left;
}

int train(Context& ctx) {
  const Options& o = ctx.options;
  Communicator& world = ctx.world;
  Plan plan = plan_run(o, world.size());
  check_memory_budget(o, plan, world.size());
  GptConfig& cfg = plan.cfg;
  const int64_t seq = plan.seq, batch = plan.batch;
  const uint64_t seed = plan.seed;
  const std::string &data = plan.data, &load = plan.load, &export_dir = plan.export_dir;
  const int dp = plan.dp;

  const std::string trace = o.get_text("trace");
  CheckpointSeries(o.get_text("save")).create_folder();  // --save DIR/ (every rank: idempotent)
  check_outputs(o, trace, export_dir);
  // --save is this run's until it ends: a second run saving to the same file is refused now, not
  // silently overwritten at the end (lib/model/checkpoint.h).
  const CheckpointClaim claim(CheckpointSeries(o.get_text("save")).claim_path(), world, ctx.device);

  const std::unique_ptr<TokenSource> source =
      allocating("the data", "the --data file or --vocab", [&]() -> std::unique_ptr<TokenSource> {
        if (data.empty()) return std::make_unique<MarkovSource>(cfg.vocab, seed);
        if (plan.tokenizer) return tokenized_source(data, *plan.tokenizer, seq, seed);
        return std::make_unique<TextSource>(data, seq, seed, o.get_real("val-fraction"));
      });

  TP_CHECK_INPUT(o.get_int("eval-every") == 0 || source->has_held_out(), "--eval-every ",
                 o.get_int("eval-every"), " needs held-out data and there is none (",
                 source->describe(),
                 "): give --val-fraction F (> 0) leaving at least seq + 1 = ", seq + 1,
                 " bytes on each side, or drop --eval-every");
  // The tp × dp (× pp) grid: `tp` is this rank's TP group (the whole world when --dp 1, --pp 1).
  ProcessGrid grid(world, GridAxes{dp, plan.pp}, ctx.node_of_rank);
  Communicator& tp = grid.tp();
  if (!grid.placement_warning().empty()) log0(world, "warning: ", grid.placement_warning());
  AdamWParams hp;
  hp.lr = static_cast<float>(o.get_real("lr"));
  hp.weight_decay = static_cast<float>(o.get_real("weight-decay"));
  const LrSchedule schedule{hp.lr, plan.warmup, plan.decay_steps};
  const Trainee trainee =
      build(ctx.device, tp, cfg, pipeline_stage_layout(grid, cfg, plan.pp_layers), seed, hp);
  Gpt& model = *trainee.model;
  AdamW& opt = *trainee.opt;
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
  const int64_t steps = steps_to_run(world, plan, step);
  shard_optimizer(world, grid, plan, model, opt);
  log_run(ctx, plan, grid, model, *source, hp.lr, step, steps);
  const Peak peak = run_peak(ctx);
  const TokenFlops flops = token_flops(cfg, seq);
  log_flops(world, cfg, seq, peak);
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
  std::vector<double> plot_steps, plot_losses;  // --plot (checked with the other output paths)
  std::vector<double> plot_val_steps, plot_val_losses;  // --eval-every's points
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
  const int64_t every = std::max<int64_t>(1, o.get_int("log-every"));
  const float clip = static_cast<float>(o.get_real("clip"));
  const bool skip_nonfinite = o.get_flag("skip-nonfinite");
  int64_t skipped = 0, first_skipped = 0;
  // The timeline: collectives of every step (for the exposed communication), kernels too in the
  // traced steps; it keeps the spans of the traced steps only.
  Timeline timeline(world.rank());
  tp.set_timeline(&timeline);
  grid.dp().set_timeline(&timeline);
  grid.pp().set_timeline(&timeline);
  PipelineRecord record;  // --pp: what this stage ran in the step, and when
  StepOptions step_opts = plan.step_opts;
  if (plan.pp > 1) step_opts.record = &record;
  const int64_t traced_from = steps > 1 ? std::max<int64_t>(1, steps - kTraceSteps) : 0;
  enable_graceful_stop();   // SIGINT/SIGTERM: stop at a step boundary, agreed by every rank
  int64_t saved_step = -1;  // the step of the last --save-every file
  double best_mfu = 0;      // recheck_peak
  for (int64_t i = 0; i < steps; ++i, ++step) {
    set_current_step(step + 1);
    if (const int sig = agreed_stop_signal())
      stop_after_signal(ctx, grid, model, opt, plan.origin, step, sig, load);
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
      write_agreed(ctx, grid, "--dump-grads", "", [&] {
        dump_gradients(o.get_text("dump-grads"), tp, grid.pp(), model, b, loss);
      });
      log0(world, "wrote gradients of step ", step, " to ", o.get_text("dump-grads"));
        },
        step_opts);
    const float loss = r.loss;
    const double norm = r.grad_norm;
    if (!r.nonfinite.empty()) {
      non_finite_step(world, r, step, skip_nonfinite);
      if (skipped++ == 0) first_skipped = step + 1;
      if (periodic_save(ctx, grid, model, opt, plan.origin, step + 1, load)) saved_step = step + 1;
      continue;
    }
    plot_steps.push_back(static_cast<double>(step + 1));
    plot_losses.push_back(loss);
    ctx.device.synchronize();
    if (i == 0 && plan.pp == 1) {
      check_activation_memory(world, model, cfg, seq, batch / dp / plan.step_opts.micro_batches,
                              tp.size());
      check_measured_budget(world, o, plan, model, opt);
    }
    if (plan.pp > 1 && (i == 0 || i + 1 == steps))
      log_pipeline(ctx.device, world, grid, plan, record);
    const double secs = now() - t0,
                 comm = tp.ledger().seconds_since(mark) + grid.dp().ledger().seconds_since(dp_mark);
    const double exposed = timeline.totals_since(span_mark).exposed;
    StepNumbers n{step + 1, loss,    norm, lr,        static_cast<double>(batch * seq) / secs,
                  comm,     exposed, secs, tp.size(), dp};
    set_utilisation(n, flops, static_cast<double>(batch * seq), world.size(), peak.flops);
    if (peak.given && n.mfu > 1.0 && best_mfu <= 1.0)  // the first step past 100 %: once
      log0(world, "warning: MFU ", fmt_g(100.0 * n.mfu), " % at step ", step + 1,
           ": no rank computes faster than its peak, so --peak-tflops ", fmt_g(peak.flops / 1e12),
           " is below this machine's; give its real peak or leave "
           "--peak-tflops out to measure it");
    best_mfu = std::max(best_mfu, n.mfu);
    if (i % every == 0 || i + 1 == steps) log0(world, progress_line(n, is_simulated(tp)));
    if (predict && i == std::min<int64_t>(1, steps - 1))
      log0(world, predict_prefix, "step ", step + 1, ":\n",
           prediction_report(tp.ledger(), mark, tp.ledger().size(), link, predict_prefix));
    n.val_loss =
        validation_loss(o, grid, ctx.device, model, *source, plan, step + 1, i + 1 == steps);
    if (std::isfinite(n.val_loss)) {
      log0(world, validation_line(n, *source, o.get_int("eval-batches"), batch));
      plot_val_steps.push_back(static_cast<double>(step + 1));
      plot_val_losses.push_back(n.val_loss);
    }
    if (json.is_open()) json.write(json_line(n) + "\n");
    if (periodic_save(ctx, grid, model, opt, plan.origin, step + 1, load)) saved_step = step + 1;
  }
  tp.set_timeline(nullptr);
  grid.dp().set_timeline(nullptr);
  grid.pp().set_timeline(nullptr);
  ctx.device.set_timeline(nullptr);
  json.close();  // checked: a deferred write error (NFS, a full disk) surfaces here
  if (const int sig = agreed_stop_signal())
    stop_after_signal(ctx, grid, model, opt, plan.origin, step, sig, load);
  if (!trace.empty() && steps > 0)
    write_trace(ctx.device, world, timeline, trace,
                world.name() + ", t = " + std::to_string(tp.size()) +
                    (dp > 1 ? " × dp = " + std::to_string(dp) : std::string()) +
                    (plan.pp > 1 ? " × pp = " + std::to_string(plan.pp) : std::string()) +
                    ", --overlap " + overlap_name(cfg.overlap),
                step, steps - traced_from);
  if (std::isfinite(source->loss_floor()))
    log0(world, "loss floor of this data: ", source->loss_floor(), " nats");
  recheck_peak(world, ctx.device, peak, best_mfu);
  write_plot(world, plot, *source, plot_steps, plot_losses, plot_val_steps, plot_val_losses);
  log_peak_memory(ctx.device, world);
  if (skipped > 0)
    log0(world, "--skip-nonfinite: skipped ", skipped, " of ", steps,
         " steps with a non-finite loss or gradient norm (the first at step ", first_skipped, ")");
  // (A folder's end-of-run file is the series' file of the last step: written already when
  // --save-every divides it; and a resumed run with nothing left to train loaded it.)
  const CheckpointSeries series(o.get_text("save"));
  const bool written = (saved_step == step && series.final_path(step) == series.path_for(step)) ||
                       (steps == 0 && plan.resumed && series.final_path(step) == load);
  if (!written) save_at_end(ctx, grid, model, opt, plan.origin, step, load);
  if (!export_dir.empty()) {
    const Dtype dtype = o.get_text("export-dtype") == "bf16" ? Dtype::bf16 : Dtype::f32;
    // Pipeline stages send their weights to the first stage.
    write_agreed(ctx, grid, "--export-hf", load,
                 [&] { export_hf(export_dir, tp, grid.pp(), model, dtype); });
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
      "tp × dp × pp grid with --dp and --pp (t = -np / (dp · pp)).");
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
               "steps to run: from a fresh start or --load, N more (0: just --save the initial "
               "weights); with --resume, the step the run ends at (the same command finishes "
               "the same run)")
      .non_negative()
      .max(kMaxSteps)
      .real("lr", 1e-3, "peak learning rate (constant unless --warmup / --decay-steps)")
      .positive()
      .as_float()
      .integer("warmup", 0, "linear warm-up over the first N steps (absolute step numbers)")
      .non_negative()
      .max(kMaxSteps)
      .integer("decay-steps", 0, "cosine decay to 10% of lr, ending at absolute step N (0 = none)")
      .non_negative()
      .max(kMaxSteps)
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
            "weight-gradient GEMMs), ring (collective matmul; needs --sp), chunked (row blocks of "
            "the GEMMs, each block's all-reduce under the next block's GEMM; without --sp)",
            {"none", "async", "ring", "chunked"})
      .text("recompute", "none",
            "activation recomputation: none, selective (the attention probabilities are "
            "recomputed in backward), full (each block keeps its input and reruns its forward)",
            {"none", "selective", "full"})
      .text("precision", "fp32",
            "fp32, or bf16 mixed precision: bf16 weight copies, activations and TP collectives "
            "over fp32 master weights, AdamW state, weight gradients and statistics",
            {"fp32", "bf16"})
      .integer("micro-batches", 1,
               "gradient accumulation: each replica runs its batch/dp sequences as m micro-batches "
               "and steps once")
      .min(1)
      .fits_int()
      .integer("zero", 0,
               "ZeRO stage on the dp axis: 0, or 1 (AdamW's moments sharded over the replicas)")
      .non_negative()
      .fits_int()
      .real("memory-budget", 0,
            "MiB per rank: before building the model, stop (exit 2) when the preflight's peak "
            "per rank is above it, naming the cheapest option that fits; checked against the "
            "memory ledger after step 1 (0 = no budget)")
      .min(1)
      .zero_means_off();
  declare_pipeline_options(o);  // --pp, --schedule: tp_preflight's too
  o.text("pp-layers", "", "blocks per stage with --pp, e.g. 3,5 (default: an even split)")
      .integer("pad-vocab-multiple", 1, "pad the vocabulary to a multiple of this times t")
      .min(1)
      .flag("audit-grads",
            "before training, check every replicated gradient against t = 1 and across ranks")
      .path("data", "", "train on the bytes of this file (V = 256) instead of the Markov data")
      .path("tokenizer", "",
            "with --data: train on the file's GPT-2 BPE ids (a folder with vocab.json + "
            "merges.txt or encoder.json + vocab.bpe; V = its vocabulary, 50257)")
      .path("save", "",
            "write a checkpoint (safetensors) here at the end; a folder (existing, or ending in "
            "/) gets DIR/checkpoint-stepNNNNNN.safetensors, and --save-every's files go beside "
            "(FILE-stepNNNNNN.safetensors)")
      .integer("save-every", 0,
               "also save every N steps to --save's series, <stem>-stepNNNNNN.safetensors "
               "(atomically; 0 = only at the end)")
      .non_negative()
      .max(kMaxSteps)
      .integer("keep", 3, "--save-every: keep the newest K files of the series")
      .min(1)
      .max(1000)
      .fits_int()
      .text("resume", "",
            "auto: resume from the newest valid checkpoint of --save (its series or the file; a "
            "bad newer one is named and skipped), exit 2 when there is none; auto-or-fresh: the "
            "same, or start fresh when there is none")
      .non_empty()
      .flag("replace-series",
            "a run that does not continue --save's series (no --resume, no --load of one of its "
            "files) refuses to start when it holds another run's checkpoints; with this flag it "
            "starts and deletes them once its own first checkpoint is written")
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
      .text("export-dtype", "f32",
            "the dtype --export-hf writes: f32, or bf16 (the fp32 weights rounded)",
            {"f32", "bf16"})
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
      .real("peak-tflops", 0,
            "the peak TFLOP/s of one rank that MFU divides by (0: on the CPU the one-thread sgemm "
            "ceiling, measured once per machine and cached, times the threads; on the GPU the "
            "measured fp32 GEMM ceiling)")
      .min(1e-6)  // 1 MFLOP/s: below, the MFU is a meaningless number
      .zero_means_off()
      .real("val-fraction", 0.05,
            "--data: hold out the last fraction of the file for validation (the Markov data has "
            "its own held-out stream)")
      .min(0)
      .max(1, true)
      .integer("eval-every", 0,
               "every N steps (and at the last) print the mean loss over --eval-batches held-out "
               "batches, forward only, no dropout (0 = never)")
      .non_negative()
      .max(kMaxSteps)
      .integer("eval-batches", 4, "--eval-every: held-out batches of --batch sequences")
      .min(1)
      .max(10000)
      .integer("log-every", 10, "print a progress line every N steps")
      .min(1)
      .max(kMaxSteps);
  return run_program(argc, argv, o, train);
}
