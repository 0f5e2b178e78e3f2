// test_pipeline_mpi.cpp — pipeline parallelism (lib/parallel/pipeline_parallel.h, the pp branch of
// tp::train_step in lib/model/train.h) against one device.
//
//   schedules      AFAB and 1F1B op lists for N = 4, m = 8 written out by hand; every micro-batch
//                  forward before its backward, each once; the micro-batches in flight from the
//                  op list equal in_flight_formula (m for AFAB, min(N − s, m) for 1F1B).
//   bad input      the one-line problems: more stages than blocks, 1F1B with m < N, a schedule
//                  name that does not exist, --pp-layers that do not sum to L (or not numbers).
//   one device     every (tp, dp, pp) with pp > 1 that np allows (np 2: pp 2; np 3: pp 3; np 4:
//                  pp 4, tp 2 × pp 2, pp 2 × dp 2), tied and untied, AFAB and 1F1B, with SP,
//                  dropout (m = 1) and full / selective recomputation where they combine: the
//                  first step's loss within a relative 1e-6 and every gradient (gathered over the
//                  stage's TP group) within a relative 1e-5 of train_step at t = 1 on the same
//                  global batch (the sums change order: the micro-batches, the TP split, the
//                  tied wte's two halves); every parameter of the t = 1 model is on some stage;
//                  then a 4-step loss curve (clipping active) within 1e-5 relative.
//   memory         the most micro-batches a stage kept at once and the bytes its ledger held
//                  equal the formula × one micro-batch's bytes, whose blocks equal
//                  block_activation_bytes (lib/model/memory.h) at the micro-batch size.
//   bf16           pp 2, tp 2 × pp 2, pp 2 × dp 2 in --precision bf16 against t = 1 bf16 (bounds
//                  and measurements at the test); the transfers count 2 B per element.
//   ZeRO-1         pp 2 × dp 2 with each stage's DP group sharding AdamW against plain pp × dp.
//   held-out loss  held_out_loss over the PP group (each batch forward through the stages) at
//                  every layout: t = 1's on the same weights within a relative 1e-6, the same on
//                  every rank, and in 2 forwards of half the sequences as in one.
//
// Collectives: every rank runs the same layouts in the same order; the t = 1 reference runs on a
// SerialCommunicator on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/evaluate.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/train.h"
#include "model_test_helpers.h"
#include "observe/timeline.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/process_grid.h"
#include "test_util.h"

using namespace tp;
using tp::testing::device;
using tp::testing::world;

