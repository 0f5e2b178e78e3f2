#include "model/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/agreement.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/checkpoint_meta.h"
#include "parallel/pipeline_parallel.h"

namespace tp {

namespace {

constexpr const char* kFormat = kCheckpointFormat;

std::string stored_name(const Param& p) { return p.ckpt_name.empty() ? p.name : p.ckpt_name; }

int64_t stored_rows(const Param& p) { return p.real_rows(); }

// The shape of the stored tensor that holds `p`: wider than p when several params share it,
// shorter when p has padding rows the file does not hold (the vocabulary).
std::vector<int64_t> stored_shape(const Param& p) {
  const int64_t cols = p.ckpt_cols > 0 ? p.ckpt_cols : p.cols();
  if (p.shape.ndim() == 1) return {cols};
  return {stored_rows(p), cols};
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Global tensors assembled from params; `which(i)` picks the tensor of param i (value, m, v, grad).
template <typename Which>
std::map<std::string, std::vector<float>> assemble(Communicator& comm, const ParamList& params,
                                                   Which which) {
  std::map<std::string, std::vector<float>> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    const std::vector<float> global = gather_global(comm, p, which(i));
    const auto shape = stored_shape(p);
    std::vector<float>& dst = out[stored_name(p)];
    const int64_t cols = shape.back(), rows = stored_rows(p);  // padding rows are not stored
    dst.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < p.cols(); ++c)
        dst[r * cols + p.ckpt_col0 + c] = global[r * p.cols() + c];
  }
  return out;
}

void add_config(safetensors::Writer& w, const GptConfig& c) {
  w.set_metadata("layers", std::to_string(c.layers));
  w.set_metadata("hidden", std::to_string(c.hidden));
  w.set_metadata("heads", std::to_string(c.heads));
  w.set_metadata("kv_heads", std::to_string(c.kv()));
  w.set_metadata("ffn", std::to_string(c.inner()));
  w.set_metadata("vocab", std::to_string(c.vocab));
  w.set_metadata("seq", std::to_string(c.seq));
  w.set_metadata("act", activation_name(c.act));
  w.set_metadata("norm", norm_name(c.norm));
  w.set_metadata("tied", c.tied ? "true" : "false");
  w.set_metadata("config_crc32c", config_checksum(c));  // binds heads (model/checkpoint_meta.h)
}

// Everything about the file that does not fit the model, each as one phrase: missing tensors,
// tensors of the wrong shape (naming both shapes), and recorded configuration values that differ.
std::vector<std::string> mismatches(const safetensors::File& f, const GptConfig& c,
                                    const ParamList& params) {
  std::vector<std::string> out;
  std::map<std::string, bool> seen;
  for (const Param& p : params) {
    const std::string name = stored_name(p);
    if (seen[name]) continue;
    seen[name] = true;
    if (!f.has(name)) {
      out.push_back("it has no tensor " + name);
      continue;
    }
    const auto& have = f.info(name).shape;
    const auto want = stored_shape(p);
    if (have == want) continue;
    std::string msg = "tensor " + name + " has shape " + shape_str(have) +
                      " but this model needs " + shape_str(want);
    if (name == "transformer.wpe.weight" && have.size() == 2 && have[0] < want[0])
      msg += " (--seq=" + std::to_string(want[0]) + " is larger than the position table of " +
             std::to_string(have[0]) + ")";
    out.push_back(msg);
  }
  const std::pair<const char*, std::string> config[] = {
      {"layers", std::to_string(c.layers)}, {"hidden", std::to_string(c.hidden)},
      {"heads", std::to_string(c.heads)},   {"kv_heads", std::to_string(c.kv())},
      {"ffn", std::to_string(c.inner())},   {"vocab", std::to_string(c.vocab)},
      {"seq", std::to_string(c.seq)},       {"act", activation_name(c.act)},
      {"norm", norm_name(c.norm)},          {"tied", c.tied ? "true" : "false"}};
  for (const auto& [key, value] : config)
    if (f.has_metadata(key) && f.metadata(key) != value)
      out.push_back(std::string("it was saved with ") + key + "=" + f.metadata(key) +
                    ", this run has " + value);
  return out;
}

// What a stored tensor is, for the checks of its values.
enum class Stored { kWeight, kFirstMoment, kSecondMoment };

// Reads stored tensor `name` for `p`, checks its shape and values and returns this rank's shard.
// Every value must be finite; a second moment (a mean of squares) must not be negative; with
// `adam_steps` 0 the moments must be zero (AdamW has not stepped).
std::vector<float> read_shard(const safetensors::File& f, const std::string& name, const Param& p,
                              int t, Stored kind = Stored::kWeight, int64_t adam_steps = 0) {
  TP_CHECK_INPUT(f.has(name), "checkpoint ", f.path(), " has no tensor ", name);
  const auto want = stored_shape(p);
  TP_CHECK_INPUT(f.info(name).shape == want, "checkpoint ", f.path(), ": tensor ", name,
                 " has shape ", shape_str(f.info(name).shape), " but this model needs ",
                 shape_str(want));
  const std::vector<float> stored = f.read_f32(name);
  for (size_t i = 0; i < stored.size(); ++i)
    TP_CHECK_INPUT(std::isfinite(stored[i]), "checkpoint ", f.path(), ": tensor ", name, " holds ",
                   std::isnan(stored[i]) ? "NaN" : "Inf", " (element ", i,
                   "); it cannot be trained from: load an earlier checkpoint");
  for (size_t i = 0; i < stored.size() && kind == Stored::kSecondMoment; ++i)
    TP_CHECK_INPUT(stored[i] >= 0.0f, "checkpoint ", f.path(), ": tensor ", name, " holds ",
                   stored[i], " (element ", i,
                   "), but AdamW's second moment is a mean of squares, never negative: the file "
                   "is damaged or was edited; load an earlier checkpoint");
  for (size_t i = 0; i < stored.size() && kind != Stored::kWeight && adam_steps == 0; ++i)
    TP_CHECK_INPUT(stored[i] == 0.0f, "checkpoint ", f.path(),
                   ": metadata adam_steps=0, but tensor ", name, " holds ", stored[i], " (element ",
                   i,
                   "): moments are zero before AdamW's first step, so adam_steps was changed and "
                   "its bias correction would restart at step 1; the file is damaged or was "
                   "edited");
  std::vector<float> global(static_cast<size_t>(p.rows() * p.cols()), 0.0f);  // padding rows: 0
  const int64_t cols = want.back();
  for (int64_t r = 0; r < stored_rows(p); ++r)
    for (int64_t c = 0; c < p.cols(); ++c)
      global[r * p.cols() + c] = stored[r * cols + p.ckpt_col0 + c];
  return shard_of(p, global, t);
}

// Collective: every rank throws the same bad-input error when a rank found `problem`: the lowest
// such rank's, whatever it was (rank 0's line is the one printed, so it must be the real one).
void refuse_unless_empty(const std::string& problem, Communicator& comm, Device& device) {
  const std::string agreed = agree_on_problem(comm, device, problem);
  TP_CHECK_INPUT(agreed.empty(), agreed);
}

}  // namespace

