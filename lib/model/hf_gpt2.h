// hf_gpt2.h — GPT-2 model files in the Hugging Face layout, in and out.
//
// A GPT-2 file as the hub ships it (model.safetensors) holds the weights only, under the names of
// GPT2Model, without the "transformer." prefix that GPT2LMHeadModel adds (a file that
// save_pretrained writes for GPT2LMHeadModel has it):
//
//   wte.weight (V, h)   wpe.weight (P, h)   ln_f.weight / .bias (h)
//   h.N.ln_1.weight / .bias (h)             h.N.ln_2.weight / .bias (h)
//   h.N.attn.c_attn.weight (h, 3h), .bias (3h)     columns [q | k | v], each head-major
//   h.N.attn.c_proj.weight (h, h), .bias (h)
//   h.N.mlp.c_fc.weight (h, ffn), .bias (ffn)      h.N.mlp.c_proj.weight (ffn, h), .bias (h)
//   lm_head.weight (V, h)                          optional: GPT-2 ties it to wte
//   h.N.attn.bias, h.N.attn.masked_bias            the causal mask as a buffer: ignored
//
// The matrices are Conv1D weights, stored (in, out): y = x W + b. That is this project's own
// checkpoint layout (model/checkpoint.h), so a hub file differs from a checkpoint only in the
// prefix, the dtype (F16 and BF16 are common; read as F32), the missing metadata (the shape comes
// from the tensors, the number of heads from config.json beside the file) and the missing
// optimizer state. The head split under TP needs no reordering: q's columns are head-major, so the
// column block [r·h/t, (r+1)·h/t) of q (and of k, and of v) is exactly heads [r·nh/t, (r+1)·nh/t),
// which is what rank r's column-parallel q, k and v own.
//
// The model is GPT-2's: pre-norm LayerNorm (ε from config.json, 1e-5 by default), GeLU with the
// tanh approximation ("gelu_new"), learned positions, biases everywhere, attention scaled by
// 1/√(h/nh), tied head. Files of other architectures are refused with one line saying why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "model/config.h"
#include "model/gpt.h"

namespace tp {

/// What a model file holds, found by reading its header (and config.json beside a hub file).
struct ModelFile {
  std::string path;
  bool hub = false;    ///< a Hugging Face GPT-2 file, not a checkpoint of this project
  std::string prefix;  ///< "transformer." or "": how the file names wte, wpe, h.N.… and ln_f
  /// The model's shape: layers, hidden, heads, kv_heads, ffn, vocab, seq (= the number of
  /// positions the file's wpe holds), act, norm, tied, eps. Everything else is GptConfig's default.
  GptConfig config;
  std::string heads_from;  ///< where heads came from: "config.json", "metadata" or "--heads"
  int64_t ignored = 0;     ///< tensors not loaded: the hub's attention-mask buffers
  std::string dtype;       ///< "F32", "F16", "BF16" or "mixed"
  bool checksums = false;  ///< its tensors carry checksums (verified on load; unverified_note)
  /// One line: "Hugging Face GPT-2 (hub layout, F16, heads from config.json)" or "checkpoint".
  std::string describe() const;
};

/// Reads the header of `path` and says what it holds: this project's checkpoint (its metadata
/// gives the configuration) or a hub-layout GPT-2 (the tensors give the shape; heads from
/// `dirname(path)/config.json` when it is there, else from `heads`, the --heads value, 0 when not
/// given). Every problem is one bad-input line naming the file: neither layout, a missing or
/// extra tensor, a shape that disagrees with the rest of the file or with config.json, a dtype
/// that is not F32/F16/BF16, an architecture GPT-2 is not (config.json's activation_function).
ModelFile inspect_model_file(const std::string& path, int64_t heads);

/// Loads the weights of `file` into `model` (whose configuration must have the file's shape;
/// collective only in that every rank reads the file). Weights only: the optimizer is untouched.
void load_model_file(const ModelFile& file, Communicator& comm, Gpt& model);

/// Writes `dir`/model.safetensors and `dir`/config.json, a GPT2LMHeadModel that transformers loads:
/// the names of its save_pretrained ("transformer." prefix; lm_head.weight only when untied),
/// F32 (or BF16 with dtype = Dtype::bf16: the fp32 masters rounded to nearest even, config.json's
/// torch_dtype "bfloat16"), weights only, no vocabulary padding, metadata {"format": "pt"}.
/// Creates `dir` if needed. Collective (an all-gather per split parameter); rank 0 writes. A model
/// GPT-2 cannot express (SwiGLU, RMSNorm, GQA) is a bad-input error.
void export_hf(const std::string& dir, Communicator& comm, const Gpt& model,
               Dtype dtype = Dtype::f32);

/// The same for one stage of a pipeline (`pp` its PP group, `tp` its TP group): each stage gathers
/// its weights over `tp`, the TP rank 0s send them to the first stage, and its TP rank 0 writes the
/// one export (the tied wte that the first and last stage both hold, once). Collective over `tp`
/// and, on the TP rank 0s, over `pp`; with pp.size() = 1 it is export_hf above.
void export_hf(const std::string& dir, Communicator& tp, Communicator& pp, const Gpt& model,
               Dtype dtype = Dtype::f32);

/// Why a model of `cfg` cannot be written as GPT-2 ("--act swiglu (GPT-2 has a GeLU MLP)", ...),
/// or "" when it can.
std::string hf_export_problem(const GptConfig& cfg);

/// The config.json text export_hf writes for `cfg`.
std::string hf_config_json(const GptConfig& cfg, Dtype dtype = Dtype::f32);

}  // namespace tp
