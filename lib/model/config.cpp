#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace tp {

namespace {
std::string divisors(int64_t n) {
  std::string s;
  for (int64_t d = 1; d <= n && d <= 64; ++d)
    if (n % d == 0) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "{" + s + "}";
}
// "1.2e+20"
std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
}  // namespace

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::Gelu;
  if (name == "swiglu") return Activation::SwiGlu;
  TP_CHECK_INPUT(false, "--act=", name, ": expected gelu or swiglu");
  return Activation::Gelu;
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "bf16") return Precision::Bf16;
  TP_CHECK_INPUT(false, "--precision=", name, ": expected fp32 or bf16");
  return Precision::Fp32;
}

const char* precision_name(Precision precision) {
  return precision == Precision::Bf16 ? "bf16" : "fp32";
}

NormKind parse_norm(const std::string& name) {
  if (name == "layernorm") return NormKind::LayerNorm;
  if (name == "rmsnorm") return NormKind::RmsNorm;
  TP_CHECK_INPUT(false, "--norm=", name, ": expected layernorm or rmsnorm");
  return NormKind::LayerNorm;
}

double GptConfig::approx_parameters(int t) const {
  const double h = static_cast<double>(hidden), f = static_cast<double>(ffn > 0 ? ffn : 4 * h);
  const double kv_dim =
      heads > 0 ? static_cast<double>(kv()) * (h / static_cast<double>(heads)) : h;
  const double m = static_cast<double>(pad_vocab_multiple) * std::max(t, 1);
  const double v = std::ceil(static_cast<double>(vocab) / m) * m;  // the padded vocabulary
  const double block = h * (h + 2 * kv_dim) + h * h +
                       (activation() == Activation::SwiGlu ? 3 : 2) * h * f + 6 * h + f;
  const bool swiglu = activation() == Activation::SwiGlu;
  const double mlp = (swiglu ? 3 : 2) * h * f + (swiglu ? 2 : 1) * f + h;  // one expert
  double total = static_cast<double>(layers) * block;
  if (experts > 0 && moe_every > 0)  // L / n MoE blocks: E expert MLPs and the router (h × E)
    total += static_cast<double>(layers / moe_every) * ((experts - 1) * mlp + h * experts);
  return total + (v * (tied ? 1 : 2) + static_cast<double>(seq)) * h;
}