CheckpointClaim::CheckpointClaim(const std::string& path, Communicator& comm, Device& device) {
  std::string refused;
  if (comm.rank() == 0 && !path.empty()) {
    try {
      durable::check_save_target(path, 0);  // a device (/dev/full), a FIFO, a folder: now
      lock_ = std::make_unique<durable::SaveLock>(path);
    } catch (const Error& e) {
      refused = std::string("--save: ") + e.what();
    }
  }
  refuse_unless_empty(refused, comm, device);
}

namespace {
// Every stored tensor of `model` (weights, then the moments), global, on every rank of `comm`.
std::vector<NamedHostTensor> checkpoint_tensors(Communicator& comm, const Gpt& model,
                                                const AdamW& opt) {
  const ParamList& params = model.params();
  CommLedger::Scope scope(comm.ledger(), "checkpoint");
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const Param& p : params) shapes[stored_name(p)] = stored_shape(p);
  std::vector<NamedHostTensor> out;
  auto add = [&](const std::string& prefix, std::map<std::string, std::vector<float>> tensors) {
    for (auto& [name, values] : tensors)
      out.push_back({prefix + name, shapes.at(name), std::move(values)});
  };
  add("", assemble(comm, params, [&](size_t i) { return params[i].value; }));
  add("optimizer.exp_avg.", assemble(comm, params, [&](size_t i) { return opt.exp_avg()[i]; }));
  add("optimizer.exp_avg_sq.",
      assemble(comm, params, [&](size_t i) { return opt.exp_avg_sq()[i]; }));
  return out;
}

// The tensors into `w`, a name met twice (the tied wte of two pipeline stages) once.
void add_each_once(safetensors::Writer& w, const std::vector<NamedHostTensor>& tensors) {
  std::map<std::string, bool> written;
  for (const NamedHostTensor& t : tensors)
    if (!written[t.name]) {
      written[t.name] = true;
      w.add_f32(t.name, t.shape, t.values);
    }
}

