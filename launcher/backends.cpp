// backends.cpp — maps the backend flags to a Device and a Communicator of this build (backends.h).
#include "backends.h"

#include "core/error.h"
#include "core/simulated_link.h"
#include "cpu_device.h"
#include "gpu_entry.h"
#include "mpi_communicator.h"

namespace tp {

void add_backend_options(Options& options) {
  options.text("backend", "cpu", "device backend", {"cpu", "gpu"});
  options.text(
      "comm", "auto",
      "communicator: auto (nccl with --backend gpu, else mpi), mpi (host-staged with a GPU: "
      "several ranks may share one), nccl",
      {"auto", "mpi", "nccl"});
  options.flag("tf32", "GPU: allow TF32 tensor cores in fp32 GEMMs");
  options.text("dtype", "fp32",
               "GEMM input precision (bf16: GPU only, fp32 accumulation and master weights)",
               {"fp32", "bf16"});
  options.text("link", "none",
               "simulate an interconnect (teaching): none, nvlink, ib, 10gbe or α_us,β_GBps "
               "(e.g. 5,12.5); each collective then takes at least the α–β ring model's time");
}

DeviceOptions device_options(const Options& options, int local_rank) {
  DeviceOptions o;
  o.backend = options.get_text("backend");
  o.local_rank = local_rank;
  o.tf32 = options.get_flag("tf32");
  o.dtype = options.get_text("dtype");
  return o;
}

std::unique_ptr<Device> make_device(const DeviceOptions& o) {
  if (o.backend == "cpu") {
    TP_CHECK_INPUT(!o.tf32, "--tf32 applies to the GPU backend; drop it or add --backend gpu");
    TP_CHECK_INPUT(o.dtype == "fp32", "--dtype ", o.dtype,
                   " needs --backend gpu (the CPU backend computes in fp32)");
    return std::make_unique<CpuDevice>();
  }
  if (o.backend == "gpu") return make_gpu_device(o);
  TP_CHECK_INPUT(false, "--backend=", o.backend, ": unknown backend; use cpu or gpu");
  return nullptr;
}

std::unique_ptr<Communicator> make_communicator(const std::string& which, const DeviceOptions& o,
                                                MPI_Comm comm, Device& device) {
  TP_CHECK_INPUT(which != "nccl" || o.backend == "gpu", "--comm nccl needs --backend gpu");
  if (o.backend == "gpu" && which != "mpi") return make_nccl_communicator(comm, device);
  return std::make_unique<MpiCommunicator>(comm, false);
}

std::unique_ptr<Communicator> with_link(const std::string& link,
                                        std::unique_ptr<Communicator> comm) {
  const std::optional<Link> parsed = parse_link(link);
  if (!parsed) return comm;
  return std::make_unique<SimulatedLink>(std::move(comm), *parsed);
}

}  // namespace tp
