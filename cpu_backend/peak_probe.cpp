// peak_probe.cpp — the CPU's answer to the peak that MFU divides by (cpu_device.h; core/device.h,
// measure_peak): one thread's sgemm ceiling, kept per machine under a key naming the BLAS kernels it
// ran on (peak_cache.h), times the threads of a rank; and a note when those kernels are not the
// CPU's best. launcher/peak.cpp asks rank 0's device and broadcasts the value.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/format.h"
#include "core/tensor.h"
#include "cpu_device.h"
#include "gemm_choice.h"
#include "observe/timer.h"
#include "peak_cache.h"

namespace tp {

double CpuDevice::one_thread_sgemm_gflops() {
  const bool onednn = cpu::f32_gemm().onednn;
  const int before = openblas_get_num_threads(), omp_before = omp_get_max_threads();
  openblas_set_num_threads(1);
  omp_set_num_threads(1);
  double best = 0;
  for (int n : {512, 1024}) {
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
    const Tensor ta = Tensor::from_host(*this, Shape{n, n}, a),
                 tb = Tensor::from_host(*this, Shape{n, n}, b);
    Tensor tc(*this, Shape{n, n});
    for (int rep = 0; rep < 4; ++rep) {
      const double t0 = now();
      if (onednn)
        gemm(false, false, 1.0f, ta, tb, 0.0f, tc);
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

namespace {
// This machine's key in the peak cache: the CPU and the f32 GEMM's engine (blas_core_key).
std::string peak_key(const CpuDevice& cpu) {
  return peak_cache_key(cpu_model_name(), cpu.blas_core_key());
}
}  // namespace

PeakCeiling CpuDevice::measure_peak() {
  const std::string path = peak_cache_path(), key = peak_key(*this);
  PeakCeiling ceiling;
  ceiling.remeasurable = true;
  ceiling.gflops = cached_peak(path, key);
  std::string note = "cached in " + path;
  if (ceiling.gflops <= 0) {
    ceiling.gflops = one_thread_sgemm_gflops();
    note = store_peak(path, key, ceiling.gflops) ? "measured now, cached in " + path
                                                 : "measured now (no cache)";
  }
  ceiling.source = key + ", " + note;
  return ceiling;
}

PeakFlops CpuDevice::peak_flops(const PeakCeiling& ceiling) const {
  const int n = threads();
  return {ceiling.gflops * 1e9 * n, std::to_string(n) + " thread(s) × " + fmt_g(ceiling.gflops) +
                                        " GFLOP/s (one-thread sgemm ceiling; " + ceiling.source +
                                        ")"};
}

double CpuDevice::remeasure_peak(double was, bool* kept) {
  const double now_gflops = one_thread_sgemm_gflops();
  *kept = now_gflops > was && store_peak(peak_cache_path(), peak_key(*this), now_gflops);
  return now_gflops;
}

std::string CpuDevice::blas_core_key() const {
  return std::string(openblas_get_corename()) + (cpu::f32_gemm().onednn ? " + oneDNN f32" : "");
}

// A CPU with AVX-512 whose OpenBLAS runs kernels without it, OPENBLAS_CORETYPE=Haswell set by the
// environment (some machines' do) or an OpenBLAS too old to know the CPU: "" when neither, else a
// line saying so, since the GEMMs are most of a CPU step. Measured on a 2-core AMD EPYC (Zen 5),
// one thread, make bench's model: 8,600 tokens/s on OpenBLAS's own pick (Cooperlake, AVX-512),
// 5,100 with OPENBLAS_CORETYPE=Haswell (AVX2). On a 2-core Xeon of model 207 (Emerald Rapids),
// which Debian 12's OpenBLAS 0.3.21 does not know and runs on its Prescott (SSE3) kernels:
// 830-1,490 tokens/s, against 3,770-5,380 with OPENBLAS_CORETYPE=SkylakeX (3.6-4.5x, interleaved).
std::string CpuDevice::blas_kernel_note() const {
  const std::string core = openblas_get_corename();
  const bool onednn = cpu::f32_gemm().onednn;
  const std::string path = cpu::f32_gemm().note;
  const bool narrow = cpu::f32_gemm().openblas_lacks_avx512;
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

int CpuDevice::threads() const { return omp_get_max_threads(); }

}  // namespace tp
