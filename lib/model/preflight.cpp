#include "model/preflight.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/comm_ledger.h"
#include "core/error.h"
#include "model/memory.h"
#include "model/preflight_moe.h"
#include "observe/alpha_beta.h"

namespace tp {

namespace {

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// Memory in decimal units (GB = 10⁹ bytes, as [A3]'s tables count).
std::string bytes_str(double b) {
  if (b >= 1e9) return format("%.2f GB", b / 1e9);
  if (b >= 1e6) return format("%.2f MB", b / 1e6);
  if (b >= 1e3) return format("%.2f kB", b / 1e3);
  return format("%.0f B", b);
}

// Message sizes in binary units ([A3]'s "64 MiB").
std::string mib_str(double b) {
  if (b >= 1073741824.0) return format("%.2f GiB", b / 1073741824.0);
  if (b >= 1048576.0) return format("%.1f MiB", b / 1048576.0);
  if (b >= 1024.0) return format("%.1f KiB", b / 1024.0);
  return format("%.0f B", b);
}

std::string time_str(double s) {
  if (s >= 1.0) return format("%.2f s", s);
  if (s >= 1e-4) return format("%.2f ms", s * 1e3);
  return format("%.1f µs", s * 1e6);
}

std::string count_str(int64_t n) {
  if (n >= 1000000000) return format("%.2fB", n / 1e9);
  if (n >= 1000000) return format("%.2fM", n / 1e6);
  if (n >= 1000) return format("%.1fk", n / 1e3);
  return std::to_string(n);
}

// `s` padded with spaces to `width` characters (UTF-8 aware: "α" and "µ" count once).
std::string pad(const std::string& s, size_t width) {
  size_t chars = 0;
  for (unsigned char ch : s) chars += (ch & 0xC0) != 0x80;
  return chars >= width ? s : s + std::string(width - chars, ' ');
}

// `s` right-aligned in `width` characters (UTF-8 aware).
std::string rpad(const std::string& s, size_t width) {
  size_t chars = 0;
  for (unsigned char ch : s) chars += (ch & 0xC0) != 0x80;
  return chars >= width ? s : std::string(width - chars, ' ') + s;
}

const char* split_name(Split s) {
  return s == Split::Columns ? "columns" : s == Split::Rows ? "rows" : "replicated";
}

/// How often a tensor or a collective of the step counts: in each of the L blocks, or once.
enum class Times { EachLayer, Once };

// The parameters of tp::Gpt for `cfg` at t with a padded vocabulary of `vocab_rows`, in its
// ParamList order (Gpt's constructor, TransformerBlock, ParallelAttention, ParallelMLP, Norm).
std::vector<PreflightTensor> model_tensors(const GptConfig& c, int t, int64_t vocab_rows) {
  std::vector<PreflightTensor> out;
  auto add = [&](const std::string& name, Shape global, Split split, Times times) {
    PreflightTensor x;
    x.name = name;
    x.global = global;
    x.split = split;
    x.per_layer = times == Times::EachLayer;
    const int last = global.ndim() - 1;
    x.local = split == Split::Columns ? global.with(last, global[last] / t)
              : split == Split::Rows  ? global.with(0, global[0] / t)
                                      : global;
    out.push_back(x);
  };
  auto norm = [&](const std::string& name, Times times) {
    add(name + ".weight", Shape{c.hidden}, Split::Replicated, times);
    if (c.norm_kind() == NormKind::LayerNorm)
      add(name + ".bias", Shape{c.hidden}, Split::Replicated, times);
  };
  auto column = [&](const std::string& name, int64_t in, int64_t o) {
    add(name + ".weight", Shape{in, o}, Split::Columns, Times::EachLayer);
    add(name + ".bias", Shape{o}, Split::Columns, Times::EachLayer);
  };
  auto row = [&](const std::string& name, int64_t in, int64_t o) {
    add(name + ".weight", Shape{in, o}, Split::Rows, Times::EachLayer);
    add(name + ".bias", Shape{o}, Split::Replicated, Times::EachLayer);
  };
  const int64_t h = c.hidden, hd = c.head_dim(), f = c.inner();
  add("transformer.wte.weight", Shape{vocab_rows, h}, Split::Rows, Times::Once);
  add("transformer.wpe.weight", Shape{c.seq, h}, Split::Replicated, Times::Once);
  const std::string b = "transformer.h.0.";
  norm(b + "ln_1", Times::EachLayer);
  column(b + "attn.q", h, c.heads * hd);
  column(b + "attn.k", h, c.kv() * hd);
  column(b + "attn.v", h, c.kv() * hd);
  row(b + "attn.c_proj", c.heads * hd, h);
  norm(b + "ln_2", Times::EachLayer);
  column(b + "mlp.c_fc", h, f);
  if (c.activation() == Activation::SwiGlu) column(b + "mlp.c_gate", h, f);
  row(b + "mlp.c_proj", f, h);
  norm("transformer.ln_f", Times::Once);
  if (!c.tied) add("lm_head.weight", Shape{vocab_rows, h}, Split::Rows, Times::Once);
  return out;
}

}  // namespace

double comm_share(double comm, double compute) {
  return comm + compute > 0 ? comm / (comm + compute) : 0.0;
}

std::vector<PlannedCollective> step_collectives(const GptConfig& c, int64_t batch, int t,
                                                int64_t d) {
  std::vector<PlannedCollective> out;
  if (t <= 1) return out;
  const int64_t N = c.seq * batch, Nh = N * c.hidden, L = c.layers;
  auto add = [&](const char* op, int64_t elements, int64_t bytes_each, int count, Times times,
                 const char* pass, const char* why) {
    out.push_back(
        {op, elements, elements * bytes_each, count, times == Times::EachLayer, pass, why});
  };
  const char *fwd = "forward", *bwd = "backward", *after = "after backward";
  if (!c.sp) {
    add("all_reduce", Nh, d, 1, Times::Once, fwd, "embedding: each rank looked up its own ids");
    add("all_reduce", Nh, d, 2, Times::EachLayer, fwd,
        "g: after attention's and the MLP's row-parallel c_proj");
  } else {
    add("reduce_scatter", Nh, d, 1, Times::Once, fwd,
        "embedding: summed, each rank keeps S/t tokens");
    add("all_gather", Nh, d, 2, Times::EachLayer, fwd,
        "the S/t-token input of attention and of the MLP");
    add("reduce_scatter", Nh, d, 2, Times::EachLayer, fwd,
        "after attention's and the MLP's c_proj");
    add("all_gather", Nh, d, 1, Times::Once, fwd, "ln_f's output, for the head");
  }
  add("all_reduce_max", N, 4, 1, Times::Once, fwd, "loss: the row max of the logits");
  add("all_reduce", N, 4, 2, Times::Once, fwd, "loss: Σ exp and the target logit");
  if (!c.sp) {
    add("all_reduce", Nh, d, 1, Times::Once, bwd, "the head's dX");
    add("all_reduce", Nh, d, 2, Times::EachLayer, bwd,
        "f: dX of attention's q, k, v and of the MLP's c_fc");
  } else {
    add("reduce_scatter", Nh, d, 1, Times::Once, bwd, "the head's dX");
    add("all_gather", Nh, d, 2, Times::EachLayer, bwd, "dY of each row-parallel c_proj");
    add("all_gather", Nh, d, 2, Times::EachLayer, bwd, "the kept S/t-token input, gathered again");
    add("reduce_scatter", Nh, d, 2, Times::EachLayer, bwd, "dX of attention and of the MLP");
    add("all_gather", Nh, d, 1, Times::Once, bwd, "the embedding's dY");
    const int64_t nv = c.norm_kind() == NormKind::LayerNorm ? 2 : 1;
    add("all_reduce", c.seq * c.hidden + L * (2 * nv + 2) * c.hidden + nv * c.hidden, d, 1,
        Times::Once, after, "partial gradients of wpe, the norms and the c_proj biases");
  }
  add("all_reduce", 1, 4, 1, Times::Once, after, "the gradient norm");
  return out;
}

namespace {

// The problems of the input itself: each one stops the preflight before it divides by t.
void check_input(const PreflightInput& in, Preflight& p) {
  auto problem = [&](bool ok, const std::string& msg) {
    if (!ok) p.problems.push_back(msg);
  };
  problem(in.batch >= 1, "--batch=" + std::to_string(in.batch) + " must be at least 1");
  problem(in.dtype_bytes >= 1, "the bytes per value must be at least 1");
  problem(in.flops > 0, "the FLOP rate must be positive");
  problem(in.nodes >= 0 && in.gpus_per_node >= 0,
          "--nodes and --gpus-per-node must be positive (or 0: not given)");
  problem(in.t >= 1, "t=" + std::to_string(in.t) + " must be at least 1");
  problem(in.micro_batches >= 1 && in.batch % std::max(1, in.micro_batches) == 0,
          format("--micro-batches=%d does not divide --batch=%lld (the sequences of one TP group)",
                 in.micro_batches, static_cast<long long>(in.batch)));
}

// The model at t (t >= 1): KV-head replication where asked, the configuration's own problems and
// whether one step's activations can be counted at all.
void check_model(const PreflightInput& in, Preflight& p) {
  const int t = in.t;
  // KV-head replication: with nkv | t and nh | t each rank can hold one KV head, stored on t/nkv
  // ranks; per rank that is the model with nkv = t.
  const int64_t kv = in.model.kv();
  if (in.kv_replication && kv >= 1 && kv < t && t % kv == 0 && in.model.heads % t == 0) {
    p.kv_copies = t / kv;
    p.cfg.kv_heads = t;
    p.notes.push_back("kv_heads=" + std::to_string(kv) + " < t=" + std::to_string(t) +
                      ": KV-head replication, " + std::to_string(p.kv_copies) +
                      " copies of each KV head (one per rank, shared by its " +
                      std::to_string(in.model.heads / t) +
                      " query heads); the shards and memory below count the copies");
  }
  for (const std::string& m : p.cfg.problems(t, in.t_label)) p.problems.push_back(m);
  if (!p.problems.empty()) return;
  // The largest activations of a step, in floating point: they must stay countable (64-bit
  // byte counts below, and the allocations themselves).
  const GptConfig& c = p.cfg;
  const double n = static_cast<double>(in.batch) * static_cast<double>(c.seq);
  const double most =
      std::max({n * static_cast<double>(c.hidden), n * static_cast<double>(c.inner()),
                n * static_cast<double>(c.padded_vocab(t)),
                n * static_cast<double>(c.seq) * static_cast<double>(c.heads)});
  if (!(in.batch <= GptConfig::kMaxSize && most <= GptConfig::kMaxElements))
    p.problems.push_back(
        format("--batch=%lld x seq=%lld: one step's activations would hold about %.3g values, "
               "more than any machine holds; reduce --batch or --seq",
               static_cast<long long>(in.batch), static_cast<long long>(c.seq), most));
}

// The job: enough GPUs for t (a problem), idle ones and TP groups across nodes (warnings).
void check_job(const PreflightInput& in, Preflight& p) {
  const int t = in.t;
  const int64_t gpus = static_cast<int64_t>(in.nodes) * in.gpus_per_node;
  if (!(gpus == 0 || t <= gpus))
    p.problems.push_back(
        format("t=%d needs %d GPUs but the job has %d nodes x %d GPUs = %lld; lower t or add "
               "nodes",
               t, t, in.nodes, in.gpus_per_node, static_cast<long long>(gpus)));
  if (gpus > 0 && t <= gpus && gpus % t != 0)
    p.warnings.push_back(format("%lld GPUs do not split into TP groups of %d: %lld stay idle",
                                static_cast<long long>(gpus), t, static_cast<long long>(gpus % t)));
  if (in.gpus_per_node > 0 && t > in.gpus_per_node)
    p.warnings.push_back(format(
        "t=%d > %d GPUs per node: each TP group spans %d nodes, so every all-reduce of every "
        "layer crosses the inter-node link (InfiniBand below); keep t <= %d and put data or "
        "pipeline parallelism across nodes",
        t, in.gpus_per_node, (t + in.gpus_per_node - 1) / in.gpus_per_node, in.gpus_per_node));
}

// The padded vocabulary, every shard, the parameters and the model states' bytes per rank.
void count_parameters(const PreflightInput& in, Preflight& p) {
  const GptConfig& c = p.cfg;
  const int t = in.t;
  p.padded_vocab = c.padded_vocab(t);
  if (p.padded_vocab != c.vocab)
    p.notes.push_back(format(
        "vocab=%lld is padded to %lld (+%lld rows, a multiple of %lld) so that each rank owns "
        "%lld rows of wte%s; the padding is never looked up and never wins the softmax",
        static_cast<long long>(c.vocab), static_cast<long long>(p.padded_vocab),
        static_cast<long long>(p.padded_vocab - c.vocab),
        static_cast<long long>(c.pad_vocab_multiple * t),
        static_cast<long long>(p.padded_vocab / t), c.tied ? "" : " and lm_head"));

  p.tensors = model_tensors(c, t, p.padded_vocab);
  for (const PreflightTensor& x : p.tensors)
    p.params_per_rank += x.local.numel() * (x.per_layer ? c.layers : 1);
  for (const PreflightTensor& x : model_tensors(in.model, 1, in.model.vocab)) {
    p.params_total += x.global.numel() * (x.per_layer ? c.layers : 1);
    if (x.per_layer) p.params_per_layer += x.global.numel();
  }
  // A mixture of experts (model/preflight_moe.h): the router and every expert whole on each rank
  // in place of the MoE blocks' MLP shards; compute counts the k experts a token visits.
  p.params_per_rank += moe_extra_params(c, t);
  p.params_total += moe_extra_params(in.model, 1);
  p.params_per_layer = moe_active_per_layer(in.model, p.params_per_layer);
  const int64_t P = p.params_per_rank, d = in.dtype_bytes;
  // Mixed precision (d < 4, --precision bf16): a d-byte compute copy of the weights over the fp32
  // master (counted with AdamW); the weight gradients stay fp32 in this implementation
  // (docs/model.md, "Precision"), so the model states are 2 + 4 + 4 + 8 = 18 B per parameter
  // against fp32's 4 + 4 + 8 = 16: mixed precision saves activations and wire bytes, not states.
  p.weight_bytes = P * d;
  p.grad_bytes = P * 4;
  // ZeRO-1 as this library does it (AdamW::shard_over): each DP rank holds AdamW's two moments
  // of its ⌈P/dp⌉ of the flattened parameters; the fp32 master stays whole on every rank (it is
  // the parameter itself): 6 + 4 + 8/dp B per parameter in bf16. The ZeRO paper's stage 1 shards
  // the master too (2 + 2 + 12/dp); report_memory prints that figure beside it.
  const int64_t dp = std::max(1, in.zero_dp), owned = (P + dp - 1) / dp;
  p.adamw_bytes = owned * 8 + (d < 4 ? P * 4 : 0);
}

// The model without and with sequence parallelism, its activations in d-byte values.
GptConfig without_sp(const Preflight& p) {
  GptConfig g = p.cfg;
  g.sp = false;
  if (p.in.dtype_bytes < 4) g.precision = Precision::Bf16;  // 2-byte activations
  return g;
}
GptConfig with_sp(const Preflight& p) {
  GptConfig g = without_sp(p);
  g.sp = true;
  return g;
}

// Activations per layer (this implementation's and Korthikanti et al.'s), logits and the peak.
void count_activations(const PreflightInput& in, Preflight& p) {
  const GptConfig& c = p.cfg;
  const int t = in.t;
  const int64_t S = c.seq, B = in.batch, N = S * B, d = in.dtype_bytes;
  p.act_impl_tp = block_activation_bytes(without_sp(p), S, B, t);
  p.act_impl_sp = block_activation_bytes(with_sp(p), S, B, t);
  const double sbh = static_cast<double>(N) * static_cast<double>(c.hidden);
  const double scores = 5.0 * static_cast<double>(c.heads) * S * S * B;  // 5 a s² b
  p.act_k_none_flash = 34.0 * sbh;
  p.act_k_tp_flash = (10.0 + 24.0 / t) * sbh;
  p.act_k_sp_flash = 34.0 / t * sbh;
  p.act_k_none = p.act_k_none_flash + scores;
  p.act_k_tp = p.act_k_tp_flash + scores / t;
  p.act_k_sp = p.act_k_sp_flash + scores / t;
  p.logits_bytes = N * (p.padded_vocab / t) * 4;
  GptConfig peak_cfg = c;  // the peak in the precision the bytes per value name
  peak_cfg.precision = d < 4 ? Precision::Bf16 : Precision::Fp32;
  const int64_t dp = std::max(1, in.zero_dp);
  p.peak = memory_peak(peak_cfg, S, B / std::max(1, in.micro_batches), t, p.params_per_rank, dp);
}

// The collectives of a step, the compute of a layer, their times on each link, and the warning
// when communication is too large a share of the step.
void time_communication(const PreflightInput& in, Preflight& p) {
  const GptConfig& c = p.cfg;
  const int t = in.t;
  const int64_t B = in.batch, N = c.seq * B, d = in.dtype_bytes;
  p.collectives = step_collectives(without_sp(p), B, t, d);
  p.collectives_sp = step_collectives(with_sp(p), B, t, d);
  p.layer_compute =
      6.0 * static_cast<double>(p.params_per_layer) * static_cast<double>(N) / t / in.flops;
  for (const char* name : {"nvlink", "ib"}) {
    LinkEstimate e;
    e.link = *parse_link(name);
    const int64_t ar = N * c.hidden * d;
    e.all_reduce_beta = ring_wire_bytes("all_reduce", t, ar) / e.link.model.beta;
    e.all_reduce = predict_seconds("all_reduce", t, ar, e.link.model);
    for (const auto* list : {&p.collectives, &p.collectives_sp})
      for (const PlannedCollective& k : *list)
        if (k.per_layer)
          (list == &p.collectives ? e.layer_comm : e.layer_comm_sp) +=
              k.count * predict_seconds(k.op, t, k.bytes, e.link.model);
    p.links.push_back(e);
  }
  // [A1] §6 and [A2] §6.4: look at overlap (or at the group's link) when communication is more
  // than 30 % of the step. Their share is of the whole step, communication and compute run one
  // after the other: comm / (comm + compute), not comm / compute.
  const double fast = c.sp ? p.links[0].layer_comm_sp : p.links[0].layer_comm;
  const double share = comm_share(fast, p.layer_compute);
  if (t > 1 && share > 0.3)
    p.warnings.push_back(format(
        "communication is %.0f%% of each layer's step even on NVLink (%s of it, %s of compute at "
        "%.0f TFLOPS, one after the other): above the 30%% share of [A1] and [A2]. Both grow "
        "with the tokens, so a larger batch does not help; the share grows with t and falls with "
        "h: use the smallest t that fits, or overlap (tp_train --overlap)",
        100.0 * share, time_str(fast).c_str(), time_str(p.layer_compute).c_str(), in.flops / 1e12));
}

}  // namespace

Preflight preflight(const PreflightInput& in) {
  Preflight p;
  p.in = in;
  p.cfg = in.model;
  check_input(in, p);
  if (in.t < 1) return p;  // every further check divides by t
  check_model(in, p);
  check_job(in, p);
  if (!p.problems.empty()) return p;
  count_parameters(in, p);
  count_activations(in, p);
  time_communication(in, p);
  return p;
}

std::string problems_message(const std::vector<std::string>& problems) {
  if (problems.size() == 1) return problems[0];
  std::string head = std::to_string(problems.size()) + " problems: ";
  // "error: " (the launcher's prefix) + head: the width the further lines are indented by.
  const std::string indent(7 + head.size(), ' ');
  std::string all = head;
  for (size_t i = 0; i < problems.size(); ++i) all += (i ? "\n" + indent : "") + problems[i];
  return all;
}

namespace {

// The input, then the problems, warnings and notes.
void report_checks(std::ostream& os, const Preflight& p) {
  const PreflightInput& in = p.in;
  os << "model: " << in.model.str() << "\n";
  os << "step: batch " << in.batch << " x seq " << in.model.seq << " = " << in.batch * in.model.seq
     << " tokens, t = " << in.t << ", " << in.dtype_bytes << " bytes per value";
  if (in.nodes > 0 || in.gpus_per_node > 0)
    os << ", " << in.nodes << " nodes x " << in.gpus_per_node << " GPUs";
  os << "\n";
  os << "\n# problems: " << p.problems.size() << "\n";
  for (const auto& m : p.problems) os << "  ✗ " << m << "\n";
  if (!p.warnings.empty()) os << "# warnings\n";
  for (const auto& m : p.warnings) os << "  ! " << m << "\n";
  if (!p.notes.empty()) os << "# notes\n";
  for (const auto& m : p.notes) os << "  · " << m << "\n";
}

// The shard of every tensor and the parameter counts.
void report_shards(std::ostream& os, const Preflight& p) {
  const GptConfig& c = p.cfg;
  os << "\n# shards: every rank holds the same shapes (this project's GPT: weights stored [in, "
        "out], biases, learned positions)\n";
  std::vector<std::string> names;
  size_t w = 6;
  for (const PreflightTensor& x : p.tensors) {
    std::string name = x.name;
    if (x.per_layer)
      name.replace(name.find(".h.0.") + 3, 1,
                   c.layers > 1 ? "{0.." + std::to_string(c.layers - 1) + "}" : "0");
    names.push_back(name);
    w = std::max(w, name.size());
  }
  os << "  " << pad("tensor", w) << "  " << pad("global", 16) << pad("split", 12) << "per rank\n";
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const PreflightTensor& x = p.tensors[i];
    os << "  " << pad(names[i], w) << "  " << pad(x.global.str(), 16)
       << pad(split_name(x.split), 12) << x.local.str() << "\n";
  }
  os << "  parameters: " << count_str(p.params_total) << " in the model, "
     << count_str(p.params_per_rank) << " held by each rank (replicated ones and padding rows "
     << "included)\n";
  if (c.experts > 0)
    os << "  (the MoE blocks hold a router and " << c.experts
       << " whole experts instead of the mlp.* shards: # mixture of experts below; the counts "
          "include them)\n";
}

// The memory of one rank: model states, activations both ways, logits and the peak.
void report_memory(std::ostream& os, const Preflight& p) {
  const PreflightInput& in = p.in;
  const GptConfig& c = p.cfg;
  const int t = p.in.t;
  const int64_t L = c.layers;
  const bool fp32 = in.dtype_bytes >= 4;
  // This implementation's activations in either precision (bf16: 2 B values, fp32 statistics and
  // masks; model/memory.h).
  const double act_total = static_cast<double>(c.sp ? p.act_impl_sp : p.act_impl_tp) * L;
  os << "\n# memory per rank (GB = 10^9 bytes)\n";
  os << format("  %-52s %12s\n", "weights (P x d)", bytes_str(p.weight_bytes).c_str());
  os << format("  %-52s %12s\n", "gradients, fp32 (P x 4)", bytes_str(p.grad_bytes).c_str());
  // ZeRO-1 as this library shards it: the moments only (docs/model.md, "Memory accounting").
  const int zero_dp = std::max(1, in.zero_dp);
  const std::string sharded = format("8 x ceil(P/%d)", zero_dp);
  const std::string adamw = zero_dp == 1
                                ? (fp32 ? "AdamW exp_avg + exp_avg_sq (P x 8)"
                                        : "AdamW exp_avg + exp_avg_sq + fp32 master (P x 12)")
                                : (fp32 ? "AdamW exp_avg + exp_avg_sq (" + sharded + ")"
                                        : "AdamW m, v (" + sharded + ") + fp32 master (P x 4)");
  os << format("  %-52s %12s\n", adamw.c_str(), bytes_str(p.adamw_bytes).c_str());
  if (zero_dp > 1) {
    const int64_t owned = (p.params_per_rank + zero_dp - 1) / zero_dp;
    os << "    (ZeRO-1 as this library shards it: the moments only"
       << (fp32 ? ")\n"
                : format(";\n     the ZeRO paper's stage 1 shards the fp32 master too: 12 x "
                         "ceil(P/%d) = %s)\n",
                         zero_dp, bytes_str(static_cast<double>(owned * 12)).c_str()));
  }
  os << format("  activations, per layer and for all %lld layers:\n", static_cast<long long>(L));
  auto act = [&](const char* what, double per_layer) {
    os << format("    %-50s %12s %12s\n", what, bytes_str(per_layer).c_str(),
                 bytes_str(per_layer * L).c_str());
  };
  act(fp32 ? "this implementation (fp32), TP" : "this implementation (bf16), TP", p.act_impl_tp);
  act(fp32 ? "this implementation (fp32), TP + SP" : "this implementation (bf16), TP + SP",
      p.act_impl_sp);
  act("Korthikanti, no TP: sbh*34 + 5as^2b", p.act_k_none);
  act(format("Korthikanti, TP: sbh*(10 + 24/%d) + 5as^2b/%d", t, t).c_str(), p.act_k_tp);
  act(format("Korthikanti, TP + SP: sbh*34/%d + 5as^2b/%d", t, t).c_str(), p.act_k_sp);
  act("  with FlashAttention (no s x s scores), no TP", p.act_k_none_flash);
  act("  with FlashAttention, TP", p.act_k_tp_flash);
  act("  with FlashAttention, TP + SP", p.act_k_sp_flash);
  os << "    (Korthikanti et al. 2022: 16-bit values, 1-byte masks, f = 4h, nkv = nh)\n";
  os << format(
      "  %-52s %12s\n",
      format("logits, fp32 (N x V'/t = %lld x %lld)", static_cast<long long>(in.batch * c.seq),
             static_cast<long long>(p.padded_vocab / t))
          .c_str(),
      bytes_str(p.logits_bytes).c_str());
  os << format("  %-52s %12s\n",
               format("total, this implementation's activations%s", c.sp ? " with SP" : "").c_str(),
               bytes_str(p.weight_bytes + p.grad_bytes + p.adamw_bytes + act_total +
                         static_cast<double>(p.logits_bytes))
                   .c_str());

  os << format("  %-52s %12s\n",
               format("peak, %s: --recompute %s, --micro-batches %d, ZeRO-1 dp %d",
                      in.dtype_bytes < 4 ? "bf16" : "fp32", recompute_name(c.recompute),
                      in.micro_batches, std::max(1, in.zero_dp))
                   .c_str(),
               bytes_str(static_cast<double>(p.peak.total())).c_str());
  os << format("    weights %s, gradients %s, optimizer %s, activations %s (%s the largest)\n",
               bytes_str(static_cast<double>(p.peak.weights)).c_str(),
               bytes_str(static_cast<double>(p.peak.grads)).c_str(),
               bytes_str(static_cast<double>(p.peak.optimizer)).c_str(),
               bytes_str(static_cast<double>(p.peak.activations)).c_str(), p.peak.largest());
}

// One list of collectives (plain TP or TP + SP) and its bytes per rank.
void report_collectives(std::ostream& os, const Preflight& p,
                        const std::vector<PlannedCollective>& list, const char* title) {
  const PreflightInput& in = p.in;
  const GptConfig& c = p.cfg;
  const int t = in.t;
  const int64_t L = c.layers;
  os << "\n# collectives of one step, " << title << " (N = " << in.batch * c.seq
     << " tokens; per rank under the ring model)\n";
  if (list.empty()) {
    os << "  none at t = 1\n";
    return;
  }
  double per_layer = 0, once = 0;
  for (const PlannedCollective& k : list) {
    const double wire = k.count * ring_wire_bytes(k.op, t, k.bytes);
    (k.per_layer ? per_layer : once) += wire;
    os << format("  %-14s %-15s %d x %-10s sends %10s  %s%s\n", k.pass.c_str(), k.op.c_str(),
                 k.count, mib_str(static_cast<double>(k.bytes)).c_str(), mib_str(wire).c_str(),
                 k.per_layer ? "per layer: " : "", k.why.c_str());
  }
  os << "  per rank: " << mib_str(per_layer) << " per layer, " << mib_str(per_layer * L) << " for "
     << L << " layers, + " << mib_str(once) << " once per step\n";
}

// The time of a layer: compute, and communication on each link.
void report_time(std::ostream& os, const Preflight& p) {
  const PreflightInput& in = p.in;
  const GptConfig& c = p.cfg;
  const int t = p.in.t;
  const int64_t ar_bytes = in.batch * c.seq * c.hidden * in.dtype_bytes;
  os << "\n# time per layer, forward + backward, one rank\n";
  os << format("  compute: 6 x %s parameters x %lld tokens / t = %.3g FLOP at %.0f TFLOPS: %s\n",
               count_str(p.params_per_layer).c_str(), static_cast<long long>(in.batch * c.seq),
               6.0 * p.params_per_layer * in.batch * c.seq / t, in.flops / 1e12,
               time_str(p.layer_compute).c_str());
  if (t > 1) {
    os << format(
        "  one all-reduce of [%lld, %lld, %lld] x %lld bytes = %s sends 2(t-1)/t x %s "
        "= %s per rank\n",
        static_cast<long long>(in.batch), static_cast<long long>(c.seq),
        static_cast<long long>(c.hidden), static_cast<long long>(in.dtype_bytes),
        mib_str(static_cast<double>(ar_bytes)).c_str(),
        mib_str(static_cast<double>(ar_bytes)).c_str(),
        mib_str(ring_wire_bytes("all_reduce", t, ar_bytes)).c_str());
    os << "  " << pad("link", 30)
       << format("%24s %12s %12s %18s\n", "one all-reduce", "layer, TP", "layer, SP",
                 c.sp ? "comm share, SP" : "comm share, TP");
    for (const LinkEstimate& e : p.links) {
      const double mine = c.sp ? e.layer_comm_sp : e.layer_comm;
      os << "  " << pad(e.link.str(), 30) << rpad(time_str(e.all_reduce_beta), 10) << " (+α "
         << rpad(time_str(e.all_reduce), 9) << ") " << rpad(time_str(e.layer_comm), 12) << " "
         << rpad(time_str(e.layer_comm_sp), 12)
         << format(" %17.0f%%\n", 100.0 * comm_share(mine, p.layer_compute));
    }
    int per_layer = 0;  // plain TP: every per-layer collective is an all-reduce of N·h
    for (const PlannedCollective& k : p.collectives) per_layer += k.per_layer ? k.count : 0;
    const int64_t n = per_layer * c.layers;
    os << format(
        "  all %lld layers, plain TP: %lld all-reduces, %s on %s and %s on %s (β terms; "
        "%s and %s with α); compute %s\n",
        static_cast<long long>(c.layers), static_cast<long long>(n),
        time_str(n * p.links[0].all_reduce_beta).c_str(), p.links[0].link.name.c_str(),
        time_str(n * p.links[1].all_reduce_beta).c_str(), p.links[1].link.name.c_str(),
        time_str(n * p.links[0].all_reduce).c_str(), time_str(n * p.links[1].all_reduce).c_str(),
        time_str(c.layers * p.layer_compute).c_str());
    os << "  (the first time is the β term alone, [A3]'s way of counting; +α adds the "
       << 2 * (t - 1) << " ring steps' latency. A forward all-reduce sits on the critical "
       << "path: the next operation needs its result. Only a split of the GEMMs around it hides "
       << "part of it: tp_train --overlap async|ring, lesson 11)\n";
  } else {
    os << "  t = 1: nothing to communicate\n";
  }
}

}  // namespace

std::string preflight_report(const Preflight& p) {
  std::ostringstream os;
  report_checks(os, p);
  if (!p.problems.empty()) {
    os << "\nshards, memory and time are left out until the problems are fixed\n";
    return os.str();
  }
  report_shards(os, p);
  report_memory(os, p);
  report_collectives(os, p, p.collectives, "plain TP");
  report_collectives(os, p, p.collectives_sp, "TP + SP");
  report_time(os, p);
  return os.str();
}

}  // namespace tp
