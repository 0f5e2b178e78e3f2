// bench.h — what tp_bench's suites share (tools/tp_bench/, one file per suite, as nccl-tests has one
// per collective): the registry that main.cpp runs them from, the timers, the RESULT line, and the
// GEMM cases with their correctness sample (the CPU and the GPU GEMM suites).
//
// A suite file registers itself with one line at namespace scope,
//   const bool registered = register_suite({order, selected, run});
// and main.cpp (the driver: options, the header lines, --suite) runs every suite that --suite
// selects, in `order`: the order of the tables in the output, which scripts/bench.py and
// scripts/gpu-check.sh read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "launcher.h"

namespace tp::bench {

// ---- the registry ---------------------------------------------------------------------------------

/// One suite: where its table goes, when a run includes it, and what it measures.
struct Suite {
  int order;  ///< its place in a run: gemm 1 (CPU) or 2 (GPU), threads 3, memory 4, block 5,
              ///< collectives 6
  /// Whether --suite `suite` includes it on this backend (`gpu`); "auto" has been resolved to "cpu"
  /// on the CPU and "all" on the GPU.
  bool (*selected)(const std::string& suite, bool gpu);
  void (*run)(Context& ctx);
};

/// Adds a suite to the registry (from a static initializer of the suite's file); returns true.
bool register_suite(const Suite& suite);

/// The registered suites, in `order`.
std::vector<Suite> suites();

// ---- timing and output ----------------------------------------------------------------------------

/// Seconds per call: the best of `reps` timed runs (after one warm-up), which is the least noisy
/// estimate on a shared machine.
double best_time(int reps, const std::function<void()>& f);

/// Seconds per call of a device operation: `f` is run `inner` times between two synchronisations
/// (enough calls that one sample lasts ≥ 20 ms, so launch and synchronisation costs vanish), best
/// of `reps` samples after a warm-up.
double device_time(Device& dev, int reps, const std::function<void()>& f);

/// Median seconds per call of `f` and of `g` over `samples` samples of `inner` calls each, after a
/// warm-up; their samples alternate, so a slower stretch of a shared machine hits both alike and
/// the ratio of the medians stays fair. inner = 0: chosen so that one sample lasts ≥ 10 ms — only
/// for local work: collectives must pass the same `inner` on every rank.
std::pair<double, double> paired_median(const std::function<void()>& f,
                                        const std::function<void()>& g, int samples = 15,
                                        int inner = 0);

/// Prints (rank 0) the machine-readable line `RESULT suite name value unit reference ratio`
/// (scripts/bench.py parses it): the suite and row names, the value and its unit, the reference's
/// value on the same machine, and value / reference.
void result(Context& ctx, const std::string& suite, const std::string& name, double value,
            const char* unit, double ref, double ratio);

/// "fp32", "tf32" or "bf16": what the device's GEMM computes with (from --tf32 / --dtype, or
/// --precision bf16: bf16 tensors).
std::string precision(const Context& ctx);

// ---- GEMM cases -----------------------------------------------------------------------------------

/// One GEMM: C (m × n) = op(A) op(B), op(A) m × k, op(B) k × n; ta / tb: A or B stored transposed.
struct GemmCase {
  std::string name;  ///< CPU: "<model>.<layer>.<fwd|dgrad|wgrad>"; GPU: "<layer>.<fwd|dgrad|wgrad>"
  bool ta, tb;
  int64_t m, n, k;
};

/// A and B of a GEMM case, uniform in [-1, 1), and room for C.
/// A and B in dtype `ab` (bf16 under --precision bf16: what the model's GEMMs read), C in f32.
struct GemmOperands {
  Tensor a, b, c;
  GemmOperands(Device& dev, const GemmCase& g, Dtype ab = Dtype::f32);
};

/// #elements among `samples` sampled (i, j) whose value is off the double-precision dot product by
/// more than tol · Σ_p |a_ip b_pj| (the rounding scale of a k-term sum at the inputs' precision:
/// it does not depend on the order the kernels sum in, so any OpenBLAS or cuBLAS kernel passes).
int sampled_wrong(const GemmCase& g, const Tensor& a, const Tensor& b, const Tensor& c, double tol,
                  int samples);

}  // namespace tp::bench
