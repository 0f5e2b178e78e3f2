// test_context_parallel_mpi.cpp — context parallelism (--cp) in the model and the training step
// against one device: the process grid's CP axis, and train_step on a tp × cp (× dp, × pp) grid
// against t = 1 on the same global batch — the loss and gradient norm of every step, every
// gradient and every weight after 3 steps — in both layouts, with GQA, dropout (keyed by global
// rows, so the masks are one device's), SP and bf16; a ring whose merge drops the log-sum-exp
// weights must fail it. Runs under mpirun -np 1 … 4 (np 1: cp 1, the plain model).
//
// Tolerances (relative): fp32 1e-5 for the loss and the norm of 3 steps, the first step's
// gradients and the weights after 3 steps (the ring's merge and the CP average add in another
// order, as DP's does; the key biases, zero up to noise, left out); bf16 1 % of the loss and 5e-2
// for the first step's gradients (the TP bf16 tests' bounds, test_precision_mpi.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "expect_bad_input.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model/train.h"
#include "model_test_helpers.h"
#include "parallel/process_grid.h"
#include "parallel/ring_attention.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::expect_bad_input;
using tp::testing::world;

// S = 24 splits into 2·cp chunks for cp = 1 … 4; GQA (4 query heads, 2 KV heads) splits at t 2.
GptConfig cp_gpt() {
  GptConfig c = gpt_shape(2, 24, 4, 2, 48, 32, 24);
  c.init_std = 0.1f;  // attention far from uniform
  return c;
}

struct Case {
  int cp = 1, dp = 1, pp = 1;
  CpLayout layout = CpLayout::Zigzag;
  bool sp = false;
  float dropout = 0.0f;
  Precision precision = Precision::Fp32;
  std::string tag() const {
    return "cp " + std::to_string(cp) + " dp " + std::to_string(dp) + " pp " + std::to_string(pp) +
           " " + cp_layout_name(layout) + (sp ? " sp" : "") + (dropout > 0 ? " dropout" : "") +
           (precision == Precision::Bf16 ? " bf16" : "");
  }
};

struct Outcome {
  double loss = 0, norm = 0;  // the largest over 3 steps
  double grads = 0;           // the first step's gradients
  double values = 0;          // the weights after 3 steps
};

// The key biases' gradients are zero in exact arithmetic (the softmax ignores a constant per row),
// so both sides hold rounding noise there, which AdamW scales up to steps of lr: left out of the
// comparisons, as the TP tests do (model_test_helpers.h, is_key_bias). (A pipeline stage holds part
// of the parameters: with pp the runs are compared through the loss and the norm.)
ParamList without_key_bias(const ParamList& all) {
  ParamList kept;
  for (const Param& p : all)
    if (!tp::testing::is_key_bias(p.name)) kept.push_back(p);
  return kept;
}
double grads_error(ProcessGrid& grid, Gpt& model, Gpt& one) {
  SerialCommunicator solo;
  return rel_error(gathered(grid.tp(), without_key_bias(model.params()), ParamField::Grad),
                   gathered(solo, without_key_bias(one.params()), ParamField::Grad));
}
double values_error(ProcessGrid& grid, Gpt& model, Gpt& one) {
  SerialCommunicator solo;
  return rel_error(gathered(grid.tp(), without_key_bias(model.params()), ParamField::Value),
                   gathered(solo, without_key_bias(one.params()), ParamField::Value));
}

// 3 steps of `c` on the world against t = 1 on a serial communicator: the largest relative
// differences (the same on every rank after the all-reduces).
Outcome train_against_one(const Case& c) {
  ProcessGrid grid(world(), GridAxes{c.dp, c.pp, c.cp});
  SerialCommunicator solo;
  ProcessGrid one_grid(solo, 1);
  GptConfig g = cp_gpt(), g1 = cp_gpt();
  g.sp = c.sp && grid.tp_size() > 1;
  g.dropout = g1.dropout = c.dropout;
  g.precision = g1.precision = c.precision;
  Gpt model(device(), grid.tp(), g, pipeline_stage_layout(grid, g)), one(device(), solo, g1);
  model.set_context_parallel(grid.cp(), c.layout);
  model.init(7);
  one.init(7);
  AdamWParams hp;
  hp.lr = 1e-2f;
  AdamW opt(device(), model.params(), hp), one_opt(device(), one.params(), hp);
  MarkovSource data(g.vocab, 7);
  const int64_t B = 2 * c.dp;
  StepOptions so;
  so.micro_batches = c.pp > 1 ? 2 : 1;
  Outcome o;
  for (int64_t s = 0; s < 3; ++s) {
    const Batch b = data.batch(s, B, g.seq);
    const StepResult a = train_step(grid, device(), model, opt, b, 7, s, hp.lr, 0.5f, {}, so);
    const StepResult r = train_step(one_grid, device(), one, one_opt, b, 7, s, hp.lr, 0.5f, {}, so);
    o.loss = std::max(o.loss, std::fabs(double{a.loss} - r.loss) / std::fabs(double{r.loss}));
    o.norm = std::max(o.norm, std::fabs(a.grad_norm - r.grad_norm) / r.grad_norm);
    if (s == 0 && c.pp == 1) o.grads = grads_error(grid, model, one);  // the first step's
  }
  if (c.pp == 1) o.values = values_error(grid, model, one);  // after 3 steps
  return o;
}

