// tp_bench — measures a backend, and checks what it measures.
//
//   mpirun -np 2 build/bin/tp_bench                        (make bench: the CPU suites 1 and 2)
//   build/bin/tp_bench --backend gpu [--tf32 | --dtype bf16] --suite gemm|block|memory|all
//                                                          (scripts/gpu-check.sh)
//
// --suite picks what runs: auto (the default: gemm + collectives on the CPU, all on the GPU), gemm,
// collectives, block, memory, all, none (print the device and stop). Every timing is bracketed by
// Device::synchronize(), so GPU kernels are timed to completion, not to their launch. Each
// measurement is also printed as one machine-readable line
//   RESULT <suite> <name> <value> <unit> <reference value> <ratio>
// which scripts/gpu-check.sh and scripts/bench.py collect into their tables. On the CPU two lines
// first name the OpenBLAS kernels in use and its build (scripts/bench.py's header):
//   INFO blas_core <openblas_get_corename()>        e.g. Haswell, SkylakeX (OPENBLAS_CORETYPE)
//   INFO blas_config <openblas_get_config()>
//   INFO f32_gemm <f32_gemm_path()>                 OpenBLAS (SkylakeX kernels), oneDNN (...)
//
// 1. GEMM on the CPU (--suite gemm): Device::gemm (the project: the argument checks, then
//    cblas_sgemm, or oneDNN's f32 matmul where OpenBLAS runs kernels without AVX-512 on a CPU that
//    has it: cpu_backend/onednn_gemm.h, f32_gemm) against cblas_sgemm called directly on the same
//    buffers, at every GEMM of the linear layers and the head of tp_train's default model and of
//    make bench's model (forward, input gradient, weight gradient); samples of the two alternate,
//    and the ratio of their medians is the result (absolute times mean little on a shared machine).
//    #wrong: among 1024 sampled elements, those off a double-precision dot product by more than
//    1e-5 · Σ_p |a_ip b_pj| (the fp32 rounding scale of the sum, which no choice of OpenBLAS
//    kernels comes near, and which a missing or misplaced term exceeds). Before the layers, the
//    ceiling: the best GFLOP/s of cblas_sgemm (and of Device::gemm where that is oneDNN's) at the
//    square sizes 512, 1024 and 1536, at the same thread count.
//    Then the same GEMMs in bf16 (bf16 A and B into f32 C, the CPU's bf16 GEMM: oneDNN where the
//    CPU has native bf16, else sgemm on f32 stand-ins) against the fp32 Device::gemm on the same
//    values: RESULT gemm_bf16 lines, the same #wrong test (the sums are fp32 in both).
//    Threads (--suite threads): each rank in turn runs GEMMs while the others sleep, and reports
//    its CPU time over wall time — the cores its OpenMP + BLAS threads really use, which the thread
//    rule keeps at cores ÷ ranks on the node (fp32 and bf16 GEMMs alternately, so oneDNN's
//    threads are held to it too).
// 2. Collectives, nccl-tests style, 4 KiB … 64 MiB: the library call against the bare MPI call on
//    the same buffers (alternating samples, medians), time per call, algbw = bytes / time, and
//    busbw = algbw · 2(t − 1)/t for all-reduce, · (t − 1)/t for all-gather and reduce-scatter: the
//    ring-model bytes each rank moves per second, comparable across t. #wrong counts elements that
//    differ from the closed-form answer (small integers, exact in fp32 whatever the order of the
//    sum).
// 3. GEMM on the GPU (--suite gemm with --backend gpu): TFLOP/s at the linear-layer shapes of a
//    transformer with h = --hidden (4096) and --tokens (8192 = s 2048 · b 4) rows, forward and the
//    two backward products, against a ceiling measured in the same run at the same precision: the
//    best TFLOP/s of the same Device::gemm (cuBLAS) over the square sizes h, 2h and 3h. #wrong counts
//    sampled elements off a double-precision dot product by more than the precision's bound. bf16:
//    --dtype bf16 rounds f32 operands into scratch on each call; --precision bf16 gives the GEMM
//    bf16 operand tensors, read as they are (the model's GEMMs under --precision bf16).
// 4. One transformer block forward + backward (--suite block) at h = --hidden, s = --seq (2048),
//    b = --batch (1), --heads (32), ffn = 4h: milliseconds, and the model TFLOP/s they imply.
//    --precision bf16 runs it in tp_train's mixed precision (bf16 weight copies, activations and
//    their gradients, fp32 weight gradients and statistics; RESULT names "bf16.*"), where --dtype
//    bf16 alone only rounds fp32 GEMMs' inputs ("bf16in.*" for the block).
//    scripts/bench_block_torch.py times the same block in PyTorch eager for the ratio (--bf16:
//    under torch.autocast(dtype=torch.bfloat16)).
// 5. Memory-bound kernels (--suite memory): LayerNorm, GeLU and add (axpy) forward, and their
//    backward, in GB/s of compulsory traffic, against Device::copy (device-to-device) bandwidth
//    measured on the same buffers.
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/log.h"
#include "cpu_direct.h"
#include "launcher.h"
#include "model/config.h"
#include "model/gpt.h"
#include "mpi_communicator.h"
#include "observe/timer.h"
#include "parallel/param.h"

