#include "model/checkpoint_meta.h"

#include <numeric>
#include <vector>

#include "core/error.h"
#include "io/crc32c.h"

namespace tp {

namespace {

const char* const kConfigKeys[] = {"layers", "hidden", "heads", "kv_heads", "ffn",
                                   "vocab",  "seq",    "act",   "norm",     "tied"};
constexpr const char* kConfigChecksum = "config_crc32c";
const std::string kT = "transformer.";

// What the tensors of a checkpoint say about its configuration (see the header).
struct Facts {
  bool wte = false, wpe = false, fc = false, attn = false;
  int64_t vocab = 0, hidden = 0, seq = 0, ffn = 0, layers = 0;
  std::vector<int64_t> attn_shape;  // T.h.0.attn.c_attn.weight
  bool ln1 = false, head = false;
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Facts facts_of(const safetensors::File& f) {
  Facts x;
  auto matrix = [&](const std::string& name, int64_t& rows, int64_t& cols) {
    if (!f.has(name) || f.info(name).shape.size() != 2) return false;
    rows = f.info(name).shape[0];
    cols = f.info(name).shape[1];
    return true;
  };
  x.wte = matrix(kT + "wte.weight", x.vocab, x.hidden);
  int64_t unused = 0;
  x.wpe = matrix(kT + "wpe.weight", x.seq, unused);
  // Consecutive blocks from h.0: bounded by the number of tensors the file really has.
  while (f.has(kT + "h." + std::to_string(x.layers) + ".ln_1.weight")) ++x.layers;
  x.fc = matrix(kT + "h.0.mlp.c_fc.weight", unused, x.ffn);
  x.attn = f.has(kT + "h.0.attn.c_attn.weight");
  if (x.attn) x.attn_shape = f.info(kT + "h.0.attn.c_attn.weight").shape;
  x.ln1 = f.has(kT + "h.0.ln_1.weight");
  x.head = f.has("lm_head.weight");
  return x;
}

[[noreturn]] void contradicts(const safetensors::File& f, const std::string& key,
                              const std::string& value, const std::string& evidence) {
  throw Error(detail::str_cat("checkpoint ", f.path(), ": metadata ", key, "=", value,
                              " contradicts its tensors: ", evidence,
                              "; the file is damaged or was edited (set it back or load another "
                              "checkpoint)"),
              2);
}

// The configuration strings in the fixed order the checksum covers.
template <typename Value>
std::string canonical(Value value) {
  std::string s;
  for (const char* key : kConfigKeys) s += std::string(key) + "=" + value(key) + "\n";
  return s;
}

std::string checksum_of(const std::string& text) {
  return crc32c_hex(crc32c(text.data(), text.size()));
}

// The keys of a checkpoint checked against its tensors, one group of keys at a time; with `all`,
// every configuration key must be there. What a step reads goes into the GptConfig it is given
// (absent keys keep GptConfig's defaults).
class MetadataCheck {
 public:
  MetadataCheck(const safetensors::File& file, bool all_keys)
      : f(file), path(file.path()), all(all_keys), x(facts_of(file)) {}

  // vocab, hidden, seq, layers and ffn against the shapes of wte, wpe, the blocks and c_fc.
  void sizes(GptConfig& c) const {
    if (count("vocab", c.vocab))
      agree("vocab", c.vocab, x.wte, x.vocab,
            "tensor transformer.wte.weight has " + std::to_string(x.vocab) + " rows");
    if (count("hidden", c.hidden))
      agree("hidden", c.hidden, x.wte, x.hidden,
            "tensor transformer.wte.weight has " + std::to_string(x.hidden) + " columns");
    if (count("seq", c.seq))
      agree("seq", c.seq, x.wpe, x.seq,
            "tensor transformer.wpe.weight has " + std::to_string(x.seq) + " rows");
    if (count("layers", c.layers))
      agree("layers", c.layers, x.wte, x.layers,
            x.layers == 0
                ? std::string("it has no block transformer.h.0")
                : "it has blocks transformer.h.0 .. transformer.h." + std::to_string(x.layers - 1));
    int64_t ffn = 0;
    if (count("ffn", ffn)) {
      c.ffn = ffn;
      agree("ffn", ffn, x.fc, x.ffn,
            "tensor transformer.h.0.mlp.c_fc.weight has " + std::to_string(x.ffn) + " columns");
    }
  }

