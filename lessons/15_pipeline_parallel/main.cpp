// Lesson 15 — pipeline parallelism: four stages, eight micro-batches, AFAB then 1F1B.
//
// What it shows:
//   1. np 4 = pp 4: a GPT of 8 blocks cut into 4 stages of 2 blocks; stage 0 also holds the
//      embeddings, stage 3 ln_f, the head and the loss, and (tied head) a copy of wte whose
//      gradient is summed with stage 0's after backward.
//   2. AFAB (all forwards, then all backwards) on m = 8 micro-batches: each rank's schedule as it
//      ran, read from the timeline (one Phase span "F3" / "B3" per op), the measured bubble against
//      (N − 1)/(m + N − 1), and the activations each stage kept at once: the ledger against the
//      formula (m micro-batches in flight).
//   3. 1F1B (warm-up of N − s − 1 forwards, then one forward one backward, then the cool-down):
//      the same bubble, but stage s keeps at most N − s micro-batches.
//   4. Both steps equal one device: the loss, the gradient norm and every gradient of every stage
//      against a t = 1 step on the whole batch.
//   5. The timeline pictures (SVG), one per schedule, and the ideal schedules drawn from p and m
//      beside them (<prefix>ideal.svg); the Playbook's (p − 1)/m reconciled with (p − 1)/(m + p − 1).
//
// What is new since lesson 13: a third axis of the grid. lib/parallel/pipeline_parallel.h (the
// schedules, run_schedule), the Gpt's stage (StageLayout, forward_stage / backward_stage in
// lib/model/gpt.h) and train_step's pp branch (lib/model/train.h), which tp_train runs with --pp.
//
// Run:  make lessons && mpirun -np 4 build/bin/lesson_15_pipeline_parallel [--step] [--svg P]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "lesson.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/presets.h"
#include "model/train.h"
#include "observe/svg_diagram.h"
#include "observe/timeline.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/process_grid.h"
#include "sleeping_waits.h"

using namespace tp;

namespace {

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * v);
  return buf;
}

std::string ops_row(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const PipelineOp& op : ops) s += (s.empty() ? "" : " ") + op.label();
  return s;
}

// Bytes one micro-batch of N = seq · b tokens leaves on a stage outside its blocks (fp32): the
// ids on the first (N); on the last ln_f's input and statistics (N·h + 2N), the head's input
// (N·h) and the logits' gradient (N·V').
int64_t outside_blocks_bytes(const GptConfig& g, const StageLayout& s, int64_t tokens) {
  int64_t values = 0;
  if (s.embedding) values += tokens;
  if (s.head) values += 2 * tokens * g.hidden + 2 * tokens + tokens * g.padded_vocab(1);
  return 4 * values;
}

// This rank's gradients, in parameter order, padded with zeros to `length`.
std::vector<float> grads(const ParamList& params, size_t length) {
  std::vector<float> out;
  for (const Param& p : params) {
    const std::vector<float> g = p.grad.to_host();
    out.insert(out.end(), g.begin(), g.end());
  }
  out.resize(length, 0.0f);
  return out;
}

// The schedule as the formula assumes it: every forward 1 time unit, every backward 2, transfers
// free. Each stage runs schedule_ops in order; an op starts when the stage is free and its input
// is there (F(s, k) after F(s - 1, k), B(s, k) after B(s + 1, k)). Returns each stage's ops with
// their start and end.
std::vector<std::vector<PipelineRecord::Span>> ideal_schedule(Schedule sched, int n, int m) {
  std::vector<std::vector<PipelineOp>> order;
  for (int s = 0; s < n; ++s) order.push_back(schedule_ops(sched, n, s, m));
  std::vector<std::vector<PipelineRecord::Span>> out(static_cast<size_t>(n));
  std::map<std::pair<int, int>, double> done;  // (stage, ±(k + 1): + forward, − backward) → end
  for (bool placed = true; placed;) {
    placed = false;
    for (int s = 0; s < n; ++s) {
      auto& row = out[static_cast<size_t>(s)];
      if (row.size() == order[static_cast<size_t>(s)].size()) continue;
      const PipelineOp op = order[static_cast<size_t>(s)][row.size()];
      const int key = op.forward ? op.micro + 1 : -(op.micro + 1);
      const int from = op.forward ? s - 1 : s + 1;
      double ready = row.empty() ? 0.0 : row.back().end;
      if (from >= 0 && from < n) {
        const auto it = done.find({from, key});
        if (it == done.end()) continue;  // its input is not computed yet
        ready = std::max(ready, it->second);
      }
      row.push_back({op, ready, ready + (op.forward ? 1.0 : 2.0)});
      done[{s, key}] = row.back().end;
      placed = true;
    }
  }
  return out;
}

