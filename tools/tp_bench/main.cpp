// tp_bench — measures a backend, and checks what it measures. This is its driver: the options,
// the header lines and --suite; each suite is a file of this folder that registers itself
// (bench.h), as nccl-tests keeps one file per collective on a shared driver.
//
//   mpirun -np 2 build/bin/tp_bench                        (make bench: the CPU suites 1 and 2)
//   build/bin/tp_bench --backend gpu [--tf32 | --dtype bf16] --suite gemm|block|memory|all
//                                                          (scripts/gpu-check.sh)
//
// --suite picks what runs: auto (the default: gemm + collectives on the CPU, all on the GPU), gemm,
// collectives, block, memory, all, none (print the device and stop). Every timing is bracketed by
// Device::synchronize(), so GPU kernels are timed to completion, not to their launch. Each
// measurement is also printed as one machine-readable line
//   RESULT <suite> <name> <value> <unit> <reference value> <ratio>
// which scripts/gpu-check.sh and scripts/bench.py collect into their tables. On the CPU two lines
// first name the OpenBLAS kernels in use and its build (scripts/bench.py's header):
//   INFO blas_core <openblas_get_corename()>        e.g. Haswell, SkylakeX (OPENBLAS_CORETYPE)
//   INFO blas_config <openblas_get_config()>
//   INFO f32_gemm <f32_gemm_path()>                 OpenBLAS (SkylakeX kernels), oneDNN (...)
//
// The suites, in the order a run prints them (each file says what it measures and how):
//   gemm.cpp         1. GEMM on the CPU: Device::gemm against cblas_sgemm called directly, and
//                       the same GEMMs in bf16 (--suite gemm)
//   threads.cpp         the cores each rank's GEMMs keep busy (--suite threads)
//   collectives.cpp  2. collectives, nccl-tests style, against the bare MPI call
//   gemm_gpu.cpp     3. GEMM on the GPU against a measured ceiling (--suite gemm, --backend gpu)
//   block.cpp        4. one transformer block forward + backward (--suite block)
//   memory.cpp       5. memory-bound kernels against a device-to-device copy (--suite memory)
//   attention.cpp    6. causal attention forward and backward, s = 128 … 2048 (--suite attention)
//   alltoall.cpp     7. all_to_all_v against a bare MPI_Alltoallv, 1 … 16 MiB (--suite alltoall
//                       only: not in auto or all)
#include <string>

#include "bench.h"
#include "core/log.h"
#include "core/options.h"
#include "cpu_direct.h"
#include "launcher.h"

using namespace tp;

int main(int argc, char** argv) {
  Options opts(
      "tp_bench",
      "Measures a backend: GEMM (CPU: Device::gemm vs direct cblas_sgemm; GPU: layer shapes vs a "
      "measured ceiling), "
      "collectives, one transformer block, memory-bound kernels.");
  opts.text("suite", "auto", "what to measure: auto (cpu: gemm + collectives; gpu: all)",
            {"auto", "gemm", "threads", "collectives", "block", "memory", "attention", "alltoall",
             "all", "none"});
  // Bounds past any model measured here (h = 65536 is 4x the largest GPT), before a product wraps.
  opts.integer("hidden", 4096, "h for the GPU GEMM shapes, the block and the memory kernels")
      .min(1)
      .max(1 << 16);
  opts.integer("tokens", 8192, "rows of the GPU GEMM shapes and the memory kernels (s·b = 2048·4)")
      .min(1)
      .max(1 << 20);
  opts.integer("seq", 2048, "block: sequence length").min(1).max(1 << 20);
  opts.integer("batch", 1, "block: batch").min(1).max(1 << 16);
  opts.integer("heads", 32, "block: attention heads").min(1).max(1 << 16);
  opts.text("precision", "fp32",
            "block: fp32, or bf16 mixed precision (tp_train's --precision: bf16 weight copies, "
            "activations and gradients of activations)",
            {"fp32", "bf16"});
  return run_program(argc, argv, opts, [](Context& ctx) {
    log0(ctx.world, "tp_bench on ", ctx.world.size(), " ranks, ", ctx.device.name(), ", ",
         ctx.world.name());
    const bool gpu = ctx.options.get_text("backend") == "gpu";
    // The kernels OpenBLAS picked for this CPU (or OPENBLAS_CORETYPE forced): they decide the
    // CPU GEMMs' speed and their last bits.
    if (!gpu) {
      log0(ctx.world, "INFO blas_core ", cpu::openblas_core());
      log0(ctx.world, "INFO blas_config ", cpu::openblas_config());
      log0(ctx.world, "INFO f32_gemm ", f32_gemm_path(ctx.device));
    }
    std::string suite = ctx.options.get_text("suite");
    if (suite == "auto") suite = gpu ? "all" : "cpu";
    for (const bench::Suite& s : bench::suites())
      if (s.selected(suite, gpu)) s.run(ctx);
    return 0;
  });
}
