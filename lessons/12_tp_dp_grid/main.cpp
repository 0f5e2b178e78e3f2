// Lesson 12 — TP × DP: the ranks as a grid, data parallelism's gradient all-reduce, and why TP
// stays inside a node while DP and PP go across.
//
// What it shows:
//   1. np 4 = tp 2 × dp 2: world rank r sits at (tp_rank, dp_rank) = (r mod 2, r div 2). TP groups
//      are adjacent ranks {0, 1} {2, 3} (one model replica each, split); DP groups are strided
//      {0, 2} {1, 3} (the same shard in both replicas). Each group is found by an all-reduce of
//      one-hot rank vectors over the split communicators, and checked against the formula.
//   2. Placement: every TP group must sit on one node (the node-local split, MPI_COMM_TYPE_SHARED).
//      Here all ranks share one machine; the same check on made-up 2-node placements warns where
//      it should. The picture: the grid on this run's node and on two nodes of two, placed in
//      blocks and round-robin, its TP and DP links coloured by the link they take.
//   3. A tiny GPT trained at tp 2 × dp 2 and at tp 1 × dp 1 on the same global batch: each DP rank
//      takes half of the batch, and after backward the gradients (and the loss) are averaged over
//      the DP group. Losses, final weights and gradients equal the single device's.
//   4. The DP all-reduce in the DP communicator's CommLedger: one per step, of every gradient of
//      the rank's TP shard (+ the loss), 2(dp − 1)/dp of its bytes sent per rank.
//   5. Why TP stays inside a node and DP (and PP) go across: the per-layer all-reduce on NVLink vs
//      InfiniBand, against the compute it would have to hide behind.
// Memory (bytes per parameter, ZeRO-1/2/3, the three walls) is lesson 12b.
//
// What is new since lesson 11: a second dimension of parallelism. lib/parallel/process_grid.h
// (ProcessGrid), lib/parallel/data_parallel.h (average_gradients) and tp::train_step on a grid
// (lib/model/train.h), which tp_train runs with --dp.
//
// Run:  make lessons && mpirun -np 4 build/bin/lesson_12_tp_dp_grid [--step] [--svg FILE]
#include <cmath>
#include <cstdio>

#include "lesson.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model/train.h"
#include "parallel/process_grid.h"
#include "pictures.h"

using namespace tp;