// The idle share of a schedule: 1 − Σ op time / (stages × the step), the step from 0 to the last
// op's end.
double idle_share(const std::vector<std::vector<PipelineRecord::Span>>& stages) {
  double busy = 0, step = 0;
  for (const auto& row : stages)
    for (const auto& op : row) {
      busy += op.end - op.start;
      step = std::max(step, op.end);
    }
  return 1.0 - busy / (step * static_cast<double>(stages.size()));
}

// The picture of both ideal schedules, one above the other: a row per stage, a box per op
// (forwards blue, backwards orange, the micro-batch's number in it), white where the stage idles.
void draw_ideal(const std::string& path, int n, int m) {
  const double unit = 14, row = 22, left = 70;
  SvgDiagram d(std::max(600.0, left + 3 * (m + n - 1) * unit + 20), 60,
               "Ideal schedules from p = " + std::to_string(n) +
                   " stages, m = " + std::to_string(m) + " micro-batches (F = 1 unit, B = 2)");
  double y = 50;
  for (Schedule sched : {Schedule::Afab, Schedule::OneFOneB}) {
    const auto stages = ideal_schedule(sched, n, m);
    d.text(left, y + 12,
           std::string(sched == Schedule::Afab ? "AFAB" : "1F1B") +
               ": bubble (white) = " + pct(idle_share(stages)) + " of each row",
           "start", 13);
    y += 20;
    for (int s = 0; s < n; ++s) {
      d.text(left - 8, y + row * s + 15, "stage " + std::to_string(s), "end");
      d.box(left, y + row * s, 3 * (m + n - 1) * unit, row - 4, "white");
      for (const auto& op : stages[static_cast<size_t>(s)])
        d.box(left + op.start * unit, y + row * s, (op.end - op.start) * unit, row - 4,
              op.op.forward ? "#9ecae1" : "#fdae6b", std::to_string(op.op.micro));
    }
    y += row * n + 14;
  }
  d.box(left, y, 14, 12, "#9ecae1");
  d.text(left + 20, y + 10, "forward of micro-batch k");
  d.box(left + 190, y, 14, 12, "#fdae6b");
  d.text(left + 210, y + 10, "backward of micro-batch k");
  d.write(path, "--svg " + path);
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_15_pipeline_parallel",
      "Lesson 15: pipeline parallelism, four stages and eight micro-batches, AFAB and 1F1B", {4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int N = L.size(), m = 8;
    const uint64_t seed = 15;
    // The charts are written last: a place they cannot go is found now, not after the lesson ran.
    const std::string prefix = L.options().get_text("svg");
    if (!prefix.empty())
      check_output_paths({{"--svg", prefix + "afab.svg"},
                          {"--svg", prefix + "1f1b.svg"},
                          {"--svg", prefix + "ideal.svg"}});

    // 1. The stages.
    L.step("The stages: np " + std::to_string(N) + " = pp " + std::to_string(N) +
           ", a GPT of 8 blocks cut into " + std::to_string(N) + " stages.");
    // The stages wait for their neighbours by sleeping (SleepingWaits): MPI's own waits spin for
    // 2 ms before they nap, longer than one op here, so on a 2-core machine four spinning ranks
    // would take the cores from the stage that computes and the bubble would be the scheduler's.
    lesson::SleepingWaits quiet(world.split(0, world.rank()));
    ProcessGrid grid(quiet, GridAxes{1, N}, L.node_of_rank());
    const GptConfig g = lesson_gpt(/*layers=*/8, /*hidden=*/128, /*vocab=*/64, /*seq=*/64);
    const int64_t B = 2 * m;  // 2 sequences per micro-batch
    const StageLayout stage = pipeline_stage_layout(grid, g);
    L.say("  model: ", g.str(), "; batch ", B, " sequences = m ", m, " micro-batches of ", B / m);
    {
      Gpt probe(dev, grid.tp(), g, stage);
      int64_t elements = 0;
      for (const Param& p : probe.params()) elements += p.value.numel();
      const Tensor info = Tensor::from_host(
          dev, Shape{5},
          {static_cast<float>(stage.first_layer), static_cast<float>(stage.end_layer),
           stage.embedding ? 1.0f : 0.0f, stage.head ? 1.0f : 0.0f, static_cast<float>(elements)});
      const auto all = L.gather(info);
      lesson::Table table({"stage (rank)", "blocks", "also holds", "parameter elements"});
      for (int s = 0; s < N && L.is_root(); ++s) {
        const auto& r = all[static_cast<size_t>(s)];
        std::string extra = r[2] > 0 ? "wte, wpe" : "";
        if (r[3] > 0)
          extra += std::string(extra.empty() ? "" : ", ") + "ln_f, head (wte copy), loss";
        table.add({std::to_string(s),
                   std::to_string(static_cast<int>(r[0])) + ".." +
                       std::to_string(static_cast<int>(r[1]) - 1),
                   extra.empty() ? "-" : extra, std::to_string(static_cast<int64_t>(r[4]))});
      }
      L.say(table.str());
      L.check_fact_ranks("stage s holds blocks [2s, 2s + 2), the ends the rest", info,
                         lesson::per_rank(
                             N,
                             [&](int s) {
        return std::vector<float>{2.0f * s, 2.0f * s + 2, s == 0 ? 1.0f : 0.0f,
                                  s == N - 1 ? 1.0f : 0.0f, all.empty() ? 0.0f : all[s][4]};
                             }),
                         0);
    }

    // The reference: one device, the whole batch at once.
    SerialCommunicator solo;
    ProcessGrid solo_grid(solo, 1);
    Gpt ref(dev, solo, g);
    ref.init(seed);
    AdamWParams hp;
    hp.lr = 1e-3f;
    AdamW ref_opt(dev, ref.params(), hp);
    const Batch batch = MarkovSource(g.vocab, seed).batch(0, B, g.seq);
    const StepResult want = train_step(solo_grid, dev, ref, ref_opt, batch, seed, 0, hp.lr, 0.0f);
    std::map<std::string, const Param*> ref_by_name;
    for (const Param& p : ref.params()) ref_by_name[p.name] = &p;

    for (Schedule sched : {Schedule::Afab, Schedule::OneFOneB}) {
      const std::string name = schedule_name(sched);
      // 2 / 3. One step of the schedule.
      L.step(sched == Schedule::Afab
                 ? "AFAB: all " + std::to_string(m) + " forwards, then all backwards."
                 : "1F1B: warm-up of N - s - 1 forwards, then one forward one backward, then the "
                   "cool-down.");
      Gpt model(dev, grid.tp(), g, stage);
      model.init(seed);
      AdamW opt(dev, model.params(), hp);
      StepOptions o;
      o.micro_batches = m;
      o.schedule = sched;
      PipelineRecord record;
      o.record = &record;
      // A warm-up step with lr 0 (the weights do not move), then the step that is shown.
      train_step(grid, dev, model, opt, batch, seed, 0, 0.0f, 0.0f, {}, o);
      Timeline timeline(world.rank());
      dev.set_timeline(&timeline);
      grid.pp().set_timeline(&timeline);
      const StepResult got = train_step(grid, dev, model, opt, batch, seed, 0, hp.lr, 0.0f, {}, o);
      dev.set_timeline(nullptr);
      grid.pp().set_timeline(nullptr);

      // The ledger: the most micro-batches and bytes this stage kept at once; one micro-batch's
      // bytes by the formula (blocks: lib/model/memory.h; the rest: outside_blocks_bytes).
      const int64_t tokens = g.seq * (B / m);
      const int64_t one =
          (stage.end_layer - stage.first_layer) * block_activation_bytes(g, g.seq, B / m, 1) +
          outside_blocks_bytes(g, stage, tokens);
      const int s = grid.pp_rank();
      // And the stage's own clock: its step from the barrier before the first op to the one
      // after the last (the same instants on every stage), and its idle share of that step.
      // Each stage's share is read on its own clock, so no clocks are compared across ranks.
      const Tensor mem = Tensor::from_host(
          dev, Shape{6},
          {static_cast<float>(record.peak_in_flight),
           static_cast<float>(in_flight_formula(sched, N, s, m)),
           static_cast<float>(record.peak_activation_bytes),
           static_cast<float>(in_flight_formula(sched, N, s, m) * one),
           static_cast<float>(record.seconds), static_cast<float>(record.bubble())});
      const auto mems = L.gather(mem);

      // What ran, from the timeline: every rank's Phase spans, in time order. The picture keeps
      // the ops and the collectives (the kernels inside the ops would make it megabytes): a
      // timeline of those spans, its origin moved to this instant.
      const double shift = timeline.now();
      Timeline ops(world.rank());
      for (Span sp : timeline.spans())
        if (sp.kind != SpanKind::Kernel) {
          sp.start -= shift;
          sp.end -= shift;
          ops.record(sp);
        }
      ops.gather(world, dev);
      std::vector<std::string> rows(static_cast<size_t>(N));
      for (const Span& sp : ops.spans())
        if (sp.kind == SpanKind::Phase) {
          std::string& r = rows[static_cast<size_t>(sp.rank)];
          r += (r.empty() ? "" : " ") + sp.name;
        }
      double bubble = 0, step = 0;
      if (L.is_root()) {
        lesson::Table table({"stage", "schedule as it ran (timeline)", "busy", "idle"});
        for (int r = 0; r < N; ++r) {
          const double seconds = mems[static_cast<size_t>(r)][4];
          const double idle = mems[static_cast<size_t>(r)][5];
          bubble += idle / N;
          step = std::max(step, seconds);
          char cell[64];  // a time on the row: the page check reads its shares as timings
          std::snprintf(cell, sizeof cell, "%.1f ms, %s", 1e3 * (1 - idle) * seconds,
                        pct(1 - idle).c_str());
          table.add({std::to_string(r), rows[static_cast<size_t>(r)], cell, pct(idle)});
          L.check_true(name + ": stage " + std::to_string(r) + " ran the schedule's ops in order",
                       rows[static_cast<size_t>(r)] == ops_row(schedule_ops(sched, N, r, m)));
        }
        L.say(table.str());
        char line[200];
        std::snprintf(line, sizeof line,
                      "  step %.1f ms (barrier to barrier); bubble (mean idle share) %s "
                      "measured, %s of (N - 1)/(m + N - 1) = %d/%d = %s",
                      1e3 * step, pct(bubble).c_str(), pct(bubble / bubble_formula(N, m)).c_str(),
                      N - 1, m + N - 1, pct(bubble_formula(N, m)).c_str());
        L.say(line);
        L.check_true(name + ": the measured bubble is a share of the step (0..1)",
                     bubble > 0.0 && bubble < 1.0);
        const double ideal = idle_share(ideal_schedule(sched, N, m));
        std::snprintf(line, sizeof line,
                      "  the ideal schedule (<prefix>ideal.svg: F = 1, B = 2, transfers free) "
                      "idles %s: the formula",
                      pct(ideal).c_str());
        L.say(line);
        L.check_true(name + ": the ideal schedule's idle share is (N - 1)/(m + N - 1)",
                     std::fabs(ideal - bubble_formula(N, m)) < 1e-12);
        lesson::Table mt({"stage", "micro-batches in flight (ledger)", "formula",
                          "activations kept (ledger)", "formula"});
        for (int r = 0; r < N; ++r) {
          const auto& v = mems[static_cast<size_t>(r)];
          mt.add({std::to_string(r), std::to_string(static_cast<int>(v[0])),
                  std::to_string(static_cast<int>(v[1])),
                  std::to_string(static_cast<int64_t>(v[2])) + " B",
                  std::to_string(static_cast<int64_t>(v[3])) + " B"});
        }
        L.say(mt.str());
      }
      L.check_fact_ranks(name + ": micro-batches kept at once = formula, bytes = formula",
                         Tensor::from_host(dev, Shape{2}, {mem.to_host()[0], mem.to_host()[2]}),
                         lesson::per_rank(
                             N,
                             [&](int r) {
        return mems.empty() ? std::vector<float>{} : std::vector<float>{mems[r][1], mems[r][3]};
                             }),
                         0);
      if (L.is_root() && !prefix.empty()) {
        ops.set_title(world.name() + ", pp " + std::to_string(N) + ", m " + std::to_string(m) +
                      ", --schedule " + name + " (ops and collectives)");
        ops.write_svg(prefix + name + ".svg");
        L.say("  timeline: ", prefix, name, ".svg");
      }

      // 4. Equal to one device: loss, norm, every gradient of every stage.
      L.check_ranks(name + ": loss (every rank)", Tensor::from_host(dev, Shape{1}, {got.loss}),
                    lesson::per_rank(N, [&](int) { return std::vector<float>{want.loss}; }), 1e-6);
      L.check_ranks(
          name + ": gradient norm (every rank)",
          Tensor::from_host(dev, Shape{1}, {static_cast<float>(got.grad_norm)}),
          lesson::per_rank(N, [&](int) { return std::vector<float>{float(want.grad_norm)}; }),
          1e-5);
      size_t length = 0;
      for (const Param& p : model.params()) length += static_cast<size_t>(p.grad.numel());
      Tensor len = Tensor::from_host(dev, Shape{1}, {static_cast<float>(length)});
      world.all_reduce(len, ReduceOp::Max);
      const size_t most = static_cast<size_t>(len.to_host()[0]);
      ParamList mine_ref;
      for (const Param& p : model.params()) mine_ref.push_back(*ref_by_name.at(p.name));
      const auto got_g = L.gather(
          Tensor::from_host(dev, Shape{static_cast<int64_t>(most)}, grads(model.params(), most)));
      const auto want_g = L.gather(
          Tensor::from_host(dev, Shape{static_cast<int64_t>(most)}, grads(mine_ref, most)));
      for (int r = 0; r < N && L.is_root(); ++r)
        L.check(name + ": every gradient of stage " + std::to_string(r),
                got_g[static_cast<size_t>(r)], want_g[static_cast<size_t>(r)], 1e-5);
      L.say("  loss ", got.loss, " (one device: ", want.loss, "), gradient norm ", got.grad_norm,
            " (one device: ", want.grad_norm, "); every gradient of every stage within 1e-5");
    }

    L.step("What the two schedules show.");
    if (L.is_root() && !prefix.empty()) {
      draw_ideal(prefix + "ideal.svg", N, m);
      L.say("  picture: ", prefix, "ideal.svg");
    }
    // The Ultra-Scale Playbook writes the bubble as (p − 1)/m: the same idle time, measured
    // against the ideal step (m slots) instead of the whole one (m + p − 1).
    const double playbook = static_cast<double>(N - 1) / m;
    char line[240];
    std::snprintf(
        line, sizeof line,
        "  The Playbook's bubble (p - 1)/m = %d/%d = %s is the same idle time against the\n"
        "  ideal step (m slots) instead of the whole one (m + p - 1 slots): %.3f / %.3f "
        "= %s.",
        N - 1, m, pct(playbook).c_str(), playbook, 1 + playbook,
        pct(playbook / (1 + playbook)).c_str());
    L.say(line);
    L.check_true("(p - 1)/m / (1 + (p - 1)/m) = (p - 1)/(m + p - 1)",
                 std::fabs(playbook / (1 + playbook) - bubble_formula(N, m)) < 1e-12);
    L.say(
        "  Both schedules leave the same bubble: each stage waits (N - 1) forward and backward\n"
        "  slots for the pipe to fill and drain, out of m + N - 1, so only more micro-batches\n"
        "  (or interleaved stages) shrink it. What 1F1B changes is memory: a stage frees a\n"
        "  micro-batch's activations as soon as its backward ran, so stage s keeps at most N - s\n"
        "  of them instead of all m. The stages wait for each other by sleeping (SleepingWaits),\n"
        "  so a waiting rank leaves its core to one that computes; what is left above the formula\n"
        "  is each hand-off's wake-up and, on a machine with fewer cores than ranks, the ops that\n"
        "  share a core.");
      },
      [](Options& o) {
    o.text(
        "svg", lesson::default_output("lesson_15_"),
        "prefix of the charts (<prefix>afab.svg, <prefix>1f1b.svg, <prefix>ideal.svg; default: in "
        "build/ when run from the repository, else in the folder it is run from); empty: none");
  });
}