using namespace tp;

namespace {

// Seconds per call: the best of `reps` timed runs (after one warm-up), which is the least noisy
// estimate on a shared machine.
double best_time(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now();
    f();
    best = std::min(best, now() - t0);
  }
  return best;
}

// Seconds per call of a device operation: `f` is run `inner` times between two synchronisations
// (enough calls that one sample lasts ≥ 20 ms, so launch and synchronisation costs vanish), best
// of `reps` samples after a warm-up.
double device_time(Device& dev, int reps, const std::function<void()>& f) {
  f();
  dev.synchronize();
  double t0 = now();
  f();
  dev.synchronize();
  const double one = std::max(now() - t0, 1e-7);
  const int inner = static_cast<int>(std::min(100.0, std::max(1.0, 0.02 / one)));
  double best = one;
  for (int i = 0; i < reps; ++i) {
    t0 = now();
    for (int j = 0; j < inner; ++j) f();
    dev.synchronize();
    best = std::min(best, (now() - t0) / inner);
  }
  return best;
}

void result(Context& ctx, const std::string& suite, const std::string& name, double value,
            const char* unit, double ref, double ratio) {
  char line[256];
  std::snprintf(line, sizeof line, "RESULT %s %s %.6g %s %.6g %.4f", suite.c_str(), name.c_str(),
                value, unit, ref, ratio);
  log0(ctx.world, line);
}

// "fp32", "tf32" or "bf16": what the device's GEMM computes with (from --tf32 / --dtype, or
// --precision bf16: bf16 tensors).
std::string precision(const Context& ctx) {
  if (ctx.options.get_text("dtype") == "bf16" || ctx.options.get_text("precision") == "bf16")
    return "bf16";
  return ctx.options.get_flag("tf32") ? "tf32" : "fp32";
}

// ---- CPU GEMM: Device::gemm against cblas_sgemm called directly, and the naive loop ------------

// Median seconds per call of `f` and of `g` over `samples` samples of `inner` calls each, after a
// warm-up; their samples alternate, so a slower stretch of a shared machine hits both alike and
// the ratio of the medians stays fair. inner = 0: chosen so that one sample lasts ≥ 10 ms — only
// for local work: collectives must pass the same `inner` on every rank.
std::pair<double, double> paired_median(const std::function<void()>& f,
                                        const std::function<void()>& g, int samples = 15,
                                        int inner = 0) {
  f();
  g();
  double t0 = now();
  f();
  if (inner <= 0)
    inner = static_cast<int>(std::min(1000.0, std::max(1.0, 0.01 / std::max(now() - t0, 1e-9))));
  std::vector<double> tf, tg;
  for (int s = 0; s < samples; ++s) {
    t0 = now();
    for (int i = 0; i < inner; ++i) f();
    tf.push_back((now() - t0) / inner);
    t0 = now();
    for (int i = 0; i < inner; ++i) g();
    tg.push_back((now() - t0) / inner);
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tg.begin(), tg.end());
  return {tf[tf.size() / 2], tg[tg.size() / 2]};
}

// One GEMM: C (m × n) = op(A) op(B), op(A) m × k, op(B) k × n; ta / tb: A or B stored transposed.
struct GemmCase {
  std::string name;  // CPU: "<model>.<layer>.<fwd|dgrad|wgrad>"; GPU: "<layer>.<fwd|dgrad|wgrad>"
  bool ta, tb;
  int64_t m, n, k;
};

// #elements among `samples` sampled (i, j) whose value is off the double-precision dot product by
// more than tol · Σ_p |a_ip b_pj| (the rounding scale of a k-term sum at the inputs' precision:
// it does not depend on the order the kernels sum in, so any OpenBLAS or cuBLAS kernel passes).
int sampled_wrong(const GemmCase& g, const Tensor& a, const Tensor& b, const Tensor& c, double tol,
                  int samples) {
  const auto ha = a.to_host(), hb = b.to_host(), hc = c.to_host();
  int wrong = 0;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int s = 0; s < samples; ++s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const int64_t i = static_cast<int64_t>(x % static_cast<uint64_t>(g.m));
    const int64_t j = static_cast<int64_t>((x >> 32) % static_cast<uint64_t>(g.n));
    double dot = 0, mag = 0;
    for (int64_t p = 0; p < g.k; ++p) {
      const double av = g.ta ? ha[p * g.m + i] : ha[i * g.k + p];
      const double bv = g.tb ? hb[j * g.k + p] : hb[p * g.n + j];
      dot += av * bv;
      mag += std::fabs(av * bv);
    }
    wrong += std::fabs(hc[i * g.n + j] - dot) > tol * mag + 1e-30;
  }
  return wrong;
}

