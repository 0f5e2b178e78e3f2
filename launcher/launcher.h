// launcher.h — how a program starts: options, the world communicator, the device, and error exits.
//
//   int main(int argc, char** argv) {
//     tp::Options opts("lesson_02_column_parallel", "The t = 3 worked example.");
//     opts.flag("step", "pause for Enter between steps");
//     return tp::run_program(argc, argv, opts, [](tp::Context& ctx) { ...; return 0; });
//   }
//
// run_program starts the process group (MPI), adds and parses the backend flags (--backend, --comm,
// --tf32, --dtype: launcher/backends.h), picks the number of OpenMP threads (launcher/node.h),
// creates the device and the world communicator, runs the program and turns errors into exits:
//   - --help: rank 0 prints the help, every rank exits 0.
//   - a bad-input tp::Error (TP_CHECK_INPUT) raised on every rank: rank 0 prints one line
//     "error: ...", every rank exits 2.
//   - any other error, or bad input seen by only some ranks: the rank prints "rank r: error: ..."
//     and aborts the whole job (no rank is left blocked in a collective).
//   - otherwise every rank exits with the program's return value (which must agree across ranks).
//
// The launcher (this folder) is the one place that knows about MPI start-up and about which
// backends this build contains; tools/, lessons/ and tests/ include this header and nothing else of
// it (the MPI test main also uses node.h).
#pragma once

#include <functional>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/options.h"

namespace tp {

/// What a program gets from run_program.
struct Context {
  Options& options;     ///< parsed
  Device& device;       ///< this rank's device (from --backend)
  Communicator& world;  ///< all ranks of the job
  int local_rank;       ///< rank among the ranks on this node
  int local_size;       ///< ranks on this node
  /// The node of every world rank (launcher/node.h: node_of_each_rank), for ProcessGrid's check
  /// that a tensor-parallel group stays on one node.
  std::vector<int> node_of_rank;
};

using Program = std::function<int(Context&)>;

/// Runs `program` on every rank; returns the process exit code (see above).
int run_program(int argc, char** argv, Options& options, const Program& program);

}  // namespace tp
