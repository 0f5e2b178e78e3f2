// launcher.cpp — tp::run_program on MPI (see launcher.h for the contract).
#include "launcher.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "backends.h"
#include "core/error.h"
#include "node.h"

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

int run_program(int argc, char** argv, Options& options, const Program& program) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MPI_THREAD_MULTIPLE: an MpiCommunicator's progress thread tests requests while this thread
  // calls MPI (mpi_communicator.h). With less, the asynchronous calls complete in wait().
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // MPI errors become tp::Error

  int rank = 0, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  choose_omp_threads(MPI_COMM_WORLD);
  const std::vector<int> node_of_rank = node_of_each_rank(MPI_COMM_WORLD);

  add_backend_options(options);
  int rc = 0;
  try {
    options.parse(argc, argv);
    if (options.help_requested()) {
      if (rank == 0) std::fputs(options.help().c_str(), stdout);
    } else {
      const DeviceOptions dev_opts = device_options(options, local_rank);
      std::unique_ptr<Device> device = make_device(dev_opts);
      std::unique_ptr<Communicator> world =
          with_link(options.get_text("link"),
                    make_communicator(options.get_text("comm"), dev_opts, MPI_COMM_WORLD, *device));
      Context ctx{options, *device, *world, local_rank, local_size, node_of_rank};
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
