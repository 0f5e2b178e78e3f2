// no_gpu.cpp — the GPU entry points (gpu_backend/gpu_entry.h) of a build without a GPU backend:
// each says why there is none.
#include "core/error.h"
#include "gpu_entry.h"

namespace tp {

std::unique_ptr<Device> make_gpu_device(const DeviceOptions&) {
  TP_CHECK_INPUT(
      false,
      "--backend gpu: this build has no GPU backend (nvcc was not found when it was built, "
      "or NO_CUDA=1); rebuild on a machine with CUDA, or use --backend cpu");
  return nullptr;
}

std::unique_ptr<Device> make_gpu_device_on_stand_ins(const DeviceOptions& options) {
  return make_gpu_device(options);  // says why there is none
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, Device&) {
  TP_CHECK_INPUT(false, "--comm nccl: this build has no GPU backend; use --comm mpi");
  return nullptr;
}

}  // namespace tp
