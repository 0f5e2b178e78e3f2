// peak.cpp — the peak FLOP/s per rank that MFU divides by (launcher.h: run_peak): --peak-tflops,
// else the device's own answer (core/device.h, measure_peak: the CPU's one-thread sgemm ceiling,
// cached per machine, cpu_backend/peak_probe.cpp; any other device's timed GEMM ceiling), measured
// on rank 0 and broadcast to every rank; and the recheck of a kept ceiling after the run.
#include <cstdio>
#include <string>

#include "core/format.h"
#include "core/log.h"
#include "core/tensor.h"
#include "launcher.h"

namespace tp {

Peak run_peak(Context& ctx) {
  Peak p;
  const double given = ctx.options.get_real("peak-tflops");
  if (given > 0) {
    p.flops = given * 1e12;
    p.given = true;
    p.what = "--peak-tflops " + fmt_g(given) + " per rank";
    return p;
  }
  if (ctx.world.rank() == 0) p.ceiling = ctx.device.measure_peak();
  Tensor v = Tensor::from_host(ctx.device, Shape{1}, {static_cast<float>(p.ceiling.gflops)});
  ctx.world.broadcast(v, 0);
  p.ceiling.gflops = v.to_host()[0];
  const PeakFlops peak = ctx.device.peak_flops(p.ceiling);
  p.flops = peak.flops;
  p.what = peak.what;
  return p;
}

void recheck_peak(Communicator& world, Device& device, const Peak& peak, double best_mfu) {
  if (world.rank() != 0 || !peak.ceiling.remeasurable || best_mfu <= 1.0) return;
  bool stored = false;
  const double now_gflops = device.remeasure_peak(peak.ceiling.gflops, &stored);
  const bool higher = now_gflops > peak.ceiling.gflops;
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.3g", 100.0 * best_mfu);
  log0(world, "note: MFU reached ", pct, " % against a one-thread sgemm ceiling of ",
       fmt_g(peak.ceiling.gflops), " GFLOP/s, so that ceiling was measured on a busy machine (or ",
       "OpenBLAS's sgemm is not this CPU's fastest GEMM); measured again now: ", fmt_g(now_gflops),
       " GFLOP/s",
       stored   ? ", cached for the next run"
       : higher ? " (not cached)"
                : ", kept");
}

}  // namespace tp
