// tp_preflight — [A2]'s pre-launch checklist as a program: a model and a tensor-parallel size t
// in; every problem (each with its fix), the shard of every tensor, the memory of each rank, the
// collectives of a step and their time on NVLink and InfiniBand out (lib/model/preflight.h has the
// formulas). One process, no MPI, no device: it only does arithmetic.
//
//   build/bin/tp_preflight -t 3                                  (tp_train's default model at t = 3)
//   build/bin/tp_preflight --model qwen3-8b -t 8 --batch 1       ([A3]: 0.26 ms vs 2.3 ms)
//   build/bin/tp_preflight --model llama2-70b -t 16 --gpus-per-node 8 --nodes 2 --kv-replication
//   build/bin/tp_preflight --hidden 50 --heads 4 --ffn 7 -t 2    (exit 2: every problem at once)
//
// Exit status: 0 when the configuration can run (warnings and notes do not count), 2 when there is
// any problem or a bad flag.
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/options.h"
#include "model/preflight.h"

using namespace tp;

namespace {

std::string presets() {
  std::string s;
  for (const auto& n : model_preset_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
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
  in.model = c;
  in.batch = o.get_int("batch") != 0 ? o.get_int("batch") : (preset.empty() ? 8 : 1);
  in.t = o.get_int32("tp");
  const std::string dtype = o.get_text("dtype") != "auto" ? o.get_text("dtype")
                            : preset.empty()              ? "fp32"
                                                          : "bf16";
  in.dtype_bytes = dtype == "fp32" ? 4 : 2;
  in.kv_replication = o.get_flag("kv-replication");
  in.nodes = o.get_int32("nodes");
  in.gpus_per_node = o.get_int32("gpus-per-node");
  in.flops = o.get_real("tflops") * 1e12;
  return in;
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
      .text("model", "", "start from a named model: " + presets())
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
      .flag("kv-replication",
            "when kv-heads < t, plan KV-head replication (t / kv-heads copies of each) instead "
            "of reporting a problem; tp_train's model cannot")
      .integer("nodes", 0, "nodes of the job (0 = not given)")
      .fits_int()
      .integer("gpus-per-node", 0, "GPUs per node (0 = not given): warns when t spans nodes")
      .fits_int()
      .real("tflops", 400.0, "dense FLOP rate of one GPU in TFLOPS, for the compute time");
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
    const Preflight p = preflight(input_from(o));
    std::printf("%s", preflight_report(p).c_str());
    return p.problems.empty() ? 0 : 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
}
