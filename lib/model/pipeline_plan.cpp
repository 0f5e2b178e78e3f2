#include "model/pipeline_plan.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>

#include "core/comm_ledger.h"
#include "core/error.h"
#include "core/format.h"
#include "model/memory.h"
#include "observe/alpha_beta.h"

namespace tp {

namespace {

constexpr int64_t kMaxPlannedGpus = int64_t{1} << 20;

template <typename... Args>
std::string printf_str(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string ms(double seconds) {
  return seconds >= 1e-4 ? printf_str("%.2f ms", seconds * 1e3)
                         : printf_str("%.1f µs", seconds * 1e6);
}

// Bytes in B, KiB, MiB or GiB, whichever reads best.
std::string size_str(double bytes) { return bytes >= 1073741824.0 ? gib(bytes) : kib_mib(bytes); }

std::string params_str(int64_t n) {
  return n >= 1000000000 ? printf_str("%.2fB", n / 1e9) : printf_str("%.2fM", n / 1e6);
}

// Whether every group of one axis lies on one node, ranks G to a node in rank order. A group's
// ranks rise from `first` by a stride, so it lies on one node when its first and last rank do.
// Groups are numbered g = 0 .. groups − 1; `first_of(g)` is group g's lowest rank.
bool groups_inside_nodes(int64_t groups, int64_t span, int64_t gpus_per_node,
                         const std::function<int64_t(int64_t)>& first_of) {
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t first = first_of(g);
    if (first / gpus_per_node != (first + span) / gpus_per_node) return false;
  }
  return true;
}

LinkTraffic on_link(bool inside) {
  LinkTraffic l;
  l.inside_node = inside;
  l.link = *parse_link(inside ? "nvlink" : "ib");
  return l;
}

// One collective `count` times into `l`: its ring bytes and its α–β time.
void add_collective(LinkTraffic& l, const std::string& op, int group, int64_t bytes,
                    int64_t count) {
  l.bytes += count * static_cast<int64_t>(ring_wire_bytes(op, group, bytes));
  l.seconds += static_cast<double>(count) * predict_seconds(op, group, bytes, l.link.model);
}

}  // namespace

PpSchedule parse_pp_schedule(const std::string& name) {
  if (name == "afab") return PpSchedule::Afab;
  if (name == "1f1b") return PpSchedule::OneFOneB;
  TP_CHECK_INPUT(false, "--schedule=", name, ": expected one of afab, 1f1b");
  return PpSchedule::Afab;
}

const char* pp_schedule_name(PpSchedule s) { return s == PpSchedule::Afab ? "afab" : "1f1b"; }

void declare_pipeline_options(Options& o) {
  o.integer("pp", 1,
            "pipeline stages: np = tp × dp × pp; stage s holds a contiguous range of blocks (the "
            "first also the embeddings, the last ln_f, the head and the loss)")
      .min(1)
      .max(1024)
      .fits_int()
      .text("schedule", "afab",
            "pipeline schedule with --pp: afab (all forwards, then all backwards) or 1f1b "
            "(needs --micro-batches >= --pp)",
            {"afab", "1f1b"});
}

double pipeline_bubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

int micro_batches_in_flight(PpSchedule s, int stages, int stage, int micro_batches) {
  return s == PpSchedule::Afab ? micro_batches : std::min(micro_batches, stages - stage);
}

std::vector<std::pair<int, int>> stage_blocks(int layers, int stages) {
  std::vector<std::pair<int, int>> out;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    const int n = layers / stages + (s < layers % stages ? 1 : 0);
    out.emplace_back(first, n);
    first += n;
  }
  return out;
}