namespace {

std::string row(const std::vector<PipelineOp>& ops) {
  std::string out;
  for (const PipelineOp& op : ops) out += (out.empty() ? "" : " ") + op.label();
  return out;
}

// The most micro-batches whose forward ran and whose backward has not, along the op list.
int max_in_flight(const std::vector<PipelineOp>& ops) {
  int now = 0, most = 0;
  for (const PipelineOp& op : ops) {
    now += op.forward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

std::string first_problem(const std::vector<std::string>& p) { return p.empty() ? "" : p[0]; }

// One pipeline layout and the model options it runs with.
struct Layout {
  int tp = 1, dp = 1, pp = 2;
  Schedule schedule = Schedule::Afab;
  int m = 2;
  bool tied = true, sp = false;
  float dropout = 0;
  std::string recompute = "none";
  std::string str() const {
    return "tp " + std::to_string(tp) + " x dp " + std::to_string(dp) + " x pp " +
           std::to_string(pp) + " " + schedule_name(schedule) + " m " + std::to_string(m) +
           (tied ? " tied" : " untied") + (sp ? " sp" : "") + (dropout > 0 ? " dropout" : "") +
           " recompute " + recompute;
  }
};

// Every layout np allows, with pp > 1.
std::vector<Layout> layouts(int np) {
  std::vector<Layout> out;
  auto add = [&](Layout l) { out.push_back(l); };
  if (np == 2 || np == 3) {
    const int n = np;
    add({1, 1, n, Schedule::Afab, n, true});
    add({1, 1, n, Schedule::OneFOneB, 2 * n, false});
    add({1, 1, n, Schedule::Afab, 1, true, false, 0.1f});           // dropout: m = 1
    add({1, 1, n, Schedule::OneFOneB, n, true, false, 0, "full"});  // recomputation
    add({1, 1, n, Schedule::OneFOneB, n, false, false, 0, "selective"});
  }
  if (np == 4) {
    add({1, 1, 4, Schedule::OneFOneB, 4, true});
    add({1, 1, 4, Schedule::Afab, 4, false});
    add({2, 1, 2, Schedule::OneFOneB, 2, true, true});  // SP
    add({2, 1, 2, Schedule::Afab, 2, false, false, 0, "full"});
    add({1, 2, 2, Schedule::OneFOneB, 2, true});
    add({1, 2, 2, Schedule::Afab, 2, false, false, 0, "selective"});
  }
  return out;
}

GptConfig pipeline_config(const Layout& l) {
  GptConfig g = tp::tiny_gpt(4);  // L = 4: pp 4 gives one block per stage
  g.tied = l.tied;
  g.sp = l.sp;
  g.dropout = l.dropout;
  g.recompute = parse_recompute(l.recompute);
  return g;
}

// The reference: the whole model on one rank, the whole batch at once.
struct Reference {
  SerialCommunicator solo;
  Gpt model;
  AdamW opt;
  Reference(const GptConfig& g, const AdamWParams& hp)
      : model(device(), solo, one_device(g)), opt(device(), model.params(), hp) {
    model.init(tp::testing::kSeed);
  }
  static GptConfig one_device(GptConfig g) {
    g.sp = false;
    return g;
  }
};

struct Stage {
  Gpt model;
  AdamW opt;
  Stage(ProcessGrid& grid, const GptConfig& g, const AdamWParams& hp)
      : model(device(), grid.tp(), g, pipeline_stage_layout(grid, g)),
        opt(device(), model.params(), hp) {
    model.init(tp::testing::kSeed);
  }
};

}  // namespace

TEST(PipelineSchedule, AfabAnd1f1bForFourStagesAndEightMicroBatches) {
  EXPECT_EQ(row(schedule_ops(Schedule::Afab, 4, 1, 8)),
            "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
  // 1F1B: warm-up N − s − 1 forwards, then one forward one backward, then the cool-down.
  EXPECT_EQ(row(schedule_ops(Schedule::OneFOneB, 4, 0, 8)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(row(schedule_ops(Schedule::OneFOneB, 4, 2, 8)),
            "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(row(schedule_ops(Schedule::OneFOneB, 4, 3, 8)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  for (Schedule sched : {Schedule::Afab, Schedule::OneFOneB})
    for (int n : {1, 2, 3, 4})
      for (int m = n; m <= 9; ++m)
        for (int s = 0; s < n; ++s) {
          const auto ops = schedule_ops(sched, n, s, m);
          ASSERT_EQ(ops.size(), 2u * m);
          std::vector<int> seen(static_cast<size_t>(m), 0);
          for (const PipelineOp& op : ops) {
            // +1 at the forward, +1 again at the backward: a backward before its forward fails.
            EXPECT_EQ(seen[op.micro], op.forward ? 0 : 1) << op.label();
            ++seen[op.micro];
          }
          EXPECT_EQ(max_in_flight(ops), in_flight_formula(sched, n, s, m))
              << schedule_name(sched) << " N " << n << " s " << s << " m " << m;
        }
  EXPECT_DOUBLE_EQ(bubble_formula(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_formula(1, 8), 0.0);
}

TEST(PipelineSchedule, StageSplitAndBadInputAreOneLineEach) {
  EXPECT_EQ(stage_layer_counts(8, 2), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(stage_layer_counts(7, 3), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(stage_layer_counts(8, 2, {3, 5}), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(parse_pp_layers("3,5"), (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(parse_pp_layers("").empty());
  for (const char* bad : {"3,", "x", "3;5", "-1,2"}) {
    try {
      parse_pp_layers(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << bad;
      EXPECT_NE(std::string(e.what()).find("--pp-layers"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(pipeline_problems(8, 2, 2, Schedule::OneFOneB).empty());
  EXPECT_TRUE(pipeline_problems(8, 2, 1, Schedule::Afab).empty());
  EXPECT_NE(first_problem(pipeline_problems(2, 4, 4, Schedule::Afab)).find("at least one block"),
            std::string::npos);
  EXPECT_NE(first_problem(pipeline_problems(8, 4, 3, Schedule::OneFOneB)).find("m >= N"),
            std::string::npos);
  EXPECT_NE(first_problem(pipeline_problems(8, 2, 2, Schedule::Afab, {3, 4})).find("sum to 8"),
            std::string::npos);
  EXPECT_NE(first_problem(pipeline_problems(8, 2, 2, Schedule::Afab, {8, 0})).find("sum to 8"),
            std::string::npos);
  for (const auto& p : pipeline_problems(2, 4, 3, Schedule::OneFOneB, {1, 1}))
    EXPECT_EQ(p.find('\n'), std::string::npos) << p;
  try {
    parse_schedule("gpipe");
    ADD_FAILURE() << "gpipe was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("afab or 1f1b"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::OneFOneB);
  EXPECT_STREQ(schedule_name(parse_schedule("afab")), "afab");
}

TEST(PipelineParallel, StepEqualsOneDeviceForEveryLayout) {
  const int np = world().size();
  const std::vector<Layout> all = layouts(np);
  if (all.empty()) GTEST_SKIP() << "no pipeline layout at np " << np;
  for (const Layout& l : all) {
    SCOPED_TRACE(l.str());
    ProcessGrid grid(world(), GridAxes{l.dp, l.pp});
    ASSERT_EQ(grid.tp_size(), l.tp);
    const GptConfig g = pipeline_config(l);
    AdamWParams hp;
    hp.lr = 1e-2f;
    Reference ref(g, hp);
    Stage st(grid, g, hp);
    const int64_t B = 4 * l.dp * l.m / (l.m > 1 ? 2 : 1);  // divisible by dp · m
    const Batch b = tp::testing::markov_batch(g.vocab, 0, B, g.seq);
    StepOptions opts;
    opts.micro_batches = l.m;
    opts.schedule = l.schedule;
    PipelineRecord record;
    opts.record = &record;
    ProcessGrid solo_grid(ref.solo, 1);
    const StepResult want =
        train_step(solo_grid, device(), ref.model, ref.opt, b, tp::testing::kSeed, 0, hp.lr, 0.0f);
    const StepResult got = train_step(grid, device(), st.model, st.opt, b, tp::testing::kSeed, 0,
                                      hp.lr, 0.0f, {}, opts);
    EXPECT_LE(std::fabs(got.loss - want.loss), 1e-6 * std::fabs(want.loss));
    EXPECT_LE(std::fabs(got.grad_norm - want.grad_norm), 1e-5 * want.grad_norm);

    // Every gradient of this stage (gathered over its TP group) against t = 1's. Replicas of one
    // stage hold the same (averaged) gradients.
    std::map<std::string, const Param*> by_name;
    for (const Param& p : ref.model.params()) by_name[p.name] = &p;
    int64_t mine = 0;
    for (const Param& p : st.model.params()) {
      const std::vector<float> have = gather_real(grid.tp(), p, p.grad);  // collective
      const auto it = by_name.find(p.name);
      if (it == by_name.end()) {
        ADD_FAILURE() << p.name << " has no t = 1 counterpart";
        continue;
      }
      // The last stage's copy of a tied wte is the first stage's: counted once.
      const bool copy = g.tied && grid.pp_rank() == l.pp - 1 && p.name == "transformer.wte.weight";
      mine += copy ? 0 : 1;
      const std::vector<float> w = it->second->grad.to_host();
      if (tp::testing::is_key_bias(p.name)) continue;  // zero up to fp32 noise on both sides
      EXPECT_GT(tp::testing::norm2(w), 0.0) << p.name;
      EXPECT_LE(rel_error(have, w), tp::testing::kTol) << p.name;
    }
    // Every parameter of the t = 1 model lives on exactly one stage (wte: the first).
    Tensor count = Tensor::from_host(device(), Shape{1}, {static_cast<float>(mine)});
    grid.pp().all_reduce(count);
    EXPECT_EQ(static_cast<size_t>(count.to_host()[0]), ref.model.params().size());

    // Memory: the formula's micro-batches in flight, each one micro-batch's bytes.
    const int s = grid.pp_rank();
    EXPECT_EQ(record.peak_in_flight, in_flight_formula(l.schedule, l.pp, s, l.m));
    EXPECT_EQ(row(schedule_ops(l.schedule, l.pp, s, l.m)), record.row());
    EXPECT_GE(record.bubble(), 0.0);
    EXPECT_LT(record.bubble(), 1.0);
    const int64_t micro = B / l.dp / l.m;
    Batch one = batch_slice(b, 0, micro);
    const Tensor input = Tensor::zeros(
        device(), Shape{g.seq * micro / (g.sp ? l.tp : 1), g.hidden});  // any values will do
    float loss = 0;
    st.model.forward_stage(one, input, tp::testing::kSeed, 0, &loss);
    const StageLayout& layout = st.model.stage();
    for (int64_t blk = layout.first_layer; blk < layout.end_layer; ++blk)
      EXPECT_EQ(st.model.memory().layer_bytes(blk), block_activation_bytes(g, g.seq, micro, l.tp))
          << "block " << blk;
    EXPECT_EQ(record.peak_activation_bytes,
              in_flight_formula(l.schedule, l.pp, s, l.m) * st.model.memory().total_bytes());
    st.model.take_activations();  // dropped

    // A few steps more, clipping active: the same loss curve.
    for (int64_t step = 1; step < 4; ++step) {
      const Batch bs = tp::testing::markov_batch(g.vocab, step, B, g.seq);
      const StepResult w = train_step(solo_grid, device(), ref.model, ref.opt, bs,
                                      tp::testing::kSeed, step, hp.lr, 0.5f);
      const StepResult h = train_step(grid, device(), st.model, st.opt, bs, tp::testing::kSeed,
                                      step, hp.lr, 0.5f, {}, opts);
      EXPECT_LE(std::fabs(h.loss - w.loss), 1e-5 * std::fabs(w.loss)) << "step " << step;
      EXPECT_LE(std::fabs(h.grad_norm - w.grad_norm), 1e-5 * w.grad_norm) << "step " << step;
    }
  }
}

TEST(PipelineParallel, TrainStepRefusesWhatDoesNotCombine) {
  const int np = world().size();
  if (np != 2 && np != 4) GTEST_SKIP() << "needs np 2 or 4 (pp 2)";
  ProcessGrid grid(world(), GridAxes{np / 2, 2});
  GptConfig g = tp::tiny_gpt(2);
  AdamWParams hp;
  Stage st(grid, g, hp);
  const Batch b = tp::testing::markov_batch(g.vocab, 0, 4 * grid.dp_size(), g.seq);
  auto refused = [&](StepOptions o, const std::string& phrase) {
    try {
      train_step(grid, device(), st.model, st.opt, b, 1, 0, 1e-3f, 1.0f, {}, o);
      ADD_FAILURE() << phrase << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  StepOptions one_f;
  one_f.schedule = Schedule::OneFOneB;
  one_f.micro_batches = 1;
  refused(one_f, "m >= N");
}

TEST(PipelineParallel, TimelineLabelsEachMicroBatchsForwardAndBackward) {
  const int np = world().size();
  if (np != 2 && np != 4) GTEST_SKIP() << "needs np 2 or 4 (pp 2)";
  ProcessGrid grid(world(), GridAxes{1, 2});
  const GptConfig g = tp::tiny_gpt(2);
  AdamWParams hp;
  Stage st(grid, g, hp);
  StepOptions opts;
  opts.micro_batches = 4;
  opts.schedule = Schedule::OneFOneB;
  Timeline timeline(world().rank());
  device().set_timeline(&timeline);
  train_step(grid, device(), st.model, st.opt, tp::testing::markov_batch(g.vocab, 0, 4, g.seq), 1,
             0, 1e-3f, 1.0f, {}, opts);
  device().set_timeline(nullptr);
  std::vector<PipelineOp> want = schedule_ops(Schedule::OneFOneB, 2, grid.pp_rank(), 4);
  std::string phases;
  int kernels_inside = 0;
  const std::vector<Span> spans = timeline.spans();
  for (const Span& s : spans)
    if (s.kind == SpanKind::Phase) {
      phases += (phases.empty() ? "" : " ") + s.name;
      EXPECT_STREQ(s.track(), "pipeline");
      for (const Span& k : spans)
        kernels_inside += k.kind == SpanKind::Kernel && k.start >= s.start && k.end <= s.end;
    }
  EXPECT_EQ(phases, row(want));
  EXPECT_GT(kernels_inside, 8) << "the ops' kernels lie inside their Phase spans";
  // Phase spans count in no total: compute is the kernels' sum alone.
  double kernels = 0;
  for (const Span& k : spans) kernels += k.kind == SpanKind::Kernel ? k.seconds() : 0.0;
  EXPECT_NEAR(timeline.totals_since(0).compute, kernels, 1e-12);
  EXPECT_NE(timeline.svg().find("<title>F0, "), std::string::npos);  // each op its own rectangle
}

// --precision bf16 on a pipeline (pp 2 at np 2; tp 2 × pp 2 and pp 2 × dp 2 at np 4) against the
// bf16 model at t = 1 run with the same micro-batches. A pipeline moves no sum: the activation a
// stage sends is the bf16 tensor one device would hand its next block, its gradient the bf16 dX
// one device would hand the block below. Only fp32 sums change order: the tied wte's two halves
// (one device adds head and lookup gradients per micro-batch, the pipeline sums each stage's over
// the micro-batches and then the two stages), the loss and the norm over the stages. So at pp
// alone the bound is fp32's reordering, 1e-6 (measured: untied bitwise, tied wte 2.4e-8, the loss
// bitwise over 3 steps at np 2). With tp 2 the TP
// sums round as in tests/model/test_precision_mpi.cpp, whose bound this test takes: kGradBound = 0.05 per
// gradient, kLossBound = u/4 on the loss (justified there from bf16's unit roundoff u = 2^−8).
// And what travels is bf16: every activation / gradient transfer on the PP group counts 2 B per
// element in the CommLedger, the tied embedding's gradient sum 4 B.
TEST(PipelineParallel, Bf16EqualsOneDeviceBf16) {
  constexpr double kU = 1.0 / 256;
  constexpr double kGradBound = 0.05, kLossBound = kU / 4;  // tests/model/test_precision_mpi.cpp
  const int np = world().size();
  if (np != 2 && np != 4) GTEST_SKIP() << "needs np 2 or 4 (pp 2)";
  std::vector<Layout> all;
  if (np == 2) {
    all.push_back({1, 1, 2, Schedule::OneFOneB, 2, true});
    all.push_back({1, 1, 2, Schedule::Afab, 2, false});
  } else {
    all.push_back({2, 1, 2, Schedule::OneFOneB, 2, true});
    all.push_back({2, 1, 2, Schedule::Afab, 2, true, true});  // SP
    all.push_back({1, 2, 2, Schedule::OneFOneB, 2, true});
  }
  for (const Layout& l : all) {
    SCOPED_TRACE(l.str() + " bf16");
    ProcessGrid grid(world(), GridAxes{l.dp, l.pp});
    GptConfig g = pipeline_config(l);
    g.precision = Precision::Bf16;
    AdamWParams hp;
    hp.lr = 1e-2f;
    Reference ref(g, hp);
    Stage st(grid, g, hp);
    const int64_t B = 4 * l.dp;
    StepOptions opts;
    opts.micro_batches = l.m;
    opts.schedule = l.schedule;
    StepOptions ref_opts;  // one device, the same micro-batches per replica... of the whole batch
    ref_opts.micro_batches = l.m * l.dp;
    ProcessGrid solo_grid(ref.solo, 1);
    double worst_grad = 0, worst_loss = 0;
    for (int64_t step = 0; step < 3; ++step) {
      const Batch b = tp::testing::markov_batch(g.vocab, step, B, g.seq);
      const size_t from = grid.pp().ledger().records().size();
      const StepResult want = train_step(solo_grid, device(), ref.model, ref.opt, b,
                                         tp::testing::kSeed, step, hp.lr, 0.0f, {}, ref_opts);
      const StepResult got = train_step(grid, device(), st.model, st.opt, b, tp::testing::kSeed,
                                        step, hp.lr, 0.0f, {}, opts);
      const double loss_err = std::fabs(got.loss - want.loss) / std::fabs(want.loss);
      worst_loss = std::max(worst_loss, loss_err);
      EXPECT_LE(loss_err, l.tp == 1 && l.dp == 1 ? 1e-6 : kLossBound) << "step " << step;
      if (step > 0) continue;
      // The first step's gradients, and what crossed between the stages.
      std::map<std::string, const Param*> by_name;
      for (const Param& p : ref.model.params()) by_name[p.name] = &p;
      for (const Param& p : st.model.params()) {
        EXPECT_EQ(p.grad.dtype(), Dtype::f32) << p.name << ": weight gradients stay fp32";
        const std::vector<float> have = gather_real(grid.tp(), p, p.grad);  // collective
        const auto it = by_name.find(p.name);
        ASSERT_NE(it, by_name.end()) << p.name;
        if (tp::testing::is_key_bias(p.name)) continue;
        const std::vector<float> w = it->second->grad.to_host();
        const double e = rel_error(have, w);
        worst_grad = std::max(worst_grad, e);
        EXPECT_LE(e, l.tp == 1 && l.dp == 1 ? 1e-6 : kGradBound) << p.name;
      }
      int transfers = 0, tied = 0;
      const auto& rec = grid.pp().ledger().records();
      for (size_t i = from; i < rec.size(); ++i) {
        if (rec[i].label.find("pipeline") != std::string::npos) {
          ++transfers;
          EXPECT_EQ(rec[i].bytes, 2 * rec[i].elements) << rec[i].label;
        } else if (rec[i].label.find("embedding_grads") != std::string::npos) {
          ++tied;
          EXPECT_EQ(rec[i].bytes, 4 * rec[i].elements) << rec[i].label;
        }
      }
      EXPECT_GE(transfers, l.m + 1);  // F0 up, B(m-1) down, the rest maybe as 1F1B's pairs
      EXPECT_EQ(tied, l.tied ? 1 : 0);
    }
    if (world().rank() == 0)
      std::printf("[ bf16 pp ] %s: worst gradient rel error %.3g, loss %.3g (3 steps)\n",
                  l.str().c_str(), worst_grad, worst_loss);
  }
}

// ZeRO-1 on a pipeline (pp 2 × dp 2 at np 4): each stage's DP group reduce-scatters that stage's
// gradients, steps its 1/dp of the moments and all-gathers its parameters; the norm is summed over
// the stages (the last stage's tied wte copy left out). Against plain pp 2 × dp 2 with the bounds
// of tests/model/test_memory_stack_mpi.cpp's Zero1: without clipping every sum has two terms in both (dp 2),
// so loss and weights are bitwise; with clipping (the norm enters the update) the norm within
// 1e-6 and the weights within 1e-5 relative. Both stages' wte copies stay bitwise equal.
TEST(PipelineParallel, Zero1EqualsPlainDataParallelOnEachStage) {
  if (world().size() != 4) GTEST_SKIP() << "needs np 4 (pp 2 x dp 2)";
  for (const float clip : {0.0f, 0.5f}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    ProcessGrid grid(world(), GridAxes{2, 2});
    const GptConfig g = tp::tiny_gpt(2);
    AdamWParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    Stage plain(grid, g, hp), zero(grid, g, hp);
    zero.opt.shard_over(grid.dp(), zero.model.params());
    StepOptions po, zo;
    po.micro_batches = zo.micro_batches = 2;
    po.schedule = zo.schedule = Schedule::OneFOneB;
    zo.zero = 1;
    for (int64_t step = 0; step < 3; ++step) {
      const Batch b = tp::testing::markov_batch(g.vocab, step, 8, g.seq);
      const StepResult want = train_step(grid, device(), plain.model, plain.opt, b,
                                         tp::testing::kSeed, step, hp.lr, clip, {}, po);
      const size_t mark = grid.dp().ledger().records().size();
      const StepResult got = train_step(grid, device(), zero.model, zero.opt, b, tp::testing::kSeed,
                                        step, hp.lr, clip, {}, zo);
      const auto& recs = grid.dp().ledger().records();
      ASSERT_GE(recs.size() - mark, 2u);
      EXPECT_EQ(recs[mark].label, "zero_grads");
      EXPECT_EQ(recs.back().label, "zero_params");
      EXPECT_LE(std::fabs(got.grad_norm - want.grad_norm), 1e-6 * want.grad_norm) << step;
      if (clip == 0.0f) {
        EXPECT_EQ(got.loss, want.loss) << "step " << step;
      } else {
        EXPECT_LE(std::fabs(got.loss - want.loss), 1e-6 * std::fabs(want.loss)) << step;
        EXPECT_LT(want.clip, 1.0f) << "clipping must be active to test the norm";
      }
    }
    double worst = 0;
    for (size_t i = 0; i < plain.model.params().size(); ++i) {
      const std::vector<float> z = zero.model.params()[i].value.to_host(),
                               w = plain.model.params()[i].value.to_host();
      const double e = rel_error(z, w);
      worst = std::max(worst, e);
      EXPECT_LE(e, clip == 0.0f ? 0.0 : 1e-5) << zero.model.params()[i].name;
    }
    // The tied wte's two copies (first and last stage) took the same steps.
    const Tensor& wte = zero.model.params().front().value;
    ASSERT_EQ(zero.model.params().front().name, "transformer.wte.weight");
    Tensor theirs(device(), wte.shape());
    const int peer = 1 - grid.pp_rank();
    grid.pp().send_recv(wte, peer, theirs, peer);
    EXPECT_EQ(rel_error(wte.to_host(), theirs.to_host()), 0.0);
    if (world().rank() == 0)
      std::printf("[ zero pp ] clip %.1f: weights vs plain pp x dp, worst rel error %.3g\n", clip,
                  worst);
  }
}

TEST(PipelineParallel, HeldOutLossEqualsOneDeviceForEveryLayout) {
  if (layouts(world().size()).empty()) GTEST_SKIP() << "no pipeline layout at this np";
  for (const Layout& l : layouts(world().size())) {
    SCOPED_TRACE(l.str());
    const GptConfig g = pipeline_config(l);
    const MarkovSource src(g.vocab, 4);
    ProcessGrid grid(world(), GridAxes{l.dp, l.pp});
    Reference ref(g, AdamWParams{});
    Stage st(grid, g, AdamWParams{});
    const double want = held_out_loss(ref.model, src, 2, 4, g.seq, tp::testing::kSeed);
    for (const int micro : {1, 2}) {
      const EvalSlice slice{0, 0, micro};
      const double got =
          held_out_loss(st.model, grid.pp(), src, 2, 4, g.seq, tp::testing::kSeed, slice);
      EXPECT_LE(std::fabs(got - want), 1e-6 * std::fabs(want)) << micro << " forward(s) a batch";
      // Every rank has the last stage's number: the largest and the smallest over the world agree.
      Tensor v = Tensor::from_host(device(), Shape{2},
                                   {static_cast<float>(got), static_cast<float>(-got)});
      world().all_reduce(v, ReduceOp::Max);
      EXPECT_EQ(v.to_host()[0], -v.to_host()[1]) << "ranks disagree on the held-out loss";
    }
  }
}
