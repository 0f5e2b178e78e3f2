#include "model/hf_gpt2.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/agreement.h"
#include "core/error.h"
#include "core/output_file.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/checkpoint_meta.h"
#include "parallel/pipeline_parallel.h"

namespace tp {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// "a, b, c, ..." of the first few names of `f`, for a message about what the file holds instead.
std::string some_names(const safetensors::File& f) {
  const auto names = f.names();
  std::string out;
  for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 5) out += ", ...";
  return std::to_string(names.size()) + (names.size() == 1 ? " tensor" : " tensors") +
         (names.empty() ? "" : ": " + out);
}

// The GPT-2 tensors of a model with `c`'s shape, file names without the prefix, and their shapes.
std::vector<std::pair<std::string, std::vector<int64_t>>> gpt2_tensors(const GptConfig& c) {
  const int64_t h = c.hidden, f = c.inner();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {{"wte.weight", {c.vocab, h}},
                                                                   {"wpe.weight", {c.seq, h}}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = "h." + std::to_string(l) + ".";
    out.push_back({b + "ln_1.weight", {h}});
    out.push_back({b + "ln_1.bias", {h}});
    out.push_back({b + "attn.c_attn.weight", {h, 3 * h}});
    out.push_back({b + "attn.c_attn.bias", {3 * h}});
    out.push_back({b + "attn.c_proj.weight", {h, h}});
    out.push_back({b + "attn.c_proj.bias", {h}});
    out.push_back({b + "ln_2.weight", {h}});
    out.push_back({b + "ln_2.bias", {h}});
    out.push_back({b + "mlp.c_fc.weight", {h, f}});
    out.push_back({b + "mlp.c_fc.bias", {f}});
    out.push_back({b + "mlp.c_proj.weight", {f, h}});
    out.push_back({b + "mlp.c_proj.bias", {h}});
  }
  out.push_back({"ln_f.weight", {h}});
  out.push_back({"ln_f.bias", {h}});
  return out;
}

// True for the hub's attention-mask buffers: <prefix>h.N.attn.bias and <prefix>h.N.attn.masked_bias.
bool is_mask_buffer(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = name.substr(prefix.size());
  if (rest.compare(0, 2, "h.") != 0) return false;
  size_t i = 2;
  while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9') ++i;
  if (i == 2) return false;
  const std::string tail = rest.substr(i);
  return tail == ".attn.bias" || tail == ".attn.masked_bias";
}