// The GEMMs of one transformer layer stack at t = 1: for each linear (N tokens, in → out) the
// forward Y = X W (N × out × in), the input gradient dX = dY Wᵀ (N × in × out) and the weight
// gradient dW = Xᵀ dY (in × out × N); and the tied head, logits = X wteᵀ (N × V × h).
std::vector<GemmCase> model_gemms(const std::string& model, int64_t n, int64_t h, int64_t ffn,
                                  int64_t vocab) {
  std::vector<GemmCase> out;
  const struct {
    const char* layer;
    int64_t in, out;
  } linears[] = {{"qkv", h, 3 * h}, {"proj", h, h}, {"fc1", h, ffn}, {"fc2", ffn, h}};
  for (const auto& l : linears) {
    out.push_back({model + "." + l.layer + ".fwd", false, false, n, l.out, l.in});
    out.push_back({model + "." + l.layer + ".dgrad", false, true, n, l.in, l.out});
    out.push_back({model + "." + l.layer + ".wgrad", true, false, l.in, l.out, n});
  }
  out.push_back({model + ".head.fwd", false, true, n, vocab, h});
  return out;
}

// op(A) op(B) straight into OpenBLAS (cpu_backend/cpu_direct.h), on the project's buffers
// (row-major, as Device::gemm).
void direct_sgemm(const GemmCase& g, const Tensor& a, const Tensor& b, Tensor& c) {
  cpu::direct_sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), a.cols(), b.data(), b.cols(), 0.0f,
                    c.data(), c.cols());
}

// A and B of a GEMM case, uniform in [-1, 1), and room for C.
// A and B in dtype `ab` (bf16 under --precision bf16: what the model's GEMMs read), C in f32.
struct GemmOperands {
  Tensor a, b, c;
  GemmOperands(Device& dev, const GemmCase& g, Dtype ab = Dtype::f32)
      : a(dev, g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, ab),
        b(dev, g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, ab),
        c(dev, Shape{g.m, g.n}) {
    dev.fill_random(a, RngKey::from(1, "a"), GlobalIndex::whole(a.cols()),
                    Distribution::uniform(-1, 1));
    dev.fill_random(b, RngKey::from(1, "b"), GlobalIndex::whole(b.cols()),
                    Distribution::uniform(-1, 1));
  }
};

// What this machine's f32 GEMM can do at this thread count: the best GFLOP/s of cblas_sgemm at three
// large square sizes (each the best of 5 calls after a warm-up), and of Device::gemm too where the
// CPU device runs its f32 GEMMs on oneDNN (f32_gemm_path), so that no row reads above its ceiling.
double sgemm_ceiling(Context& ctx) {
  bool onednn = false;
  f32_gemm_path(ctx.device, &onednn);
  double best = 0;
  for (int64_t n : {512, 1024, 1536}) {
    const GemmCase g{"square", false, false, n, n, n};
    GemmOperands op(ctx.device, g);
    double secs = best_time(5, [&] { direct_sgemm(g, op.a, op.b, op.c); });
    if (onednn)
      secs = std::min(
          secs, best_time(5, [&] { ctx.device.gemm(false, false, 1.0f, op.a, op.b, 0.0f, op.c); }));
    best = std::max(best, 2.0 * n * n * n / secs / 1e9);
  }
  return best;
}

