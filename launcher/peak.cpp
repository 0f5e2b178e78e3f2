// peak.cpp — the peak FLOP/s per rank that MFU divides by (launcher.h: run_peak): --peak-tflops,
// else measured on rank 0 by the backend that runs (the CPU's one-thread sgemm probe,
// cpu_backend/peak_probe.cpp, cached per machine: observe/peak_cache.h; the GPU's GEMM ceiling
// through Device::gemm) and broadcast to every rank.
#include <algorithm>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "core/tensor.h"
#include "cpu_device.h"
#include "launcher.h"
#include "observe/peak_cache.h"
#include "observe/timer.h"

namespace tp {

namespace {

// The CPU device under `device` (the peak's CPU branch runs only with --backend cpu).
CpuDevice& cpu_device(Device& device) {
  auto* cpu = dynamic_cast<CpuDevice*>(&device);
  TP_CHECK(cpu != nullptr, "the CPU's peak asked of ", device.name());
  return *cpu;
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

}  // namespace

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
                        key = peak_cache_key(cpu_model_name(),
                                             cpu_device(ctx.device).blas_core_key());
      gflops = cached_peak(path, key);
      note = "cached in " + path;
      if (gflops <= 0) {
        gflops = cpu_device(ctx.device).one_thread_sgemm_gflops();
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
    const int threads = cpu_device(ctx.device).threads();
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

void recheck_peak(Communicator& world, Device& device, const Peak& peak, double best_mfu) {
  if (world.rank() != 0 || peak.cache_key.empty() || best_mfu <= 1.0) return;
  const double now_gflops = cpu_device(device).one_thread_sgemm_gflops();
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

std::string blas_kernel_note(const Device& device) {
  const auto* cpu = dynamic_cast<const CpuDevice*>(&device);
  return cpu ? cpu->blas_kernel_note() : "";
}

}  // namespace tp
