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
// which scripts/gpu-check.sh collects into its table.
//
// 1. GEMM on the CPU: the cache-blocked OpenMP kernel against the naive reference loop on the same machine in
//    the same run, at linear-layer shapes. Reported as GFLOP/s of each and their ratio (single
//    absolute times mean little on a shared machine; the ratio is the result). The #wrong column
//    counts elements whose relative error against the reference exceeds 1e-4.
// 2. Collectives, nccl-tests style: time per call, algbw = bytes / time, and
//    busbw = algbw · 2(t − 1)/t for all-reduce, · (t − 1)/t for all-gather and reduce-scatter: the
//    ring-model bytes each rank moves per second, comparable across t. #wrong counts elements that
//    differ from the closed-form answer.
// 3. GEMM on the GPU (--suite gemm with --backend gpu): TFLOP/s at the linear-layer shapes of a
//    transformer with h = --hidden (4096) and --tokens (8192 = s 2048 · b 4) rows, forward and the
//    two backward products, against a ceiling measured in the same run at the same precision: the
//    best TFLOP/s of the same Device::gemm (cuBLAS) over the square sizes h, 2h and 3h. #wrong counts
//    sampled elements off a double-precision dot product by more than the precision's bound.
// 4. One transformer block forward + backward (--suite block) at h = --hidden, s = --seq (2048),
//    b = --batch (1), --heads (32), ffn = 4h: milliseconds, and the model TFLOP/s they imply.
//    scripts/bench_block_torch.py times the same block in PyTorch eager for the ratio.
// 5. Memory-bound kernels (--suite memory): LayerNorm, GeLU and add (axpy) forward, and their
//    backward, in GB/s of compulsory traffic, against Device::copy (device-to-device) bandwidth
//    measured on the same buffers.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/host.h"
#include "core/log.h"
#include "launcher.h"
#include "model/config.h"
#include "model/gpt.h"
#include "parallel/param.h"

using namespace tp;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

// "fp32", "tf32" or "bf16": what the device's GEMM computes with (from --tf32 / --dtype).
std::string precision(const Context& ctx) {
  if (ctx.options.get_text("dtype") == "bf16") return "bf16";
  return ctx.options.get_flag("tf32") ? "tf32" : "fp32";
}

void bench_gemm(Context& ctx) {
  log0(ctx.world, "# GEMM, blocked OpenMP kernel vs naive reference loop (", omp_get_max_threads(),
       " threads on rank 0)");
  log0(ctx.world, "#      m      n      k   blocked GFLOP/s   naive GFLOP/s   ratio   #wrong");
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 s : {Shape3{256, 256, 256}, Shape3{512, 512, 512}, Shape3{128, 2048, 512},
                         Shape3{1024, 256, 1024}}) {
    Tensor a(ctx.device, Shape{s.m, s.k}), b(ctx.device, Shape{s.k, s.n}),
        c(ctx.device, Shape{s.m, s.n});
    ctx.device.fill_random(a, RngKey::from(1, "a"), GlobalIndex::whole(s.k),
                           Distribution::uniform(-1, 1));
    ctx.device.fill_random(b, RngKey::from(1, "b"), GlobalIndex::whole(s.n),
                           Distribution::uniform(-1, 1));
    const double fast = best_time(3, [&] { ctx.device.gemm(false, false, 1.0f, a, b, 0.0f, c); });
    const auto ha = a.to_host(), hb = b.to_host();
    std::vector<float> ref(static_cast<size_t>(s.m * s.n));
    const double slow = best_time(1, [&] {
      host_gemm(false, false, s.m, s.n, s.k, 1.0f, ha.data(), s.k, hb.data(), s.n, 0.0f, ref.data(),
                s.n);
    });
    const auto hc = c.to_host();
    int wrong = 0;
    for (size_t i = 0; i < hc.size(); ++i)
      wrong += std::fabs(hc[i] - ref[i]) > 1e-4 * (1.0 + std::fabs(ref[i]));
    const double flop = 2.0 * s.m * s.n * s.k;
    char line[160];
    std::snprintf(line, sizeof line, "%8lld %6lld %6lld %17.2f %15.2f %7.1f %8d",
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), flop / fast / 1e9, flop / slow / 1e9, slow / fast,
                  wrong);
    log0(ctx.world, line);
  }
}

