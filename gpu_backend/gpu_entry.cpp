// gpu_entry.cpp — tp::make_gpu_device, the GPU backend's entry point (declared in gpu_entry.h):
// picks the GPU for this rank and builds its CudaDevice.
//
// A plain C++ file compiled by the MPI wrapper (gpu_entry.h includes <mpi.h>) with the CUDA
// include folder on the path; it calls only the CUDA runtime and CudaDevice's constructor.
// make_nccl_communicator, the other declaration of gpu_entry.h, is in nccl_communicator.cpp.
#include "gpu_entry.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda_device.h"

namespace tp {

std::unique_ptr<Device> make_gpu_device(const DeviceOptions& options) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) cudaGetLastError();  // clear it: later checks must not see it again
  TP_CHECK_INPUT(err == cudaSuccess && count > 0, "no CUDA device: ",
                 err != cudaSuccess ? cudaGetErrorString(err) : "the driver sees 0 GPUs",
                 "; use --backend cpu");
  // Ranks on one node take GPUs round-robin by node-local rank.
  const int ordinal = (options.local_rank % count + count) % count;
  return std::make_unique<CudaDevice>(ordinal, options);
}

}  // namespace tp
