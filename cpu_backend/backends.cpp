// backends.cpp — tp::make_device: maps `--backend` to a Device of this build.
#include "core/device.h"
#include "core/error.h"
#include "cpu_device.h"
#include "gpu_entry.h"

namespace tp {

std::unique_ptr<Device> make_device(const std::string& backend, int local_rank) {
  if (backend == "cpu") return std::make_unique<CpuDevice>();
  if (backend == "gpu") return make_gpu_device(local_rank);
  TP_CHECK_INPUT(false, "--backend=", backend, ": unknown backend; use cpu or gpu");
  return nullptr;
}

}  // namespace tp
