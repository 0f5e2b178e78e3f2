// tp_bench — measures the CPU backend, and checks what it measures.
//
//   mpirun -np 2 build/bin/tp_bench            (make bench)
//
// 1. GEMM: the cache-blocked OpenMP kernel against the naive reference loop on the same machine in
//    the same run, at linear-layer shapes. Reported as GFLOP/s of each and their ratio (single
//    absolute times mean little on a shared machine; the ratio is the result). The #wrong column
//    counts elements whose relative error against the reference exceeds 1e-4.
// 2. Collectives, nccl-tests style: time per call, algbw = bytes / time, and
//    busbw = algbw · 2(t − 1)/t for all-reduce, · (t − 1)/t for all-gather and reduce-scatter: the
//    ring-model bytes each rank moves per second, comparable across t. #wrong counts elements that
//    differ from the closed-form answer.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "core/log.h"
#include "core/runtime.h"
#include "gemm.h"

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

void bench_gemm(Context& ctx) {
  log0(ctx.world, "# GEMM, blocked OpenMP kernel vs naive reference loop (", omp_get_max_threads(),
       " threads on rank 0)");
  log0(ctx.world, "#      m      n      k   blocked GFLOP/s   naive GFLOP/s   ratio   #wrong");
  struct Shape3 { int64_t m, n, k; };
  for (const Shape3 s : {Shape3{256, 256, 256}, Shape3{512, 512, 512}, Shape3{128, 2048, 512},
                         Shape3{1024, 256, 1024}}) {
    Tensor a(ctx.device, Shape{s.m, s.k}), b(ctx.device, Shape{s.k, s.n}), c(ctx.device, Shape{s.m, s.n});
    ctx.device.fill_random(a, RngKey::from(1, "a"), GlobalIndex::whole(s.k), Distribution::uniform(-1, 1));
    ctx.device.fill_random(b, RngKey::from(1, "b"), GlobalIndex::whole(s.n), Distribution::uniform(-1, 1));
    const double fast = best_time(3, [&] { ctx.device.gemm(false, false, 1.0f, a, b, 0.0f, c); });
    const auto ha = a.to_host(), hb = b.to_host();
    std::vector<float> ref(static_cast<size_t>(s.m * s.n));
    const double slow = best_time(1, [&] {
      cpu::gemm_reference(false, false, s.m, s.n, s.k, 1.0f, ha.data(), s.k, hb.data(), s.n, 0.0f,
                          ref.data(), s.n);
    });
    const auto hc = c.to_host();
    int wrong = 0;
    for (size_t i = 0; i < hc.size(); ++i)
      wrong += std::fabs(hc[i] - ref[i]) > 1e-4 * (1.0 + std::fabs(ref[i]));
    const double flop = 2.0 * s.m * s.n * s.k;
    char line[160];
    std::snprintf(line, sizeof line, "%8lld %6lld %6lld %17.2f %15.2f %7.1f %8d", static_cast<long long>(s.m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k), flop / fast / 1e9,
                  flop / slow / 1e9, slow / fast, wrong);
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
        secs = best_time(5, [&] { ctx.device.fill(full, w.rank() + 1.0f); w.all_reduce(full); });
        for (float v : full.to_host()) wrong += v != t * (t + 1) / 2.0f;
      } else if (op == "all_gather") {
        secs = best_time(5, [&] { ctx.device.fill(shard, 1.0f * w.rank()); w.all_gather(shard, full); });
        const auto h = full.to_host();
        for (int64_t i = 0; i < n; ++i) wrong += h[i] != static_cast<float>(i / (n / t));
      } else {
        secs = best_time(5, [&] { ctx.device.fill(full, w.rank() + 1.0f); w.reduce_scatter(full, shard); });
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

}  // namespace

int main(int argc, char** argv) {
  Options opts("tp_bench", "Measures the CPU GEMM against the reference loop, and the collectives.");
  return run_program(argc, argv, opts, [](Context& ctx) {
    log0(ctx.world, "tp_bench on ", ctx.world.size(), " ranks, ", ctx.device.name());
    bench_gemm(ctx);
    bench_collectives(ctx);
    return 0;
  });
}
