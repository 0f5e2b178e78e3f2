// trainee.h — what a training run trains, built and started: its data, the model and its
// optimizer on this rank's TP group (or pipeline stage), the weights it starts from (--init-from,
// --load) and, with --zero 1, the optimizer state sharded over the DP replicas.
//
// Running out of memory while building is bad input (exit 2), one line naming what was being
// allocated, about how big it is, and the flags that size it (allocating below).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "core/communicator.h"
#include "core/device.h"
#include "core/error.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "parallel/process_grid.h"
#include "text/bpe.h"
#include "train/run_plan.h"

namespace tp {

/// Runs `make`, turning an allocation failure into one line that names what was being allocated,
/// about how big it is and the flags that size it.
template <typename Make>
auto allocating(const std::string& what, const std::string& flags, Make make) {
  try {
    return make();
  } catch (const std::bad_alloc&) {
    TP_CHECK_INPUT(false, "out of memory allocating ", what, ": reduce ", flags);
  } catch (const Error& e) {
    // The device's own "out of host/GPU memory allocating N bytes": the same sizes on every rank,
    // so treated as bad input (one line from rank 0), with what was being allocated.
    const std::string m = e.what();
    if (e.on_every_rank() || m.rfind("out of ", 0) != 0) throw;
    TP_CHECK_INPUT(false, m, " for ", what, ": reduce ", flags);
  }
}

/// --data FILE --tokenizer DIR: the whole file read and encoded (every rank the same ids).
std::unique_ptr<TokenSource> tokenized_source(const std::string& path, text::Tokenizer& tokenizer,
                                              int64_t seq, uint64_t seed);

/// The plan's data: the Markov chain (no --data), --data's bytes (the last `val_fraction` held
/// out: --val-fraction), or with --tokenizer the file's GPT-2 BPE ids.
std::unique_ptr<TokenSource> token_source(const Plan& plan, double val_fraction);

/// The model (initialised from `seed`) and its optimizer on this rank's TP group; running out of
/// memory is one line naming what and the flags that size it.
struct Trainee {
  std::unique_ptr<Gpt> model;
  std::unique_ptr<AdamW> opt;
};

/// `ep`: expert parallelism's group (Gpt::set_expert_parallel, before init and the optimizer).
Trainee build(Device& device, Communicator& tp, const GptConfig& cfg, const StageLayout& stage,
              uint64_t seed, const AdamWParams& hp, Communicator* ep = nullptr);

/// --init-from (weights, step 0) or --load (weights, moments and the step): the step to start at.
int64_t start_from(Communicator& world, Communicator& tp, const Plan& plan, Gpt& model, AdamW& opt);

/// --zero 1: AdamW's moments sharded over the DP replicas (after a load, which reads them whole).
void shard_optimizer(Communicator& world, ProcessGrid& grid, const Plan& plan, const Gpt& model,
                     AdamW& opt);

}  // namespace tp
