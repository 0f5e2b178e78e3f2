// step_report.h — what tp_train prints about its steps: the progress line, the --log-json line,
// the held-out loss line, and the header's MFU line (the FLOPs a token costs and the peak the
// model FLOP/s are divided by; model/flops.h counts them).
//
// Each line is a string built from one step's numbers (StepNumbers), so the format is tested
// without a run (tests/train/test_step_report.cpp) and tp_train only prints it on rank 0.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "core/format.h"  // fmt_g
#include "model/config.h"
#include "model/data.h"
#include "model/flops.h"
#include "model/gpt.h"

namespace tp {

/// One step's numbers, as the progress line and --log-json print them.
struct StepNumbers {
  int64_t step;  // 1-based
  float loss;
  double norm;
  float lr;
  double tok_s, comm, exposed, secs;
  int t, dp;
  double flops_rank = 0, mfu = 0, hfu = -1;  // model FLOP/s per rank, MFU, HFU (-1: = MFU)
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // --eval-every's steps only
};

/// The step's FLOP/s per rank, MFU and HFU (model/flops.h) into `n`: `tokens` of the step over
/// `ranks` ranks, against `peak` FLOP/s per rank (0: MFU 0).
void set_utilisation(StepNumbers& n, const TokenFlops& f, double tokens, int ranks, double peak);

/// "step     5 | loss ... | grad norm ... | lr ... | N tok/s | exposed comm X% | G GFLOP/s/rank,
/// MFU M%" (and ", HFU H%" with --recompute); " (simulated link)" after the exposed share when the
/// TP communicator is a simulated link.
std::string progress_line(const StepNumbers& n, bool simulated);

/// With --experts, after the progress line: "  moe: tokens per expert (block l, of N·k) c_0 c_1 …
/// | balancing loss a, z-loss z (all MoE blocks) | dropped d" — the first MoE block's counts over
/// the global batch (the router statistics after their reduction).
std::string moe_line(const Gpt& model);

/// One JSON object (no newline) of the step for --log-json: step, loss, grad_norm, lr,
/// tokens_per_s, comm_s, exposed_s, compute_s, t, dp, flops_per_rank, mfu, hfu, and val_loss on an
/// evaluation step.
std::string json_line(const StepNumbers& n);

/// The line an evaluation step prints: the held-out loss beside the step's training loss and the
/// data's floor.
std::string validation_line(const StepNumbers& n, const TokenSource& source, int64_t batches,
                            int64_t batch);

/// The header's MFU line: the formula, N, and the peak (`peak_flops` per rank, `peak_what` where
/// it came from), for the global model over `ranks` ranks.
std::string flops_line(const GptConfig& cfg, int64_t seq, int ranks, double peak_flops,
                       const std::string& peak_what);

}  // namespace tp
