// train_options.cpp — tp_train's option table (train_options.h).
#include "train/train_options.h"

#include <string>

#include "model/pipeline_plan.h"
#include "model/preflight_cp.h"
#include "model/preflight_moe.h"

namespace tp {

namespace {

// The model: blocks, widths, heads, vocabulary, sequence length.
void declare_model_shape(Options& o) {
  o.integer("layers", 2, "transformer blocks L")
      .min(1)
      .integer("hidden", 64, "hidden size h")
      .min(1)
      .integer("heads", 4, "attention heads (divisible by t)")
      .min(1)
      .integer("kv-heads", 0, "key/value heads for GQA; 0 = heads")
      .non_negative()
      .integer("ffn", 0, "MLP inner size; 0 = 4 h")
      .non_negative()
      .integer("vocab", 0,
               "vocabulary V; 0 = 256 (the Markov data's default, and bytes for --data)")
      .non_negative()
      .integer("seq", 64, "sequence length = size of the position table")
      .min(1);
}

// The batch, the replicas, the steps and the optimiser.
void declare_optimisation(Options& o) {
  o.integer("batch", 8, "sequences per step")
      .min(1)
      .integer("dp", 1,
               "data-parallel replicas: np = tp × dp; each TP group of np/dp adjacent ranks takes "
               "batch/dp sequences and the gradients are averaged over the replicas")
      .min(1)
      .fits_int()
      .integer("steps", 50,
               "steps to run: from a fresh start or --load, N more (0: just --save the initial "
               "weights); with --resume, the step the run ends at (the same command finishes "
               "the same run)")
      .non_negative()
      .max(kMaxSteps)
      .real("lr", 1e-3, "peak learning rate (constant unless --warmup / --decay-steps)")
      .positive()
      .as_float()
      .integer("warmup", 0, "linear warm-up over the first N steps (absolute step numbers)")
      .non_negative()
      .max(kMaxSteps)
      .integer("decay-steps", 0, "cosine decay to 10% of lr, ending at absolute step N (0 = none)")
      .non_negative()
      .max(kMaxSteps)
      .real("weight-decay", 0.0, "AdamW decoupled weight decay on matrices")
      .non_negative()
      .as_float()
      .real("clip", 1.0, "clip the global gradient norm to this (0 = no clipping)")
      .non_negative()
      .as_float()
      .integer("seed", 1234, "seed of the initial weights, the data and dropout")
      .real("dropout", 0.0, "dropout probability (embedding and both residual branches)")
      .min(0)
      .max(1, true)
      .as_float();
}

// How the layers compute and split: activation, norm, SP, overlap, recomputation, precision, micro-batches, ZeRO, the memory budget, the pipeline.
void declare_layer_forms(Options& o) {
  o.text("act", "gelu", "MLP activation", {"gelu", "swiglu"})
      .text("norm", "layernorm", "normalisation", {"layernorm", "rmsnorm"})
      .flag("untie", "give the LM head its own weight instead of tying it to wte")
      .flag("sp", "sequence parallelism: between the TP regions each rank keeps seq/t tokens")
      .text("overlap", "async",
            "overlap communication with compute: none, async (backward's all-reduce under the "
            "weight-gradient GEMMs), ring (collective matmul; needs --sp), chunked (row blocks of "
            "the GEMMs, each block's all-reduce under the next block's GEMM; without --sp)",
            {"none", "async", "ring", "chunked"})
      .text("recompute", "none",
            "activation recomputation: none, selective (the attention probabilities are "
            "recomputed in backward), full (each block keeps its input and reruns its forward)",
            {"none", "selective", "full"})
      .text("precision", "fp32",
            "fp32, or bf16 mixed precision: bf16 weight copies, activations and TP collectives "
            "over fp32 master weights, AdamW state, weight gradients and statistics",
            {"fp32", "bf16"})
      .integer("micro-batches", 1,
               "gradient accumulation: each replica runs its batch/dp sequences as m micro-batches "
               "and steps once")
      .min(1)
      .fits_int()
      .integer("zero", 0,
               "ZeRO stage on the dp axis: 0, or 1 (AdamW's moments sharded over the replicas)")
      .non_negative()
      .fits_int()
      .real("memory-budget", 0,
            "MiB per rank: before building the model, stop (exit 2) when the preflight's peak "
            "per rank is above it, naming the first option that fits in the articles' order "
            "(--precision bf16, --recompute, --micro-batches, --zero 1, and a larger t last: "
            "each step up in t adds communication); checked against the memory ledger after "
            "step 1 (0 = no budget)")
      .min(1)
      .zero_means_off();
  declare_mixture_of_experts_options(o);  // tp_preflight's too
  declare_pipeline_options(o);            // --pp, --schedule: tp_preflight's too
  declare_context_parallel_options(o);    // --cp, --cp-layout: tp_preflight's too
  o.text("pp-layers", "", "blocks per stage with --pp, e.g. 3,5 (default: an even split)")
      .integer("pad-vocab-multiple", 1, "pad the vocabulary to a multiple of this times t")
      .min(1)
      .flag("audit-grads",
            "before training, check every replicated gradient against t = 1 and across ranks");
}

// The data, the checkpoints (save, resume, load, export) and what to do with a bad step.
void declare_data_and_checkpoints(Options& o) {
  o.path("data", "", "train on the bytes of this file (V = 256) instead of the Markov data")
      .path("tokenizer", "",
            "with --data: train on the file's GPT-2 BPE ids (a folder with vocab.json + "
            "merges.txt or encoder.json + vocab.bpe; V = its vocabulary, 50257)")
      .path("save", "",
            "write a checkpoint (safetensors) here at the end; a folder (existing, or ending in "
            "/) gets DIR/checkpoint-stepNNNNNN.safetensors, and --save-every's files go beside "
            "(FILE-stepNNNNNN.safetensors)")
      .integer("save-every", 0,
               "also save every N steps to --save's series, <stem>-stepNNNNNN.safetensors "
               "(atomically; 0 = only at the end)")
      .non_negative()
      .max(kMaxSteps)
      .integer("keep", 3, "--save-every: keep the newest K files of the series")
      .min(1)
      .max(1000)
      .fits_int()
      .text("resume", "",
            "auto: resume from the newest valid checkpoint of --save (its series or the file; a "
            "bad newer one is named and skipped), exit 2 when there is none; auto-or-fresh: the "
            "same, or start fresh when there is none")
      .non_empty()
      .flag("replace-series",
            "a run that does not continue --save's series (no --resume, no --load of one of its "
            "files) refuses to start when it holds another run's checkpoints; with this flag it "
            "starts and deletes them once its own first checkpoint is written")
      .path("load", "",
            "resume from this checkpoint (weights, optimizer state, step; the shape from the "
            "file unless given)")
      .path("init-from", "",
            "start from the weights of this file, AdamW fresh at step 0: a GPT-2 in the Hugging "
            "Face layout (F32/F16/BF16; the shape from the file, heads from config.json beside "
            "it or --heads) or a checkpoint; --seq may be shorter than its position table")
      .path("export-hf", "",
            "at the end, write DIR/model.safetensors and DIR/config.json that transformers loads "
            "as GPT2LMHeadModel")
      .text("export-dtype", "f32",
            "the dtype --export-hf writes: f32, or bf16 (the fp32 weights rounded)",
            {"f32", "bf16"})
      .flag("skip-nonfinite",
            "skip (and count) a step whose loss or gradient norm is NaN/Inf instead of stopping "
            "the run with exit 3")
      .path("dump-grads", "",
            "after the first backward, write every global gradient, the batch and the loss here");
}

// What the run reports: the JSON log, the link prediction, the timeline, the plot, MFU, evaluation, progress lines.
void declare_reports(Options& o) {
  o.path("log-json", "", "append one JSON object per step to this file")
      .flag("predict",
            "measure the link's α and β at the start, and after the first warm step print each "
            "collective's α–β prediction against its measured time, per op and per label")
      .path("trace", "",
            "write a timeline of the last " + std::to_string(kTraceSteps) +
                " steps here (Chrome/Perfetto JSON) and beside it as SVG")
      .path("plot", "", "write the loss curve of this run here (SVG)")
      .real("peak-tflops", 0,
            "the peak TFLOP/s of one rank that MFU divides by (0: on the CPU the one-thread sgemm "
            "ceiling, measured once per machine and cached, times the threads; on the GPU the "
            "measured fp32 GEMM ceiling)")
      .min(1e-6)  // 1 MFLOP/s: below, the MFU is a meaningless number
      .zero_means_off()
      .real("val-fraction", 0.05,
            "--data: hold out the last fraction of the file for validation (the Markov data has "
            "its own held-out stream)")
      .min(0)
      .max(1, true)
      .integer("eval-every", 0,
               "every N steps (and at the last) print the mean loss over --eval-batches held-out "
               "batches, forward only, no dropout (0 = never)")
      .non_negative()
      .max(kMaxSteps)
      .integer("eval-batches", 4, "--eval-every: held-out batches of --batch sequences")
      .min(1)
      .max(10000)
      .integer("log-every", 10, "print a progress line every N steps")
      .min(1)
      .max(kMaxSteps);
}

}  // namespace

void declare_train_options(Options& o) {
  declare_model_shape(o);
  declare_optimisation(o);
  declare_layer_forms(o);
  declare_data_and_checkpoints(o);
  declare_reports(o);
}

}  // namespace tp
