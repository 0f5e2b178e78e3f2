// Lesson 08c — what sequence parallelism asks of backward: the replicated parameters' partial
// gradients (the bug, and the audit that names it), and the collectives SP sends against plain TP.
//
// What it shows:
//   1. The bug SP invites: backward() without finish_gradients() leaves every replicated
//      parameter (norms, row-parallel biases, wpe) with a partial gradient, summed over this
//      rank's tokens only; the audit against t = 1 names each one as a missing all-reduce, and
//      passes once the gradients are finished.
//   2. What SP costs in communication, from the CommLedger of one training step: forward the same
//      bytes as plain TP, backward more — attention and the MLP keep only their input's shard and
//      gather it again for the weight gradients, so a layer sends 10 half-collectives (reduce-
//      scatters or all-gathers of N·h) instead of plain TP's 8 (two all-reduces each way); for
//      Qwen3-8B at t = 8 ([A3]'s model) that is 560 instead of 448 MiB per layer and rank.
//   3. The picture (--svg): every parameter of step 1's model, how it is held (split or whole),
//      which gradients are partial under SP and what the audit said of them; under it, step 2's
//      bytes per rank for one training step, plain TP against TP + SP.
//
// What is new since lesson 08b: Gpt::finish_gradients() and audit_replicated_gradients()
// (lib/model/audit.h), and Param::sequence_parallel_grad.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_08c_sp_gradient_audit [--step] [--svg P]
//       (also -np 1, 4)
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/comm_ledger.h"
#include "core/format.h"
#include "lesson.h"
#include "model/audit.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/preflight.h"
#include "model/presets.h"
#include "pictures.h"
#include "sequence_parallel.h"

using namespace tp;

