// test_peak_probe.cpp — the peak that MFU divides by as a device answers it (core/device.h,
// measure_peak): the CPU's one-thread sgemm probe (cpu_backend/peak_probe.cpp), the default every
// other device takes (core/device_peak.cpp), and the launcher's note for another device (serial).
#include <gtest/gtest.h>

#include <string>

#include "cpu_device.h"
#include "launcher.h"
#include "test_util.h"

namespace {

TEST(PeakProbe, OneThreadSgemmCeilingIsMeasured) {
  tp::CpuDevice cpu;
  const int threads = cpu.threads();
  EXPECT_GE(threads, 1);
  EXPECT_GT(cpu.one_thread_sgemm_gflops(), 0.0);
  EXPECT_EQ(cpu.threads(), threads);  // the probe gives the threads back
}

TEST(PeakProbe, CacheKeyNamesTheBlasKernels) {
  tp::CpuDevice cpu;
  const std::string key = cpu.blas_core_key();
  EXPECT_FALSE(key.empty());
  const std::string note = tp::blas_kernel_note(cpu);  // "" or a "note: " line
  EXPECT_TRUE(note.empty() || note.rfind("note: ", 0) == 0) << note;
}

// The CPU's peak per rank is its threads times one thread's ceiling, and its words say so.
TEST(PeakProbe, CpuPeakIsTheThreadsTimesOneThreadsCeiling) {
  tp::CpuDevice cpu;
  tp::PeakCeiling ceiling;
  ceiling.gflops = 150.5;
  ceiling.source = "key, cached in path";
  const tp::PeakFlops peak = cpu.peak_flops(ceiling);
  EXPECT_DOUBLE_EQ(peak.flops, 150.5e9 * cpu.threads());
  EXPECT_EQ(peak.what, std::to_string(cpu.threads()) +
                           " thread(s) × 150.5 GFLOP/s (one-thread sgemm ceiling; key, cached in "
                           "path)");
}

// The default (the GPU's): the device's own fp32 GEMM timed, the whole device's ceiling, not kept.
TEST(PeakProbe, DefaultTimesTheDevicesGemm) {
  tp::CpuDevice cpu;
  const tp::PeakCeiling ceiling = cpu.Device::measure_peak();
  EXPECT_GT(ceiling.gflops, 0.0);
  EXPECT_FALSE(ceiling.remeasurable);
  const tp::PeakFlops peak = cpu.Device::peak_flops(ceiling);
  EXPECT_DOUBLE_EQ(peak.flops, ceiling.gflops * 1e9);
  EXPECT_EQ(peak.what,
            "the measured fp32 GEMM ceiling of " + cpu.name() + " (Device::gemm, n³ up to 4096³)");
}

}  // namespace