// The file: the tensors (a name met twice, the tied wte of two pipeline stages, is written once),
// the step and the configuration.
void write_checkpoint(const std::string& path, const std::vector<NamedHostTensor>& tensors,
                      const Gpt& model, const AdamW& opt, int64_t step,
                      const CheckpointOrigin& origin) {
  safetensors::Writer w;
  add_each_once(w, tensors);
  w.set_metadata("format", kFormat);
  w.set_metadata("step", std::to_string(step));
  w.set_metadata("adam_steps", std::to_string(opt.steps()));
  add_config(w, model.config());
  if (!origin.run_id.empty()) w.set_metadata("run_id", origin.run_id);
  if (!origin.tokens.empty()) w.set_metadata("tokens", origin.tokens);
  w.write(path);
}
}  // namespace

CheckpointOrigin checkpoint_origin(const safetensors::File& f) {
  const auto word = [&](const char* key) -> std::string {
    const std::string v = f.has_metadata(key) ? f.metadata(key) : "";
    const bool ok =
        v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        });
    return ok ? v : "";
  };
  return {word("run_id"), word("tokens")};
}

CheckpointOrigin checkpoint_origin(const std::string& path) {
  try {
    return checkpoint_origin(safetensors::File::open(path));
  } catch (const Error&) {
    return {};  // unreadable: it records nothing this run can rely on
  }
}

void save_checkpoint(const std::string& path, Communicator& comm, const Gpt& model,
                     const AdamW& opt, int64_t step, const CheckpointOrigin& origin) {
  const std::vector<NamedHostTensor> tensors = checkpoint_tensors(comm, model, opt);
  DeferredError write;  // a failed write still joins the barrier its peers wait in
  if (comm.rank() == 0)
    write.run([&] { write_checkpoint(path, tensors, model, opt, step, origin); });
  comm.barrier();  // nobody reads the file before it is complete
  write.rethrow();
}

namespace {
// Expert parallelism: the EP group's rank 0 gets the other ranks' experts (weights and moments:
// the rest it holds itself); with pipeline stages the stages' EP rank 0s then send theirs to the
// first stage, as without EP; TP rank 0 of what is left writes the one file. Collective over `tp`,
// on the TP rank 0s over `ep`, and on those of EP rank 0 over `pp`.
void save_expert_parallel(const std::string& path, Communicator& tp, Communicator& pp,
                          Communicator& ep, const Gpt& model, const AdamW& opt, int64_t step,
                          const CheckpointOrigin& origin) {
  std::vector<NamedHostTensor> tensors = checkpoint_tensors(tp, model, opt);
  if (ep.rank() > 0) {
    std::set<std::string> experts;
    for (const Param& p : model.params())
      if (p.expert >= 0)
        for (const char* prefix : {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."})
          experts.insert(prefix + stored_name(p));
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [&](const NamedHostTensor& t) { return !experts.count(t.name); }),
                  tensors.end());
  }
  DeferredError write;  // a failed write still joins the barriers its peers wait in
  if (tp.rank() == 0) {
    Device& device = model.params().front().value.device();
    std::vector<NamedHostTensor> all = gather_to_first_stage(ep, device, tensors);
    if (ep.rank() == 0) {
      if (pp.size() > 1) all = gather_to_first_stage(pp, device, all);
      if (pp.rank() == 0) write.run([&] { write_checkpoint(path, all, model, opt, step, origin); });
      pp.barrier();
    }
    ep.barrier();
  }
  tp.barrier();  // nobody reads the file before it is complete
  write.rethrow();
}
}  // namespace

void save_checkpoint(const std::string& path, Communicator& tp, Communicator& pp, const Gpt& model,
                     const AdamW& opt, int64_t step, const CheckpointOrigin& origin,
                     Communicator* ep) {
  if (ep && ep->size() > 1)
    return save_expert_parallel(path, tp, pp, *ep, model, opt, step, origin);
  if (pp.size() == 1) return save_checkpoint(path, tp, model, opt, step, origin);
  const std::vector<NamedHostTensor> tensors = checkpoint_tensors(tp, model, opt);
  DeferredError write;   // a failed write still joins the barriers its peers wait in
  if (tp.rank() == 0) {  // the TP groups' rank 0s: one PP group, every stage
    const std::vector<NamedHostTensor> all =
        gather_to_first_stage(pp, model.params().front().value.device(), tensors);
    if (pp.rank() == 0) write.run([&] { write_checkpoint(path, all, model, opt, step, origin); });
    pp.barrier();
  }
  tp.barrier();  // nobody reads the file before it is complete
  write.rethrow();
}