namespace {

std::string num(double v, const char* format) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string group_str(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "}";
}

// The ranks whose entry in a summed one-hot vector is 1.
std::vector<int> members(const std::vector<float>& one_hot_sum) {
  std::vector<int> out;
  for (size_t r = 0; r < one_hot_sum.size(); ++r)
    if (one_hot_sum[r] > 0.5f) out.push_back(static_cast<int>(r));
  return out;
}

std::vector<float> to_float(const std::vector<int>& v) { return {v.begin(), v.end()}; }

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_12_tp_dp_grid",
      "Lesson 12: a tp × dp grid, the DP gradient all-reduce, and why TP stays inside a node", {4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int np = L.size(), dp = 2, tp = np / dp;
    const std::string svg = lesson::svg_path(L);

    // 1. The grid.
    L.step("The grid: np " + std::to_string(np) + " = tp " + std::to_string(tp) + " × dp " +
           std::to_string(dp) + ", rank r at (tp_rank, dp_rank) = (r mod tp, r div tp).");
    ProcessGrid grid(world, dp, L.node_of_rank());
    L.say("  ", grid.describe());
    // Each rank all-reduces a one-hot vector of its world rank over its TP group and over its DP
    // group: the sums list the members as the communicators see them.
    Tensor coord = Tensor::from_host(
        dev, Shape{2}, {static_cast<float>(grid.tp_rank()), static_cast<float>(grid.dp_rank())});
    std::vector<float> hot(static_cast<size_t>(np), 0.0f);
    hot[static_cast<size_t>(world.rank())] = 1.0f;
    Tensor in_tp = Tensor::from_host(dev, Shape{np}, hot),
           in_dp = Tensor::from_host(dev, Shape{np}, hot);
    grid.tp().all_reduce(in_tp);
    grid.dp().all_reduce(in_dp);
    const auto coords = L.gather(coord), tp_seen = L.gather(in_tp), dp_seen = L.gather(in_dp);
    lesson::Table table({"world rank", "node", "tp_rank", "dp_rank", "TP group (all-reduce)",
                         "DP group (all-reduce)"});
    if (L.is_root())
      for (int r = 0; r < np; ++r)
        table.add({std::to_string(r), std::to_string(L.node_of_rank().at(r)),
                   lesson::fmt(coords[r][0]), lesson::fmt(coords[r][1]),
                   group_str(members(tp_seen[r])), group_str(members(dp_seen[r]))});
    L.say(table.str());
    // Against the formula: tp_rank = r mod tp, dp_rank = r div tp; TP group = {d·tp + i : i},
    // DP group = {i + d·tp : d}.
    L.check_fact_ranks("(tp_rank, dp_rank) = (r mod tp, r div tp)", coord,
                       lesson::per_rank(
                           np,
                           [&](int r) {
      return std::vector<float>{static_cast<float>(r % tp), static_cast<float>(r / tp)};
                           }),
                       0);
    L.check_fact_ranks("TP group = adjacent ranks", in_tp,
                       lesson::per_rank(
                           np,
                           [&](int r) {
      std::vector<float> v(static_cast<size_t>(np), 0.0f);
      for (int m : grid.tp_group(r / tp)) v[static_cast<size_t>(m)] = 1.0f;
      return v;
                           }),
                       0);
    L.check_fact_ranks("DP group = ranks tp apart", in_dp,
                       lesson::per_rank(
                           np,
                           [&](int r) {
      std::vector<float> v(static_cast<size_t>(np), 0.0f);
      for (int m : grid.dp_group(r % tp)) v[static_cast<size_t>(m)] = 1.0f;
      return v;
                           }),
                       0);

    // 2. Placement.
    L.step("Placement: a TP group must not span nodes (checked with the node-local split).");
    const std::string here = grid.placement_warning();
    L.say("  this run: nodes of ranks 0..", np - 1, " = ", lesson::fmt(to_float(L.node_of_rank())),
          here.empty() ? " → every TP group lies on one node" : " → warning: " + here);
    struct Case {
      const char* what;
      int tp;
      std::vector<int> nodes;
      bool warns;
    };
    const std::vector<Case> cases = {
        {"2 nodes × 2 ranks, tp 2", 2, {0, 0, 1, 1}, false},
        {"2 nodes × 2 ranks, tp 4", 4, {0, 0, 1, 1}, true},
        {"round-robin placement, tp 2", 2, {0, 1, 0, 1}, true},
        {"2 nodes × 8 GPUs, tp 8", 8, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, false},
    };
    lesson::Table place({"placement (node of each rank)", "nodes", "grid check"});
    std::string wrong;  // the placements whose warning is not the expected one
    std::string example;
    for (const Case& c : cases) {
      const std::string w = ProcessGrid::placement_warning(c.tp, c.nodes);
      if (example.empty()) example = w;
      place.add({c.what, lesson::fmt(to_float(c.nodes)),
                 w.empty() ? "fine" : "warns: " + w.substr(0, w.find(':'))});
      if (!w.empty() != c.warns) wrong += std::string(wrong.empty() ? "" : ", ") + c.what;
    }
    L.say(place.str());
    L.say("  the whole warning (tp_train prints it too):\n    ", example);
    L.say(
        "  A TP group across nodes still computes the right numbers (TP equals single device\n"
        "  wherever the ranks are), only slowly (step 7), so the grid warns instead of refusing.");
    L.check_true("placement check: which placements warn", wrong.empty(), "wrong for " + wrong);
    L.check_true("this run (one node) does not warn", here.empty(), here);
    // The picture: this run's grid, and the same grid on two nodes of two (cases 0 and 2 above).
    std::vector<lesson::GridPicture> panels;
    auto panel = [&](const std::string& heading, const std::vector<int>& nodes) {
      const std::string w = ProcessGrid::placement_warning(tp, nodes);
      panels.push_back(
          {tp,
           nodes,
           {},
           heading,
           w.empty() ? "grid check: fine" : "grid check warns: " + w.substr(0, w.find(':'))});
    };
    panel("this run: one node", L.node_of_rank());
    panel("2 nodes × 2, block placement", cases[0].nodes);
    panel("2 nodes × 2, round-robin", cases[2].nodes);
    lesson::write_grid_picture(
        L, svg,
        "tp " + std::to_string(tp) + " × dp " + std::to_string(dp) +
            " on nodes: the same grid, three placements",
        panels,
        {"A rank's box: its world rank and grid coordinate; the fill is its tp_rank, the shard of",
         "every split weight it holds (a DP group holds one shard, one colour). The TP links carry",
         "4 all-reduces per layer on the critical path: green (inside a node) is where they "
         "belong."});

    // 3. Training: tp × dp against one device on the same global batch.
    const int64_t steps = 3, B = 4;
    L.step("A tiny GPT, " + std::to_string(steps) + " steps at tp " + std::to_string(tp) +
           " × dp " + std::to_string(dp) + " and at tp 1 × dp 1, on the same global batch of " +
           std::to_string(B) + " sequences.");
    const GptConfig g = lesson_gpt(/*layers=*/1, /*hidden=*/32, /*vocab=*/32, /*seq=*/8);
    MarkovSource data(g.vocab, 12);
    SerialCommunicator solo;
    ProcessGrid one_grid(solo, 1);
    Gpt model(dev, grid.tp(), g), one(dev, solo, g);
    model.init(12);
    one.init(12);
    AdamWParams hp;
    hp.lr = 3e-3f;
    AdamW opt(dev, model.params(), hp), one_opt(dev, one.params(), hp);
    L.say("  model: ", g.str(), "; DP rank d takes sequences [d·", B / dp, ", (d+1)·", B / dp,
          ") of each batch");
    const size_t dp_mark = grid.dp().ledger().size(), tp_mark = grid.tp().ledger().size();
    lesson::Table curve({"step", "loss at tp " + std::to_string(tp) + " × dp " + std::to_string(dp),
                         "loss at tp 1 × dp 1", "relative difference"});
    std::vector<float> loss_grid, loss_one;
    for (int64_t s = 0; s < steps; ++s) {
      const Batch b = data.batch(s, B, g.seq);
      const StepResult a = train_step(grid, dev, model, opt, b, 12, s, hp.lr, 1.0f);
      const StepResult c = train_step(one_grid, dev, one, one_opt, b, 12, s, hp.lr, 1.0f);
      loss_grid.push_back(a.loss);
      loss_one.push_back(c.loss);
      curve.add({std::to_string(s + 1), lesson::fmt(a.loss), lesson::fmt(c.loss),
                 num(std::fabs(a.loss - c.loss) / std::fabs(c.loss), "%.2e")});
    }
    const size_t tp_calls = grid.tp().ledger().size() - tp_mark;
    L.say(curve.str());
    L.check("loss (averaged over dp) vs one device", loss_grid, loss_one, 1e-5);
    // The last step's gradients (after the DP average) and the weights after the last update, as
    // global tensors: gathered over the TP group, the same on both DP replicas.
    const std::vector<float> grads = gathered(grid.tp(), model.params(), ParamField::Grad),
                             weights = gathered(grid.tp(), model.params(), ParamField::Value);
    L.check("last step's gradients (averaged over dp) vs one device", grads,
            gathered(solo, one.params(), ParamField::Grad), 1e-5);
    L.check("weights after " + std::to_string(steps) + " AdamW steps vs one device", weights,
            gathered(solo, one.params(), ParamField::Value), 1e-5);
    // Both DP replicas hold bit-identical shards: the all-reduce gave both the same sum.
    int64_t shard = 0;
    for (const Param& p : model.params()) shard += p.value.numel();
    Tensor mine(dev, Shape{shard});
    int64_t at = 0;
    for (const Param& p : model.params()) {
      mine.view(at, at + p.value.numel()).copy_from(p.value);
      at += p.value.numel();
    }
    const auto shards = L.gather(mine);
    if (L.is_root())
      for (int r = tp; r < np; ++r)
        L.check_fact("rank " + std::to_string(r) + "'s weights = its DP peer rank " +
                         std::to_string(r % tp) + "'s, bit for bit",
                     shards[r], shards[r % tp], 0);
    L.say(
        "  the weights and gradients of every parameter match one device, and the two DP\n"
        "  replicas hold the same shards bit for bit (they took the same averaged step)");

    // 4. The DP all-reduce, from the DP communicator's ledger.
    L.step("The DP all-reduce: one per step, of this rank's whole gradient shard (+ the loss).");
    const auto& recs = grid.dp().ledger().records();
    int64_t elements = 1, whole = 0;  // the loss, then every gradient value of this TP shard
    for (const Param& p : model.params()) {
      elements += p.split == Split::Replicated ? p.shape.numel() : p.shape.numel() / tp;
      whole += p.shape.numel();
    }
    L.say("  the model has ", whole, " parameters; a TP shard holds ", elements - 1,
          " of them (split ones ÷ ", tp, ", replicated whole),\n  so each DP all-reduce carries ",
          elements - 1, " gradients + 1 loss = ", elements, " values:");
    lesson::Table dpt({"step", "collective", "label", "elements", "bytes", "sent per rank",
                       "formula 2(dp-1)/dp · bytes"});
    std::vector<float> got_elements, got_wire;
    for (size_t i = dp_mark; i < recs.size(); ++i) {
      const CommRecord& r = recs[i];
      dpt.add({std::to_string(i - dp_mark + 1), r.op, r.label, std::to_string(r.elements),
               std::to_string(r.bytes), lesson::fmt(static_cast<float>(r.wire_bytes)),
               lesson::fmt(static_cast<float>(ring_wire_bytes("all_reduce", dp, 4 * elements)))});
      got_elements.push_back(static_cast<float>(r.elements));
      got_wire.push_back(static_cast<float>(r.wire_bytes));
    }
    L.say(dpt.str());
    L.say("  the same steps issued ", tp_calls, " collectives in each TP group (", tp_calls / steps,
          " per step: embedding, attention,\n  MLP, cross-entropy, LM head, gradient norm) and ",
          recs.size() - dp_mark, " in each DP group (one per step).");
    L.say(
        "  TP's are small (b·s·h activations) and many, each on the critical path; DP's is one\n"
        "  big buffer per step (all gradients of a TP shard), which real frameworks cut into\n"
        "  buckets and send while backward is still running.");
    L.check_fact("DP all-reduces: one per step", {static_cast<float>(recs.size() - dp_mark)},
                 {static_cast<float>(steps)}, 0);
    L.check_fact("DP all-reduce elements = Σ shard sizes + 1", got_elements,
                 std::vector<float>(static_cast<size_t>(steps), static_cast<float>(elements)), 0);
    L.check_fact("DP bytes sent per rank = 2(dp-1)/dp · 4 · elements", got_wire,
                 std::vector<float>(static_cast<size_t>(steps),
                                    static_cast<float>(2.0 * (dp - 1) / dp * 4.0 * elements)),
                 1e-6);

    // 5. Why TP stays in the node.
    L.step("Why TP stays inside a node, and DP and PP go across.");
    // [A3]'s 8B model (h = 4096, 36 layers) on one 8K sequence; InfiniBand 50 GB/s, 400 TFLOPS.
    const double s = 8192, h8 = 4096, layers8 = 36, ib = 50e9, flops = 400e12;
    // [A3]: 8B model at t = 8; each of the 4 all-reduces per layer is b·s·h = 8192 · 4096 in
    // bf16 = 64 MiB, and a rank sends 2(t − 1)/t of it.
    const int t8 = 8;
    const double buf = s * h8 * 2,
                 sent = ring_wire_bytes("all_reduce", t8, static_cast<int64_t>(buf));
    const double nvlink = 450e9;
    // Compute per layer per rank: 6 · (parameters of one layer) · tokens / t / FLOP/s, with an
    // 8B layer = q, o (h × h), k, v (h × h/4, GQA 32/8 heads), SwiGLU MLP (3 × h × 3h).
    const double layer_params = 2 * h8 * h8 + 2 * h8 * (h8 / 4) + 3 * h8 * (3 * h8);
    const double compute_layer = 6 * layer_params * s / t8 / flops;
    lesson::Table link(
        {"link", "one all-reduce", "per layer (4)", "36 layers", "per layer vs compute"});
    std::vector<float> per_ar;
    for (const auto& [name, bw] :
         {std::pair<const char*, double>{"NVLink, inside a node", nvlink},
          std::pair<const char*, double>{"InfiniBand, across nodes", ib}}) {
      const double one_ar = sent / bw;
      per_ar.push_back(static_cast<float>(one_ar * 1e3));
      link.add({std::string(name) + " (" + num(bw / 1e9, "%.0f") + " GB/s)",
                num(one_ar * 1e3, "%.2f ms"), num(4 * one_ar * 1e3, "%.1f ms"),
                num(4 * one_ar * layers8 * 1e3, "%.0f ms"),
                num(4 * one_ar / compute_layer, "%.2f×")});
    }
    L.say("  one all-reduce buffer: b·s·h = 8192 · 4096 · 2 B = ", num(buf / 1048576.0, "%.0f MiB"),
          "; at t = 8 a rank sends 2·7/8 of it = ", num(sent / 1048576.0, "%.0f MiB"));
    L.say("  compute per layer per rank (forward + backward, 6·N·tokens/t at 400 TFLOPS): ",
          num(compute_layer * 1e3, "%.1f ms"), " (", num(layer_params / 1e9, "%.2f"),
          "B parameters per layer)");
    L.say(link.str());
    L.say(
        "  Each TP all-reduce's result is the next layer's input: the GPU waits for it (the\n"
        "  critical path), so on InfiniBand a layer would spend ~3× its compute waiting. DP's\n"
        "  gradient all-reduce happens once per step and runs under backward (layer L's gradients\n"
        "  are sent while layer L−1 computes); PP sends one activation between stages per\n"
        "  micro-batch, point to point. Both tolerate the slower link: TP inside the node\n"
        "  (t ≤ 8), PP and DP across nodes.");
    L.check_fact("one all-reduce: 0.26 ms on NVLink, 2.3 ms on IB", per_ar, {0.261f, 2.349f}, 2e-3);
    L.check_fact("8B layer: 0.19B parameters, ~3 ms of compute at t = 8",
                 {static_cast<float>(layer_params / 1e9), static_cast<float>(compute_layer * 1e3)},
                 {0.1929f, 2.963f}, 1e-3);
      },
      [](Options& o) {
    lesson::svg_option(
        o, "lesson_12_grid.svg",
        "the tp × dp grid on nodes, its TP and DP links coloured by the link they take");
  });
}
