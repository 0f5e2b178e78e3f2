// tp_preflight — [A2]'s pre-launch checklist as a program: a model and a tensor-parallel size t
// in; every problem (each with its fix), the shard of every tensor, the memory of each rank, the
// collectives of a step and their time on NVLink and InfiniBand out (lib/model/preflight.h has the
// formulas). One process, no MPI, no device: it only does arithmetic.
//
//   build/bin/tp_preflight -t 3                                  (tp_train's default model at t = 3)
//   build/bin/tp_preflight --model qwen3-8b -t 8 --batch 1       ([A3]: 0.26 ms vs 2.3 ms)
//   build/bin/tp_preflight --model llama2-70b -t 16 --gpus-per-node 8 --nodes 2 --kv-replication
//   build/bin/tp_preflight --model llama2-70b -t 8 --nodes 8 --gpus-per-node 8 --batch 4
//       --micro-batches 4 --recompute selective --zero 1       (the memory stack, issue 22)
//   build/bin/tp_preflight --hidden 50 --heads 4 --ffn 7 -t 2    (exit 2: every problem at once)
//   build/bin/tp_preflight --model llama2-70b --seq 131072 -t 8 --sp --cp 8 --gpus-per-node 8
//       (context parallelism, issue 42: 128k tokens; lib/model/preflight_cp.h)
//   build/bin/tp_preflight --model mixtral-8x7b -t 8 --nodes 8 --gpus-per-node 8 --ep 8
//       (a mixture of experts, issue 43: counts, memory per rank, the EP plan's all-to-all;
//       lib/model/preflight_moe.h; add --pp 2 for the states per pipeline stage)
//
// Exit status: 0 when the configuration can run (warnings and notes do not count), 2 when there is
// any problem or a bad flag.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/options.h"
#include "model/memory_budget.h"
#include "model/pipeline_plan.h"
#include "model/preflight.h"
#include "model/preflight_cp.h"
#include "model/preflight_moe.h"
#include "model/presets.h"

using namespace tp;