// The cases this np runs: cp = np alone; at np 4 also tp 2 × cp 2 (with SP), cp 2 × dp 2 and
// cp 2 × pp 2.
std::vector<Case> cases_for(int np) {
  std::vector<Case> v;
  for (CpLayout l : {CpLayout::Zigzag, CpLayout::Contiguous}) {
    Case c;
    c.cp = np;
    c.layout = l;
    v.push_back(c);
  }
  Case drop;
  drop.cp = np;
  drop.dropout = 0.1f;
  v.push_back(drop);
  if (np == 4) {
    Case tp2;
    tp2.cp = 2;
    v.push_back(tp2);
    tp2.sp = true;
    v.push_back(tp2);
    Case dp2;
    dp2.cp = 2;
    dp2.dp = 2;
    v.push_back(dp2);
    Case pp2;
    pp2.cp = 2;
    pp2.pp = 2;
    v.push_back(pp2);
  }
  return v;
}

TEST(ContextParallel, TrainsLikeOneDeviceOnTheSameBatch) {
  for (const Case& c : cases_for(world().size())) {
    const Outcome o = train_against_one(c);
    EXPECT_LE(o.loss, 1e-5) << c.tag();
    EXPECT_LE(o.norm, 1e-5) << c.tag();
    EXPECT_LE(o.grads, 1e-5) << c.tag();
    EXPECT_LE(o.values, 1e-5) << c.tag();
  }
}

TEST(ContextParallel, Bf16TracksOneDeviceBf16) {
  Case c;
  c.cp = world().size() == 4 ? 2 : world().size();
  c.sp = world().size() == 4;
  c.precision = Precision::Bf16;
  const Outcome o = train_against_one(c);
  EXPECT_LE(o.loss, 1e-2) << c.tag();
  EXPECT_LE(o.grads, 5e-2) << c.tag();
}

// The same check fails when the ring adds the partial outputs without their LSE weights.
TEST(ContextParallel, ABrokenMergeFailsTheCheck) {
  if (world().size() == 1) GTEST_SKIP() << "no ring at cp = 1";
  Case c;
  c.cp = world().size();
  RingAttention::set_broken_merge_for_test(true);
  const Outcome o = train_against_one(c);
  RingAttention::set_broken_merge_for_test(false);
  EXPECT_GT(o.loss, 1e-3) << c.tag();
  EXPECT_GT(o.grads, 1e-2) << c.tag();
}

TEST(ContextParallel, GridPutsCpNextToTp) {
  const int np = world().size();
  if (np != 4) GTEST_SKIP() << "needs np 4";
  ProcessGrid grid(world(), GridAxes{1, 1, 2});  // tp 2 × cp 2
  EXPECT_EQ(grid.tp_size(), 2);
  EXPECT_EQ(grid.cp_size(), 2);
  EXPECT_EQ(grid.tp_group(0, 0, 1), (std::vector<int>{2, 3}));
  EXPECT_EQ(grid.cp_group(1, 0, 0), (std::vector<int>{1, 3}));
  EXPECT_EQ(grid.cp().size(), 2);
  EXPECT_EQ(grid.cp_rank(), world().rank() / 2);
  EXPECT_NE(grid.describe().find("CP groups {0, 2} {1, 3}"), std::string::npos) << grid.describe();
  EXPECT_EQ(ProcessGrid::problems(4, 1, 1, 3).size(), 1u);
  EXPECT_EQ(ProcessGrid::problems(4, 1, 1, 0).size(), 1u);
}

TEST(ContextParallel, ASequenceThatDoesNotSplitIsBadInput) {
  if (world().size() == 1) GTEST_SKIP() << "cp 1 splits every sequence";
  ProcessGrid grid(world(), GridAxes{1, 1, world().size()});
  Gpt model(device(), grid.tp(), cp_gpt());
  model.set_context_parallel(grid.cp(), CpLayout::Zigzag);
  model.init(7);
  MarkovSource data(32, 7);
  const int64_t odd = 2 * world().size() + 1;
  expect_bad_input([&] { model.forward(data.batch(0, 2, odd), 7, 0); }, "is not divisible by",
                   "seq " + std::to_string(odd));
}

}  // namespace
