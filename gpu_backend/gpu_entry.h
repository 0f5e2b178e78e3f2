// gpu_entry.h — the GPU backend's public header: its two entry points, and all that the launcher
// (launcher/backends.cpp) and the GPU tests see of it. The build links either the real GPU backend
// (this folder's gpu_entry.cpp and nccl_communicator.cpp, when nvcc is found) or
// launcher/no_gpu.cpp, which says why there is none. No #ifdef: the choice is made at link time.
// Nothing here needs a CUDA header, so it compiles in a build without CUDA.
#pragma once

#include <mpi.h>

#include <memory>

#include "core/communicator.h"
#include "core/device.h"

namespace tp {
/// A CUDA device for the rank with node-local index `options.local_rank` (GPU local_rank modulo
/// the GPUs on the node). No usable GPU is a bad-input error "no CUDA device: <reason>".
std::unique_ptr<Device> make_gpu_device(const DeviceOptions& options);
/// The same CUDA device, but every kernel except the GEMM answers native_bf16 = false, so the
/// Device front runs it in bf16 on f32 stand-ins (core/device.h, "Dtypes"): the reference the GPU
/// tests hold the native bf16 kernels to, bit for bit (tests/gpu_backend/test_gpu.cpp). Not for training.
std::unique_ptr<Device> make_gpu_device_on_stand_ins(const DeviceOptions& options);
/// An NCCL communicator over the ranks of `comm` for tensors on `device` (a CUDA device),
/// bootstrapped through MPI. Several ranks on one GPU is a bad-input error suggesting --comm mpi.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, Device& device);
}  // namespace tp