// config.json beside a hub file: the values it gives, checked against the tensors.
void apply_config_json(const std::string& cfg_path, const std::string& path, GptConfig& c,
                       int64_t heads_flag, std::string& heads_from) {
  std::ifstream in(cfg_path);
  TP_CHECK_INPUT(in.good(), "cannot read ", cfg_path, ": ", std::strerror(errno ? errno : EIO));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    std::string msg = e.what();
    const size_t close = msg.find("] ");
    if (close != std::string::npos) msg = msg.substr(close + 2);
    TP_CHECK_INPUT(false, cfg_path, " is not valid JSON: ", msg.substr(0, 160));
  }
  TP_CHECK_INPUT(j.is_object(), cfg_path, " is a JSON ", j.type_name(), ", not an object");
  if (j.contains("model_type"))
    TP_CHECK_INPUT(j["model_type"] == "gpt2", cfg_path, " describes a \"",
                   j["model_type"].is_string() ? j["model_type"].get<std::string>() : "?",
                   "\" model; only GPT-2 (model_type \"gpt2\") can be loaded");
  // Each size config.json gives must be what the tensors of the file say.
  auto size = [&](const char* key, int64_t& out) {
    if (!j.contains(key) || j[key].is_null()) return false;
    TP_CHECK_INPUT(j[key].is_number_integer() && j[key].get<int64_t>() > 0, cfg_path, ": ", key,
                   " is ", j[key].dump(), ", not a positive integer");
    out = j[key].get<int64_t>();
    return true;
  };
  auto agree = [&](const char* key, int64_t from_tensors, const char* tensor) {
    int64_t v = 0;
    if (size(key, v))
      TP_CHECK_INPUT(v == from_tensors, cfg_path, " says ", key, "=", v, " but model file ", path,
                     " has ", from_tensors, " (", tensor, ")");
  };
  agree("n_layer", c.layers, "blocks h.0 ..");
  agree("n_embd", c.hidden, "wte.weight's columns");
  agree("vocab_size", c.vocab, "wte.weight's rows");
  agree("n_positions", c.seq, "wpe.weight's rows");
  int64_t inner = 0;
  const bool has_inner = size("n_inner", inner);
  TP_CHECK_INPUT(
      c.inner() == (has_inner ? inner : 4 * c.hidden), cfg_path, " says n_inner=",
      has_inner ? std::to_string(inner) : "null (4 n_embd = " + std::to_string(4 * c.hidden) + ")",
      " but model file ", path, " has ", c.inner(), " (h.0.mlp.c_fc.weight's columns)");
  int64_t n_head = 0;
  if (size("n_head", n_head)) {
    TP_CHECK_INPUT(heads_flag <= 0 || heads_flag == n_head, "--heads=", heads_flag,
                   " disagrees with ", cfg_path, " (n_head=", n_head, "); drop --heads");
    c.heads = n_head;
    heads_from = "config.json";
  }
  const std::string act = j.contains("activation_function") && j["activation_function"].is_string()
                              ? j["activation_function"].get<std::string>()
                              : "gelu_new";
  TP_CHECK_INPUT(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast", cfg_path,
                 ": activation_function \"", act,
                 "\" is not the tanh-approximated GeLU this model computes (gelu_new, "
                 "gelu_pytorch_tanh or gelu_fast)");
  if (j.contains("layer_norm_epsilon")) {
    TP_CHECK_INPUT(j["layer_norm_epsilon"].is_number() && j["layer_norm_epsilon"] > 0, cfg_path,
                   ": layer_norm_epsilon is ", j["layer_norm_epsilon"].dump(),
                   ", not a positive number");
    c.eps = j["layer_norm_epsilon"].get<float>();
  }
  auto flag = [&](const char* key, bool fallback) {
    return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
  };
  c.tied = flag("tie_word_embeddings", true);
  TP_CHECK_INPUT(!flag("scale_attn_by_inverse_layer_idx", false), cfg_path,
                 ": scale_attn_by_inverse_layer_idx is true; this model scales attention by "
                 "1/sqrt(head_dim) only");
  TP_CHECK_INPUT(flag("scale_attn_weights", true), cfg_path,
                 ": scale_attn_weights is false; this model scales attention by 1/sqrt(head_dim)");
}