// The same GEMMs with bf16 A and B into an f32 C (--precision bf16's GEMMs: f32 accumulation),
// through Device::gemm (the CPU's bf16 GEMM: oneDNN or sgemm on stand-ins, bf16_gemm_path),
// against the fp32 Device::gemm on the same values; interleaved, as above. RESULT gemm_bf16.
void bench_gemm_bf16(Context& ctx, const std::vector<GemmCase>& cases, double tol, int samples) {
  Device& dev = ctx.device;
  log0(ctx.world, "# bf16 GEMM (", bf16_gemm_path(dev),
       "): bf16 A, B into f32 C vs the fp32 Device::gemm on the same values, ",
       cpu::openmp_threads(), " thread(s)");
  log0(ctx.world,
       "#                 layer      m      n      k      bf16 GFLOP/s   fp32 GFLOP/s   ratio   "
       "#wrong");
  for (const GemmCase& g : cases) {
    GemmOperands op(dev, g);
    Tensor a16(dev, op.a.shape(), Dtype::bf16), b16(dev, op.b.shape(), Dtype::bf16);
    dev.convert(op.a, a16);
    dev.convert(op.b, b16);
    dev.convert(a16, op.a);  // the fp32 operands hold the bf16 values: the same product
    dev.convert(b16, op.b);
    Tensor c2(dev, Shape{g.m, g.n});
    const auto [bf16, fp32] =
        paired_median([&] { dev.gemm(g.ta, g.tb, 1.0f, a16, b16, 0.0f, op.c); },
                      [&] { dev.gemm(g.ta, g.tb, 1.0f, op.a, op.b, 0.0f, c2); });
    const int wrong = sampled_wrong(g, op.a, op.b, op.c, tol, samples);
    const double flop = 2.0 * g.m * g.n * g.k;
    char line[200];
    std::snprintf(line, sizeof line, "%23s %6lld %6lld %6lld %17.2f %14.2f %7.3f %8d",
                  g.name.c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), flop / bf16 / 1e9, flop / fp32 / 1e9, fp32 / bf16,
                  wrong);
    log0(ctx.world, line);
    result(ctx, "gemm_bf16", g.name, flop / bf16 / 1e9, "GFLOP/s", flop / fp32 / 1e9, fp32 / bf16);
    result(ctx, "gemm_bf16", g.name + ".wrong", wrong, "count", samples, 0);
  }
}

void bench_gemm(Context& ctx) {
  Device& dev = ctx.device;
  constexpr double kTol = 1e-5;  // #wrong: |c - dot| > kTol · Σ_p |a_ip b_pj| (fp32 rounding scale)
  constexpr int kSamples = 1024;
  const int threads = cpu::openmp_threads();
  bool onednn = false;
  const std::string path = f32_gemm_path(dev, &onednn);
  const double ceiling = sgemm_ceiling(ctx);
  log0(ctx.world, "# sgemm ceiling, ", threads, " thread(s): best ",
       onednn ? "of cblas_sgemm and Device::gemm" : "cblas_sgemm",
       " at 512^3, 1024^3, 1536^3: ", ceiling, " GFLOP/s");
  result(ctx, "gemm", "ceiling", ceiling, "GFLOP/s", threads, 0);
  // The models: tp_train's defaults (h 64, s 64, b 8, V 256) and the benchmark model of
  // `make bench` (h 256, s 128, b 8, V 256).
  std::vector<GemmCase> cases = model_gemms("default", 64 * 8, 64, 256, 256);
  for (const GemmCase& g : model_gemms("bench", 128 * 8, 256, 1024, 256)) cases.push_back(g);
  log0(ctx.world, "# GEMM: Device::gemm (", path.empty() ? dev.backend() : path,
       ") vs cblas_sgemm called directly, ", threads,
       " thread(s); median of interleaved samples; #wrong of ", kSamples,
       " sampled elements off a double-precision dot product by > ", kTol, " sum |a b|");
  log0(ctx.world,
       "#                 layer      m      n      k   project GFLOP/s   cblas GFLOP/s   ratio   "
       "of ceiling   #wrong");
  for (const GemmCase& g : cases) {
    GemmOperands op(dev, g);
    Tensor c2(dev, Shape{g.m, g.n});
    // The same product, once through the project and once straight into OpenBLAS.
    const auto [project, direct] =
        paired_median([&] { dev.gemm(g.ta, g.tb, 1.0f, op.a, op.b, 0.0f, op.c); },
                      [&] { direct_sgemm(g, op.a, op.b, c2); });
    const int wrong = sampled_wrong(g, op.a, op.b, op.c, kTol, kSamples);
    const double flop = 2.0 * g.m * g.n * g.k;
    char line[200];
    std::snprintf(line, sizeof line, "%23s %6lld %6lld %6lld %17.2f %15.2f %7.3f %11.0f%% %8d",
                  g.name.c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), flop / project / 1e9, flop / direct / 1e9,
                  direct / project, 100.0 * flop / project / 1e9 / ceiling, wrong);
    log0(ctx.world, line);
    result(ctx, "gemm", g.name, flop / project / 1e9, "GFLOP/s", flop / direct / 1e9,
           direct / project);
    result(ctx, "gemm", g.name + ".wrong", wrong, "count", kSamples, 0);
  }
  bench_gemm_bf16(ctx, cases, kTol, kSamples);
}

