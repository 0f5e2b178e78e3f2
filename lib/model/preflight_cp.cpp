#include "model/preflight_cp.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "observe/alpha_beta.h"

namespace tp {

namespace {

// The planner lays out at most this many GPUs (pipeline_plan.cpp's bound, and ring_work's loops
// stay small).
constexpr int64_t kMaxCpGpus = int64_t{1} << 20;
constexpr int kMaxCp = 4096;

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// Memory in decimal GB (preflight.cpp's unit), traffic in MiB, times in ms or µs.
std::string gb(double b) { return format("%.2f GB", b / 1e9); }
std::string mib(double b) { return format("%.1f MiB", b / 1048576.0); }
std::string ms(double s) {
  return s >= 1.0    ? format("%.2f s", s)
         : s >= 1e-4 ? format("%.2f ms", s * 1e3)
                     : format("%.1f µs", s * 1e6);
}

// The problems of the CP axis: the split itself, SP's shard of S/cp, the job's size.
void check_cp(const Preflight& p, CpPlan& c) {
  const CpInput& in = c.in;
  const int64_t S = p.cfg.seq;
  const int t = p.in.t;
  c.problems = cp_problems(S, in.cp, in.layout);
  if (in.cp < 1) return;
  if (in.cp > kMaxCp) {
    c.problems.push_back(
        format("--cp %d is more than this planner lays out (%d); lower --cp", in.cp, kMaxCp));
    return;
  }
  const int64_t parts = in.layout == CpLayout::Zigzag ? 2 * int64_t{in.cp} : in.cp;
  if (c.problems.empty() && p.cfg.sp && t >= 1 && (S / in.cp) % t != 0)
    c.problems.push_back(format(
        "--sp with --cp %d: each CP rank holds S/cp = %lld positions, not divisible by t=%d for "
        "sequence parallelism; choose --seq a multiple of %lld",
        in.cp, static_cast<long long>(S / in.cp), t,
        static_cast<long long>(std::lcm(parts, int64_t{in.cp} * t))));
  const int64_t world = int64_t{std::max(t, 1)} * in.cp * std::max(1, in.pp) * std::max(1, in.dp);
  const int64_t gpus = int64_t{p.in.nodes} * p.in.gpus_per_node;
  if (world > kMaxCpGpus)
    c.problems.push_back(
        format("tp x cp x pp x dp = %lld GPUs, more than this planner lays out "
               "(%lld); lower --cp",
               static_cast<long long>(world), static_cast<long long>(kMaxCpGpus)));
  else if (gpus > 0 && world > gpus)
    c.problems.push_back(format(
        "tp x cp x pp x dp = %d x %d x %d x %d = %lld GPUs, but the job has %d nodes x %d GPUs = "
        "%lld; lower --cp (or another axis) or add nodes",
        t, in.cp, std::max(1, in.pp), std::max(1, in.dp), static_cast<long long>(world), p.in.nodes,
        p.in.gpus_per_node, static_cast<long long>(gpus)));
}

// The link of a CP group: cp ranks t apart, inside a node when the node holds whole groups.
void place_ring(const Preflight& p, CpPlan& c) {
  const int t = p.in.t;
  int G = p.in.gpus_per_node;
  if (G <= 0) {
    G = t;
    if (c.in.cp > 1)
      c.notes.push_back(
          format("--gpus-per-node not given: each TP group of %d is taken to be one "
                 "node, so the ring crosses nodes",
                 t));
  }
  c.ring_inside_node = G % (int64_t{t} * c.in.cp) == 0;
  c.ring_link = *parse_link(c.ring_inside_node ? "nvlink" : "ib");
}

// Seconds of the ring per layer: every hop a send-recv of one K|V (or dK|dV) block.
double ring_seconds(const CpPlan& c) {
  const int cp = c.in.cp;
  if (cp <= 1) return 0;
  const int64_t block = c.ring.forward / (cp - 1);  // 2·kv·e
  const double hop = predict_seconds("send_recv", cp, block, c.ring_link.model);
  return hop * ((cp - 1) + (cp - 1) + cp);
}

}  // namespace

CpRingBytes cp_ring_bytes(const GptConfig& cfg, int64_t batch, int t, int cp, int64_t e) {
  CpRingBytes r;
  if (cp <= 1 || t < 1) return r;
  r.kv = cfg.seq / cp * batch * (cfg.kv() / t) * cfg.head_dim();
  r.forward = 2 * r.kv * e * (cp - 1);
  r.backward = 2 * r.kv * e * (cp - 1) + 2 * r.kv * e * cp;
  return r;
}

CpPlan plan_cp(const Preflight& p, const CpInput& in) {
  CpPlan c;
  c.in = in;
  check_cp(p, c);
  if (!c.problems.empty() || !p.problems.empty()) return c;
  const GptConfig& cfg = p.cfg;
  const int t = p.in.t, cp = in.cp;
  const int64_t B = p.in.batch, e = p.in.dtype_bytes, S = cfg.seq;
  c.local_seq = S / cp;
  c.work = ring_work(S, cp, in.layout);
  c.ring = cp_ring_bytes(cfg, B, t, cp, e);
  c.ring_buffers = 2 * 2 * c.ring.kv * e;
  // The activations of S/cp positions, in the bytes per value the preflight uses.
  GptConfig g = cfg;
  g.precision = e < 4 ? Precision::Bf16 : Precision::Fp32;
  g.sp = false;
  c.act_tp = block_activation_bytes(g, c.local_seq, B, t);
  g.sp = true;
  c.act_sp = block_activation_bytes(g, c.local_seq, B, t);
  g.sp = cfg.sp;
  c.peak = memory_peak(g, c.local_seq, B / std::max(1, p.in.micro_batches), t, p.params_per_rank,
                       std::max(1, p.in.zero_dp));
  c.grad_allreduce = p.params_per_rank * 4;
  place_ring(p, c);
  // Compute per layer on the slowest CP rank.
  const double mean = std::accumulate(c.work.begin(), c.work.end(), 0.0) / cp;
  const double slowest = *std::max_element(c.work.begin(), c.work.end()) / mean;
  const double tokens = static_cast<double>(c.local_seq) * B;
  c.linear_seconds = 6.0 * static_cast<double>(p.params_per_layer) * tokens / t / p.in.flops;
  c.attention_seconds = 7.0 * static_cast<double>(cfg.heads * cfg.head_dim()) *
                        static_cast<double>(S) * static_cast<double>(S) * B / (double{1} * t * cp) *
                        slowest / p.in.flops;
  c.ring_seconds = ring_seconds(c);
  c.grad_allreduce_seconds =
      cp > 1 ? predict_seconds("all_reduce", cp, c.grad_allreduce, c.ring_link.model) : 0.0;
  // The TP group's collectives now carry S/cp positions.
  GptConfig local = cfg;
  local.seq = c.local_seq;
  if (e < 4) local.precision = Precision::Bf16;
  const Link nvlink = *parse_link("nvlink");
  for (const PlannedCollective& k : step_collectives(local, B, t, e))
    if (k.per_layer) {
      c.tp_comm_seconds += k.count * predict_seconds(k.op, t, k.bytes, nvlink.model);
      c.tp_comm_bytes += k.count * ring_wire_bytes(k.op, t, k.bytes);
    }
  return c;
}

std::string cp_report(const Preflight& p, const CpPlan& c) {
  std::ostringstream os;
  const CpInput& in = c.in;
  const GptConfig& cfg = p.cfg;
  const int t = p.in.t, cp = in.cp;
  const int64_t L = cfg.layers, e = p.in.dtype_bytes;
  os << format(
      "\n# context parallelism: cp = %d, --cp-layout %s (S/cp = %lld positions of every "
      "sequence per rank)\n",
      cp, cp_layout_name(in.layout), static_cast<long long>(c.local_seq));
  for (const auto& n : c.notes) os << "  · " << n << "\n";
  std::string work;  // every rank's up to cp = 16, else the range
  for (double w : c.work)
    if (cp <= 16) work += (work.empty() ? "" : " ") + format("%g", w);
  if (cp > 16)
    work = format("%g (rank 0) to %g", c.work.front(),
                  *std::max_element(c.work.begin(), c.work.end()));
  os << "  score tiles of (S/2cp)^2 per CP rank (the causal mask's work): " << work << "\n";
  os << "  memory per rank: weights, gradients and AdamW unchanged (replicated over CP)\n";
  const double a1 = static_cast<double>(cfg.sp ? p.act_impl_sp : p.act_impl_tp);
  const double a2 = static_cast<double>(cfg.sp ? c.act_sp : c.act_tp);
  os << format(
      "    activations per layer%s: %s at cp 1, %s at cp %d (x %.4g); all %lld layers %s\n",
      cfg.sp ? ", TP + SP" : ", TP", gb(a1).c_str(), gb(a2).c_str(), cp, a1 / a2,
      static_cast<long long>(L), gb(a2 * L).c_str());
  os << format(
      "    peak: %s at cp 1, %s at cp %d (activations %s); + the ring's transient "
      "buffers 2 x 2kv e = %s: %s against %s per GPU: %s\n",
      gb(static_cast<double>(p.peak.total())).c_str(),
      gb(static_cast<double>(c.peak.total())).c_str(), cp,
      gb(static_cast<double>(c.peak.activations)).c_str(), gb(c.ring_buffers).c_str(),
      gb(static_cast<double>(c.peak.total() + c.ring_buffers)).c_str(), gb(in.gpu_memory).c_str(),
      c.peak.total() + c.ring_buffers <= in.gpu_memory ? "fits" : "does not fit");
  os << format(
      "  ring per layer and rank: kv = (S/cp) B (nkv/t) hd = %lld elements, e = %lld: "
      "forward %s, backward %s, %s in all; %s for %lld layers\n",
      static_cast<long long>(c.ring.kv), static_cast<long long>(e), mib(c.ring.forward).c_str(),
      mib(c.ring.backward).c_str(), mib(c.ring.total()).c_str(),
      mib(static_cast<double>(c.ring.total()) * L).c_str(), static_cast<long long>(L));
  os << format("    CP group of %d ranks %d apart: %s, %s\n", cp, t,
               c.ring_inside_node ? "inside a node" : "across nodes", c.ring_link.str().c_str());
  os << format(
      "  time per layer, one rank: linear layers %s + attention %s (%s layout's slowest "
      "rank) at %.0f TFLOPS; the ring %s (%s of the attention it runs under)\n",
      ms(c.linear_seconds).c_str(), ms(c.attention_seconds).c_str(), cp_layout_name(in.layout),
      p.in.flops / 1e12, ms(c.ring_seconds).c_str(),
      c.attention_seconds > 0
          ? format("%.1f%%", 100.0 * c.ring_seconds / c.attention_seconds).c_str()
          : "-");
  os << format("  TP%s collectives per layer at S/cp: %s per rank, %s on NVLink\n",
               cfg.sp ? " + SP" : "", mib(c.tp_comm_bytes).c_str(), ms(c.tp_comm_seconds).c_str());
  os << format(
      "  once per step: the CP all-reduce of the fp32 gradients, P x 4 = %s, sends "
      "2(cp-1)/cp of it = %s: %s\n",
      gb(static_cast<double>(c.grad_allreduce)).c_str(),
      mib(ring_wire_bytes("all_reduce", cp, c.grad_allreduce)).c_str(),
      ms(c.grad_allreduce_seconds).c_str());
  const double compute = L * (c.linear_seconds + c.attention_seconds);
  os << format(
      "  one step, %lld layers: compute %s, the ring %s, TP%s collectives %s, the CP "
      "all-reduce %s (each alone, nothing overlapped)\n",
      static_cast<long long>(L), ms(compute).c_str(), ms(L * c.ring_seconds).c_str(),
      cfg.sp ? " + SP" : "", ms(L * c.tp_comm_seconds).c_str(),
      ms(c.grad_allreduce_seconds).c_str());
  return os.str();
}

void declare_context_parallel_options(Options& o) {
  o.integer("cp", 1,
            "context-parallel ranks: np = tp × cp × dp × pp; each holds seq/cp positions of every "
            "sequence and attention runs as a ring over them (lib/parallel/ring_attention.h)")
      .min(1)
      .max(kMaxCp)
      .fits_int()
      .text("cp-layout", "zigzag",
            "which positions a CP rank holds: zigzag (chunks r and 2cp-1-r of 2cp: every rank "
            "the same causal work) or contiguous (chunk r of cp)",
            {"zigzag", "contiguous"});
}

}  // namespace tp