void bench_collectives(Context& ctx) {
  Communicator& w = ctx.world;
  const int t = w.size();
  log0(ctx.world, "\n# collectives on ", t, " ranks (", w.name(), "), best of 5");
  log0(ctx.world, "#        op     bytes    time_us   algbw_GB/s   busbw_GB/s   #wrong");
  for (int64_t n : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 20}) {
    n = n / t * t;
    const double bytes = 4.0 * n;
    for (const std::string op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      Tensor full(ctx.device, Shape{n}), shard(ctx.device, Shape{n / t});
      double secs = 0;
      int wrong = 0;
      if (op == "all_reduce") {
        secs = best_time(5, [&] {
          ctx.device.fill(full, w.rank() + 1.0f);
          w.all_reduce(full);
        });
        for (float v : full.to_host()) wrong += v != t * (t + 1) / 2.0f;
      } else if (op == "all_gather") {
        secs = best_time(5, [&] {
          ctx.device.fill(shard, 1.0f * w.rank());
          w.all_gather(shard, full);
        });
        const auto h = full.to_host();
        for (int64_t i = 0; i < n; ++i) wrong += h[i] != static_cast<float>(i / (n / t));
      } else {
        secs = best_time(5, [&] {
          ctx.device.fill(full, w.rank() + 1.0f);
          w.reduce_scatter(full, shard);
        });
        for (float v : shard.to_host()) wrong += v != t * (t + 1) / 2.0f;
      }
      const double factor = ring_wire_bytes(op, t, static_cast<int64_t>(bytes)) / bytes;
      const double algbw = bytes / secs / 1e9;
      char line[160];
      std::snprintf(line, sizeof line, "%15s %9.0f %10.1f %12.3f %12.3f %8d", op.c_str(), bytes,
                    secs * 1e6, algbw, algbw * factor, wrong);
      log0(ctx.world, line);
    }
  }
}

// ---- GPU GEMM against a measured ceiling ----------------------------------------------------------

struct GemmCase {
  const char* name;
  bool ta, tb;
  int64_t m, n, k;
};

// #elements among `samples` sampled (i, j) whose value is off the double-precision dot product by
// more than tol · Σ_k |a_ik b_kj| (the rounding bound of a k-term sum at the inputs' precision).
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

void bench_gemm_gpu(Context& ctx) {
  Device& dev = ctx.device;
  const std::string prec = precision(ctx);
  const double tol = prec == "bf16" ? 1.6e-2 : prec == "tf32" ? 2e-3 : 1e-5;
  const int64_t h = ctx.options.get_int("hidden"), tokens = ctx.options.get_int("tokens");
  auto run = [&](const GemmCase& g, int* wrong) {
    Tensor a(dev, g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}),
        b(dev, g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n});
    Tensor c(dev, Shape{g.m, g.n});
    dev.fill_random(a, RngKey::from(1, "a"), GlobalIndex::whole(a.cols()),
                    Distribution::uniform(-1, 1));
    dev.fill_random(b, RngKey::from(1, "b"), GlobalIndex::whole(b.cols()),
                    Distribution::uniform(-1, 1));
    const double secs = device_time(dev, 5, [&] { dev.gemm(g.ta, g.tb, 1.0f, a, b, 0.0f, c); });
    if (wrong != nullptr) *wrong = sampled_wrong(g, a, b, c, tol, 64);
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
    std::snprintf(line, sizeof line, "%30s %6lld %6lld %6lld %9.1f %11.0f%% %11d", g.name,
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
  GptConfig cfg;
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
  zero_grads(dev, params);
  Tensor x(dev, Shape{n, h}), dy(dev, Shape{n, h});
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
  log0(ctx.world, "# transformer block on ", dev.name(), " (", precision(ctx), "), h = ", h,
       ", s = ", seq, ", b = ", batch, ", ", cfg.heads, " heads, t = ", ctx.world.size(),
       ": forward ", fwd * 1e3, " ms, forward + backward ", both * 1e3, " ms (",
       3.0 * flop_fwd / both / 1e12, " TFLOP/s), peak ",
       static_cast<double>(dev.memory().peak) / (1 << 20), " MiB");
  result(ctx, "block", precision(ctx) + ".fwd_ms", fwd * 1e3, "ms", 0, 0);
  result(ctx, "block", precision(ctx) + ".fwd_bwd_ms", both * 1e3, "ms", 0, 0);
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
      "Measures a backend: GEMM (CPU: blocked vs naive; GPU: layer shapes vs a measured ceiling), "
      "collectives, one transformer block, memory-bound kernels.");
  opts.text("suite", "auto", "what to measure: auto (cpu: gemm + collectives; gpu: all)",
            {"auto", "gemm", "collectives", "block", "memory", "all", "none"});
  opts.integer("hidden", 4096, "h for the GPU GEMM shapes, the block and the memory kernels");
  opts.integer("tokens", 8192, "rows of the GPU GEMM shapes and the memory kernels (s·b = 2048·4)");
  opts.integer("seq", 2048, "block: sequence length");
  opts.integer("batch", 1, "block: batch");
  opts.integer("heads", 32, "block: attention heads");
  return run_program(argc, argv, opts, [](Context& ctx) {
    log0(ctx.world, "tp_bench on ", ctx.world.size(), " ranks, ", ctx.device.name(), ", ",
         ctx.world.name());
    const bool gpu = ctx.options.get_text("backend") == "gpu";
    std::string suite = ctx.options.get_text("suite");
    if (suite == "auto") suite = gpu ? "all" : "cpu";
    const bool all = suite == "all";
    if (suite == "cpu" || suite == "gemm" || all) {
      if (gpu)
        bench_gemm_gpu(ctx);
      else
        bench_gemm(ctx);
    }
    if (all || suite == "memory") bench_memory(ctx);
    if (all || suite == "block") bench_block(ctx);
    if (suite == "cpu" || suite == "collectives" || all) bench_collectives(ctx);
    return 0;
  });
}
