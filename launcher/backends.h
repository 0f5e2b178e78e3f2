// backends.h — the backend flags and what they create: a Device for --backend, the world
// Communicator for --comm. The only place that names the backends this build links: a registry
// (name → factory) in backends.cpp, one entry per backend, from which the flags' choices, the
// --comm auto rule and the error messages come.
//
//   --backend cpu|gpu    CpuDevice (cpu_backend/) | CudaDevice (gpu_backend/, or the no-GPU stub)
//   --comm auto|mpi|nccl auto = nccl with --backend gpu, else mpi; mpi = MpiCommunicator (mpi/),
//                        host-staged for a GPU; nccl = NcclCommunicator (gpu_backend/)
//   --tf32, --dtype      GPU GEMM precision (DeviceOptions)
//   --link none|nvlink|ib|10gbe|α_us,β_GBps
//                        none (the default) = the communicator itself; otherwise a SimulatedLink
//                        over it (lib/observe/simulated_link.h, a teaching tool): every collective
//                        takes at least the α–β ring model's time on that interconnect
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "core/communicator.h"
#include "core/device.h"
#include "core/options.h"

namespace tp {

/// Declares --backend, --comm, --tf32, --dtype and --link on `options`.
void add_backend_options(Options& options);

/// The device options from parsed `options` for the rank with node-local index `local_rank`.
DeviceOptions device_options(const Options& options, int local_rank);

/// Creates the device named by `--backend`; an unknown backend, a missing GPU backend or an option
/// the backend lacks is a bad-input tp::Error.
std::unique_ptr<Device> make_device(const DeviceOptions& options);

/// The communicator over `comm` named by `--comm` (`which`) for tensors on `device`.
std::unique_ptr<Communicator> make_communicator(const std::string& which,
                                                const DeviceOptions& options, MPI_Comm comm,
                                                Device& device);

/// `comm` as `--link` (`link`) says: itself for "none", else a SimulatedLink over it. A bad value
/// is a bad-input tp::Error naming the accepted forms.
std::unique_ptr<Communicator> with_link(const std::string& link,
                                        std::unique_ptr<Communicator> comm);

}  // namespace tp
