// test_peak_probe.cpp — the CPU's side of the peak that MFU divides by
// (cpu_backend/peak_probe.cpp) and the launcher's answer for another device (serial).
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

}  // namespace
