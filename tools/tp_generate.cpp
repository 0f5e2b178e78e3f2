// tp_generate — generates text from a tp_train checkpoint with tensor parallelism; t = the number
// of ranks, any t that divides the model (heads, key/value heads, MLP size), whatever t it was
// saved at.
//
//   mpirun -np 1 build/bin/tp_train --data README.md --steps 300 --save readme.safetensors
//   mpirun -np 2 build/bin/tp_generate --load readme.safetensors --prompt "Tensor " --tokens 200
//   mpirun -np 4 build/bin/tp_generate --load readme.safetensors --prompt "Tensor " --tokens 200
//       --temperature 0.8 --top-k 20 --seed 7          (one line; the same text at -np 1, 2, 4)
//
// Tokens are bytes for a model with V = 256 (what tp_train --data trains): the prompt's bytes are
// its ids and each generated id is printed as a byte. With --tokenizer DIR (GPT-2's BPE,
// lib/text/bpe.h; the model's V must be the tokenizer's, 50257) the prompt is encoded and every id
// printed as its token's bytes: a model from tp_train --data F --tokenizer DIR, or a Hugging Face
// GPT-2 file (--load of its model.safetensors, heads from the config.json beside it: the real
// GPT-2 talking), is prompted with text. For another V, give the prompt as ids (--prompt-ids "3 1
// 4") and the output is ids.
//
//   mpirun -np 2 build/bin/tp_generate --load gpt2.safetensors --tokenizer DIR --prompt "Hello,"
//
// Each rank keeps the key/value cache of its own heads and the logits of its own vocabulary
// shard; the next token is chosen from the shards with a few one-float collectives
// (lib/model/generate.h, lib/parallel/vocab_sampling.h). The model's configuration comes from the
// checkpoint's metadata, so no model flag is needed.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "launcher.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "model/hf_gpt2.h"
#include "text/bpe.h"

using namespace tp;

