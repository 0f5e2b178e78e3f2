// trainee.cpp — what a training run trains, built and started (trainee.h).
#include "train/trainee.h"

#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "core/format.h"
#include "core/log.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"

namespace tp {

std::unique_ptr<TokenSource> tokenized_source(const std::string& path, text::Tokenizer& tokenizer,
                                              int64_t seq, uint64_t seed) {
  TextSource readable(path, seq, seed);  // the file's checks: exists, regular, long enough
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TP_CHECK_INPUT(in.good() || in.eof(), "cannot read data file ", path);
  return std::make_unique<IdSource>(
      tokenizer.encode(bytes), tokenizer.vocab_size(), seq, seed,
      path + " as GPT-2 BPE tokens (" + std::to_string(bytes.size()) + " bytes)");
}

std::unique_ptr<TokenSource> token_source(const Plan& plan, double val_fraction) {
  return allocating(
      "the data", "the --data file or --vocab", [&]() -> std::unique_ptr<TokenSource> {
        if (plan.data.empty()) return std::make_unique<MarkovSource>(plan.cfg.vocab, plan.seed);
        if (plan.tokenizer)
          return tokenized_source(plan.data, *plan.tokenizer, plan.seq, plan.seed);
        return std::make_unique<TextSource>(plan.data, plan.seq, plan.seed, val_fraction);
      });
}

Trainee build(Device& device, Communicator& tp, const GptConfig& cfg, const StageLayout& stage,
              uint64_t seed, const AdamWParams& hp, Communicator* ep) {
  // The size of weights and gradients (fp32) per rank, roughly, for an out-of-memory message.
  const double h = static_cast<double>(cfg.hidden), ffn = cfg.ffn ? cfg.ffn : 4.0 * h;
  const double weights = 4.0 *
                         (static_cast<double>(cfg.layers) * (4 * h * h + 3 * h * ffn) +
                          static_cast<double>(cfg.vocab + cfg.seq) * h) /
                         tp.size();
  auto model_ptr =
      allocating("the model (about " + gib(2 * weights) + " of weights and gradients per rank)",
                 "--hidden/--layers/--ffn/--vocab/--seq or add ranks",
                 [&] { return std::make_unique<Gpt>(device, tp, cfg, stage); });
  if (ep) model_ptr->set_expert_parallel(*ep);
  model_ptr->init(seed);
  auto opt_ptr = allocating("AdamW's moments (about " + gib(2 * weights) + " per rank)",
                            "--hidden/--layers/--ffn/--vocab or add ranks", [&] {
                              return std::make_unique<AdamW>(device, model_ptr->params(), hp);
                            });
  return {std::move(model_ptr), std::move(opt_ptr)};
}

int64_t start_from(Communicator& world, Communicator& tp, const Plan& plan, Gpt& model,
                   AdamW& opt) {
  const std::string &init_from = plan.init_from, &load = plan.load;
  const ModelFile& file = plan.file;
  int64_t step = 0;
  if (!init_from.empty()) {
    load_model_file(file, tp, model);
    log0(world, "initialised from ", init_from, ": ", file.describe(),
         "; AdamW starts fresh at step 0");
    if (!file.checksums) log0(world, unverified_note(init_from));
  } else if (!load.empty()) {
    const LoadedCheckpoint loaded = load_checkpoint(load, tp, model, opt);
    step = loaded.step;
    log0(world, "loaded ", load, " at step ", step,
         loaded.optimizer_state ? " (with optimizer state)"
                                : " (no optimizer state: AdamW starts fresh)");
    if (!loaded.checksums) log0(world, unverified_note(load));
  }
  // Step counters: the data's sample index (step · batch + b) · (seq + 1) must not overflow.
  const int64_t last_step = std::numeric_limits<int64_t>::max() / plan.batch / (plan.cfg.seq + 1);
  TP_CHECK_INPUT(step <= last_step && plan.steps <= last_step - step, "step ", step,
                 load.empty() ? "" : " (from --load " + load + ")", " + --steps=", plan.steps,
                 " passes the last step this --batch/--seq can number, ", last_step,
                 "; use fewer --steps or a checkpoint with a sane step count");
  return step;
}

void shard_optimizer(Communicator& world, ProcessGrid& grid, const Plan& plan, const Gpt& model,
                     AdamW& opt) {
  if (plan.step_opts.zero != 1 || opt.sharded()) return;
  const int64_t whole = opt.state_bytes();
  if (grid.ep_size() > 1)
    opt.shard_over(grid.dp(), grid.edp(), model.params());  // the experts' over their EDP group
  else
    opt.shard_over(grid.dp(), model.params());
  log0(world, "--zero 1: AdamW's moments on each rank: ", opt.state_bytes(),
       " bytes (2 · 4 · ⌈P/dp⌉", grid.ep_size() > 1 ? ", the experts' ⌈P/(dp/ep)⌉" : "",
       ", P = ", whole / 8, " parameter elements of this rank) instead of ", whole);
}

}  // namespace tp
