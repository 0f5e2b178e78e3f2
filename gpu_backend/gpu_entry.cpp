// gpu_entry.cpp — tp::make_gpu_device, the GPU backend's entry point (declared in gpu_entry.h):
// picks the GPU for this rank and builds its CudaDevice; and make_gpu_device_on_stand_ins, the
// tests' reference for the native bf16 kernels.
//
// A plain C++ file compiled by the MPI wrapper (gpu_entry.h includes <mpi.h>) with the CUDA
// include folder on the path; it calls only the CUDA runtime and CudaDevice's constructor.
// make_nccl_communicator, the other declaration of gpu_entry.h, is in nccl_communicator.cpp.
#include "gpu_entry.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda_device.h"

namespace tp {

namespace {
// make_gpu_device_on_stand_ins's device: CudaDevice with the front's widening for every kernel
// but the GEMM (whose native path is the only bf16 GEMM there is).
class StandInCudaDevice : public CudaDevice {
 public:
  using CudaDevice::CudaDevice;
  bool native_bf16(Kernel kernel) const override { return kernel == Kernel::gemm; }
};

int pick_gpu(const DeviceOptions& options) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) cudaGetLastError();  // clear it: later checks must not see it again
  TP_CHECK_INPUT(err == cudaSuccess && count > 0, "no CUDA device: ",
                 err != cudaSuccess ? cudaGetErrorString(err) : "the driver sees 0 GPUs",
                 "; use --backend cpu");
  // Ranks on one node take GPUs round-robin by node-local rank.
  return (options.local_rank % count + count) % count;
}
}  // namespace

std::unique_ptr<Device> make_gpu_device_on_stand_ins(const DeviceOptions& options) {
  return std::make_unique<StandInCudaDevice>(pick_gpu(options), options);
}

std::unique_ptr<Device> make_gpu_device(const DeviceOptions& options) {
  return std::make_unique<CudaDevice>(pick_gpu(options), options);
}

}  // namespace tp
