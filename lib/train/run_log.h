// run_log.h — what a training run says about itself besides the step lines: the header (the grid,
// the model, the data, the batch and the steps), the pipeline's schedule and bubble with --pp, and
// every rank's peak device memory at the end.
#pragma once

#include <cstdint>
#include <string>
#include "core/communicator.h"
#include "core/device.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/train.h"
#include "parallel/process_grid.h"
#include "train/run_plan.h"

namespace tp {

/// What this run is: the grid, the model, the data, the batch and the steps; `bf16_gemm`: how the
/// device computes a bf16 GEMM (launcher.h's bf16_gemm_path), printed with --precision bf16.
void log_run(Communicator& world, const Device& device, const Plan& plan, ProcessGrid& grid,
             const Gpt& model, const TokenSource& source, float lr, int64_t step, int64_t steps,
             const std::string& bf16_gemm);

/// Peak device memory of every rank, in MiB (gathered for the report, after training).
void log_peak_memory(Device& device, Communicator& world);

/// --pp: each stage's schedule as it ran, its activations in flight against the formula, and the
/// measured bubble against (N − 1)/(m + N − 1) (rank 0 prints what every stage's TP rank 0 sent).
void log_pipeline(Device& device, Communicator& world, ProcessGrid& grid, const Plan& plan,
                  const PipelineRecord& record);

}  // namespace tp
