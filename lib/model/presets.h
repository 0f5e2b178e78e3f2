// presets.h — named model shapes, so that a program says which model it means instead of
// setting seven fields by hand: the published models tp_preflight --model knows (their sizes from
// their config.json files) and the small shapes the tests and lessons train in seconds on a CPU.
//
// Shape legend: L layers, h hidden, nh query heads, nkv key/value heads, f the MLP inner size,
// V the vocabulary, S the position table (the longest sequence).
//
//   name           L    h     nh  nkv  f      V       S     act     norm       tied
//   gpt2-small     12   768   12  12   3072   50257   1024  gelu    layernorm  yes
//   gpt2-medium    24   1024  16  16   4096   50257   1024  gelu    layernorm  yes
//   qwen3-8b       36   4096  32  8    12288  151936  8192  swiglu  rmsnorm    no
//   llama2-7b      32   4096  32  32   11008  32000   4096  swiglu  rmsnorm    no
//   llama2-70b     80   8192  64  8    28672  32000   4096  swiglu  rmsnorm    no
//   mixtral-8x7b   32   4096  32  8    14336  32000   32768 swiglu  rmsnorm    no  (E 8, k 2)
//
// mixtral-8x7b: every block's MLP is 8 experts of f = 14336, 2 per token (model/moe.h); S is its
// max_position_embeddings, so this project's learned wpe adds S·h = 134M parameters its RoPE does
// not have (tp_preflight prints the count without them).
//
// The small shapes (GeLU, LayerNorm, tied; see each function for why its sizes are what they are):
//   tiny_gpt       L    24    12  12   48     32      12    init_std 0.1
//   small_gpt      2    48    12  12   96     64      S
//   mini_gpt       1    16    2   2    32     16      4
//   lesson_gpt     L    h     4   4    4h     V       S
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace tp {

/// A GeLU, LayerNorm, tied GPT of the sizes given in the legend's order: L, h, nh, nkv, f, V, S
/// (nkv = 0 means nh and f = 0 means 4h, as in GptConfig); every other field GptConfig's default.
/// For a test's one-off shape; a shape that several programs use gets a name below.
GptConfig gpt_shape(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                    int64_t vocab, int64_t seq);

/// The named model shapes tp_preflight --model knows: "gpt2-small", "gpt2-medium", "qwen3-8b",
/// "llama2-7b", "llama2-70b", "mixtral-8x7b". Throws a bad-input tp::Error naming them for any other name.
GptConfig model_preset(const std::string& name);
/// Their names, for --help.
std::vector<std::string> model_preset_names();

/// The smallest GPT whose every split size and sequence divide by t = 1, 2, 3, 4: h = 24,
/// nh = nkv = 12 (head_dim 2), f = 48, V = 32, S = 12; init_std 0.1 so that attention is far
/// from uniform. `layers` blocks.
GptConfig tiny_gpt(int64_t layers = 2);

/// The small GPT most model tests use: L = 2, h = 48, nh = nkv = 12 (head_dim 4, MHA), f = 96,
/// V = 64, position table `seq`: every size divides by t = 1, 2, 3, 4.
GptConfig small_gpt(int64_t seq = 8);

/// A GPT of one block small enough for grid and checkpoint tests: h = 16, nh = 2, f = 32, V = 16
/// (divisible by every t of a 4-rank job: no padding rows), S = 4.
GptConfig mini_gpt();

/// The small GPTs the lessons train beside one device in seconds: 4 heads (whole heads on each
/// rank at t = 1, 2, 4), f = 4h, GeLU, LayerNorm, tied; L, h (32 in most lessons), V and S as
/// the lesson's step needs them. A lesson prints the shape it uses (GptConfig::str()).
GptConfig lesson_gpt(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq);

}  // namespace tp
