#include "model/preflight_moe.h"

#include "model/pipeline_plan.h"
#include "parallel/expert_parallel.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace tp {

namespace {

constexpr int kMaxExperts = 4096;  // --experts, --top-k, --moe-every, --ep: one bound for all

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// preflight.cpp's units: decimal (GB = 10⁹ bytes) for memory, binary (MiB) for traffic.
std::string gb(double b) {
  return b >= 1e9   ? format("%.2f GB", b / 1e9)
         : b >= 1e6 ? format("%.2f MB", b / 1e6)
         : b >= 1e3 ? format("%.2f kB", b / 1e3)
                    : format("%.0f B", b);
}
std::string mib(double b) {
  return b >= 1073741824.0 ? format("%.2f GiB", b / 1073741824.0)
         : b >= 1048576.0  ? format("%.1f MiB", b / 1048576.0)
         : b >= 1024.0     ? format("%.1f KiB", b / 1024.0)
                           : format("%.0f B", b);
}
std::string ms(double s) {
  return s >= 1.0    ? format("%.2f s", s)
         : s >= 1e-4 ? format("%.2f ms", s * 1e3)
                     : format("%.1f µs", s * 1e6);
}
std::string count(double n) {
  return n >= 1e9   ? format("%.2fB", n / 1e9)
         : n >= 1e6 ? format("%.2fM", n / 1e6)
         : n >= 1e3 ? format("%.1fk", n / 1e3)
                    : format("%.0f", n);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Weights, gradients and AdamW of one rank holding `dense` parameters sharded by ZeRO-1 over
// `zero_dp` and `experts` ones over `expert_dp` (preflight.cpp's count_parameters, per group).
MoeStates states(int64_t dense, int64_t experts, int64_t d, int zero_dp, int expert_dp) {
  MoeStates s;
  s.params = dense + experts;
  s.weights = s.params * d;
  s.grads = s.params * 4;
  const int64_t owned =
      ceil_div(dense, std::max(1, zero_dp)) + ceil_div(experts, std::max(1, expert_dp));
  s.adamw = owned * 8 + (d < 4 ? s.params * 4 : 0);
  return s;
}

void check_moe(const Preflight& p, MoePlan& m) {
  const int ep = m.in.ep, dp = m.in.dp, E = p.cfg.experts;
  auto problem = [&](bool ok, const std::string& msg) {
    if (!ok) m.problems.push_back(msg);
  };
  const std::string placed = expert_parallel_problem(E, ep);  // the line tp_train prints too
  if (!placed.empty()) m.problems.push_back(placed);
  problem(m.in.pp <= p.in.model.layers,
          format("--pp=%d is more stages than the model's %lld blocks (each stage holds at least "
                 "one); choose --pp <= %lld",
                 m.in.pp, static_cast<long long>(p.in.model.layers),
                 static_cast<long long>(p.in.model.layers)));
  if (ep < 1) return;
  problem(dp <= 0 || dp % ep == 0,
          format("--ep=%d does not divide dp=%d: EP groups are carved from the data-parallel "
                 "replicas; choose --ep among the divisors of %d (or change --dp, --nodes)",
                 ep, dp, dp));
  if (ep > 1 && dp <= 0)
    m.notes.push_back(
        format("dp not given (--dp, or --nodes and --gpus-per-node): the plan takes "
               "it to be a multiple of --ep %d",
               ep));
}

// One rank holding `params` parameters, `experts` of them the experts of every MoE block it runs
// (whole on each TP rank): its states today, and under --ep with E/ep of them, whose AdamW
// moments ZeRO-1 shards over the dp/ep replicas holding the same experts.
void rank_states(const Preflight& p, int ep, int64_t params, int64_t experts, MoeStates& at_t,
                 MoeStates& at_ep) {
  const int zdp = std::max(1, p.in.zero_dp);
  const int64_t d = p.in.dtype_bytes;
  at_t = states(params - experts, experts, d, zdp, zdp);
  at_ep = states(params - experts, experts / ep, d, zdp, std::max(1, zdp / ep));
}

// --pp: a stage's ranks hold its dense shards (pipeline_plan.h's stage_params, the even split of
// stage_blocks, as tp::Gpt's pipeline_stage_layout cuts the model) with each of its MoE blocks'
// MLP shard replaced by the router and the experts. The fullest stage's become at_t and at_ep.
void plan_stages(const Preflight& p, MoePlan& m) {
  const GptConfig& c = p.cfg;
  const int N = m.in.pp;
  const auto split = stage_blocks(static_cast<int>(c.layers), N);
  for (int s = 0; s < N; ++s) {
    MoeStage st;
    st.stage = s;
    st.first_block = split[s].first;
    st.blocks = split[s].second;
    for (int l = st.first_block; l < st.first_block + st.blocks; ++l)
      st.moe_blocks += c.is_moe_block(l) ? 1 : 0;
    const int64_t params = stage_params(p, N, s, st.blocks) + st.moe_blocks * m.counts.block_extra;
    rank_states(p, m.in.ep, params, st.moe_blocks * c.experts * m.counts.expert, st.at_t, st.at_ep);
    m.stages.push_back(st);
    if (st.at_ep.total() > m.stages[m.fullest].at_ep.total()) m.fullest = s;
  }
  m.at_t = m.stages[m.fullest].at_t;
  m.at_ep = m.stages[m.fullest].at_ep;
}

// The EP group's link: ep ranks t apart, inside a node when the node holds t · ep GPUs.
void place_all_to_all(const Preflight& p, MoePlan& m) {
  const int t = p.in.t;
  int G = p.in.gpus_per_node;
  if (G <= 0) {
    G = t;
    if (m.in.ep > 1)
      m.notes.push_back(
          format("--gpus-per-node not given: each TP group of %d is taken to be one "
                 "node, so the all-to-all crosses nodes",
                 t));
  }
  m.a2a_inside_node = G % (int64_t{t} * m.in.ep) == 0;
  m.a2a_link = *parse_link(m.a2a_inside_node ? "nvlink" : "ib");
  const int ep = m.in.ep;
  m.a2a_seconds = ep > 1 ? (ep - 1) * m.a2a_link.model.alpha +
                               static_cast<double>(m.a2a.each) / m.a2a_link.model.beta
                         : 0.0;
}

}  // namespace

MoeCounts moe_counts(const GptConfig& c, int t) {
  MoeCounts m;
  if (c.experts <= 0 || c.moe_every <= 0 || t < 1) return m;
  const int64_t h = c.hidden, f = c.inner(), E = c.experts;
  const int64_t up = c.activation() == Activation::SwiGlu ? 2 : 1;  // c_fc (and c_gate)
  m.moe_blocks = c.layers / c.moe_every;
  m.expert = up * (h * f + f) + f * h + h;
  m.router = h * E;
  const int64_t dense_shard = up * (h * (f / t) + f / t) + (f / t) * h + h;  // ParallelMLP at t
  m.block_extra = m.router + E * m.expert - dense_shard;
  m.extra_per_rank = m.moe_blocks * m.block_extra;
  m.inactive = m.moe_blocks * (E - c.top_k) * m.expert;
  return m;
}

int64_t moe_extra_params(const GptConfig& c, int t) { return moe_counts(c, t).extra_per_rank; }

int64_t moe_active_per_layer(const GptConfig& c, int64_t dense_per_layer) {
  const MoeCounts m = moe_counts(c, 1);
  if (m.moe_blocks == 0 || c.layers <= 0) return dense_per_layer;
  return dense_per_layer + m.moe_blocks * (m.router + (c.top_k - 1) * m.expert) / c.layers;
}

MoeAllToAll moe_all_to_all_bytes(int64_t tokens, int k, int64_t h, int ep, int64_t e) {
  MoeAllToAll a;
  a.tokens = tokens;
  if (ep <= 1) return a;
  a.each = tokens * k * h * e * (ep - 1) / ep;
  a.per_layer = 4 * a.each;
  return a;
}

MoePlan plan_moe(const Preflight& p, const MoeInput& in) {
  MoePlan m;
  m.in = in;
  check_moe(p, m);
  if (!m.problems.empty() || !p.problems.empty() || p.cfg.experts <= 0) return m;
  const GptConfig& c = p.cfg;
  const int t = p.in.t, ep = in.ep;
  m.counts = moe_counts(c, t);
  m.total = p.params_total;
  m.active = p.params_total - m.counts.inactive;
  m.wpe = c.seq * c.hidden;
  const int64_t h = c.hidden, f = c.inner(), up = c.activation() == Activation::SwiGlu ? 2 : 1;
  const int64_t attn_biases = 2 * h + 2 * c.kv() * c.head_dim();  // q, k, v, c_proj
  const int64_t mlp_biases = up * f + h;                          // one MLP or one expert
  m.biases =
      c.layers * (attn_biases + mlp_biases) + m.counts.moe_blocks * (c.experts - 1) * mlp_biases;
  // Today: experts whole on each TP rank. Planned: E/ep of them.
  if (in.pp > 1) {
    plan_stages(p, m);
    m.notes.push_back(
        format("the TP report above is the whole model's (pp 1); with --pp %d a "
               "rank holds its stage's share, as below",
               in.pp));
  } else {
    rank_states(p, ep, p.params_per_rank, m.counts.moe_blocks * c.experts * m.counts.expert, m.at_t,
                m.at_ep);
  }
  const int64_t d = p.in.dtype_bytes;
  const int64_t tokens = p.in.batch * c.seq / (c.sp ? t : 1);
  m.a2a = moe_all_to_all_bytes(tokens, c.top_k, h, ep, d);
  place_all_to_all(p, m);
  return m;
}

namespace {

// --pp: one line per stage (its blocks, its MoE blocks, one rank's states today and under --ep),
// then which stage the rows below are.
void report_stages(std::ostringstream& os, const MoePlan& m, int ep) {
  os << format("  --pp %d: blocks split evenly over the stages; one rank of each holds\n", m.in.pp);
  for (const MoeStage& st : m.stages) {
    const std::string blocks = format("[%d, %d)", st.first_block, st.first_block + st.blocks);
    os << format("    stage %d  blocks %-10s %3lld MoE  today P %9s  total %9s", st.stage,
                 blocks.c_str(), static_cast<long long>(st.moe_blocks),
                 count(st.at_t.params).c_str(), gb(st.at_t.total()).c_str());
    if (ep > 1)
      os << format("  --ep %d P %9s  total %9s", ep, count(st.at_ep.params).c_str(),
                   gb(st.at_ep.total()).c_str());
    os << "\n";
  }
  os << format("    the fullest is stage %d: its ranks' states below\n", m.fullest);
}

}  // namespace

std::string moe_report(const Preflight& p, const MoePlan& m) {
  std::ostringstream os;
  const GptConfig& c = p.cfg;
  if (c.experts <= 0 || !m.problems.empty()) return "";
  const MoeCounts& n = m.counts;
  const int t = p.in.t, ep = m.in.ep;
  const int64_t L = c.layers, E = c.experts;
  os << format(
      "\n# mixture of experts: E = %d experts, top-%d, %lld MoE blocks of %lld "
      "(--moe-every %d)\n",
      c.experts, c.top_k, static_cast<long long>(n.moe_blocks), static_cast<long long>(L),
      c.moe_every);
  for (const auto& s : m.notes) os << "  · " << s << "\n";
  const bool swiglu = c.activation() == Activation::SwiGlu;
  os << format(
      "  an MoE block holds, instead of the mlp.* shards above (all replicated over TP):\n"
      "    mlp.router.weight (%lld, %lld); mlp.experts.{0..%lld}.c_fc (%lld, %lld) + bias%s, "
      "c_proj (%lld, %lld) + bias\n",
      static_cast<long long>(c.hidden), static_cast<long long>(E), static_cast<long long>(E - 1),
      static_cast<long long>(c.hidden), static_cast<long long>(c.inner()),
      swiglu ? ", c_gate (the same)" : "", static_cast<long long>(c.inner()),
      static_cast<long long>(c.hidden));
  os << format("  parameters: one expert %s, the router %s per MoE block\n",
               count(n.expert).c_str(), count(n.router).c_str());
  os << format(
      "    total %s (%lld); active per token %s (%lld): all but %lld of %lld experts per "
      "MoE block\n",
      count(m.total).c_str(), static_cast<long long>(m.total), count(m.active).c_str(),
      static_cast<long long>(m.active), static_cast<long long>(E - c.top_k),
      static_cast<long long>(E));
  os << format(
      "    of them wpe (S x h) %s and the linear layers' biases %s; without both (RoPE, "
      "no biases): total %s, active %s\n",
      count(m.wpe).c_str(), count(m.biases).c_str(), count(m.total - m.wpe - m.biases).c_str(),
      count(m.active - m.wpe - m.biases).c_str());
  const int width = m.in.pp > 1 ? 56 : 46;  // "stage s, " before the labels
  auto row = [&](const char* what, const MoeStates& s) {
    os << format("  %-*s P %9s  weights %9s  grads %9s  AdamW %9s  total %9s\n", width, what,
                 count(s.params).c_str(), gb(s.weights).c_str(), gb(s.grads).c_str(),
                 gb(s.adamw).c_str(), gb(s.total()).c_str());
  };
  os << "  model states per rank (GB = 10^9 bytes, MB = 10^6; activations: the peak above counts "
        "the dense "
        "MLP's)\n";
  const int N = m.in.pp;
  if (N > 1) report_stages(os, m, ep);
  const std::string where = N > 1 ? format("stage %d, ", m.fullest) : "";
  row(format("%st = %d, every expert on every TP rank%s", where.c_str(), t, N > 1 ? "" : " (today)")
          .c_str(),
      m.at_t);
  if (ep > 1) {
    row(format("%s--ep %d (planned): %lld of %lld experts per rank", where.c_str(), ep,
               static_cast<long long>(E / ep), static_cast<long long>(E))
            .c_str(),
        m.at_ep);
    os << format(
        "    the model states alone against --gpu-memory %s: %s at t = %d, %s with --ep %d\n",
        gb(m.in.gpu_memory).c_str(), m.at_t.total() <= m.in.gpu_memory ? "fit" : "do not fit", t,
        m.at_ep.total() <= m.in.gpu_memory ? "fit" : "do not fit", ep);
    // Per step a rank runs its stage's MoE layers (all of them at pp 1): the busiest stage's.
    int64_t L_moe = n.moe_blocks;
    if (N > 1) {
      L_moe = 0;
      for (const MoeStage& st : m.stages) L_moe = std::max(L_moe, st.moe_blocks);
    }
    os << format(
        "  all-to-all per rank under --ep %d: T = %lld tokens%s, one all-to-all T x k x h "
        "x (ep-1)/ep x %lld B = %s;\n",
        ep, static_cast<long long>(m.a2a.tokens), c.sp ? " (B x S / t: SP)" : " (B x S)",
        static_cast<long long>(p.in.dtype_bytes), mib(m.a2a.each).c_str());
    os << format(
        "    per MoE layer 4 of them (forward dispatch + combine, backward the same) = %s, "
        "%s per step for %lld MoE layers%s\n",
        mib(m.a2a.per_layer).c_str(), mib(static_cast<double>(m.a2a.per_layer) * L_moe).c_str(),
        static_cast<long long>(L_moe), N > 1 ? " (the busiest stage's)" : "");
    os << format(
        "    EP group of %d ranks %d apart, %s: %s; one all-to-all %s ((ep-1) α + bytes/β), "
        "%s per layer, %s per step\n",
        ep, t, m.a2a_inside_node ? "inside a node" : "across nodes", m.a2a_link.str().c_str(),
        ms(m.a2a_seconds).c_str(), ms(4 * m.a2a_seconds).c_str(),
        ms(4 * m.a2a_seconds * L_moe).c_str());
  } else {
    os << "  --ep N: the plan of N expert-parallel ranks (E/N experts each) and its all-to-all\n";
  }
  return os.str();
}

void declare_mixture_of_experts_options(Options& o) {
  o.integer("experts", 0,
            "mixture of experts: E expert MLPs with a top-k router in place of the MLP of every "
            "--moe-every-th block (0 = dense)")
      .non_negative()
      .max(kMaxExperts)
      .fits_int()
      .integer("top-k", 2,
               "experts per token with --experts (gates renormalised over the k when k > 1, the "
               "raw probability at k = 1)")
      .min(1)
      .max(kMaxExperts)
      .fits_int()
      .integer("moe-every", 1, "with --experts: blocks l with l % n = n - 1 are MoE (1: all)")
      .min(1)
      .max(kMaxExperts)
      .fits_int()
      .real("aux-loss-coef", 0.01,
            "weight of the load-balancing loss (Switch Transformers' 0.01; 0 = off)")
      .non_negative()
      .real("z-loss-coef", 1e-3, "weight of the router z-loss (ST-MoE's 1e-3; 0 = off)")
      .non_negative()
      .real("capacity-factor", 0,
            "tokens per expert at most ceil(c * tokens * k / E), the rest dropped (0 = dropless)")
      .positive()
      .zero_means_off();
  o.integer("ep", 1,
            "expert parallelism with --experts: EP groups of N data-parallel ranks, each rank "
            "holding E/N experts (N divides --dp and E)")
      .min(1)
      .max(kMaxExperts)
      .fits_int();
}

}  // namespace tp
