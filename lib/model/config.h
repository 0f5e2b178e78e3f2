// config.h — the GPT configuration and its preflight check.
//
// The model (see docs/model.md for the full description): GPT-2 style, pre-norm. Token embedding
// wte (V, h) + learned position embedding wpe (S, h); L blocks of x + attn(ln_1(x)) and
// x + mlp(ln_2(x)); a final ln_f; logits = ln_f(x) wteᵀ (tied head) or ln_f(x) lm_headᵀ; mean
// cross-entropy over all B·S positions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/recompute.h"             // Recompute
#include "parallel/collective_matmul.h"  // Overlap

namespace tp {

/// The MLP's activation (--act, checkpoint metadata "act"): GeLU (tanh approximation) or SwiGLU.
enum class Activation { Gelu, SwiGlu };
/// The normalisation of every block and of ln_f (--norm, checkpoint metadata "norm").
enum class NormKind { LayerNorm, RmsNorm };

/// "gelu" | "swiglu"; anything else is bad input (one line naming the choices).
Activation parse_activation(const std::string& name);
/// The name parse_activation takes: "gelu" or "swiglu". Inline, so that what reads checkpoint
/// metadata (and its fuzz target) needs no more than this header.
inline const char* activation_name(Activation act) {
  return act == Activation::SwiGlu ? "swiglu" : "gelu";
}
/// "layernorm" | "rmsnorm"; anything else is bad input (one line naming the choices).
NormKind parse_norm(const std::string& name);
/// The name parse_norm takes: "layernorm" or "rmsnorm".
inline const char* norm_name(NormKind norm) {
  return norm == NormKind::RmsNorm ? "rmsnorm" : "layernorm";
}

/// How the model stores and computes (--precision; docs/model.md, "Precision"): fp32 everywhere,
/// or bf16 mixed precision — bf16 weight copies, activations, activation gradients and TP
/// collectives over fp32 master weights, AdamW state, weight gradients and statistics.
enum class Precision { Fp32, Bf16 };
/// "fp32" | "bf16"; anything else is bad input (one line naming the choices).
Precision parse_precision(const std::string& name);
/// The name parse_precision takes: "fp32" or "bf16".
const char* precision_name(Precision precision);

struct GptConfig {
  int64_t layers = 2;    ///< L
  int64_t hidden = 64;   ///< h
  int64_t heads = 4;     ///< nh, query heads
  int64_t kv_heads = 0;  ///< nkv, key/value heads (GQA); 0 means nh (multi-head attention)
  int64_t ffn = 0;       ///< MLP inner size; 0 means 4h
  int64_t vocab = 256;   ///< V
  int64_t seq = 64;      ///< S, the length of the position table (and the longest sequence)
  Activation act = Activation::Gelu;    ///< GeLU (tanh approximation) or SwiGLU (--act)
  NormKind norm = NormKind::LayerNorm;  ///< LayerNorm or RMSNorm (--norm)
  float dropout = 0.0f;                 ///< p for the embedding and both residual branches
  bool tied = true;                     ///< LM head tied to wte
  float init_std = 0.02f;  ///< N(0, init_std) for weights; output projections use init_std/√(2L)
  float eps = 1e-5f;       ///< norm epsilon
  bool sp = false;         ///< sequence parallelism between the TP regions (--sp)
  /// How the TP layers overlap communication with compute: none, async, ring (needs sp) or
  /// chunked (plain TP, no sp);
  /// parallel/collective_matmul.h. The numbers do not depend on it (to float rounding for ring).
  Overlap overlap = Overlap::None;
  /// Activation recomputation: none, selective (the attention probabilities are recomputed in
  /// backward) or full (each block keeps its input only and reruns its forward); model/recompute.h.
  /// The gradients do not depend on it (bitwise).
  Recompute recompute = Recompute::None;
  int64_t pad_vocab_multiple = 1;  ///< V is padded up to a multiple of pad_vocab_multiple · t
  /// fp32 or bf16 mixed precision (--precision). Not part of a checkpoint: the file holds the fp32
  /// master, so a run saved in one precision resumes in the other.
  Precision precision = Precision::Fp32;
  /// Mixture of experts (model/moe.h; --experts, issue 43): 0 = every block has the dense MLP;
  /// E > 0 = block l's MLP is E experts with a top-k router when l % moe_every == moe_every − 1
  /// (moe_every 1: every block; 2: blocks 1, 3, …, GShard's every other layer). The experts are
  /// whole on every TP rank (no expert TP, no expert parallelism yet).
  int experts = 0;
  int top_k = 2;                 ///< k experts per token (--top-k)
  int moe_every = 1;             ///< --moe-every
  double aux_loss_coef = 0.01;   ///< α of the load-balancing loss (--aux-loss-coef; Switch's)
  double z_loss_coef = 1e-3;     ///< β of the router z-loss (--z-loss-coef; ST-MoE's)
  double capacity_factor = 0.0;  ///< 0: dropless; c > 0: ceil(c·N·k/E) tokens per expert
  bool is_moe_block(int64_t layer) const {
    return experts > 0 && moe_every > 0 && layer % moe_every == moe_every - 1;
  }
  /// The dtype of activations, their gradients and the weights' compute copies: bf16 under
  /// Precision::Bf16, else f32. Master weights, gradients and AdamW state are f32 either way.
  Dtype compute_dtype() const { return precision == Precision::Bf16 ? Dtype::bf16 : Dtype::f32; }

  /// act and norm (the accessors from before they were enums; the fields say the same).
  Activation activation() const { return act; }
  NormKind norm_kind() const { return norm; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t inner() const { return ffn > 0 ? ffn : 4 * hidden; }
  int64_t head_dim() const { return heads > 0 ? hidden / heads : 0; }
  /// V rounded up to a multiple of pad_vocab_multiple · t, so every rank owns the same number of
  /// vocabulary rows. The padded rows are never looked up and never win the softmax.
  int64_t padded_vocab(int t) const {
    const int64_t m = pad_vocab_multiple * t;
    return m > 0 ? (vocab + m - 1) / m * m : vocab;
  }

  /// The largest size flag (layers, hidden, heads, ffn, vocab, seq, ...) problems() accepts.
  static constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;
  /// The most parameters (or elements of any tensor size computed from the config and the batch)
  /// problems() and the preflight accept: 2^50, 4 PiB in fp32, beyond any machine, and far from
  /// where 64-bit byte counts overflow.
  static constexpr double kMaxElements = 1125899906842624.0;
  /// The parameter count at tensor-parallel size t (the vocabulary padded), in floating point so
  /// that it cannot overflow whatever the sizes.
  double approx_parameters(int t) const;

  /// Every problem of this config for tensor-parallel size t, each one line naming the value and
  /// the fix. Empty when the config is valid. `t_label` says what t is where a message names it
  /// ("heads=6 is not divisible by t=4 (the number of ranks)"): a caller whose t is not the number
  /// of ranks (tp_train --dp) passes its own.
  std::vector<std::string> problems(int t,
                                    const std::string& t_label = "the number of ranks") const;
  /// Throws one bad-input tp::Error listing all problems ("; "-separated) when there are any.
  void validate(int t) const;
  /// "L=2 h=64 nh=4 nkv=4 ffn=256 V=256 S=64 gelu layernorm dropout=0 tied" (+ " sp", and
  /// " overlap=async" unless none, " recompute=full" unless none, " bf16" under Precision::Bf16)
  std::string str() const;
};

}  // namespace tp