// ---- threads: ranks × BLAS threads within the cores ----------------------------------------------

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Each rank in turn runs GEMMs for ~0.3 s while the others sleep (a nonblocking barrier polled
// with sleeps, so they take no core), and measures its process's CPU time over wall time: the
// number of cores its GEMMs really kept busy. With the thread rule, that is at most the rank's
// thread budget (cores ÷ ranks on the node), however many cores are idle.
void bench_threads(Context& ctx) {
  Device& dev = ctx.device;
  auto* mpi = dynamic_cast<MpiCommunicator*>(&ctx.world);
  if (mpi == nullptr) return;  // the turn-taking needs MPI's nonblocking barrier
  // The node's cores (not this rank's affinity mask, which a binding launcher may have narrowed).
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)),
            threads = cpu::openmp_threads();
  Tensor a(dev, Shape{512, 512}), b(dev, Shape{512, 512}), c(dev, Shape{512, 512});
  dev.fill(a, 0.5f);
  dev.fill(b, 0.25f);
  // And the bf16 GEMM (oneDNN where it is on: its OpenMP threads must keep the same budget).
  Tensor a16(dev, a.shape(), Dtype::bf16), b16(dev, b.shape(), Dtype::bf16);
  dev.convert(a, a16);
  dev.convert(b, b16);
  auto wait_sleeping = [&] {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Ibarrier(mpi->handle(), &req);
    for (int done = 0; !done; std::this_thread::sleep_for(std::chrono::milliseconds(1)))
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  };
  double busy = 0;
  for (int turn = 0; turn < ctx.world.size(); ++turn) {
    if (turn == ctx.world.rank()) {
      const double w0 = now(), c0 = cpu_seconds();
      while (now() - w0 < 0.3) {
        dev.gemm(false, false, 1.0f, a, b, 0.0f, c);
        dev.gemm(false, false, 1.0f, a16, b16, 0.0f, c);
      }
      busy = (cpu_seconds() - c0) / (now() - w0);
    }
    wait_sleeping();
  }
  Tensor all(dev, Shape{ctx.world.size() * 4}),
      mine = Tensor::from_host(dev, Shape{4},
                               {static_cast<float>(ctx.local_size), static_cast<float>(threads),
                                static_cast<float>(busy), static_cast<float>(cores)});
  ctx.world.all_gather(mine, all);
  const auto h = all.to_host();
  log0(ctx.world, "# threads: ", ctx.local_size, " rank(s) on this node of ", cores,
       " cores; each rank's GEMMs alone (the others asleep): CPU time / wall time");
  for (int r = 0; r < ctx.world.size(); ++r) {
    log0(ctx.world, "#   rank ", r, ": ", h[r * 4 + 1], " OpenMP/BLAS thread(s), busy cores ",
         h[r * 4 + 2]);
    result(ctx, "threads", "rank" + std::to_string(r) + ".busy_cores", h[r * 4 + 2], "cores",
           h[r * 4 + 1], h[r * 4 + 2] / h[r * 4 + 1]);
  }
  result(ctx, "threads", "node", ctx.local_size * threads, "threads", cores,
         static_cast<double>(ctx.local_size * threads) / cores);
}

// ---- collectives: the library against the same MPI call on the same buffer ----------------------