namespace {

std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::istringstream is(text);
  std::string word;
  while (is >> word) {
    int64_t v = -1;
    std::istringstream ws(word);
    TP_CHECK_INPUT((ws >> v) && ws.eof() && v >= 0 && v < vocab, "--prompt-ids: '", word,
                   "' is not a token id in [0, ", vocab, ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// Every flag checked before anything is read or communicated; all problems reported at once.
void check_flags(const Options& o) {
  const std::string path = o.get_text("load");
  const int64_t tokens = o.get_int("tokens"), top_k = o.get_int("top-k");
  const double temperature = o.get_real("temperature");
  const std::string prompt = o.get_text("prompt"), prompt_ids = o.get_text("prompt-ids");
  std::vector<std::string> problems;
  if (path.empty()) problems.push_back("--load is required: a checkpoint from tp_train --save");
  if (tokens < 1) problems.push_back("--tokens=" + std::to_string(tokens) + " must be at least 1");
  if (!(temperature >= 0.0 && std::isfinite(temperature))) {
    char t[32];
    std::snprintf(t, sizeof t, "%g", temperature);
    problems.push_back(std::string("--temperature=") + t + " must be 0 (greedy) or positive");
  }
  if (top_k < 0)
    problems.push_back("--top-k=" + std::to_string(top_k) + " must be 0 (off) or more");
  if (prompt.empty() == prompt_ids.empty())
    problems.push_back("give the prompt as --prompt \"text\" or as --prompt-ids \"1 2 3\" (one)");
  if (!problems.empty()) {
    std::string all = problems.size() == 1 ? "" : std::to_string(problems.size()) + " problems: ";
    for (size_t i = 0; i < problems.size(); ++i) all += (i ? "; " : "") + problems[i];
    TP_CHECK_INPUT(false, all);
  }
}

// After the text: the dropped prompt, prefill and decode speeds, the refills, log p of what was
// generated, and (t > 1) the collectives each token cost against their count.
void report(Communicator& world, const GptConfig& cfg, const GenerateStats& st, size_t calls,
            const Options& o) {
  const int64_t tokens = o.get_int("tokens"), top_k = o.get_int("top-k");
  const double temperature = o.get_real("temperature");
  const int t = world.size();
  if (st.prompt_dropped > 0)
    log0(world, "the prompt's first ", st.prompt_dropped,
         " tokens were dropped: the position "
         "table holds ",
         cfg.seq);
  char line[256];
  std::snprintf(line, sizeof line, "prefill: %lld tokens in %.2f ms = %.0f tokens/s%s",
                static_cast<long long>(st.prefill_tokens), 1e3 * st.prefill_seconds,
                st.prefill_tokens / std::max(st.prefill_seconds, 1e-9),
                st.refills ? " (the prompt and the window refills)" : "");
  log0(world, line);
  std::snprintf(line, sizeof line,
                "decode:  %lld tokens in %.2f ms = %.0f tokens/s (%.3f ms/token)",
                static_cast<long long>(st.decode_tokens), 1e3 * st.decode_seconds,
                st.decode_tokens / std::max(st.decode_seconds, 1e-9),
                1e3 * st.decode_seconds / std::max<int64_t>(st.decode_tokens, 1));
  log0(world, line);
  if (st.refills > 0)
    log0(world, "window refills: ", st.refills,
         " (each time the cache filled the position table of ", cfg.seq, ", its last ",
         std::max<int64_t>(1, cfg.seq / 2), " tokens were prefilled again)");
  const double mean_nll = st.nll / std::max<int64_t>(st.decode_tokens, 1);
  std::snprintf(line, sizeof line,
                "generated tokens under the model: mean -log p = %.4f nats (perplexity %.3f)",
                mean_nll, std::exp(mean_nll));
  log0(world, line);
  if (t > 1) {
    // Each token: one forward (the prompt's prefill, a decode step or a window refill) with the
    // embedding's all-reduce and two per block; the sampler's two one-float all-reduces (top-k:
    // one all-gather of 2k floats); log p's three one-float all-reduces.
    const bool topk_path = temperature > 0 && top_k > 0 && top_k < cfg.vocab;
    const int64_t per_token = 1 + 2 * cfg.layers + (topk_path ? 1 : 2) + 3;
    log0(world, "collectives: ", calls, " on each rank",
         calls == static_cast<size_t>(per_token * tokens) ? " = " : " (expected ", tokens,
         " tokens x (1 + 2 x ", cfg.layers, " for the forward + ", topk_path ? 1 : 2,
         " sampling + 3 log p)", calls == static_cast<size_t>(per_token * tokens) ? "" : ")");
  }
}

int generate_main(Context& ctx) {
  const Options& o = ctx.options;
  Communicator& world = ctx.world;
  const std::string path = o.get_text("load");
  const int64_t tokens = o.get_int("tokens"), top_k = o.get_int("top-k");
  const double temperature = o.get_real("temperature");
  const std::string prompt = o.get_text("prompt"), prompt_ids = o.get_text("prompt-ids");
  check_flags(o);

  // A checkpoint of this project, or a Hugging Face GPT-2 file (hub layout; heads from the
  // config.json beside it): lib/model/hf_gpt2.h.
  const ModelFile file = inspect_model_file(path, 0);
  GptConfig cfg = file.hub ? file.config : config_from_checkpoint(path);
  cfg.precision = parse_precision(o.get_text("precision"));  // the file holds the fp32 master
  // --tokenizer: text in and out through GPT-2's BPE; its vocabulary must be the model's.
  const std::string tokenizer_dir = o.get_text("tokenizer");
  std::unique_ptr<text::Tokenizer> tokenizer;
  if (!tokenizer_dir.empty()) {
    tokenizer = std::make_unique<text::Tokenizer>(text::Tokenizer::load(tokenizer_dir));
    TP_CHECK_INPUT(tokenizer->vocab_size() == cfg.vocab, path, " has a vocabulary of ", cfg.vocab,
                   ", the tokenizer in ", tokenizer_dir, " one of ", tokenizer->vocab_size(),
                   ": give the tokenizer the model was trained with (or no --tokenizer)");
  }
  const bool bytes = cfg.vocab == 256 && !tokenizer;
  TP_CHECK_INPUT(bytes || tokenizer || prompt.empty(),
                 "--prompt is text, read as bytes, but this model has V=", cfg.vocab,
                 " (not 256); give token ids with --prompt-ids \"1 2 3\" or a tokenizer with "
                 "--tokenizer DIR");
  std::vector<int32_t> ids;
  if (!prompt.empty() && tokenizer)
    ids = tokenizer->encode(prompt);
  else if (!prompt.empty())
    for (unsigned char c : prompt) ids.push_back(static_cast<int32_t>(c));
  else
    ids = parse_ids(prompt_ids, cfg.vocab);
  TP_CHECK_INPUT(!ids.empty(), "--prompt-ids holds no token id");

  Gpt model(ctx.device, world, cfg);  // validates cfg for t = world.size(): one line per problem
  AdamW unused(ctx.device, model.params(), AdamWParams{});  // load_checkpoint's optimizer slot
  LoadedCheckpoint loaded;
  if (file.hub) {
    load_model_file(file, world, model);
    loaded.checksums = file.checksums;
  } else {
    loaded = load_checkpoint(path, world, model, unused);
  }

  GenerateOptions opts;
  opts.tokens = tokens;
  opts.sampling.temperature = static_cast<float>(temperature);
  opts.sampling.top_k = top_k;
  opts.seed = static_cast<uint64_t>(o.get_int("seed"));
  const int t = world.size();
  const int64_t kv_cols = cfg.kv() / t * cfg.head_dim();
  log0(world, "tp_generate: t = ", t, " (", world.name(), ", ", ctx.device.name(), ")");
  log0(world, "model: ", cfg.str(), " from ", path,
       file.hub ? " (" + file.describe() + ")" : " (step " + std::to_string(loaded.step) + ")");
  if (!loaded.checksums) log0(world, unverified_note(path));
  const int64_t value_bytes = dtype_size(cfg.compute_dtype());
  log0(world, "key/value cache per rank: 2 x ", cfg.layers, " layers x ", cfg.seq, " positions x ",
       kv_cols, " (nkv/t · hd) ", precision_name(cfg.precision),
       " values = ", 2 * cfg.layers * cfg.seq * kv_cols * value_bytes / 1024.0, " KiB, 1/", t,
       " of the whole");
  std::string rule = "greedy (argmax; the lowest id wins a tie)";
  if (temperature > 0) {
    std::ostringstream os;
    os << "temperature " << temperature << (top_k > 0 ? ", top-k " + std::to_string(top_k) : "")
       << ", seed " << opts.seed;
    rule = os.str();
  }
  log0(world, "sampling: ", rule, "; tokens are ",
       bytes       ? "bytes"
       : tokenizer ? "GPT-2 BPE tokens (" + tokenizer_dir + "), printed as text"
                   : "ids");
  log0(world, "----");

  // The prompt, then every token as it is chosen (rank 0 prints; every rank has the same ids).
  auto print = [&](int32_t id) {
    if (world.rank() != 0) return;
    if (bytes) {
      std::fputc(id, stdout);
    } else if (tokenizer) {  // a token's bytes may end inside a character: the next ones finish it
      const std::string& b = tokenizer->token(id);
      std::fwrite(b.data(), 1, b.size(), stdout);
    } else {
      std::printf("%d ", id);
    }
    std::fflush(stdout);
  };
  for (int32_t id : ids) print(id);
  const size_t mark = world.ledger().size();
  GenerateStats st;
  generate(ctx.device, world, model, ids, opts, &st, print);
  const size_t calls = world.ledger().size() - mark;
  if (world.rank() == 0) std::printf("\n");
  log0(world, "----");
  report(world, cfg, st, calls, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o("tp_generate",
            "Generates text from a tp_train checkpoint with tensor parallelism over the ranks of "
            "mpirun (t = -np).");
  o.path("load", "", "the checkpoint (tp_train --save); the model's sizes come from it")
      .text("prompt", "",
            "the prompt as text; its bytes are the token ids (V = 256 models), or its BPE ids "
            "with --tokenizer")
      .path("tokenizer", "",
            "a GPT-2 tokenizer folder (vocab.json + merges.txt or encoder.json + vocab.bpe): "
            "--prompt is encoded with it and the output printed as text")
      .text("prompt-ids", "", "the prompt as token ids, e.g. \"3 1 4\" (models with V != 256)")
      .integer("tokens", 64, "how many tokens to generate")
      .max(1 << 20)
      .real("temperature", 0.0, "0: greedy (argmax); > 0: sample from softmax(logits / T)")
      .as_float()
      .integer("top-k", 0, "sample among the k most likely tokens only (0: all)")
      .integer("seed", 1234, "seed of the draws (the same tokens for every t)")
      .text("precision", "fp32",
            "fp32, or bf16: bf16 copies of the fp32 checkpoint's weights, bf16 activations, "
            "key/value cache and collectives",
            {"fp32", "bf16"});
  return run_program(argc, argv, o, generate_main);
}