LoadedCheckpoint load_checkpoint(const std::string& path, Communicator& comm, Gpt& model,
                                 AdamW& opt) {
  const safetensors::File f = safetensors::File::open(path);
  check_checkpoint_metadata(f);  // the file against itself first, then against this model
  const GptConfig& cfg = model.config();
  ParamList& params = model.params();
  const auto problems = mismatches(f, cfg, params);
  if (!problems.empty()) {
    std::string all;
    for (size_t i = 0; i < problems.size() && i < 4; ++i) all += (i ? "; " : "") + problems[i];
    if (problems.size() > 4) all += "; and " + std::to_string(problems.size() - 4) + " more";
    TP_CHECK_INPUT(false, "checkpoint ", path, " does not fit this model: ", all,
                   " (pass the flags it was saved with, or start without --load)");
  }
  const int t = comm.size();
  for (const Param& p : params) {
    Tensor value = p.value;
    value.copy_from_host(read_shard(f, stored_name(p), p, t));
  }
  if (cfg.tied && f.has("lm_head.weight")) {
    // A tied model has no head of its own; a file that stores one must store wte again.
    TP_CHECK_INPUT(f.read_f32("lm_head.weight") == f.read_f32("transformer.wte.weight"),
                   "checkpoint ", path,
                   " has an lm_head.weight that differs from transformer.wte.weight, but this "
                   "model ties them; load it untied or drop lm_head.weight");
  }
  LoadedCheckpoint out;
  out.checksums = f.checksums();
  out.step = f.has_metadata("step") ? metadata_count(f, "step", 0) : 0;
  out.optimizer_state = f.has("optimizer.exp_avg." + stored_name(params.front()));
  const int64_t adam_steps = checked_adam_steps(f, out.step);
  if (out.optimizer_state) {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor m = opt.exp_avg()[i], v = opt.exp_avg_sq()[i];
      m.copy_from_host(read_shard(f, "optimizer.exp_avg." + stored_name(params[i]), params[i], t,
                                  Stored::kFirstMoment, adam_steps));
      v.copy_from_host(read_shard(f, "optimizer.exp_avg_sq." + stored_name(params[i]), params[i], t,
                                  Stored::kSecondMoment, adam_steps));
    }
  }
  opt.set_steps(out.optimizer_state ? adam_steps : 0);
  return out;
}

std::map<std::string, StoredTensor> gather_stored_weights(Communicator& comm, const Gpt& model) {
  const ParamList& params = model.params();
  auto values = assemble(comm, params, [&](size_t i) { return params[i].value; });
  std::map<std::string, StoredTensor> out;
  for (const Param& p : params) {
    auto it = values.find(stored_name(p));
    if (it == values.end()) continue;  // several params share it: moved already
    out[it->first] = StoredTensor{stored_shape(p), std::move(it->second)};
    values.erase(it);
  }
  return out;
}

void load_stored_weights(const safetensors::File& f,
                         const std::function<std::string(const std::string&)>& file_name,
                         Communicator& comm, Gpt& model) {
  const int t = comm.size();
  std::map<std::string, std::vector<float>> cache;  // c_attn is read once for q, k and v
  for (const Param& p : model.params()) {
    const std::string name = file_name(stored_name(p));
    const auto want = stored_shape(p);
    TP_CHECK_INPUT(f.has(name), "model file ", f.path(), " has no tensor ", name);
    TP_CHECK_INPUT(f.info(name).shape == want, "model file ", f.path(), ": tensor ", name,
                   " has shape ", shape_str(f.info(name).shape), " but this model needs ",
                   shape_str(want));
    auto it = cache.find(name);
    if (it == cache.end()) it = cache.emplace(name, f.read_as_f32(name)).first;
    const std::vector<float>& stored = it->second;
    std::vector<float> global(static_cast<size_t>(p.rows() * p.cols()), 0.0f);  // padding: 0
    const int64_t cols = want.back();
    for (int64_t r = 0; r < stored_rows(p); ++r)
      for (int64_t c = 0; c < p.cols(); ++c)
        global[r * p.cols() + c] = stored[r * cols + p.ckpt_col0 + c];
    Tensor value = p.value;
    value.copy_from_host(shard_of(p, global, t));
  }
}

GptConfig config_from_checkpoint(const std::string& path) {
  return checked_checkpoint_config(safetensors::File::open(path));
}