namespace {

// The layout's own problems: sizes, the 1F1B fill, the batch split and the job's GPUs.
void check_layout(const PipelineInput& in, PipelinePlan& p) {
  const int N = in.pp, D = in.dp, m = in.micro_batches, t = in.base.t;
  const GptConfig& model = in.base.model;
  auto problem = [&](bool ok, const std::string& msg) {
    if (!ok) p.problems.push_back(msg);
  };
  problem(N >= 1, printf_str("--pp=%d must be at least 1", N));
  problem(D >= 1, printf_str("--dp=%d must be at least 1", D));
  problem(m >= 1, printf_str("--micro-batches=%d must be at least 1", m));
  if (!p.problems.empty()) return;
  problem(
      N <= model.layers,
      printf_str("--pp=%d is more stages than the model's %lld blocks (each stage holds at "
                 "least one); choose --pp <= %lld",
                 N, static_cast<long long>(model.layers), static_cast<long long>(model.layers)));
  problem(in.schedule != PpSchedule::OneFOneB || m >= N,
          printf_str("--micro-batches=%d < --pp=%d: 1F1B fills the pipeline with N = %d "
                     "micro-batches before its first backward; use --micro-batches >= %d or "
                     "--schedule afab",
                     m, N, N, N));
  const int64_t dm = static_cast<int64_t>(D) * m;
  problem(in.base.batch % dm == 0,
          printf_str("--batch=%lld does not split into --dp x --micro-batches = %d x %d = %lld "
                     "micro-batches of equal size; choose --batch a multiple of %lld",
                     static_cast<long long>(in.base.batch), D, m, static_cast<long long>(dm),
                     static_cast<long long>(dm)));
  const int64_t gpus = static_cast<int64_t>(in.base.nodes) * in.base.gpus_per_node;
  const int64_t world = static_cast<int64_t>(std::max(t, 1)) * N * D;
  problem(
      world <= kMaxPlannedGpus,
      printf_str("tp x pp x dp = %d x %d x %d = %lld GPUs, more than this planner lays out "
                 "(%lld, beyond any job); lower --dp or --pp",
                 t, N, D, static_cast<long long>(world), static_cast<long long>(kMaxPlannedGpus)));
  problem(gpus == 0 || world <= gpus,
          printf_str("tp x pp x dp = %d x %d x %d = %lld GPUs, but the job has %d nodes x %d GPUs "
                     "= %lld; lower one of them or add nodes",
                     t, N, D, static_cast<long long>(world), in.base.nodes, in.base.gpus_per_node,
                     static_cast<long long>(gpus)));
}

// Whether each kind of group lies inside one node.
struct GroupsInside {
  bool tp = false, dp = false, pp = false;
};

// Placement: G ranks per node in ProcessGrid's order; unknown G: each TP group is one node.
GroupsInside place_groups(const PipelineInput& in, PipelinePlan& p) {
  const int N = in.pp, D = in.dp, t = in.base.t;
  int G = in.base.gpus_per_node;
  if (G <= 0) {
    G = t;
    p.notes.push_back(
        printf_str("--gpus-per-node not given: each TP group of %d is taken to be "
                   "one node, so PP and DP cross nodes",
                   t));
  }
  // r = (pp_rank · D + dp_rank) · t + tp_rank. TP group g: ranks g·t … g·t + t − 1. DP group
  // (pp_rank, tp_rank): pp_rank·t·D + tp_rank, stride t, D ranks. PP group (dp_rank, tp_rank):
  // dp_rank·t + tp_rank, stride t·D, N ranks.
  const int64_t tD = static_cast<int64_t>(t) * D, world = tD * N;
  GroupsInside inside;
  inside.tp = groups_inside_nodes(world / t, t - 1, G, [&](int64_t g) { return g * t; });
  inside.dp = groups_inside_nodes(static_cast<int64_t>(N) * t, (D - 1) * int64_t{t}, G,
                                  [&](int64_t g) { return (g / t) * tD + g % t; });
  inside.pp = groups_inside_nodes(tD, (N - 1) * tD, G, [&](int64_t g) { return g; });
  return inside;
}

// Parameters of one block, and the once-only tensors, on one rank.
struct RankParams {
  int64_t per_block = 0, wte = 0, wpe = 0, ln_f = 0, lm_head = 0;
};

RankParams rank_params(const Preflight& tp) {
  RankParams r;
  for (const PreflightTensor& x : tp.tensors) {
    const int64_t n = x.local.numel();
    if (x.per_layer)
      r.per_block += n;
    else if (x.name == "transformer.wte.weight")
      r.wte = n;
    else if (x.name == "transformer.wpe.weight")
      r.wpe = n;
    else if (x.name.rfind("transformer.ln_f.", 0) == 0)
      r.ln_f += n;
    else
      r.lm_head += n;
  }
  return r;
}

int64_t stage_params(const RankParams& r, bool tied, bool embeddings, bool head, int blocks) {
  return r.per_block * blocks + (embeddings ? r.wte + r.wpe : 0) +
         (head ? r.ln_f + (tied ? (embeddings ? 0 : r.wte) : r.lm_head) : 0);
}

// Stage s of the plan, holding `blocks` (first, count): its memory, compute and traffic.
StagePlan plan_stage(const PipelineInput& in, const PipelinePlan& p, int s,
                     std::pair<int, int> blocks, const RankParams& r, const GroupsInside& inside) {
  const int N = in.pp, D = in.dp, m = in.micro_batches, t = in.base.t;
  const GptConfig& c = p.tp.cfg;
  const int64_t d = in.base.dtype_bytes;
  const std::vector<PlannedCollective>& coll = c.sp ? p.tp.collectives_sp : p.tp.collectives;
  StagePlan st;
  st.stage = s;
  st.first_block = blocks.first;
  st.blocks = blocks.second;
  st.embeddings = s == 0;
  st.head = s == N - 1;
  st.params = stage_params(r, c.tied, st.embeddings, st.head, st.blocks);
  // The library's model states (model/preflight.cpp, docs/model.md "Memory accounting"): d-byte
  // weights, fp32 gradients, AdamW's fp32 moments and, under d < 4, the fp32 master: 16 B per
  // parameter in fp32, 2 + 4 + 4 + 8 = 18 B in bf16.
  st.weight_bytes = st.params * d;
  st.grad_bytes = st.params * 4;
  st.adamw_bytes = st.params * 8 + (d < 4 ? st.params * 4 : 0);
  st.in_flight = micro_batches_in_flight(in.schedule, N, s, m);
  st.act_per_micro = block_activation_bytes(c, c.seq, p.micro_batch, t) * st.blocks;
  st.activation_bytes = st.act_per_micro * st.in_flight;
  st.activation_bytes_16 = static_cast<double>(st.in_flight) * st.blocks *
                           (c.sp ? p.tp.act_k_sp_flash : p.tp.act_k_tp_flash);
  st.logits_bytes = st.head ? p.tp.logits_bytes : 0;
  st.total_bytes =
      st.weight_bytes + st.grad_bytes + st.adamw_bytes + st.activation_bytes + st.logits_bytes;
  st.compute_seconds = static_cast<double>(m) * st.blocks * p.tp.layer_compute;

  st.tp = on_link(inside.tp);
  for (const PlannedCollective& k : coll)
    if (k.per_layer)
      add_collective(st.tp, k.op, t, k.bytes, static_cast<int64_t>(k.count) * m * st.blocks);
  st.pp = on_link(inside.pp);
  const int64_t sends = (s < N - 1 ? m : 0) + (s > 0 ? m : 0);
  add_collective(st.pp, "send", 2, p.pp_message, sends);
  st.dp = on_link(inside.dp);
  add_collective(st.dp, "all_reduce", D, st.params * d, 1);
  st.tied = on_link(inside.pp);
  if (c.tied && N > 1 && (st.embeddings || st.head))
    add_collective(st.tied, "all_reduce", 2, r.wte * d, 1);
  return st;
}

}  // namespace