namespace {

std::string presets() {
  std::string s;
  for (const auto& n : model_preset_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Ranks of the job for the memory stack: --dp × t, else nodes × GPUs per node, else 0 (not given).
int world_of(const Options& o, int t) {
  const int64_t world = o.get_int32("dp") > 0
                            ? int64_t{o.get_int32("dp")} * std::max(t, 1)
                            : int64_t{o.get_int32("nodes")} * o.get_int32("gpus-per-node");
  TP_CHECK_INPUT(world <= std::numeric_limits<int>::max(), "a job of ", world,
                 " ranks (--dp x t, or --nodes x --gpus-per-node) is more than this tool counts; "
                 "give at most ",
                 std::numeric_limits<int>::max());
  return static_cast<int>(world);
}

// The memory stack's flags (issue 22): --recompute, --micro-batches, --zero 1 over dp replicas.
// With --cp (--pp) the replicas are groups of t x cp (t x pp) ranks.
void memory_options(const Options& o, PreflightInput& in) {
  in.model.recompute = parse_recompute(o.get_text("recompute"));
  in.micro_batches = o.get_int32("micro-batches");
  const int group = in.t * std::max(1, o.get_int32("cp")) * std::max(1, o.get_int32("pp"));
  const int world = world_of(o, group);
  const int dp = world > 0 && group >= 1 && world % group == 0 ? world / group : 1;
  const int zero = o.get_int32("zero");
  TP_CHECK_INPUT(zero == 0 || zero == 1, "--zero=", zero,
                 " is not a stage this build has; use 0 or 1");
  TP_CHECK_INPUT(zero == 0 || dp > 1, "--zero 1 with dp=", dp,
                 ": ZeRO-1 shards the optimizer state over the data-parallel replicas; give --dp 2 "
                 "(or more), or --nodes and --gpus-per-node with more GPUs than t");
  if (zero == 1) in.zero_dp = dp;
}

// The model: a preset (or tp_train's defaults), then every size flag that was given (non-zero).
PreflightInput input_from(const Options& o) {
  PreflightInput in;
  const std::string preset = o.get_text("model");
  GptConfig c = preset.empty() ? GptConfig{} : model_preset(preset);
  if (preset.empty()) c.vocab = 256;  // tp_train's --vocab 0
  auto take = [&](const char* flag, int64_t& field) {
    if (o.get_int(flag) != 0) field = o.get_int(flag);
  };
  take("layers", c.layers);
  take("hidden", c.hidden);
  take("heads", c.heads);
  take("kv-heads", c.kv_heads);
  take("ffn", c.ffn);
  take("vocab", c.vocab);
  take("seq", c.seq);
  take("pad-vocab-multiple", c.pad_vocab_multiple);
  if (o.get_text("act") != "preset") c.act = parse_activation(o.get_text("act"));
  if (o.get_text("norm") != "preset") c.norm = parse_norm(o.get_text("norm"));
  if (o.get_flag("untie")) c.tied = false;
  c.dropout = static_cast<float>(o.get_real("dropout"));
  c.sp = o.get_flag("sp");
  if (o.given("experts")) c.experts = o.get_int32("experts");  // else the preset's
  if (o.given("top-k")) c.top_k = o.get_int32("top-k");
  if (o.given("moe-every")) c.moe_every = o.get_int32("moe-every");
  in.model = c;
  in.batch = o.get_int("batch") != 0 ? o.get_int("batch") : (preset.empty() ? 8 : 1);
  in.t = o.get_int32("tp");
  const std::string precision = o.get_text("precision");  // tp_train's flag: sets --dtype
  TP_CHECK_INPUT(
      precision == "auto" || o.get_text("dtype") == "auto" || o.get_text("dtype") == precision,
      "--precision=", precision, " and --dtype=", o.get_text("dtype"),
      " disagree; give one of them");
  const std::string dtype = precision != "auto"             ? precision
                            : o.get_text("dtype") != "auto" ? o.get_text("dtype")
                            : preset.empty()                ? "fp32"
                                                            : "bf16";
  in.dtype_bytes = dtype == "fp32" ? 4 : 2;
  in.kv_replication = o.get_flag("kv-replication");
  in.nodes = o.get_int32("nodes");
  in.gpus_per_node = o.get_int32("gpus-per-node");
  in.flops = o.get_real("tflops") * 1e12;
  memory_options(o, in);
  return in;
}

// --cp: the TP report of the whole sequence, then what CP changes (lib/model/preflight_cp.h).
int report_cp(const Options& o, const PreflightInput& base, int cp) {
  CpInput cin;
  cin.cp = cp;
  TP_CHECK_INPUT(parse_cp_layout(o.get_text("cp-layout"), cin.layout),
                 "--cp-layout=", o.get_text("cp-layout"), ": expected zigzag or contiguous");
  cin.gpu_memory = o.get_real("gpu-memory") * 1e9;
  const Preflight p = preflight(base);
  const CpPlan c = plan_cp(p, cin);
  std::vector<std::string> problems = p.problems;
  problems.insert(problems.end(), c.problems.begin(), c.problems.end());
  TP_CHECK_INPUT(problems.empty(), problems_message(problems));
  std::printf("%s%s", preflight_report(p).c_str(), cp_report(p, c).c_str());
  return 0;
}

// --experts (or a preset with experts) and --ep: the TP report, then what the experts change
// (lib/model/preflight_moe.h); with --pp, per stage, the replicas being groups of t x pp ranks.
int report_moe(const Options& o, const PreflightInput& base) {
  TP_CHECK_INPUT(o.get_int32("cp") <= 1,
                 "--experts with --cp: the preflight does not plan experts beside context "
                 "parallelism yet (--pp and --ep it does); give --cp 1");
  MoeInput min;
  min.ep = o.get_int32("ep");
  min.pp = o.get_int32("pp");
  const int group = base.t * min.pp;
  const int world = world_of(o, group);
  min.dp = o.get_int32("dp") > 0                           ? o.get_int32("dp")
           : world > 0 && group >= 1 && world % group == 0 ? world / group
                                                           : 0;
  min.gpu_memory = o.get_real("gpu-memory") * 1e9;
  const Preflight p = preflight(base);
  const MoePlan m = plan_moe(p, min);
  std::vector<std::string> problems = p.problems;
  problems.insert(problems.end(), m.problems.begin(), m.problems.end());
  TP_CHECK_INPUT(problems.empty(), problems_message(problems));
  std::printf("%s%s", preflight_report(p).c_str(), moe_report(p, m).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o("tp_preflight",
            "Checks a model configuration for tensor parallelism of size t before a run and "
            "prints every problem with its fix, the shard of every tensor, memory per rank, the "
            "collectives of a step and their time on NVLink and InfiniBand against compute. "
            "Exit 2 when there is any problem. Without --model the model is tp_train's default "
            "(the same flags); size flags left at 0 keep the preset's value.");
  o.integer("tp", 1, "tensor-parallel size t (also -t N)")
      .fits_int()
      .text("model", "", "start from a named model: " + presets(), model_preset_names())
      .integer("layers", 0, "transformer blocks L")
      .integer("hidden", 0, "hidden size h")
      .integer("heads", 0, "attention (query) heads")
      .integer("kv-heads", 0, "key/value heads for GQA; 0 = heads")
      .integer("ffn", 0, "MLP inner size; 0 = 4 h")
      .integer("vocab", 0, "vocabulary V")
      .integer("seq", 0, "sequence length S")
      .integer("batch", 0, "sequences per step B (default 8, 1 with --model)")
      .text("act", "preset", "MLP activation; preset: the --model's, else gelu",
            {"preset", "gelu", "swiglu"})
      .text("norm", "preset", "normalisation; preset: the --model's, else layernorm",
            {"preset", "layernorm", "rmsnorm"})
      .flag("untie", "an LM head of its own instead of wte")
      .real("dropout", 0.0, "dropout probability (this implementation stores its masks)")
      .as_float()
      .flag("sp", "sequence parallelism (seq must be divisible by t)")
      .integer("pad-vocab-multiple", 0, "pad the vocabulary to a multiple of this times t")
      .text("dtype", "auto",
            "bytes of weights, gradients, activations and messages: fp32 (4) or bf16/fp16 (2); "
            "auto: fp32 (as tp_train), bf16 with --model",
            {"auto", "fp32", "bf16", "fp16"})
      .text("precision", "auto",
            "tp_train's --precision: fp32, or bf16 mixed precision (2-byte weight copies beside "
            "the fp32 master, 2-byte activations and messages: the peak's 18 B per parameter); "
            "sets --dtype; auto: --dtype's",
            {"auto", "fp32", "bf16"})
      .flag("kv-replication",
            "when kv-heads < t, plan KV-head replication (t / kv-heads copies of each) instead "
            "of reporting a problem; tp_train's model cannot")
      .integer("nodes", 0, "nodes of the job (0 = not given)")
      .fits_int()
      .integer("gpus-per-node", 0, "GPUs per node (0 = not given): warns when t spans nodes")
      .fits_int()
      .real("tflops", 400.0, "dense FLOP rate of one GPU in TFLOPS, for the compute time")
      .text("recompute", "none",
            "activation recomputation for the peak per rank: none, selective, full",
            {"none", "selective", "full"})
      .integer("micro-batches", 1,
               "gradient accumulation: the batch runs as m micro-batches (per replica, with --pp)")
      .min(1)
      .fits_int()
      .integer("zero", 0, "ZeRO stage on the dp axis: 0, or 1 (AdamW's moments sharded over dp)")
      .non_negative()
      .fits_int()
      .integer("dp", 0,
               "data-parallel replicas, for --zero 1, the memory stack and --pp (0: nodes x GPUs "
               "/ t when given)")
      .non_negative()
      .fits_int()
      .real("gpu-memory", 80.0,
            "GB (10^9 bytes) of one GPU, for whether --cp's peak (and --experts' states) fit")
      .min(0.0, true)
      .max(1e9);
  // The pipeline block (lib/model/pipeline_plan.h): --pp and --schedule (declared as tp_train
  // declares them), with --dp and --micro-batches. With --pp > 1 or --dp > 1 the report adds the
  // stages' memory, the bubble and each link's traffic per step (--batch is then the global batch).
  declare_pipeline_options(o);
  declare_context_parallel_options(o);    // --cp, --cp-layout: tp_train's words
  declare_mixture_of_experts_options(o);  // --experts, --top-k, --ep ...: tp_train's
  try {
    // -t N and -t=N are short for --tp.
    std::vector<std::string> args(argv, argv + argc);
    for (std::string& a : args)
      if (a == "-t")
        a = "--tp";
      else if (a.rfind("-t=", 0) == 0)
        a = "--tp=" + a.substr(3);
    std::vector<const char*> av;
    for (const std::string& a : args) av.push_back(a.c_str());
    o.parse(static_cast<int>(av.size()), av.data());
    if (o.help_requested()) {
      std::printf("%s", o.help().c_str());
      return 0;
    }
    const PreflightInput base = input_from(o);
    if (base.model.experts > 0 || o.get_int32("ep") > 1) return report_moe(o, base);
    const int cp = o.get_int32("cp");
    TP_CHECK_INPUT(cp == 1 || (o.get_int32("pp") <= 1 && o.get_int32("dp") <= 1), "--cp ", cp,
                   " with --pp or --dp: the pipeline block does not plan CP yet; give --cp 1, or "
                   "leave out --pp and --dp");
    // --cp given (--cp 1 too: its section is the baseline the other sizes compare with).
    if (cp != 1 || (o.given("cp") && o.get_int32("pp") <= 1 && o.get_int32("dp") <= 1))
      return report_cp(o, base, cp);
    if (o.get_int32("pp") > 1 || o.get_int32("dp") > 1) {
      // The pipeline block: its own problems are one error line (exit 2); the TP report is that
      // of one micro-batch, followed by the stages, the bubble and the traffic.
      PipelineInput pin;
      pin.base = base;
      pin.base.micro_batches = 1;  // the plan cuts the batch into its micro-batches itself
      pin.pp = o.get_int32("pp");
      pin.dp = std::max(1, o.get_int32("dp"));
      pin.micro_batches = o.get_int32("micro-batches");
      pin.schedule = parse_pp_schedule(o.get_text("schedule"));
      const PipelinePlan plan = plan_pipeline(pin);
      TP_CHECK_INPUT(plan.problems.empty() || !plan.tp.problems.empty(),
                     problems_message(plan.problems));
      std::printf("%s", preflight_report(plan.tp).c_str());
      if (!plan.tp.problems.empty()) return 2;
      std::printf("%s", pipeline_report(plan).c_str());
      return 0;
    }
    const Preflight p = preflight(base);
    std::printf("%s", preflight_report(p).c_str());
    if (p.problems.empty())
      std::printf("\n%s", memory_stack_table(p.in.model, p.in.batch, p.in.t, world_of(o, p.in.t),
                                             p.in.micro_batches)
                              .c_str());
    return p.problems.empty() ? 0 : 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
}
