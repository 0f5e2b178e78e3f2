#include "model/presets.h"

#include "core/error.h"

namespace tp {

GptConfig gpt_shape(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                    int64_t vocab, int64_t seq) {
  // GptConfig is an aggregate whose first seven fields are these, in this order (config.h);
  // the rest keep their defaults.
  return GptConfig{layers, hidden, heads, kv_heads, ffn, vocab, seq};
}

namespace {

// The Llama family's choices over a shape: SwiGLU, RMSNorm, an LM head of its own. (GPT-2's
// GeLU, LayerNorm and tied head are GptConfig's defaults.)
GptConfig llama_like(GptConfig c) {
  c.act = Activation::SwiGlu;
  c.norm = NormKind::RmsNorm;
  c.tied = false;
  return c;
}

// A mixture of experts over a shape: every block's MLP as E experts of its ffn, top-k.
GptConfig mixture(GptConfig c, int experts, int top_k) {
  c.experts = experts;
  c.top_k = top_k;
  return c;
}

struct Preset {
  const char* name;
  GptConfig config;
};

// One row a published model (presets.h has the legend); model_preset and --help read it.
const Preset kPresets[] = {
    {"gpt2-small", gpt_shape(12, 768, 12, 12, 3072, 50257, 1024)},
    {"gpt2-medium", gpt_shape(24, 1024, 16, 16, 4096, 50257, 1024)},
    {"qwen3-8b", llama_like(gpt_shape(36, 4096, 32, 8, 12288, 151936, 8192))},  // [A3], 8K tokens
    {"llama2-7b", llama_like(gpt_shape(32, 4096, 32, 32, 11008, 32000, 4096))},
    {"llama2-70b", llama_like(gpt_shape(80, 8192, 64, 8, 28672, 32000, 4096))},
    {"mixtral-8x7b", mixture(llama_like(gpt_shape(32, 4096, 32, 8, 14336, 32000, 32768)), 8, 2)},
};

}  // namespace

GptConfig model_preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.config;
  std::string names;
  for (const auto& n : model_preset_names()) names += (names.empty() ? "" : ", ") + n;
  TP_CHECK_INPUT(false, "--model=", name, ": expected one of ", names);
  return GptConfig{};  // not reached: TP_CHECK_INPUT(false, ...) throws
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

GptConfig tiny_gpt(int64_t layers) {
  GptConfig c = gpt_shape(layers, 24, 12, 12, 48, 32, 12);
  c.init_std = 0.1f;
  return c;
}

GptConfig small_gpt(int64_t seq) { return gpt_shape(2, 48, 12, 12, 96, 64, seq); }

GptConfig mini_gpt() { return gpt_shape(1, 16, 2, 0, 32, 16, 4); }

GptConfig lesson_gpt(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq) {
  return gpt_shape(layers, hidden, 4, 0, 0, vocab, seq);
}

}  // namespace tp
