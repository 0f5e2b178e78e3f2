// Lesson 11 — hiding the communication: one transformer block at t = 2, serial, async and ring,
// and without sequence parallelism serial and chunked, over an interconnect slow enough to see.
//
// What it shows:
//   1. The block (with sequence parallelism) and what it communicates per forward + backward: ten
//      collectives of (S·B, h) activations. On a laptop the ranks share memory and communication
//      costs almost nothing, so nothing would be left to hide. A simulated link (lib/core/
//      simulated_link.h) makes each collective last steps·α + wire bytes/β, sleeping, not spinning;
//      the lesson picks β from the α–β model so that the block's communication takes as long as its
//      GEMMs, the regime where overlap saves the most (comm ≈ compute: TP at t = 8 over
//      InfiniBand, lesson 16; not [A1]'s 10 GbE, where the GEMMs cover about 1 % of it).
//   2. Three ways to run the same block (--overlap, lib/parallel/collective_matmul.h):
//        none   every collective blocks;
//        async  backward starts dX's reduction and the input's re-gather early and computes the
//               weight gradients while they fly;
//        ring   collective matmul: each all-gather + GEMM and GEMM + reduce-scatter is a ring of
//               row blocks, each block's GEMM running while the next block travels.
//      The same numbers (checked against one device, and against each other: async bit for bit
//      at t = 2, ring to float rounding), and for each the step time, the communication, the part
//      of it the computing thread waited for (exposed) and the part hidden under compute, from
//      the timeline (lib/observe/timeline.h), whose charts of the last step are written as SVG
//      (build/lesson_11_<mode>.svg by default).
//   3. Plain TP (no SP) over the same link: its four all-reduces blocking (none), or chunked: the
//      GEMM in front of each cut into row blocks, each block's all-reduce flying under the next
//      block's GEMM. The numbers of none (bit for bit where the BLAS rounds a row the same in any
//      block of rows; checked to 1e-6).
//   4. Against [A1]'s "overlap cut the TP communication overhead by about 40 %" and its "most on
//      a 10 Gbps link": this block's bytes at 10 Gb/s against its GEMMs at an A100's rate.
//
// What is new since lesson 10: asynchronous collectives (Work), the overlap modes, the simulated
// link, the α–β model used to size it, and the timeline.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_11_overlap [--step]   (also -np 4)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/format.h"
#include "lesson.h"
#include "model/gpt.h"
#include "observe/alpha_beta.h"
#include "observe/simulated_link.h"
#include "observe/timeline.h"
#include "observe/timer.h"
#include "parallel/collective_matmul.h"
#include "parallel/param.h"
#include "pictures.h"

using namespace tp;