int64_t stage_params(const Preflight& tp, int stages, int stage, int blocks) {
  return stage_params(rank_params(tp), tp.cfg.tied, stage == 0, stage == stages - 1, blocks);
}

PipelinePlan plan_pipeline(const PipelineInput& in) {
  PipelinePlan p;
  p.in = in;
  const int N = in.pp, m = in.micro_batches, t = in.base.t;
  check_layout(in, p);
  if (!p.problems.empty()) return p;

  // The TP part: the preflight of one micro-batch at t (its problems are the layout's too).
  p.micro_batch = in.base.batch / (static_cast<int64_t>(in.dp) * m);
  PreflightInput one = in.base;
  one.batch = p.micro_batch;
  p.tp = preflight(one);
  if (!p.tp.problems.empty()) {
    p.problems = p.tp.problems;
    return p;
  }
  const GptConfig& c = p.tp.cfg;
  p.bubble = pipeline_bubble(N, m);
  const GroupsInside inside = place_groups(in, p);
  const RankParams params = rank_params(p.tp);

  // One micro-batch's traffic of one block on TP, and of one message between stages.
  for (const PlannedCollective& k : c.sp ? p.tp.collectives_sp : p.tp.collectives)
    if (k.per_layer) p.layer_tp_bytes += k.count * ring_wire_bytes(k.op, t, k.bytes);
  p.pp_message = c.seq * p.micro_batch * c.hidden * in.base.dtype_bytes / (c.sp ? t : 1);

  const auto split = stage_blocks(static_cast<int>(c.layers), N);
  double slowest = 0;
  for (int s = 0; s < N; ++s) {
    p.stages.push_back(plan_stage(in, p, s, split[s], params, inside));
    slowest = std::max(slowest, p.stages.back().compute_seconds);
  }
  p.step_seconds = slowest / (1.0 - p.bubble);
  return p;
}

