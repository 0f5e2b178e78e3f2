// Lesson 16 — where each parallelism goes: the same 4 ranks on two (simulated) nodes, laid out two
// ways, and the articles' layout for a 70B model on 8 nodes × 8 GPUs.
//
// What it shows:
//   1. The two nodes of this launch (the launcher's node of every rank: ranks that share memory,
//      MPI_COMM_TYPE_SHARED). On one machine MPICH makes them with two "hosts" (one proxy each):
//      traffic inside a node takes shared memory, between them MPICH's network module.
//   2. Two layouts of the same tp 2 × dp 2 grid: A puts each TP group inside a node and DP across,
//      B (the ranks renumbered, as a wrong rank order would) puts TP across and DP inside. The α
//      and β of each kind of pair, measured.
//   3. The same tiny GPT trained a few steps in both layouts and on one device: the same losses
//      and weights (where the ranks are never changes the numbers).
//   4. Bytes per step on each kind of link, from the TP and DP communicators' CommLedgers: the
//      same collectives in both layouts, but B sends TP's many per-layer collectives across nodes
//      where A sends only DP's one gradient all-reduce; against the preflight's formula.
//   5. Step time per layout, measured (interleaved), as a ratio, and what two "nodes" on one
//      machine do and do not show.
//   6. The articles' layout for a 70B model (llama2-70b) on 8 nodes × 8 GPUs: TP 8 inside each
//      node, PP 4 over nodes, DP 2 outside (lib/model/pipeline_plan.h, tp_preflight --pp): the
//      stages' memory, the bubble, per-layer communication on NVLink vs InfiniBand by the α–β
//      model, and why TP > 8 or TP across nodes loses.
//
// What is new since lesson 13: placement as a choice (the same grid, two rank orders), the
// ledgers read per sub-communicator and per kind of link, and the pipeline preflight
// (lib/model/pipeline_plan.h). Lesson 15 (pipeline parallelism) runs the stages themselves.
//
// Run (MPICH: two hosts on one machine, ranks 0, 1 on the first and 2, 3 on the second):
//   make lessons
//   mpirun -launcher fork -hosts localhost:2,127.0.0.1:2 -np 4 build/bin/lesson_16_where_parallelism_goes
// lessons/lessons.txt asks for this launch ("two-nodes"); scripts/common.sh's lesson_launch_flags
// turns it into the flags above. On one node the lesson says how to launch it and exits 2.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/format.h"
#include "lesson.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/pipeline_plan.h"
#include "model/preflight.h"
#include "model/presets.h"
#include "model/train.h"
#include "observe/alpha_beta.h"
#include "observe/timer.h"  // now()
#include "parallel/process_grid.h"
#include "pictures.h"

using namespace tp;