ModelFile inspect_hub(const safetensors::File& f, int64_t heads_flag) {
  const std::string& path = f.path();
  ModelFile m;
  m.path = path;
  m.hub = true;
  if (f.has("wte.weight"))
    m.prefix = "";
  else if (f.has("transformer.wte.weight"))
    m.prefix = "transformer.";
  else
    TP_CHECK_INPUT(false, "model file ", path,
                   " is neither a checkpoint of this project (no \"format\": \"", kCheckpointFormat,
                   "\" metadata) nor a GPT-2 file in the Hugging Face layout (no wte.weight or "
                   "transformer.wte.weight); it has ",
                   some_names(f));
  const std::string& p = m.prefix;
  // Every tensor must be a floating-point one this reader converts.
  std::set<std::string> dtypes;
  for (const auto& name : f.names()) {
    const auto dt = f.info(name).dtype;
    TP_CHECK_INPUT(dt != safetensors::DType::I32, "model file ", path, ": tensor ", name, " is ",
                   safetensors::dtype_name(dt), "; a GPT-2 file holds F32, F16 or BF16 tensors");
    if (!is_mask_buffer(name, p)) dtypes.insert(safetensors::dtype_name(dt));
  }
  m.dtype = dtypes.size() == 1 ? *dtypes.begin() : "mixed";

  // The shape, from the tensors.
  GptConfig& c = m.config;
  c.act = Activation::Gelu;
  c.norm = NormKind::LayerNorm;
  c.kv_heads = 0;
  const auto& wte = f.info(p + "wte.weight").shape;
  TP_CHECK_INPUT(wte.size() == 2, "model file ", path, ": tensor ", p, "wte.weight has shape ",
                 shape_str(wte), ", not (vocab, hidden)");
  c.vocab = wte[0];
  c.hidden = wte[1];
  TP_CHECK_INPUT(f.has(p + "wpe.weight"), "model file ", path, " has no tensor ", p,
                 "wpe.weight (the learned positions of GPT-2)");
  const auto& wpe = f.info(p + "wpe.weight").shape;
  TP_CHECK_INPUT(wpe.size() == 2 && wpe[1] == c.hidden, "model file ", path, ": tensor ", p,
                 "wpe.weight has shape ", shape_str(wpe), " but wte.weight has hidden ", c.hidden,
                 ", so it needs [positions, ", c.hidden, "]");
  c.seq = wpe[0];
  c.layers = 0;
  while (f.has(p + "h." + std::to_string(c.layers) + ".ln_1.weight")) ++c.layers;
  TP_CHECK_INPUT(c.layers > 0, "model file ", path, " has no tensor ", p,
                 "h.0.ln_1.weight: no transformer blocks");
  const std::string fc = p + "h.0.mlp.c_fc.weight";
  TP_CHECK_INPUT(f.has(fc), "model file ", path, " has no tensor ", fc);
  const auto& fcs = f.info(fc).shape;
  TP_CHECK_INPUT(fcs.size() == 2 && fcs[0] == c.hidden, "model file ", path, ": tensor ", fc,
                 " has shape ", shape_str(fcs), " but wte.weight has hidden ", c.hidden,
                 ", so it needs [", c.hidden, ", ffn]");
  c.ffn = fcs[1];
  c.tied = true;
  c.heads = 0;

  // config.json beside the file: heads, ε, the head's tying, and a check of every size.
  const fs::path cfg_path = fs::path(path).parent_path() / "config.json";
  std::error_code ec;
  const bool has_config = fs::exists(cfg_path, ec);
  if (has_config) apply_config_json(cfg_path.string(), path, c, heads_flag, m.heads_from);
  if (m.heads_from.empty() && heads_flag > 0) {
    c.heads = heads_flag;
    m.heads_from = "--heads";
  }
  TP_CHECK_INPUT(c.heads > 0, "model file ", path,
                 " does not say how many attention heads it has (no config.json with n_head "
                 "beside it): pass --heads (GPT-2 small 12, medium 16, large 20, XL 25)");

  // Every tensor GPT-2 of this shape has, with its shape; nothing else but the mask buffers.
  std::set<std::string> known;
  for (const auto& [name, shape] : gpt2_tensors(c)) {
    known.insert(p + name);
    TP_CHECK_INPUT(f.has(p + name), "model file ", path, " has no tensor ", p, name,
                   " (a GPT-2 of ", c.layers, " layers needs it)");
    TP_CHECK_INPUT(f.info(p + name).shape == shape, "model file ", path, ": tensor ", p, name,
                   " has shape ", shape_str(f.info(p + name).shape), " but a GPT-2 with hidden ",
                   c.hidden, ", ffn ", c.inner(), ", vocab ", c.vocab, " and ", c.seq,
                   " positions needs ", shape_str(shape));
  }
  if (f.has("lm_head.weight")) {
    known.insert("lm_head.weight");
    TP_CHECK_INPUT(f.info("lm_head.weight").shape == wte, "model file ", path,
                   ": tensor lm_head.weight has shape ", shape_str(f.info("lm_head.weight").shape),
                   " but wte.weight has ", shape_str(wte));
    const bool same = f.read_as_f32("lm_head.weight") == f.read_as_f32(p + "wte.weight");
    if (has_config) {
      TP_CHECK_INPUT(same || !c.tied, "model file ", path,
                     ": lm_head.weight differs from wte.weight, but config.json ties them "
                     "(tie_word_embeddings)");
    } else {
      c.tied = same;  // GPT-2 ties them; an untied head is kept as one
    }
  }
  for (const auto& name : f.names()) {
    if (known.count(name)) continue;
    TP_CHECK_INPUT(is_mask_buffer(name, p), "model file ", path, ": tensor ", name,
                   " is not part of a GPT-2 of ", c.layers, " layers");
    ++m.ignored;
  }
  return m;
}

