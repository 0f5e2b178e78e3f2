// run_plan.h — what tp_train runs, read from its flags (and the model file they name) and checked
// before anything allocates or communicates: every problem at once, one line each.
//
// No communicator here: the plan is the same on every rank (the same flags, the same files), so it
// is built and checked by each rank alone, and unit-tested without MPI (tests/train/test_run_plan.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/options.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/hf_gpt2.h"
#include "model/memory_budget.h"
#include "model/train.h"
#include "text/bpe.h"

namespace tp {

/// What train() runs, read from the flags (and the model file they name) and checked: every
/// problem at once, before anything allocates or communicates.
struct Plan {
  GptConfig cfg;
  int64_t seq = 0;  // the length of a training sequence (cfg.seq: the position table)
  int64_t steps = 0, batch = 0, warmup = 0, decay_steps = 0;
  uint64_t seed = 0;
  std::string data, init_from, load, export_dir;
  std::shared_ptr<text::Tokenizer> tokenizer;  // --tokenizer: --data's text as its ids
  ModelFile file;
  int dp = 1, t = 1;                      // t: the TP group's size
  int pp = 1;                             // --pp: pipeline stages
  int cp = 1;                             // --cp: context-parallel ranks
  int ep = 1;                             // --ep: expert-parallel ranks (inside dp)
  CpLayout cp_layout = CpLayout::Zigzag;  // --cp-layout
  std::vector<int64_t> pp_layers;         // --pp-layers (empty: an even split)
  StepOptions step_opts;                  // --micro-batches, --zero, --schedule
  std::vector<std::string> resume_notes;  // --resume auto: the newer checkpoints it skipped
  CheckpointOrigin origin;                // this run's id and tokens, in every file it writes
  std::vector<std::string> origin_notes;  // the run id line; --replace-series' line
  bool resumed = false;  // --resume took a checkpoint: --steps is the step the run ends at
};

/// --resume auto | auto-or-fresh: the newest valid checkpoint of --save's series (or --save itself;
/// model/checkpoint_series.h), or "" to start fresh. Every rank looks (the same files: no
/// communication yet); a bad newer file is skipped with a note, none at all is a problem.
std::string resume_path(const Options& o, std::vector<std::string>& notes,
                        std::vector<std::string>& problems);

/// Who this run is (model/checkpoint_series.h): the run id of the checkpoint it continues
/// (--resume, --load), else a new one; a run that does not continue --save's series may not save
/// into a series of another run (unless --replace-series); a file trained on BPE ids does not go
/// on bytes. A new id differs between ranks (time, pid): world rank 0's is the run's, as rank 0
/// writes every file and prunes; the refusal compares files against an id none of them carries,
/// on every rank.
void plan_origin(const Options& o, Plan& r, std::vector<std::string>& problems);

/// The plan of a run on `world_size` ranks; every problem of the flags at once, as one input
/// error (exit 2).
Plan plan_run(const Options& o, int world_size);

/// --memory-budget MiB (issue 22): before anything is built, the preflight's peak per rank against
/// the budget; over it, one line naming the largest part and the cheapest option that fits
/// (model/memory_budget.h), exit 2.
MemoryChoice memory_choice(const Plan& plan);

/// --memory-budget in bytes (0: no budget).
int64_t memory_budget_bytes(const Options& o);

/// The check before anything is built: the budget, or without one on the CPU, this host's memory.
void check_memory_budget(const Options& o, const Plan& plan, int world_size);

/// --steps N: the steps to run now, starting at step `start`. From --load (or fresh) N more; a
/// run that --resume took a checkpoint for ends at step N, so the command that started the run,
/// given again after a crash, finishes it where the uninterrupted run would have (Megatron's
/// --train-iters, nanoGPT's max_iters count the same way). `note`: the line that says so after a
/// --resume ("" otherwise).
int64_t steps_to_run(const Plan& plan, int64_t start, std::string& note);

}  // namespace tp