  // heads and kv_heads against hidden and c_attn's q | k | v columns.
  void heads(GptConfig& c) const {
    const bool heads_given = count("heads", c.heads);
    int64_t kv = 0;
    const bool kv_given = count("kv_heads", kv);
    if (kv_given) c.kv_heads = kv;
    if (!heads_given) return;
    const int64_t h = x.wte ? x.hidden : c.hidden;
    if (x.wte && h % c.heads != 0)
      contradicts(f, "heads", std::to_string(c.heads),
                  "hidden " + std::to_string(h) +
                      " (transformer.wte.weight's columns) is not divisible by it");
    // c_attn holds q | k | v: h + 2·kv·(h/heads) columns.
    const int64_t k = kv_given ? kv : c.heads;
    if (x.wte && x.attn && x.attn_shape.size() == 2 && x.attn_shape[0] == h &&
        x.attn_shape[1] != h + 2 * k * (h / c.heads)) {
      const int64_t kv_cols = (x.attn_shape[1] - h) / 2, g = std::gcd(kv_cols, h);
      contradicts(f, "heads",
                  std::to_string(c.heads) + " (with kv_heads=" + std::to_string(k) + ")",
                  "tensor transformer.h.0.attn.c_attn.weight has shape " + shape_str(x.attn_shape) +
                      ", q | k | v for kv_heads/heads = " +
                      (g > 0 ? std::to_string(kv_cols / g) + "/" + std::to_string(h / g)
                             : std::string("?")) +
                      ", but these give " + std::to_string(h + 2 * k * (h / c.heads)) + " columns");
    }
    if (kv_given && c.heads % kv != 0)
      TP_CHECK_INPUT(false, "checkpoint ", path, ": metadata kv_heads=", kv,
                     " does not divide heads=", c.heads,
                     " (every key/value head serves heads/kv_heads query heads); the file is "
                     "damaged or was edited (load another checkpoint)");
  }

  // act, norm and tied against the tensors that only one of their values has.
  void kinds(GptConfig& c) const {
    one_of("act", c.act, Activation::Gelu, Activation::SwiGlu, activation_name,
           kT + "h.0.mlp.c_gate.weight", true);
    one_of("norm", c.norm, NormKind::LayerNorm, NormKind::RmsNorm, norm_name, kT + "h.0.ln_1.bias",
           false);
    if (have("tied")) {
      const std::string tied = f.metadata("tied");
      TP_CHECK_INPUT(tied == "true" || tied == "false", "checkpoint ", path,
                     ": metadata tied=", tied,
                     " is not true or false; the file is damaged or was edited");
      c.tied = tied == "true";
      if (x.wte && !c.tied && !x.head)
        contradicts(f, "tied", tied, "it has no lm_head.weight, so tied=true");
    }
  }

  // The checksum over the configuration: what the shapes cannot say (heads, for multi-head
  // attention) it pins down.
  void checksum() const {
    bool every_key = f.has_metadata(kConfigChecksum);
    for (const char* key : kConfigKeys) every_key = every_key && f.has_metadata(key);
    if (!every_key) return;
    const std::string written = f.metadata(kConfigChecksum);
    uint32_t unused = 0;
    TP_CHECK_INPUT(parse_crc32c_hex(written, unused), "checkpoint ", path, ": metadata ",
                   kConfigChecksum, "=", written, " is not a checksum (8 hex digits)");
    auto with = [&](const std::string& heads, const std::string& kv_heads) {
      return checksum_of(canonical([&](const char* key) {
        const std::string k = key;
        return k == "heads" ? heads : k == "kv_heads" ? kv_heads : f.metadata(key);
      }));
    };
    if (with(f.metadata("heads"), f.metadata("kv_heads")) == written) return;
    // Which heads (with the kv_heads c_attn's ratio gives) was it saved with?
    if (x.wte && x.attn && x.attn_shape.size() == 2 && x.attn_shape[0] == x.hidden &&
        x.hidden > 0) {
      const int64_t h = x.hidden, kv_cols = (x.attn_shape[1] - h) / 2;
      for (int64_t d = 1; d <= h; ++d) {
        if (h % d != 0 || kv_cols % (h / d) != 0) continue;
        const int64_t k = kv_cols / (h / d);
        if (k < 1 || d % k != 0) continue;
        if (with(std::to_string(d), std::to_string(k)) != written) continue;
        TP_CHECK_INPUT(false, "checkpoint ", path, ": metadata heads=", f.metadata("heads"),
                       ", kv_heads=", f.metadata("kv_heads"),
                       " were changed after the file was saved: its ", kConfigChecksum, "=",
                       written, " fits heads=", d, ", kv_heads=", k,
                       " (the tensors' shapes allow any heads that divides hidden ", h,
                       "); set them back or load another checkpoint");
      }
    }
    std::string values;
    for (const char* key : kConfigKeys)
      values += (values.empty() ? "" : ", ") + std::string(key) + "=" + f.metadata(key);
    TP_CHECK_INPUT(false, "checkpoint ", path, ": its configuration metadata (", values,
                   ") does not match its ", kConfigChecksum, "=", written,
                   ": a value was changed after the file was saved; load another checkpoint");
  }

