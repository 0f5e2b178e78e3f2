// runtime.cpp — the launcher: tp::run_program on MPI (see core/runtime.h for the contract).
#include "core/runtime.h"

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "gpu_entry.h"
#include "launch.h"
#include "mpi_communicator.h"

namespace tp {

namespace {

// When every rank reports the same bad input, they all reach this barrier quickly and exit 2
// cleanly. If some rank never arrives (the error was not seen everywhere, or another rank is
// blocked in a collective), waiting longer would hang the job: abort it instead.
bool all_ranks_agree(double timeout_s) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return false;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

[[noreturn]] void abort_job(int rank, const char* what, int code) {
  std::fprintf(stderr, "rank %d: error: %s (aborting all ranks)\n", rank, what);
  std::fflush(stderr);
  // The launcher forwards each rank's stderr asynchronously, and MPI_Abort kills every process at
  // once: without a pause the line can be lost (seen once in a loaded `make test`).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace

void node_local_rank(MPI_Comm comm, int* local_rank, int* local_size) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
}

void choose_omp_threads(int local_size) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env != nullptr && *env != '\0') return;
  omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, local_size)));
}

int run_program(int argc, char** argv, Options& options, const Program& program) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // MPI errors become tp::Error

  int rank = 0, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  choose_omp_threads(local_size);

  options.text("backend", "cpu", "device backend", {"cpu", "gpu"});
  options.text("comm", "auto", "communicator: auto (nccl with --backend gpu, else mpi), mpi (host-staged with a GPU: several ranks may share one), nccl",
               {"auto", "mpi", "nccl"});
  options.flag("tf32", "GPU: allow TF32 tensor cores in fp32 GEMMs");
  options.text("dtype", "fp32", "GEMM input precision (bf16: GPU only, fp32 accumulation and master weights)", {"fp32", "bf16"});
  int rc = 0;
  try {
    options.parse(argc, argv);
    if (options.help_requested()) {
      if (rank == 0) std::fputs(options.help().c_str(), stdout);
    } else {
      DeviceOptions dev_opts;
      dev_opts.backend = options.get_text("backend");
      dev_opts.local_rank = local_rank;
      dev_opts.tf32 = options.get_flag("tf32");
      dev_opts.dtype = options.get_text("dtype");
      std::unique_ptr<Device> device = make_device(dev_opts);
      const std::string comm = options.get_text("comm");
      TP_CHECK_INPUT(comm != "nccl" || dev_opts.backend == "gpu", "--comm nccl needs --backend gpu");
      std::unique_ptr<Communicator> world;
      if (dev_opts.backend == "gpu" && comm != "mpi") world = make_nccl_communicator(MPI_COMM_WORLD, *device);
      else world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
      Context ctx{options, *device, *world, local_rank, local_size};
      rc = program(ctx);
      device->synchronize();
    }
  } catch (const Error& e) {
    if (!e.is_bad_input() || !all_ranks_agree(10.0)) abort_job(rank, e.what(), e.exit_code());
    if (rank == 0) {
      std::fprintf(stderr, "error: %s\n", e.what());
      std::fflush(stderr);
    }
    rc = e.exit_code();
  } catch (const std::exception& e) {
    abort_job(rank, e.what(), 1);
  }
  std::fflush(stdout);
  MPI_Finalize();
  return rc;
}

}  // namespace tp
