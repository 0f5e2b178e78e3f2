// backends.cpp — maps the backend flags to a Device and a Communicator of this build (backends.h)
// through one registry (name → factory): the tables kDeviceBackends and kCommBackends below.
#include "backends.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "cpu_device.h"
#include "gpu_entry.h"
#include "launcher.h"
#include "mpi_communicator.h"
#include "observe/simulated_link.h"

namespace tp {

namespace {

std::unique_ptr<Device> make_cpu_device(const DeviceOptions& o) {
  TP_CHECK_INPUT(!o.tf32, "--tf32 applies to the GPU backend; drop it or add --backend gpu");
  TP_CHECK_INPUT(o.dtype == "fp32", "--dtype ", o.dtype,
                 " needs --backend gpu (the CPU backend computes in fp32)");
  return std::make_unique<CpuDevice>();
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, Device&) {
  return std::make_unique<MpiCommunicator>(comm, false);
}

// ---- the registry: the backends this build links -------------------------------------------
// Adding a backend is adding its files (and its Makefile lines) and one entry here.

struct DeviceBackend {
  const char* name;          // the --backend value
  const char* default_comm;  // what --comm auto picks with it
  std::unique_ptr<Device> (*make)(const DeviceOptions&);
};

struct CommBackend {
  const char* name;          // the --comm value
  const char* needs_device;  // the --backend its tensors must live on, or null: any
  std::unique_ptr<Communicator> (*make)(MPI_Comm, Device&);
};

const DeviceBackend kDeviceBackends[] = {
    {"cpu", "mpi", make_cpu_device},   // cpu_backend/: OpenMP + OpenBLAS
    {"gpu", "nccl", make_gpu_device},  // gpu_backend/ (or launcher/no_gpu.cpp): CUDA + cuBLAS
};

const CommBackend kCommBackends[] = {
    {"mpi", nullptr, make_mpi_communicator},  // mpi/: host-staged for GPU tensors
    {"nccl", "gpu", make_nccl_communicator},  // gpu_backend/
};

template <typename Entry, size_t N>
std::vector<std::string> names_of(const Entry (&entries)[N]) {
  std::vector<std::string> out;
  for (const Entry& e : entries) out.emplace_back(e.name);
  return out;
}

template <typename Entry, size_t N>
const Entry* find(const Entry (&entries)[N], const std::string& name) {
  for (const Entry& e : entries)
    if (name == e.name) return &e;
  return nullptr;
}

// "cpu or gpu", "auto, mpi or nccl"
std::string one_of(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

}  // namespace

void add_backend_options(Options& options) {
  options.text("backend", "cpu", "device backend", names_of(kDeviceBackends));
  std::vector<std::string> comms = names_of(kCommBackends);
  comms.insert(comms.begin(), "auto");
  options.text(
      "comm", "auto",
      "communicator: auto (nccl with --backend gpu, else mpi), mpi (host-staged with a GPU: "
      "several ranks may share one), nccl",
      comms);
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
  const DeviceBackend* b = find(kDeviceBackends, o.backend);
  TP_CHECK_INPUT(b != nullptr, "--backend=", o.backend, ": unknown backend; use ",
                 one_of(names_of(kDeviceBackends)));
  return b->make(o);
}

std::unique_ptr<Communicator> make_communicator(const std::string& which, const DeviceOptions& o,
                                                MPI_Comm comm, Device& device) {
  const DeviceBackend* dev = find(kDeviceBackends, o.backend);
  TP_CHECK_INPUT(dev != nullptr, "--backend=", o.backend, ": unknown backend; use ",
                 one_of(names_of(kDeviceBackends)));
  const CommBackend* c = find(kCommBackends, which == "auto" ? dev->default_comm : which);
  std::vector<std::string> comms = names_of(kCommBackends);
  comms.insert(comms.begin(), "auto");
  TP_CHECK_INPUT(c != nullptr, "--comm=", which, ": unknown communicator; use ", one_of(comms));
  TP_CHECK_INPUT(c->needs_device == nullptr || o.backend == c->needs_device, "--comm ", c->name,
                 " needs --backend ", c->needs_device);
  return c->make(comm, device);
}

std::unique_ptr<Communicator> with_link(const std::string& link,
                                        std::unique_ptr<Communicator> comm) {
  const std::optional<Link> parsed = parse_link(link);
  if (!parsed) return comm;
  return std::make_unique<SimulatedLink>(std::move(comm), *parsed);
}

std::string bf16_gemm_path(const Device& device) {
  if (const auto* cpu = dynamic_cast<const CpuDevice*>(&device)) return cpu->bf16_gemm_note();
  return device.native_bf16(Kernel::gemm) ? "native (" + device.backend() + ")" : "f32 stand-ins";
}

std::string f32_gemm_path(const Device& device, bool* onednn) {
  const bool cpu = dynamic_cast<const CpuDevice*>(&device) != nullptr;
  if (onednn != nullptr) *onednn = cpu && cpu::f32_gemm().onednn;
  return cpu ? cpu::f32_gemm().note : "";
}

bool openblas_lacks_avx512() { return cpu::f32_gemm().openblas_lacks_avx512; }

std::string blas_kernel_note(const Device& device) {
  const auto* cpu = dynamic_cast<const CpuDevice*>(&device);
  return cpu ? cpu->blas_kernel_note() : "";
}

}  // namespace tp
