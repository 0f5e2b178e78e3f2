// run_plan.cpp — flags → a validated plan (run_plan.h).
#include "train/run_plan.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/format.h"
#include "model/checkpoint_series.h"
#include "model/file_shape.h"
#include "model/preflight.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/process_grid.h"

namespace tp {

std::string resume_path(const Options& o, std::vector<std::string>& notes,
                        std::vector<std::string>& problems) {
  const std::string mode = o.get_text("resume");
  if (mode.empty()) return "";
  if (!o.get_text("load").empty() || !o.get_text("init-from").empty()) {
    problems.push_back("give --resume " + mode + " or --load/--init-from, not both");
    return "";
  }
  ResumeDecision d = resume_decision(mode, o.get_text("save"));
  notes = d.notes;
  if (!d.problem.empty()) problems.push_back(d.problem);
  return d.path;
}

// Who this run is (model/checkpoint_series.h): the run id of the checkpoint it continues (--resume,
// --load), else a new one; a run that does not continue --save's series may not save into a
// series of another run (unless --replace-series); a file trained on BPE ids does not go on bytes.
// A new id differs between ranks (time, pid): world rank 0's is the run's, as rank 0 writes every
// file and prunes; the refusal compares files against an id none of them carries, on every rank.
void plan_origin(const Options& o, Plan& r, std::vector<std::string>& problems) {
  const std::string& from = r.load.empty() ? r.init_from : r.load;
  const CheckpointOrigin file = from.empty() ? CheckpointOrigin{} : checkpoint_origin(from);
  const bool inherit = !r.load.empty() && !file.run_id.empty();
  r.origin.run_id = inherit ? file.run_id : new_run_id();
  r.origin.tokens = r.data.empty() ? "markov" : r.tokenizer ? "gpt2-bpe" : "bytes";
  r.origin_notes = {"run id " + r.origin.run_id +
                    (inherit ? " (continued from " + r.load + ")" : " (new)")};
  if (file.tokens == "gpt2-bpe" && !r.data.empty() && !r.tokenizer)
    problems.push_back(from + " was trained on GPT-2 BPE ids (--tokenizer), but --data " + r.data +
                       " would be read as bytes: give --tokenizer DIR, the one it was trained "
                       "with");
  const std::string& save = o.get_text("save");
  const CheckpointSeries series(save);
  const ForeignSeries mode =
      o.get_flag("replace-series") ? ForeignSeries::Replace : ForeignSeries::Refuse;
  const bool continues = !o.get_text("resume").empty() || (!r.load.empty() && series.holds(r.load));
  if (series.empty() || (continues && mode == ForeignSeries::Refuse)) return;
  const SeriesOwnership own = check_series_owner(save, r.origin.run_id, mode);
  if (!own.problem.empty()) problems.push_back(own.problem);
  if (!own.note.empty()) r.origin_notes.push_back(own.note);
}

namespace {

// The vocabulary (bytes, or --tokenizer's BPE ids) and, with --init-from F or --load F (or the
// checkpoint --resume found), the model's shape from the file.
void plan_vocab_and_file(const Options& o, Plan& r, std::vector<std::string>& problems) {
  GptConfig& cfg = r.cfg;
  int64_t& seq = r.seq;
  const std::string& data = r.data;
  // --tokenizer DIR: --data's text as GPT-2 BPE ids (lib/text/bpe.h); V is the tokenizer's.
  const std::string tokenizer_dir = o.get_text("tokenizer");
  if (!tokenizer_dir.empty()) {
    r.tokenizer = std::make_shared<text::Tokenizer>(text::Tokenizer::load(tokenizer_dir));
    if (data.empty())
      problems.push_back("--tokenizer " + tokenizer_dir +
                         " encodes a text file: give it with --data FILE");
  }
  const int64_t data_vocab = r.tokenizer ? r.tokenizer->vocab_size() : 256;
  if (!data.empty() && cfg.vocab != 0 && cfg.vocab != data_vocab)
    problems.push_back(
        r.tokenizer
            ? "the tokenizer in " + tokenizer_dir + " has V = " + std::to_string(data_vocab) +
                  "; drop --vocab=" + std::to_string(cfg.vocab) +
                  " (the vocabulary comes from the tokenizer)"
            : "--data uses byte tokens (V = 256); drop --vocab=" + std::to_string(cfg.vocab));
  if (cfg.vocab == 0) cfg.vocab = data.empty() ? 256 : data_vocab;
  // --init-from F (weights only), or --load F: the shape from the file. A Hugging Face file given
  // to --load is taken as --init-from (it holds no optimizer state and no step).
  std::string &init_from = r.init_from = o.get_text("init-from"),
              &load = r.load = o.get_text("load");
  if (!o.get_text("resume").empty()) {
    load = resume_path(o, r.resume_notes, problems);
    r.resumed = !load.empty();
  }
  if (o.get_int("save-every") > 0 && o.get_text("save").empty())
    problems.push_back("--save-every " + std::to_string(o.get_int("save-every")) +
                       " needs --save DIR/ or --save FILE: the folder or the stem of the "
                       "checkpoints");
  ModelFile& file = r.file;
  if (!init_from.empty() && !load.empty())
    problems.push_back("give --init-from (weights only) or --load (resume), not both");
  else if (!init_from.empty() || !load.empty()) {
    file = inspect_model_file(init_from.empty() ? load : init_from,
                              o.given("heads") ? o.get_int("heads") : 0);
    if (file.hub && !load.empty()) std::swap(init_from, load);
    shape_from_file(file, o,
                    init_from.empty() ? FileShape::FlagsOverride : FileShape::FlagsMustAgree, cfg,
                    seq, problems);
    if (!data.empty() && !r.tokenizer && cfg.vocab < 256)
      problems.push_back("--data uses byte tokens (ids 0..255), but " + file.path +
                         " has a vocabulary of " + std::to_string(cfg.vocab));
    if (r.tokenizer && cfg.vocab != data_vocab)
      problems.push_back(file.path + " has a vocabulary of " + std::to_string(cfg.vocab) +
                         ", the tokenizer in " + tokenizer_dir + " one of " +
                         std::to_string(data_vocab) +
                         ": give the tokenizer the model was trained with (or no --tokenizer)");
  }
}

}  // namespace

namespace {
// --cp, --cp-layout: the sequence splits into the layout's chunks (parallel/context_parallel.h),
// SP then splits each rank's S/cp positions by t, and what does not combine with CP yet is
// refused by name.
void plan_context_parallel(const Options& o, Plan& r, std::vector<std::string>& problems) {
  const std::string layout = o.get_text("cp-layout");
  if (!parse_cp_layout(layout, r.cp_layout)) {
    problems.push_back("--cp-layout=" + layout + " is not a layout; use zigzag or contiguous");
    return;
  }
  if (r.cp < 1) return;  // ProcessGrid::problems said so
  for (const std::string& p : cp_problems(r.seq, r.cp, r.cp_layout)) problems.push_back(p);
  if (r.cp > 1 && r.cfg.sp && r.seq % (r.cp * r.t) != 0)
    problems.push_back("--sp with --cp=" + std::to_string(r.cp) + ": each CP rank's " +
                       std::to_string(r.seq / r.cp) +
                       " positions must split over t=" + std::to_string(r.t) +
                       "; use a --seq divisible by cp · t = " + std::to_string(r.cp * r.t));
  if (r.cp > 1) {
    const std::pair<bool, const char*> refused[] = {
        {o.get_flag("audit-grads"), "--audit-grads"},
        {o.get_real("memory-budget") > 0, "--memory-budget"}};
    for (const auto& [given, flag] : refused)
      if (given)
        problems.push_back(std::string(flag) + " with --cp=" + std::to_string(r.cp) +
                           ": not implemented for context parallelism; drop it or use --cp 1");
  }
}
}  // namespace

Plan plan_run(const Options& o, int world_size) {
  Plan r;
  GptConfig& cfg = r.cfg;
  cfg = config_from_flags(o);
  cfg.precision = parse_precision(o.get_text("precision"));  // never from a file: it holds fp32
  int64_t& seq = r.seq;
  seq = cfg.seq;  // the length of a training sequence (cfg.seq: the position table)
  const int64_t steps = r.steps = o.get_int("steps"), batch = r.batch = o.get_int("batch");
  r.seed = static_cast<uint64_t>(o.get_int("seed"));
  r.data = o.get_text("data");
  const int dp = r.dp = o.get_int32("dp");
  // Check every flag before anything allocates or communicates; report all problems at once.
  std::vector<std::string> problems;
  if (steps < 0) problems.push_back("--steps=" + std::to_string(steps) + " must be 0 or more");
  const int64_t warmup = r.warmup = o.get_int("warmup"),
                decay_steps = r.decay_steps = o.get_int("decay-steps");
  if (decay_steps != 0 && decay_steps <= warmup)
    problems.push_back("--decay-steps=" + std::to_string(decay_steps) +
                       " must be above --warmup=" + std::to_string(warmup) +
                       " (the cosine decay runs from the end of warm-up to step N), or 0 for no "
                       "decay");
  plan_vocab_and_file(o, r, problems);
  plan_origin(o, r, problems);
  const int pp = r.pp = o.get_int32("pp");
  const int cp = r.cp = o.get_int32("cp");
  const int ep = r.ep = o.get_int32("ep");
  const auto grid_problems = ProcessGrid::problems(world_size, dp, pp, cp, ep);
  for (const auto& p : grid_problems) problems.push_back(p);
  const int t = r.t = grid_problems.empty() ? world_size / dp / pp / cp : world_size;  // TP size
  plan_context_parallel(o, r, problems);
  if (const std::string placed = expert_parallel_problem(cfg.experts, ep); !placed.empty())
    problems.push_back(placed);
  if (ep >
      1) {  // expert parallelism (parallel/expert_parallel.h): what it does not combine with yet
    const std::pair<bool, const char*> refused[] = {
        {!o.get_text("dump-grads").empty(), "--dump-grads (it gathers over TP only)"}};
    for (const auto& [given, what] : refused)
      if (given)
        problems.push_back("--ep " + std::to_string(ep) + " with " + what +
                           ": not implemented yet; drop one of the two");
  }
  if (cfg.experts > 0) {  // the mixture of experts (model/moe.h): what it does not combine with yet
    const std::pair<bool, const char*> refused[] = {
        {o.get_flag("audit-grads"), "--audit-grads"},
        {o.get_real("memory-budget") > 0,
         "--memory-budget (the preflight counts no expert activations yet)"}};
    for (const auto& [given, what] : refused)
      if (given)
        problems.push_back(std::string("--experts with ") + what +
                           ": not implemented for the mixture of experts yet; drop one of the "
                           "two");
  }
  if (grid_problems.empty() && batch >= 1 && batch % dp != 0)
    problems.push_back("--batch=" + std::to_string(batch) + " is not divisible by --dp=" +
                       std::to_string(dp) + ": every DP rank takes batch/dp sequences");
  r.step_opts = {o.get_int32("micro-batches"), o.get_int32("zero")};
  r.step_opts.schedule = parse_schedule(o.get_text("schedule"));
  r.pp_layers = parse_pp_layers(o.get_text("pp-layers"));
  const StepOptions& step_opts = r.step_opts;
  // --pp: the stages (parallel/pipeline_parallel.h) and what does not combine with them yet.
  if (pp > 1 || !r.pp_layers.empty())
    for (const auto& p : pipeline_problems(cfg.layers, pp, step_opts.micro_batches,
                                           step_opts.schedule, r.pp_layers))
      problems.push_back(p);
  if (pp > 1) {
    const std::pair<bool, const char*> refused[] = {
        {o.get_flag("audit-grads"), "--audit-grads"},
        {o.get_real("memory-budget") > 0, "--memory-budget"}};
    for (const auto& [given, flag] : refused)
      if (given)
        problems.push_back(std::string(flag) + " with --pp=" + std::to_string(pp) +
                           ": not implemented for pipeline stages; drop it or use --pp 1");
  }
  if (grid_problems.empty() && batch >= 1 && batch % dp == 0)
    for (const auto& p : step_option_problems(step_opts, dp, batch, dp > 1 ? 0.0f : cfg.dropout))
      problems.push_back(p);
  if (step_opts.zero == 1 && !o.get_text("dump-grads").empty())
    problems.push_back(
        "--dump-grads with --zero 1: each replica holds only its 1/dp of the "
        "averaged gradients; dump them with --zero 0");
  if (dp > 1 && cfg.dropout != 0.0f)
    problems.push_back(
        "--dropout with --dp > 1: the masks are keyed by the row of each DP "
        "rank's own slice, so the run would not match --dp 1; use --dropout 0");
  if (cfg.sp && seq != cfg.seq && seq % t != 0)
    problems.push_back("--seq=" + std::to_string(seq) + " is not divisible by t=" +
                       std::to_string(t) + ", which sequence parallelism needs");
  const std::string& export_dir = r.export_dir = o.get_text("export-hf");
  if (!export_dir.empty() && !hf_export_problem(cfg).empty())
    problems.push_back("--export-hf: GPT-2 cannot hold this model: " + hf_export_problem(cfg));
  // The preflight's checks (lib/model/preflight.h; tp_preflight prints the same), one line each,
  // for the TP group: with --dp, t is ranks / dp, and the messages say so where they name t.
  PreflightInput pre;
  pre.model = cfg;
  pre.batch = batch;
  pre.t = t;
  if (dp > 1) pre.t_label = "the TP group: ranks / --dp";
  if (pp > 1) pre.t_label = "the TP group: ranks / (--dp · --pp)";
  if (cp > 1) pre.t_label = "the TP group: ranks / (--cp · --dp · --pp)";
  for (const std::string& p : preflight(pre).problems) problems.push_back(p);
  TP_CHECK_INPUT(problems.empty(), problems_message(problems));
  return r;
}

MemoryChoice memory_choice(const Plan& plan) {
  return {plan.t,
          plan.dp,
          plan.cfg.recompute,
          plan.step_opts.micro_batches,
          plan.step_opts.zero,
          plan.cfg.precision};
}

int64_t memory_budget_bytes(const Options& o) {
  return static_cast<int64_t>(o.get_real("memory-budget") * 1048576.0);
}

namespace {

// This host's memory in bytes (sysconf), 0 when the system does not say.
int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace

void check_memory_budget(const Options& o, const Plan& plan, int world_size) {
  const int64_t budget = memory_budget_bytes(o);
  if (budget <= 0) {
    // Without a budget, on the CPU: a run whose preflight peak per rank is more than this whole
    // host holds stops here, before a tensor is allocated, instead of at the first allocation that
    // fails after the ones before it were initialised (seconds for a 1 GiB embedding). Only a rank
    // that could not fit even alone on the host is refused: how many ranks share a host, and what
    // else runs there, is not known here (the allocator's own check still catches those).
    const int64_t host = host_memory_bytes();
    if (o.get_text("backend") == "gpu" || host <= 0) return;
    const MemoryEstimate e = estimate_memory(plan.cfg, plan.seq, plan.batch, memory_choice(plan));
    const std::string largest = e.peak.largest();
    TP_CHECK_INPUT(!e.problems.empty() || e.peak.total() <= host, "the run needs ",
                   mib(e.peak.total()), " per rank (the preflight's peak, ", largest,
                   " the largest part) but this host has ", mib(host), " of memory in all; reduce ",
                   largest == "activations"
                       ? "--batch, --seq or the model's sizes, or add --recompute"
                       : "--hidden, --ffn, --layers or --vocab",
                   ", use more ranks, or give --memory-budget MiB to find the options that fit");
    return;
  }
  const BudgetVerdict v =
      fit_memory_budget(plan.cfg, plan.seq, plan.batch, world_size, memory_choice(plan), budget);
  TP_CHECK_INPUT(v.fits, v.message);
}

int64_t steps_to_run(const Plan& plan, int64_t start, std::string& note) {
  note.clear();
  if (!plan.resumed) return plan.steps;
  const int64_t left = std::max<int64_t>(0, plan.steps - start);
  if (left == 0)
    note = detail::str_cat("--resume: the run is at step ", start, " and --steps ", plan.steps,
                           " ends it there: nothing left to train");
  else
    note = detail::str_cat("--resume: --steps ", plan.steps, " is the step the run ends at: ", left,
                           " more from step ", start);
  return left;
}

}  // namespace tp
