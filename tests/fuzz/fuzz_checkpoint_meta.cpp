// fuzz_checkpoint_meta.cpp — libFuzzer target for a checkpoint's metadata checked against its
// tensors (model/checkpoint_meta.h; make fuzz).
//
// Each input is a list of metadata lines "key=value" put beside the tensors of a fixed tiny
// checkpoint (2 layers, hidden 8, 2 heads, ffn 32, vocab 16, 4 positions, with AdamW moments); a
// first line "!" adds the config_crc32c that checkpoint was saved with. The file is opened and
// checked as tp_train, tp_generate and tp_export do. A refusal must be one tp::Error line; and
// whatever the metadata says, a configuration that passes must have the tensors' sizes (nothing is
// ever sized from a value the tensors contradict): anything else, a crash or a sanitizer report,
// is a finding. Seeds: the real metadata of that checkpoint and a few edits (scripts/fuzz.sh).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/checkpoint_meta.h"
#include "model/presets.h"

namespace {

using nlohmann::json;

const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/tp_fuzz_ckpt_meta." +
           std::to_string(static_cast<long>(::getpid()));
  }();
  return path;
}

// The tiny checkpoint's configuration, as save_checkpoint records it.
tp::GptConfig truth() {
  tp::GptConfig c = tp::mini_gpt();  // nh 2, ffn 32, V 16, S 4
  c.layers = 2;
  c.hidden = 8;
  return c;
}

[[noreturn]] void finding() { __builtin_trap(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const tp::GptConfig c = truth();
  json meta = json::object();
  meta["format"] = "tp-from-scratch-gpt/1";
  size_t pos = 0;
  if (input.compare(0, 2, "!\n") == 0) {
    meta["config_crc32c"] = tp::config_checksum(c);
    pos = 2;
  }
  while (pos < input.size()) {
    size_t end = input.find('\n', pos);
    if (end == std::string::npos) end = input.size();
    const std::string line = input.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = line.find('=');
    if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  // The tensors the checks look at: shapes of `c`, zeros.
  const int64_t h = c.hidden;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"transformer.wte.weight", {c.vocab, h}},
      {"transformer.wpe.weight", {c.seq, h}},
      {"transformer.h.0.ln_1.weight", {h}},
      {"transformer.h.0.ln_1.bias", {h}},
      {"transformer.h.1.ln_1.weight", {h}},
      {"transformer.h.0.attn.c_attn.weight", {h, 3 * h}},
      {"transformer.h.0.mlp.c_fc.weight", {h, c.inner()}},
      {"optimizer.exp_avg.transformer.wte.weight", {c.vocab, h}}};
  json header = json::object();
  int64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    int64_t n = 4;
    for (int64_t d : shape) n *= d;
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  header["__metadata__"] = meta;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    return 0;  // a key or value that is not UTF-8: no JSON file can hold it
  }
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  bytes += text;
  bytes.append(static_cast<size_t>(offset), '\0');
  std::FILE* f = std::fopen(scratch_path().c_str(), "wb");
  if (f == nullptr) return 0;
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  std::fclose(f);
  if (!written) return 0;

  try {
    const tp::safetensors::File file = tp::safetensors::File::open(scratch_path());
    tp::check_checkpoint_metadata(file);
    const int64_t step = file.has_metadata("step") ? tp::metadata_count(file, "step", 0) : 0;
    (void)tp::checked_adam_steps(file, step);
    const tp::GptConfig got = tp::checked_checkpoint_config(file);
    // Accepted: the sizes are the tensors', the heads a layout c_attn's shape allows.
    if (got.layers != c.layers || got.hidden != c.hidden || got.vocab != c.vocab ||
        got.seq != c.seq || got.inner() != c.inner() || got.heads < 1 || got.kv() != got.heads ||
        c.hidden % got.heads != 0 || got.act != tp::Activation::Gelu ||
        got.norm != tp::NormKind::LayerNorm || !got.tied)
      finding();
  } catch (const tp::Error& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) finding();  // one line
  }
  return 0;
}