 private:
  bool have(const char* key) const {
    if (all)
      TP_CHECK_INPUT(f.has_metadata(key), "checkpoint ", path, " has no '", key,
                     "' in its metadata; the model's sizes are read from files written by "
                     "tp_train --save");
    return f.has_metadata(key);
  }
  bool count(const char* key, int64_t& out) const {
    if (!have(key)) return false;
    out = metadata_count(f, key, 1);
    return true;
  }
  void agree(const char* key, int64_t value, bool known, int64_t truth,
             const std::string& evidence) const {
    if (known && value != truth)
      contradicts(f, key, std::to_string(value),
                  evidence + ", so " + key + "=" + std::to_string(truth));
  }
  // act and norm: one of two words, the second exactly when the tensors say so (`tensor` there,
  // or not there, as `there_means_second`).
  // The words are the *_name of the two enum values (what add_config writes).
  template <typename Kind, typename Name>
  void one_of(const char* key, Kind& out, Kind first_kind, Kind second_kind, Name name,
              const std::string& tensor, bool there_means_second) const {
    if (!have(key)) return;
    const std::string word = f.metadata(key), first = name(first_kind), second = name(second_kind);
    TP_CHECK_INPUT(word == first || word == second, "checkpoint ", path, ": metadata ", key, "=",
                   word, " is not one this project writes (", first, " or ", second,
                   "); the file is damaged or was edited");
    out = word == second ? second_kind : first_kind;
    const bool there = f.has(tensor), is_second = there == there_means_second;
    if (x.ln1 && (word == second) != is_second)
      contradicts(f, key, word,
                  std::string(there ? "it has " : "it has no ") + tensor + ", so " + key + "=" +
                      (is_second ? second : first));
  }

  const safetensors::File& f;
  const std::string path;
  const bool all;
  const Facts x;
};

GptConfig check(const safetensors::File& f, bool all) {
  const MetadataCheck meta(f, all);
  GptConfig c;
  meta.sizes(c);
  meta.heads(c);
  meta.kinds(c);
  meta.checksum();
  return c;
}

}  // namespace

int64_t metadata_count(const safetensors::File& f, const std::string& key, int64_t at_least) {
  TP_CHECK_INPUT(f.has_metadata(key), "checkpoint ", f.path(), " has no '", key,
                 "' in its metadata");
  const std::string s = f.metadata(key);
  int64_t v = 0;
  bool ok = !s.empty() && s.size() <= 19;
  for (char ch : s) {
    if (!ok) break;
    ok = ch >= '0' && ch <= '9' && v <= (INT64_MAX - (ch - '0')) / 10;
    if (ok) v = v * 10 + (ch - '0');
  }
  TP_CHECK_INPUT(ok && v >= at_least, "checkpoint ", f.path(), ": metadata ", key, "=",
                 s.size() > 40 ? s.substr(0, 40) + "..." : s, " is not a count",
                 at_least > 0 ? " of at least " + std::to_string(at_least) : std::string(),
                 "; the file is damaged or was edited");
  return v;
}

std::string config_checksum(const GptConfig& c) {
  return checksum_of(canonical([&](const char* key) -> std::string {
    const std::string k = key;
    if (k == "layers") return std::to_string(c.layers);
    if (k == "hidden") return std::to_string(c.hidden);
    if (k == "heads") return std::to_string(c.heads);
    if (k == "kv_heads") return std::to_string(c.kv());
    if (k == "ffn") return std::to_string(c.inner());
    if (k == "vocab") return std::to_string(c.vocab);
    if (k == "seq") return std::to_string(c.seq);
    if (k == "act") return activation_name(c.act);
    if (k == "norm") return norm_name(c.norm);
    return c.tied ? "true" : "false";
  }));
}

GptConfig checked_checkpoint_config(const safetensors::File& f) { return check(f, true); }

void check_checkpoint_metadata(const safetensors::File& f) { (void)check(f, false); }

int64_t checked_adam_steps(const safetensors::File& f, int64_t step) {
  bool moments = false;
  for (const auto& name : f.names())
    if (name.compare(0, 18, "optimizer.exp_avg.") == 0) {
      moments = true;
      break;
    }
  if (!moments) return 0;
  TP_CHECK_INPUT(f.has_metadata("adam_steps"), "checkpoint ", f.path(),
                 " holds AdamW moments (optimizer.exp_avg.*) but no metadata adam_steps: AdamW's "
                 "bias correction would restart at step 1; the file is damaged or was edited");
  const int64_t adam = metadata_count(f, "adam_steps", 0);
  TP_CHECK_INPUT(adam <= step, "checkpoint ", f.path(), ": metadata adam_steps=", adam,
                 " is more than its step=", step,
                 " (AdamW steps at most once per training step); the file is damaged or was "
                 "edited");
  return adam;
}

}  // namespace tp
