// run_log.cpp — what a training run says about itself besides the step lines (run_log.h).
#include "train/run_log.h"

#include <cmath>
#include <cstdio>
#include <vector>
#include "core/log.h"
#include "model/pipeline_plan.h"

namespace tp {

void log_run(Communicator& world, const Device& device, const Plan& plan, ProcessGrid& grid,
             const Gpt& model, const TokenSource& source, float lr, int64_t step, int64_t steps,
             const std::string& bf16_gemm) {
  Communicator& tp = grid.tp();
  const GptConfig& cfg = plan.cfg;
  const int64_t seq = plan.seq, batch = plan.batch;
  const int dp = plan.dp;
  int64_t n_params = 0;
  for (const Param& p : model.params())
    n_params += p.ckpt_rows > 0 ? p.ckpt_rows * p.cols() : p.shape.numel();
  log0(world, "tp_train: t = ", tp.size(), " (", world.name(), ", ", device.name(), ")");
  if (dp > 1 || grid.pp_size() > 1 || grid.cp_size() > 1) log0(world, "grid: ", grid.describe());
  log0(world, "model: ", cfg.str(), ", ", n_params, " parameters");
  if (cfg.precision == Precision::Bf16) log0(world, "bf16 GEMM: ", bf16_gemm);
  log0(world, "data: ", source.describe());
  if (model.padded_vocab() != cfg.vocab)
    log0(world, "vocabulary ", cfg.vocab, " padded to ", model.padded_vocab(), " (",
         model.padded_vocab() / tp.size(),
         " rows per rank); the padding is never looked up, never wins the softmax, and is not "
         "saved");
  if (seq < cfg.seq)
    log0(world, "sequences of ", seq, " tokens; the position table holds ", cfg.seq);
  log0(world, "batch ", batch, " x seq ", seq, " = ", batch * seq, " tokens/step",
       dp > 1 ? " (" + std::to_string(batch / dp) +
                    " sequences on each of dp = " + std::to_string(dp) + " replicas)"
              : std::string(),
       ", lr ", lr, ", steps ", step, " -> ", step + steps);
}

void log_peak_memory(Device& device, Communicator& world) {
  Tensor mine = Tensor::from_host(device, Shape{2},
                                  {static_cast<float>(device.memory().peak / 1048576.0),
                                   static_cast<float>(device.memory().largest / 1048576.0)});
  Tensor all(device, Shape{world.size(), 2});
  world.all_gather(mine, all);
  const std::vector<float> v = all.to_host();
  std::string line;
  char buf[96];
  for (int r = 0; r < world.size(); ++r) {
    std::snprintf(buf, sizeof buf, "%srank %d %.2f MiB (largest tensor %.2f MiB)", r ? ", " : "", r,
                  v[2 * r], v[2 * r + 1]);
    line += buf;
  }
  log0(world, "peak device memory: ", line);
}

void log_pipeline(Device& device, Communicator& world, ProcessGrid& grid, const Plan& plan,
                  const PipelineRecord& record) {
  const int n = grid.pp_size(), m = plan.step_opts.micro_batches;
  const Schedule sched = plan.step_opts.schedule;
  // Per rank: stage, in flight, bubble, peak bytes, then its ops as ±(micro + 1) (+: forward).
  const int64_t width = 4 + 2 * static_cast<int64_t>(m);
  std::vector<float> row = {
      static_cast<float>(grid.pp_rank()), static_cast<float>(record.peak_in_flight),
      static_cast<float>(record.bubble()), static_cast<float>(record.peak_activation_bytes)};
  for (const PipelineRecord::Span& sp : record.ops)
    row.push_back(static_cast<float>(sp.op.forward ? sp.op.micro + 1 : -(sp.op.micro + 1)));
  row.resize(static_cast<size_t>(width), 0.0f);
  Tensor all(device, Shape{world.size(), width});
  world.all_gather(Tensor::from_host(device, Shape{width}, row), all);
  const std::vector<float> v = all.to_host();
  log0(world, "pipeline: --schedule ", schedule_name(sched), ", ", n, " stages, m = ", m,
       " micro-batches (stage s of TP rank 0, DP replica 0):");
  double bubble = 0;
  for (int s = 0; s < n; ++s) {
    const float* r = &v[static_cast<size_t>(grid.world_rank(0, 0, s) * width)];
    std::string ops;
    for (int64_t k = 4; k < width; ++k)
      ops += (k > 4 ? " " : "") + std::string(r[k] > 0 ? "F" : "B") +
             std::to_string(static_cast<int>(std::fabs(r[k])) - 1);
    char line[160];
    std::snprintf(line, sizeof line,
                  "in flight %d (formula %d), activations kept %.0f bytes, idle %.1f %%",
                  static_cast<int>(r[1]), in_flight_formula(sched, n, s, m), r[3], 100.0 * r[2]);
    log0(world, "  stage ", s, ": ", ops, " | ", line);
    bubble += r[2] / n;
  }
  char line[160];
  std::snprintf(line, sizeof line,
                "pipeline bubble: %.1f %% measured (mean idle share of the stages) vs (N - 1)/(m + "
                "N - 1) = %.1f %%",
                100.0 * bubble, 100.0 * bubble_formula(n, m));
  log0(world, line);
}

}  // namespace tp