// A float as the shortest decimal that reads back as the same float (1e-05, not 9.99999974e-06).
double tidy(float f) {
  for (int digits = 6; digits < 9; ++digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return f;
}

}  // namespace

std::string ModelFile::describe() const {
  if (!hub) return "a checkpoint of this project";
  std::string s = "a Hugging Face GPT-2 file (hub layout, " + dtype + ", heads from " + heads_from;
  if (ignored > 0) s += ", " + std::to_string(ignored) + " attention-mask buffers ignored";
  return s + ")";
}

ModelFile inspect_model_file(const std::string& path, int64_t heads) {
  // A checkpoint records its heads; `heads` is for hub files, which may not.
  const safetensors::File f = safetensors::File::open(path);
  if (f.metadata("format") != kCheckpointFormat) {
    ModelFile m = inspect_hub(f, heads);
    m.checksums = f.checksums();
    return m;
  }
  ModelFile m;
  m.path = path;
  m.prefix = "transformer.";
  m.checksums = f.checksums();
  m.config = checked_checkpoint_config(f);  // every size checked against the tensors
  m.heads_from = "metadata";
  m.dtype = "F32";
  return m;
}

void load_model_file(const ModelFile& file, Communicator& comm, Gpt& model) {
  const safetensors::File f = safetensors::File::open(file.path);
  const std::string body = "transformer.";
  load_stored_weights(
      f,
      [&](const std::string& stored) {
    if (stored.compare(0, body.size(), body) == 0) return file.prefix + stored.substr(body.size());
    return stored;  // lm_head.weight
      },
      comm, model);
}

