// device_peak.cpp — the default answer of a Device to "what is your peak?" (core/device.h,
// measure_peak, peak_flops, remeasure_peak): time its own fp32 GEMM, which works on any device. The
// CPU backend overrides all three (cpu_backend/peak_probe.cpp).
#include <algorithm>
#include <chrono>

#include "core/device.h"

namespace tp {

namespace {
double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

PeakCeiling Device::measure_peak() {
  double best = 0;
  for (int64_t n = 256; n <= 4096; n *= 2) {
    Tensor a(*this, Shape{n, n}), b(*this, Shape{n, n}), c(*this, Shape{n, n});
    fill(a, 0.5f);
    fill(b, 0.25f);
    double slowest = 0;
    for (int rep = 0; rep < 4; ++rep) {
      synchronize();
      const double t0 = seconds_now();
      gemm(false, false, 1.0f, a, b, 0.0f, c);
      synchronize();
      const double secs = seconds_now() - t0;
      slowest = std::max(slowest, secs);
      if (rep > 0) best = std::max(best, 2.0 * static_cast<double>(n * n * n) / secs / 1e9);
    }
    if (slowest > 0.05) break;
  }
  PeakCeiling ceiling;
  ceiling.gflops = best;
  return ceiling;
}

PeakFlops Device::peak_flops(const PeakCeiling& ceiling) const {
  return {ceiling.gflops * 1e9,
          "the measured fp32 GEMM ceiling of " + name() + " (Device::gemm, n³ up to 4096³)"};
}

double Device::remeasure_peak(double /*was*/, bool* kept) {
  *kept = false;
  return measure_peak().gflops;
}

}  // namespace tp