std::vector<std::string> GptConfig::problems(int t, const std::string& t_label) const {
  std::vector<std::string> p;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) p.push_back(msg);
  };
  need(layers >= 1, "--layers=" + std::to_string(layers) + " must be at least 1");
  need(hidden >= 1, "--hidden=" + std::to_string(hidden) + " must be at least 1");
  need(heads >= 1, "--heads=" + std::to_string(heads) + " must be at least 1");
  need(vocab >= 4, "--vocab=" + std::to_string(vocab) + " must be at least 4");
  need(seq >= 1, "--seq=" + std::to_string(seq) + " must be at least 1");
  need(kv_heads >= 0,
       "--kv-heads=" + std::to_string(kv_heads) + " must be 0 (= heads) or positive");
  need(ffn >= 0, "--ffn=" + std::to_string(ffn) + " must be 0 (= 4·hidden) or positive");
  need(dropout >= 0.0f && dropout < 1.0f, "--dropout=" + sci(dropout) + " must be in [0, 1)");
  need(pad_vocab_multiple >= 1,
       "--pad-vocab-multiple=" + std::to_string(pad_vocab_multiple) + " must be at least 1");
  need(experts >= 0, "--experts=" + std::to_string(experts) + " must be 0 (dense) or positive");
  if (experts > 0) {
    need(top_k >= 1 && top_k <= experts,
         "--top-k=" + std::to_string(top_k) +
             " must be in [1, --experts=" + std::to_string(experts) + "]");
    need(moe_every >= 1, "--moe-every=" + std::to_string(moe_every) + " must be at least 1");
    need(std::isfinite(capacity_factor) && capacity_factor >= 0,
         "--capacity-factor=" + sci(capacity_factor) + " must be 0 (dropless) or positive");
    need(aux_loss_coef >= 0 && z_loss_coef >= 0,
         "--aux-loss-coef and --z-loss-coef must be 0 or positive");
  }
  if (!p.empty()) return p;
  // Sizes: each one, and the parameter count, small enough that no size computed from them (shapes,
  // bytes, the preflight's sums) overflows a 64-bit integer.
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"layers", layers},
                                    {"hidden", hidden},
                                    {"heads", heads},
                                    {"kv-heads", kv_heads},
                                    {"ffn", ffn},
                                    {"vocab", vocab},
                                    {"seq", seq},
                                    {"pad-vocab-multiple", pad_vocab_multiple}})
    need(value <= kMaxSize, std::string("--") + flag + "=" + std::to_string(value) +
                                " is too large: at most " + std::to_string(kMaxSize));
  if (!p.empty()) return p;
  const double params = approx_parameters(t);
  need(params <= kMaxElements,
       "this model has about " + sci(params) + " parameters (" + sci(params * 4 / 1099511627776.0) +
           " TiB in fp32), more than any machine holds; reduce --hidden, --layers, --ffn, "
           "--vocab or --pad-vocab-multiple");
  if (!p.empty() || t < 1) return p;
  const std::string ts = std::to_string(t);
  need(hidden % heads == 0, "hidden=" + std::to_string(hidden) + " is not divisible by heads=" +
                                std::to_string(heads) + "; choose heads in " + divisors(hidden));
  need(heads % t == 0, "heads=" + std::to_string(heads) + " is not divisible by t=" + ts + " (" +
                           t_label + "): each rank owns whole heads; run with t in " +
                           divisors(heads));
  need(heads % kv() == 0, "heads=" + std::to_string(heads) + " is not divisible by kv_heads=" +
                              std::to_string(kv()) + "; choose kv_heads in " + divisors(heads));
  // kv_heads < t with t % kv_heads = 0 could be served by storing every KV head on t/kv_heads
  // ranks (KV-head replication); this model does not, but the message names it as the other fix.
  const bool replicable = kv() > 0 && kv() < t && t % kv() == 0;
  need(kv() % t == 0,
       "kv_heads=" + std::to_string(kv()) + " is not divisible by t=" + ts + "; run with t in " +
           divisors(kv()) + " or raise --kv-heads" +
           (replicable ? " to " + ts + " (or keep " + std::to_string(t / kv()) +
                             " copies of each KV head, one per rank: KV-head replication, which "
                             "this model does not do; tp_preflight --kv-replication plans it)"
                       : ""));
  need(inner() % t == 0, "ffn=" + std::to_string(inner()) + " is not divisible by t=" + ts +
                             "; run with t in " + divisors(inner()) + " or change --ffn");
  need(overlap != Overlap::Ring || sp,
       "overlap=ring needs sequence parallelism (--sp): the ring passes blocks of the sequence; "
       "add --sp or use --overlap async");
  need(overlap != Overlap::Chunked || !sp,
       "overlap=chunked is for plain TP (it chunks g's and f's all-reduces); with --sp use "
       "--overlap ring, or drop --sp");
  need(!sp || seq % t == 0,
       "seq=" + std::to_string(seq) + " is not divisible by t=" + ts +
           ": sequence parallelism gives each rank seq/t tokens; run with t in " + divisors(seq) +
           " or change --seq");
  return p;
}

void GptConfig::validate(int t) const {
  const auto p = problems(t);
  if (p.empty()) return;
  std::string all =
      p.size() == 1 ? "" : std::to_string(p.size()) + " problems with the model configuration: ";
  for (size_t i = 0; i < p.size(); ++i) all += (i ? "; " : "") + p[i];
  TP_CHECK_INPUT(false, all);
}

std::string GptConfig::str() const {
  std::ostringstream os;
  os << "L=" << layers << " h=" << hidden << " nh=" << heads << " nkv=" << kv()
     << " ffn=" << inner() << " V=" << vocab << " S=" << seq << " " << activation_name(act) << " "
     << norm_name(norm) << " dropout=" << dropout << (tied ? " tied" : " untied")
     << (sp ? " sp" : "")
     << (overlap != Overlap::None ? std::string(" overlap=") + overlap_name(overlap) : "")
     << (recompute != Recompute::None ? std::string(" recompute=") + recompute_name(recompute) : "")
     << (precision == Precision::Bf16 ? " bf16" : "")
     << (experts > 0 ? " experts=" + std::to_string(experts) + " top_k=" + std::to_string(top_k) +
                           (moe_every > 1 ? " moe_every=" + std::to_string(moe_every) : "")
                     : "");
  return os.str();
}

}  // namespace tp