std::string hf_config_json(const GptConfig& c, Dtype dtype) {
  json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["n_layer"] = c.layers;
  j["n_embd"] = c.hidden;
  j["n_head"] = c.heads;
  j["n_inner"] = c.inner();
  j["n_positions"] = c.seq;
  j["n_ctx"] = c.seq;
  j["vocab_size"] = c.vocab;
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = tidy(c.eps);
  j["initializer_range"] = tidy(c.init_std);
  j["tie_word_embeddings"] = c.tied;
  j["embd_pdrop"] = tidy(c.dropout);
  j["resid_pdrop"] = tidy(c.dropout);
  j["attn_pdrop"] = 0.0;  // this model has no dropout on the attention probabilities
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["bos_token_id"] = c.vocab - 1;  // GPT-2's <|endoftext|> is its last id, 50256
  j["eos_token_id"] = c.vocab - 1;
  j["torch_dtype"] = dtype == Dtype::bf16 ? "bfloat16" : "float32";
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

std::string hf_export_problem(const GptConfig& c) {
  std::vector<std::string> cannot;
  if (c.act != Activation::Gelu)
    cannot.push_back(std::string("--act ") + activation_name(c.act) + " (GPT-2 has a GeLU MLP)");
  if (c.norm != NormKind::LayerNorm)
    cannot.push_back(std::string("--norm ") + norm_name(c.norm) + " (GPT-2 has LayerNorm)");
  if (c.kv() != c.heads)
    cannot.push_back("--kv-heads " + std::to_string(c.kv()) + " (GPT-2 has no GQA)");
  if (c.experts > 0)
    cannot.push_back("--experts " + std::to_string(c.experts) + " (GPT-2 has no experts)");
  std::string all;
  for (size_t i = 0; i < cannot.size(); ++i) all += (i ? ", " : "") + cannot[i];
  return all;
}

namespace {
// Every rank checks the folder before the collective, so a bad --hf fails everywhere at once.
// The error of creating the folder is kept apart from is_directory's own (which would turn a
// read-only file system's EROFS into "no such file").
void check_export_folder(const std::string& dir, const GptConfig& c) {
  const std::string cannot = hf_export_problem(c);
  TP_CHECK_INPUT(cannot.empty(), "cannot export to ", dir,
                 " as a Hugging Face GPT-2: this model has ", cannot);
  std::error_code made, seen;
  fs::create_directories(dir, made);
  TP_CHECK_INPUT(fs::is_directory(dir, seen), "cannot create the export folder ", dir, ": ",
                 made ? errno_text(made.value()) : "it is not a folder",
                 "; give --export-hf (tp_export: --hf) a folder that can be written");
  const int denied = ::access(dir.c_str(), W_OK | X_OK) == 0 ? 0 : errno;
  TP_CHECK_INPUT(denied == 0, "cannot write into the export folder ", dir, ": ", errno_text(denied),
                 "; give --export-hf (tp_export: --hf) a folder that can be written");
}

// model.safetensors and config.json from the gathered weights (by name: a name met twice is
// written once).
void write_export(const std::string& dir, const std::map<std::string, StoredTensor>& weights,
                  const GptConfig& c, Dtype dtype) {
  safetensors::Writer w;
  const safetensors::DType stored =
      dtype == Dtype::bf16 ? safetensors::DType::BF16 : safetensors::DType::F32;
  for (const auto& [name, t] : weights) w.add_float(name, stored, t.shape, t.values);
  w.set_metadata("format", "pt");  // what transformers' loader looks for
  w.write((fs::path(dir) / "model.safetensors").string());
  const std::string cfg = (fs::path(dir) / "config.json").string();
  write_file_atomic(cfg, hf_config_json(c, dtype), "the export's " + cfg);
}
}  // namespace

void export_hf(const std::string& dir, Communicator& comm, const Gpt& model, Dtype dtype) {
  check_export_folder(dir, model.config());
  const auto weights = gather_stored_weights(comm, model);
  DeferredError write;  // a failed write still joins the barrier its peers wait in
  if (comm.rank() == 0) write.run([&] { write_export(dir, weights, model.config(), dtype); });
  comm.barrier();
  write.rethrow();
}

void export_hf(const std::string& dir, Communicator& tp, Communicator& pp, const Gpt& model,
               Dtype dtype) {
  if (pp.size() == 1) return export_hf(dir, tp, model, dtype);
  check_export_folder(dir, model.config());
  const auto stage = gather_stored_weights(tp, model);
  DeferredError write;   // a failed write still joins the barriers its peers wait in
  if (tp.rank() == 0) {  // the TP groups' rank 0s: one PP group, every stage
    std::vector<NamedHostTensor> mine;
    for (const auto& [name, t] : stage) mine.push_back({name, t.shape, t.values});
    const std::vector<NamedHostTensor> all =
        gather_to_first_stage(pp, model.params().front().value.device(), mine);
    if (pp.rank() == 0) {
      std::map<std::string, StoredTensor> weights;
      for (const NamedHostTensor& t : all) weights.emplace(t.name, StoredTensor{t.shape, t.values});
      write.run([&] { write_export(dir, weights, model.config(), dtype); });
    }
    pp.barrier();
  }
  tp.barrier();  // nobody reads the export before it is complete
  write.rethrow();
}

}  // namespace tp
