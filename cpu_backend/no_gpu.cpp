// no_gpu.cpp — linked when this build has no GPU backend.
#include "core/error.h"
#include "gpu_entry.h"

namespace tp {

std::unique_ptr<Device> make_gpu_device(int) {
  TP_CHECK_INPUT(false,
                 "--backend gpu: this build has no GPU backend (it is not written yet, and "
                 "will need nvcc at build time); use --backend cpu");
  return nullptr;
}

}  // namespace tp
