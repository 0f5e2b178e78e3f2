// backends.cpp — tp::make_device: maps `--backend` to a Device of this build.
#include "core/device.h"
#include "core/error.h"
#include "cpu_device.h"
#include "gpu_entry.h"

namespace tp {

std::unique_ptr<Device> make_device(const DeviceOptions& o) {
  if (o.backend == "cpu") {
    TP_CHECK_INPUT(!o.tf32, "--tf32 applies to the GPU backend; drop it or add --backend gpu");
    TP_CHECK_INPUT(o.dtype == "fp32", "--dtype ", o.dtype, " needs --backend gpu (the CPU backend computes in fp32)");
    return std::make_unique<CpuDevice>();
  }
  if (o.backend == "gpu") return make_gpu_device(o);
  TP_CHECK_INPUT(false, "--backend=", o.backend, ": unknown backend; use cpu or gpu");
  return nullptr;
}

}  // namespace tp