namespace {

const char* kBinary = "lesson_16_where_parallelism_goes";

std::string num(double v, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
std::string kib(double bytes) { return num(bytes / 1024.0, "%.1f KiB"); }
std::string gb(double bytes) { return num(bytes / 1e9, "%.1f GB"); }
std::string msec(double s) { return num(s * 1e3, "%.2f ms"); }

std::string group_str(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "}";
}

// One layout: the world renumbered by `order` (order[i] = the world rank that becomes rank i),
// the grid on it, and where its groups lie.
struct Layout {
  std::string name, what;
  std::vector<int> order;
  std::unique_ptr<Communicator> renumbered;
  std::unique_ptr<ProcessGrid> grid;
  bool tp_inside = false, dp_inside = false;
};

// The world ranks of a group given in the renumbered ranks.
std::vector<int> world_ranks(const Layout& l, const std::vector<int>& renumbered) {
  std::vector<int> out;
  for (int r : renumbered) out.push_back(l.order[static_cast<size_t>(r)]);
  return out;
}

bool on_one_node(const std::vector<int>& ranks, const std::vector<int>& node) {
  for (int r : ranks)
    if (node[static_cast<size_t>(r)] != node[static_cast<size_t>(ranks[0])]) return false;
  return true;
}

void make_layout(lesson::Lesson& L, Layout& l, int dp) {
  Communicator& world = L.world();
  const std::vector<int>& node = L.node_of_rank();
  const int key =
      static_cast<int>(std::find(l.order.begin(), l.order.end(), world.rank()) - l.order.begin());
  l.renumbered = world.split(0, key);
  std::vector<int> nodes;  // the node of each renumbered rank
  for (int r : l.order) nodes.push_back(node[static_cast<size_t>(r)]);
  l.grid = std::make_unique<ProcessGrid>(*l.renumbered, dp, nodes);
  l.tp_inside = on_one_node(world_ranks(l, l.grid->tp_group(0)), node) &&
                on_one_node(world_ranks(l, l.grid->tp_group(1)), node);
  l.dp_inside = on_one_node(world_ranks(l, l.grid->dp_group(0)), node) &&
                on_one_node(world_ranks(l, l.grid->dp_group(1)), node);
}

const char* where(bool inside) { return inside ? "inside a node" : "across nodes"; }

// Bytes this rank sent (ring model) and calls, over [from, to) of a ledger.
struct Sent {
  double bytes = 0;
  int64_t calls = 0;
};
Sent sent(const CommLedger& ledger, size_t from, size_t to) {
  Sent s;
  for (size_t i = from; i < to; ++i) {
    s.bytes += ledger.records()[i].wire_bytes;
    ++s.calls;
  }
  return s;
}

GptConfig tiny_model() { return lesson_gpt(/*layers=*/2, /*hidden=*/64, /*vocab=*/64, /*seq=*/16); }

// 6. The articles' layout for a 70B model, from the pipeline preflight.
void seventy_b(lesson::Lesson& L) {
  L.step(
      "The articles' layout for a 70B model on 8 nodes × 8 GPUs: TP 8 inside each node, PP 4 "
      "over nodes, DP 2 outside (tp_preflight --pp).");
  PipelineInput in;
  in.base.model = model_preset("llama2-70b");
  in.base.batch = 16;
  in.base.t = 8;
  in.base.dtype_bytes = 2;
  in.base.nodes = 8;
  in.base.gpus_per_node = 8;
  in.pp = 4;
  in.dp = 2;
  in.micro_batches = 8;
  in.schedule = PpSchedule::OneFOneB;
  const PipelinePlan p = plan_pipeline(in);
  L.check_true("the 70B layout has no problems", p.problems.empty());
  if (!p.problems.empty()) return;
  const GptConfig& c = p.tp.cfg;
  L.say("  model: ", c.str(), "; bf16, batch 16 sequences of ", c.seq, " tokens per step");
  L.say("  rank r = (pp_rank · 2 + dp_rank) · 8 + tp_rank, 8 consecutive ranks per node: TP ",
        where(p.stages[0].tp.inside_node), ", PP ", where(p.stages[0].pp.inside_node), ", DP ",
        where(p.stages[0].dp.inside_node));
  L.say("  1F1B with m = 8 micro-batches of ", p.micro_batch,
        " sequence per replica; bubble (N − 1)/(m + N − 1) = 3/11 = ", num(100 * p.bubble, "%.1f"),
        " %");
  lesson::Table st({"stage", "blocks", "holds", "weights + grads + AdamW", "in flight",
                    "activations (bf16, Korthikanti)", "sum", "fits 80 GB"});
  std::vector<float> sums, want_sums;
  for (const StagePlan& s : p.stages) {
    const double states = static_cast<double>(s.weight_bytes + s.grad_bytes + s.adamw_bytes);
    const double sum = states + s.activation_bytes_16 + static_cast<double>(s.logits_bytes);
    st.add({std::to_string(s.stage),
            std::to_string(s.first_block) + "-" + std::to_string(s.first_block + s.blocks - 1),
            s.embeddings ? "embeddings"
            : s.head     ? "ln_f, head, loss"
                         : "-",
            gb(states), std::to_string(s.in_flight), gb(s.activation_bytes_16), gb(sum),
            sum <= 80e9 ? "yes" : "no"});
    sums.push_back(static_cast<float>(sum / 1e9));
    // By hand: 18 bytes per parameter (bf16 weights, fp32 master, fp32 gradients, AdamW: the
    // library's mixed precision, docs/model.md "Memory accounting"); 20 blocks × in flight ×
    // sbh(10 + 24/t), sbh = 4096 · 8192.
    const double sbh = 4096.0 * 8192.0;
    want_sums.push_back(static_cast<float>((18.0 * static_cast<double>(s.params) +
                                            20.0 * (4 - s.stage) * sbh * (10.0 + 24.0 / 8) +
                                            static_cast<double>(s.logits_bytes)) /
                                           1e9));
  }
  L.say(st.str());
  L.say(
      "  1F1B's first stage holds the most: it starts N = 4 micro-batches before its first\n"
      "  backward. (The activations here are Korthikanti et al.'s 16-bit count with\n"
      "  FlashAttention, sbh(10 + 24/t) per layer; this project's fp32 blocks keep more.)");
  L.check_fact("stage memory = 18 B/param + L_s · (N − s) · sbh(10 + 24/t) (+ logits)", sums,
               want_sums, 1e-5);
  L.check_value("bubble = 3/11", p.bubble, 3.0 / 11.0, 1e-12);
  L.check_true("stage 0 holds the most", *std::max_element(sums.begin(), sums.end()) == sums[0]);
  L.check_true("every stage fits 80 GB", *std::max_element(sums.begin(), sums.end()) <= 80.0f);

  // Per layer and micro-batch on each link (α–β): TP's 4 all-reduces of S·b·h·d, against PP's one
  // message of S·b·h·d per stage boundary (so per 20 layers).
  const LinkEstimate &nv = p.tp.links[0], &ib = p.tp.links[1];
  const double ar = 4096.0 * 8192 * 2, msg = static_cast<double>(p.pp_message);
  const double pp_ib = predict_seconds("send", 2, p.pp_message, ib.link.model);
  lesson::Table per({"per micro-batch", "bytes sent per rank", "NVLink (450 GB/s)",
                     "InfiniBand (50 GB/s)", "compute"});
  per.add({"TP, one layer (4 all-reduces)", mib(p.layer_tp_bytes), msec(nv.layer_comm),
           msec(ib.layer_comm), msec(p.tp.layer_compute)});
  per.add({"TP, one stage (20 layers)", mib(20 * p.layer_tp_bytes, 0), msec(20 * nv.layer_comm),
           msec(20 * ib.layer_comm), msec(20 * p.tp.layer_compute)});
  per.add({"PP, one stage boundary, each way", mib(msg),
           msec(predict_seconds("send", 2, p.pp_message, nv.link.model)), msec(pp_ib), "-"});
  L.say(per.str());
  L.say("  DP, once per step: each rank all-reduces its stage's gradients, ",
        num(static_cast<double>(p.stages[1].dp.bytes) / 1e9, "%.2f"), " GB sent, ",
        msec(p.stages[1].dp.seconds), " on InfiniBand,\n  under the last micro-batches' backward.");
  L.say("  Crossing nodes with PP costs one ", mib(msg, 0),
        " message per micro-batch per stage boundary; TP\n  would send ",
        num(p.layer_tp_bytes / msg, "%.0f"),
        " times that per layer. So TP stays on NVLink, and what crosses nodes is the\n"
        "  traffic that is small (PP) or once per step and hidden under backward (DP).");
  // Checked by hand: 2 · 7/8 · 64 MiB per all-reduce, at β alone plus 14 α.
  const double one_ar = 2.0 * 7 / 8 * ar;
  L.check_value("TP bytes per layer = 4 · 2 · 7/8 · 64 MiB", p.layer_tp_bytes, 4 * one_ar);
  L.check_value("TP per layer on NVLink = 4 (14 · 3 µs + 112 MiB / 450 GB/s)", nv.layer_comm,
                4 * (14 * 3e-6 + one_ar / 450e9));
  L.check_value("TP per layer on InfiniBand = 4 (14 · 5 µs + 112 MiB / 50 GB/s)", ib.layer_comm,
                4 * (14 * 5e-6 + one_ar / 50e9));
  L.check_value("PP message = S·b·h·d = 64 MiB, 5 µs + 64 MiB / 50 GB/s on IB", pp_ib,
                5e-6 + msg / 50e9);
  L.check_true("PP's message per stage < TP's bytes of one layer", msg < p.layer_tp_bytes);
  L.check_value("PP on NVLink = 3 µs + 64 MiB / 450 GB/s",
                predict_seconds("send", 2, p.pp_message, nv.link.model), 3e-6 + msg / 450e9);
  // One block's parameters by hand (q, k, v, c_proj with biases; SwiGLU's c_fc, c_gate, c_proj;
  // two RMSNorm weights) and 6 · P · 4096 / 8 FLOPs at 400 TFLOPS.
  const double h = 8192, kvd = 1024, f = 28672;
  const double layer_params =
      (h * h + h) + 2 * (h * kvd + kvd) + (h * h + h) + 2 * (h * f + f) + (f * h + h) + 2 * h;
  L.check_value("one block: 0.86B parameters", static_cast<double>(p.tp.params_per_layer),
                layer_params, 0);
  L.check_value("compute per layer = 6 · P · 4096 / 8 / 400 TFLOPS", p.tp.layer_compute,
                6 * layer_params * 4096 / 8 / 400e12);
  const StagePlan& mid = p.stages[1];
  L.check_value("DP bytes = 2(2 − 1)/2 · P_s · 2", static_cast<double>(mid.dp.bytes),
                static_cast<double>(mid.params) * 2, 1e-12);
  L.check_value("DP time = 2 α + bytes / β on IB", mid.dp.seconds,
                2 * 5e-6 + static_cast<double>(mid.params) * 2 / 50e9);
  L.check_true("TP inside a node, PP and DP across",
               mid.tp.inside_node && !mid.pp.inside_node && !mid.dp.inside_node);

  // Why not TP 16 (two nodes) or TP 8 across two nodes: the same all-reduces on InfiniBand.
  L.say("\n  Why TP > 8, or TP across nodes, loses (one layer, one micro-batch of 4096 tokens):");
  lesson::Table why({"TP", "its group", "link", "TP comm per layer", "compute per layer",
                     "comm share of the layer"});
  std::vector<float> shares;
  std::vector<double> comms, computes;
  struct Case {
    int t;
    const char* group;
    bool across;
  };
  for (const Case& k : {Case{8, "one node", false}, Case{8, "4 + 4 GPUs of two nodes", true},
                        Case{16, "two nodes", true}}) {
    PreflightInput q = in.base;
    q.batch = p.micro_batch;
    q.t = k.t;
    q.kv_replication = true;  // 8 KV heads at t = 16: two copies each
    const Preflight f = preflight(q);
    L.check_true("preflight at t = " + std::to_string(k.t) + " has no problems",
                 f.problems.empty());
    if (!f.problems.empty()) return;
    const double comm = f.links[k.across ? 1 : 0].layer_comm;
    const double share = comm_share(comm, f.layer_compute);
    shares.push_back(static_cast<float>(share));
    comms.push_back(comm);
    computes.push_back(f.layer_compute);
    why.add({std::to_string(k.t), k.group, k.across ? "InfiniBand" : "NVLink", msec(comm),
             msec(f.layer_compute), num(100 * share, "%.0f %%")});
  }
  L.say(why.str());
  L.say(
      "  A ring is as fast as its slowest hop: one GPU pair on InfiniBand makes every TP\n"
      "  all-reduce an InfiniBand all-reduce. TP 16 halves each GPU's compute but not its\n"
      "  communication (2(t − 1)/t of the same bytes), so past the node the layer mostly waits.");
  L.check_true("TP 8 inside a node: under [A1]'s 30 % share", shares[0] < 0.3f);
  L.check_value("TP 16 on IB: 4 (30 · 5 µs + 2 · 15/16 · 64 MiB / 50 GB/s) per layer", comms[2],
                4 * (30 * 5e-6 + 2.0 * 15 / 16 * ar / 50e9));
  L.check_value("TP 16: half of TP 8's compute per layer", computes[2], computes[0] / 2);
  L.check_true("TP 8 or 16 across nodes: over 50 % of the layer waits",
               shares[1] > 0.5f && shares[2] > 0.5f);
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, kBinary,
      "Lesson 16: where each parallelism goes — TP inside a node, DP and PP across", {4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const std::vector<int>& node = L.node_of_rank();
    const int np = L.size(), dp = 2;
    const std::string svg = lesson::svg_path(L);

    // 1. The nodes.
    L.step("The nodes of this launch (ranks that share memory, MPI_COMM_TYPE_SHARED).");
    std::vector<std::vector<int>> nodes;
    for (int r = 0; r < np; ++r) {
      const size_t n = static_cast<size_t>(node[static_cast<size_t>(r)]);
      if (nodes.size() <= n) nodes.resize(n + 1);
      nodes[n].push_back(r);
    }
    TP_CHECK_INPUT(nodes.size() == 2 && nodes[0].size() == 2 && nodes[1].size() == 2,
                   "lesson 16 runs on two nodes of 2 ranks; this launch has ", nodes.size(),
                   " node(s). On one machine with MPICH: mpirun -launcher fork -hosts "
                   "localhost:2,127.0.0.1:2 -np 4 build/bin/",
                   kBinary);
    for (size_t n = 0; n < nodes.size(); ++n)
      L.say("  node ", n, ": world ranks ", group_str(nodes[n]));
    L.say(
        "  Inside a node MPICH moves messages through shared memory; between the two it uses\n"
        "  its network module: a real transport, but on the same cores and the same memory, and\n"
        "  no NIC (step 5 says what that does and does not show).");

    // 2. Two layouts of the same grid.
    L.step("Two layouts of tp 2 × dp 2 on these ranks: the same grid, two rank orders.");
    Layout a, b;
    a.name = "A";
    a.what = "TP inside a node, DP across";
    a.order = {nodes[0][0], nodes[0][1], nodes[1][0], nodes[1][1]};
    b.name = "B";
    b.what = "TP across nodes, DP inside";
    b.order = {nodes[0][0], nodes[1][0], nodes[0][1], nodes[1][1]};
    make_layout(L, a, dp);
    make_layout(L, b, dp);
    lesson::Table lt({"layout", "rank order", "TP groups", "TP", "DP groups", "DP"});
    for (Layout* l : {&a, &b})
      lt.add({l->name, group_str(l->order),
              group_str(world_ranks(*l, l->grid->tp_group(0))) + " " +
                  group_str(world_ranks(*l, l->grid->tp_group(1))),
              where(l->tp_inside),
              group_str(world_ranks(*l, l->grid->dp_group(0))) + " " +
                  group_str(world_ranks(*l, l->grid->dp_group(1))),
              where(l->dp_inside)});
    L.say(lt.str());
    const std::string warn = b.grid->placement_warning();
    L.say("  (world ranks; B is what a rank order that ignores the nodes gives.) The grid, which\n",
          "  sees B's own numbering (its rank 1 is world rank ", b.order[1], "), warns for B:\n  ",
          warn);
    L.check_true("A: TP inside the nodes, DP across", a.tp_inside && !a.dp_inside);
    L.check_true("B: TP across the nodes, DP inside", !b.tp_inside && b.dp_inside);
    L.check_true("the grid warns for B, not for A",
                 !warn.empty() && a.grid->placement_warning().empty());
    // The picture: the two layouts on the two nodes (lesson 12's grid picture).
    std::vector<lesson::GridPicture> panels;
    for (const Layout* l : {&a, &b}) {
      std::vector<int> grid_rank(static_cast<size_t>(np));
      for (int i = 0; i < np; ++i)
        grid_rank[static_cast<size_t>(l->order[static_cast<size_t>(i)])] = i;
      panels.push_back({np / dp, node, grid_rank,
                        "layout " + l->name + ": rank order " + group_str(l->order),
                        l->name + ": " + l->what});
    }
    lesson::write_grid_picture(
        L, svg, "tp 2 × dp 2 on two nodes, two rank orders: TP inside (A) or across (B)", panels,
        {"The same grid on the same four ranks: only the order in which the grid numbers them",
         "changes. A's TP links (4 all-reduces per layer) stay inside the nodes and its DP link",
         "(one all-reduce per step) crosses; B sends every TP collective across."});
    // α and β of each kind of pair, measured on A's and B's TP groups (ping-pong, then 4 MiB).
    const AlphaBeta in_node = measure_alpha_beta(a.grid->tp(), dev, int64_t{4} << 20);
    const AlphaBeta across = measure_alpha_beta(b.grid->tp(), dev, int64_t{4} << 20);
    L.say("  measured, a pair inside a node:  ", in_node.str());
    L.say("  measured, a pair across nodes:   ", across.str());
    L.check_true("α and β measured on both kinds of pair",
                 in_node.alpha > 0 && in_node.beta > 0 && across.alpha > 0 && across.beta > 0);

    // 3. Training in both layouts and on one device.
    const int64_t steps = 6, B = 8;
    const GptConfig g = tiny_model();
    L.step("A tiny GPT trained " + std::to_string(steps) +
           " steps in layout A, in layout B and on one device, on the same batches.");
    MarkovSource data(g.vocab, 16);
    SerialCommunicator solo;
    Gpt ma(dev, a.grid->tp(), g), mb(dev, b.grid->tp(), g), one(dev, solo, g);
    ma.init(16);
    mb.init(16);
    one.init(16);
    AdamWParams hp;
    hp.lr = 3e-3f;
    AdamW oa(dev, ma.params(), hp), ob(dev, mb.params(), hp), o1(dev, one.params(), hp);
    ProcessGrid one_grid(solo, 1);
    L.say("  model: ", g.str(), "; batch ", B, " sequences, ", B / dp, " per DP replica");
    const size_t a_tp = a.grid->tp().ledger().size(), a_dp = a.grid->dp().ledger().size(),
                 b_tp = b.grid->tp().ledger().size(), b_dp = b.grid->dp().ledger().size();
    std::vector<float> la, lb, l1;
    std::vector<double> ta, tb;  // step seconds, the slowest rank's
    lesson::Table curve({"step", "loss, layout A", "loss, layout B", "loss, one device"});
    auto timed = [&](Layout& l, Gpt& m, AdamW& o, const Batch& batch, int64_t s,
                     std::vector<float>& loss, std::vector<double>& secs) {
      l.renumbered->barrier();
      const double t0 = now();
      loss.push_back(train_step(*l.grid, dev, m, o, batch, 16, s, hp.lr, 1.0f).loss);
      secs.push_back(now() - t0);
    };
    for (int64_t s = 0; s < steps; ++s) {
      const Batch batch = data.batch(s, B, g.seq);
      // Interleaved, A then B then A…: the machine's load falls on both alike.
      timed(a, ma, oa, batch, s, la, ta);
      timed(b, mb, ob, batch, s, lb, tb);
      l1.push_back(train_step(one_grid, dev, one, o1, batch, 16, s, hp.lr, 1.0f).loss);
      curve.add({std::to_string(s + 1), lesson::fmt(la.back()), lesson::fmt(lb.back()),
                 lesson::fmt(l1.back())});
    }
    const Sent a_tp_sent = sent(a.grid->tp().ledger(), a_tp, a.grid->tp().ledger().size()),
               a_dp_sent = sent(a.grid->dp().ledger(), a_dp, a.grid->dp().ledger().size()),
               b_tp_sent = sent(b.grid->tp().ledger(), b_tp, b.grid->tp().ledger().size()),
               b_dp_sent = sent(b.grid->dp().ledger(), b_dp, b.grid->dp().ledger().size());
    L.say(curve.str());
    L.check("loss, layout A vs one device", la, l1, 1e-5);
    L.check("loss, layout B vs one device", lb, l1, 1e-5);
    L.check("weights after " + std::to_string(steps) + " steps, layout A vs one device",
            gathered(a.grid->tp(), ma.params(), ParamField::Value),
            gathered(solo, one.params(), ParamField::Value), 1e-5);
    L.check("weights after " + std::to_string(steps) + " steps, layout B vs one device",
            gathered(b.grid->tp(), mb.params(), ParamField::Value),
            gathered(solo, one.params(), ParamField::Value), 1e-5);
    L.say("  both layouts compute what one device computes: placement changes only the speed");

    // 4. Bytes per step on each kind of link.
    L.step("Bytes per step on each kind of link, from the TP and DP communicators' ledgers.");
    // What the preflight predicts for one TP group: every collective of a step (step_collectives)
    // at the replica's batch, and DP's one all-reduce of the shard's gradients + the loss.
    double tp_formula = 0;
    for (const PlannedCollective& k : step_collectives(g, B / dp, 2, 4))
      tp_formula += k.count * (k.per_layer ? g.layers : 1) * ring_wire_bytes(k.op, 2, k.bytes);
    int64_t shard = 1;  // the loss
    for (const Param& p : ma.params()) shard += p.value.numel();
    const double dp_formula = ring_wire_bytes("all_reduce", dp, 4 * shard);
    const double s_ = static_cast<double>(steps);
    lesson::Table bt({"layout", "TP per step", "TP calls", "DP per step", "DP calls",
                      "inside a node", "across nodes", "calls across"});
    for (const auto& [l, tps, dps] : {std::tuple<Layout*, Sent, Sent>{&a, a_tp_sent, a_dp_sent},
                                      std::tuple<Layout*, Sent, Sent>{&b, b_tp_sent, b_dp_sent}}) {
      const double inside = (l->tp_inside ? tps.bytes : 0) + (l->dp_inside ? dps.bytes : 0);
      const double out = (l->tp_inside ? 0 : tps.bytes) + (l->dp_inside ? 0 : dps.bytes);
      const int64_t calls_out = (l->tp_inside ? 0 : tps.calls) + (l->dp_inside ? 0 : dps.calls);
      bt.add({l->name + ": " + l->what, kib(tps.bytes / s_), std::to_string(tps.calls / steps),
              kib(dps.bytes / s_), std::to_string(dps.calls / steps), kib(inside / s_),
              kib(out / s_), std::to_string(calls_out / steps)});
    }
    L.say("  bytes each rank sends per step (ring model), and the collectives it takes part in:");
    L.say(bt.str());
    L.say("  the preflight's formula: TP ", kib(tp_formula), " per step (", g.layers,
          " layers × 4 all-reduces of S·b·h floats + the embedding's, head's and loss's), DP ",
          kib(dp_formula), "\n  (", shard - 1, " gradients + the loss, 2(dp − 1)/dp of them)");
    L.say(
        "  The two layouts move the same bytes; only which link carries them changes. A sends\n"
        "  one DP all-reduce per step across nodes; B sends every TP collective across: ",
        num(b_tp_sent.bytes / a_dp_sent.bytes, "%.1f"), "× A's bytes\n  across and ",
        b_tp_sent.calls / a_dp_sent.calls,
        "× its calls, each on the critical path of a layer. (This tiny model's gradients weigh as\n"
        "  much as its 64 tokens' activations; in step 6 a layer's activations are 64 MiB.)");
    L.check_value("TP bytes per step, layout A = the preflight's formula", a_tp_sent.bytes / s_,
                  tp_formula, 1e-9);
    L.check_value("TP bytes per step, layout B = layout A's", b_tp_sent.bytes, a_tp_sent.bytes,
                  1e-12);
    L.check_value("DP bytes per step, layout A = 2(dp − 1)/dp · 4 · (shard + 1)",
                  a_dp_sent.bytes / s_, dp_formula, 1e-9);
    L.check_value("DP bytes per step, layout B = layout A's", b_dp_sent.bytes, a_dp_sent.bytes,
                  1e-12);
    L.check_value("DP: one all-reduce per step", static_cast<double>(a_dp_sent.calls),
                  static_cast<double>(steps), 0);
    int64_t tp_calls = 0;  // the preflight's collectives of one step
    for (const PlannedCollective& k : step_collectives(g, B / dp, 2, 4))
      tp_calls += k.count * (k.per_layer ? g.layers : 1);
    L.check_value("TP calls per step = the preflight's list", static_cast<double>(a_tp_sent.calls),
                  static_cast<double>(tp_calls * steps), 0);
    L.check_value("TP calls, layout B = layout A's", static_cast<double>(b_tp_sent.calls),
                  static_cast<double>(a_tp_sent.calls), 0);

    // 5. Step time per layout.
    L.step("Step time per layout, measured (steps 2.." + std::to_string(steps) +
           ", A and B interleaved; the slowest rank's).");
    std::vector<double> ta_max = ta, tb_max = tb;
    for (std::vector<double>* v : {&ta_max, &tb_max}) {
      Tensor t = Tensor::from_host(dev, Shape{static_cast<int64_t>(v->size())},
                                   std::vector<float>(v->begin(), v->end()));
      world.all_reduce(t, ReduceOp::Max);
      const std::vector<float> h = t.to_host();
      v->assign(h.begin() + 1, h.end());  // step 1 warms up
    }
    // The quickest step of each: load on a shared machine only ever adds time.
    const double med_a = *std::min_element(ta_max.begin(), ta_max.end()),
                 med_b = *std::min_element(tb_max.begin(), tb_max.end());
    L.say("  layout A (TP inside):  ", msec(med_a), " per step (the quickest)");
    L.say("  layout B (TP across):  ", msec(med_b), " per step (the quickest), ",
          num(med_b / med_a, "%.2f"), "× A's");
    L.say(
        "  What two \"nodes\" on one machine show: that placement is a choice the launcher\n"
        "  makes (the same grid, two rank orders), the ledger's bytes on each kind of link, and\n"
        "  MPICH's two paths (shared memory inside, its network module between). What they do not\n"
        "  show: a real NIC, InfiniBand's 50 GB/s against NVLink's 450, a switch, or two "
        "machines'\n"
        "  own cores and memory. Both \"nodes\" share these 2 cores and this memory, and a "
        "network\n"
        "  module built on UCX (as Debian's MPICH is) may itself use shared memory between\n"
        "  processes of one machine; TP's messages here are a few KiB, so the per-message costs "
        "and\n"
        "  the machine's load set the times, and the ratio moves from run to run. Step 6 takes "
        "the\n"
        "  real links from the α–β model instead.");
    L.check_true("both layouts timed", med_a > 0 && med_b > 0);

    seventy_b(L);
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_16_layouts.svg",
                       "layouts A and B: the grid on the two nodes, links coloured by the link");
  });
}