namespace {

// The GEMM rate of an A100 for [A1]'s "10 Gbps between A100s": its 312 TFLOP/s bf16 peak at the
// third a GEMM of this block's size reaches.
constexpr double kA100Flops = 100e12;

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

// One run of the block in a mode: its outputs, gradients and timings.
struct Run {
  std::vector<float> y, dx, grads;
  double step = 0, comm = 0, exposed = 0, gemm = 0;  // medians over the timed steps, seconds
  double compute = 0;                                // median of step − exposed: not waiting
  size_t first = 0, records = 0;                     // the ledger records of one forward + backward
  Timeline timeline;
};

// Forward + backward of a fresh block (the same weights for every mode) `steps` times after one
// warm-up, each step's spans measured on `tl`; then gradients of one more step for the checks.
void run_block(Device& dev, Communicator& comm, GptConfig cfg, Overlap overlap, int steps,
               Run& out) {
  cfg.overlap = overlap;
  TransformerBlock block(dev, comm, cfg, 0);
  ParamList params;
  block.collect_params(params, cfg.init_std, cfg.init_std);
  init_params(dev, params, 11);
  const int t = comm.size();
  // SP: this rank's tokens (S·B/t, h); plain TP: every token on every rank (S·B, h).
  const int64_t n = cfg.sp ? cfg.seq * 4 / t : cfg.seq * 4, h = cfg.hidden;
  const int64_t row0 = cfg.sp ? comm.rank() * n : 0;
  Tensor x(dev, Shape{n, h}), dy(dev, Shape{n, h});
  dev.fill_random(x, RngKey::from(11, "x"), GlobalIndex::rows(h, row0), Distribution::normal(0, 1));
  dev.fill_random(dy, RngKey::from(11, "dy"), GlobalIndex::rows(h, row0),
                  Distribution::normal(0, 1));
  dev.set_timeline(&out.timeline);
  comm.set_timeline(&out.timeline);
  std::vector<double> step, comm_s, exposed, gemm, compute;
  for (int i = 0; i <= steps; ++i) {
    comm.barrier();
    out.timeline.clear();  // each step alone: the chart ends up showing the last one
    const size_t mark = out.timeline.mark(), ledger0 = comm.ledger().size();
    const double t0 = out.timeline.now();
    block.forward(x, cfg.seq, 4, 11, 0);
    block.backward(dy);
    const double t1 = out.timeline.now();
    out.first = ledger0;
    out.records = comm.ledger().size() - ledger0;
    if (i == 0) continue;  // the warm-up pays for first allocations
    const CommTotals totals = out.timeline.totals_since(mark);
    double g = 0;
    for (const Span& s : out.timeline.spans())
      if (s.start >= t0 && s.name == "gemm") g += s.seconds();
    step.push_back(t1 - t0);
    comm_s.push_back(totals.communication);
    exposed.push_back(totals.exposed);
    gemm.push_back(g);
    compute.push_back((t1 - t0) - totals.exposed);
  }
  if (steps > 0) {
    out.step = median(step);
    out.comm = median(comm_s);
    out.exposed = median(exposed);
    out.gemm = median(gemm);
    out.compute = median(compute);
  }
  dev.set_timeline(nullptr);
  comm.set_timeline(nullptr);
  zero_grads(dev, params);
  out.y = block.forward(x, cfg.seq, 4, 11, 0).to_host();
  out.dx = block.backward(dy).to_host();
  // Under SP a replicated parameter's gradient covers this rank's tokens only: sum it over the
  // group, as Gpt::finish_gradients() does, so that it can be compared with one device.
  for (Param& p : params)
    if (p.sequence_parallel_grad && t > 1) comm.all_reduce(p.grad);
  out.grads = gathered(comm, params, ParamField::Grad);
}

std::string times(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f×", ratio);
  return buf;
}

// The columns of a mode's row, against `base`, the same block without overlap: hidden is the share
// of base's exposed communication that no longer stops compute; the floor is base's compute (its
// step less what it waited for), the step with every byte hidden.
const std::vector<std::string> kModeColumns = {
    "step", "communication spans", "exposed", "hidden", "step vs none", "compute", "step vs floor"};
std::vector<std::string> mode_row(const std::string& mode, const Run& r, const Run& base) {
  const double hidden = std::max(0.0, 1.0 - r.exposed / base.exposed);
  return {mode,          ms(r.step),
          ms(r.comm),    ms(r.exposed),
          pct(hidden),   times(r.step / base.step),
          ms(r.compute), times(r.step / base.compute)};
}

// The idea of overlap drawn from this run: the step's GEMMs and its all-reduces (step 4's none,
// without SP: medians over the simulated link) as one GEMM and one collective on a time axis,
// blocking, and cut into k row blocks whose all-reduces each fly under the next block's GEMM
// (chunked's schedule, the modelled best: no α, no cost for the cut).
SvgDiagram draw_idea(int t, double gemm, double comm, int k, double measured_hidden) {
  const std::string kGemm = "#4e79a7", kComm = "#f28e2b", kWait = "#e15759";  // the timelines'
  const double left = 110, h = 22, scale = 540 / (gemm + comm);
  SvgDiagram d(760, 60,
               "Hiding communication at t = " + std::to_string(t) + ": blocking, and cut into " +
                   std::to_string(k) + " blocks");
  double y = lesson::draw_swatches(d, 30, 40,
                                   {{kGemm, "GEMM (compute row)"},
                                    {kComm, "all-reduce in flight (link row)"},
                                    {kWait, "compute stands still"}});
  // Where the step ends, and how long it took.
  auto step_end = [&](double y0, double end) {
    const double x = left + end * scale;
    d.line(x, y0 - 4, x, y0 + 2 * h + 8, "#444", true);
    d.text(x + 6, y0 + 15, "step " + ms(end), "start", 11);
  };
  auto rows = [&](double y0, const std::string& name) {
    d.text(30, y0 - 8, name, "start", 13);
    d.text(left - 8, y0 + 15, "compute", "end", 11);
    d.text(left - 8, y0 + h + 19, "link", "end", 11);
  };

  // 1. Blocking: the collective starts when the GEMMs end, and compute waits all of it.
  y += 24;
  rows(y, "Blocking (none): " + ms(gemm) + " of GEMMs, then " + ms(comm) + " of all-reduces");
  lesson::draw_bar(d, left, y, h, scale,
                   {{gemm, kGemm, "GEMMs " + ms(gemm)}, {comm, kWait, "waits " + ms(comm)}});
  d.box(left + gemm * scale, y + h + 4, comm * scale, h, kComm, "all-reduce " + ms(comm));
  step_end(y, gemm + comm);

  // 2. In k blocks: block i's all-reduce starts when its rows exist (and the link is free).
  y += 2 * h + 60;
  rows(y, "In " + std::to_string(k) +
              " row blocks (chunked): each block's all-reduce under the next block's GEMM");
  std::vector<lesson::BarPart> compute;
  double link_free = 0;
  for (int i = 0; i < k; ++i) {
    compute.push_back({gemm / k, kGemm, "GEMM " + std::to_string(i + 1)});
    const double start = std::max((i + 1) * gemm / k, link_free);
    d.box(left + start * scale, y + h + 4, comm / k * scale, h, kComm,
          "AR " + std::to_string(i + 1));
    link_free = start + comm / k;
  }
  const double exposed = std::max(0.0, link_free - gemm);
  compute.push_back({exposed, kWait, ""});
  lesson::draw_bar(d, left, y, h, scale, compute);
  step_end(y, gemm + exposed);
  // The hidden part: the link row's time under the GEMMs; the exposed part: after them.
  const double by = y + 2 * h + 26, first = gemm / k;
  d.line(left + first * scale, by - 6, left + first * scale, by);
  d.line(left + first * scale, by, left + gemm * scale, by);
  d.line(left + gemm * scale, by - 6, left + gemm * scale, by);
  d.text(left + (first + gemm) / 2 * scale, by + 14,
         "hidden: " + ms(comm - exposed) + " (" + pct(1 - exposed / comm) + ")", "middle", 11);
  d.line(left + link_free * scale, by - 6, left + link_free * scale, by, kWait);
  d.line(left + gemm * scale, by, left + link_free * scale, by, kWait);
  d.text(left + gemm * scale + 6, by + 14, "exposed: " + ms(exposed), "start", 11, kWait);

  lesson::draw_notes(
      d, by + 40,
      {"Durations: this run's step 4 without overlap (medians; the step's GEMMs drawn as one GEMM,",
       "its four all-reduces as one). The blocks are the model's best: no α per block, no cost for",
       "cutting the GEMM. Measured, chunked hid " + pct(measured_hidden) +
           ": each block pays α, and a short GEMM cannot cover a long all-reduce.",
       "The last block's all-reduce has no GEMM left to hide under: more blocks, less exposed."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_11_overlap",
      "Lesson 11: hiding the communication (none, async, ring; chunked without SP), simulated link",
      {2, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int t = L.size();
    GptConfig cfg;
    cfg.hidden = 512;
    cfg.heads = 8;
    cfg.seq = 64;
    cfg.ffn = 2048;
    cfg.sp = true;
    const int64_t tokens = cfg.seq * 4, h = cfg.hidden;
    const int steps = 5;

    // 1. The block on the real transport: what it communicates, and what that costs here.
    L.step("One block (h = 512, 8 heads, S·B = 64·4 tokens, SP) at t = " + std::to_string(t) +
           ", on this machine's own transport.");
    Run real;
    run_block(dev, world, cfg, Overlap::None, steps, real);
    const size_t per_step = real.records;  // the collectives of one forward + backward
    int64_t wire = 0, messages = 0;
    for (size_t i = real.first; i < real.first + per_step; ++i) {
      const CommRecord& r = world.ledger().records()[i];
      wire += static_cast<int64_t>(r.wire_bytes);
      messages += ring_steps(r.op, t);
    }
    L.say("  per forward + backward: ", per_step, " collectives of S·B·h = ", tokens * h,
          " floats or their shards; ", wire, " B sent per rank (ring model), in ", messages,
          " ring messages");
    L.check_fact("collectives per forward + backward (4 forward, 6 backward)",
                 {static_cast<float>(per_step)}, {10});
    L.say("  step ", ms(real.step), ", of which GEMMs ", ms(real.gemm), " and communication ",
          ms(real.comm), " (", pct(real.comm / real.step),
          "): shared memory is fast, there is little to hide.");

    // 2. A link slow enough that communication ≈ the compute it could hide behind. A ring of t
    // blocks overlaps each transfer with one block's GEMMs, t − 1 of its t: that much compute is
    // "overlappable", and the link is sized to it.
    L.step("A simulated link sized by the α–β model: communication ≈ the GEMMs a ring overlaps.");
    const double overlappable = real.gemm * (t - 1) / t;
    AlphaBeta ab;
    ab.alpha = 5e-6;
    ab.beta = static_cast<double>(wire) / std::max(overlappable - messages * ab.alpha, 1e-4);
    Link link{"lesson", ab};
    SimulatedLink slow(world.split(0, world.rank()), link);
    L.say("  ", slow.name(), ":  ", messages, " × α + ", wire,
          " B / β = ", ms(messages * ab.alpha + wire / ab.beta), " ≈ (t − 1)/t of the GEMMs' ",
          ms(real.gemm));
    L.say("  (simulated: each collective lasts at least steps·α + bytes/β, sleeping meanwhile)");

    // 3. Three ways to run the block over that link.
    L.step("none, async, ring over the simulated link: the same numbers, different waiting.");
    Run runs[3];
    const Overlap modes[] = {Overlap::None, Overlap::Async, Overlap::Ring};
    for (int i = 0; i < 3; ++i) run_block(dev, slow, cfg, modes[i], steps, runs[i]);
    const Run& serial = runs[0];
    // The same block on one device (t = 1, no link): what every mode must reproduce. y and dx
    // are this rank's tokens under SP, rows [r·S·B/t, (r+1)·S·B/t) of the one-device result.
    SerialCommunicator solo;
    Run one;
    run_block(dev, solo, cfg, Overlap::None, 0, one);
    auto my_rows = [&](const std::vector<float>& whole) {
      return lesson::per_rank(t, [&](int i) {
        const size_t n = whole.size() / t;
        return std::vector<float>(whole.begin() + i * n, whole.begin() + (i + 1) * n);
      });
    };
    for (int i = 0; i < 3; ++i) {
      const std::string mode = overlap_name(modes[i]);
      const Run& r = runs[i];
      L.check_ranks(mode + ": y, my tokens",
                    Tensor::from_host(dev, Shape{static_cast<int64_t>(r.y.size())}, r.y),
                    my_rows(one.y), 1e-5);
      L.check_ranks(mode + ": dx, my tokens",
                    Tensor::from_host(dev, Shape{static_cast<int64_t>(r.dx.size())}, r.dx),
                    my_rows(one.dx), 1e-5);
      L.check(mode + ": every parameter gradient", r.grads, one.grads, 1e-5);
    }
    // async only starts the backward reductions earlier. At t = 2 each reduction adds two numbers,
    // the same in either order, so async equals none bit for bit; at t > 2 a nonblocking
    // reduce-scatter may add in another order than the blocking one: equal to float rounding.
    if (t == 2) {
      L.check_true(
          "async: y, dx and every gradient = none, bit for bit",
          runs[1].y == serial.y && runs[1].dx == serial.dx && runs[1].grads == serial.grads);
    } else {
      L.check_fact("async: y = none", runs[1].y, serial.y, 1e-6);
      L.check_fact("async: dx = none", runs[1].dx, serial.dx, 1e-6);
      L.check_fact("async: every gradient = none", runs[1].grads, serial.grads, 1e-6);
    }
    L.check_fact("ring: y = none", runs[2].y, serial.y, 1e-6);
    L.check_fact("ring: dx = none", runs[2].dx, serial.dx, 1e-6);
    L.check_fact("ring: every gradient = none", runs[2].grads, serial.grads, 1e-6);
    L.check_true("none over the link = none on the real transport (same numbers, only slower)",
                 serial.y == real.y && serial.grads == real.grads);
    L.say(
        "  every mode's y, dx and gradients equal one device's (t = 1, rtol 1e-5), and each other\n"
        "  (",
        t == 2 ? "async bit for bit, ring to 1e-6"
               : "async and ring to 1e-6: at t > 2 the reductions may add in another order",
        "), so what differs is only when the ranks wait.");

    const std::string prefix = L.options().get_text("svg");
    std::vector<std::string> columns = {"mode"};
    columns.insert(columns.end(), kModeColumns.begin(), kModeColumns.end());
    lesson::Table table(columns);
    for (int i = 0; i < 3; ++i) {
      table.add(mode_row(overlap_name(modes[i]), runs[i], serial));
      runs[i].timeline.gather(slow, dev);
      if (L.is_root() && !prefix.empty()) {
        runs[i].timeline.set_title(slow.name() + ", t = " + std::to_string(t) + ", --overlap " +
                                   overlap_name(modes[i]));
        runs[i].timeline.write_svg(prefix + overlap_name(modes[i]) + ".svg");
      }
    }
    L.say("  medians of ", steps,
          " steps on rank 0 (timings vary from run to run; simulated link):");
    L.say(table.str());
    if (!prefix.empty())
      L.say("  timelines: ", prefix, "none.svg, ", prefix, "async.svg, ", prefix, "ring.svg");
    L.say(
        "  exposed = the time the computing thread stood still for communication (blocking calls\n"
        "  and Work::wait); hidden = 1 − exposed / none's exposed: the share of the serial run's\n"
        "  communication that no longer stops compute. (An async collective's span runs from its\n"
        "  issue to the wait that sees it done, so its 'communication' includes the compute it\n"
        "  flew under.) compute = step − exposed; the floor is none's compute, the step with "
        "every\n"
        "  byte hidden: a mode's compute above it is what its blocks and copies cost.");

    // 4. Plain TP over the same link: g's and f's all-reduces, blocking or chunked.
    L.step("Without SP over the same link: none and chunked (each all-reduce in " +
           std::to_string(kChunkedBlocks) + " row blocks).");
    GptConfig plain_cfg = cfg;
    plain_cfg.sp = false;
    Run plain[2];
    const Overlap plain_modes[] = {Overlap::None, Overlap::Chunked};
    for (int i = 0; i < 2; ++i) run_block(dev, slow, plain_cfg, plain_modes[i], steps, plain[i]);
    for (int i = 0; i < 2; ++i) {
      const std::string mode = std::string(overlap_name(plain_modes[i])) + " (no SP)";
      L.check(mode + ": y", plain[i].y, one.y, 1e-5);
      L.check(mode + ": dx", plain[i].dx, one.dx, 1e-5);
      L.check(mode + ": every parameter gradient", plain[i].grads, one.grads, 1e-5);
    }
    // A row of a product is the same dot products in any block of rows, and each element's
    // all-reduce adds the same t numbers: chunked is none bit for bit where the BLAS rounds a row
    // the same whatever the block's size (OpenBLAS at these sizes; its small-matrix kernels do
    // not) and the MPI adds them in an order that does not move with the message's length (MPICH;
    // Open MPI's ring at t >= 3 does move it), so the check is to 1e-6, which holds either way.
    L.check_fact("chunked: y = none (no SP)", plain[1].y, plain[0].y, 1e-6);
    L.check_fact("chunked: dx = none (no SP)", plain[1].dx, plain[0].dx, 1e-6);
    L.check_fact("chunked: every gradient = none (no SP)", plain[1].grads, plain[0].grads, 1e-6);
    L.say("  per forward + backward: ", plain[0].records, " all-reduces of S·B·h floats (none), ",
          plain[1].records, " of a quarter of it each (chunked)");
    columns[0] = "mode (no SP)";
    lesson::Table plain_table(columns);
    for (int i = 0; i < 2; ++i) {
      plain_table.add(mode_row(overlap_name(plain_modes[i]), plain[i], plain[0]));
      plain[i].timeline.gather(slow, dev);
      if (L.is_root() && !prefix.empty()) {
        plain[i].timeline.set_title(slow.name() + ", t = " + std::to_string(t) + ", no SP, " +
                                    "--overlap " + overlap_name(plain_modes[i]));
        plain[i].timeline.write_svg(prefix + "nosp_" + overlap_name(plain_modes[i]) + ".svg");
      }
    }
    L.say("  medians of ", steps, " steps on rank 0 (hidden: against none without SP):");
    L.say(plain_table.str());
    if (!prefix.empty())
      L.say("  timelines: ", prefix, "nosp_none.svg, ", prefix, "nosp_chunked.svg");
    if (!prefix.empty()) {
      const double hidden = std::max(0.0, 1.0 - plain[1].exposed / plain[0].exposed);
      lesson::write_picture(L,
                            draw_idea(t, plain[0].gemm, plain[0].exposed, kChunkedBlocks, hidden),
                            prefix + "idea.svg");
    }
    L.say(
        "  Each block's all-reduce flies under the next block's GEMM; in backward the last dX\n"
        "  block's flies under the weight-gradient GEMMs. What stays exposed is forward's last\n"
        "  block of each all-reduce (nothing is left to compute under it), each block's α, and\n"
        "  whatever a block's all-reduce lasts beyond the next block's GEMM: at this link the\n"
        "  attention's output projection (h × h/t) computes in far less time than its all-reduce\n"
        "  takes, so forward hides little of that one; fc2 (four times the GEMM) hides most.");

    // 5. [A1]'s claim.
    L.step("Against [A1]: \"overlap cut the TP communication overhead by about 40 %\".");
    L.say(
        "  async can hide only backward's reductions and re-gathers, behind the weight-gradient\n"
        "  GEMMs: the forward's four collectives stay in the way, so it hides well under half.\n"
        "  The ring hides forward and backward alike; what stays exposed is the first block of\n"
        "  each ring (nothing to compute yet) and the last wait.");
    // Overlap hides at most min(comm, compute): the saving peaks at comm ≈ compute (the link
    // step 2 sized) and, as the link slows, stays at most the compute while comm grows. [A1]'s
    // "10 Gbps between A100s" is far past that point for this block.
    const double gemm_flops = 3.0 * 2.0 * static_cast<double>(tokens) *
                              (4.0 * h * h + 2.0 * h * static_cast<double>(cfg.ffn)) / t;
    const double gbe10 = static_cast<double>(wire) * 8.0 / 10e9, a100 = gemm_flops / kA100Flops;
    L.say(
        "  How much a real run hides depends on the link against the compute: overlap hides at\n"
        "  most min(comm, compute), the most when they are equal (the link of step 2) and a\n"
        "  falling share as the link slows. [A1]'s 10 Gbps between A100s: this block's ",
        fixed(static_cast<double>(wire) / 1e6, 1), " MB per rank\n  and step take ", ms(gbe10),
        " at 10 Gb/s, its GEMMs (", fixed(gemm_flops / 1e9, 2), " GFLOP per rank) ",
        fixed(a100 * 1e6, 0), " µs at ", fixed(kA100Flops / 1e12, 0),
        " TFLOP/s\n  (an A100's 312 bf16 peak at the third a small GEMM reaches): at most ",
        pct(a100 / gbe10),
        " of it can hide.\n  The regime this lesson simulates is TP at t = 8 over InfiniBand "
        "(lesson 16: 9.68 ms of\n  all-reduces against 6.57 ms of compute per layer); over "
        "NVLink little is exposed anyway.");
    L.say(
        "  Where [A1] goes wrong: it starts a column-parallel layer's all-gather and runs\n"
        "  \"LayerNorm or other work that does not need the whole Y\" meanwhile. In Megatron TP "
        "the\n"
        "  column outputs are not gathered at all; the collectives that block are g's all-reduce\n"
        "  (here its reduce-scatter) and, under SP, the all-gather before q, k, v and fc1, and "
        "the\n"
        "  LayerNorm after g needs g's result. What can run beside them is backward's\n"
        "  weight-gradient GEMMs (async) or the other blocks of the same GEMM (ring). [A3]'s\n"
        "  \"TP communication cannot be hidden\" holds for a blocking all-reduce whose result the\n"
        "  next operator needs; splitting the GEMM around it, as the ring does, hides most of it.");
      },
      [](Options& o) {
    o.text("svg", lesson::default_output("lesson_11_"),
           "prefix of the three timeline charts (<prefix>none.svg, …; default: in build/ when run "
           "from the repository, else in the folder it is run from); empty: none written");
  });
}
