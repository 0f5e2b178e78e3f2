// train_runs.h — whole training runs at one t on a sub-communicator of the world, as lessons 13
// and 13b run them: ranks 0 … t − 1 train a fresh model from the same weights on the same batches
// while the others wait without spinning (quiet_barrier), and each rank keeps what it saw: the
// losses, each step's time, its CPU time, the last step's collectives and the memory it held.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/comm_ledger.h"
#include "core/communicator.h"
#include "core/device.h"
#include "core/options.h"
#include "model/config.h"

namespace tp::lesson {

/// CPU seconds this process has used, every thread (MPI's progress thread included).
double cpu_seconds();

/// One training run at one t, as this rank saw it.
struct Run {
  int t = 1;
  bool sp = false;
  bool member = false;           // this rank trained (rank < t)
  std::vector<double> loss;      // per step
  std::vector<double> step_s;    // wall seconds per step
  double wall = 0;               // all steps, seconds
  double cpu = 0;                // CPU seconds this rank used meanwhile (all its threads)
  int64_t local_params = 0;      // parameters this rank holds
  int64_t states = 0;            // their values, gradients and two AdamW moments: 16 B each
  int64_t activations = 0;       // kept for backward by one forward (MemoryLedger)
  int64_t block_formula_ok = 0;  // block 0's activations = block_activation_bytes()
  int64_t peak = 0;              // the device's peak during the run, above what was in use before
  double wire_per_step = 0;      // bytes sent per rank in one step (ring model, CommLedger)
  std::map<std::string, int> ops_per_step;  // collectives of one step, by op
  std::vector<CommRecord> step_records;     // the last step's collectives
  double idle_wall = 0, idle_cpu = 0;       // ranks outside the group: seconds waited, CPU used
};

/// What every run of a lesson shares: the model, the steps, the optimizer.
struct Setup {
  GptConfig cfg;
  int64_t steps = 0, sp_steps = 0, batch = 0;
  bool spin = false;  // wait in MPI's blocking calls instead of SleepingWaits
  uint64_t seed = 13;
  float lr = 3e-4f;
  int64_t warmup = 5;
};

/// [A1]'s model (12 layers, h = 512, MLP 2048, 8 heads, a vocabulary of 256) with the steps,
/// the batch and the sequence length of --steps, --batch and --seq (declared by a1_options).
Setup a1_setup(const Options& o);
/// Declares --steps (default `steps`, described by `steps_help`), --seq and --batch.
void a1_options(Options& o, int64_t steps, const std::string& steps_help);

/// Trains a fresh model at `t` (with sequence parallelism when `sp`) for `steps` steps on ranks
/// 0 … t − 1 of the world; the others wait in quiet_barrier over `sync`. Collective over the world.
Run train_at(Device& dev, Communicator& world, Communicator& sync, const Setup& s, int t, bool sp,
             int64_t steps);

/// The steps two loss curves share, as floats for Lesson::check: {a's, b's}.
std::pair<std::vector<float>, std::vector<float>> common_steps(const std::vector<double>& a,
                                                               const std::vector<double>& b);

/// The largest relative difference |a − b| / |b| over the steps.
double worst_rel(const std::vector<double>& a, const std::vector<double>& b);

/// The median step time of a run, its first (warm-up) step left out.
double median_step(const Run& r);

}  // namespace tp::lesson
