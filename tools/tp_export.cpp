// tp_export — writes a checkpoint of this project as a Hugging Face GPT-2 that transformers loads.
//
//   mpirun -np 1 build/bin/tp_export --load run.safetensors --hf run-hf
//     → run-hf/model.safetensors (GPT2LMHeadModel's names, F32 or with --export-dtype bf16 BF16,
//       weights only, metadata {"format": "pt"}) and run-hf/config.json
//
//   python3 -c "from transformers import GPT2LMHeadModel; GPT2LMHeadModel.from_pretrained('run-hf')"
//
// The shape comes from the checkpoint's metadata. Any file --init-from accepts works too (a hub
// file in F16 becomes an F32 GPT2LMHeadModel file). Any number of ranks: the model is loaded
// split over them and gathered again to write (lib/model/hf_gpt2.h does both).
#include "core/error.h"
#include "core/log.h"
#include "launcher.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"

using namespace tp;

namespace {

int run(Context& ctx) {
  const Options& o = ctx.options;
  const std::string load = o.get_text("load"), dir = o.get_text("hf");
  TP_CHECK_INPUT(!load.empty() && !dir.empty(),
                 "tp_export needs --load FILE and --hf DIR (e.g. --load run.safetensors --hf "
                 "run-hf)");
  const ModelFile file = inspect_model_file(load, o.get_int("heads"));
  GptConfig cfg = file.config;
  const std::string cannot = hf_export_problem(cfg);
  TP_CHECK_INPUT(cannot.empty(), load, " cannot be written as a Hugging Face GPT-2: it has ",
                 cannot);
  Gpt model(ctx.device, ctx.world, cfg);
  load_model_file(file, ctx.world, model);
  const bool bf16 = o.get_text("export-dtype") == "bf16";
  export_hf(dir, ctx.world, model, bf16 ? Dtype::bf16 : Dtype::f32);
  log0(ctx.world, "read ", load, ", ", file.describe(), ": ", cfg.str());
  if (!file.checksums) log0(ctx.world, unverified_note(load));
  log0(ctx.world, "wrote ", dir, "/model.safetensors and ", dir, "/config.json (GPT2LMHeadModel, ",
       bf16 ? "BF16" : "F32", ", weights only)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o("tp_export",
            "Writes a checkpoint (or any file --init-from accepts) as a Hugging Face GPT-2: "
            "DIR/model.safetensors and DIR/config.json.");
  o.path("load", "", "the checkpoint to read (tp_train --save)")
      .path("hf", "", "the folder to write model.safetensors and config.json to")
      .integer("heads", 0, "attention heads, for a hub file without config.json beside it")
      .non_negative()
      .text("export-dtype", "f32", "the dtype of the tensors written: f32, or bf16 (rounded)",
            {"f32", "bf16"});
  return run_program(argc, argv, o, run);
}