std::string unverified_note(const std::string& path) {
  return "note: " + path +
         " carries no checksums (a Hugging Face file, or a checkpoint saved before they were "
         "written): its tensors are read unverified";
}

int64_t checkpoint_bytes(const Gpt& model) {
  std::map<std::string, int64_t> stored;  // name → elements (q, k and v share c_attn)
  for (const Param& p : model.params()) {
    int64_t n = 1;
    for (int64_t d : stored_shape(p)) n *= d;
    stored[stored_name(p)] = n;
  }
  int64_t bytes = 8;
  for (const auto& [name, n] : stored) {
    // Three tensors (the weight, exp_avg, exp_avg_sq) of 4-byte floats, and for each its header
    // entry and checksum: the name twice and about 110 characters of JSON.
    bytes += 3 * (4 * n + 2 * (static_cast<int64_t>(name.size()) + 20) + 110);
  }
  return bytes + 4096;  // the configuration metadata
}

void check_save_space(const std::string& path, Communicator& comm, Device& device, const Gpt& model,
                      int64_t files) {
  if (path.empty()) return;
  std::string problem;
  if (comm.rank() == 0) {
    try {
      durable::check_save_target(path, files * checkpoint_bytes(model));
    } catch (const Error& e) {
      problem = std::string("--save: ") + e.what();
      if (files > 1)
        problem += " (room for " + std::to_string(files) + " files: --keep + 1 with --save-every)";
    }
  }
  refuse_unless_empty(problem, comm, device);
}

namespace {
// The file dump_gradients writes: the gradients (a name met twice, the tied wte of two pipeline
// stages, once), the batch, the loss and the configuration.
void write_gradients(const std::string& path, const std::vector<NamedHostTensor>& grads,
                     const GptConfig& cfg, const Batch& batch, float loss) {
  safetensors::Writer w;
  add_each_once(w, grads);
  // The batch, back from sequence-major (s·B + b) to the usual (B, S).
  std::vector<int32_t> ids(batch.ids.size()), labels(batch.ids.size());
  for (int64_t s = 0; s < batch.seq; ++s)
    for (int64_t b = 0; b < batch.batch; ++b) {
      ids[b * batch.seq + s] = batch.ids[s * batch.batch + b];
      labels[b * batch.seq + s] = batch.targets[s * batch.batch + b];
    }
  w.add_i32("batch.input_ids", {batch.batch, batch.seq}, ids);
  w.add_i32("batch.labels", {batch.batch, batch.seq}, labels);
  w.add_f32("loss", {1}, {loss});
  w.set_metadata("format", kFormat);
  add_config(w, cfg);
  w.write(path);
}

// This stage's global gradients, gathered over `tp`, as "grad.<stored name>".
std::vector<NamedHostTensor> stage_gradients(Communicator& tp, const Gpt& model) {
  const ParamList& params = model.params();
  CommLedger::Scope scope(tp.ledger(), "dump_gradients");
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const Param& p : params) shapes[stored_name(p)] = stored_shape(p);
  std::vector<NamedHostTensor> out;
  for (auto& [name, values] : assemble(tp, params, [&](size_t i) { return params[i].grad; }))
    out.push_back({"grad." + name, shapes.at(name), std::move(values)});
  return out;
}
}  // namespace

void dump_gradients(const std::string& path, Communicator& comm, const Gpt& model,
                    const Batch& batch, float loss) {
  const std::vector<NamedHostTensor> grads = stage_gradients(comm, model);
  DeferredError write;  // a failed write still joins the barrier its peers wait in
  if (comm.rank() == 0)
    write.run([&] { write_gradients(path, grads, model.config(), batch, loss); });
  comm.barrier();
  write.rethrow();
}

void dump_gradients(const std::string& path, Communicator& tp, Communicator& pp, const Gpt& model,
                    const Batch& batch, float loss) {
  if (pp.size() == 1) return dump_gradients(path, tp, model, batch, loss);
  const std::vector<NamedHostTensor> grads = stage_gradients(tp, model);
  DeferredError write;   // a failed write still joins the barriers its peers wait in
  if (tp.rank() == 0) {  // the TP groups' rank 0s: one PP group, every stage
    const std::vector<NamedHostTensor> all =
        gather_to_first_stage(pp, model.params().front().value.device(), grads);
    if (pp.rank() == 0) write.run([&] { write_gradients(path, all, model.config(), batch, loss); });
    pp.barrier();
  }
  tp.barrier();  // nobody reads the file before it is complete
  write.rethrow();
}

}  // namespace tp
