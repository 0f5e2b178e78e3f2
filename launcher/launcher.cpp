// launcher.cpp — tp::run_program on MPI (see launcher.h for the contract).
#include "launcher.h"

#include <mpi.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "backends.h"
#include "core/checked_communicator.h"
#include "core/error.h"
#include "core/output_file.h"
#include "flight_dumps.h"
#include "node.h"
#include "watchdog.h"

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
  silence_watchdog();  // this line says why the job ends
  std::fprintf(stderr, "rank %d: error: %s (aborting all ranks)\n", rank, what);
  std::fflush(stderr);
  // The launcher forwards each rank's stderr asynchronously, and MPI_Abort kills every process at
  // once: without a pause the line can be lost (seen once in a loaded `make test`).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

// Why `path` (given to `flag`) cannot be written on this rank, or "" when it can.
std::string output_path_problem(const std::string& flag, const std::string& path) {
  const std::string what = flag + " " + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return what + " is a folder; give a file name";
    if (S_ISFIFO(st.st_mode)) return what + " is a FIFO, not a file; give a file name";
    if (::access(path.c_str(), W_OK) != 0)
      return what + " cannot be written (" + errno_text(errno) + ")";
    return "";
  }
  if (errno != ENOENT) return what + ": " + errno_text(errno);
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0)
    return what + ": the folder " + dir + " does not exist (" + errno_text(errno) +
           "); create it first";
  if (!S_ISDIR(st.st_mode)) return what + ": " + dir + " is not a folder";
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return what + ": cannot create files in " + dir + " (" + errno_text(errno) + ")";
  return "";
}

// A launcher's count of the processes it started, from the variable it gives each one (Open MPI's
// mpirun: OMPI_COMM_WORLD_SIZE; MPICH's Hydra and other PMI launchers: PMI_SIZE), and that
// process's number; 0 and -1 when the variable is not set.
struct Launched {
  const char* variable;
  long size = 0, rank = -1;
};

Launched launched_by(const char* size_var, const char* rank_var) {
  Launched l{size_var};
  if (const char* s = std::getenv(size_var)) l.size = std::strtol(s, nullptr, 10);
  if (const char* r = std::getenv(rank_var)) l.rank = std::strtol(r, nullptr, 10);
  return l;
}

// A program built with one MPI and started by another's mpirun (Debian's mpirun moves to Open MPI
// when it is installed beside MPICH) initialises each process alone: a world of one rank, however
// many the launcher started, and every one of them would go on as rank 0 of 1 (a lesson printing
// "runs on 3 ranks, not 1" three times). Found here and said once, naming both MPIs and the fix;
// "" when the world is as large as the launcher says, or no launcher says.
std::string foreign_launcher_problem(int world_size, int* launcher_rank) {
  if (world_size != 1) return "";
  for (const Launched& l : {launched_by("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
                            launched_by("PMI_SIZE", "PMI_RANK")}) {
    if (l.size <= 1) continue;
    *launcher_rank = static_cast<int>(l.rank);
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string mine(version, static_cast<size_t>(std::max(0, len)));
    mine = mine.substr(0, mine.find_first_of("\n,"));  // "MPICH Version:\t4.0.2", "Open MPI v4.1.4"
    for (size_t at; (at = mine.find(" Version:")) != std::string::npos;) mine.erase(at, 9);
    std::replace(mine.begin(), mine.end(), '\t', ' ');
    const bool open_mpi = std::string(l.variable) == "OMPI_COMM_WORLD_SIZE";
    return "the launcher started " + std::to_string(l.size) + " processes (" + l.variable + "=" +
           std::to_string(l.size) + ": " +
           (open_mpi ? "Open MPI's mpirun" : "a PMI launcher such as MPICH's") +
           "), but this program is built with " + mine +
           " and each process sees a world of 1 rank: start it with the mpirun of the MPI it was "
           "built with (Debian: " +
           (open_mpi ? "mpirun.mpich" : "mpirun.openmpi") +
           "), or rebuild it with the other (docs/training.md, \"Launching\")";
  }
  return "";
}

}  // namespace