void bench_collectives(Context& ctx) {
  Communicator& w = ctx.world;
  Device& dev = ctx.device;
  // The bare MPI call needs host memory: on a GPU device (--comm mpi stages) only the library runs.
  auto* mpi = dev.host_accessible() ? dynamic_cast<MpiCommunicator*>(&w) : nullptr;
  const int t = w.size();
  log0(ctx.world, "\n# collectives on ", t, " ranks (", w.name(),
       "): the library call vs the bare MPI call on the same buffers, median of interleaved "
       "samples");
  if (mpi != nullptr) {
    const std::string tuning = mpi_collective_tuning();
    log0(ctx.world, "# MPI algorithms the library chose (mpi/mpi_tuning.h): ",
         tuning.empty() ? "none, the MPI library's defaults" : tuning);
  }
  // What the library adds to every call, apart from moving data: the front end (checks, the
  // ledger record, the timer) of a one-rank communicator, whose collectives move nothing.
  {
    SerialCommunicator solo;
    Tensor one(dev, Shape{1});
    dev.fill(one, 1.0f);
    const int calls = 100000;
    const double t0 = now();
    for (int i = 0; i < calls; ++i) solo.all_reduce(one);
    const double front = (now() - t0) / calls;
    log0(ctx.world,
         "# the library's own cost per call (checks, CommLedger record, timer; measured on a "
         "one-rank communicator, which moves nothing): ",
         front * 1e9, " ns");
    result(ctx, "coll", "front_end", front * 1e9, "ns", 0, 0);
  }
  log0(ctx.world,
       "#             op      bytes    lib_us    mpi_us   algbw_GB/s   busbw_GB/s   lib/mpi   "
       "#wrong");
  for (int64_t bytes = 4 << 10; bytes <= (int64_t{64} << 20); bytes *= 4) {
    const int64_t n = bytes / 4 / t * t;
    for (const std::string op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      Tensor full(dev, Shape{n}), shard(dev, Shape{n / t});
      const int count = static_cast<int>(op == "all_reduce" ? n : n / t);
      std::function<void()> lib, raw;
      if (op == "all_reduce") {
        lib = [&] { w.all_reduce(full); };
        raw = [&] {
          MPI_Allreduce(MPI_IN_PLACE, full.data(), count, MPI_FLOAT, MPI_SUM, mpi->handle());
        };
      } else if (op == "all_gather") {
        lib = [&] { w.all_gather(shard, full); };
        raw = [&] {
          MPI_Allgather(shard.data(), count, MPI_FLOAT, full.data(), count, MPI_FLOAT,
                        mpi->handle());
        };
      } else {
        lib = [&] { w.reduce_scatter(full, shard); };
        raw = [&] {
          MPI_Reduce_scatter_block(full.data(), shard.data(), count, MPI_FLOAT, MPI_SUM,
                                   mpi->handle());
        };
      }
      // Timed on whatever the buffers hold (sums of sums may overflow to inf: no matter for
      // speed); correctness below, once, on closed-form inputs.
      dev.fill(full, 1.0f);
      dev.fill(shard, 1.0f);
      // The same number of calls on every rank: ~8 MiB moved per sample, 1 to 200 calls.
      const int inner = static_cast<int>(std::clamp<int64_t>((int64_t{8} << 20) / bytes, 1, 200));
      const auto [lib_s, raw_s] = mpi != nullptr ? paired_median(lib, raw, 15, inner)
                                                 : std::make_pair(best_time(5, lib), 0.0);
      int wrong = 0;
      if (op == "all_reduce") {
        dev.fill(full, w.rank() + 1.0f);
        lib();
        for (float v : full.to_host()) wrong += v != t * (t + 1) / 2.0f;
      } else if (op == "all_gather") {
        dev.fill(shard, 1.0f * w.rank());
        lib();
        const auto h = full.to_host();
        for (int64_t i = 0; i < n; ++i) wrong += h[i] != static_cast<float>(i / (n / t));
      } else {
        dev.fill(full, w.rank() + 1.0f);
        lib();
        for (float v : shard.to_host()) wrong += v != t * (t + 1) / 2.0f;
      }
      const double buf = 4.0 * n;
      const double factor = ring_wire_bytes(op, t, static_cast<int64_t>(buf)) / buf;
      const double algbw = buf / lib_s / 1e9;
      char line[200];
      std::snprintf(line, sizeof line, "%16s %10.0f %9.1f %9.1f %12.3f %12.3f %9.3f %8d",
                    op.c_str(), buf, lib_s * 1e6, raw_s * 1e6, algbw, algbw * factor,
                    raw_s > 0 ? lib_s / raw_s : 0.0, wrong);
      log0(ctx.world, line);
      const std::string name = op + "." + std::to_string(static_cast<int64_t>(buf));
      result(ctx, "coll", name, lib_s * 1e6, "us", raw_s * 1e6, raw_s > 0 ? lib_s / raw_s : 0.0);
      result(ctx, "coll", name + ".wrong", wrong, "count", 0, 0);
    }
  }
}

// ---- GPU GEMM against a measured ceiling ----------------------------------------------------------

void bench_gemm_gpu(Context& ctx) {
  Device& dev = ctx.device;
  const std::string prec = precision(ctx);
  const double tol = prec == "bf16" ? 1.6e-2 : prec == "tf32" ? 2e-3 : 1e-5;
  const int64_t h = ctx.options.get_int("hidden"), tokens = ctx.options.get_int("tokens");
  // --precision bf16: A and B are bf16 tensors, read by cuBLAS as they are (the model's GEMMs);
  // --dtype bf16 rounds f32 A and B into scratch first, each call.
  const Dtype ab = ctx.options.get_text("precision") == "bf16" ? Dtype::bf16 : Dtype::f32;
  auto run = [&](const GemmCase& g, int* wrong) {
    GemmOperands op(dev, g, ab);
    const double secs =
        device_time(dev, 5, [&] { dev.gemm(g.ta, g.tb, 1.0f, op.a, op.b, 0.0f, op.c); });
    if (wrong != nullptr) *wrong = sampled_wrong(g, op.a, op.b, op.c, tol, 64);
    return 2.0 * g.m * g.n * g.k / secs / 1e12;
  };
  log0(ctx.world, "# GEMM on ", dev.name(), ", ", prec,
       ": ceiling = best of Device::gemm at large square sizes");
  double ceiling = 0;
  for (int64_t n : {h, 2 * h, 3 * h}) {  // 4096, 8192, 12288 at the default h
    const double tf = run(GemmCase{"square", false, false, n, n, n}, nullptr);
    log0(ctx.world, "#   ", n, "^3: ", tf, " TFLOP/s");
    ceiling = std::max(ceiling, tf);
  }
  result(ctx, "gemm", prec + ".ceiling", ceiling, "TFLOP/s", ceiling, 1.0);
  log0(ctx.world, "#         layer (h = ", h, ", ", tokens,
       " tokens)       m      n      k   TFLOP/s   of ceiling   #wrong/64");
  const GemmCase cases[] = {
      {"qkv.fwd", false, false, tokens, 3 * h, h},  {"proj.fwd", false, false, tokens, h, h},
      {"fc1.fwd", false, false, tokens, 4 * h, h},  {"fc2.fwd", false, false, tokens, h, 4 * h},
      {"fc1.dgrad", false, true, tokens, h, 4 * h}, {"fc1.wgrad", true, false, h, 4 * h, tokens},
  };
  for (const GemmCase& g : cases) {
    int wrong = 0;
    const double tf = run(g, &wrong);
    char line[200];
    std::snprintf(line, sizeof line, "%30s %6lld %6lld %6lld %9.1f %11.0f%% %11d", g.name.c_str(),
                  static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), tf, 100.0 * tf / ceiling, wrong);
    log0(ctx.world, line);
    result(ctx, "gemm", prec + "." + g.name, tf, "TFLOP/s", ceiling, tf / ceiling);
    if (wrong != 0) result(ctx, "gemm", prec + "." + g.name + ".wrong", wrong, "of-64", 0, 0);
  }
}

