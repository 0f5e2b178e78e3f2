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
//     "error: ...", every rank exits 2 (likewise exit 3 for a non-finite value in training, and
//     128 + the signal for a stop agreed after SIGINT/SIGTERM: enable_graceful_stop below).
//   - any other error, or bad input seen by only some ranks: the rank prints "rank r: error: ..."
//     and aborts the whole job (no rank is left blocked in a collective).
//   - otherwise every rank exits with the program's return value (which must agree across ranks).
//   - a rank that crashes or is killed is named, by itself or by its node's watchdog (watchdog.h).
//
// The launcher (this folder) is the one place that knows about MPI start-up and about which
// backends this build contains; tools/, lessons/ and tests/ include this header and nothing else of
// it (the MPI test main also uses node.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
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

/// Tells the launcher which step the program is at (any counter; -1: none), for the lines that
/// name a dead rank: "rank 1 (pid P): fatal signal SIGSEGV at step 12; the job ends" from a rank
/// that crashes, "rank 1 (pid P) ended before the job finished (killed or crashed); rank 0 was at
/// step 12" from the node's watchdog when a rank is SIGKILLed (launcher/watchdog.h).
void set_current_step(int64_t step);

/// From now on SIGINT/SIGTERM (mpirun forwards both to every rank) do not kill this rank: they set
/// a flag the program polls with agreed_stop_signal() at step boundaries. A second signal kills.
void enable_graceful_stop();

/// Collective over all ranks: the signal (SIGINT or SIGTERM) any rank has received since
/// enable_graceful_stop(), or 0. Every rank gets the same answer, so all stop at the same step.
int agreed_stop_signal();

/// Checks, before any work, that a program can write each output path: {flag, path} pairs, empty
/// paths skipped. A path can be written when its folder exists and is writable and the path is not
/// a folder or a FIFO. Collective: every rank checks (ranks may see different file systems) and the
/// ranks agree on the verdict, so a bad path on any rank makes every rank throw the same bad-input
/// error (rank 0 prints it, naming the flag, the path, the problem and the rank that saw it).
void check_output_paths(const std::vector<std::pair<std::string, std::string>>& flag_paths);

/// How `device` computes a GEMM of bf16 tensors, for a startup log (tp_train: "bf16 GEMM: oneDNN
/// (avx512_core_amx)"): the CPU's choice (cpu_backend/onednn_gemm.h), else "native" or "f32
/// stand-ins" (Device::native_bf16). In backends.cpp.
std::string bf16_gemm_path(const Device& device);

/// How the CPU device runs an f32 GEMM ("OpenBLAS (SkylakeX kernels)", or oneDNN where OpenBLAS
/// does not know the CPU: cpu_backend/onednn_gemm.h, f32_gemm); "" on another device. Whether it
/// is oneDNN in *onednn when given. In backends.cpp.
std::string f32_gemm_path(const Device& device, bool* onednn = nullptr);

/// True when the CPU has AVX-512 and the OpenBLAS kernels in use have none
/// (cpu_backend/blas.h: cpu::openblas_lacks_avx512, read once with the f32 GEMM's choice,
/// cpu::f32_gemm). In backends.cpp.
bool openblas_lacks_avx512();

}  // namespace tp