void check_output_paths(const std::vector<std::pair<std::string, std::string>>& flag_paths) {
  std::string mine;
  for (const auto& [flag, path] : flag_paths)
    if (mine.empty() && !path.empty()) mine = output_path_problem(flag, path);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // The lowest rank that found a problem tells every rank what it was: all ranks throw together.
  int first_bad = mine.empty() ? size : rank;
  TP_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) == MPI_SUCCESS,
      "check_output_paths: MPI_Allreduce failed");
  if (first_bad == size) return;
  char text[1024] = {};
  if (rank == first_bad) std::strncpy(text, mine.c_str(), sizeof text - 1);
  TP_CHECK(MPI_Bcast(text, sizeof text, MPI_CHAR, first_bad, MPI_COMM_WORLD) == MPI_SUCCESS,
           "check_output_paths: MPI_Bcast failed");
  TP_CHECK_INPUT(false, text,
                 first_bad == 0 ? "" : " (seen on rank " + std::to_string(first_bad) + ")");
}

int run_program(int argc, char** argv, Options& options, const Program& program) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MPI_THREAD_MULTIPLE: an MpiCommunicator's progress thread tests requests while this thread
  // calls MPI (mpi_communicator.h). With less, the asynchronous calls complete in wait().
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // MPI errors become tp::Error
  int world_size = 1, launcher_rank = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (const std::string problem = foreign_launcher_problem(world_size, &launcher_rank);
      !problem.empty()) {
    if (launcher_rank <= 0) std::fprintf(stderr, "error: %s\n", problem.c_str());
    MPI_Finalize();
    return 2;
  }

  int rank = 0, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  start_watchdog(MPI_COMM_WORLD);
  choose_omp_threads(MPI_COMM_WORLD);
  const std::vector<int> node_of_rank = node_of_each_rank(MPI_COMM_WORLD);

  add_backend_options(options);
  options
      .real("stall-timeout", 60,
            "seconds without progress on any rank (one waits in a collective, nobody moves) "
            "before the job ends naming the stalled rank; unset: the larger of 60 and 10 x the "
            "slowest step so far; 0: no check")
      .min(1)
      .zero_means_off();
  options.flag("check-collectives",
               "before each collective the ranks agree on its fingerprint (op, size, dtype, root, "
               "label); a mismatch ends the job with one line naming it, exit 2 (also "
               "TP_CHECK_COLLECTIVES=1)");
  add_flight_options(options);
  int rc = 0;
  try {
    options.parse(argc, argv);
    set_stall_timeout(options.get_real("stall-timeout"), !options.given("stall-timeout"));
    if (options.help_requested()) {
      if (rank == 0) std::fputs(options.help().c_str(), stdout);
    } else {
      start_flight_recorder(MPI_COMM_WORLD, options);
      const DeviceOptions dev_opts = device_options(options, local_rank);
      std::unique_ptr<Device> device = make_device(dev_opts);
      std::unique_ptr<Communicator> world =
          make_communicator(options.get_text("comm"), dev_opts, MPI_COMM_WORLD, *device);
      // Checked under the simulated link, so the checks are not charged the link's time.
      if (options.get_flag("check-collectives") || check_collectives_from_environment())
        world = std::make_unique<CheckedCommunicator>(std::move(world), *device);
      world = with_link(options.get_text("link"), std::move(world));
      std::vector<int> world_ranks(static_cast<size_t>(world_size));
      for (int r = 0; r < world_size; ++r) world_ranks[static_cast<size_t>(r)] = r;
      world->set_world_ranks(world_ranks);  // the flight recorder's name for the world
      Context ctx{options, *device, *world, local_rank, local_size, node_of_rank};
      rc = program(ctx);
      device->synchronize();
    }
    finish_watchdog(MPI_COMM_WORLD, true);
  } catch (const Error& e) {
    if (!e.on_every_rank() || !all_ranks_agree(10.0)) abort_job(rank, e.what(), e.exit_code());
    finish_watchdog(MPI_COMM_WORLD, false);
    if (rank == 0) {
      std::fprintf(stderr, "error: %s\n", e.what());
      std::fflush(stderr);
    }
    rc = e.exit_code();
  } catch (const std::exception& e) {
    abort_job(rank, e.what(), 1);
  }
  std::fflush(stdout);
  finish_flight_recorder();
  MPI_Finalize();
  return rc;
}

}  // namespace tp
