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
#include "train/checkpoint_lifecycle.h"
#include "train/run_plan.h"
#include "train/step_report.h"
#include "train/train_options.h"

using namespace tp;

namespace {

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

// ---- MFU: the peak a rank's model FLOP/s are divided by (model/flops.h has the FLOPs) ----------

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
  CheckpointLifecycle checkpoints(world, ctx.device, o, grid, model, opt, plan.origin, load);
  std::string steps_note;
  const int64_t steps = steps_to_run(plan, step, steps_note);
  if (!steps_note.empty()) log0(world, steps_note);
  shard_optimizer(world, grid, plan, model, opt);
  log_run(ctx, plan, grid, model, *source, hp.lr, step, steps);
  const Peak peak = run_peak(ctx);
  const TokenFlops flops = token_flops(cfg, seq);
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
    if (const int sig = agreed_stop_signal()) checkpoints.stop_after_signal(step, sig);
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
      if (skipped++ == 0) first_skipped = step + 1;
      if (checkpoints.periodic_save(step + 1)) saved_step = step + 1;
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
    if (checkpoints.periodic_save(step + 1)) saved_step = step + 1;
  }
  tp.set_timeline(nullptr);
  grid.dp().set_timeline(nullptr);
  grid.pp().set_timeline(nullptr);
  ctx.device.set_timeline(nullptr);
  json.close();  // checked: a deferred write error (NFS, a full disk) surfaces here
  if (const int sig = agreed_stop_signal()) checkpoints.stop_after_signal(step, sig);
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
  if (!written) checkpoints.save_at_end(step);
  if (!export_dir.empty()) {
    const Dtype dtype = o.get_text("export-dtype") == "bf16" ? Dtype::bf16 : Dtype::f32;
    // Pipeline stages send their weights to the first stage.
    checkpoints.write_agreed("--export-hf",
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
  declare_train_options(o);
  return run_program(argc, argv, o, train);
}