// ---- one transformer block ------------------------------------------------------------------------

void bench_block(Context& ctx) {
  Device& dev = ctx.device;
  const bool mixed = ctx.options.get_text("precision") == "bf16";
  const std::string label = mixed                      ? "bf16"
                            : precision(ctx) == "bf16" ? "bf16in"  // --dtype bf16: GEMM inputs only
                                                       : precision(ctx);
  GptConfig cfg;
  cfg.precision = mixed ? Precision::Bf16 : Precision::Fp32;
  cfg.layers = 1;
  cfg.hidden = ctx.options.get_int("hidden");
  cfg.heads = ctx.options.get_int("heads");
  cfg.ffn = 4 * cfg.hidden;
  cfg.seq = ctx.options.get_int("seq");
  cfg.vocab = 256;
  const int64_t seq = cfg.seq, batch = ctx.options.get_int("batch"), n = seq * batch,
                h = cfg.hidden;
  cfg.validate(ctx.world.size());
  TransformerBlock block(dev, ctx.world, cfg, 0);
  ParamList params;
  block.collect_params(params, cfg.init_std, cfg.init_std / std::sqrt(2.0f));
  init_params(dev, params, 1);
  refresh_compute_copies(dev, params);  // bf16: the weights' bf16 copies (fp32: nothing)
  zero_grads(dev, params);
  Tensor x(dev, Shape{n, h}, cfg.compute_dtype()), dy(dev, Shape{n, h}, cfg.compute_dtype());
  dev.fill_random(x, RngKey::from(2, "x"), GlobalIndex::whole(h), Distribution::normal(0, 1));
  dev.fill_random(dy, RngKey::from(2, "dy"), GlobalIndex::whole(h), Distribution::normal(0, 1));
  const double fwd = device_time(dev, 5, [&] { block.forward(x, seq, batch, 1, 0); });
  const double both = device_time(dev, 5, [&] {
    block.forward(x, seq, batch, 1, 0);
    block.backward(dy);
  });
  // Model FLOPs of the block (t = 1): 24·n·h² for the four linears (qkv 3h², proj h², MLP 8h²)
  // forward, and 4·n·s·h for QKᵀ and PV over the full (causal but materialised) S × S; backward
  // is twice the forward.
  const double flop_fwd =
      24.0 * n * h * h / ctx.world.size() + 4.0 * batch * seq * seq * h / ctx.world.size();
  log0(ctx.world, "# transformer block on ", dev.name(), " (", label, "), h = ", h, ", s = ", seq,
       ", b = ", batch, ", ", cfg.heads, " heads, t = ", ctx.world.size(), ": forward ", fwd * 1e3,
       " ms, forward + backward ", both * 1e3, " ms (", 3.0 * flop_fwd / both / 1e12,
       " TFLOP/s), peak ", static_cast<double>(dev.memory().peak) / (1 << 20), " MiB");
  result(ctx, "block", label + ".fwd_ms", fwd * 1e3, "ms", 0, 0);
  result(ctx, "block", label + ".fwd_bwd_ms", both * 1e3, "ms", 0, 0);
}

// ---- memory-bound kernels against a device-to-device copy --------------------------------------