namespace {

// Half-collectives of N·h and their bytes per rank in one pass (an all-reduce counts two: a
// reduce-scatter and an all-gather).
struct Pass {
  int halves = 0;
  double bytes = 0;
};

// One row of the picture's parameter table: a parameter of the SP model and what the audit
// without finish_gradients() said of it.
struct ParamRow {
  std::string name, shape;
  Split split;
  bool partial;  // Param::sequence_parallel_grad
  bool flagged;  // named by the audit
};

// A small box showing how a parameter is held: t vertical stripes (columns split), t horizontal
// stripes (rows split) or one grey box (every rank holds it whole).
void draw_holding(SvgDiagram& d, double x, double y, Split split, int t) {
  const double w = 60, h = 14;
  if (split == Split::Replicated) {
    d.box(x, y, w, h, lesson::kWholeColor);
    return;
  }
  for (int r = 0; r < t; ++r) {
    if (split == Split::Columns)
      d.box(x + r * w / t, y, w / t, h, lesson::rank_color(r));
    else
      d.box(x, y + r * h / t, w, h / t, lesson::rank_color(r));
  }
}

// The parameters of step 1's model (which are split, which are whole, which gradients SP leaves
// partial, what the audit found), then step 2's bytes per rank of one step as two stacked bars.
SvgDiagram draw_audit(const std::vector<ParamRow>& params, const Pass (&tp)[3], const Pass (&sp)[3],
                      int t) {
  const double left = 30, row_h = 20;
  SvgDiagram d(880, 60,
               "Under TP + SP at t = " + std::to_string(t) +
                   ": whose gradient is partial, and what one step sends");
  const double cx[] = {left, 230, 340, 420, 640};
  const char* heads[] = {"parameter", "global shape", "held", "its gradient under SP",
                         "audit, no finish_gradients()"};
  double y = 60;
  for (int k = 0; k < 5; ++k) d.text(cx[k], y, heads[k], "start", 12, "#555");
  y += 10;
  for (const ParamRow& p : params) {
    if (p.partial) d.box(left - 4, y, 850, row_h, "#fff3b0");
    d.text(cx[0], y + 14, p.name, "start", 11);
    d.text(cx[1], y + 14, p.shape, "start", 11);
    draw_holding(d, cx[2], y + 3, p.split, t);
    const std::string grad = p.split != Split::Replicated ? "its shard's, complete"
                             : p.partial                  ? "partial sum: all-reduce it"
                                                          : "whole, complete";
    d.text(cx[3], y + 14, grad, "start", 11, p.partial ? "#c0392b" : "#222");
    d.text(cx[4], y + 14, p.flagged ? "missing all-reduce" : "—", "start", 11,
           p.flagged ? "#c0392b" : "#888");
    y += row_h;
  }
  y += 14;
  lesson::draw_rank_legend(d, left, y, t);
  y += 40;

  // One training step: forward, backward, finish_gradients(), bytes per rank.
  d.text(left, y,
         "One training step of step 2's model, bytes per rank: the activations' collectives, then "
         "finish_gradients()",
         "start", 13);
  y += 14;
  const char* parts[] = {"forward", "backward", "finish_gradients()"};
  const char* colors[] = {"#9ecae1", "#fdae6b", "#fc9272"};
  double widest = 1;
  for (const Pass* p : {tp, sp}) widest = std::max(widest, p[0].bytes + p[1].bytes + p[2].bytes);
  for (int row = 0; row < 2; ++row) {
    const Pass* p = row == 0 ? tp : sp;
    d.text(left, y + 20, row == 0 ? "plain TP" : "TP + SP", "start", 12);
    double x = left + 90, total = 0;
    for (int k = 0; k < 3; ++k) {
      const double w = 560 * p[k].bytes / widest;
      if (w > 0) d.box(x, y + 6, w, 22, colors[k], w > 44 ? fixed(p[k].bytes, 0) : "");
      x += w;
      total += p[k].bytes;
    }
    d.text(x + 8, y + 22, fixed(total, 0) + " B", "start", 12);
    y += 32;
  }
  double x = left;
  for (int k = 0; k < 3; ++k, x += 170) {
    d.box(x, y + 6, 14, 12, colors[k]);
    d.text(x + 20, y + 16, parts[k]);
  }
  lesson::draw_notes(
      d, y + 42,
      {"Yellow rows: replicated, but each rank's backward sees only its s/t tokens; "
       "finish_gradients() adds them",
       "over the ranks in one all-reduce. Backward sends more under SP: each region gathers its "
       "kept input again."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_08c_sp_gradient_audit",
      "Lesson 08c: the SP gradient audit, and what SP sends", {2, 1, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    const std::string svg = lesson::svg_path(L);  // drawn in step 3, its path checked now

    // 1. The bug SP invites, and the audit that catches it.
    L.step(
        "Forget finish_gradients(): partial gradients of the replicated parameters, caught by the "
        "audit.");
    const lesson::SpPair one_layer =
        lesson::sp_pair(lesson_gpt(/*layers=*/1, /*hidden=*/16, /*vocab=*/32, /*seq=*/8));
    const GptConfig &small = one_layer.tp, &small_sp = one_layer.sp;
    const Batch b5 = MarkovSource(small.vocab, 5).batch(0, 2, small.seq);
    L.say("  model: ", small_sp.str(), ";  s = ", small.seq, ", b = 2: each rank holds ",
          small.seq / t, " positions of each sequence between the TP regions");
    SerialCommunicator solo;  // t = 1, the reference
    Gpt sp_model(dev, world, small_sp), tp_model(dev, world, small), reference(dev, solo, small);
    for (Gpt* g : {&sp_model, &tp_model, &reference}) {
      g->init(5);
      g->zero_grad();
    }
    const float loss_sp = sp_model.forward(b5, 5, 0), loss_tp = tp_model.forward(b5, 5, 0);
    const float loss_one = reference.forward(b5, 5, 0);
    sp_model.backward();
    tp_model.backward();
    reference.backward();
    tp_model.finish_gradients();  // nothing to do without SP
    reference.finish_gradients();
    L.say("  loss: TP + SP at t = ", t, ": ", lesson::fmt(loss_sp), ",  TP at t = ", t, ": ",
          lesson::fmt(loss_tp), ",  t = 1: ", lesson::fmt(loss_one));
    L.check("loss TP + SP vs t = 1", {loss_sp}, {loss_one}, 1e-5);
    L.check("loss TP vs t = 1", {loss_tp}, {loss_one}, 1e-5);

    int partial_params = 0;
    int64_t partial_elems = 0;
    for (const Param& p : sp_model.params())
      if (p.sequence_parallel_grad) ++partial_params, partial_elems += p.grad.numel();
    const std::vector<std::string> broken = audit_replicated_gradients(world, sp_model, reference);
    L.say("  backward() without finish_gradients(), audited against t = 1 (lib/model/audit.h): ",
          broken.size(), " finding", broken.size() == 1 ? "" : "s");
    for (const auto& line : broken) L.say("    ", line);
    int missing = 0;
    for (const auto& line : broken) missing += line.find("missing all-reduce") != std::string::npos;
    const int expect_broken = t > 1 ? partial_params : 0;
    L.check_fact("findings without finish_gradients", {static_cast<float>(broken.size())},
                 {static_cast<float>(expect_broken)});
    L.check_fact("findings that say missing all-reduce", {static_cast<float>(missing)},
                 {static_cast<float>(expect_broken)});
    if (t == 1)
      L.say(
          "  At t = 1 the one rank sees every token, so its gradients are already whole: the "
          "variant\n"
          "  without finish_gradients() is not broken, and the audit finds nothing.");

    const size_t m = L.mark();
    sp_model.finish_gradients();
    L.say("  finish_gradients(): ", L.comm_since(m), " (", partial_params,
          " parameters packed together)");
    const std::vector<std::string> after_fix =
        audit_replicated_gradients(world, sp_model, reference);
    L.say("  audited again: ", after_fix.size(), " finding", after_fix.size() == 1 ? "" : "s");
    for (const auto& line : after_fix) L.say("    ", line);
    L.check_fact("findings after finish_gradients", {static_cast<float>(after_fix.size())}, {0});
    L.check_fact("elements all-reduced by finish_gradients",
                 {static_cast<float>(t > 1 ? world.ledger().records()[m].elements : partial_elems)},
                 {static_cast<float>(partial_elems)});
    L.check("every gradient, TP + SP vs t = 1",
            gathered(world, sp_model.params(), ParamField::Grad),
            gathered(solo, reference.params(), ParamField::Grad), 1e-5);
    L.check("every gradient, TP vs t = 1", gathered(world, tp_model.params(), ParamField::Grad),
            gathered(solo, reference.params(), ParamField::Grad), 1e-5);

    // 2. What SP sends: one training step of a 2-layer model, plain TP and TP + SP, from the
    // ledger. Forward, the two designs move the same bytes; backward, SP gathers each region's
    // kept input shard again (attention and the MLP need the whole sequence for dW = Xᵀ dY).
    L.step("What SP sends: one training step's collectives from the ledger, plain TP vs TP + SP.");
    GptConfig two_layers = small;
    two_layers.layers = 2;
    const lesson::SpPair two_pair = lesson::sp_pair(two_layers);
    const GptConfig &two = two_pair.tp, &two_sp = two_pair.sp;
    const int64_t Lyr = two.layers, Nh = two.seq * 2 * two.hidden;
    L.say("  model: ", two_sp.str(), ";  s = ", two.seq, ", b = 2 (N = ", two.seq * 2,
          " tokens)\n  counted: the collectives of N·h = ", Nh,
          " floats, the activations (not the loss's and the gradient norm's few numbers)");
    // Halves: an all-reduce is a reduce-scatter plus an all-gather, so it counts two.
    auto count_since = [&](size_t from, size_t to) {
      Pass p;
      const auto& recs = world.ledger().records();
      for (size_t k = from; k < to; ++k) {
        if (recs[k].elements != Nh) continue;
        p.halves += recs[k].op == "all_reduce" ? 2 : 1;
        p.bytes += recs[k].wire_bytes;
      }
      return p;
    };
    // One step of `c`: forward, backward and finish_gradients(), each pass's collectives; the
    // backward's by op and label (a label names the region op that issued it).
    std::map<std::string, int> sp_backward_ops;
    auto one_step = [&](const GptConfig& c, Pass& fwd, Pass& bwd, double& after) {
      Gpt g(dev, world, c);
      g.init(5);
      g.zero_grad();
      const size_t m0 = L.mark();
      g.forward(b5, 5, 0);
      const size_t m1 = L.mark();
      g.backward();
      const size_t m2 = L.mark();
      g.finish_gradients();
      fwd = count_since(m0, m1);
      bwd = count_since(m1, m2);
      after = world.ledger().wire_bytes_since(m2);
      if (c.sp)
        for (size_t k = m1; k < m2; ++k) {
          const CommRecord& rec = world.ledger().records()[k];
          if (rec.elements == Nh) ++sp_backward_ops[rec.op + " (" + rec.label + ")"];
        }
    };
    Pass tp_fwd, tp_bwd, sp_fwd, sp_bwd;
    double tp_after = 0, sp_after = 0;
    one_step(two, tp_fwd, tp_bwd, tp_after);
    one_step(two_sp, sp_fwd, sp_bwd, sp_after);
    auto bytes_str = [](double b) { return fixed(b, 0) + " B"; };
    lesson::Table passes({"pass", "plain TP: halves", "plain TP: sent per rank", "TP + SP: halves",
                          "TP + SP: sent per rank"});
    passes.add({"forward", std::to_string(tp_fwd.halves), bytes_str(tp_fwd.bytes),
                std::to_string(sp_fwd.halves), bytes_str(sp_fwd.bytes)});
    passes.add({"backward", std::to_string(tp_bwd.halves), bytes_str(tp_bwd.bytes),
                std::to_string(sp_bwd.halves), bytes_str(sp_bwd.bytes)});
    passes.add({"whole step", std::to_string(tp_fwd.halves + tp_bwd.halves),
                bytes_str(tp_fwd.bytes + tp_bwd.bytes),
                std::to_string(sp_fwd.halves + sp_bwd.halves),
                bytes_str(sp_fwd.bytes + sp_bwd.bytes)});
    L.say("  half-collectives of N·h (an all-reduce counts 2: a reduce-scatter + an all-gather):");
    L.say(passes.str());
    lesson::Table ops({"TP + SP backward: collective (CommLedger label)", "calls"});
    for (const auto& kv : sp_backward_ops) ops.add({kv.first, std::to_string(kv.second)});
    if (t > 1) L.say(ops.str());
    // Per layer: plain TP 2 all-reduces each way (8 halves); SP 2 all-gathers + 2 reduce-scatters
    // forward, and backward 2 all-gathers of dY, 2 reduce-scatters of dX and 2 re-gathers of the
    // kept input (10 halves). Once per step: the embedding and the head, 2 halves each way.
    const float on = t > 1 ? 1.0f : 0.0f;  // at t = 1 the region ops move nothing
    const double half_bytes = (t - 1.0) / t * 4.0 * Nh;
    L.check_fact("forward halves, plain TP and TP + SP = 4L + 2",
                 {float(tp_fwd.halves), float(sp_fwd.halves)},
                 {on * (4 * Lyr + 2), on * (4 * Lyr + 2)}, 0);
    L.check_fact("backward halves: plain TP = 4L + 2, TP + SP = 6L + 2",
                 {float(tp_bwd.halves), float(sp_bwd.halves)},
                 {on * (4 * Lyr + 2), on * (6 * Lyr + 2)}, 0);
    L.check_fact("bytes per rank = halves · (t − 1)/t · 4·N·h",
                 {float(tp_fwd.bytes + tp_bwd.bytes), float(sp_fwd.bytes + sp_bwd.bytes)},
                 {float((tp_fwd.halves + tp_bwd.halves) * half_bytes),
                  float((sp_fwd.halves + sp_bwd.halves) * half_bytes)});
    L.check_true("SP sends more than plain TP in backward, the same in forward",
                 (sp_bwd.bytes > tp_bwd.bytes) == (on > 0) && sp_fwd.bytes == tp_fwd.bytes);
    L.say(
        "  per layer: plain TP 4 halves forward + 4 backward = 8; TP + SP 4 + 6 = 10 (the 2\n"
        "  re-gathers of the kept input shard, labelled gather_from_sp_region.forward above, run\n"
        "  in backward): 1.25× the bytes of plain TP per layer, (10L + 4)/(8L + 4) for the step.");
    if (t == 1) L.say("  (t = 1: nothing moves; run with -np 2 or 4 to see the counts.)");
    L.say("  after backward, SP also all-reduces the partial gradients (finish_gradients): ",
          bytes_str(sp_after), " per rank here (plain TP: ", bytes_str(tp_after), ").");
    // The same count for [A3]'s model: Qwen3-8B, one 8K sequence, bf16, t = 8: 56 MiB per half.
    {
      const GptConfig qwen = model_preset("qwen3-8b");
      auto per_layer = [&](bool sp) {
        GptConfig c = qwen;
        c.sp = sp;
        double w = 0;
        for (const PlannedCollective& k : step_collectives(c, 1, 8, 2))
          if (k.per_layer) w += k.count * ring_wire_bytes(k.op, 8, k.bytes);
        return w / 1048576.0;
      };
      const double plain_mib = per_layer(false), sp_mib = per_layer(true);
      L.say(
          "  [A3]'s model (Qwen3-8B, s = 8192, b = 1, bf16, t = 8; lib/model/preflight.h): one "
          "half is\n  7/8 · 64 MiB = 56 MiB, so a layer sends ",
          fixed(plain_mib, 0), " MiB per rank under plain TP and ", fixed(sp_mib, 0),
          " MiB under TP + SP.");
      L.check_fact("Qwen3-8B at t = 8, MiB per layer: plain TP 8 · 56, TP + SP 10 · 56",
                   {float(plain_mib), float(sp_mib)}, {8 * 56, 10 * 56});
    }
    L.say(
        "  So SP does not leave the communication unchanged: forward it moves the same bytes,\n"
        "  backward half as much again (6 halves per layer instead of 4), a quarter more for the\n"
        "  layer as a whole. [A1] (§2, §6) is right that SP adds communication; what SP buys with\n"
        "  it is activation memory (lesson 08b).");

    // 3. The picture: the parameters, their gradients under SP, and one step's bytes.
    L.step("Whose gradient is partial, and what one step sends: the picture.");
    std::vector<ParamRow> rows;
    for (const Param& p : sp_model.params()) {
      bool flagged = false;
      for (const auto& line : broken) flagged = flagged || line.rfind(p.name + ":", 0) == 0;
      rows.push_back(
          {lesson::layer0_name(p.name), p.shape.str(), p.split, p.sequence_parallel_grad, flagged});
    }
    const Pass tp_passes[3] = {tp_fwd, tp_bwd, {0, tp_after}},
               sp_passes[3] = {sp_fwd, sp_bwd, {0, sp_after}};
    lesson::write_picture(L, draw_audit(rows, tp_passes, sp_passes, t), svg);

    // 4. Summary.
    L.step("Summary.");
    L.say(
        "Under sequence parallelism the replicated parameters (norms, row-parallel biases, wpe)\n"
        "see only their rank's tokens in backward: their gradients are partial sums, and\n"
        "finish_gradients() must add them over the ranks once per step. Forgetting it crashes\n"
        "nothing; the audit against t = 1 names every such parameter. SP also sends more than\n"
        "plain TP in backward (the re-gathers of each region's input): 10 half-collectives per\n"
        "layer instead of 8. What it buys with them is activation memory (lesson 08b).");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_08c_sp_gradient_audit.svg",
                       "the parameters' gradients under SP and one step's bytes");
  });
}