std::string pipeline_report(const PipelinePlan& p) {
  std::ostringstream os;
  const PipelineInput& in = p.in;
  const int N = in.pp, m = in.micro_batches;
  os << "\n# pipeline: tp " << in.base.t << " x pp " << N << " x dp " << in.dp << " = "
     << in.base.t * N * in.dp << " GPUs, " << pp_schedule_name(in.schedule) << ", m = " << m
     << " micro-batches of " << p.micro_batch << " sequences per replica\n";
  for (const auto& n : p.notes) os << "  · " << n << "\n";
  os << "  bubble (N - 1)/(m + N - 1) = " << N - 1 << "/" << m + N - 1 << " = "
     << printf_str("%.1f %%", 100.0 * p.bubble) << " of each step idle on every stage\n";
  os << "  memory per rank of each stage (activations: "
     << (in.schedule == PpSchedule::Afab ? "AFAB keeps all m micro-batches"
                                         : "1F1B keeps at most N - stage micro-batches")
     << ")\n";
  os << "  stage  blocks   holds        params    weights     grads       AdamW       in flight  "
        "activations  (16-bit)     logits      total\n";
  for (const StagePlan& s : p.stages) {
    const std::string holds = s.embeddings && s.head ? "emb + head"
                              : s.embeddings         ? "embeddings"
                              : s.head               ? "ln_f + head"
                                                     : "-";
    os << printf_str(
        "  %5d  %3d-%-3d  %-11s  %-8s  %-10s  %-10s  %-10s  %9d  %-11s  %-11s  %-10s  %s\n",
        s.stage, s.first_block, s.first_block + s.blocks - 1, holds.c_str(),
        params_str(s.params).c_str(), size_str(static_cast<double>(s.weight_bytes)).c_str(),
        size_str(static_cast<double>(s.grad_bytes)).c_str(),
        size_str(static_cast<double>(s.adamw_bytes)).c_str(), s.in_flight,
        size_str(static_cast<double>(s.activation_bytes)).c_str(),
        size_str(s.activation_bytes_16).c_str(),
        s.head ? size_str(static_cast<double>(s.logits_bytes)).c_str() : "-",
        size_str(static_cast<double>(s.total_bytes)).c_str());
  }
  os << "  traffic of one step, bytes each rank sends and their α–β time (one after the other):\n";
  os << "    one PP message (activation or its gradient, S·b·h·d" << (p.tp.cfg.sp ? "/t" : "")
     << "): " << size_str(static_cast<double>(p.pp_message))
     << "; one layer's TP collectives per micro-batch: " << size_str(p.layer_tp_bytes) << "\n";
  auto link_name = [](const LinkTraffic& l) {
    return std::string(l.inside_node ? "inside a node, " : "across nodes, ") + l.link.name;
  };
  const StagePlan& s0 = p.stages.front();
  os << "    TP (" << link_name(s0.tp) << "), PP send/recv (" << link_name(s0.pp)
     << "), DP all-reduce (" << link_name(s0.dp) << ")\n";
  os << "  stage  TP bytes     TP time     PP bytes     PP time     DP bytes     DP time     "
        "compute\n";
  for (const StagePlan& s : p.stages) {
    os << printf_str("  %5d  %-11s  %-10s  %-11s  %-10s  %-11s  %-10s  %s\n", s.stage,
                     size_str(static_cast<double>(s.tp.bytes)).c_str(), ms(s.tp.seconds).c_str(),
                     size_str(static_cast<double>(s.pp.bytes)).c_str(), ms(s.pp.seconds).c_str(),
                     size_str(static_cast<double>(s.dp.bytes)).c_str(), ms(s.dp.seconds).c_str(),
                     ms(s.compute_seconds).c_str());
  }
  if (s0.tied.bytes > 0)
    os << "  tied embedding: the first and last stage all-reduce wte's gradient shard once per "
          "step: "
       << size_str(static_cast<double>(s0.tied.bytes)) << ", " << ms(s0.tied.seconds) << " ("
       << link_name(s0.tied) << ")\n";
  os << "  step: the slowest stage's compute / (1 - bubble) = " << ms(p.step_seconds)
     << " (communication not counted)\n";
  return os.str();
}

}  // namespace tp
