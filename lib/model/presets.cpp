#include "model/presets.h"

#include "core/error.h"

namespace tp {

GptConfig model_preset(const std::string& name) {
  GptConfig c;
  auto set = [&](int64_t L, int64_t h, int64_t nh, int64_t nkv, int64_t f, int64_t V, int64_t S,
                 Activation act, NormKind norm, bool tied) {
    c.layers = L;
    c.hidden = h;
    c.heads = nh;
    c.kv_heads = nkv;
    c.ffn = f;
    c.vocab = V;
    c.seq = S;
    c.act = act;
    c.norm = norm;
    c.tied = tied;
  };
  if (name == "gpt2-small")
    set(12, 768, 12, 12, 3072, 50257, 1024, Activation::Gelu, NormKind::LayerNorm, true);
  else if (name == "gpt2-medium")
    set(24, 1024, 16, 16, 4096, 50257, 1024, Activation::Gelu, NormKind::LayerNorm, true);
  else if (name == "qwen3-8b")  // [A3]'s model, at its 8K-token sample
    set(36, 4096, 32, 8, 12288, 151936, 8192, Activation::SwiGlu, NormKind::RmsNorm, false);
  else if (name == "llama2-7b")
    set(32, 4096, 32, 32, 11008, 32000, 4096, Activation::SwiGlu, NormKind::RmsNorm, false);
  else if (name == "llama2-70b")
    set(80, 8192, 64, 8, 28672, 32000, 4096, Activation::SwiGlu, NormKind::RmsNorm, false);
  else {
    std::string names;
    for (const auto& n : model_preset_names()) names += (names.empty() ? "" : ", ") + n;
    TP_CHECK_INPUT(false, "--model=", name, ": expected one of ", names);
  }
  return c;
}

std::vector<std::string> model_preset_names() {
  return {"gpt2-small", "gpt2-medium", "qwen3-8b", "llama2-7b", "llama2-70b"};
}

GptConfig tiny_gpt(int64_t layers) {
  GptConfig c;
  c.layers = layers;
  c.hidden = 24;
  c.heads = 12;
  c.kv_heads = 12;
  c.ffn = 48;
  c.vocab = 32;
  c.seq = 12;
  c.init_std = 0.1f;
  return c;
}

GptConfig small_gpt(int64_t seq) {
  GptConfig c;
  c.layers = 2;
  c.hidden = 48;
  c.heads = 12;
  c.kv_heads = 12;
  c.ffn = 96;
  c.vocab = 64;
  c.seq = seq;
  return c;
}

GptConfig mini_gpt() {
  GptConfig c;
  c.layers = 1;
  c.hidden = 16;
  c.heads = 2;
  c.ffn = 32;
  c.vocab = 16;
  c.seq = 4;
  return c;
}

}  // namespace tp