void bench_memory(Context& ctx) {
  Device& dev = ctx.device;
  const int64_t rows = ctx.options.get_int("tokens"), h = ctx.options.get_int("hidden"),
                n = rows * h;
  const double bytes = 4.0 * static_cast<double>(n);  // one pass over one (rows, h) tensor
  Tensor x(dev, Shape{rows, h}), y(dev, Shape{rows, h}), dy(dev, Shape{rows, h}),
      dx(dev, Shape{rows, h});
  Tensor w(dev, Shape{h}), b(dev, Shape{h}), dw(dev, Shape{h}), db(dev, Shape{h}),
      mean(dev, Shape{rows}), rstd(dev, Shape{rows});
  for (Tensor* t : {&x, &dy, &w, &b})
    dev.fill_random(*t, RngKey::from(3, "m"), GlobalIndex::whole(t->cols()),
                    Distribution::uniform(-1, 1));
  dev.fill(dw, 0.0f);
  dev.fill(db, 0.0f);
  const double copy =
      bytes * 2 / device_time(dev, 10, [&] { dev.copy(y.data(), x.data(), x.bytes()); }) / 1e9;
  log0(ctx.world, "# memory-bound kernels on ", dev.name(), ", (", rows, ", ", h,
       ") fp32 = ", bytes / (1 << 20),
       " MiB per tensor; GB/s of compulsory traffic vs device-to-device copy (", copy, " GB/s)");
  result(ctx, "memory", "copy", copy, "GB/s", copy, 1.0);
  struct Kernel {
    const char* name;
    double passes;  // tensors of (rows, h) read + written
    std::function<void()> run;
  };
  const Kernel kernels[] = {
      {"layernorm.fwd", 2, [&] { dev.layernorm_forward(y, mean, rstd, x, w, b, 1e-5f); }},
      {"layernorm.bwd", 3, [&] { dev.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd); }},
      {"gelu.fwd", 2, [&] { dev.gelu_forward(y, x); }},
      {"gelu.bwd", 3, [&] { dev.gelu_backward(dx, dy, x); }},
      {"add", 3, [&] { dev.axpy(1.0f, x, y); }},
  };
  log0(ctx.world, "#            kernel     GB/s   of copy");
  for (const Kernel& k : kernels) {
    const double gbs = k.passes * bytes / device_time(dev, 10, k.run) / 1e9;
    char line[120];
    std::snprintf(line, sizeof line, "%19s %8.0f %8.0f%%", k.name, gbs, 100.0 * gbs / copy);
    log0(ctx.world, line);
    result(ctx, "memory", k.name, gbs, "GB/s", copy, gbs / copy);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opts(
      "tp_bench",
      "Measures a backend: GEMM (CPU: Device::gemm vs direct cblas_sgemm; GPU: layer shapes vs a "
      "measured ceiling), "
      "collectives, one transformer block, memory-bound kernels.");
  opts.text("suite", "auto", "what to measure: auto (cpu: gemm + collectives; gpu: all)",
            {"auto", "gemm", "threads", "collectives", "block", "memory", "all", "none"});
  // Bounds past any model measured here (h = 65536 is 4x the largest GPT), before a product wraps.
  opts.integer("hidden", 4096, "h for the GPU GEMM shapes, the block and the memory kernels")
      .min(1)
      .max(1 << 16);
  opts.integer("tokens", 8192, "rows of the GPU GEMM shapes and the memory kernels (s·b = 2048·4)")
      .min(1)
      .max(1 << 20);
  opts.integer("seq", 2048, "block: sequence length").min(1).max(1 << 20);
  opts.integer("batch", 1, "block: batch").min(1).max(1 << 16);
  opts.integer("heads", 32, "block: attention heads").min(1).max(1 << 16);
  opts.text("precision", "fp32",
            "block: fp32, or bf16 mixed precision (tp_train's --precision: bf16 weight copies, "
            "activations and gradients of activations)",
            {"fp32", "bf16"});
  return run_program(argc, argv, opts, [](Context& ctx) {
    log0(ctx.world, "tp_bench on ", ctx.world.size(), " ranks, ", ctx.device.name(), ", ",
         ctx.world.name());
    const bool gpu = ctx.options.get_text("backend") == "gpu";
    // The kernels OpenBLAS picked for this CPU (or OPENBLAS_CORETYPE forced): they decide the
    // CPU GEMMs' speed and their last bits.
    if (!gpu) {
      log0(ctx.world, "INFO blas_core ", cpu::openblas_core());
      log0(ctx.world, "INFO blas_config ", cpu::openblas_config());
      log0(ctx.world, "INFO f32_gemm ", f32_gemm_path(ctx.device));
    }
    std::string suite = ctx.options.get_text("suite");
    if (suite == "auto") suite = gpu ? "all" : "cpu";
    const bool all = suite == "all";
    if (suite == "cpu" || suite == "gemm" || all) {
      if (gpu)
        bench_gemm_gpu(ctx);
      else
        bench_gemm(ctx);
    }
    if (!gpu && (suite == "cpu" || suite == "threads")) bench_threads(ctx);
    if (all || suite == "memory") bench_memory(ctx);
    if (all || suite == "block") bench_block(ctx);
    if (suite == "cpu" || suite == "collectives" || all) bench_collectives(ctx);
    return 0;
  });
}
