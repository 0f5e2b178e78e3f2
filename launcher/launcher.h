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
/// (avx512_core_amx)"): the CPU's choice (cpu_backend/gemm_choice.h), else "native" or "f32
/// stand-ins" (Device::native_bf16). In backends.cpp.
std::string bf16_gemm_path(const Device& device);

/// How the CPU device runs an f32 GEMM ("OpenBLAS (SkylakeX kernels)", or oneDNN where OpenBLAS
/// does not know the CPU: cpu_backend/gemm_choice.h, f32_gemm); "" on another device. Whether it
/// is oneDNN in *onednn when given. In backends.cpp.
std::string f32_gemm_path(const Device& device, bool* onednn = nullptr);

/// True when the CPU has AVX-512 and the OpenBLAS kernels in use have none
/// (cpu_backend/blas.h: cpu::openblas_lacks_avx512, read once with the f32 GEMM's choice,
/// cpu::f32_gemm). In backends.cpp.
bool openblas_lacks_avx512();

// ---- MFU: the peak a rank's model FLOP/s are divided by (model/flops.h has the FLOPs) ----------
// In peak.cpp; the measurement is the device's (core/device.h: Device::measure_peak).

/// The peak per rank, and where it came from.
struct Peak {
  double flops = 0;  // per rank, FLOP/s
  std::string what;  // for the header
  // The device's ceiling (rank 0's measure_peak, its gflops broadcast; empty under --peak-tflops):
  // a remeasurable one (the CPU's cached one-thread ceiling) is rechecked by recheck_peak below.
  PeakCeiling ceiling;
  bool given =
      false;  // --peak-tflops: an MFU above 100 % warns once (a measured peak is rechecked)
};

/// --peak-tflops X, else the device's measured ceiling (Device::measure_peak, peak_flops): on the
/// CPU the one-thread sgemm ceiling (cached per machine: cpu_backend/peak_cache.h) times the
/// threads of a rank, on the GPU the measured fp32 GEMM ceiling. Rank 0 measures, every rank gets
/// its value.
Peak run_peak(Context& ctx);

/// After the run, on rank 0: a step whose model FLOP/s beat the CPU peak (MFU over 100 %) shows
/// the cached one-thread ceiling is low. It is measured once, over a second or two, so a
/// measurement taken while the machine was busy (a parallel build, other ranks) stays low for
/// every later run; seen on a 2-core Xeon, 107 GFLOP/s cached against 147 quiet, MFU 105 %.
/// Measured again now (after the run, so no step is disturbed: Device::remeasure_peak), and the
/// higher value cached.
void recheck_peak(Communicator& world, Device& device, const Peak& peak, double best_mfu);

/// A CPU with AVX-512 whose OpenBLAS runs kernels without it (OPENBLAS_CORETYPE, or an OpenBLAS
/// too old to know the CPU): a line saying so and what to set, since the GEMMs are most of a CPU
/// step (the measurements: cpu_backend/peak_probe.cpp); "" when not, or on another device. In
/// backends.cpp.
std::string blas_kernel_note(const Device& device);

}  // namespace tp
